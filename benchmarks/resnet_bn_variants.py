"""Experiment: ResNet-50 with Keras' own batch-norm statistics against ours (layers/batch_norm.py), same benchmark.

    KERAS_BACKEND=jax python benchmarks/resnet_bn_variants.py --variant=keras|ours -- <mlperf_keras.benchmark flags>

Keras' BatchNormalization computes its training statistics with jnp.mean and jnp.var on a float32 copy: two passes
over every activation (the variance re-reads the input after the mean), and the same again in the backward pass.
mlperf_keras.layers.batch_norm computes E[x] and E[x^2] in one fused reduction. `ours` runs python -m
mlperf_keras.benchmark as shipped; `keras` first puts Keras' statistics back into our layer. Everything after `--`
goes to python -m mlperf_keras.benchmark. On one H200 (JAX, bf16, batch 256, 2026-11-29): keras 6,573 images/s,
ours 7,201, torchvision's resnet50 with torch.compile 6,815 (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=("keras", "ours"), required=True)
    args, rest = parser.parse_known_args()
    if args.variant == "keras":
        import keras

        from mlperf_keras.layers import batch_norm

        batch_norm.BatchNormalization._moments = keras.layers.BatchNormalization._moments
    from absl import app

    from mlperf_keras import benchmark

    app.run(benchmark.main, argv=[sys.argv[0]] + [a for a in rest if a != "--"])


if __name__ == "__main__":
    main()
