"""NeuMF's initial weights (workloads/ncf.py) against the reference neumf.py (mlcommons/training
fe17e837ed12974d15c86d5173fe8f2c188434d5, recommendation/pytorch/neumf.py): every layer its own random stream, on
TensorFlow and on JAX; the reference's distributions; PyTorch's default biases."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from tests.conftest import ROOT

HPARAMS = {"num_users": 300, "num_items": 200, "mf_dim": 16, "mlp_layers": (32, 16, 8)}


def initial_weights(seed=3):
    """{variable path: float64 array} of a small NeuMF built on the active backend."""
    import types

    from mlperf_keras.workloads.ncf import NCF

    workload = NCF()
    hp = {**workload.reference_hparams("0.5"), **HPARAMS}
    model = workload.build_model(types.SimpleNamespace(hparams=hp, seed=seed))
    return {v.path: np.asarray(v.numpy() if hasattr(v, "numpy") else v.value, np.float64) for v in model.weights}


def shared_value_report(weights):
    """For every pair of variables, the fraction of the smaller one's values that also occur in the other; and per
    variable the fraction of its values that repeat inside it. A layer seeded like another repeats all of them;
    independent streams share only chance float32 collisions (JAX's normals take about 2^23 distinct values, so a
    few among thousands)."""
    names = sorted(weights)
    pairs = {}
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            x, y = weights[names[a]].ravel(), weights[names[b]].ravel()
            small, large = (x, y) if x.size <= y.size else (y, x)
            pairs[f"{names[a]} ~ {names[b]}"] = float(np.isin(small, large).mean())
    within = {name: 1 - np.unique(w).size / w.size for name, w in weights.items()}
    return pairs, within


def check_independent(weights):
    pairs, within = shared_value_report(weights)
    assert max(pairs.values()) < 0.01, {k: v for k, v in pairs.items() if v >= 0.01}
    assert max(within.values()) < 0.01, within


def test_every_layer_has_its_own_stream_on_tensorflow():
    weights = initial_weights()
    check_independent(weights)
    # The old defect exactly: mf_item's table was mf_user's first rows; the final kernel a scaled slice of mlp_0's.
    assert not np.allclose(weights["mf_item_embed/embeddings"], weights["mf_user_embed/embeddings"][:200])


def test_initial_distributions_follow_the_reference():
    """Embeddings N(0, 0.01); MLP kernels U(+-sqrt(6/(fan_in+fan_out))); final kernel U(+-sqrt(3/fan_in)); biases
    U(+-1/sqrt(fan_in)) (nn.Linear's default, which neumf.py does not override)."""
    weights = initial_weights()
    for name in ("mf_user_embed", "mf_item_embed", "mlp_user_embed", "mlp_item_embed"):
        table = weights[f"{name}/embeddings"]
        assert abs(table.mean()) < 0.001 and abs(table.std() - 0.01) < 0.0007, (name, table.mean(), table.std())
    layers = HPARAMS["mlp_layers"]
    shapes = [(f"mlp_{i}", layers[i], layers[i + 1], np.sqrt(6 / (layers[i] + layers[i + 1])))
              for i in range(len(layers) - 1)]
    fan_in_final = layers[-1] + HPARAMS["mf_dim"]
    shapes.append(("final", fan_in_final, 1, np.sqrt(3 / fan_in_final)))
    for name, fan_in, fan_out, limit in shapes:
        kernel, bias = weights[f"{name}/kernel"], weights[f"{name}/bias"]
        assert kernel.shape == (fan_in, fan_out) and np.abs(kernel).max() <= limit
        assert np.abs(kernel).max() > 0.8 * limit, (name, np.abs(kernel).max(), limit)   # uniform up to the bound
        bound = 1 / np.sqrt(fan_in)
        assert bias.shape == (fan_out,) and np.abs(bias).max() <= bound and np.all(bias != 0), (name, bias)


def test_the_seed_determines_the_weights():
    a, b, c = initial_weights(seed=3), initial_weights(seed=3), initial_weights(seed=4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not any(np.array_equal(a[k], c[k]) for k in a)


JAX_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from tests.test_ncf_model import initial_weights, shared_value_report
pairs, within = shared_value_report(initial_weights())
import keras
print(json.dumps({{"backend": keras.backend.backend(), "pairs": pairs, "within": within}}))
"""


def test_every_layer_has_its_own_stream_on_jax():
    proc = subprocess.run([sys.executable, "-c", JAX_CHILD.format(root=ROOT)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["backend"] == "jax"
    assert max(report["pairs"].values()) < 0.01, report["pairs"]
    assert max(report["within"].values()) < 0.01, report["within"]
