"""The JAX backend: the same loop and NeuMF train without TensorFlow ever being imported."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("jax")

SCRIPT = """
import json, sys
sys.argv = ["train", "--backend=jax", "--data_dir=%s", "--output_dir=%s", "--seed=2", "--max_epochs=6",
            "--hparams=mf_dim=8,mlp_layers=32-32-16,batch_size=4096,learning_rate=0.003,beta_1=0.9,beta_2=0.999"]
from absl import app
from mlperf_keras import train
try:
    app.run(train.main)
except SystemExit as e:
    code = e.code
print(json.dumps({"exit": code, "tensorflow_imported": "tensorflow" in sys.modules}))
"""


def test_jax_run_learns_and_never_imports_tensorflow(prepared_ncf, tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT % (prepared_ncf, tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin",
                                                       "HOME": str(tmp_path)})
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_summary, check = json.loads(lines[-2]), json.loads(lines[-1])
    assert check == {"exit": 0, "tensorflow_imported": False}
    assert run_summary["epochs"] == 6 and run_summary["quality"] > 0.2, run_summary
    log = open(run_summary["log"]).read()
    assert '"key": "keras_backend", "value": "jax"' in log and "jax 0." in log
