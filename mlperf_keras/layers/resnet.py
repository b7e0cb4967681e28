"""ResNet building blocks (keras.layers only, so they run on TensorFlow and JAX), shared by the vision workloads.

As the MLPerf reference (mlcommons/training image_classification/tensorflow/official/resnet/resnet_model.py):
- ResNet v1 with the v1.5 change: in a bottleneck block the stride sits on the 3x3 convolution, not the first 1x1;
- convolutions have no bias; a strided convolution pads explicitly by (k-1)//2 before and k-1-(k-1)//2 after
  ("fixed padding": the output size does not depend on the input size being even), stride 1 uses "same";
- kernels: variance scaling, scale 1, fan_in, truncated normal (tf.variance_scaling_initializer's defaults);
- batch norm after every convolution with momentum 0.9, epsilon 1e-5 (the reference's _BATCH_NORM_DECAY and
  _BATCH_NORM_EPSILON), for ResNet-50 with one-pass statistics (layers/batch_norm.py); optionally the last batch
  norm of each residual block starts with gamma 0 ("zero-init residual"), which the reference does not do (off by
  default);
- the stem is a 7x7/2 convolution, batch norm, ReLU and a 3x3/2 max pool ("same" padding), stages of blocks with
  strides 1, 2, 2, 2, and a projection shortcut (1x1 convolution + batch norm) on the first block of each stage.
  torchvision's ResNet (the SSD reference's backbone) differs only in that pool: nn.MaxPool2d(3, 2, padding=1) pads
  one pixel on both sides where "same" pads 0 before and 1 after on an even size, so its windows sit one pixel
  earlier; `pool_padding="symmetric"` pools like torchvision (every other padding already agrees: fixed padding
  k // 2 on both sides for odd k is torch's padding=k // 2, and "same" at stride 1 pads 1 on both sides for 3x3).

ResNet-50 (bottleneck blocks 3-4-6-3, width 64) with a 1000-way dense head has 25,557,032 trainable parameters.
SSD (ResNet-34: basic blocks 3-4-6-3) and Mask R-CNN (ResNet-50 stages as FPN inputs) build on `backbone()`.

Mask R-CNN's backbone is the MSRA (Caffe2) ResNet-50 of the v0.6/v0.7 reference (mlcommons/training
0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/maskrcnn_benchmark/modeling/backbone/resnet.py,
layers/batch_norm.py), selected by three options that leave every default unchanged:
- `BlockOptions.stride_in_1x1`: the stride on a bottleneck's first 1x1 convolution (and the shortcut), not the 3x3
  (Bottleneck: `stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)`);
- `BlockOptions.frozen_batch_norm`: every batch norm is a fixed per-channel affine `x * scale + bias`
  (FrozenBatchNorm2d: weight * running_var.rsqrt(), no epsilon; Detectron's R-50.pkl stores the folded scale and
  bias), two non-trainable weights per layer named `scale` and `bias`;
- `backbone(frozen_stages=k)`: the stem and the first k - 1 stages are not trained (the reference's
  FREEZE_CONV_BODY_AT: 2 freezes the stem and res2), their layers built with `trainable=False`.
"""
from __future__ import annotations

import dataclasses

import keras
from keras import layers

from mlperf_keras.layers.batch_norm import BatchNormalization

RESNET_BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    bn_momentum: float = 0.9
    bn_epsilon: float = 1e-5
    zero_init_residual: bool = False
    # layers/batch_norm.py's one-pass statistics (ResNet-50); off: Keras' own layer (SSD, where the tiny overfitting
    # test did worse with them, see that module).
    one_pass_batch_norm: bool = False
    # MSRA / Caffe2 ResNet (Mask R-CNN): the stride on the first 1x1 convolution of a bottleneck.
    stride_in_1x1: bool = False
    # Mask R-CNN: batch norm as a fixed affine (FrozenAffine), never updated.
    frozen_batch_norm: bool = False
    # False: the layers built with these options are not trained (frozen stages).
    trainable: bool = True


def _kernel_init():
    # A fresh instance per layer: one seeded instance reused would give every layer the same values.
    return keras.initializers.VarianceScaling(scale=1.0, mode="fan_in", distribution="truncated_normal")


def conv(x, filters: int, kernel: int, strides: int, name: str, trainable: bool = True):
    """Convolution without bias, with the reference's fixed padding when strided."""
    if strides > 1:
        total = kernel - 1
        if total:
            x = layers.ZeroPadding2D(((total // 2, total - total // 2),) * 2, name=f"{name}_pad")(x)
        padding = "valid"
    else:
        padding = "same"
    return layers.Conv2D(filters, kernel, strides=strides, padding=padding, use_bias=False,
                         kernel_initializer=_kernel_init(), trainable=trainable, name=name)(x)


class FrozenAffine(layers.Layer):
    """Batch norm frozen as a fixed per-channel affine, `x * scale + bias` (the reference's FrozenBatchNorm2d with
    running mean 0 and variance 1, the form Detectron's weights come in: no epsilon). Both weights are
    non-trainable: they count in `count_params()` but not in `trainable_weights`."""

    def build(self, input_shape):
        channels = input_shape[-1]
        self.scale = self.add_weight(shape=(channels,), initializer="ones", trainable=False, name="scale")
        self.bias = self.add_weight(shape=(channels,), initializer="zeros", trainable=False, name="bias")

    def call(self, x):
        return x * keras.ops.cast(self.scale, x.dtype) + keras.ops.cast(self.bias, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape


def batch_norm(x, name: str, options: BlockOptions, zero_gamma: bool = False):
    if options.frozen_batch_norm:
        return FrozenAffine(name=name)(x)
    layer = BatchNormalization if options.one_pass_batch_norm else layers.BatchNormalization
    return layer(momentum=options.bn_momentum, epsilon=options.bn_epsilon,
                 gamma_initializer="zeros" if zero_gamma else "ones", trainable=options.trainable, name=name)(x)


def conv_bn(x, filters: int, kernel: int, strides: int, name: str, options: BlockOptions, relu: bool = True,
            zero_gamma: bool = False):
    x = conv(x, filters, kernel, strides, f"{name}_conv", trainable=options.trainable)
    x = batch_norm(x, f"{name}_bn", options, zero_gamma)
    return layers.ReLU(name=f"{name}_relu")(x) if relu else x


def bottleneck_block(x, filters: int, strides: int, name: str, options: BlockOptions, projection: bool):
    """1x1 (filters) -> 3x3 (filters, stride: v1.5) -> 1x1 (4 x filters), plus the shortcut, then ReLU; with
    options.stride_in_1x1 the stride moves to the first 1x1 (MSRA)."""
    stride_1x1, stride_3x3 = (strides, 1) if options.stride_in_1x1 else (1, strides)
    shortcut = conv_bn(x, 4 * filters, 1, strides, f"{name}_proj", options, relu=False) if projection else x
    y = conv_bn(x, filters, 1, stride_1x1, f"{name}_1", options)
    y = conv_bn(y, filters, 3, stride_3x3, f"{name}_2", options)
    y = conv_bn(y, 4 * filters, 1, 1, f"{name}_3", options, relu=False, zero_gamma=options.zero_init_residual)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([y, shortcut]))


def basic_block(x, filters: int, strides: int, name: str, options: BlockOptions, projection: bool):
    """3x3 (filters, stride) -> 3x3 (filters), plus the shortcut, then ReLU (ResNet-18/34)."""
    shortcut = conv_bn(x, filters, 1, strides, f"{name}_proj", options, relu=False) if projection else x
    y = conv_bn(x, filters, 3, strides, f"{name}_1", options)
    y = conv_bn(y, filters, 3, 1, f"{name}_2", options, relu=False, zero_gamma=options.zero_init_residual)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([y, shortcut]))


POOL_PADDINGS = ("same", "symmetric")


def stem(x, width: int, options: BlockOptions, pool_padding: str = "same"):
    """7x7/2 convolution, batch norm, ReLU, 3x3/2 max pool; pool_padding "same" (TF reference) or "symmetric"
    (torchvision: one pixel on both sides)."""
    if pool_padding not in POOL_PADDINGS:
        raise ValueError(f"pool_padding must be one of {POOL_PADDINGS}, not {pool_padding!r}")
    x = conv_bn(x, width, 7, 2, "stem", options)
    if pool_padding == "symmetric":
        # torch pads a max pool with -inf; after the ReLU every value is >= 0 and every window holds a real pixel,
        # so zero padding gives the same maximum.
        x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
        return layers.MaxPooling2D(3, strides=2, padding="valid", name="stem_pool")(x)
    return layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)


def stage(x, block, filters: int, blocks: int, strides: int, name: str, options: BlockOptions):
    """One stage: the first block strides and projects (when the shape changes), the rest keep the shape."""
    expansion = 4 if block is bottleneck_block else 1
    projection = strides != 1 or x.shape[-1] != filters * expansion
    x = block(x, filters, strides, f"{name}_block1", options, projection)
    for i in range(1, blocks):
        x = block(x, filters, 1, f"{name}_block{i + 1}", options, False)
    return x


def backbone(x, block_sizes=(3, 4, 6, 3), bottleneck: bool = True, width: int = 64,
             strides=(1, 2, 2, 2), options: BlockOptions = BlockOptions(), pool_padding: str = "same",
             frozen_stages: int = 0) -> list:
    """The stem and the stages on x; returns each stage's output (strides 4, 8, 16, 32 with the default strides).

    frozen_stages: 0 trains everything; k >= 1 freezes the stem and the first k - 1 stages (the reference's
    FREEZE_CONV_BODY_AT numbering: stem = 1, res2 = 2).
    """
    frozen = dataclasses.replace(options, trainable=False)
    x = stem(x, width, frozen if frozen_stages >= 1 else options, pool_padding)
    block = bottleneck_block if bottleneck else basic_block
    outputs = []
    for i, (blocks, stride) in enumerate(zip(block_sizes, strides)):
        stage_options = frozen if frozen_stages >= i + 2 else options
        x = stage(x, block, width * 2 ** i, blocks, stride, f"stage{i + 1}", stage_options)
        outputs.append(x)
    return outputs


class Normalize(layers.Layer):
    """(x - mean) / std per channel, in float32, on the device: images stay uint8 until this layer."""

    def __init__(self, mean, std, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)

    def call(self, x):
        x = keras.ops.cast(x, "float32")
        return (x - keras.ops.convert_to_tensor(self.mean, "float32")) / keras.ops.convert_to_tensor(self.std,
                                                                                                     "float32")

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "std": self.std}


def classifier(image_size: int, num_classes: int, block_sizes=(3, 4, 6, 3), bottleneck: bool = True, width: int = 64,
               mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), options: BlockOptions = BlockOptions(),
               name: str = "resnet", head_initializer=None):
    """uint8 images (N, H, W, 3) -> float32 logits: normalisation, backbone, global average pool, dense head.

    The head is as the reference's: a dense layer with N(0, 0.01) kernel (the v0.6+ reference; head_initializer
    replaces it, e.g. the v0.5 reference's glorot-uniform) and zero bias, computed in float32 so the logits keep full
    precision under mixed precision.
    """
    images = keras.Input((image_size, image_size, 3), dtype="uint8", name="images")
    x = Normalize(mean, std, name="normalize")(images)
    x = backbone(x, block_sizes, bottleneck, width, options=options)[-1]
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    head_initializer = head_initializer or keras.initializers.RandomNormal(stddev=0.01)
    logits = layers.Dense(num_classes, kernel_initializer=head_initializer,
                          bias_initializer="zeros", dtype="float32", name="fc")(x)
    return keras.Model(images, logits, name=name)


__all__ = ["BlockOptions", "FrozenAffine", "POOL_PADDINGS", "RESNET_BLOCKS", "Normalize", "backbone", "basic_block", "batch_norm",
           "bottleneck_block", "classifier", "conv", "conv_bn", "stage", "stem"]
