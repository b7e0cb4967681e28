"""Reporter: bad inputs are named with a reason, the rest is still reported, the exit status says so."""
import os

import numpy as np
import pytest

from mlperf_keras.reporting import example_logs as ex
from mlperf_keras.reporting.build import NothingToReport, build_report
from mlperf_keras.reporting.submission import OutputNotOurs
from tests.conftest import run_cli


def write(folder, name, **fields):
    return ex.write_log(os.path.join(str(folder), name), ex.ExampleRun(**fields))


def make_bad_folder(root):
    """Three good runs plus one of each kind of bad input; returns (logs folder, empty folder)."""
    logs = root / "logs"
    for seed in (1, 2, 3):
        write(logs, f"good_seed{seed}.log", benchmark="ncf", seed=seed, start_s=1.7e9 + seed * 1000)
    # Truncated: cut in the middle of a line, before run_stop.
    full = write(logs, "truncated.log", benchmark="ncf", seed=4, start_s=1.7e9 + 4000)
    text = open(full).read()
    with open(full, "w") as handle:
        handle.write(text[: int(len(text) * 0.9)])
    write(logs, "no_run_stop.log", benchmark="ncf", seed=5, include_run_stop=False, start_s=1.7e9 + 5000)
    write(logs, "unknown_benchmark.log", benchmark="ncf", seed=6, start_s=1.7e9 + 6000)
    unknown = os.path.join(str(logs), "unknown_benchmark.log")
    with open(unknown) as handle:
        text = handle.read().replace('"value": "ncf"', '"value": "minigo"')
    with open(unknown, "w") as handle:
        handle.write(text)
    write(logs, "same_seed_again.log", benchmark="ncf", seed=2, start_s=1.7e9 + 7000)
    (logs / "random_bytes.log").write_bytes(np.random.default_rng(0).bytes(4096))
    empty = root / "empty"
    empty.mkdir()
    return str(logs), str(empty)


def test_each_bad_input_is_named_with_its_reason_and_the_rest_reported(tmp_path):
    logs, empty = make_bad_folder(tmp_path)
    report = build_report([logs, empty], str(tmp_path / "out"), draw_charts=False)
    reasons = {os.path.basename(p.path): p.reason for p in report.skipped}
    assert "truncated log" in reasons["truncated.log"] and "no run_stop" in reasons["truncated.log"]
    assert "no run_stop" in reasons["no_run_stop.log"]
    assert "unknown benchmark 'minigo'" in reasons["unknown_benchmark.log"]
    assert "seed 2 already used by good_seed2.log" in reasons["same_seed_again.log"]
    assert "no MLLOG log files" in reasons["empty"]
    assert "no MLPerf log line" in reasons["random_bytes.log"]
    assert sorted(r.seed for r in report.records) == [1, 2, 3]
    text = open(report.report_path).read()
    for name in ("truncated.log", "no_run_stop.log", "unknown_benchmark.log", "same_seed_again.log",
                 "random_bytes.log"):
        assert name in text


def test_cli_exit_status_says_whether_anything_was_skipped(tmp_path):
    logs, empty = make_bad_folder(tmp_path)
    bad = run_cli("mlperf_keras.report", "--logs", logs, empty, "--out", str(tmp_path / "out"), "--nocharts",
                  timeout=120)
    assert bad.returncode == 1, bad.stderr
    assert "skipped:" in bad.stderr and "truncated.log" in bad.stderr and "empty" in bad.stderr
    assert os.path.exists(tmp_path / "out" / "report.md")
    # Exit 0 when nothing is skipped: see test_report_cli.py.


def test_no_log_at_all_writes_nothing_and_says_so_in_one_line(tmp_path):
    """Issue 32: an empty report.md and CSVs looked like a report of nothing; now nothing is written, exit 2."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.log").write_bytes(b"\x00\xff" * 100)
    with pytest.raises(NothingToReport, match="notes.log"):
        build_report([str(empty)], str(tmp_path / "in_process"), draw_charts=False)
    assert not (tmp_path / "in_process").exists()
    proc = run_cli("mlperf_keras.report", "--logs", str(empty), "--out", str(tmp_path / "out"), "--nocharts",
                   timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: no MLPerf log under"), proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_results_folder_we_did_not_write_is_not_replaced(tmp_path):
    logs = tmp_path / "logs"
    write(logs, "a.log", seed=1)
    foreign = tmp_path / "out" / "results" / "someone"
    foreign.mkdir(parents=True)
    with pytest.raises(OutputNotOurs, match="--overwrite"):   # report.py exits 2 with this message
        build_report([str(logs)], str(tmp_path / "out"), draw_charts=False)
    assert foreign.exists()
    # Our own results/ (marked) is regenerated without asking.
    build_report([str(logs)], str(tmp_path / "ours"), draw_charts=False)
    build_report([str(logs)], str(tmp_path / "ours"), draw_charts=False)
