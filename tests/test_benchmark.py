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
