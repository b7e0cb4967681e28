"""SSD300 default boxes and the box coding shared by the SSD input pipeline, model head and evaluator (NumPy only).

As the MLPerf reference (mlcommons/training single_stage_detector/ssd/utils.py, `dboxes300_coco` and `Encoder`):
- six feature maps 38, 19, 10, 5, 3, 1 with steps 8, 16, 32, 64, 100, 300 on a 300x300 image and scales
  21, 45, 99, 153, 207, 261, 315 pixels; on map k a cell has a square box of scale s_k, a square box of scale
  sqrt(s_k s_{k+1}), and for each aspect ratio a (2, or 2 and 3) the boxes (s_k sqrt(a), s_k / sqrt(a)) and
  (s_k / sqrt(a), s_k sqrt(a)): 4, 6, 6, 6, 4, 4 boxes per cell, 8,732 in all;
- boxes are clipped to [0, 1]; box centres sit at ((j + 0.5) / f_k, (i + 0.5) / f_k) with f_k = 300 / step_k;
- ground truth is matched by IoU: every default box takes the ground-truth box it overlaps most, and is positive when
  that IoU is above 0.5; every ground-truth box also claims the default box that overlaps it most (so each object has
  at least one positive box);
- offsets are ((cx_g - cx_d) / (0.1 w_d), (cy_g - cy_d) / (0.1 h_d), log(w_g / w_d) / 0.2, log(h_g / h_d) / 0.2).

One deliberate difference of order: the reference lists the boxes of a feature map size-major (all cells of the first
box size, then the next size), because its NCHW head output is viewed as (N, 4, boxes). Here they are cell-major
(row, column, then box size), the order in which a Keras NHWC head's (N, H, W, boxes x 4) output reshapes to
(N, H x W x boxes, 4). The set of boxes is the same; only the order in which head outputs and boxes pair up differs,
consistently for training and evaluation.

Coordinates: "ltrb" is (left, top, right, bottom) = (xmin, ymin, xmax, ymax), "xywh" is (centre x, centre y, width,
height), both normalised to [0, 1] by the image's width and height.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np


@dataclasses.dataclass(frozen=True)
class DefaultBoxSpec:
    fig_size: int = 300
    feat_size: tuple = (38, 19, 10, 5, 3, 1)
    steps: tuple = (8, 16, 32, 64, 100, 300)
    scales: tuple = (21, 45, 99, 153, 207, 261, 315)
    aspect_ratios: tuple = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))
    scale_xy: float = 0.1   # the variances of the centre offsets
    scale_wh: float = 0.2   # and of the log size ratios


SSD300 = DefaultBoxSpec()


def boxes_per_cell(spec: DefaultBoxSpec = SSD300) -> tuple:
    """(4, 6, 6, 6, 4, 4) for SSD300: two squares and two boxes per aspect ratio."""
    return tuple(2 + 2 * len(ratios) for ratios in spec.aspect_ratios)


def _sizes(spec: DefaultBoxSpec, k: int) -> list[tuple[float, float]]:
    sk1 = spec.scales[k] / spec.fig_size
    sk2 = spec.scales[k + 1] / spec.fig_size
    sizes = [(sk1, sk1), (np.sqrt(sk1 * sk2),) * 2]
    for alpha in spec.aspect_ratios[k]:
        w, h = sk1 * np.sqrt(alpha), sk1 / np.sqrt(alpha)
        sizes += [(w, h), (h, w)]
    return sizes


def default_boxes(spec: DefaultBoxSpec = SSD300) -> np.ndarray:
    """float32 [8732, 4] xywh, cell-major per feature map (row, column, box size), feature maps 38x38 first."""
    boxes = []
    for k, size in enumerate(spec.feat_size):
        fk = spec.fig_size / spec.steps[k]
        sizes = _sizes(spec, k)
        for i, j in itertools.product(range(size), repeat=2):
            cx, cy = (j + 0.5) / fk, (i + 0.5) / fk
            boxes += [(cx, cy, w, h) for w, h in sizes]
    return np.clip(np.asarray(boxes, dtype=np.float64), 0.0, 1.0).astype(np.float32)


def to_ltrb(xywh: np.ndarray) -> np.ndarray:
    cx, cy, w, h = np.moveaxis(np.asarray(xywh), -1, 0)
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def to_xywh(ltrb: np.ndarray) -> np.ndarray:
    left, top, right, bottom = np.moveaxis(np.asarray(ltrb), -1, 0)
    return np.stack([(left + right) / 2, (top + bottom) / 2, right - left, bottom - top], axis=-1)


def iou_matrix(a_ltrb: np.ndarray, b_ltrb: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] intersection over union of ltrb boxes with continuous corners ((right - left) x (bottom -
    top) areas), in float64, 0 where the union is empty. One coordinate at a time (no [len(a), len(b), 2]
    temporaries): SSD's NMS (layers/ssd_postprocess.py) calls it for every class of every image."""
    left_a, top_a, right_a, bottom_a = np.asarray(a_ltrb, np.float64).T
    left_b, top_b, right_b, bottom_b = np.asarray(b_ltrb, np.float64).T
    width = np.minimum(right_a[:, None], right_b) - np.maximum(left_a[:, None], left_b)
    height = np.minimum(bottom_a[:, None], bottom_b) - np.maximum(top_a[:, None], top_b)
    inter = np.maximum(width, 0.0) * np.maximum(height, 0.0)
    union = ((right_a - left_a) * (bottom_a - top_a))[:, None] + (right_b - left_b) * (bottom_b - top_b) - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def match(gt_ltrb: np.ndarray, gt_labels: np.ndarray, dboxes_xywh: np.ndarray, iou_threshold: float = 0.5):
    """The reference Encoder.encode's matching: -> (matched ground truth ltrb [D, 4], labels [D] with 0 background).

    A default box below the threshold keeps its own coordinates (its offsets are zero) and the background label.
    """
    dboxes_ltrb = to_ltrb(dboxes_xywh)
    if len(gt_ltrb) == 0:
        return dboxes_ltrb.astype(np.float32), np.zeros(len(dboxes_xywh), np.int32)
    ious = iou_matrix(gt_ltrb, dboxes_ltrb)                     # [G, D]
    best_gt_iou, best_gt = ious.max(axis=0), ious.argmax(axis=0)
    best_dbox = ious.argmax(axis=1)                              # [G]
    best_gt_iou[best_dbox] = 2.0                                  # every object keeps its best default box
    best_gt[best_dbox] = np.arange(len(gt_ltrb))                 # (a later object wins a shared box, as the reference)
    positive = best_gt_iou > iou_threshold
    labels = np.where(positive, np.asarray(gt_labels)[best_gt], 0).astype(np.int32)
    boxes = np.where(positive[:, None], np.asarray(gt_ltrb)[best_gt], dboxes_ltrb)
    return boxes.astype(np.float32), labels


def encode(boxes_ltrb: np.ndarray, dboxes_xywh: np.ndarray, spec: DefaultBoxSpec = SSD300) -> np.ndarray:
    """Matched boxes (ltrb, one per default box) -> the regression targets the model's box head predicts."""
    g, d = to_xywh(np.asarray(boxes_ltrb, np.float64)), np.asarray(dboxes_xywh, np.float64)
    xy = (g[..., :2] - d[..., :2]) / (spec.scale_xy * d[..., 2:])
    wh = np.log(g[..., 2:] / d[..., 2:]) / spec.scale_wh
    return np.concatenate([xy, wh], axis=-1).astype(np.float32)


def decode(offsets: np.ndarray, dboxes_xywh: np.ndarray, spec: DefaultBoxSpec = SSD300) -> np.ndarray:
    """Predicted offsets [..., D, 4] -> boxes ltrb [..., D, 4] (the inverse of encode)."""
    o, d = np.asarray(offsets, np.float64), np.asarray(dboxes_xywh, np.float64)
    xy = o[..., :2] * spec.scale_xy * d[..., 2:] + d[..., :2]
    wh = np.exp(o[..., 2:] * spec.scale_wh) * d[..., 2:]
    return to_ltrb(np.concatenate([xy, wh], axis=-1)).astype(np.float32)


__all__ = ["DefaultBoxSpec", "SSD300", "boxes_per_cell", "decode", "default_boxes", "encode", "iou_matrix", "match",
           "to_ltrb", "to_xywh"]
