"""Dropout whose keep mask comes from counter-hash bits (mlperf_keras/counter_hash.py) instead of keras.random.

Same semantics as keras.layers.Dropout (a unit is kept with probability 1 - rate, to within 2^-32, and kept units
are scaled by 1 / (1 - rate); identity unless training), the same SeedGenerator state (a new seed each call, carried
in the layer's non-trainable state, so each step draws a fresh mask). The difference is the generator: the mask is
an elementwise function of each unit's index and the call's seed, which XLA fuses into the consumer, where Keras on
JAX draws threefry bits. On the H200 that was 6% of the Transformer-big training step (212,217 -> 225,997 target
tokens/s, benchmarks/RESULTS.md). TensorFlow and JAX draw the same mask for the same seed.
"""
from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from mlperf_keras.counter_hash import mix, random_bits


def keep_mask(shape, rate: float, seed):
    """Boolean tensor of `shape`, True with probability 1 - rate; seed: a [2] integer tensor (a SeedGenerator draw)."""
    seed = ops.cast(seed, "uint32")
    # Both keys depend on both seed words through the hash. Raw SeedGenerator states of neighbouring layers differ in
    # one low bit (seeds s and s + 1), and bits(i, s ^ 1, t) would equal bits(i ^ 1, s, t): two layers would drop
    # the same units, shuffled by one. Mixed keys leave only chance agreements between 32-bit states.
    key1 = mix(ops.bitwise_xor(seed[1], mix(seed[0])))
    key0 = mix(ops.bitwise_xor(seed[0], mix(key1)))
    if all(isinstance(d, int) for d in shape):  # always on JAX; under jit a traced size could not make an arange
        size = math.prod(shape)
        if size >= 2 ** 31:
            raise ValueError(f"dropout over {size:,} values: more than the int32 counters can number")
    else:  # TensorFlow graphs with unknown dimensions
        size = ops.prod(ops.convert_to_tensor(shape, dtype="int32"))
    counters = ops.reshape(ops.cast(ops.arange(size, dtype="int32"), "uint32"), shape)
    threshold = np.uint32(min(round(rate * 2.0 ** 32), 2 ** 32 - 1))
    return ops.greater_equal(random_bits(counters, key0, key1), threshold)


class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout (no noise_shape) drawing its mask from keep_mask()."""

    def __init__(self, rate, seed=None, **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError("layers.dropout.Dropout does not take noise_shape; use keras.layers.Dropout")
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        keep = keep_mask(ops.shape(inputs), self.rate, self.seed_generator.next())
        scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return ops.where(keep, inputs * scale, ops.zeros_like(inputs))


__all__ = ["Dropout", "keep_mask"]
