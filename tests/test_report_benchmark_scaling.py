"""Benchmark JSON lines -> weak-scaling table (efficiency against 1 GPU) and chart; peer lines are ignored."""
import json

import pytest

from mlperf_keras.reporting import benchmark_scaling


def line(model, gpus, rate, unit="images"):
    return json.dumps({"model": model, "accelerator": "NVIDIA H200", "accelerators": gpus, "unit": unit,
                       "precision": "bf16", "global_batch_size": 256 * gpus, "loop_samples_per_s": rate})


def test_efficiency_and_chart(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join([line("resnet", 1, 1000.0), line("resnet", 2, 1800.0), line("resnet", 4, 3200.0),
                                  json.dumps({"peer": "resnet", "samples_per_s": 1100.0}), "FAILED: x"]) + "\n")
    frame = benchmark_scaling.write([str(results)], str(tmp_path / "out"))
    assert list(frame["devices"]) == [1, 2, 4]
    assert list(frame["efficiency_pct"]) == pytest.approx([100.0, 90.0, 80.0])
    assert (tmp_path / "out" / "charts" / "benchmark_scaling.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "tables" / "benchmark_scaling.csv").read_text().count("\n") == 4
