"""Benchmark mode on CPU: TensorFlow backend, and the JAX backend without TensorFlow (as on the GPU machine)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, run_on_jax_without_tensorflow

SMALL = ["--model=ncf", "--steps=3", "--warmup_steps=1", "--batch_size=2048",
         "--hparams=num_users=500,num_items=300,mf_dim=8,mlp_layers=32-32-16"]


def check_result(result, backend):
    assert result["backend"] == backend and result["global_batch_size"] == 2048 and result["samples_per_step"] == 2048
    assert result["loop_samples_per_s"] > 0 and result["bare_samples_per_s"] > 0
    assert 0 < result["step_ms_median"] <= result["step_ms_p90"]
    assert result["fraction_of_peak"] is None  # a model resized by --hparams gets no FLOP figures
    assert result["division"] == "open"  # timed, not refused: mf_dim=8 is not tunable in the closed division


def test_benchmark_on_tensorflow(tmp_path):
    out = tmp_path / "result.json"
    proc = run_cli("mlperf_keras.benchmark", *SMALL, f"--json_out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "samples/s" in proc.stdout and "of bare" in proc.stdout
    result = json.loads(out.read_text())
    check_result(result, "tensorflow")
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == result


def test_benchmark_synthetic_on_jax_needs_no_tensorflow(tmp_path):
    pytest.importorskip("jax")
    _, check = run_on_jax_without_tensorflow("benchmark", ["--backend=jax", f"--json_out={tmp_path / 'r.json'}", *SMALL],
                                             tmp_path)
    assert check == {"exit": 0, "tensorflow_imported": False}
    check_result(json.loads((tmp_path / "r.json").read_text()), "jax")


def test_transformer_benchmark_saves_the_batch_it_measured(tmp_path):
    """--save_batch writes the timed batch for a peer (benchmarks/torch_peers.py --batch_file): its real target
    tokens are the ones the benchmark counted. On JAX without TensorFlow, with layers/dropout.py in the step."""
    pytest.importorskip("jax")
    import numpy as np

    batch, result = tmp_path / "batch.npz", tmp_path / "r.json"
    _, check = run_on_jax_without_tensorflow(
        "benchmark", ["--backend=jax", "--model=transformer", "--steps=2", "--warmup_steps=1", "--batch_size=512",
                      "--seed=1", "--hparams=d_model=32,num_layers=1,num_heads=2,filter_size=64",
                      f"--json_out={result}", f"--save_batch={batch}"], tmp_path)
    assert check == {"exit": 0, "tensorflow_imported": False}
    saved, measured = np.load(batch), json.loads(result.read_text())
    assert sorted(saved.files) == ["labels", "source", "target_input"]
    assert list(saved["source"].shape) == measured["batch_shapes"]["source"]
    assert saved["labels"].shape == saved["target_input"].shape
    assert int(np.count_nonzero(saved["labels"])) == measured["samples_per_step"] > 0
    np.testing.assert_array_equal(saved["target_input"][:, 1:], saved["labels"][:, :-1])  # shifted behind a 0


def test_a_diverging_step_is_not_timed():
    """measure() stops at a non-finite loss (NaN boxes change how long data-dependent loops run: not a timing of the
    workload); the CLI turns it into an error and EXIT_DIVERGED."""
    from mlperf_keras import benchmark

    losses = iter([1.0, 2.0, float("nan")] + [1.0] * 20)
    with pytest.raises(benchmark.NonFiniteLoss, match="nan"):
        benchmark.measure(lambda x, y: next(losses), (None, None), steps=2, warmup=1, global_batch=1,
                          num_workers=1)


@pytest.mark.slow
def test_demo_benchmark_times_the_demo_and_what_the_estimate_needs(tmp_path):
    """--demo resolves the demo as train without --data_dir does (its hparams and batch, its data, fed), and adds the
    demo's epoch, evaluation schedule, start-up on the clock and evaluation passes (no timings asserted)."""
    out = tmp_path / "result.json"
    proc = run_cli("mlperf_keras.benchmark", "--model=ncf", "--demo", "--steps=2", "--warmup_steps=1",
                   f"--cache_dir={tmp_path / 'cache'}", f"--output_dir={tmp_path / 'runs'}", f"--json_out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    demo = result["demo"]
    assert result["global_batch_size"] == 16384 and result["fed_batches"] == 2   # the demo's batch, fed
    assert result["fraction_of_peak"] is None   # the demo's reduced model gets no FLOP figures
    assert demo["data_dir"].startswith(str(tmp_path / "cache")) and demo["eval_epochs"][:2] == [1, 2]
    assert demo["epoch_samples"] == demo["steps_per_epoch"] * 16384 and demo["eval_samples"] > 0
    assert demo["startup_on_clock"] == ["build", "verify_files", "train_data", "evaluator"]   # v0.5: build timed
    assert demo["first_eval_s"] > 0 and demo["eval_s"] > 0 and result["first_step_s"] > 0
    refused = run_cli("mlperf_keras.benchmark", "--model=ncf", "--demo", "--synthetic")
    assert refused.returncode == 2 and "--demo times the built-in demo" in refused.stderr


@pytest.mark.parametrize("slow", ["pipeline", "step"])
def test_fed_time_is_split_into_waiting_for_batches_and_step_calls(slow):
    """measure_fed's per-batch split: a pipeline that takes 20 ms a batch shows up as waiting, a step call that takes
    20 ms as dispatch (each bucket at least the sleep it holds; no speed asserted)."""
    import time

    import numpy as np

    from mlperf_keras import benchmark

    class Source:
        def batches(self, epoch):
            for _ in range(3):
                if slow == "pipeline":
                    time.sleep(0.02)
                yield np.zeros(2), np.zeros(2)

    class Step:
        def __call__(self, x, y):
            if slow == "step":
                time.sleep(0.02)
            return 1.0

        def to_device(self, batch):
            return batch

    result = benchmark.measure_fed(Step(), Source(), lambda batch: 2, steps=4, warmup=1)
    slow_key, fast_key = (("fed_wait_ms_per_batch", "fed_dispatch_ms_per_batch") if slow == "pipeline" else
                          ("fed_dispatch_ms_per_batch", "fed_wait_ms_per_batch"))
    assert result[slow_key] >= 19.9   # every batch (or step call) sleeps 20 ms
    assert result[slow_key] > result[fast_key]
    assert result["fed_batches"] == 4
