"""--precision on both backends: a mixed fp16 or bf16 step moves the weights as the fp32 step does.

fp16 trains with dynamic loss scaling (keras.optimizers.LossScaleOptimizer, initial scale 2^15): the gradient must be
of the scaled loss, which the optimizer then divides by the same scale. On JAX the step is a pure function, and a
step that differentiated the unscaled loss moved the weights 2^15 times too little while every loss stayed finite;
these tests compare update sizes, which catches that (the same steps' losses alone do not).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

# One weight update's size under mixed precision against fp32's: the same gradient up to fp16/bf16 rounding of the
# activations (bf16 keeps 8 significant bits, fp16 11).
TOLERANCE = {"fp16": 0.02, "bf16": 0.05}


def _probe(backend: str) -> dict:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "tests.precision_probe"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["tensorflow", "jax"])
def probe(request):
    if request.param == "jax":
        pytest.importorskip("jax")
    return request.param, _probe(request.param)


@pytest.mark.parametrize("model", ["dense_one_step", "ncf"])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_one_step_moves_weights_as_fp32(probe, model, precision):
    backend, results = probe
    fp32 = np.array(results[model]["fp32"]["update_norms"])
    mixed = np.array(results[model][precision]["update_norms"])
    assert (fp32 > 0).all(), (backend, model, fp32)
    ratio = mixed / fp32
    assert np.allclose(ratio, 1.0, atol=TOLERANCE[precision]), (backend, model, precision, ratio.tolist())


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_thirty_steps_lower_the_loss_as_fp32(probe, precision):
    backend, results = probe
    fp32 = results["dense_30_steps"]["fp32"]["losses"]
    mixed = results["dense_30_steps"][precision]["losses"]
    assert np.isfinite(mixed).all()
    assert fp32[-1] < 0.9 * fp32[0]   # the comparison below means something only if fp32 learns
    assert mixed[-1] == pytest.approx(fp32[-1], rel=TOLERANCE[precision]), (backend, precision, mixed, fp32)
