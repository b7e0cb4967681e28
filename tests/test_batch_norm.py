"""layers/batch_norm.py: one-pass statistics give Keras' batch norm (outputs, moving statistics, gradients), and
Keras' layer still routes its statistics through the method we replace (else the speed-up would silently vanish).
Inputs of 16 x 16 x 16 per channel (4,096 values) take the one-pass path; 1x1 maps keep Keras' statistics."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from mlperf_keras.layers.batch_norm import BatchNormalization


def pair(momentum=0.9, epsilon=1e-5):
    ours = BatchNormalization(momentum=momentum, epsilon=epsilon)
    theirs = keras.layers.BatchNormalization(momentum=momentum, epsilon=epsilon)
    for layer in (ours, theirs):
        layer.build((None, 16, 16, 5))
    rng = np.random.default_rng(0)
    gamma, beta = rng.normal(1, 0.3, 5).astype("float32"), rng.normal(0, 0.3, 5).astype("float32")
    for layer in (ours, theirs):
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    return ours, theirs


@pytest.mark.parametrize("offset", [0.0, 3.0])
def test_training_outputs_statistics_and_gradients_match_keras(offset):
    ours, theirs = pair()
    x = tf.constant(np.random.default_rng(1).normal(offset, 2.0, (16, 16, 16, 5)).astype("float32"))
    results = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * tf.range(y.shape[-1], dtype=y.dtype)) + tf.reduce_sum(y[:, :3] ** 2)
        dx, dgamma = tape.gradient(loss, [x, layer.gamma])
        results.append([y.numpy(), dx.numpy(), dgamma.numpy(), layer.moving_mean.numpy(),
                        layer.moving_variance.numpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    # Inference uses the moving statistics alone, identically.
    np.testing.assert_allclose(ours(x, training=False).numpy(), theirs(x, training=False).numpy(), atol=1e-5)


@pytest.mark.parametrize("shape", [(16, 16, 16, 5), (8, 1, 1, 5)])
def test_a_large_mean_keeps_its_variance(shape):
    """mean^2 / variance about 1e6: E[x^2] - E[x]^2 in float32 would lose the variance; the shifted one-pass
    statistics (4,096 values per channel) and Keras' two-pass ones (a 1x1 map, one value per image) keep it."""
    ours, theirs = pair()
    x = np.random.default_rng(3).normal(1000.0, 1.0, shape).astype("float32")
    ours(x, training=True)
    theirs(x, training=True)
    # After one step the moving variance is 0.9 * 1 + 0.1 * batch variance: compare the batch parts.
    expected = x.reshape(-1, 5).astype(np.float64).var(axis=0)
    np.testing.assert_allclose((ours.moving_variance.numpy() - 0.9) / 0.1, expected, rtol=1e-3)
    np.testing.assert_allclose((theirs.moving_variance.numpy() - 0.9) / 0.1, expected, rtol=1e-3)


def test_small_maps_keep_keras_statistics(monkeypatch):
    """Below 4,096 values per channel (SSD's last extra blocks) the statistics are Keras' own two-pass ones."""
    calls = []
    original = keras.layers.BatchNormalization._moments
    monkeypatch.setattr(keras.layers.BatchNormalization, "_moments",
                        lambda self, inputs, mask: calls.append(inputs.shape) or original(self, inputs, mask))
    layer = BatchNormalization()
    layer(np.ones((8, 3, 3, 4), "float32"), training=True)
    layer(np.ones((16, 16, 16, 4), "float32"), training=True)
    assert [tuple(s) for s in calls] == [(8, 3, 3, 4)]


def test_bfloat16_activations_get_float32_statistics():
    ours, theirs = pair()
    x = tf.cast(np.random.default_rng(2).normal(1.0, 1.5, (16, 16, 16, 5)), tf.bfloat16)
    np.testing.assert_allclose(tf.cast(ours(x, training=True), tf.float32).numpy(),
                               tf.cast(theirs(x, training=True), tf.float32).numpy(), atol=0.02)
    np.testing.assert_allclose(ours.moving_variance.numpy(), theirs.moving_variance.numpy(), rtol=1e-5)


def test_keras_still_computes_training_statistics_through_moments(monkeypatch):
    calls = []
    original = BatchNormalization._moments
    monkeypatch.setattr(BatchNormalization, "_moments",
                        lambda self, inputs, mask: calls.append(1) or original(self, inputs, mask))
    layer = BatchNormalization()
    layer(np.ones((4, 3), "float32"), training=True)
    assert calls == [1]


def test_the_layer_serializes():
    model = keras.Sequential([keras.Input((4,)), BatchNormalization(momentum=0.8, name="bn")])
    clone = keras.models.model_from_json(model.to_json())
    assert type(clone.get_layer("bn")) is BatchNormalization and clone.get_layer("bn").momentum == 0.8
