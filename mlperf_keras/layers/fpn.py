"""Feature pyramid network (keras.layers): P2-P6 from ResNet stages C2-C5.

As the v0.6/v0.7 reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/modeling/backbone/fpn.py and make_layers.py `conv_with_kaiming_uniform`):
- a 1x1 lateral convolution ("inner") and a 3x3 output convolution ("layer") per level, 256 channels, both with bias;
  kernels kaiming_uniform_(a=1) (uniform, limit sqrt(3 / fan_in): Keras' VarianceScaling(1, fan_in, uniform)),
  biases 0;
- top-down: the coarser merged map is upsampled x2 by nearest neighbour (F.interpolate(scale_factor=2, "nearest"))
  and added to the finer lateral; no activation anywhere;
- P6 is P5 subsampled by a 1x1 max pool of stride 2 (LastLevelMaxPool: F.max_pool2d(x, 1, 2, 0)).

Layer names: fpn_inner2..5 and fpn_layer2..5 (the level, not the reference's 1-based fpn_inner1..4).
Input sizes must be multiples of 32 so the x2 upsampling meets the finer map exactly (the reference pads to 32,
SIZE_DIVISIBILITY).
"""
from __future__ import annotations

import keras
from keras import layers

FPN_CHANNELS = 256


def kaiming_uniform_a1():
    """torch.nn.init.kaiming_uniform_(w, a=1): gain 1, limit sqrt(3 / fan_in); a fresh instance per layer."""
    return keras.initializers.VarianceScaling(scale=1.0, mode="fan_in", distribution="uniform")


def fpn(stages: list, channels: int = FPN_CHANNELS, name: str = "fpn") -> list:
    """[C2, C3, C4, C5] (strides 4-32) -> [P2, P3, P4, P5, P6] (strides 4-64), each with `channels` channels."""
    first_level = 2
    inner = [layers.Conv2D(channels, 1, kernel_initializer=kaiming_uniform_a1(), bias_initializer="zeros",
                           name=f"{name}_inner{first_level + i}")(c) for i, c in enumerate(stages)]
    merged = [None] * len(stages)
    merged[-1] = inner[-1]
    for i in range(len(stages) - 2, -1, -1):
        up = layers.UpSampling2D(2, interpolation="nearest", name=f"{name}_up{first_level + i + 1}")(merged[i + 1])
        merged[i] = layers.Add(name=f"{name}_merge{first_level + i}")([inner[i], up])
    outputs = [layers.Conv2D(channels, 3, padding="same", kernel_initializer=kaiming_uniform_a1(),
                             bias_initializer="zeros", name=f"{name}_layer{first_level + i}")(m)
               for i, m in enumerate(merged)]
    outputs.append(layers.MaxPooling2D(1, strides=2, name=f"{name}_p{first_level + len(stages)}")(outputs[-1]))
    return outputs


__all__ = ["FPN_CHANNELS", "fpn", "kaiming_uniform_a1"]
