"""benchmarks/ncf_pipeline.py and benchmarks/transformer_pipeline.py run on tiny generated data and print, per
configuration, a JSON line whose measurements are present and positive."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.test_wmt_prep import prepared_corpus


def run_benchmark(script, *args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    human = [line for line in lines if not line.startswith("{") and " per core" in line]
    assert len(human) == len(records) >= 1, out.stdout
    return records


def test_ncf_pipeline_benchmark_generates_prepares_and_times(tmp_path):
    (r,) = run_benchmark("ncf_pipeline.py", f"--work_dir={tmp_path}", "--users=300", "--items=1500",
                         "--mean_ratings=30", "--batch=4096", "--epochs=1", "--warmup_epochs=1", "--cores=1")
    assert r["workload"] == "ncf" and r["cores"] == 1 and r["batch"] == 4096
    for key in ("samples", "batches", "seconds", "cpu_seconds", "samples_per_s", "samples_per_s_per_core",
                "samples_per_cpu_s", "epoch_build_s", "samples_per_epoch", "train_positives", "cores_for_one_gpu"):
        assert r[key] > 0, key
    assert r["samples"] == r["batches"] * 4096 >= r["samples_per_epoch"] == 5 * r["train_positives"]


def test_transformer_pipeline_benchmark_times_a_prepared_wmt_set(tmp_path_factory):
    data = prepared_corpus(tmp_path_factory, task="copy", num_pairs=2000, num_test=60)  # shared with test_transformer
    records = run_benchmark("transformer_pipeline.py", f"--data_dir={data}", "--cores=1",
                            "--batch_tokens=512", "--batches=4", "--warmup=2")
    assert [r["batch_tokens"] for r in records] == [512]  # one configuration: each is a fresh TensorFlow process
    for r in records:
        assert r["workload"] == "transformer" and r["cores"] == 1 and r["batches"] == 4
        for key in ("target_tokens", "pairs", "seconds", "cpu_seconds", "target_tokens_per_s",
                    "target_tokens_per_s_per_core", "target_tokens_per_cpu_s", "cores_for_one_gpu"):
            assert r[key] > 0, key
        assert r["target_tokens"] <= r["batches"] * r["batch_tokens"]
