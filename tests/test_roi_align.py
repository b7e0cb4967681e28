"""ROIAlign (layers/roi_align.py) against a NumPy port of the reference's CPU kernel, and the FPN level mapping."""
from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from mlperf_keras.layers.roi_align import POOLER_SCALES, box_levels, multilevel_roi_align


def reference_roi_align(feature, box, scale, pooled, sampling_ratio):
    """A line-by-line NumPy port of ROIAlignForward_cpu_kernel and pre_calc_for_bilinear_interpolate
    (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52,
    object_detection/pytorch/maskrcnn_benchmark/csrc/cpu/ROIAlign_cpu.cpp) for one box on one (H, W, C) map."""
    height, width, channels = feature.shape
    start_w, start_h, end_w, end_h = (float(v) * scale for v in box)
    roi_w = max(end_w - start_w, 1.0)
    roi_h = max(end_h - start_h, 1.0)
    bin_h, bin_w = roi_h / pooled, roi_w / pooled
    grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / pooled)
    grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pooled)
    out = np.zeros((pooled, pooled, channels))
    for ph in range(pooled):
        for pw in range(pooled):
            total = np.zeros(channels)
            for iy in range(grid_h):
                yy = start_h + ph * bin_h + (iy + .5) * bin_h / grid_h
                for ix in range(grid_w):
                    xx = start_w + pw * bin_w + (ix + .5) * bin_w / grid_w
                    x, y = xx, yy
                    if y < -1.0 or y > height or x < -1.0 or x > width:
                        continue
                    y = max(y, 0.0)
                    x = max(x, 0.0)
                    y_low, x_low = int(y), int(x)
                    if y_low >= height - 1:
                        y_high = y_low = height - 1
                        y = float(y_low)
                    else:
                        y_high = y_low + 1
                    if x_low >= width - 1:
                        x_high = x_low = width - 1
                        x = float(x_low)
                    else:
                        x_high = x_low + 1
                    ly, lx = y - y_low, x - x_low
                    hy, hx = 1. - ly, 1. - lx
                    total += (hy * hx * feature[y_low, x_low] + hy * lx * feature[y_low, x_high]
                              + ly * hx * feature[y_high, x_low] + ly * lx * feature[y_high, x_high])
            out[ph, pw] = total / (grid_h * grid_w)
    return out


def reference_levels(boxes):
    """LevelMapper(2, 5) of modeling/poolers.py at the same commit, on BoxList.area() (inclusive corners)."""
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    return np.clip(np.floor(4 + np.log2(np.sqrt(area) / 224 + 1e-6)), 2, 5).astype(np.int64) - 2


def test_levels_follow_the_canonical_224_at_level_4():
    boxes = np.array([[0, 0, 223, 223], [0, 0, 222, 222], [0, 0, 447, 447], [10, 10, 20, 20], [0, 0, 2000, 2000],
                      [0, 0, 111, 111], [0, 0, 110, 110]], np.float32)
    want = reference_levels(boxes.astype(np.float64))
    np.testing.assert_array_equal(want, [2, 1, 3, 0, 3, 1, 0])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(box_levels(boxes)), want)


@pytest.mark.parametrize("pooled", [7, 14])
def test_roi_align_matches_the_reference_kernel(pooled):
    rng = np.random.default_rng(0)
    image = 128
    sizes = [image // 4, image // 8, image // 16, image // 32]
    features = [rng.normal(size=(2, s, s, 3)).astype(np.float32) for s in sizes]
    boxes = np.array([
        [[3.3, 5.7, 40.2, 30.9], [0, 0, 127, 127], [-6, -9, 20, 25], [100, 90, 140, 135]],   # border and outside
        [[60.5, 2.25, 61.0, 2.5], [10, 20, 10, 20], [0, 0, 500, 400], [120.8, 0.3, 127.9, 127.9]],  # tiny, huge
    ], np.float32)
    got = keras.ops.convert_to_numpy(multilevel_roi_align([keras.ops.convert_to_tensor(f) for f in features],
                                                          keras.ops.convert_to_tensor(boxes), pooled, 2))
    assert got.shape == (2, 4, pooled, pooled, 3)
    levels = reference_levels(boxes.reshape(-1, 4).astype(np.float64)).reshape(2, 4)
    assert len(set(levels.ravel().tolist())) >= 3   # the case exercises several levels
    for b in range(2):
        for r in range(4):
            level = levels[b, r]
            want = reference_roi_align(features[level][b], boxes[b, r], POOLER_SCALES[level], pooled, 2)
            np.testing.assert_allclose(got[b, r], want, rtol=1e-4, atol=1e-5, err_msg=f"image {b} box {r}")


def test_roi_align_gradient_reaches_the_features():
    import tensorflow as tf

    features = [tf.Variable(np.ones((1, s, s, 2), np.float32)) for s in (16, 8, 4, 2)]
    boxes = tf.constant([[[0, 0, 30, 30], [0, 0, 63, 63]]], tf.float32)
    with tf.GradientTape() as tape:
        out = multilevel_roi_align(features, boxes, 7, 2)
        total = tf.reduce_sum(out)
    grads = tape.gradient(total, features)
    # The 31-pixel box pools from P2, the 64-pixel one from P2 too (floor(4 + log2(64/224)) = 2); each output
    # value is an average of weights summing to 1, so P2 receives 2 boxes x 49 bins x 2 channels in total.
    assert float(tf.reduce_sum(grads[0])) == pytest.approx(2 * 49 * 2, rel=1e-5)
    assert all(g is None or float(tf.reduce_sum(g)) == 0 for g in grads[1:])
