"""Mask R-CNN (ResNet-50-FPN) model pieces in keras.layers: backbone + FPN + RPN head, box head, mask head.

As the v0.6/v0.7 reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/,
config configs/e2e_mask_rcnn_R_50_FPN_1x.yaml; paths below are under maskrcnn_benchmark/):
- input: BGR 0-255 minus Detectron's pixel means (102.9801, 115.9465, 122.7717), std 1 (config/defaults.py
  INPUT.PIXEL_MEAN/PIXEL_STD, TO_BGR255); `CaffeInput` takes the pipeline's RGB and flips it;
- backbone: the MSRA ResNet-50 (modeling/backbone/resnet.py): stride in the first 1x1, every batch norm a fixed
  affine, stem and res2 frozen (FREEZE_CONV_BODY_AT 2), torch's 3x3/2 max pool with padding 1 (symmetric);
- FPN P2-P6 (layers/fpn.py);
- RPN head (modeling/rpn/rpn.py RPNHead), shared by all levels: 3x3 conv 256 + ReLU, 1x1 objectness (3 anchors)
  and 1x1 box deltas (3 x 4), kernels N(0, 0.01), biases 0;
- box head (modeling/roi_heads/box_head/roi_box_feature_extractors.py FPN2MLPFeatureExtractor,
  roi_box_predictors.py FPNPredictor): 7x7x256 ROI features -> fc6 1024 + ReLU -> fc7 1024 + ReLU (make_fc:
  kaiming_uniform_(a=1), bias 0) -> class scores (81, N(0, 0.01)) and class-specific box deltas (81 x 4,
  N(0, 0.001));
- mask head (modeling/roi_heads/mask_head/roi_mask_feature_extractors.py MaskRCNNFPNFeatureExtractor,
  roi_mask_predictors.py MaskRCNNC4Predictor): 14x14x256 ROI features -> 4 x (3x3 conv 256 + ReLU) -> 2x2/2
  transposed conv 256 + ReLU -> 1x1 conv to 81 per-class 28x28 mask logits; every kernel kaiming_normal_(fan_out,
  relu) (VarianceScaling(2, fan_out, untruncated normal); Keras computes a transposed kernel's fan_out as torch
  does, 4 x 256), biases 0.

One deliberate difference of layout: fc6 reads the ROI features flattened in NHWC order (h, w, c) where the
reference flattens NCHW (c, h, w); the head is trained from scratch, so only the order of fc6's input rows differs.

Parameters, derived in tests/test_maskrcnn_model.py: the convolutions, dense layers and biases of the 81-class model
are torchvision maskrcnn_resnet50_fpn's 44,401,393 (91 classes) less 10 classes x (1,025 + 4 x 1,025 + 257) = 53,820,
i.e. 44,347,573; the frozen batch norms add 2 x 26,560 non-trainable affine weights (buffers in the reference), so
`count_params()` is 44,400,693; trainable are 44,347,573 less the frozen stem and res2 convolutions (9,408 +
212,992): 44,125,173.
"""
from __future__ import annotations

import keras
from keras import layers

from mlperf_keras.inputs.anchors import ASPECT_RATIOS
from mlperf_keras.layers import resnet
from mlperf_keras.layers.fpn import FPN_CHANNELS, fpn, kaiming_uniform_a1

NUM_CLASSES = 81                      # 80 COCO categories + background
PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)
BACKBONE_OPTIONS = resnet.BlockOptions(stride_in_1x1=True, frozen_batch_norm=True)
FROZEN_STAGES = 2                     # FREEZE_CONV_BODY_AT: the stem and res2
NUM_ANCHORS = len(ASPECT_RATIOS)      # per location and level
BOX_POOL, MASK_POOL, MASK_SIZE = 7, 14, 28
REPRESENTATION_SIZE = 1024            # ROI_BOX_HEAD.MLP_HEAD_DIM
MASK_CONV_LAYERS = (256, 256, 256, 256)


class CaffeInput(layers.Layer):
    """RGB images (uint8 or float, 0-255) -> BGR float32 minus Detectron's means."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)

    def call(self, x):
        x = keras.ops.cast(x, "float32")[..., ::-1]
        return x - keras.ops.convert_to_tensor(PIXEL_MEANS_BGR, "float32")

    def compute_output_shape(self, input_shape):
        return input_shape


def _normal(stddev):
    return keras.initializers.RandomNormal(stddev=stddev)


def _kaiming_normal_fan_out():
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_out", distribution="untruncated_normal")


def backbone_model(image_shape=(None, None, 3), name: str = "maskrcnn_backbone") -> keras.Model:
    """Images (N, H, W, 3), RGB 0-255, H and W multiples of 32 -> [P2, ..., P6] (each N x H/s x W/s x 256),
    then the RPN head's outputs per level: objectness logits (N, H_l x W_l x 3) and deltas (N, H_l x W_l x 3, 4),
    cell-major like inputs/anchors.fpn_anchors, all float32."""
    images = keras.Input(image_shape, name="images")
    x = CaffeInput(name="caffe_input")(images)
    stages = resnet.backbone(x, (3, 4, 6, 3), bottleneck=True, width=64, options=BACKBONE_OPTIONS,
                             pool_padding="symmetric", frozen_stages=FROZEN_STAGES)
    pyramid = fpn(stages)
    conv = layers.Conv2D(FPN_CHANNELS, 3, padding="same", activation="relu", kernel_initializer=_normal(0.01),
                         name="rpn_conv")
    logits = layers.Conv2D(NUM_ANCHORS, 1, kernel_initializer=_normal(0.01), name="rpn_logits")
    deltas = layers.Conv2D(4 * NUM_ANCHORS, 1, kernel_initializer=_normal(0.01), name="rpn_deltas")
    objectness, regression = [], []
    for level, p in enumerate(pyramid, start=2):
        t = conv(p)
        objectness.append(layers.Reshape((-1,), dtype="float32", name=f"rpn_logits_p{level}")(logits(t)))
        regression.append(layers.Reshape((-1, 4), dtype="float32", name=f"rpn_deltas_p{level}")(deltas(t)))
    return keras.Model(images, [*pyramid, *objectness, *regression], name=name)


def box_head_model(num_classes: int = NUM_CLASSES, name: str = "box_head") -> keras.Model:
    """(R, 7, 7, 256) ROI features -> class logits (R, num_classes) and deltas (R, num_classes, 4), float32."""
    rois = keras.Input((BOX_POOL, BOX_POOL, FPN_CHANNELS), name="box_features")
    x = layers.Flatten(name="box_flatten")(rois)
    x = layers.Dense(REPRESENTATION_SIZE, activation="relu", kernel_initializer=kaiming_uniform_a1(), name="fc6")(x)
    x = layers.Dense(REPRESENTATION_SIZE, activation="relu", kernel_initializer=kaiming_uniform_a1(), name="fc7")(x)
    scores = layers.Dense(num_classes, kernel_initializer=_normal(0.01), dtype="float32", name="cls_score")(x)
    deltas = layers.Dense(4 * num_classes, kernel_initializer=_normal(0.001), dtype="float32", name="bbox_pred")(x)
    deltas = layers.Reshape((num_classes, 4), dtype="float32", name="bbox_pred_reshape")(deltas)
    return keras.Model(rois, [scores, deltas], name=name)


def mask_head_model(num_classes: int = NUM_CLASSES, name: str = "mask_head") -> keras.Model:
    """(R, 14, 14, 256) ROI features -> per-class mask logits (R, 28, 28, num_classes), float32."""
    rois = keras.Input((MASK_POOL, MASK_POOL, FPN_CHANNELS), name="mask_features")
    x = rois
    for i, width in enumerate(MASK_CONV_LAYERS, start=1):
        x = layers.Conv2D(width, 3, padding="same", activation="relu", kernel_initializer=_kaiming_normal_fan_out(),
                          name=f"mask_fcn{i}")(x)
    x = layers.Conv2DTranspose(MASK_CONV_LAYERS[-1], 2, strides=2, activation="relu",
                               kernel_initializer=_kaiming_normal_fan_out(), name="conv5_mask")(x)
    logits = layers.Conv2D(num_classes, 1, kernel_initializer=_kaiming_normal_fan_out(), dtype="float32",
                           name="mask_fcn_logits")(x)
    return keras.Model(rois, logits, name=name)


__all__ = ["BACKBONE_OPTIONS", "BOX_POOL", "CaffeInput", "FROZEN_STAGES", "MASK_POOL", "MASK_SIZE", "NUM_ANCHORS",
           "NUM_CLASSES", "PIXEL_MEANS_BGR", "backbone_model", "box_head_model", "mask_head_model"]
