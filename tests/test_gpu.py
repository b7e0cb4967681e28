"""The GPU paths: the JAX train step on a GPU, and mixed precision moving the weights as float32 does there.

Marked gpu: deselected by default (pytest.ini), run on a machine with an NVIDIA GPU and jax[cuda] with
`python -m pytest -m gpu` (BUILD.md). Each case runs in a fresh interpreter on the JAX backend, which needs no
TensorFlow.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU (nvidia-smi not found)")]

# One step (or `steps` steps) of SGD, learning rate 0.1, on a 2-layer Dense model from a fixed initialisation,
# through steps.make_train_step as the loop builds it (precision policy, then the optimizer wrapped for fp16).
_STEPS = r"""
import json, sys
import numpy as np
import keras, jax
from mlperf_keras import distribute, precision, steps

name, count = sys.argv[1], int(sys.argv[2])
precision.set_policy(name)
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
start = [np.array(v.value, np.float32) for v in model.trainable_variables]
optimizer = precision.wrap_optimizer(keras.optimizers.SGD(0.1), name)
loss_fn = lambda y, pred: keras.ops.mean(keras.ops.square(keras.ops.cast(pred, "float32") - y))
step = steps.make_train_step(model, optimizer, loss_fn, distribute.create("jax"), jit_compile=True)
rng = np.random.default_rng(1)
x = rng.normal(size=(64, 8)).astype(np.float32)
y = (x[:, :4] * 0.5).astype(np.float32)
losses = [float(step(x, y)) for _ in range(count)]
step.sync_to_model()
moved = [float(np.abs(np.array(v.value, np.float32) - s).sum()) for v, s in zip(model.trainable_variables, start)]
print(json.dumps({"platform": jax.default_backend(), "moved": moved, "losses": losses}))
"""


def _run(precision: str, count: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _STEPS, precision, str(count)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["platform"] == "gpu", result
    return result


def test_jax_train_step_trains_on_the_gpu():
    """20 float32 steps on the GPU: every weight moves and the loss falls to under half its first value."""
    result = _run("fp32", 20)
    assert all(m > 0 for m in result["moved"]), result
    assert result["losses"][-1] < 0.5 * result["losses"][0], result["losses"]


@pytest.mark.parametrize("precision, tolerance", [("fp16", 0.05), ("bf16", 0.1)])
def test_mixed_precision_step_moves_the_weights_as_float32_does(precision, tolerance):
    """One SGD step under mixed fp16 (dynamic loss scaling, keras LossScaleOptimizer) or bf16 changes every weight
    by what the float32 step changes it, within the dtype's rounding. The fault this guards against: the loss
    differentiated unscaled while the optimizer divides the gradients by the loss scale (2^15 at the start), which
    moved the weights 32,768 times less than float32 with no error; and 10 fp16 steps lower the loss as fp32's do."""
    reference, mixed = _run("fp32", 1), _run(precision, 1)
    for a, b in zip(reference["moved"], mixed["moved"]):
        assert b == pytest.approx(a, rel=tolerance), (reference["moved"], mixed["moved"])
    reference, mixed = _run("fp32", 10), _run(precision, 10)
    assert mixed["losses"][-1] == pytest.approx(reference["losses"][-1], rel=5 * tolerance)
