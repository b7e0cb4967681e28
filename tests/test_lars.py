"""LARS, momentum SGD and the learning-rate schedules against the MLPerf formulas on hand-computed steps."""
from __future__ import annotations

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from mlperf_keras.optimizers import LARS, MomentumSGD, PolynomialWithWarmup, StepWithWarmup
from tests.conftest import ROOT


def mlperf_lars_reference(w, g, v, lr, m, wd, eta, eps, adapted):
    """The update of mlcommons/training's MLPERF_LARSOptimizer (compute_lr + ApplyMomentum with lr 1), in NumPy."""
    if adapted:
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        trust = eta * w_norm / (g_norm + wd * w_norm + eps) if w_norm > 0 and g_norm > 0 else 1.0
        scaled_lr, g = lr * trust, g + wd * w
    else:
        scaled_lr = lr
    v = m * v + g * scaled_lr
    return w - v, v


def run_optimizer(optimizer, weights, grads_per_step):
    variables = [keras.Variable(np.array(w, np.float32)) for w in weights]
    history = []
    for grads in grads_per_step:
        optimizer.apply([np.array(g, np.float32) for g in grads], variables)
        history.append([np.array(v.numpy(), np.float64) for v in variables])
    return history


def test_lars_first_step_by_hand():
    # w = (3, 4): ||w|| = 5; g = (0.6, 0.8): ||g|| = 1; lr 0.1, wd 0.01, eta 0.001, m 0.9, eps 0
    # trust = 0.001 * 5 / (1 + 0.01 * 5) = 0.005 / 1.05;  g + wd*w = (0.63, 0.84) = 1.05 * (0.6, 0.8)
    # v = 0.1 * trust * (0.63, 0.84) = 0.1 * 0.005 * (0.6, 0.8) = (0.0003, 0.0004);  w = (2.9997, 3.9996)
    # The bias (1-D, skipped): v = 0.1 * 0.5 = 0.05; b = 2 - 0.05 = 1.95 (no decay, no trust ratio).
    opt = LARS(0.1, momentum=0.9, weight_decay=0.01, eta=0.001, epsilon=0.0)
    (w, b), = run_optimizer(opt, [[[3.0], [4.0]], [2.0]], [[[[0.6], [0.8]], [0.5]]])
    np.testing.assert_allclose(w.ravel(), [2.9997, 3.9996], rtol=0, atol=1e-6)
    np.testing.assert_allclose(b, [1.95], rtol=0, atol=1e-6)


def test_lars_matches_the_mlperf_formula_over_several_steps():
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(3, 3, 2, 4)), rng.normal(size=(4,)), np.zeros((5, 2)), rng.normal(size=(2, 2))]
    steps = []
    for i in range(4):
        grads = [rng.normal(size=w.shape) * 0.1 for w in weights]
        grads[3] = np.zeros((2, 2)) if i == 1 else grads[3]  # ||g|| = 0: trust ratio 1
        steps.append(grads)
    lr, m, wd, eta, eps = 2.0, 0.9, 5e-4, 0.001, 1e-3
    history = run_optimizer(LARS(lr, momentum=m, weight_decay=wd, eta=eta, epsilon=eps), weights, steps)
    expected_w = [np.array(w, np.float64) for w in weights]
    velocity = [np.zeros_like(w) for w in expected_w]
    for grads, got in zip(steps, history):
        for k, g in enumerate(grads):  # kernels adapted, the 1-D variable skipped; the zero kernel has ||w|| = 0
            expected_w[k], velocity[k] = mlperf_lars_reference(expected_w[k], g, velocity[k], lr, m, wd, eta, eps,
                                                               adapted=expected_w[k].ndim >= 2)
        for e, g in zip(expected_w, got):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-6)


def test_lars_learning_rate_schedule_is_read_every_step():
    schedule = PolynomialWithWarmup(1.0, warmup_steps=2, decay_steps=3, end=0.0, power=1.0)
    # lr per step: 0, 0.5, 1.0, then 1 - 1/3, 1 - 2/3
    opt = LARS(schedule, momentum=0.0, weight_decay=0.0, eta=1.0)
    history = run_optimizer(opt, [[2.0]], [[[1.0]]] * 5)  # 1-D: plain momentum SGD, w -= lr * g
    np.testing.assert_allclose([h[0][0] for h in history], np.cumsum([-0, -0.5, -1.0, -2 / 3, -1 / 3]) + 2.0,
                               atol=1e-6)


def test_momentum_sgd_is_tf1_momentum_with_l2_on_selected_variables():
    # a = m*a + (g + wd*w); w -= lr*a.  w=1, g=0.5, wd=0.1, m=0.9, lr=0.1:
    # step 1: a = 0.6, w = 0.94;  step 2: a = 0.54 + 0.5 + 0.094 = 1.134, w = 0.94 - 0.1134 = 0.8266
    opt = MomentumSGD(0.1, momentum=0.9, weight_decay=0.1, decay=lambda v: v.shape == (1, 1))
    history = run_optimizer(opt, [[[1.0]], [1.0]], [[[[0.5]], [0.5]]] * 2)
    np.testing.assert_allclose(history[0][0].ravel(), [0.94], atol=1e-6)
    np.testing.assert_allclose(history[1][0].ravel(), [0.8266], atol=1e-6)
    # not decayed (as batch-norm parameters): a = 0.5 -> w = 0.95; a = 0.95 -> w = 0.855
    np.testing.assert_allclose([history[0][1][0], history[1][1][0]], [0.95, 0.855], atol=1e-6)


def test_step_schedule_is_the_v05_reference():
    # 0.128 x 512/256, 5 warmup steps, x0.1 after steps 10 and 20 (tf.train.piecewise_constant: boundary inclusive)
    schedule = StepWithWarmup(0.256, warmup_steps=5, boundaries=[10, 20], rates=[1.0, 0.1, 0.01])
    lrs = [float(schedule(step)) for step in (0, 1, 4, 5, 10, 11, 20, 21, 1000)]
    np.testing.assert_allclose(lrs, [0.0, 0.0512, 0.2048, 0.256, 0.256, 0.0256, 0.0256, 0.00256, 0.00256],
                               rtol=1e-6)


def test_polynomial_schedule_is_the_lars_reference():
    # initial 10, warmup 4 steps, decay_steps 11 (= train 14 - warmup 4 + 1), power 2, end 1e-4
    schedule = PolynomialWithWarmup(10.0, warmup_steps=4, decay_steps=11, end=1e-4, power=2.0)
    expected = {0: 0.0, 2: 5.0, 4: 10.0, 5: (10 - 1e-4) * (1 - 1 / 11) ** 2 + 1e-4,
                9: (10 - 1e-4) * (1 - 5 / 11) ** 2 + 1e-4, 15: 1e-4, 100: 1e-4}
    for step, lr in expected.items():
        assert float(schedule(step)) == pytest.approx(lr, rel=1e-5, abs=1e-7), step


JAX_SCRIPT = """
import json, sys
import numpy as np, keras
from mlperf_keras.optimizers import LARS
opt = LARS(0.1, momentum=0.9, weight_decay=0.01, eta=0.001)
w, b = keras.Variable(np.array([[3.0], [4.0]], np.float32)), keras.Variable(np.array([2.0], np.float32))
opt.build([w, b])
# the stateless path the JAX train step uses (steps.py): variables in, new values out
(w1, b1), opt_vars = opt.stateless_apply([v.value for v in opt.variables],
                                         [np.array([[0.6], [0.8]], np.float32), np.array([0.5], np.float32)],
                                         [w.value, b.value])
print(json.dumps({"w": np.asarray(w1).ravel().tolist(), "b": np.asarray(b1).tolist(),
                  "tensorflow_imported": "tensorflow" in sys.modules}))
"""


def test_lars_runs_on_jax_without_tensorflow():
    pytest.importorskip("jax")
    proc = subprocess.run([sys.executable, "-c", JAX_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(result["w"], [2.9997, 3.9996], atol=1e-6)
    np.testing.assert_allclose(result["b"], [1.95], atol=1e-6)
    assert result["tensorflow_imported"] is False
