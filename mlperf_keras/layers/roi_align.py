"""Multi-level ROIAlign in keras.ops (TensorFlow and JAX), static shapes: one gather over all FPN levels.

As the v0.6/v0.7 reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/csrc/cpu/ROIAlign_cpu.cpp and modeling/poolers.py):
- a box (x1, y1, x2, y2) in image pixels is scaled by the level's 1 / stride without any half-pixel shift (the
  reference's non-"aligned" coordinates); its width and height are at least 1 feature pixel;
- each of the P x P bins averages sampling_ratio x sampling_ratio bilinear samples at
  start + (p + (i + 0.5) / sampling_ratio) x bin_size;
- a sample beyond [-1, H] x [-1, W] contributes 0; otherwise negative coordinates are clamped to 0 and a sample past
  the last row/column reads the last row/column (the kernel's `y_low >= height - 1` branch);
- the level of a box: floor(4 + log2(sqrt(area) / 224 + 1e-6)) clamped to [2, 5] (LevelMapper, canonical scale 224
  at level 4), with the area of inclusive corners (x2 - x1 + 1)(y2 - y1 + 1) (BoxList.area).

Every box reads only its own image and level: the levels' feature maps are flattened and concatenated into one table
and each sample's four neighbours are gathered from it by index, so the shapes never depend on how many boxes land
on each level (the reference loops over levels with index_select/nonzero).
"""
from __future__ import annotations

import math

from keras import ops

POOLER_SCALES = (0.25, 0.125, 0.0625, 0.03125)   # P2..P5, the reference's POOLER_SCALES


def box_levels(boxes, num_levels: int = 4, k_min: int = 2, canonical_scale: float = 224.0,
               canonical_level: int = 4, eps: float = 1e-6):
    """Index (0 = P2) of the level each box (..., 4) is pooled from, int32."""
    area = (boxes[..., 2] - boxes[..., 0] + 1.0) * (boxes[..., 3] - boxes[..., 1] + 1.0)
    scale = ops.sqrt(ops.maximum(area, 0.0))
    level = ops.floor(canonical_level + ops.log2(scale / canonical_scale + eps))
    level = ops.clip(level, k_min, k_min + num_levels - 1) - k_min
    return ops.cast(level, "int32")


def axis_samples(start, end, size, output_size: int, sampling_ratio: int):
    """Sample positions along one axis, their low/high neighbours and the interpolation weights.

    start, end, size: (R,) in feature pixels (size: the level's extent, float); returns tensors of shape
    (R, output_size * sampling_ratio): low, high (int32), w_low, w_high (float32, 0 for samples outside).
    """
    length = ops.maximum(end - start, 1.0)
    bin_size = length / output_size
    steps = ops.convert_to_tensor(
        [p + (i + 0.5) / sampling_ratio for p in range(output_size) for i in range(sampling_ratio)], "float32")
    pos = start[:, None] + steps[None, :] * bin_size[:, None]
    size = size[:, None]
    inside = ops.logical_and(pos >= -1.0, pos <= size)
    pos = ops.maximum(pos, 0.0)
    low = ops.floor(pos)
    at_end = low >= size - 1.0
    low = ops.where(at_end, size - 1.0, low)
    high = ops.where(at_end, low, low + 1.0)
    pos = ops.where(at_end, low, pos)
    frac = pos - low
    valid = ops.cast(inside, "float32")
    return ops.cast(low, "int32"), ops.cast(high, "int32"), (1.0 - frac) * valid, frac * valid


def multilevel_roi_align(features, boxes, output_size: int, sampling_ratio: int = 2, scales=POOLER_SCALES):
    """ROIAlign of boxes over FPN levels.

    features: list of (B, H_l, W_l, C) maps, one per scale (P2..P5); boxes: (B, R, 4) (x1, y1, x2, y2) in image
    pixels. Returns (B, R, output_size, output_size, C) in the features' dtype, computed in float32.
    """
    batch, rois = ops.shape(boxes)[0], boxes.shape[1]
    channels = features[0].shape[-1]
    dtype = features[0].dtype
    heights = [f.shape[1] for f in features]
    widths = [f.shape[2] for f in features]
    # Gathered from float32 copies whatever the features' dtype: the backward of the gathers is a scatter-add into
    # this table, and XLA on a GPU adds bf16 atomically at a small fraction of the float32 rate (one H200, 8 images:
    # the workload benchmark's train step 297 ms with a bf16 table, 102 ms with this one; the bare graph's 58.6 and
    # 46.9 ms; benchmarks/RESULTS.md).
    table = ops.concatenate([ops.reshape(ops.cast(f, "float32"), (-1, channels)) for f in features], axis=0)
    # Level l's rows start at batch x (pixels per image of the levels before it).
    level_starts = [sum(h * w for h, w in zip(heights[:i], widths[:i])) for i in range(len(features))]

    boxes = ops.reshape(ops.cast(boxes, "float32"), (-1, 4))
    level = box_levels(boxes, len(features), k_min=int(round(-math.log2(scales[0]))))
    pick = lambda values, kind: ops.take(ops.convert_to_tensor(values, kind), level)  # noqa: E731
    scale = pick([float(s) for s in scales], "float32")
    height = pick([float(h) for h in heights], "float32")
    width = pick([float(w) for w in widths], "float32")
    image = ops.repeat(ops.arange(batch, dtype="int32"), rois)
    base = ops.cast(batch, "int32") * pick(level_starts, "int32") + image * ops.cast(height * width, "int32")

    y_low, y_high, wy_low, wy_high = axis_samples(boxes[:, 1] * scale, boxes[:, 3] * scale, height, output_size,
                                                   sampling_ratio)
    x_low, x_high, wx_low, wx_high = axis_samples(boxes[:, 0] * scale, boxes[:, 2] * scale, width, output_size,
                                                   sampling_ratio)
    row_width = ops.cast(width, "int32")[:, None, None]
    base = base[:, None, None]

    def corner(ys, xs):
        index = base + ys[:, :, None] * row_width + xs[:, None, :]
        return ops.take(table, index, axis=0)

    def weight(wy, wx):
        return (wy[:, :, None] * wx[:, None, :])[..., None]

    out = (corner(y_low, x_low) * weight(wy_low, wx_low) + corner(y_low, x_high) * weight(wy_low, wx_high)
           + corner(y_high, x_low) * weight(wy_high, wx_low) + corner(y_high, x_high) * weight(wy_high, wx_high))
    n = output_size
    out = ops.reshape(out, (-1, n, sampling_ratio, n, sampling_ratio, channels))
    out = ops.mean(out, axis=(2, 4))
    return ops.cast(ops.reshape(out, (batch, rois, n, n, channels)), dtype)


__all__ = ["POOLER_SCALES", "axis_samples", "box_levels", "multilevel_roi_align"]
