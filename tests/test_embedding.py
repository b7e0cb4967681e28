"""Embedding tables read in float32 under mixed bf16 (layers/embedding.py, attention.SharedEmbedding): a row looked
up 65,536 times gets the float32 sum of its 65,536 gradients, on TensorFlow and on JAX (where Keras' Embedding
sums them in bf16 and stops at 256)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

LOOKUPS = 65_536


def summed_gradient_of_row_one(kind: str) -> float:
    """d sum(layer(ids)) / d table[1, 0] for ids all 1, in a functional model under mixed_bfloat16."""
    import keras
    import numpy as np

    from mlperf_keras.layers.attention import SharedEmbedding
    from mlperf_keras.layers.embedding import Embedding

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        ids = keras.Input((), dtype="int32")
        layer = Embedding(4, 8, name="e") if kind == "embedding" else SharedEmbedding(4, 16, name="e")
        model = keras.Model(ids, layer(ids))
        x = np.ones(LOOKUPS, np.int32)
        if keras.backend.backend() == "jax":
            import jax

            def total(table):
                return jax.numpy.sum(model.stateless_call([table], [], x)[0].astype("float32"))

            grad = jax.grad(total)(layer.embeddings.value)
        else:
            import tensorflow as tf

            with tf.GradientTape() as tape:
                total = tf.reduce_sum(tf.cast(model(x), tf.float32))
            grad = tf.convert_to_tensor(tape.gradient(total, layer.embeddings.value))
        return float(np.asarray(grad, np.float32)[1, 0])
    finally:
        keras.mixed_precision.set_global_policy("float32")


EXPECTED = {"embedding": LOOKUPS, "shared": LOOKUPS * 16 ** 0.5}   # SharedEmbedding scales by sqrt(d_model)


@pytest.mark.parametrize("kind", ["embedding", "shared"])
def test_tensorflow(kind):
    assert summed_gradient_of_row_one(kind) == pytest.approx(EXPECTED[kind], rel=1e-3)


@pytest.mark.parametrize("kind", ["embedding", "shared"])
def test_jax(kind):
    code = f"from tests.test_embedding import summed_gradient_of_row_one as f; print(f({kind!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) == pytest.approx(EXPECTED[kind], rel=1e-3)
