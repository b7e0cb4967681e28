"""Box operations of the Mask R-CNN graph in keras.ops (static shapes): IoU with inclusive corners, greedy NMS,
clipping.

As the reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/: structures/boxlist_ops.py boxlist_iou, csrc/cuda/nms.cu, structures/bounding_box.py
clip_to_image): IoU with inclusive corners ((x2 - x1 + 1)(y2 - y1 + 1) areas), everywhere (boxlist_iou, the NMS
kernel); a box is suppressed by a higher-scored kept box with IoU > threshold, the CUDA kernel's comparison. The box
coder (encode/decode with weights) is inputs/anchors.py's, beside its NumPy contract.
"""
from __future__ import annotations

from keras import ops


def inclusive_iou(a, b):
    """IoU of boxes a (..., N, 4) and b (..., M, 4) with inclusive corners -> (..., N, M)."""
    lt = ops.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = ops.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    wh = ops.maximum(rb - lt + 1.0, 0.0)
    inter = wh[..., 0] * wh[..., 1]
    area = lambda x: (x[..., 2] - x[..., 0] + 1.0) * (x[..., 3] - x[..., 1] + 1.0)  # noqa: E731
    return inter / (area(a)[..., :, None] + area(b)[..., None, :] - inter)


def nms_keep(boxes, threshold: float, valid=None):
    """Greedy NMS of score-sorted boxes (B, N, 4) -> keep (B, N) bool, exactly the greedy result: the fixed point of
    "kept unless an earlier kept box overlaps it by IoU > threshold", reached in at most N rounds (round k settles
    box k), usually a handful."""
    n = boxes.shape[-2]
    overlap = inclusive_iou(boxes, boxes) > threshold
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


def finite_boxes(boxes):
    """Boxes with non-finite coordinates (a diverged model's) set to 0: a NaN cast to an index is out of range, which
    TensorFlow's CPU gather raises on; with zeros the step runs on and its non-finite loss ends the run as diverged."""
    return ops.where(ops.isfinite(boxes), boxes, 0.0)
