"""The time-to-train estimator: short-run features from MLLOG logs, leave-one-out epochs, RCP interpolation,
"unknown" answers and the command's one-line errors. Logs are written with mlperf_logging.mllog.MLLogger."""

import json
import logging
import os
import subprocess
import sys

import pytest
from mlperf_logging.mllog.mllog import MLLogger

from mlperf_keras.reporting import estimate
from mlperf_keras.reporting import run_features
from mlperf_keras.reporting import convergence
from mlperf_keras.reporting.logfiles import read_events

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(path, events):
    """events: [(seconds, key, value, metadata)] written as :::MLLOG lines (times from a fixed epoch)."""
    logger = logging.getLogger(f"estimate_test_{os.path.basename(path)}")
    logger.propagate = False
    handler = logging.FileHandler(path, mode="w")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    mllogger = MLLogger(logger=logger)
    for seconds, key, value, metadata in events:
        mllogger.event(key=key, value=value, metadata=metadata, time_ms=1_600_000_000_000 + 1000 * seconds)
    handler.close()
    logger.removeHandler(handler)
    events, bad, log_format = read_events(path)
    assert not bad and log_format == "mllog"
    return events


def _nvidia_style(tmp_path):
    """NVIDIA's v0.7 ResNet shape: epochs numbered from 1, an evaluation after epoch 3 (eval_start..eval_stop)."""
    return _write(tmp_path / "nvidia.txt", [
        (0, "run_start", None, None),
        (2, "block_start", None, {"first_epoch_num": 1, "epoch_count": 3}),
        (2, "epoch_start", None, {"epoch_num": 1}), (72, "epoch_stop", None, {"epoch_num": 1}),
        (72, "epoch_start", None, {"epoch_num": 2}), (132, "epoch_stop", None, {"epoch_num": 2}),
        (132, "epoch_start", None, {"epoch_num": 3}), (192, "epoch_stop", None, {"epoch_num": 3}),
        (192, "eval_start", None, {"epoch_num": 3}), (197, "eval_stop", None, {"epoch_num": 3}),
        (197, "eval_accuracy", 0.3, {"epoch_num": 3}),
        (197, "block_stop", None, {"first_epoch_num": 1}),
        (197, "block_start", None, {"first_epoch_num": 4, "epoch_count": 4}),
        (437, "eval_accuracy", 0.76, {"epoch_num": 7}),
        (438, "run_stop", None, {"status": "success"}),
    ])


def test_short_run_separates_overhead_first_epoch_steady_epochs_and_eval(tmp_path):
    events = _nvidia_style(tmp_path)
    start = events[0].time_ms
    short = run_features.short_run(events, start)
    assert short.first_eval_s == 197 and short.first_eval_epochs == 3
    assert short.overhead_s == 2 and short.train_end_s == 192
    assert short.steady_epoch_s == 60          # epochs 2 and 3; epoch 1 (70 s) holds the warm-up
    assert short.eval_s == 5 and not short.eval_overlaps
    # Only what came before the first eval_accuracy: the second evaluation (epoch 7) is not seen.
    whole = run_features.full_run(events, start, events[-1].time_ms)
    assert whole["epochs"] == 7 and whole["schedule"] == [3, 7]
    assert whole["steady_epoch_s"] == pytest.approx(240 / 4)   # eval 1 .. eval 2 (no eval_start): 4 epochs


def test_block_labelled_evaluations_count_the_epochs_of_the_block(tmp_path):
    """Google's v0.7 TPU logs: block 0 of 4 epochs, its evaluation labelled 'epoch_num 4.0' (4 epochs trained);
    NVIDIA's asynchronous Mask R-CNN evaluation of epoch 1 arrives while epoch 2 trains (1 epoch trained)."""
    google = _write(tmp_path / "google.txt", [
        (0, "run_start", None, None),
        (0, "block_start", None, {"first_epoch_num": 0.0, "epoch_count": 4}),
        (20, "eval_accuracy", 0.03, {"epoch_num": 4.0}),
        (20, "block_stop", None, {"first_epoch_num": 0.0}),
        (21, "run_stop", None, {"status": "aborted"}),
    ])
    assert run_features.short_run(google, google[0].time_ms).first_eval_epochs == 4
    asynchronous = _write(tmp_path / "async.txt", [
        (0, "run_start", None, None),
        (1, "block_start", None, {"first_epoch_num": 1, "epoch_count": 1}),
        (300, "block_stop", None, {"first_epoch_num": 1}), (300, "eval_start", None, {"epoch_num": 1}),
        (300, "block_start", None, {"first_epoch_num": 2, "epoch_count": 1}),
        (360, "eval_accuracy", {"BBOX": 0.2, "SEGM": 0.2}, {"epoch_num": 1}),
        (361, "run_stop", None, {"status": "aborted"}),
    ])
    short = run_features.short_run(asynchronous, asynchronous[0].time_ms)
    assert short.first_eval_epochs == 1 and short.eval_overlaps
    assert short.train_end_s == 300 and short.eval_s == 60     # the latency; training went on meanwhile


def test_prediction_adds_steady_epochs_to_the_first_evaluation(tmp_path):
    events = _nvidia_style(tmp_path)
    short = run_features.short_run(events, events[0].time_ms)
    # Evaluations every 4 epochs after epoch 3; convergence point 6.2 -> the run stops at the evaluation after 7:
    # the first evaluation's training (192 s), 4 steady epochs of 60 s, two evaluations of 5 s.
    prediction = estimate.predict_run(short, 6.2, warmup=None, period=4)
    assert prediction.epochs == 7 and prediction.steady_epoch_s == 60
    assert prediction.seconds == pytest.approx(192 + 4 * 60 + 2 * 5)
    # The naive estimator counts the first epoch's warm-up and the evaluation as steady time.
    assert estimate.naive_time(short, 7) == pytest.approx(197 / 3 * 7)


def test_without_timed_epochs_the_warm_up_comes_from_elsewhere():
    short = run_features.ShortRun(first_eval_s=100.0, first_eval_epochs=1.0)
    assert estimate.predict_run(short, 5, warmup=20.0, period=1).seconds == pytest.approx(100 + 4 * 80)
    # A warm-up longer than the first evaluation cannot be right: at most 90% of it.
    assert estimate.predict_run(short, 2, warmup=500.0, period=1).steady_epoch_s == pytest.approx(10)
    # An asynchronous evaluation (10 s latency) adds only the last one's latency, however many ran.
    overlapped = run_features.ShortRun(first_eval_s=110.0, first_eval_epochs=1.0, train_end_s=100.0, eval_s=10.0,
                                   eval_overlaps=True)
    assert estimate.predict_run(overlapped, 5, warmup=20.0, period=1).seconds == pytest.approx(100 + 4 * 80 + 10)


def test_steady_model_recovers_a_linear_relation():
    """steady = 1.1 x first - 5 on three systems: the fit gives back 1.1 and 5."""
    model = estimate.SteadyModel.fit([(first, 1.1 * first - 5) for first in (20.0, 60.0, 300.0)])
    assert model.slope == pytest.approx(1.1) and model.offset == pytest.approx(5)
    assert model.steady(100.0) == pytest.approx(105)
    assert estimate.SteadyModel.fit([(20.0, 17.0)]) is None


def test_resnet_schedule_length_from_logged_hyperparameters():
    """training_results_v0.7 @0a8a85a, Google/results/tpu-v3-8192-TF/resnet/result_0.txt logs
    lars_opt_learning_rate_decay_steps 1133 and lars_opt_learning_rate_warmup_epochs 31 at global batch 65536:
    31 + 1133 x 65536 / 1281167 epochs; NVIDIA/results/dgx1_ngc20.06_mxnet logs lars_opt_learning_rate_decay_steps
    37 (epochs, the warm-up inside)."""
    google = {"opt_name": "lars", "lars_opt_learning_rate_decay_steps": 1133,
              "lars_opt_learning_rate_warmup_epochs": 31}
    assert convergence.schedule_epochs("resnet", google, 65536) == pytest.approx(31 + 1133 * 65536 / 1281167)
    nvidia = {"opt_name": "lars", "lars_opt_learning_rate_decay_steps": 37, "lars_opt_learning_rate_warmup_epochs": 2}
    assert convergence.schedule_epochs("resnet", nvidia, 1664) == 37
    assert convergence.schedule_epochs("ssd", google, 1024) is None
    entries = [_entry("a", 1, [36.0]), _entry("b", 1, [45.0]), _entry("c", 1, [50.0])]
    for entry, schedule in zip(entries, (40.0, 50.0, 50.0)):
        entry.schedule = schedule
    # Ratios 0.9, 0.9, 1.0: median 0.9.
    assert convergence.schedule_scaled_epochs(entries, 60.0, "test").median == pytest.approx(54)


def _entry(name, batch, epochs, benchmark="gnmt", ruleset="0.7"):
    return convergence.EpochsEntry((benchmark, name, ruleset), benchmark, ruleset, batch, epochs)


def test_leave_one_out_never_uses_the_submission_itself():
    table = [_entry("a", 2048, [4, 4, 5]), _entry("b", 2048, [6, 6, 6]), _entry("c", 2900, [8, 8, 8]),
             _entry("far", 8192, [20, 20]), _entry("other_round", 2048, [99], ruleset="0.6")]
    # Within 1.5x of 2048 and not 'a': b (6) and c (8).
    assert convergence.naive_epochs(table, "gnmt", "0.7", 2048, exclude=("gnmt", "a", "0.7")) == 7
    assert convergence.naive_epochs(table, "gnmt", "0.7", 2048) == 6            # a, b, c: medians 4, 6, 8
    assert convergence.naive_epochs(table, "gnmt", "0.7", 2048,
                                 exclude=("gnmt", "b", "0.7")) == 6          # a (4) and c (8)
    assert convergence.naive_epochs(table, "ssd", "0.7", 2048) is None
    # Interpolated between the nearest batches below and above: 2048 (a, b: median of 4 and 6 = 5) and 8192 (20).
    at = convergence.epochs_estimate(table, "gnmt", "0.7", 5120, exclude=("gnmt", "c", "0.7"))
    assert at.median == pytest.approx(5 + (5120 - 2048) / (8192 - 2048) * (20 - 5))


def test_rcp_interpolation_matches_the_rcp_files_numbers():
    """mlperf-logging 6.1.0 (installed), rcp_checker/training_1.0.0/rcps_ssd.json: "ssd_ref_1024_s128" has ten runs
    of 50 epochs (olympic mean 50); "ssd_ref_2048_s16" has 60 runs, 58 of 65 and 2 of 70 epochs, so dropping one run
    at each end leaves 57 x 65 and 1 x 70: mean 3775 / 58. At 1536, halfway: (50 + 3775 / 58) / 2."""
    assert convergence.rcp_epochs("ssd", 1024).median == pytest.approx(50)
    assert convergence.rcp_epochs("ssd", 1536).median == pytest.approx((50 + 3775 / 58) / 2)
    assert convergence.rcp_epochs("gnmt", 1024) is None


def test_error_band_holds_the_stated_share():
    errors = [-0.2, -0.1, 0.0, 0.05, 0.1, 0.3, 0.4, -0.05, 0.02]
    low, high = estimate.error_band(errors)
    assert low < 1 < high
    assert estimate.error_band([0.1, 0.2]) is None


def test_unknown_says_why():
    bench = {"model": "gnmt", "loop_samples_per_s": 1e5, "global_batch_size": 256, "accelerators": 1,
             "unit": "tokens"}
    result = estimate.estimate("gnmt", "0.7", 256, 1, bench)
    assert result["minutes"] is None
    assert any("no RCP for gnmt" in why for why in result["unknown"])
    assert any("--epoch_samples" in why for why in result["unknown"])
    assert any("not part of MLPerf v0.7" in why for why in estimate.estimate("ncf", "0.7", 1024, 1, None)["unknown"])
    assert any("no benchmark" in why for why in estimate.estimate("ssd", "0.7", 1024, 8, None)["unknown"])


def test_estimate_from_a_benchmark_and_the_rcps():
    bench = {"model": "ssd", "loop_samples_per_s": 1000.0, "global_batch_size": 128, "accelerators": 1,
             "unit": "images", "accelerator": "X", "backend": "jax", "precision": "bf16"}
    result = estimate.estimate("ssd", "0.7", 1024, 8, bench)
    # 50 epochs (RCP at 1024) x 117,266 images / (1000 x 8 images/s), efficiency 1.0 assumed.
    assert result["minutes"]["median"] == pytest.approx(50 * 117266 / 8000 / 60)
    assert result["parts"]["scaling_efficiency"]["source"] == "assumed"
    assert "ESTIMATE ssd" in estimate.markdown_line(result)


def _cli(*args, tmp_path):
    return subprocess.run([sys.executable, "-m", "mlperf_keras.estimate", f"--out={tmp_path}", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_cli_errors_are_one_line(tmp_path):
    missing = _cli("--model=ssd", f"--from_benchmark={tmp_path}/none.json", tmp_path=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "none.json" in missing.stderr
    other = tmp_path / "bench.json"
    other.write_text(json.dumps({"model": "resnet", "loop_samples_per_s": 10.0}))
    wrong = _cli("--model=ssd", f"--from_benchmark={other}", "--batch_size=1024", tmp_path=tmp_path)
    assert wrong.returncode == 2 and "no mlperf_keras.benchmark result for ssd" in wrong.stderr
    assert wrong.stderr.strip().count("\n") == 0


def test_cli_from_a_short_run_and_own_runs(tmp_path):
    """Own runs (the reporter's example-log generator: ncf v0.5, 1024 per step, converged after 5, 6 and 7 epochs)
    give the epochs; a 3-epoch short run (60 s epochs, 5 s evaluations) gives the time: for the median 6 epochs,
    the first epoch (60 s) and its evaluation (5 s), then 5 more epochs of 60 s, each with its evaluation of 5 s."""
    from mlperf_keras.reporting.example_logs import ExampleRun, write_log

    runs = tmp_path / "runs"
    for seed, epochs in ((1, 5), (2, 6), (3, 7)):
        write_log(str(runs / f"ncf_seed{seed}.log"), ExampleRun(benchmark="ncf", ruleset="0.5", seed=seed,
                                                               epochs=epochs, quality_target=0.635))
    short = write_log(str(tmp_path / "short.log"), ExampleRun(benchmark="ncf", ruleset="0.5", seed=9, epochs=3,
                                                              status="aborted", quality_target=0.635))
    done = _cli("--model=ncf", f"--from_log={short}", f"--runs={runs}", "--ruleset=0.5", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "estimate_ncf_n.json").read_text())
    assert written["parts"]["epochs"]["source"].startswith("your runs")
    # Convergence point 6 epochs (median of 5, 6, 7); evaluations every epoch, the first after epoch 1.
    assert written["minutes"]["median"] == pytest.approx((65 + 5 * 60 + 5 * 5) / 60, rel=1e-3)
    assert "ESTIMATE ncf" in (tmp_path / "report.md").read_text()
    wrong = _cli("--model=ssd", f"--from_log={short}", "--batch_size=8", tmp_path=tmp_path)
    assert wrong.returncode == 2 and "is a ncf run, not ssd" in wrong.stderr


def test_report_lists_estimates_beside_measured_results(tmp_path):
    """report --estimate: an estimate's row is marked as one, next to the scored result of the same benchmark."""
    from mlperf_keras.reporting.example_logs import ExampleRun, write_log
    from mlperf_keras.reporting.parse import parse_logs
    from mlperf_keras.reporting.score import score_all

    paths = [write_log(str(tmp_path / "logs" / f"ssd_{seed}.log"),
                       ExampleRun(benchmark="ssd", seed=seed, epochs=3, start_s=1_700_000_000.0 + 1000 * seed))
             for seed in range(1, 6)]
    records, _ = parse_logs(paths)
    bench = {"model": "ssd", "loop_samples_per_s": 1000.0, "global_batch_size": 128, "accelerators": 1}
    path = tmp_path / "estimate_ssd_8.json"
    path.write_text(json.dumps(estimate.estimate("ssd", "0.7", 1024, 8, bench)))
    text = estimate.estimates_markdown(estimate.read_estimates([str(path)]), score_all(records))
    rows = [line for line in text.splitlines() if line.startswith("| ssd")]
    assert "**estimate**" in rows[0] and "measured" in rows[1]
    assert len(rows) == 2
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(convergence.EstimateError, match="not written by python -m mlperf_keras.estimate"):
        estimate.read_estimates([str(tmp_path / "bad.json")])


def test_a_cpu_benchmark_does_not_scale_to_gpus():
    cpu = {"model": "ssd", "loop_samples_per_s": 2.0, "global_batch_size": 1, "accelerators": 1, "accelerator": "cpu"}
    assert any("GPUs need a benchmark on one" in why for why in estimate.estimate("ssd", "0.7", 8, 8, cpu)["unknown"])


def _study_module():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "estimate_study.py")
    spec = importlib.util.spec_from_file_location("estimate_study", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_study_uses_a_measured_t4_rate_and_scales_the_other_card_by_peak_tflops():
    """The R740 figure: a T4 benchmark at the preset's 256 per GPU is 'measured'; the V100-PCIe has none, so its
    rate is the H200 result's x 112/989 (the presets' and the H200 result's peak TFLOP/s), marked assumed; a T4
    result at another per-GPU batch is not taken as the preset's. Epochs are the RCPs' (the same for both cards at
    equal GPU count), so the V100/T4 column is the rate ratio."""
    study = _study_module()
    h200 = {"model": "resnet", "accelerator": "NVIDIA H200", "accelerators": 1, "global_batch_size": 256,
            "loop_samples_per_s": 7000.0, "train_tflops_per_s": 100.0, "fraction_of_peak": 100.0 / 989}
    t4 = {"model": "resnet", "accelerator": "Tesla T4", "accelerators": 1, "global_batch_size": 256,
          "loop_samples_per_s": 300.0}
    t4_other_batch = {**t4, "global_batch_size": 128, "loop_samples_per_s": 1.0}
    found = study.study([h200, t4, t4_other_batch], [], "0.7")
    rows = {(r["card"], r["gpus"]): r for r in found["rows"] if r["model"] == "resnet"}
    assert set(rows) == {("T4", n) for n in (1, 2, 3, 4)} | {("V100-PCIe", n) for n in (1, 2, 3)}
    assert rows[("T4", 2)]["rate_source"] == "measured on Tesla T4"
    assert rows[("V100-PCIe", 1)]["rate_source"].startswith("assumed: NVIDIA H200's rate x 112/989")
    assert rows[("T4", 4)]["global_batch_size"] == 1024
    assert rows[("V100-PCIe", 3)]["speedup_over_t4"] == pytest.approx(7000.0 * 112 / 989 / 300.0, rel=1e-9)
    # Twice the GPUs at twice the batch, scaling 1.0: the RCP epochs differ by batch, so only check it is faster.
    assert rows[("T4", 2)]["minutes"]["median"] < rows[("T4", 1)]["minutes"]["median"]
    assert "unknown" in study.markdown(found)   # the other workloads have no benchmark here: said, not guessed


def _demo_benchmark():
    """What mlperf_keras.benchmark --demo writes (its keys the estimate reads), with round numbers: 16 steps of
    16,384 per epoch fed at 262,144 samples/s (1 s an epoch, 62.5 ms a step), evaluations every epoch."""
    return {"model": "ncf", "loop_samples_per_s": 500_000.0, "fed_samples_per_s": 262_144.0, "first_step_s": 3.0625,
            "global_batch_size": 16384, "samples_per_step": 16384, "accelerator": "cpu", "accelerators": 1,
            "backend": "tensorflow", "precision": "fp32", "unit": "samples",
            "demo": {"steps_per_epoch": 16, "epoch_samples": 262_144, "eval_samples": 1590,
                     "eval_epochs": list(range(1, 21)), "max_epochs": 20, "ruleset": "0.5",
                     "startup_s": {"build": 0.5, "verify_files": 0.1, "train_data": 0.1, "evaluator": 1.3},
                     "startup_on_clock": ["build", "verify_files", "train_data", "evaluator"],
                     "startup_on_clock_s": 2.0, "first_eval_s": 2.5, "eval_s": 0.5}}


def _demo_runs(folder, epochs=(5, 6, 7)):
    from mlperf_keras.reporting.example_logs import ExampleRun, write_log

    for seed, count in enumerate(epochs, start=1):
        write_log(str(folder / f"ncf_seed{seed}.log"), ExampleRun(benchmark="ncf", ruleset="0.5", seed=seed,
                                                                  epochs=count, global_batch_size=16384,
                                                                  quality_target=0.40))
    return convergence.table_from_logs([str(folder)], "ncf", "0.5", source="your runs")


def test_demo_benchmark_gives_epoch_size_rate_evaluation_and_warm_up(tmp_path):
    """A demo benchmark's parts, all measured: epoch size from its data, the fed rate (not the resident one), the
    second evaluation pass, and a warm-up of start-up on the clock (2 s) + the first step's excess over a steady one
    (3.0625 - 0.0625 s) + the first evaluation's excess over the second (2 s); epochs from the given runs (median 6),
    the run stopping at the demo's evaluation after epoch 6 (6 evaluations)."""
    result = estimate.estimate("ncf", "0.5", 16384, None, _demo_benchmark(), own=_demo_runs(tmp_path))
    parts = result["parts"]
    assert result["unknown"] == []
    assert parts["epochs"]["source"].startswith("your runs") and parts["epochs"]["value"][0] == 6
    assert parts["epoch_samples"]["value"] == 262_144 and "demo's data" in parts["epoch_samples"]["source"]
    assert parts["rate"]["value"] == 262_144.0 and "fed from the demo's data" in parts["rate"]["source"]
    assert parts["eval_seconds"]["value"] == 0.5 and parts["eval_seconds"]["source"].startswith("measured")
    assert parts["warmup_seconds"]["value"] == pytest.approx(2 + 3 + 2)
    assert parts["stop_epochs"]["value"][0] == 6
    assert result["minutes"]["median"] == pytest.approx((7 + 6 * 1.0 + 6 * 0.5) / 60)
    assert result["minutes"]["low"] <= result["minutes"]["median"] <= result["minutes"]["high"]
    assert "fed from the demo's data" in estimate.describe(result)


def test_demo_benchmark_stops_at_the_demos_evaluations_and_says_what_is_missing(tmp_path):
    bench = _demo_benchmark()
    bench["demo"]["eval_epochs"] = [2, 4, 6, 8]
    # Convergence point 5 (median of 4, 5, 6): the run stops at the evaluation after epoch 6, the third.
    result = estimate.estimate("ncf", "0.5", 16384, None, bench, own=_demo_runs(tmp_path, (4, 5, 6)))
    assert result["parts"]["stop_epochs"]["value"][0] == 6
    assert result["minutes"]["median"] == pytest.approx((7 + 6 * 1.0 + 3 * 0.5) / 60)
    # Flags given by hand win over the benchmark's measurements.
    given = estimate.estimate("ncf", "0.5", 16384, None, bench, own=_demo_runs(tmp_path, (4, 5, 6)),
                              eval_seconds=0.0, warmup_seconds=0.0)
    assert given["minutes"]["median"] == pytest.approx(6 / 60)
    assert given["parts"]["eval_seconds"]["source"] == "measured (--eval_seconds)"
    # No runs: the epochs are unknown, and the answer says why instead of guessing.
    unknown = estimate.estimate("ncf", "0.5", 16384, None, bench)
    assert unknown["minutes"] is None
    assert any(why.startswith("epochs to converge") and "--runs" in why for why in unknown["unknown"])


def test_cli_from_a_demo_benchmark_and_own_runs(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_demo_benchmark()))
    runs = tmp_path / "runs"
    _demo_runs(runs)
    done = _cli("--model=ncf", f"--from_benchmark={bench}", f"--runs={runs}", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "estimate_ncf_n.json").read_text())
    assert written["global_batch_size"] == 16384 and written["parts"]["epochs"]["source"].startswith("your runs")
    assert written["minutes"]["median"] == pytest.approx((7 + 6 + 3) / 60)
    # --demo belongs to the benchmark that --run_benchmark runs.
    refused = _cli("--model=ncf", f"--from_benchmark={bench}", "--demo", tmp_path=tmp_path)
    assert refused.returncode == 2 and "--demo is the benchmark's" in refused.stderr


def test_a_short_run_that_evaluates_every_epoch_keeps_its_cadence(tmp_path):
    """The ResNet demo evaluates after every epoch, not every 4 as MLPerf's ResNet: a whole short log states its own
    cadence, so a run converging at 4 epochs stops at 4 (not at 1 + 4 = 5)."""
    events = _write(tmp_path / "resnet_short.txt", [
        (0, "submission_benchmark", "resnet", None), (0, "run_start", None, None),
        (1, "epoch_start", None, {"epoch_num": 1}), (11, "epoch_stop", None, {"epoch_num": 1}),
        (11, "eval_start", None, {"epoch_num": 1}), (13, "eval_accuracy", 0.2, {"epoch_num": 1}),
        (13, "epoch_start", None, {"epoch_num": 2}), (14, "epoch_stop", None, {"epoch_num": 2}),
        (14, "eval_start", None, {"epoch_num": 2}), (14.5, "eval_accuracy", 0.3, {"epoch_num": 2}),
        (14.5, "epoch_start", None, {"epoch_num": 3}), (15.5, "epoch_stop", None, {"epoch_num": 3}),
        (15.5, "eval_start", None, {"epoch_num": 3}), (16, "eval_accuracy", 0.4, {"epoch_num": 3}),
        (16, "run_stop", None, {"status": "aborted"}),
    ])
    short = run_features.short_run(events, events[1].time_ms, whole=True)
    assert short.eval_period == 1 and short.steady_epoch_s == 1 and short.later_eval_s == 0.5
    table = [_entry("demo", 32, [4, 4, 4], benchmark="resnet")]
    result = estimate.estimate("resnet", "0.7", 32, None, None, own=table, short=short, short_source="short")
    assert result["parts"]["stop_epochs"]["value"][0] == 4
    # 11 s to the first evaluation's training end, its 2 s evaluation, 3 more epochs of 1 s with evaluations of 0.5 s.
    assert result["minutes"]["median"] == pytest.approx((11 + 2 + 3 * 1 + 3 * 0.5) / 60)
