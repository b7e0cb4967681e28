"""Mask R-CNN training targets and losses in keras.ops (static shapes): matching, sampling, RPN and ROI targets,
polygon mask targets, the five losses.

As the reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/: modeling/rpn/loss.py, modeling/matcher.py, modeling/balanced_positive_negative_sampler.py,
modeling/roi_heads/{box_head,mask_head}/loss.py, config/defaults.py) with these facts:
- IoU with inclusive corners (layers/box_ops.py); in training the ground-truth boxes are appended to the proposals;
- matching (Matcher): the highest-IoU ground truth; below the low threshold background, between the thresholds
  ignored; RPN 0.7 / 0.3 with low-quality matches (every anchor tied for a ground truth's best IoU takes its own
  best match back), anchors outside the image ignored; ROI heads 0.5 / 0.5 without;
- sampling (BalancedPositiveNegativeSampler): at most batch x fraction positives drawn uniformly without
  replacement, negatives fill the rest of the batch as far as they exist. Here a uniform random key per candidate
  and top_k (the same distribution as torch.randperm), keys from keras.random with the model's SeedGenerator;
- RPN losses: binary cross-entropy over the sampled anchors of the whole batch (mean), smooth L1 (beta 1/9) summed
  over sampled positives and divided by the number of sampled anchors;
- box head losses: cross-entropy over the 512 sampled ROIs per image (mean over the batch's sampled ROIs), smooth L1
  (beta 1) on the ground-truth class's deltas of positives (coder weights 10, 10, 5, 5), summed and divided by the
  number of sampled ROIs;
- mask loss: binary cross-entropy on the ground-truth class's 28x28 logits of positive ROIs, mean over their pixels
  (zero when no positives).
- mask targets: each positive proposal's matched polygons cropped to the proposal and scaled to 28x28
  (roi_heads/mask_head/loss.py project_masks_on_boxes, structures/segmentation_mask.py Polygons.crop and resize),
  rasterised in the graph by an even-odd test at the cell centres (layers/polygon_masks.py) where the reference
  calls pycocotools (0.42% of cells differ on random polygons, tests/test_polygon_masks.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import keras
import numpy as np
from keras import ops

from mlperf_keras.inputs import anchors as anchor_lib
from mlperf_keras.layers import polygon_masks
from mlperf_keras.layers.box_ops import inclusive_iou

if TYPE_CHECKING:
    from mlperf_keras.layers.maskrcnn import Spec

MASK_SIZE = 28                        # ROI_MASK_HEAD.RESOLUTION: the mask targets' grid (the mask head's output)
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


def smooth_l1(x, beta: float):
    ax = ops.abs(x)
    return ops.where(ax < beta, 0.5 * ax * ax / beta, ax - 0.5 * beta)


def rpn_targets(level_anchors, gt_boxes, gt_valid, image_sizes, spec: Spec, seed):
    """Sampled anchors per image: index (B, S), labels (B, S) in {0, 1}, valid (B, S) and regression targets
    (B, S, 4) for the RPN loss (S = spec.rpn_batch)."""
    anchors = ops.convert_to_tensor(np.concatenate(level_anchors, axis=0))
    iou = inclusive_iou(gt_boxes, anchors[None])                              # (B, G, A)
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
    matches = match(inclusive_iou(gt_boxes, candidates), gt_valid, spec.roi_iou, spec.roi_iou, False)
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


def mask_targets(gt_polygons, rois, instance, size: int = MASK_SIZE):
    """Each ROI's matched object rasterised on the ROI's size x size grid -> (B, R, size, size) {0, 1} float32.

    gt_polygons (B, G, E, 5): each object's polygon edges in pixels (inputs/maskrcnn.object_edges); rois (B, R, 4);
    instance (B, R) the matched ground truth. The polygons are cropped to the ROI and scaled to the grid as the
    reference's project_masks_on_boxes does, then tested at the cell centres (layers/polygon_masks.py)."""
    batch, rois_n = ops.shape(rois)[0], rois.shape[1]
    edges = ops.take_along_axis(ops.cast(gt_polygons, "float32"),
                                ops.cast(instance, "int32")[:, :, None, None], axis=1)    # (B, R, E, 5)
    flat = polygon_masks.rasterise(ops.reshape(edges, (-1, gt_polygons.shape[2], 5)),
                                   ops.reshape(ops.cast(rois, "float32"), (-1, 4)), size)
    return ops.reshape(flat, (batch, rois_n, size, size))


def mask_loss(mask_logits, labels, targets, valid):
    """BCE on each positive ROI's own class: mask_logits (B, P, 28, 28, K), labels (B, P), targets (B, P, 28, 28),
    valid (B, P) (the positive slots)."""
    x = ops.take_along_axis(mask_logits, labels[:, :, None, None, None], axis=-1)[..., 0]
    bce = ops.maximum(x, 0.0) - x * targets + ops.log1p(ops.exp(-ops.abs(x)))
    valid = ops.cast(valid, "float32")
    # every ROI has the same number of pixels: the mean over all positive pixels is the mean of per-ROI means
    return ops.sum(ops.where(valid > 0, ops.mean(bce, axis=(2, 3)), 0.0)) / ops.maximum(ops.sum(valid), 1.0)


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
