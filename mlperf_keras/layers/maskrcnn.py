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
import numpy as np
from keras import layers, ops

from mlperf_keras.inputs import anchors as anchor_lib
from mlperf_keras.inputs.anchors import ASPECT_RATIOS
from mlperf_keras.layers import resnet
from mlperf_keras.layers.fpn import FPN_CHANNELS, fpn, kaiming_uniform_a1
from mlperf_keras.layers.roi_align import multilevel_roi_align

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




# --------------------------------------------------------------------------------------------------------------------
# Training graph: proposals, matching, sampling, targets and losses (keras.ops, static shapes).
#
# As the reference (same commit; modeling/rpn/{inference,loss}.py, modeling/matcher.py,
# modeling/balanced_positive_negative_sampler.py, modeling/roi_heads/{box_head,mask_head}/loss.py, csrc/cuda/nms.cu,
# config/defaults.py) with these facts:
# - IoU with inclusive corners ((x2 - x1 + 1)(y2 - y1 + 1) areas), everywhere (boxlist_iou, the NMS kernel);
# - RPN: per level the 2000 highest objectness logits (PRE_NMS_TOP_N_TRAIN; 1000 at test), decoded with weights
#   (1, 1, 1, 1), clipped to the image (x in [0, w - 1], y in [0, h - 1]), NMS 0.7 (a box is suppressed by a
#   higher-scored kept box with IoU > 0.7, the CUDA kernel's comparison), then over all levels the 1000 best per image
#   (MLPerf's num_image_candidates; the reference's FPN_POST_NMS_TOP_N_TRAIN 2000 counts per batch). Proposals carry
#   no gradient (the reference builds them under torch.no_grad()); in training the ground-truth boxes are appended;
# - matching (Matcher): the highest-IoU ground truth; below the low threshold background, between the thresholds
#   ignored; RPN 0.7 / 0.3 with low-quality matches (every anchor tied for a ground truth's best IoU takes its own
#   best match back), anchors outside the image ignored; ROI heads 0.5 / 0.5 without;
# - sampling (BalancedPositiveNegativeSampler): at most batch x fraction positives drawn uniformly without
#   replacement, negatives fill the rest of the batch as far as they exist. Here a uniform random key per candidate
#   and top_k (the same distribution as torch.randperm), keys from keras.random with the model's SeedGenerator;
# - RPN losses: binary cross-entropy over the sampled anchors of the whole batch (mean), smooth L1 (beta 1/9) summed
#   over sampled positives and divided by the number of sampled anchors;
# - box head losses: cross-entropy over the 512 sampled ROIs per image (mean over the batch's sampled ROIs), smooth L1
#   (beta 1) on the ground-truth class's deltas of positives (coder weights 10, 10, 5, 5), summed and divided by the
#   number of sampled ROIs;
# - mask loss: binary cross-entropy on the ground-truth class's 28x28 logits of positive ROIs, mean over their pixels
#   (zero when no positives).
# One deliberate difference: mask targets come from box-local ground-truth masks (each object's polygons rasterised
# at 64x64 over its own box, inputs/maskrcnn.py), resampled onto the proposal's 28x28 cells (2x2 bilinear samples per
# cell, the ROIAlign positions) and thresholded at 0.5, where the reference crops and rescales the polygons to the
# proposal and rasterises them at 28x28 (project_masks_on_boxes); torchvision ROI-aligns full-image masks.
# --------------------------------------------------------------------------------------------------------------------


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


def pairwise_iou(a, b):
    """IoU of boxes a (..., N, 4) and b (..., M, 4) with inclusive corners -> (..., N, M)."""
    lt = ops.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = ops.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    wh = ops.maximum(rb - lt + 1.0, 0.0)
    inter = wh[..., 0] * wh[..., 1]
    area = lambda x: (x[..., 2] - x[..., 0] + 1.0) * (x[..., 3] - x[..., 1] + 1.0)  # noqa: E731
    return inter / (area(a)[..., :, None] + area(b)[..., None, :] - inter)


BELOW_LOW, BETWEEN = -1, -2


def match(iou, gt_valid, high: float, low: float, allow_low_quality: bool):
    """Matcher: iou (B, G, N) of ground truth vs predictions, gt_valid (B, G) -> (B, N) int32: the matched ground
    truth, BELOW_LOW or BETWEEN."""
    iou = ops.where(gt_valid[..., None], iou, -1.0)
    best = ops.max(iou, axis=1)
    all_matches = ops.cast(ops.argmax(iou, axis=1), "int32")
    matches = ops.where(best < low, BELOW_LOW, ops.where(best < high, BETWEEN, all_matches))
    if allow_low_quality:
        best_per_gt = ops.max(iou, axis=2, keepdims=True)
        ties = ops.logical_and(iou == best_per_gt, gt_valid[..., None])
        matches = ops.where(ops.any(ties, axis=1), all_matches, matches)
    return matches


def sample(positive, negative, batch_size: int, num_positive: int, seed):
    """BalancedPositiveNegativeSampler with static shapes. positive, negative: (B, N) bool.

    Returns (index (B, batch_size) int32, is_positive (B, batch_size), valid (B, batch_size)): positives first, then
    negatives; slots past the available candidates are invalid."""
    n = positive.shape[-1]
    keys = keras.random.uniform(ops.shape(positive), seed=seed) + 1.0
    pos_keys, pos_index = ops.top_k(ops.where(positive, keys, 0.0), min(num_positive, n))
    neg_keys, neg_index = ops.top_k(ops.where(negative, keys, 0.0), min(batch_size, n))
    num_pos = ops.minimum(ops.sum(ops.cast(positive, "int32"), axis=-1), num_positive)[:, None]
    num_neg = ops.minimum(ops.sum(ops.cast(negative, "int32"), axis=-1)[:, None], batch_size - num_pos)
    slot = ops.broadcast_to(ops.arange(batch_size, dtype="int32")[None, :], ops.shape(positive)[:1] + (batch_size,))
    from_pos = ops.take_along_axis(pos_index, ops.clip(slot, 0, pos_index.shape[-1] - 1), axis=1)
    from_neg = ops.take_along_axis(neg_index, ops.clip(slot - num_pos, 0, neg_index.shape[-1] - 1), axis=1)
    is_positive = slot < num_pos
    index = ops.where(is_positive, from_pos, from_neg)
    return ops.cast(index, "int32"), is_positive, slot < num_pos + num_neg


def nms_keep(boxes, threshold: float, valid=None):
    """Greedy NMS of score-sorted boxes (B, N, 4) -> keep (B, N) bool, exactly the greedy result: the fixed point of
    "kept unless an earlier kept box overlaps it by IoU > threshold", reached in at most N rounds (round k settles
    box k), usually a handful."""
    n = boxes.shape[-2]
    overlap = pairwise_iou(boxes, boxes) > threshold
    earlier = ops.arange(n)[:, None] < ops.arange(n)[None, :]
    suppresses = ops.cast(ops.logical_and(overlap, earlier[None]), "float32")    # [j, i]: j can suppress i
    keep = ops.ones(ops.shape(boxes)[:-1], "bool") if valid is None else valid
    start = keep

    def body(keep, changed, rounds):
        hit = ops.einsum("bj,bji->bi", ops.cast(keep, "float32"), suppresses) > 0
        new = ops.logical_and(start, ops.logical_not(hit))
        return new, ops.any(new != keep), rounds + 1

    keep, _, _ = ops.while_loop(lambda k, changed, r: ops.logical_and(changed, r < n + 1), body,
                                (keep, ops.convert_to_tensor(True), ops.convert_to_tensor(0)))
    return keep


def clip_boxes(boxes, image_sizes):
    """Clip (B, N, 4) boxes to each image's (height, width): x in [0, w - 1], y in [0, h - 1] (clip_to_image)."""
    h = ops.cast(image_sizes[:, 0], boxes.dtype)[:, None] - 1.0
    w = ops.cast(image_sizes[:, 1], boxes.dtype)[:, None] - 1.0
    x1, y1, x2, y2 = (ops.minimum(ops.maximum(boxes[..., i], 0.0), limit) for i, limit in enumerate((w, h, w, h)))
    return ops.stack([x1, y1, x2, y2], axis=-1)


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


def smooth_l1(x, beta: float):
    ax = ops.abs(x)
    return ops.where(ax < beta, 0.5 * ax * ax / beta, ax - 0.5 * beta)


def rpn_targets(level_anchors, gt_boxes, gt_valid, image_sizes, spec: Spec, seed):
    """Sampled anchors per image: index (B, S), labels (B, S) in {0, 1}, valid (B, S) and regression targets
    (B, S, 4) for the RPN loss (S = spec.rpn_batch)."""
    anchors = ops.convert_to_tensor(np.concatenate(level_anchors, axis=0))
    iou = pairwise_iou(gt_boxes, anchors[None])                               # (B, G, A)
    matches = match(iou, gt_valid, spec.rpn_high, spec.rpn_low, allow_low_quality=True)
    h = ops.cast(image_sizes[:, 0], "float32")[:, None]
    w = ops.cast(image_sizes[:, 1], "float32")[:, None]
    visible = ops.logical_and(ops.logical_and(anchors[None, :, 0] >= 0.0, anchors[None, :, 1] >= 0.0),
                              ops.logical_and(anchors[None, :, 2] < w, anchors[None, :, 3] < h))
    positive = ops.logical_and(matches >= 0, visible)
    negative = ops.logical_and(matches == BELOW_LOW, visible)
    index, is_positive, valid = sample(positive, negative, spec.rpn_batch, spec.rpn_positives, seed)
    matched = ops.take_along_axis(ops.maximum(matches, 0), index, axis=1)
    gt = ops.take_along_axis(gt_boxes, matched[..., None], axis=1)
    targets = anchor_lib.encode_ops(gt, ops.take(anchors, index, axis=0), anchor_lib.RPN_CODER_WEIGHTS)
    # only positives have targets; zeros elsewhere keep non-finite codes out of the loss and its gradient
    targets = ops.where(is_positive[..., None], targets, 0.0)
    return index, ops.cast(is_positive, "float32"), valid, ops.stop_gradient(targets)


def rpn_losses(logits, deltas, index, labels, valid, targets):
    """(objectness, box) losses from all-level logits (B, A), deltas (B, A, 4) and rpn_targets' samples."""
    valid = ops.cast(valid, "float32")
    count = ops.maximum(ops.sum(valid), 1.0)
    x = ops.take_along_axis(logits, index, axis=1)
    bce = ops.maximum(x, 0.0) - x * labels + ops.log1p(ops.exp(-ops.abs(x)))
    objectness = ops.sum(ops.where(valid > 0, bce, 0.0)) / count
    d = ops.take_along_axis(deltas, index[..., None], axis=1)
    # where, not a product: unused slots may hold non-finite targets (a degenerate box codes to log 0)
    box = ops.sum(ops.where(labels * valid > 0, ops.sum(smooth_l1(d - targets, 1.0 / 9), axis=-1), 0.0)) / count
    return objectness, box


def roi_targets(proposals, proposal_valid, gt_boxes, gt_classes, gt_valid, spec: Spec, seed):
    """Sample spec.roi_batch ROIs per image among proposals + ground truth. Returns rois (B, S, 4), labels (B, S)
    int32 (0 background), valid (B, S), box targets (B, S, 4) (weights 10, 10, 5, 5) and the matched ground-truth
    index (B, S); positives occupy the first slots."""
    candidates = ops.concatenate([proposals, gt_boxes], axis=1)
    candidate_valid = ops.concatenate([proposal_valid, gt_valid], axis=1)
    matches = match(pairwise_iou(gt_boxes, candidates), gt_valid, spec.roi_iou, spec.roi_iou, False)
    positive = ops.logical_and(matches >= 0, candidate_valid)
    negative = ops.logical_and(matches == BELOW_LOW, candidate_valid)
    index, is_positive, valid = sample(positive, negative, spec.roi_batch, spec.roi_positives, seed)
    rois = ops.take_along_axis(candidates, index[..., None], axis=1)
    matched = ops.take_along_axis(ops.maximum(matches, 0), index, axis=1)
    labels = ops.where(is_positive, ops.take_along_axis(gt_classes, matched, axis=1), 0)
    targets = anchor_lib.encode_ops(ops.take_along_axis(gt_boxes, matched[..., None], axis=1), rois,
                                    anchor_lib.BOX_CODER_WEIGHTS)
    # a degenerate proposal (x2 = x1 - 1 after clipping) codes to log 0: only positives keep their targets
    targets = ops.where(is_positive[..., None], targets, 0.0)
    return ops.stop_gradient(rois), ops.cast(labels, "int32"), valid, ops.stop_gradient(targets), matched


def box_losses(class_logits, box_deltas, labels, valid, targets):
    """(classification, box) losses: class_logits (B, S, K), box_deltas (B, S, K, 4), labels (B, S)."""
    valid = ops.cast(valid, "float32")
    count = ops.maximum(ops.sum(valid), 1.0)
    log_probs = ops.log_softmax(class_logits, axis=-1)
    nll = -ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    classification = ops.sum(ops.where(valid > 0, nll, 0.0)) / count
    own = ops.take_along_axis(box_deltas, labels[..., None, None], axis=2)[..., 0, :]
    positive = ops.logical_and(labels > 0, valid > 0)
    box = ops.sum(ops.where(positive, ops.sum(smooth_l1(own - targets, 1.0), axis=-1), 0.0)) / count
    return classification, box


def mask_targets(gt_masks, gt_boxes, rois, instance, size: int = MASK_SIZE, sampling_ratio: int = 2):
    """Box-local ground-truth masks resampled onto ROIs -> (B, R, size, size) {0, 1} float32.

    gt_masks (B, G, M, M) {0, 1}: mask g rasterised over its own box gt_boxes (B, G, 4) (M cells spanning x1..x2
    and y1..y2, inputs/maskrcnn.box_masks); rois (B, R, 4); instance (B, R) the matched ground truth. Each output
    cell averages sampling_ratio^2 bilinear samples at the ROIAlign positions of the ROI (the centres of the
    reference's 28x28 raster cells, split 2x2), read from the matched mask with zeros outside its box, thresholded
    at 0.5."""
    batch, masks, m = ops.shape(gt_masks)[0], gt_masks.shape[1], gt_masks.shape[-1]
    rois_n = rois.shape[1]
    padded = m + 2                                      # one zero cell around each mask: samples outside read 0
    table = ops.reshape(ops.pad(ops.cast(gt_masks, "float32"), ((0, 0), (0, 0), (1, 1), (1, 1))), (-1,))
    own = ops.take_along_axis(ops.cast(gt_boxes, "float32"), ops.cast(instance, "int32")[..., None], axis=1)
    own, boxes = ops.reshape(own, (-1, 4)), ops.reshape(ops.cast(rois, "float32"), (-1, 4))
    image = ops.repeat(ops.arange(batch, dtype="int32"), rois_n)
    base = (image * masks + ops.reshape(ops.cast(instance, "int32"), (-1,))) * (padded * padded)
    steps = ops.convert_to_tensor(
        [p + (i + 0.5) / sampling_ratio for p in range(size) for i in range(sampling_ratio)], "float32")

    def axis(lo, hi, own_lo, own_hi):
        # image positions of the samples -> positions in the padded mask's cells (cell j's centre at j + 1)
        pos = lo[:, None] + steps[None, :] * (ops.maximum(hi - lo, 1.0) / size)[:, None]
        cell = (pos - own_lo[:, None]) * (m / ops.maximum(own_hi - own_lo, 1.0))[:, None] + 0.5
        cell = ops.clip(cell, 0.0, padded - 1.0)
        low = ops.minimum(ops.floor(cell), padded - 2.0)
        frac = cell - low
        return ops.cast(low, "int32"), ops.cast(low, "int32") + 1, 1.0 - frac, frac

    y_low, y_high, wy_low, wy_high = axis(boxes[:, 1], boxes[:, 3], own[:, 1], own[:, 3])
    x_low, x_high, wx_low, wx_high = axis(boxes[:, 0], boxes[:, 2], own[:, 0], own[:, 2])
    base = base[:, None, None]

    def corner(ys, xs, wy, wx):
        return ops.take(table, base + ys[:, :, None] * padded + xs[:, None, :]) * (wy[:, :, None] * wx[:, None, :])

    out = (corner(y_low, x_low, wy_low, wx_low) + corner(y_low, x_high, wy_low, wx_high)
           + corner(y_high, x_low, wy_high, wx_low) + corner(y_high, x_high, wy_high, wx_high))
    out = ops.mean(ops.reshape(out, (-1, size, sampling_ratio, size, sampling_ratio)), axis=(2, 4))
    return ops.cast(ops.reshape(out, (batch, rois_n, size, size)) >= 0.5, "float32")


def mask_loss(mask_logits, labels, targets, valid):
    """BCE on each positive ROI's own class: mask_logits (B, P, 28, 28, K), labels (B, P), targets (B, P, 28, 28),
    valid (B, P) (the positive slots)."""
    x = ops.take_along_axis(mask_logits, labels[:, :, None, None, None], axis=-1)[..., 0]
    bce = ops.maximum(x, 0.0) - x * targets + ops.log1p(ops.exp(-ops.abs(x)))
    valid = ops.cast(valid, "float32")
    # every ROI has the same number of pixels: the mean over all positive pixels is the mean of per-ROI means
    return ops.sum(ops.where(valid > 0, ops.mean(bce, axis=(2, 3)), 0.0)) / ops.maximum(ops.sum(valid), 1.0)


class MaskRCNN(keras.Model):
    """The whole detector for one padded image shape (H, W multiples of 32; anchors follow from the shape).

    Inputs: a dict with "images" (B, H, W, 3) RGB uint8, "image_sizes" (B, 2) int32 (height, width of the resized
    image before padding) and, for training, "gt_boxes" (B, G, 4) float32 (x1, y1, x2, y2 pixels, inclusive),
    "gt_classes" (B, G) int32 (1..K - 1; 0 pads) and "gt_masks" (B, G, M, M) uint8: each object's mask over its
    own box (inputs/maskrcnn.box_masks; M = 64 there), 107 MB per image less than full-image masks at G = 100.
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
            "mask_targets": ops.stop_gradient(mask_targets(inputs["gt_masks"], gt_boxes, finite_boxes(mask_rois),
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


def finite_boxes(boxes):
    """Boxes with non-finite coordinates (a diverged model's) set to 0: a NaN cast to an index is out of range, which
    TensorFlow's CPU gather raises on; with zeros the step runs on and its non-finite loss ends the run as diverged."""
    return ops.where(ops.isfinite(boxes), boxes, 0.0)


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


def training_losses(pred) -> dict:
    """The five losses of a training output of MaskRCNN (the reference's loss_dict, summed for the step)."""
    objectness, rpn_box = rpn_losses(pred["rpn_logits"], pred["rpn_deltas"], pred["rpn_index"], pred["rpn_labels"],
                                     pred["rpn_valid"], pred["rpn_targets"])
    classifier, box = box_losses(pred["class_logits"], pred["box_deltas"], pred["labels"], pred["roi_valid"],
                                 pred["box_targets"])
    mask = mask_loss(pred["mask_logits"], pred["mask_labels"], pred["mask_targets"], pred["mask_valid"])
    return {"loss_objectness": objectness, "loss_rpn_box_reg": rpn_box, "loss_classifier": classifier,
            "loss_box_reg": box, "loss_mask": mask}


def total_loss(y_true, y_pred):
    """loss(y_true, y_pred) for the one training loop: y_true is unused (the targets travel in y_pred)."""
    return sum(training_losses(y_pred).values())
