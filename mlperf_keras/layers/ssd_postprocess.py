"""SSD post-processing: the model's box offsets and class logits -> per-image detections (decode, softmax,
per-class NMS), in NumPy only (no TensorFlow, no Keras), so a JAX-only machine can evaluate; metrics/coco.py turns
them into COCO result rows and scores them.

Post-processing follows the MLPerf reference (mlcommons/training single_stage_detector/ssd/utils.py,
`Encoder.decode_batch` / `decode_single`, called by train.py's coco_eval with criteria 0.50 and max_output 200):
box offsets are decoded against the default boxes, class scores are the softmax over the 81 logits, and for every
class but background: the boxes scoring above 0.05, the 200 highest of them, greedy NMS that keeps a box only while
its IoU with every kept box of its class is below 0.5 (the reference keeps `iou < criteria`, so IoU exactly 0.5
suppresses), then the 200 highest-scoring detections of the image over all classes. Detections become COCO result
rows (metrics.coco.detection_rows).

Where this differs from the reference, and why:
- Only a cheap necessary condition is evaluated for every box: a class c can score above t only if its logit
  beats the background's by log(t / (1 - t)) (the softmax denominator is at least e^x_c + e^x_0, so the score is at
  most sigmoid(x_c - x_0)). The exact softmax, with the same arithmetic as a full one, is computed only for boxes
  that pass, and only their boxes are decoded. The detections are the same; it avoids 700k exponentials per image.
- IoU for NMS is computed in float64 from the float32 boxes (the reference: float32), and two zero-area boxes have
  IoU 0 here where the reference's 0/0 gives NaN (which suppresses). Neither matters for boxes decoded from finite
  offsets (positive areas; an IoU within float32 rounding of 0.5 is the only case the precision can change).
- Ties in score are broken by default-box index (a stable sort); torch's sort leaves their order unspecified.
- An image with no detection yields no rows (the reference's torch.cat of nothing raised, and it skipped the batch
  or image with a message). Detections are returned highest score first (the reference: ascending); COCOeval sorts
  by score itself.
"""
from __future__ import annotations

import math

import numpy as np

from mlperf_keras.inputs import default_boxes


def _softmax_rows(logits: np.ndarray) -> np.ndarray:
    """float32 softmax over the last axis, max-subtracted like torch's F.softmax."""
    x = np.asarray(logits, np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def nms(boxes_ltrb: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS of boxes already sorted by descending score -> indices kept, in that order.

    As the reference: take the best remaining box, drop every remaining box whose IoU with it is >= the threshold
    (it keeps `iou < criteria`), repeat. The IoU matrix of the candidates (at most max_candidates) is computed once.
    """
    count = len(boxes_ltrb)
    if count <= 1:
        return np.arange(count)
    suppresses = default_boxes.iou_matrix(boxes_ltrb, boxes_ltrb) >= iou_threshold
    alive = np.ones(count, bool)
    keep = []
    i = 0
    while True:
        keep.append(i)
        alive &= ~suppresses[i]
        alive[i] = False
        if not alive.any():
            return np.asarray(keep)
        i = int(np.argmax(alive))  # the best-scoring box still alive


def postprocess(loc, logits, dboxes_xywh, score_threshold: float = 0.05, nms_iou: float = 0.5,
                max_candidates: int = 200, max_detections: int = 200) -> list:
    """SSD outputs of a batch -> per image (boxes ltrb [k, 4] float32 normalised, scores [k] float32, labels [k]
    int32 contiguous 1..C-1), highest score first; the reference's decode_batch (see the module docstring).

    loc: [N, D, 4] offsets; logits: [N, D, C] with class 0 background; dboxes_xywh: the [D, 4] default boxes.
    """
    loc, logits = np.asarray(loc), np.asarray(logits, np.float32)
    dboxes_xywh = np.asarray(dboxes_xywh)
    if logits.ndim != 3 or loc.shape != logits.shape[:2] + (4,) or dboxes_xywh.shape != (logits.shape[1], 4):
        raise ValueError(f"postprocess expects loc [N, D, 4], logits [N, D, C] and default boxes [D, 4]; got "
                         f"{loc.shape}, {logits.shape} and {dboxes_xywh.shape}")
    if not 0.0 < score_threshold < 1.0:
        raise ValueError(f"score_threshold must be in (0, 1), got {score_threshold}")
    num_images, num_classes = logits.shape[0], logits.shape[2]
    empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    if num_images == 0:
        return []

    # Necessary condition (see the module docstring): the best foreground logit must beat the background's by
    # logit(threshold); the margin covers float32 rounding. Only the boxes passing it get the exact softmax.
    # (1e-6 |x_0| is float32's rounding of x_0 + bound, far above any real logit's.)
    background = logits[..., :1]
    bound = background + np.float32(math.log(score_threshold / (1.0 - score_threshold)) - 1e-3)
    bound -= np.float32(1e-6) * np.abs(background)
    may_pass = (logits[..., 1:] > bound).any(axis=-1)                                  # [N, D]
    rows = np.flatnonzero(may_pass)                                                    # image * D + box
    probs = _softmax_rows(logits.reshape(-1, num_classes)[rows])                       # as a full softmax would
    row, cls = np.nonzero(probs[:, 1:] > score_threshold)
    if len(row) == 0:
        return [empty] * num_images
    img, box = np.divmod(rows[row], logits.shape[1])
    label, scores = cls + 1, probs[row, cls + 1]

    # Group by (image, class), each group by descending score (stable: ties by default-box index).
    group = img * num_classes + label
    order = np.lexsort((-scores, group))
    img, box, label, scores, group = img[order], box[order], label[order], scores[order], group[order]
    boxes = default_boxes.decode(loc[img, box], dboxes_xywh[box])
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    ends = np.r_[starts[1:], len(group)]
    kept = []
    for start, end in zip(starts, ends):
        end = min(end, start + max_candidates)
        kept.append(start + nms(boxes[start:end], nms_iou))
    kept = np.concatenate(kept)
    img, label, scores, boxes = img[kept], label[kept], scores[kept], boxes[kept]

    # Per image, the max_detections best over all classes.
    order = np.lexsort((-scores, img))
    img, label, scores, boxes = img[order], label[order], scores[order], boxes[order]
    first = np.searchsorted(img, np.arange(num_images))
    rank = np.arange(len(img)) - first[img]
    cut = rank < max_detections
    img, label, scores, boxes = img[cut], label[cut], scores[cut], boxes[cut]
    bounds = np.searchsorted(img, np.arange(num_images + 1))
    return [(boxes[lo:hi].astype(np.float32), scores[lo:hi].astype(np.float32), label[lo:hi].astype(np.int32))
            for lo, hi in zip(bounds[:-1], bounds[1:])]


__all__ = ["nms", "postprocess"]
