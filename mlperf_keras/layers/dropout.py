"""keras.layers.Dropout with a choice of random-bit generator (the `generator` argument, hparam dropout_rng).

Every generator has keras.layers.Dropout's semantics (a unit is kept with probability 1 - rate and kept units are
scaled by 1 / (1 - rate); identity unless training) and its SeedGenerator state (a new [seed, counter] each call,
carried in the layer's non-trainable state, so each step draws a fresh mask). They differ in where the bits come from:
- "keras" (the default): keras.random.dropout itself, a framework stock generator: jax.random's default threefry on
  JAX, TensorFlow's stateless ops (Philox) on TensorFlow. Closed division.
- "rbg" (JAX only): jax.random.bernoulli with a key of jax.random's "rbg" implementation (XLA's RngBitGenerator,
  Philox on GPU), its key data [seed, counter, seed, counter] from the SeedGenerator draw, as jax.random.key(seed,
  impl="rbg") doubles a threefry key (jax/_src/prng.py, _rbg_seed). A stock jax.random generator: closed division.
  ("unsafe_rbg" draws the same bits: it differs from rbg only in split and fold_in, which one mask never calls.)
- "hash": keep_mask() below, counter-hash bits (mlperf_keras/counter_hash.py), an elementwise function of each unit's
  index and the call's seed that XLA fuses into the consumer; TensorFlow and JAX draw the same mask. Not a framework
  generator: open division only. On the H200 it was 6% faster than "keras" on JAX for the Transformer-big step
  (212,217 -> 225,997 target tokens/s, benchmarks/RESULTS.md); rbg was not measured against it.
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


GENERATORS = ("keras", "rbg", "hash")
STOCK_GENERATORS = ("keras", "rbg")   # framework generators: allowed in the closed division


def check_generator(generator: str, backend: str, closed_division: bool) -> None:
    """Raise config.ConfigError when `generator` is unknown, not built for `backend`, or not allowed in the division."""
    from mlperf_keras.config import ConfigError

    if generator not in GENERATORS:
        raise ConfigError(f"dropout_rng={generator!r}: choose {', '.join(GENERATORS)}")
    if generator == "rbg" and backend != "jax":
        raise ConfigError("dropout_rng=rbg is jax.random's rbg generator: JAX backend only (keras is TensorFlow's "
                          "stock generator)")
    if generator not in STOCK_GENERATORS and closed_division:
        raise ConfigError(f"dropout_rng={generator} is not a framework random generator: closed division uses "
                          f"{' or '.join(STOCK_GENERATORS)}; pass --division=open to use it")


def rbg_keep_mask(shape, rate: float, seed):
    """Boolean mask of `shape`, True with probability 1 - rate, from jax.random's rbg generator; seed: [2] ints."""
    import jax
    import jax.numpy as jnp

    seed = jnp.asarray(seed).astype(jnp.uint32)
    key = jax.random.wrap_key_data(jnp.concatenate([seed, seed]), impl="rbg")
    return jax.random.bernoulli(key, 1.0 - rate, tuple(shape))


class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout (no noise_shape) drawing its mask from `generator`: "keras", "rbg" or "hash"."""

    def __init__(self, rate, seed=None, generator: str = "keras", **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError("layers.dropout.Dropout does not take noise_shape; use keras.layers.Dropout")
        if generator not in GENERATORS:
            raise ValueError(f"generator={generator!r}: expected one of {', '.join(GENERATORS)}")
        super().__init__(rate, seed=seed, **kwargs)
        self.generator = generator

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.generator == "keras":
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        if self.generator == "rbg":
            keep = rbg_keep_mask(ops.shape(inputs), self.rate, seed)
        else:
            keep = keep_mask(ops.shape(inputs), self.rate, seed)
        scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return ops.where(keep, inputs * scale, ops.zeros_like(inputs))

    def get_config(self):
        return {**super().get_config(), "generator": self.generator}


__all__ = ["GENERATORS", "STOCK_GENERATORS", "check_generator", "Dropout", "keep_mask", "rbg_keep_mask"]
