"""Batch normalization whose training statistics read each large activation once.

Keras' BatchNormalization computes its batch statistics as the mean and then the variance of a float32 copy
(jnp.mean, then jnp.var on JAX; tf.nn.moments on TensorFlow): the variance re-reads the activation after the mean
is known, and the backward pass repeats that. Batch norm is memory-bound, so on a fast GPU those extra passes cost
a visible share of a ResNet step. Here, where a channel holds at least ONE_PASS_MIN_VALUES values per batch, both
statistics come from one fused float32 reduction over the shifted values d = x - K: mean = K + E[d], variance =
E[d^2] - E[d]^2 (clipped at 0), the "shifted data" one-pass algorithm. K is each channel's mean over the batch's
first example (a constant for the gradient, which the variance does not depend on; it reads 1/batch of the data).
Without the shift, E[x^2] - E[x]^2 cancels catastrophically where a channel's mean is large against its spread
(tests/test_batch_norm.py). Smaller maps keep Keras' two-pass statistics: they cost nothing measurable.

Used for ResNet-50 only (layers/resnet.BlockOptions.one_pass_batch_norm). SSD keeps Keras' layer: its tiny
overfitting test (tests/test_ssd.py, 8 images, 40 steps, TF on the CPU, not bit-reproducible from run to run)
passed its mAP bar in 4 of 6 runs with Keras' statistics and in 1 of 14 with one-pass ones (four variants), with
the same loss curves and statistics that agreed to 1e-6. No cause was found, so SSD is not switched; ResNet-50's
reductions are all large (12,544 to 802,816 values per channel at batch 256) and it has no such test here.

Measured (benchmarks/experiments/norm_variants.py, one H200, JAX, bf16, ResNet-50 batch 256, 2026-11-29): Keras' statistics
6,573 images/s, one-pass 7,201, torchvision + torch.compile 6,815 in the same call. That was the unshifted one-pass
version on every layer; the shift (one small reduction over the first example and a subtraction inside the fused
reduction) and the two-pass small maps were added afterwards and were not re-measured on the GPU.
Everything else (momentum, epsilon, moving statistics, inference, variable names) is Keras' layer unchanged.
"""
from __future__ import annotations

import keras
from keras import ops


ONE_PASS_MIN_VALUES = 4096   # values per channel per batch: ResNet-50's smallest map at batch 32 holds 1,568


def _values_per_channel(shape, axes) -> int:
    count = 1
    for axis in axes:
        count *= int(shape[axis]) if shape[axis] is not None else ONE_PASS_MIN_VALUES
    return count


@keras.saving.register_keras_serializable(package="mlperf_keras")
class BatchNormalization(keras.layers.BatchNormalization):
    def _moments(self, inputs, mask):
        axes = self._reduction_axes
        if mask is not None or _values_per_channel(inputs.shape, axes) < ONE_PASS_MIN_VALUES:
            return super()._moments(inputs, mask)
        x = ops.cast(inputs, "float32")
        # The shift: each channel's mean over the first example. (A single corner value would sit in the
        # zero-padding border of a convolution's output, often several standard deviations from the mean.)
        first = x[tuple(slice(0, 1) if axis == 0 else slice(None) for axis in range(len(x.shape)))]
        shift = ops.stop_gradient(ops.mean(first, axis=axes, keepdims=True))
        shifted = x - shift
        mean_shifted = ops.mean(shifted, axis=axes)
        variance = ops.maximum(ops.mean(ops.square(shifted), axis=axes) - ops.square(mean_shifted), 0.0)
        return ops.reshape(shift, mean_shifted.shape) + mean_shifted, variance
