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

import dataclasses

import keras
from keras import layers, ops

from mlperf_keras.inputs import anchors as anchor_lib
from mlperf_keras.inputs.anchors import ASPECT_RATIOS
from mlperf_keras.layers import resnet
from mlperf_keras.layers.box_ops import clip_boxes, finite_boxes, nms_keep
from mlperf_keras.layers.fpn import FPN_CHANNELS, fpn, kaiming_uniform_a1
from mlperf_keras.layers.maskrcnn_targets import mask_targets, roi_targets, rpn_targets
from mlperf_keras.layers.roi_align import multilevel_roi_align

NUM_CLASSES = 81                      # 80 COCO categories + background
PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)
BACKBONE_OPTIONS = resnet.BlockOptions(stride_in_1x1=True, frozen_batch_norm=True)
FROZEN_STAGES = 2                     # FREEZE_CONV_BODY_AT: the stem and res2
NUM_ANCHORS = len(ASPECT_RATIOS)      # per location and level
BOX_POOL, MASK_POOL = 7, 14
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


def backbone_model(image_shape=(None, None, 3), block_sizes=(3, 4, 6, 3), width: int = 64,
                   channels: int = FPN_CHANNELS, options: resnet.BlockOptions = BACKBONE_OPTIONS,
                   frozen_stages: int = FROZEN_STAGES, name: str = "maskrcnn_backbone") -> keras.Model:
    """Images (N, H, W, 3), RGB 0-255, H and W multiples of 32 -> [P2, ..., P6] (each N x H/s x W/s x 256),
    then the RPN head's outputs per level: objectness logits (N, H_l x W_l x 3) and deltas (N, H_l x W_l x 3, 4),
    cell-major like inputs/anchors.fpn_anchors, all float32."""
    images = keras.Input(image_shape, name="images")
    x = CaffeInput(name="caffe_input")(images)
    stages = resnet.backbone(x, block_sizes, bottleneck=True, width=width, options=options,
                             pool_padding="symmetric", frozen_stages=frozen_stages)
    pyramid = fpn(stages, channels)
    conv = layers.Conv2D(channels, 3, padding="same", activation="relu", kernel_initializer=_normal(0.01),
                         name="rpn_conv")
    logits = layers.Conv2D(NUM_ANCHORS, 1, kernel_initializer=_normal(0.01), name="rpn_logits")
    deltas = layers.Conv2D(4 * NUM_ANCHORS, 1, kernel_initializer=_normal(0.01), name="rpn_deltas")
    objectness, regression = [], []
    for level, p in enumerate(pyramid, start=2):
        t = conv(p)
        objectness.append(layers.Reshape((-1,), dtype="float32", name=f"rpn_logits_p{level}")(logits(t)))
        regression.append(layers.Reshape((-1, 4), dtype="float32", name=f"rpn_deltas_p{level}")(deltas(t)))
    return keras.Model(images, [*pyramid, *objectness, *regression], name=name)


def box_head_model(num_classes: int = NUM_CLASSES, channels: int = FPN_CHANNELS,
                   representation: int = REPRESENTATION_SIZE, name: str = "box_head") -> keras.Model:
    """(R, 7, 7, 256) ROI features -> class logits (R, num_classes) and deltas (R, num_classes, 4), float32."""
    rois = keras.Input((BOX_POOL, BOX_POOL, channels), name="box_features")
    x = layers.Flatten(name="box_flatten")(rois)
    x = layers.Dense(representation, activation="relu", kernel_initializer=kaiming_uniform_a1(), name="fc6")(x)
    x = layers.Dense(representation, activation="relu", kernel_initializer=kaiming_uniform_a1(), name="fc7")(x)
    scores = layers.Dense(num_classes, kernel_initializer=_normal(0.01), dtype="float32", name="cls_score")(x)
    deltas = layers.Dense(4 * num_classes, kernel_initializer=_normal(0.001), dtype="float32", name="bbox_pred")(x)
    deltas = layers.Reshape((num_classes, 4), dtype="float32", name="bbox_pred_reshape")(deltas)
    return keras.Model(rois, [scores, deltas], name=name)


def mask_head_model(num_classes: int = NUM_CLASSES, channels: int = FPN_CHANNELS,
                    conv_layers: tuple = MASK_CONV_LAYERS, name: str = "mask_head") -> keras.Model:
    """(R, 14, 14, 256) ROI features -> per-class mask logits (R, 28, 28, num_classes), float32."""
    rois = keras.Input((MASK_POOL, MASK_POOL, channels), name="mask_features")
    x = rois
    for i, width in enumerate(conv_layers, start=1):
        x = layers.Conv2D(width, 3, padding="same", activation="relu", kernel_initializer=_kaiming_normal_fan_out(),
                          name=f"mask_fcn{i}")(x)
    x = layers.Conv2DTranspose(conv_layers[-1], 2, strides=2, activation="relu",
                               kernel_initializer=_kaiming_normal_fan_out(), name="conv5_mask")(x)
    logits = layers.Conv2D(num_classes, 1, kernel_initializer=_kaiming_normal_fan_out(), dtype="float32",
                           name="mask_fcn_logits")(x)
    return keras.Model(rois, logits, name=name)


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the Mask R-CNN graph needs besides the weights; the defaults are the reference's."""
    num_classes: int = NUM_CLASSES
    block_sizes: tuple = (3, 4, 6, 3)
    width: int = 64
    fpn_channels: int = FPN_CHANNELS
    representation_size: int = REPRESENTATION_SIZE   # box head fc6/fc7
    mask_conv_layers: tuple = MASK_CONV_LAYERS
    # False: batch norms that train (batch statistics), for a demo from random weights, whose unnormalised
    # activations the fixed affines (identity at initialisation) leave hundreds of times too large
    frozen_batch_norm: bool = True
    frozen_stages: int = FROZEN_STAGES
    pre_nms_train: int = 2000            # per level
    pre_nms_test: int = 1000
    proposals_per_image: int = 1000      # num_image_candidates, train and test
    rpn_nms: float = 0.7
    rpn_batch: int = 256
    rpn_positive_fraction: float = 0.5
    rpn_high: float = 0.7
    rpn_low: float = 0.3
    roi_batch: int = 512
    roi_positive_fraction: float = 0.25
    roi_iou: float = 0.5
    max_gt: int = 100                    # ground-truth boxes per image, padded (static shapes)
    score_threshold: float = 0.05
    detection_nms: float = 0.5
    detections_per_image: int = 100

    @property
    def roi_positives(self) -> int:
        return int(self.roi_batch * self.roi_positive_fraction)

    @property
    def rpn_positives(self) -> int:
        return int(self.rpn_batch * self.rpn_positive_fraction)


# Small enough for CPU tests (not the reference: the backbone is a 1-1-1-1 ResNet of width 8). The RPN keeps its 256
# sampled anchors: on a 64x96 image that is most visible anchors, so every level's head is trained.
TINY_SPEC = Spec(num_classes=3, block_sizes=(1, 1, 1, 1), width=8, pre_nms_train=64, pre_nms_test=64,
                 proposals_per_image=32, roi_batch=16, max_gt=4, detections_per_image=10)


# --------------------------------------------------------------------------------------------------------------------
# Inference pieces: proposals and detections (keras.ops, static shapes).
#
# As the reference (same commit; modeling/rpn/inference.py, modeling/roi_heads/box_head/inference.py):
# - IoU with inclusive corners (layers/box_ops.py);
# - RPN: per level the 2000 highest objectness logits (PRE_NMS_TOP_N_TRAIN; 1000 at test), decoded with weights
#   (1, 1, 1, 1), clipped to the image (x in [0, w - 1], y in [0, h - 1]), NMS 0.7 (a box is suppressed by a
#   higher-scored kept box with IoU > 0.7, the CUDA kernel's comparison), then over all levels the 1000 best per image
#   (MLPerf's num_image_candidates; the reference's FPN_POST_NMS_TOP_N_TRAIN 2000 counts per batch). Proposals carry
#   no gradient (the reference builds them under torch.no_grad()); in training the ground-truth boxes are appended
#   (layers/maskrcnn_targets.py).
# --------------------------------------------------------------------------------------------------------------------


def rpn_proposals(objectness, deltas, level_anchors, image_sizes, pre_nms: int, per_image: int, nms: float):
    """Proposals from per-level RPN outputs (lists of (B, A_l) logits and (B, A_l, 4) deltas, anchors (A_l, 4)).
    Returns boxes (B, per_image, 4) and valid (B, per_image), best first; no gradient."""
    boxes_all, scores_all = [], []
    for logits, codes, anchors in zip(objectness, deltas, level_anchors):
        logits, codes = ops.stop_gradient(logits), ops.stop_gradient(codes)
        k = min(pre_nms, logits.shape[-1])
        top, index = ops.top_k(logits, k)
        codes = ops.take_along_axis(codes, index[..., None], axis=1)
        boxes = anchor_lib.decode_ops(codes, ops.take(ops.convert_to_tensor(anchors), index, axis=0),
                                      anchor_lib.RPN_CODER_WEIGHTS)
        boxes = clip_boxes(boxes, image_sizes)
        keep = nms_keep(boxes, nms)
        boxes_all.append(boxes)
        scores_all.append(ops.where(keep, ops.sigmoid(top), -1.0))
    boxes, scores = ops.concatenate(boxes_all, axis=1), ops.concatenate(scores_all, axis=1)
    best, index = ops.top_k(scores, min(per_image, scores.shape[-1]))
    return ops.take_along_axis(boxes, index[..., None], axis=1), best >= 0.0


class MaskRCNN(keras.Model):
    """The whole detector for one padded image shape (H, W multiples of 32; anchors follow from the shape).

    Inputs: a dict with "images" (B, H, W, 3) RGB uint8, "image_sizes" (B, 2) int32 (height, width of the resized
    image before padding) and, for training, "gt_boxes" (B, G, 4) float32 (x1, y1, x2, y2 pixels, inclusive),
    "gt_classes" (B, G) int32 (1..K - 1; 0 pads) and "gt_polygons" (B, G, E, 5) float32: each object's polygon
    edges in pixels (inputs/maskrcnn.object_edges), which mask_targets rasterises on the positive ROIs.
    Training output: a dict of predictions with the targets sampled for them (`training_losses` reads it), so the
    loop's loss(y_true, y_pred) needs no labels of its own.
    """

    def __init__(self, spec: Spec = Spec(), seed=None, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        options = dataclasses.replace(BACKBONE_OPTIONS, frozen_batch_norm=spec.frozen_batch_norm)
        self.backbone = backbone_model(block_sizes=spec.block_sizes, width=spec.width, channels=spec.fpn_channels,
                                       options=options, frozen_stages=spec.frozen_stages)
        self.box_head = box_head_model(spec.num_classes, spec.fpn_channels, spec.representation_size)
        self.mask_head = mask_head_model(spec.num_classes, spec.fpn_channels, spec.mask_conv_layers)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def _heads(self, head, pyramid, rois, pool):
        batch, n = ops.shape(rois)[0], rois.shape[1]
        features = multilevel_roi_align(pyramid[:4], finite_boxes(rois), pool, 2)
        out = head(ops.reshape(features, (-1, pool, pool, self.spec.fpn_channels)))
        if isinstance(out, (list, tuple)):
            return [ops.reshape(o, (batch, n, *o.shape[1:])) for o in out]
        return ops.reshape(out, (batch, n, *out.shape[1:]))

    def call(self, inputs, training=False):
        spec = self.spec
        images, sizes = inputs["images"], inputs["image_sizes"]
        outs = self.backbone(images, training=training)
        pyramid, logits, deltas = outs[:5], outs[5:10], outs[10:]
        level_anchors = anchor_lib.fpn_anchors(images.shape[1], images.shape[2])
        if not training:
            return self._detect(pyramid, logits, deltas, level_anchors, sizes)
        proposals, proposal_valid = rpn_proposals(logits, deltas, level_anchors, sizes, spec.pre_nms_train,
                                                  spec.proposals_per_image, spec.rpn_nms)
        gt_boxes = ops.cast(inputs["gt_boxes"], "float32")
        gt_classes = ops.cast(inputs["gt_classes"], "int32")
        gt_valid = gt_classes > 0
        rpn_index, rpn_labels, rpn_valid, rpn_box_targets = rpn_targets(level_anchors, gt_boxes, gt_valid, sizes,
                                                                        spec, self.seed_generator)
        rois, labels, valid, box_targets, matched = roi_targets(proposals, proposal_valid, gt_boxes, gt_classes,
                                                                gt_valid, spec, self.seed_generator)
        class_logits, box_deltas = self._heads(self.box_head, pyramid, rois, BOX_POOL)
        positives = spec.roi_positives
        mask_rois = rois[:, :positives]
        mask_logits = self._heads(self.mask_head, pyramid, mask_rois, MASK_POOL)
        return {
            "rpn_logits": ops.concatenate(logits, axis=1), "rpn_deltas": ops.concatenate(deltas, axis=1),
            "rpn_index": rpn_index, "rpn_labels": rpn_labels, "rpn_valid": rpn_valid,
            "rpn_targets": rpn_box_targets,
            "class_logits": class_logits, "box_deltas": box_deltas, "labels": labels, "roi_valid": valid,
            "box_targets": box_targets,
            "mask_logits": mask_logits, "mask_labels": labels[:, :positives],
            "mask_targets": ops.stop_gradient(mask_targets(inputs["gt_polygons"], finite_boxes(mask_rois),
                                                         matched[:, :positives])),
            "mask_valid": ops.logical_and(labels[:, :positives] > 0, valid[:, :positives]),
        }

    def _detect(self, pyramid, logits, deltas, level_anchors, sizes):
        spec = self.spec
        proposals, proposal_valid = rpn_proposals(logits, deltas, level_anchors, sizes, spec.pre_nms_test,
                                                  spec.proposals_per_image, spec.rpn_nms)
        class_logits, box_deltas = self._heads(self.box_head, pyramid, proposals, BOX_POOL)
        boxes, scores, labels, valid = detections(proposals, proposal_valid, class_logits, box_deltas, sizes, spec)
        mask_logits = self._heads(self.mask_head, pyramid, boxes, MASK_POOL)
        own = ops.take_along_axis(mask_logits, labels[:, :, None, None, None], axis=-1)[..., 0]
        return {"boxes": boxes, "scores": scores, "labels": labels, "valid": valid, "masks": ops.sigmoid(own)}


def detections(proposals, proposal_valid, class_logits, box_deltas, image_sizes, spec: Spec):
    """The box head's post-processing (modeling/roi_heads/box_head/inference.py PostProcessor, same commit): softmax
    scores, class-specific boxes decoded with (10, 10, 5, 5) and clipped, for every class but background the boxes
    scoring above 0.05, NMS 0.5 within the class, then the 100 best of the image. Static shapes: every class's NMS
    runs over all proposals (scores at or below the threshold never suppress and are never kept), so the result is
    exact. Returns boxes (B, D, 4), scores (B, D), labels (B, D) int32 and valid (B, D), best first."""
    batch, n, k = ops.shape(class_logits)[0], class_logits.shape[1], class_logits.shape[2]
    scores = ops.softmax(class_logits, axis=-1)[..., 1:]                          # (B, N, K - 1)
    anchors = ops.broadcast_to(proposals[:, :, None, :], (batch, n, k - 1, 4))
    boxes = anchor_lib.decode_ops(box_deltas[:, :, 1:], anchors, anchor_lib.BOX_CODER_WEIGHTS)
    boxes = ops.reshape(clip_boxes(ops.reshape(boxes, (batch, n * (k - 1), 4)), image_sizes), (batch, n, k - 1, 4))
    # per class: (B x (K - 1), N) sorted by score
    class_scores = ops.reshape(ops.transpose(scores, (0, 2, 1)), (-1, n))
    class_boxes = ops.reshape(ops.transpose(boxes, (0, 2, 1, 3)), (-1, n, 4))
    candidate = ops.logical_and(class_scores > spec.score_threshold,
                                ops.reshape(ops.broadcast_to(proposal_valid[:, None, :], (batch, k - 1, n)), (-1, n)))
    order = ops.argsort(-ops.where(candidate, class_scores, -1.0), axis=-1)
    class_scores = ops.take_along_axis(class_scores, order, axis=1)
    class_boxes = ops.take_along_axis(class_boxes, order[..., None], axis=1)
    candidate = ops.take_along_axis(candidate, order, axis=1)
    keep = nms_keep(class_boxes, spec.detection_nms, candidate)
    flat_scores = ops.reshape(ops.where(keep, class_scores, -1.0), (batch, -1))
    flat_boxes = ops.reshape(class_boxes, (batch, -1, 4))
    labels = ops.reshape(ops.broadcast_to(ops.arange(1, k, dtype="int32")[None, :, None], (batch, k - 1, n)),
                         (batch, -1))
    best, index = ops.top_k(flat_scores, min(spec.detections_per_image, n * (k - 1)))
    return (ops.take_along_axis(flat_boxes, index[..., None], axis=1), ops.maximum(best, 0.0),
            ops.take_along_axis(labels, index, axis=1), best > 0.0)


BACKBONE_PREFIXES = ("stem_", "stage")   # layer names of the ResNet part (layers.resnet's names)


def backbone_variables(model: keras.Model) -> dict:
    """{"layer/weight": variable} of the ResNet part of a backbone_model (or of a MaskRCNN's backbone)."""
    model = getattr(model, "backbone", model)
    return {f"{layer.name}/{w.name}": w for layer in model.layers if layer.name.startswith(BACKBONE_PREFIXES)
            for w in layer.weights}


def load_backbone_weights(model: keras.Model, path: str) -> int:
    """Assign the ResNet variables from an .npz written by data_prep.maskrcnn_backbone; every variable must be there
    with its shape and every array must name one. Returns the count loaded."""
    from mlperf_keras.layers import backbone_weights

    return backbone_weights.load_npz(backbone_variables(model), path, "convert Detectron's R-50.pkl with "
                                     "python -m data_prep.maskrcnn_backbone", "the Mask R-CNN backbone")
