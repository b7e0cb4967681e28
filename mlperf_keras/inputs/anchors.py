"""Mask R-CNN's FPN anchors and box coder: a NumPy contract with keras.ops twins (the model's graph uses the twins).

As the v0.6/v0.7 reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/modeling/rpn/anchor_generator.py and modeling/box_coder.py; configs/e2e_mask_rcnn_R_50_FPN_1x.yaml):
- one anchor size per FPN level: sizes 32, 64, 128, 256, 512 on strides 4, 8, 16, 32, 64, aspect ratios (h / w)
  0.5, 1, 2; a level's cell anchors are Detectron's `generate_anchors(stride, (size,), ratios)`: a (0, 0, stride - 1,
  stride - 1) window, widths round(sqrt(stride^2 / ratio)) and heights round(width x ratio) (the rounding makes them
  "Detectron's rounded anchors"), then scaled by size / stride around the same centre;
- the grid: cell anchors shifted by (x, y) = (j, i) x stride for every feature-map cell, cell-major (row, column,
  then the anchor), which is the reference's `(shifts.view(-1, 1, 4) + base_anchors.view(1, -1, 4))` order and the
  order an NHWC head's (N, H, W, A) output reshapes to;
- an anchor is "visible" (used for the RPN loss) when it lies inside the image (STRADDLE_THRESH 0):
  x1 >= 0, y1 >= 0, x2 < width, y2 < height;
- boxes are (x1, y1, x2, y2) in pixels with inclusive corners: widths are x2 - x1 + 1 (the reference's TO_REMOVE = 1);
- the coder: (wx (cx_g - cx_a) / w_a, wy (cy_g - cy_a) / h_a, ww log(w_g / w_a), wh log(h_g / h_a)) with weights
  (1, 1, 1, 1) for the RPN and (10, 10, 5, 5) for the box head; decoding clamps dw, dh at log(1000 / 16) and
  subtracts 1 from the right/bottom corner.
"""
from __future__ import annotations

import math

import numpy as np

ANCHOR_STRIDES = (4, 8, 16, 32, 64)
ANCHOR_SIZES = (32, 64, 128, 256, 512)
ASPECT_RATIOS = (0.5, 1.0, 2.0)
RPN_CODER_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
BOX_CODER_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
BOX_XFORM_CLIP = math.log(1000.0 / 16)


def cell_anchors(stride: int, size: int, ratios=ASPECT_RATIOS) -> np.ndarray:
    """(len(ratios), 4) anchors of one FPN level around the cell at the origin (Detectron's generate_anchors)."""
    w = h = float(stride)
    x_ctr = y_ctr = 0.5 * (stride - 1)
    ws = np.round(np.sqrt(w * h / np.asarray(ratios, np.float64)))
    hs = np.round(ws * np.asarray(ratios, np.float64))
    ws, hs = ws * (size / stride), hs * (size / stride)
    return np.stack([x_ctr - 0.5 * (ws - 1), y_ctr - 0.5 * (hs - 1),
                     x_ctr + 0.5 * (ws - 1), y_ctr + 0.5 * (hs - 1)], axis=1)


def feature_sizes(height: int, width: int, strides=ANCHOR_STRIDES) -> list:
    """(H, W) of each FPN level for a padded image: every stride-2 step of the backbone maps n to ceil(n / 2)
    (7x7/2 with padding 3, 3x3/2 max pool with padding 1, 1x1/2, the 1x1/2 max pool making P6)."""
    sizes, h, w, s = [], height, width, 1
    for stride in strides:
        while s < stride:
            h, w, s = -(-h // 2), -(-w // 2), s * 2
        sizes.append((h, w))
    return sizes


def fpn_anchors(height: int, width: int, strides=ANCHOR_STRIDES, sizes=ANCHOR_SIZES,
                ratios=ASPECT_RATIOS) -> list:
    """Anchors of every level for a (height, width) padded image: a list of (H_l x W_l x A, 4) float32 arrays."""
    out = []
    for (h, w), stride, size in zip(feature_sizes(height, width, strides), strides, sizes):
        shift_y, shift_x = np.meshgrid(np.arange(h) * stride, np.arange(w) * stride, indexing="ij")
        shifts = np.stack([shift_x, shift_y, shift_x, shift_y], axis=-1).reshape(-1, 1, 4)
        out.append((shifts + cell_anchors(stride, size, ratios)[None]).reshape(-1, 4).astype(np.float32))
    return out


def visible(anchors: np.ndarray, height, width) -> np.ndarray:
    """Anchors inside the (unpadded) image, STRADDLE_THRESH 0."""
    return ((anchors[..., 0] >= 0) & (anchors[..., 1] >= 0) & (anchors[..., 2] < width)
            & (anchors[..., 3] < height))


def _centres(boxes, ops):
    w = boxes[..., 2] - boxes[..., 0] + 1.0
    h = boxes[..., 3] - boxes[..., 1] + 1.0
    return boxes[..., 0] + 0.5 * w, boxes[..., 1] + 0.5 * h, w, h


def encode(gt: np.ndarray, anchors: np.ndarray, weights=BOX_CODER_WEIGHTS) -> np.ndarray:
    """Regression targets of gt boxes relative to anchors/proposals (same leading shape), NumPy."""
    gx, gy, gw, gh = _centres(np.asarray(gt, np.float64), np)
    ax, ay, aw, ah = _centres(np.asarray(anchors, np.float64), np)
    wx, wy, ww, wh = weights
    return np.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah, ww * np.log(gw / aw), wh * np.log(gh / ah)], -1)


def decode(codes: np.ndarray, anchors: np.ndarray, weights=BOX_CODER_WEIGHTS) -> np.ndarray:
    """Boxes from regression codes (..., 4) relative to anchors (..., 4), NumPy."""
    codes = np.asarray(codes, np.float64)
    ax, ay, aw, ah = _centres(np.asarray(anchors, np.float64), np)
    wx, wy, ww, wh = weights
    dx, dy = codes[..., 0] / wx, codes[..., 1] / wy
    dw = np.minimum(codes[..., 2] / ww, BOX_XFORM_CLIP)
    dh = np.minimum(codes[..., 3] / wh, BOX_XFORM_CLIP)
    cx, cy, w, h = dx * aw + ax, dy * ah + ay, np.exp(dw) * aw, np.exp(dh) * ah
    return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w - 1, cy + 0.5 * h - 1], -1)


def encode_ops(gt, anchors, weights=BOX_CODER_WEIGHTS):
    """keras.ops twin of `encode` (float32)."""
    from keras import ops

    gx, gy, gw, gh = _centres(gt, ops)
    ax, ay, aw, ah = _centres(anchors, ops)
    wx, wy, ww, wh = weights
    return ops.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah, ww * ops.log(gw / aw), wh * ops.log(gh / ah)], -1)


def decode_ops(codes, anchors, weights=BOX_CODER_WEIGHTS):
    """keras.ops twin of `decode` (float32)."""
    from keras import ops

    ax, ay, aw, ah = _centres(anchors, ops)
    wx, wy, ww, wh = weights
    dx, dy = codes[..., 0] / wx, codes[..., 1] / wy
    dw = ops.minimum(codes[..., 2] / ww, BOX_XFORM_CLIP)
    dh = ops.minimum(codes[..., 3] / wh, BOX_XFORM_CLIP)
    cx, cy, w, h = dx * aw + ax, dy * ah + ay, ops.exp(dw) * aw, ops.exp(dh) * ah
    return ops.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w - 1, cy + 0.5 * h - 1], -1)


__all__ = ["ANCHOR_SIZES", "ANCHOR_STRIDES", "ASPECT_RATIOS", "BOX_CODER_WEIGHTS", "BOX_XFORM_CLIP",
           "RPN_CODER_WEIGHTS", "cell_anchors", "decode", "decode_ops", "encode", "encode_ops", "feature_sizes",
           "fpn_anchors", "visible"]
