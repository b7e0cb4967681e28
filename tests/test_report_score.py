"""Reporter: MLPerf scoring, against the rules and against mlperf_logging's own result_summarizer."""
import glob
import os

import pytest
from mlperf_logging.result_summarizer import result_summarizer

from mlperf_keras.reporting import example_logs as ex
from mlperf_keras.reporting.build import build_report
from mlperf_keras.reporting.records import RunRecord
from mlperf_keras.reporting.score import olympic_mean, score_group
from tests.conftest import run_cli


def fake_run(minutes, converged=True, benchmark="resnet", start=0.0, seed=None):
    return RunRecord(path=f"/x/{start}.log", benchmark=benchmark, run_start_ms=start * 60000,
                     run_stop_ms=(start + minutes) * 60000, status="success" if converged else "aborted",
                     converged=converged, seed=seed, system="s")


def test_olympic_mean_drops_fastest_and_slowest():
    assert olympic_mean([10, 1, 5, 6, 7], 0) == pytest.approx(6.0)
    # One non-converged run stands in for the slowest: drop only the fastest of the converged.
    assert olympic_mean([1, 5, 6, 7], 1) == pytest.approx(6.0)


def test_five_resnet_runs_are_scored():
    runs = [fake_run(m, start=i * 100) for i, m in enumerate([10, 11, 12, 13, 30])]
    result = score_group(runs, "resnet", "0.7")
    assert result.status == "scored" and result.score_min == pytest.approx(12.0)


def test_too_few_runs_are_shown_not_scored():
    result = score_group([fake_run(10, start=i * 100) for i in range(3)], "resnet", "0.7")
    assert result.score_min is None and result.status == "too few runs: 3 of 5"


def test_gnmt_needs_ten_runs():
    result = score_group([fake_run(10, benchmark="gnmt", start=i * 100) for i in range(5)], "gnmt", "0.7")
    assert result.status == "too few runs: 5 of 10"


def test_two_non_converged_runs_invalidate_the_result():
    runs = [fake_run(10 + i, converged=i < 3, start=i * 100) for i in range(5)]
    result = score_group(runs, "resnet", "0.7")
    assert result.score_min is None and "too many non-converged runs: 2" in result.status


def test_only_the_first_runs_in_time_order_count():
    runs = [fake_run(m, start=i * 100) for i, m in enumerate([10, 11, 12, 13, 14, 1, 1])]
    result = score_group(runs, "resnet", "0.7")
    assert result.score_min == pytest.approx(12.0) and any("first 5 of 7" in note for note in result.notes)


def test_ncf_v05_uses_the_first_50_converged_runs():
    runs = [fake_run(5 + (i % 7), converged=(i % 10 != 3), benchmark="ncf", start=i * 100) for i in range(60)]
    result = score_group(runs, "ncf", "0.5")
    assert result.required == 50 and result.status == "scored"
    assert sum(r.converged for r in result.used) == 50 and result.non_converged == 6
    few = score_group(runs[:20], "ncf", "0.5")
    assert few.score_min is None and few.status == "too few converged runs: 18 of 50"


def _write_compliant_resnet_runs(folder, count=5):
    # LARS at batch 3264 converging in 35-38 epochs: passes the 4.0.0 checker and the RCP check.
    for seed, epochs in zip(range(1, count + 1), (35, 36, 35, 37, 36)):
        run = ex.ExampleRun(benchmark="resnet", seed=seed, epochs=epochs, global_batch_size=3264,
                            epoch_seconds=30.0 + 7 * seed, start_s=1.7e9 + seed * 10000, division="closed")
        ex.write_log(os.path.join(str(folder), ex.run_file_name(run)), run)


def summarize(folder, ruleset, benchmark):
    """The official result_summarizer's score for `benchmark` in `folder` (its own function, in-process:
    the same code as `python -m mlperf_logging.result_summarizer`, without a second Python start-up)."""
    strong, _, _, _ = result_summarizer.summarize_results(str(folder), "training", ruleset)
    scores = strong[benchmark].dropna()
    assert len(scores) == 1, strong
    return float(scores.iloc[0])


def package_check(folder, ruleset, tmp_path):
    checked = run_cli("mlperf_logging.package_checker", str(folder), "training", ruleset, "--log_output",
                      str(tmp_path / f"package_checker_{ruleset}.log"), timeout=120)
    return checked.stdout + checked.stderr


def test_score_equals_result_summarizer_and_package_checker_accepts_the_layout(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    _write_compliant_resnet_runs(logs)
    report = build_report([str(logs)], str(out), draw_charts=False)
    (result,) = report.results
    assert result.status == "scored" and result.submittable
    assert len(glob.glob(str(out / "results" / "*" / "resnet" / "result_*.txt"))) == 5
    assert summarize(out, "4.0.0", "resnet") == pytest.approx(result.score_min, abs=0.01)
    output = package_check(out, "4.0.0", tmp_path)
    assert "PACKAGE CHECKER FOUND NO ERRORS" in output, output


def test_mixed_benchmarks_are_scored_per_ruleset_like_the_summarizer(tmp_path):
    """resnet (4.0.0), gnmt (0.7.0, ten runs, one aborted) and ncf (no ruleset) in one report."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    _write_compliant_resnet_runs(logs)
    for seed in range(1, 11):
        run = ex.ExampleRun(benchmark="gnmt", seed=seed, epochs=3 + seed % 3, epoch_seconds=40 + seed,
                            platform="r740_v100", accelerator_model="NVIDIA V100", accelerator_count=2,
                            num_workers=2, status="aborted" if seed == 4 else "success",
                            start_s=1.7e9 + seed * 10000)
        ex.write_log(os.path.join(str(logs), ex.run_file_name(run)), run)
    for seed in range(1, 4):
        run = ex.ExampleRun(benchmark="ncf", ruleset="0.5", seed=seed, start_s=1.7e9 + seed * 10000)
        ex.write_log(os.path.join(str(logs), ex.run_file_name(run)), run)
    report = build_report([str(logs)], str(out), draw_charts=False)
    ours = {r.benchmark: r for r in report.results}
    assert ours["gnmt"].status == "scored" and ours["gnmt"].non_converged == 1
    assert ours["ncf"].score_min is None and "too few converged runs: 3 of 50" in ours["ncf"].status
    assert sorted(report.ruleset_views) == ["0.7.0", "4.0.0"]
    for ruleset, benchmark in (("4.0.0", "resnet"), ("0.7.0", "gnmt")):
        folder = report.ruleset_views[ruleset]
        assert summarize(folder, ruleset, benchmark) == pytest.approx(ours[benchmark].score_min, abs=0.01)
    # The whole folder (not only by_ruleset/): package_checker skips what its ruleset does not know.
    output = package_check(out, "4.0.0", tmp_path)
    assert "PACKAGE CHECKER FOUND NO ERRORS" in output and "Skipping benchmark: gnmt" in output, output
