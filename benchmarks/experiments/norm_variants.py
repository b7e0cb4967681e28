"""Experiment: how much do the normalization layers' statistics cost? The same benchmark with Keras' statistics or
one-pass ones.

    KERAS_BACKEND=jax python benchmarks/experiments/norm_variants.py [--batch_norm=ours|keras] [--layer_norm=keras|one_pass] \
        -- <python -m mlperf_keras.benchmark flags>

Keras computes normalization statistics as jnp.mean and then jnp.var of a float32 copy: the variance re-reads the
activation after the mean is known, and the backward pass repeats that. One-pass statistics compute E[x] and
E[x^2] in one fused reduction (variance = E[x^2] - E[x]^2, clipped at 0).
- --batch_norm: `ours` is mlperf_keras.layers.batch_norm as shipped (one pass); `keras` puts Keras' two-pass
  statistics back into it.
- --layer_norm: `keras` is keras.layers.LayerNormalization as shipped; `one_pass` swaps keras.ops.moments, which
  its layer_normalization calls, for the one-pass version (experiment only: it changes every moments call).
Everything after `--` goes to python -m mlperf_keras.benchmark. Results: benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def one_pass_moments(x, axes, keepdims=False, synchronized=False):
    from keras import ops

    x32 = ops.cast(x, "float32")
    mean = ops.mean(x32, axis=axes, keepdims=keepdims)
    variance = ops.maximum(ops.mean(ops.square(x32), axis=axes, keepdims=keepdims) - ops.square(mean), 0.0)
    return ops.cast(mean, x.dtype), ops.cast(variance, x.dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_norm", choices=("ours", "keras"), default="ours")
    parser.add_argument("--layer_norm", choices=("keras", "one_pass"), default="keras")
    args, rest = parser.parse_known_args()
    import keras

    if args.batch_norm == "keras":
        from mlperf_keras.layers import batch_norm

        batch_norm.BatchNormalization._moments = keras.layers.BatchNormalization._moments
    if args.layer_norm == "one_pass":
        from keras.src.ops import nn

        nn.moments = one_pass_moments
    from absl import app

    from mlperf_keras import benchmark

    app.run(benchmark.main, argv=[sys.argv[0]] + [a for a in rest if a != "--"])


if __name__ == "__main__":
    main()
