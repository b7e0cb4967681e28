"""SSD300 with a ResNet-34 backbone (the MLPerf "ssd" model), its multibox loss and the pretrained-backbone loader.

keras.layers / keras.ops only: builds and trains on TensorFlow and on JAX. As the MLPerf reference
(mlcommons/training single_stage_detector/ssd at 0badcd1 (v0.5), d99c36dc (v0.6) and f9e0e82d (v0.7): ssd300.py
`SSD300`; base_model.py `ResNet34`, `Loss`):
- normalisation as torchvision's, inside the model: (x / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225];
- backbone: torchvision's ResNet-34 up to layer3 (conv1, bn1, relu, maxpool, layer1..layer3; layer4, the pool and
  the classifier are dropped) with layer3's first block at stride 1 (its conv1 and downsample), so the first feature
  map is 38x38x256; the max pool pads one pixel on both sides as torchvision's (layers.resnet pool_padding);
  batch norm epsilon 1e-5, momentum 0.9 (torch's 0.1);
- five extra blocks on it, each a 1x1 convolution with bias + ReLU, then a 3x3 convolution with bias + ReLU (no batch
  norm), stride 2 padding 1 for the first three and stride 1 without padding for the last two: intermediate channels
  256, 256, 128, 128, 128 and outputs 512, 512, 256, 256, 256; feature maps 38, 19, 10, 5, 3, 1 with 256, 512, 512,
  256, 256, 256 channels (ssd300.py `_build_additional_features`, the same at mlcommons/training 0badcd1 (v0.5),
  d99c36dc (v0.6) and f9e0e82d (v0.7)); 19,972,534 trainable parameters;
- on each map a 3x3 (padding 1) box head with 4 x boxes channels and a class head with 81 x boxes channels, both with
  bias; boxes per cell 4, 6, 6, 6, 4, 4 (8,732 in all);
- initialisation as the reference's _init_weights: Xavier-uniform on every kernel of the extra blocks and heads; their
  biases keep torch's Conv2d default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (_init_weights touches only tensors of 2 or
  more dimensions);
- loss: smooth L1 (beta 1) over the 4 offsets of the positive boxes, plus softmax cross-entropy over the positives
  and the hard negatives (the min(3 x positives, boxes) negatives of highest cross-entropy), divided per image by its
  number of positives (an image without positives counts 0), averaged over the batch.

Where this differs from the reference, and why:
- box order: Keras heads are NHWC, so a head's (N, H, W, boxes x 4) output reshapes to (N, H x W x boxes, 4): boxes
  come cell-major (row, column, box size), channel b x 4 + c is box b's coordinate c. The reference's NCHW heads are
  viewed as (N, 4, boxes x H x W): size-major, channel c x boxes + b. default_boxes.default_boxes() lists the boxes
  cell-major, so model, encoder and decoder pair up the same boxes as the reference; only the order differs;
- the loss takes the already-encoded offsets (default_boxes.encode) where the reference's Loss encodes the matched
  boxes itself (_loc_vec): the same numbers, computed once in the input pipeline;
- the backbone's own initialisation (used only without pretrained weights) is layers.resnet's variance scaling, not
  torchvision's Kaiming-normal fan_out: the reference always starts from ImageNet weights
  (torchvision resnet34-333f7ec4.pth), which load_backbone_weights reads after data_prep.ssd_backbone converts them;
- hard-negative ties are broken by box index (a stable sort); torch's unstable sort breaks them arbitrarily;
- `width` (64 for the reference) scales every channel count, so tests can build a small model of the same shape.
"""
from __future__ import annotations

import math

import keras
from keras import layers, ops

from mlperf_keras.config import ConfigError
from mlperf_keras.inputs import default_boxes
from mlperf_keras.layers import backbone_weights, resnet

IMAGENET_MEAN = (0.485, 0.456, 0.406)   # torchvision's normalisation, on [0, 1] pixels
IMAGENET_STD = (0.229, 0.224, 0.225)
BACKBONE_BLOCKS = (3, 4, 6)               # ResNet-34 layer1..layer3
BACKBONE_STRIDES = (1, 2, 1)              # layer3 at stride 1: a 38x38 first feature map
# The extra blocks at width 64: (intermediate channels, output channels, stride of the 3x3 convolution).
EXTRA_BLOCKS = ((256, 512, 2), (256, 512, 2), (128, 256, 2), (128, 256, 1), (128, 256, 1))
BACKBONE_PREFIXES = ("stem_", "stage")    # layer names of the backbone (layers.resnet's names)
NEGATIVES_PER_POSITIVE = 3


def _xavier():
    # A fresh instance per layer (a reused seeded instance would repeat its values); torch's xavier_uniform_ and
    # Keras' GlorotUniform agree for convolutions: limit sqrt(6 / ((in + out) x kh x kw)).
    return keras.initializers.GlorotUniform()


def _torch_bias(fan_in: int):
    # torch's default Conv2d bias init, which the reference's _init_weights leaves alone (it only touches dim > 1).
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


def _extra_block(x, mid: int, out: int, stride: int, name: str):
    x = layers.Conv2D(mid, 1, kernel_initializer=_xavier(), bias_initializer=_torch_bias(x.shape[-1]),
                      name=f"{name}_1_conv")(x)
    x = layers.ReLU(name=f"{name}_1_relu")(x)
    if stride > 1:
        x = layers.ZeroPadding2D(1, name=f"{name}_2_pad")(x)   # torch padding=1 on both sides
    x = layers.Conv2D(out, 3, strides=stride, padding="valid", kernel_initializer=_xavier(),
                      bias_initializer=_torch_bias(9 * mid), name=f"{name}_2_conv")(x)
    return layers.ReLU(name=f"{name}_2_relu")(x)


def _head(x, boxes: int, per_box: int, name: str):
    """3x3 convolution with bias, reshaped to (N, H x W x boxes, per_box) in float32: cell-major, box inside.

    The convolution runs in the compute dtype (bf16/fp16 under mixed precision; the reference trains in float32, as
    --precision=fp32 does here; the heads are 14% of the model's FLOPs); only its output is cast to float32, for the
    loss and decoding."""
    y = layers.Conv2D(boxes * per_box, 3, padding="same", kernel_initializer=_xavier(),
                      bias_initializer=_torch_bias(9 * x.shape[-1]), name=name)(x)
    height, width = y.shape[1], y.shape[2]
    return layers.Reshape((height * width * boxes, per_box), dtype="float32", name=f"{name}_flat")(y)


def feature_maps(x, width: int = 64, options: resnet.BlockOptions = resnet.BlockOptions()) -> list:
    """Normalised images -> the six feature maps (38, 19, 10, 5, 3, 1 on 300x300 input)."""
    x = resnet.backbone(x, BACKBONE_BLOCKS, bottleneck=False, width=width, strides=BACKBONE_STRIDES,
                        options=options, pool_padding="symmetric")[-1]
    maps = [x]
    for k, (mid, out, stride) in enumerate(EXTRA_BLOCKS):
        x = _extra_block(x, mid * width // 64, out * width // 64, stride, f"extra{k + 1}")
        maps.append(x)
    return maps


def ssd300(num_classes: int = 81, width: int = 64, spec: default_boxes.DefaultBoxSpec = default_boxes.SSD300,
           options: resnet.BlockOptions = resnet.BlockOptions(), name: str = "ssd300_resnet34") -> keras.Model:
    """uint8 images [N, S, S, 3] (S = spec.fig_size) -> (loc [N, boxes, 4], logits [N, boxes, num_classes]), float32,
    boxes in default_boxes.default_boxes(spec) order. num_classes counts the background (class 0)."""
    size = spec.fig_size
    images = keras.Input((size, size, 3), dtype="uint8", name="images")
    x = resnet.Normalize([255.0 * m for m in IMAGENET_MEAN], [255.0 * s for s in IMAGENET_STD],
                         name="normalize")(images)
    maps = feature_maps(x, width, options)
    got = tuple(m.shape[1] for m in maps)
    if got != tuple(spec.feat_size):
        raise ConfigError(f"SSD feature maps are {got} on {size}x{size} images, the default boxes expect "
                          f"{tuple(spec.feat_size)}")
    per_cell = default_boxes.boxes_per_cell(spec)
    locs = [_head(m, b, 4, f"loc{k + 1}") for k, (m, b) in enumerate(zip(maps, per_cell))]
    confs = [_head(m, b, num_classes, f"conf{k + 1}") for k, (m, b) in enumerate(zip(maps, per_cell))]
    loc = layers.Concatenate(axis=1, dtype="float32", name="loc")(locs)
    logits = layers.Concatenate(axis=1, dtype="float32", name="logits")(confs)
    return keras.Model(images, (loc, logits), name=name)


# ---- loss ----

def multibox_loss(y_true, y_pred):
    """The reference Loss. y_true = (offsets [N, D, 4], labels [N, D] int, 0 = background),
    y_pred = (loc [N, D, 4], logits [N, D, C]) -> scalar float32."""
    offsets, labels = y_true
    loc, logits = y_pred
    offsets, loc, logits = (ops.cast(t, "float32") for t in (offsets, loc, logits))
    labels = ops.cast(labels, "int32")
    num_boxes = ops.shape(labels)[1]

    positive = ops.cast(labels > 0, "float32")                                     # [N, D]
    num_pos = ops.sum(positive, axis=1)                                             # [N]

    diff = ops.abs(loc - offsets)
    smooth_l1 = ops.where(diff < 1.0, 0.5 * diff * diff, diff - 0.5)               # beta 1
    box_loss = ops.sum(ops.sum(smooth_l1, axis=-1) * positive, axis=1)             # [N]

    log_probs = ops.log_softmax(logits, axis=-1)
    ce = -ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1), -1)   # [N, D]

    # Hard negative mining: rank the boxes by cross-entropy with the positives at 0 (as the reference, a positive
    # can still be picked when fewer negatives than 3 x positives have a loss above 0); keep the top
    # min(3 x positives, D). Ranking is not differentiable: it sees the values only.
    neg_ce = ops.stop_gradient(ops.where(positive > 0, 0.0, ce))
    order = ops.argsort(-neg_ce, axis=1)     # descending, ties by index
    rank = ops.argsort(order, axis=1)        # rank[i] = position of box i in that order
    num_neg = ops.minimum(NEGATIVES_PER_POSITIVE * num_pos, ops.cast(num_boxes, "float32"))
    mined = ops.cast(ops.cast(rank, "float32") < num_neg[:, None], "float32")
    conf_loss = ops.sum(ce * (positive + mined), axis=1)

    has_pos = ops.cast(num_pos > 0, "float32")
    per_image = (box_loss + conf_loss) * has_pos / ops.maximum(num_pos, 1e-6)
    return ops.mean(per_image)


# ---- pretrained backbone ----

def backbone_variables(model: keras.Model) -> dict:
    """{"<layer name>/<variable name>": variable} for every backbone variable (the stem and stage layers; also the
    variable's path in a model built on its own), in model order."""
    out = {}
    for layer in model.layers:
        if layer.name.startswith(BACKBONE_PREFIXES):
            for v in layer.variables:
                out[f"{layer.name}/{v.name}"] = v
    return out


def load_backbone_weights(model: keras.Model, path: str) -> int:
    """Assign the backbone variables from an .npz keyed as backbone_variables() (data_prep.ssd_backbone writes one);
    every backbone variable must be there with its shape, and every array must name one. Returns the count loaded."""
    return backbone_weights.load_npz(backbone_variables(model), path, "convert a torchvision ResNet-34 with "
                                     "python -m data_prep.ssd_backbone", model.name)


def save_backbone_weights(model: keras.Model, path: str) -> int:
    """Write the backbone variables as load_backbone_weights reads them (atomically); returns the count written."""
    return backbone_weights.write_npz(path, {key: ops.convert_to_numpy(v.value)
                                             for key, v in backbone_variables(model).items()})


__all__ = ["BACKBONE_BLOCKS", "BACKBONE_STRIDES", "EXTRA_BLOCKS", "IMAGENET_MEAN", "IMAGENET_STD",
           "backbone_variables", "feature_maps", "load_backbone_weights", "multibox_loss", "save_backbone_weights",
           "ssd300"]
