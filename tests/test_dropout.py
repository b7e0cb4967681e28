"""layers/dropout.py: Keras' dropout semantics from each generator. "keras" (the closed default) is exactly
keras.layers.Dropout; "rbg" is jax.random's rbg generator; "hash" (open division) gives the same masks on TensorFlow
and JAX, inside compiled functions too. None correlates calls or layers seeded s and s + 1."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

SHAPE = (16, 33, 256)   # 135,168 units: a binomial keep count is within 0.25% of its mean at 3 sigma


def masks_of(seeds=(2, 3), calls=2, compiled=False, generator="hash"):
    """Keep masks (NumPy bool) of `calls` successive calls of one Dropout(0.1) layer per seed."""
    import keras
    from keras import ops

    from mlperf_keras.layers.dropout import Dropout

    x = np.ones(SHAPE, np.float32)
    out = []
    for seed in seeds:
        layer = Dropout(0.1, seed=seed, generator=generator)
        call = lambda v: layer(v, training=True)  # noqa: E731
        if compiled and keras.backend.backend() == "jax":
            import jax

            def pure(state, v):
                y, state = layer.stateless_call([], state, v, training=True)
                return y, state

            state = [w.value for w in layer.non_trainable_variables]
            pure = jax.jit(pure)
            for _ in range(calls):
                y, state = pure(state, x)
                out.append(np.asarray(y) != 0)
            continue
        if compiled:
            import tensorflow as tf

            call = tf.function(call, input_signature=[tf.TensorSpec([None, None, SHAPE[2]], tf.float32)],
                               jit_compile=True)
        for _ in range(calls):
            out.append(ops.convert_to_numpy(call(x)) != 0)
    return out


def checksum(masks) -> str:
    return ",".join(hashlib.sha1(np.packbits(m).tobytes()).hexdigest()[:16] for m in masks)


def check_statistics(generator):
    """Keep rate, scaling, identity outside training, and independence across calls and neighbouring seeds."""
    from keras import ops

    from mlperf_keras.layers.dropout import Dropout

    layer = Dropout(0.1, seed=5, generator=generator)
    y = ops.convert_to_numpy(layer(np.ones(SHAPE, np.float32), training=True))
    kept = y != 0
    assert abs(kept.mean() - 0.9) < 3 * np.sqrt(0.9 * 0.1 / kept.size)
    np.testing.assert_allclose(y[kept], 1 / 0.9, rtol=1e-6)
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(np.ones(SHAPE, np.float32), training=False)), 1.0)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(Dropout(0.0, generator=generator)(np.ones(SHAPE, np.float32), training=True)), 1.0)
    a1, a2, b1, b2 = masks_of(seeds=(2, 3), calls=2, generator=generator)
    independent = 0.9 ** 2 + 0.1 ** 2          # P(two independent units agree)
    tolerance = 4 * np.sqrt(independent * (1 - independent) / a1.size)
    for other in (a2, b1, b2):
        assert abs((a1 == other).mean() - independent) < tolerance
    # Seeds 2 and 3 differ in one bit: unmixed keys would give layer 3 layer 2's mask with neighbours swapped.
    swapped = np.arange(a1.size) ^ 1
    assert abs((b1.reshape(-1) == a1.reshape(-1)[swapped]).mean() - independent) < tolerance
    return "ok"


@pytest.mark.parametrize("generator", ["keras", "hash"])
def test_keeps_one_minus_rate_independently_across_calls_and_neighbouring_seeds(generator):
    check_statistics(generator)


def test_rbg_and_keras_statistics_on_jax():
    code = ("from tests.test_dropout import check_statistics; "
            "print(check_statistics('rbg'), check_statistics('keras'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok ok"


def test_the_default_is_keras_stock_dropout_and_hash_is_keep_mask():
    """Closed default: the same numbers as keras.layers.Dropout with the same seed (the framework's generator)."""
    import keras
    from keras import ops

    from mlperf_keras.layers.dropout import Dropout, keep_mask

    x = np.random.default_rng(0).normal(size=(4, 9, 32)).astype(np.float32)
    ours, stock = Dropout(0.3, seed=11), keras.layers.Dropout(0.3, seed=11)
    assert ours.generator == "keras"
    for _ in range(2):  # the second call draws from the advanced seed state on both
        np.testing.assert_array_equal(ops.convert_to_numpy(ours(x, training=True)),
                                      ops.convert_to_numpy(stock(x, training=True)))
    hashed = Dropout(0.3, seed=11, generator="hash")
    expected_keep = ops.convert_to_numpy(keep_mask(x.shape, 0.3, np.array([11, 0], np.uint32)))
    np.testing.assert_array_equal(ops.convert_to_numpy(hashed(x, training=True)) != 0, expected_keep)
    with pytest.raises(ValueError, match="generator"):
        Dropout(0.1, generator="philox")


def test_hash_compiled_graph_with_unknown_dimensions_draws_the_eager_masks():
    assert checksum(masks_of(compiled=True)) == checksum(masks_of(compiled=False))


def test_hash_on_jax_draws_the_tensorflow_masks_also_under_jit():
    code = ("from tests.test_dropout import masks_of, checksum; "
            "print(checksum(masks_of(compiled=False))); print(checksum(masks_of(compiled=True)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    eager, jitted = proc.stdout.strip().splitlines()[-2:]
    assert eager == jitted == checksum(masks_of())


def test_refuses_tensors_its_counters_cannot_number():
    from mlperf_keras.layers.dropout import keep_mask

    with pytest.raises(ValueError, match="int32 counters"):
        keep_mask((2 ** 16, 2 ** 15), 0.1, np.array([1, 2], np.uint32))


def test_refuses_noise_shape():
    from mlperf_keras.layers.dropout import Dropout

    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.1, noise_shape=(1, 1, 256))
