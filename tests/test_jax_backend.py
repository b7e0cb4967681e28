"""The JAX backend: the same loop and NeuMF train without TensorFlow ever being imported."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_on_jax_without_tensorflow

pytest.importorskip("jax")

SMALL = "mf_dim=8,mlp_layers=32-32-16,batch_size=4096,learning_rate=0.003,beta_1=0.9,beta_2=0.999"


def test_jax_run_learns_and_never_imports_tensorflow(prepared_ncf, tmp_path):
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--backend=jax", f"--data_dir={prepared_ncf}", f"--output_dir={tmp_path}", "--seed=2",
                  "--max_epochs=6", f"--hparams={SMALL}", "--division=open"], tmp_path)
    run_summary = json.loads(lines[-1])
    # 6 epochs do not reach HR@10 0.635: exit status 5 (config.EXIT_NOT_CONVERGED), not a success's 0.
    assert check == {"exit": 5, "tensorflow_imported": False}
    assert run_summary["epochs"] == 6 and run_summary["quality"] > 0.2, run_summary
    log = open(run_summary["log"]).read()
    assert '"key": "keras_backend", "value": "jax"' in log and "jax 0." in log
