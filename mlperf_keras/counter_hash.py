"""Counter-based random bits in keras.ops: bits(i, key) = mix(mix(i ^ key0) ^ key1), mix being the lowbias32 integer
hash (Chris Wellons' hash-prospector: two xor-shift-multiply rounds, a bijection on uint32 with low bias).

Why hand-written rather than keras.random: the bits are a pure elementwise function of an index and a runtime key,
so (1) they can be traced with keys that change every call on both backends (keras.random on TensorFlow takes only
Python ints or SeedGenerators as seeds), (2) TensorFlow and JAX give the same bits, and (3) XLA fuses them into
whatever consumes them. jax.random's threefry (what Keras draws from on JAX) costs about 20 rounds per pair of
words and its dropout masks took 6% of the Transformer's training step on an H200 (benchmarks/RESULTS.md).
Users: the NCF epoch built on the device (inputs/ncf_device.py) and layers/dropout.py.
"""
from __future__ import annotations

import numpy as np

MIX_1, MIX_2, GOLDEN = 0x7FEB352D, 0x846CA68B, 0x9E3779B9


def mix(x):
    """lowbias32 of a uint32 tensor."""
    from keras import ops

    x = ops.bitwise_xor(x, ops.right_shift(x, np.uint32(16)))
    x = ops.multiply(x, np.uint32(MIX_1))
    x = ops.bitwise_xor(x, ops.right_shift(x, np.uint32(15)))
    x = ops.multiply(x, np.uint32(MIX_2))
    return ops.bitwise_xor(x, ops.right_shift(x, np.uint32(16)))


def random_bits(counters, key0, key1):
    """32 random bits per uint32 counter, a pure function of (counter, key0, key1)."""
    from keras import ops

    return mix(ops.bitwise_xor(mix(ops.bitwise_xor(counters, key0)), key1))


__all__ = ["MIX_1", "MIX_2", "GOLDEN", "mix", "random_bits"]
