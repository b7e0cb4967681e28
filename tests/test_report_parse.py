"""Reporter: one MLLOG file -> one run record, for this package's logs and for other producers' logs."""
import os

import pytest

from mlperf_keras.reporting import example_logs as ex
from mlperf_keras.reporting.logfiles import find_log_files
from mlperf_keras.reporting.parse import parse_log
from mlperf_keras.reporting.systems import describe_system, safe_name


def write(folder, name="run.log", **fields):
    return ex.write_log(os.path.join(str(folder), name), ex.ExampleRun(**fields))


def test_our_log_gives_system_seed_time_epochs_throughput(tmp_path):
    path = write(tmp_path, benchmark="resnet", seed=7, platform="r740_t4", accelerator_model="NVIDIA T4",
                 accelerator_count=2, num_workers=2, epochs=4, epoch_seconds=60, eval_seconds=5, throughput=1234.0)
    record, problems = parse_log(path)
    assert problems == []
    assert record.benchmark == "resnet" and record.seed == 7 and record.ruleset == "0.7"
    assert record.system == "r740_t4_2xNVIDIA_T4" and record.device_count == 2 and record.gpu_type == "NVIDIA T4"
    assert record.converged and record.status == "success"
    # 4 epochs of 60 s + 4 evals of 5 s (+ a few ms of strictly increasing clock) = 4.33 min
    assert record.time_to_train_min == pytest.approx(260 / 60, abs=0.01)
    assert record.epochs_to_converge == 4
    assert record.throughput == pytest.approx(1234.0) and record.throughput_source == "tracked_stats"
    assert len(record.quality_curve) == 4 and record.missing == []


def test_zero_based_epochs_count_one_more(tmp_path):
    """v0.5 numbers epochs from 0: a target reached at epoch_num 5 took 6 epochs."""
    record, _ = parse_log(write(tmp_path, benchmark="ncf", ruleset="0.5", epochs=6))
    assert record.quality_curve[-1][0] == 5
    assert record.epochs_to_converge == 6


def test_aborted_run_is_not_converged_and_has_no_epochs(tmp_path):
    record, _ = parse_log(write(tmp_path, status="aborted", epochs=3))
    assert not record.converged and record.epochs_to_converge is None and record.status == "aborted"


def test_foreign_log_falls_back_and_says_what_is_missing(tmp_path):
    """Another producer's log: no extra keys, block events, no seed -> platform as system, derived throughput."""
    path = write(tmp_path, benchmark="gnmt", style="foreign", seed=None, platform="tpu-v3-32", epochs=3,
                 epoch_seconds=100)
    record, problems = parse_log(path)
    assert problems == []
    assert record.system == "tpu-v3-32" and record.device_count is None and record.gpu_type == "unknown"
    assert record.seed is None and record.ruleset is None
    for key in ("accelerator_model", "accelerator_count", "num_workers", "seed"):
        assert key in record.missing
    # throughput from train_samples / block time (block includes the 5 s eval)
    assert record.throughput == pytest.approx(3498161 / 105, rel=1e-3)
    assert record.throughput_source == "train_samples / epoch time"
    assert record.epochs_to_converge == 3 and record.converged


def test_cpu_runs_count_workers():
    assert describe_system("cpu", "cpu", 0, 2)[:3] == ("2xcpu", "cpu", 2)
    assert describe_system("laptop", "cpu", 0, 1)[0] == "laptop_1xcpu"
    assert describe_system(None, None, None, None)[0] == "unknown_platform"
    assert safe_name("NVIDIA A100-SXM4-80GB (MIG 1g)") == "NVIDIA_A100-SXM4-80GB_MIG_1g"


def test_finds_logs_recursively_and_ignores_other_files(tmp_path):
    write(tmp_path / "a" / "b", "x.log")
    (tmp_path / "a" / "x.config.json").write_text("{}")
    (tmp_path / "a" / "weights.h5").write_bytes(b":::MLLOG in a binary file")
    (tmp_path / "empty").mkdir()
    files, empty, problems = find_log_files([str(tmp_path / "a"), str(tmp_path / "empty")])
    assert problems == []
    assert [os.path.basename(f) for f in files] == ["x.log"]
    assert empty == [str(tmp_path / "empty")]


def test_v06_mll_format_is_read(tmp_path):
    """MLPerf v0.6 logs (':::MLL <seconds> key: {json}') are read with the official 0.6 parser."""
    lines = [":::MLL 0.0 submission_benchmark: {\"value\": \"gnmt\", \"metadata\": {}}",
             ":::MLL 0.0 submission_platform: {\"value\": \"tpu-v3-128\", \"metadata\": {}}",
             ":::MLL 1000.0 run_start: {\"value\": null, \"metadata\": {}}",
             ":::MLL 1100.0 eval_accuracy: {\"value\": 24.1, \"metadata\": {\"epoch_num\": 1}}",
             ":::MLL 1120.0 run_stop: {\"value\": null, \"metadata\": {\"status\": \"success\"}}"]
    path = tmp_path / "result_0.txt"
    path.write_text("\n".join(lines) + "\n")
    record, problems = parse_log(str(path))
    assert problems == []
    assert record.time_to_train_min == pytest.approx(2.0) and record.ruleset == "0.6"
    assert record.epochs_to_converge == 1


def test_v06_logs_are_checked_with_the_06_checker(tmp_path):
    from mlperf_keras.reporting.compliance import check_log
    path = tmp_path / "result_0.txt"
    path.write_text(":::MLL 0.0 submission_benchmark: {\"value\": \"gnmt\", \"metadata\": {}}\n"
                    ":::MLL 1000.0 run_start: {\"value\": null, \"metadata\": {}}\n"
                    ":::MLL 1120.0 run_stop: {\"value\": null, \"metadata\": {\"status\": \"success\"}}\n")
    record, _ = parse_log(str(path))
    verdict = check_log(record.path, record.benchmark, record.log_format)
    assert verdict.ruleset == "0.6.0" and verdict.status == "fail"   # parsed, then rules fail (no init_start...)
    assert "parsing errors" not in verdict.detail
