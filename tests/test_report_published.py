"""Reporter on excerpts of real published MLPerf results (tests/data/report/published, see SOURCE.md there).

Each round's format (v0.5 ':::MLPv0.5.0', v0.6 ':::MLL', v0.7 ':::MLLOG' with time_ms or time_s), systems kept
apart by submission-layout folder, the right compliance ruleset per round, and scores equal to the official
`mlperf_logging.result_summarizer` where it runs (0.6.0 and 0.7.0; it has no v0.5 ruleset).
"""
import json
import os
import re
import shutil

import pandas as pd
import pytest
from mlperf_logging.result_summarizer import result_summarizer

from mlperf_keras.reporting import example_logs as ex
from mlperf_keras.reporting.build import build_report
from mlperf_keras.reporting.charts import distinct_colors
from mlperf_keras.reporting.parse import parse_log
from mlperf_keras.reporting.submission import SYSTEM_FIELDS

PUBLISHED = os.path.join(os.path.dirname(__file__), "data", "report", "published")
V07 = os.path.join(PUBLISHED, "training_results_v0.7")
V06 = os.path.join(PUBLISHED, "training_results_v0.6")
V05_SSD = os.path.join(PUBLISHED, "training_results_v0.5", "v0.5.0", "nvidia", "submission", "results",
                       "dgx1_ngc18.11_pytorch", "ssd")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("published_report")
    return build_report([PUBLISHED], str(out), draw_charts=False), str(out)


def _result(report, benchmark, system):
    matches = [r for r in report.results if r.benchmark == benchmark and r.system == system]
    assert len(matches) == 1, [(r.benchmark, r.system) for r in report.results]
    return matches[0]


def official_score(org_dir, system, benchmark, ruleset, tmp_path):
    """result_summarizer's score for one published system, in-process.

    The summarizer needs systems-JSON fields the v0.6/v0.7 files predate (number_of_nodes, hw_notes, ...) and
    crashes without them, so the copy gets a stand-in description with every field; its scores come from the
    result files only, which are copied unchanged. Division "open": its closed path also runs the RCP checker,
    which has no 0.6/0.7 reference data.
    """
    copy = os.path.join(str(tmp_path), os.path.basename(org_dir))
    shutil.copytree(os.path.join(org_dir, "results", system, benchmark),
                    os.path.join(copy, "results", system, benchmark))
    os.makedirs(os.path.join(copy, "systems"))
    fields = {name: "1" for name in SYSTEM_FIELDS}
    fields.update(division="open", status="onprem", submitter="x", system_name=system, hw_notes="", sw_notes="")
    with open(os.path.join(copy, "systems", f"{system}.json"), "w") as handle:
        json.dump(fields, handle)
    strong = result_summarizer.summarize_results(copy, "training", ruleset)[0]
    scores = strong[benchmark].dropna()
    assert len(scores) == 1, strong
    return float(scores.iloc[0])


def olympic_from_lines(folder, pattern, scale_to_minutes):
    """An independent reading of the fixture: run_start/run_stop times by regex, fastest and slowest dropped."""
    times = []
    for name in sorted(os.listdir(folder)):
        if not name.startswith("result_"):
            continue
        with open(os.path.join(folder, name)) as handle:
            text = handle.read()
        start = float(re.search(pattern.format(key="run_start"), text).group(1))
        stop = float(re.search(pattern.format(key="run_stop"), text).group(1))
        times.append((stop - start) * scale_to_minutes)
    times.sort()
    return sum(times[1:-1]) / (len(times) - 2)


def test_same_platform_string_two_submitters_kept_apart_and_equal_the_summarizer(report, tmp_path):
    built, _ = report
    dell = _result(built, "transformer", "DellEMC_C4140")
    tencent = _result(built, "transformer", "Tencent_GN10X-8xV100")
    # Both logged "1xSUBMISSION_PLATFORM_PLACEHOLDER": pooled, the Dell server showed 7.9 min instead of 35.4.
    assert {r.platform for r in dell.runs} == {r.platform for r in tencent.runs} == {"1xSUBMISSION_PLATFORM_PLACEHOLDER"}
    assert len(dell.runs) == len(tencent.runs) == 10
    assert dell.score_min == pytest.approx(official_score(V07 + "/DellEMC", "C4140", "transformer", "0.7.0",
                                                          tmp_path / "d"), rel=1e-12)
    assert tencent.score_min == pytest.approx(official_score(V07 + "/Tencent", "GN10X-8xV100", "transformer", "0.7.0",
                                                             tmp_path / "t"), rel=1e-12)
    assert dell.score_min == pytest.approx(35.383, abs=1e-3)   # the published 35.4 minutes
    # GPU counts from the systems JSON: C4140 spells "number of nodes" with spaces (1) x 4 per node.
    assert dell.runs[0].device_count == 4 and tencent.runs[0].device_count == 8
    assert "DellEMC/systems/C4140.json" in dell.runs[0].identified_by
    notes = " ".join(built.identity_notes)
    assert "'1xSUBMISSION_PLATFORM_PLACEHOLDER' is logged by 2 different systems" in notes
    assert "spelling variants of one platform name (not merged): 1xDSS8440, DSS8440" in notes


def test_v07_logs_are_checked_at_the_070_ruleset(report):
    built, _ = report
    dell = _result(built, "transformer", "DellEMC_C4140")
    assert {(r.compliance.status, r.compliance.ruleset) for r in dell.runs} == {("pass", "0.7.0")}
    assert dell.submittable


def test_v06_mask_rcnn_nested_dict_accuracy_and_the_summarizer(report, tmp_path):
    built, _ = report
    nvidia = _result(built, "maskrcnn", "NVIDIA_dgx1_ngc19.05_pytorch")
    last = nvidia.runs[0].quality_curve[-1][1]
    assert set(last) == {"BBOX", "SEGM"} and last["BBOX"] >= 0.377 and last["SEGM"] >= 0.339
    assert all(r.converged for r in nvidia.runs) and nvidia.status == "scored"
    assert {(r.compliance.status, r.compliance.ruleset) for r in nvidia.runs} == {("pass", "0.6.0")}
    official = official_score(V06 + "/NVIDIA", "dgx1_ngc19.05_pytorch", "maskrcnn", "0.6.0", tmp_path)
    # v0.6 timestamps are seconds; result_summarizer divides them by 60,000 as if milliseconds, so its v0.6
    # numbers are 1000x too small: the same digits, in minutes after x1000.
    assert nvidia.score_min == pytest.approx(official * 1000, rel=1e-9)
    # NVIDIA's v0.6 systems file is a logged 'entry:' line, not JSON: 1 node x 8 V100s read from its text.
    assert nvidia.runs[0].device_count == 8


def test_google_v06_mask_list_accuracy_and_alias(report):
    built, _ = report
    google = _result(built, "maskrcnn", "Google_tpu-v3-32")
    run = google.runs[0]
    assert run.logged_benchmark == "mask" and run.ruleset == "0.6"
    assert set(run.quality_curve[-1][1]) == {"BBOX", "SEGM"}
    folder = os.path.join(V06, "Google", "results", "tpu-v3-32", "mask")
    expected = olympic_from_lines(folder, r":::MLL (\S+) {key}:", 1 / 60)
    assert google.score_min == pytest.approx(expected, rel=1e-9)
    assert google.runs[0].device_count == 16


def test_v05_log_is_read_scored_by_its_own_rules_and_not_checked_at_a_later_round(report):
    built, _ = report
    ssd = _result(built, "ssd", "Nvidia_dgx1_ngc18.11_pytorch")
    assert ssd.ruleset == "0.5" and len(ssd.runs) == 5 and all(r.converged for r in ssd.runs)
    expected = olympic_from_lines(V05_SSD, r":::MLPv0\.5\.0 ssd (\S+) \([^)]*\) {key}", 1 / 60)
    assert ssd.score_min == pytest.approx(expected, rel=1e-9)
    assert ssd.rule.startswith("v0.5 rules (training_policies")
    for run in ssd.runs:
        assert run.compliance.status == "unsupported" and run.compliance.ruleset is None
        assert "no ruleset for this round" in run.compliance.detail
    # entry.json: 1 node x 8 V100s; eval_target from the log is the run's target (0.212).
    assert ssd.runs[0].device_count == 8 and ssd.runs[0].quality_target == pytest.approx(0.212)


def test_time_s_log_without_benchmark_folder(report):
    built, _ = report
    alibaba = _result(built, "resnet", "Alibaba_v100-256")
    folder = os.path.join(V07, "Alibaba", "results", "v100-256")
    assert alibaba.score_min is not None and alibaba.runs[0].device_count is None
    # Independent reading: the time_s of run_start/run_stop lines, in seconds.
    times = []
    for name in sorted(os.listdir(folder)):
        text = open(os.path.join(folder, name)).read()
        stamp = {key: float(re.search(r'"key": "' + key + r'".*?"time_s": ([0-9.]+)', text).group(1))
                 for key in ("run_start", "run_stop")}
        times.append((stamp["run_stop"] - stamp["run_start"]) / 60)
    times.sort()
    assert alibaba.score_min == pytest.approx(sum(times[1:-1]) / 3, rel=1e-9)
    assert "no systems JSON" in alibaba.runs[0].identified_by


def test_report_md_is_one_readable_page_with_aggregated_problems(report):
    built, out = report
    text = open(os.path.join(out, "report.md")).read()
    assert "## Systems" in text and "Scoring rules used:" in text
    assert "v0.5 rules (training_policies" in text
    # Compliance rows name org/system/benchmark, not just result_0.txt.
    assert "| training_results_v0.7/DellEMC/results/DSS8440/maskrcnn/result_0.txt | maskrcnn | DellEMC_DSS8440 |" \
        in text
    assert not built.skipped, built.skipped   # every excerpt is usable
    runs = pd.read_csv(os.path.join(out, "tables", "runs.csv"))
    assert len(runs) == 42 and set(runs["round_from"]) >= {"v0.5 log format", "v0.6 log format"}


def test_our_run_against_a_published_system_with_baseline(tmp_path):
    """Our T4 transformer runs (example logs) against the published 4-GPU Dell C4140, per GPU too."""
    ours = tmp_path / "ours"
    ex.write_example_study(str(ours), workloads={"transformer": (2400.0, 3, tuple(range(1, 11)), "0.7")},
                           systems=(("r740_t4", "NVIDIA T4", 15.0, (1,), 1.0),))
    built = build_report([str(ours), os.path.join(V07, "DellEMC")], str(tmp_path / "out"), baseline="DellEMC_C4140",
                         check_compliance=False, draw_charts=False)
    speedup = built.frames["speedup"]
    row = speedup[speedup["system"] == "r740_t4_1xNVIDIA_T4"].iloc[0]
    assert row["baseline_devices"] == 4 and row["devices"] == 1
    assert row["speedup"] == pytest.approx(row["baseline_min"] / row["system_min"])
    assert row["per_device_speedup"] == pytest.approx(row["speedup"] * 4)
    assert row["baseline_min"] == pytest.approx(35.383, abs=1e-3)


def test_resumed_run_is_listed_but_never_scored(tmp_path):
    logs = tmp_path / "logs"
    paths = []
    for seed in range(1, 6):
        run = ex.ExampleRun(benchmark="resnet", seed=seed, epochs=3, start_s=1.7e9 + seed * 10000)
        paths.append(ex.write_log(str(logs / ex.run_file_name(run)), run))
    with open(paths[2]) as handle:
        lines = handle.read().splitlines()
    # The reliability helper writes `resumed` (value True) when a run continued from a checkpoint.
    resumed = json.loads(lines[-1].split(":::MLLOG ", 1)[1])
    resumed.update(key="resumed", value=True, metadata={})
    lines.insert(len(lines) - 1, ":::MLLOG " + json.dumps(resumed))
    with open(paths[2], "w") as handle:
        handle.write("\n".join(lines) + "\n")
    built = build_report([str(logs)], str(tmp_path / "out"), check_compliance=False, draw_charts=False)
    (result,) = built.results
    assert result.score_min is None and "resumed from a checkpoint" in result.status
    assert any("resumed" in p.reason and not p.skipped for p in built.problems)
    # Without that line the same five runs score.
    record, _ = parse_log(paths[1])
    assert not record.resumed


def test_fifo_and_unreadable_files_are_problems_not_hangs(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    run = ex.ExampleRun(benchmark="ncf", seed=1)
    ex.write_log(str(logs / "good.log"), run)
    os.mkfifo(logs / "pipe.log")
    os.symlink(logs / "gone.log", logs / "dangling.log")
    (logs / "secret.log").write_text(":::MLLOG {}\n")
    real_open = os.open

    def refusing_open(path, *args, **kwargs):
        if str(path).endswith("secret.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    built = build_report([str(logs)], str(tmp_path / "out"), check_compliance=False, draw_charts=False)
    reasons = {os.path.basename(p.path): p.reason for p in built.problems}
    assert "not a regular file" in reasons["pipe.log"]
    assert reasons["dangling.log"].startswith("cannot read")
    assert reasons["secret.log"] == "cannot read: Permission denied"
    assert len(built.records) == 1


def test_many_problems_of_one_kind_are_one_line(tmp_path):
    logs = tmp_path / "logs"
    for seed in range(1, 5):
        run = ex.ExampleRun(benchmark="ncf", seed=seed, start_s=1.7e9 + seed * 1000, include_run_stop=False)
        ex.write_log(str(logs / f"cut_{seed}.log"), run)
    built = build_report([str(logs)], str(tmp_path / "out"), check_compliance=False, draw_charts=False)
    text = open(built.report_path).read()
    problems = text.split("## Problems", 1)[1].split("##", 1)[0]
    rows = [line for line in problems.splitlines() if line.startswith("| 4 |")]
    assert len(rows) == 1 and "no run_stop" in rows[0]


def test_chart_colours_stay_distinct_past_ten_systems():
    for count in (9, 15, 40, 120):
        colours = [tuple(round(c, 4) for c in colour[:3]) for colour in distinct_colors(count)]
        assert len(set(colours)) == count


def test_mixing_rounds_keeps_every_folder_apart(tmp_path):
    """The same org/system folder under two rounds: two systems, each scored at its own round, none dropped."""
    source = os.path.join(V07, "Tencent")
    for round_folder in ("training_results_v0.6", "training_results_v0.7"):
        shutil.copytree(source, tmp_path / "logs" / round_folder / "Tencent")
    built = build_report([str(tmp_path / "logs")], str(tmp_path / "out"), check_compliance=False, draw_charts=False)
    by_round = {r.ruleset: r for r in built.results}
    assert set(by_round) == {"0.6", "0.7"}
    assert {r.system for r in built.results} == {"Tencent_GN10X-8xV100", "Tencent_GN10X-8xV100_2"}
    assert all(len(r.runs) == 10 and r.score_min is not None for r in built.results)
    assert not [p for p in built.problems if "seed" in p.reason]   # no run dropped as a seed used twice


def test_round_of_a_log_outside_a_vxy_folder_comes_from_round(tmp_path):
    shutil.copytree(os.path.join(V07, "Tencent"), tmp_path / "logs" / "Tencent")
    unknown = build_report([str(tmp_path / "logs")], str(tmp_path / "a"), draw_charts=False)
    run = unknown.results[0].runs[0]
    assert run.ruleset is None and run.compliance.status == "unsupported" and "--round" in run.compliance.detail
    given = build_report([str(tmp_path / "logs")], str(tmp_path / "b"), draw_charts=False, default_round="0.7")
    run = given.results[0].runs[0]
    assert (run.ruleset, run.round_source) == ("0.7", "--round")
    assert (run.compliance.status, run.compliance.ruleset) == ("pass", "0.7.0")


def test_throughput_only_from_consistent_sample_counts():
    from mlperf_keras.reporting.logfiles import Event
    from mlperf_keras.reporting.parse import _throughput

    def epochs(seconds_each, count):
        events = []
        for epoch in range(1, count + 1):
            events.append(Event(1000.0 * seconds_each * (epoch - 1), "epoch_start", None, {"epoch_num": epoch}, 0))
            events.append(Event(1000.0 * seconds_each * epoch, "epoch_stop", None, {"epoch_num": epoch}, 0))
        return events

    rate, source = _throughput(epochs(100.0, 4), 1281167, "resnet", run_ms=400_000)
    assert rate == pytest.approx(12811.67) and source == "train_samples / epoch time"
    # An iteration count logged as train_samples (1251 steps of 1024 images) is not the training-set size.
    rate, source = _throughput(epochs(100.0, 4), 1251, "resnet", run_ms=400_000)
    assert rate is None and "not resnet's training-set size" in source
    # Epoch events covering a tenth of the run time only a part of each epoch: 10x too high a rate.
    rate, source = _throughput(epochs(10.0, 4), 1281167, "resnet", run_ms=400_000)
    assert rate is None and "time only 10% of the run" in source


def test_a_float32_target_logged_as_float64_counts_as_reached(tmp_path):
    """NVIDIA's v0.5 GNMT logs BLEU 21.8 reached as 21.799999237060547 with run_stop success."""
    lines = [':::MLPv0.5.0 gnmt 1541780000.0 (train.py:242) run_start',
             ':::MLPv0.5.0 gnmt 1541781000.0 (train.py:464) eval_accuracy: {"epoch": 2, "value": 21.799999237060547}',
             ':::MLPv0.5.0 gnmt 1541781000.1 (train.py:466) eval_target: 21.8',
             ':::MLPv0.5.0 gnmt 1541781000.2 (train.py:488) run_stop: {"success": true}']
    path = tmp_path / "result_0.txt"
    path.write_text("\n".join(lines) + "\n")
    record, _ = parse_log(str(path))
    assert record.converged and record.time_to_train_min == pytest.approx(1000.2 / 60)
    path.write_text("\n".join(lines).replace("21.799999237060547", "21.79") + "\n")
    record, _ = parse_log(str(path))
    assert not record.converged
    path.write_text("\n".join(lines).replace("21.799999237060547", "NaN") + "\n")
    record, _ = parse_log(str(path))
    assert not record.converged
