"""Mask R-CNN training graph (layers/maskrcnn.py, maskrcnn_targets.py, box_ops.py): IoU, matching, sampling, NMS,
targets and losses against NumPy on hand-built cases; gradients reach every trainable layer; one train step through
steps.py on TensorFlow and JAX."""
from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from mlperf_keras.inputs import anchors as anchor_lib
from mlperf_keras.layers import box_ops, maskrcnn, maskrcnn_targets, polygon_masks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
np_ = keras.ops.convert_to_numpy


def np_iou(a, b):
    """boxlist_iou (maskrcnn_benchmark/structures/boxlist_ops.py at mlcommons/training 0badcd17): inclusive corners."""
    area = lambda x: (x[:, 2] - x[:, 0] + 1) * (x[:, 3] - x[:, 1] + 1)  # noqa: E731
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt + 1, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area(a)[:, None] + area(b)[None] - inter)


def np_nms(boxes, threshold):
    """Greedy NMS over score-sorted boxes (suppress on IoU > threshold, csrc/cuda/nms.cu)."""
    iou = np_iou(boxes, boxes)
    keep = np.ones(len(boxes), bool)
    for i in range(len(boxes)):
        if keep[i]:
            keep[i + 1:] &= ~(iou[i, i + 1:] > threshold)
    return keep


def test_inclusive_iou_and_nms_match_numpy():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 60, (2, 80, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(2, 30, (2, 80, 2))], -1).astype(np.float32)
    np.testing.assert_allclose(np_(box_ops.inclusive_iou(boxes, boxes))[1], np_iou(boxes[1], boxes[1]), rtol=1e-5)
    keep = np_(box_ops.nms_keep(keras.ops.convert_to_tensor(boxes), 0.5))
    for b in range(2):
        want = np_nms(boxes[b].astype(np.float64), 0.5)
        assert 10 < want.sum() < 80
        np.testing.assert_array_equal(keep[b], want)


def test_matcher_thresholds_low_quality_and_padding():
    # ground truth 0 overlaps prediction 0 at 0.8, prediction 1 at 0.5 (between), prediction 2 at 0.1; ground
    # truth 1's best is 0.4 at predictions 3 and 4 (a tie: both become low-quality matches); row 2 is padding.
    iou = np.array([[[0.8, 0.5, 0.1, 0.0, 0.0, 0.0],
                     [0.0, 0.1, 0.2, 0.4, 0.4, 0.0],
                     [0.9, 0.9, 0.9, 0.9, 0.9, 0.9]]], np.float32)
    valid = np.array([[True, True, False]])
    with_low = np_(maskrcnn_targets.match(iou, valid, 0.7, 0.3, True))
    np.testing.assert_array_equal(with_low, [[0, -2, -1, 1, 1, -1]])
    without = np_(maskrcnn_targets.match(iou, valid, 0.7, 0.3, False))
    np.testing.assert_array_equal(without, [[0, -2, -1, -2, -2, -1]])
    roi = np_(maskrcnn_targets.match(iou, valid, 0.5, 0.5, False))
    np.testing.assert_array_equal(roi, [[0, 0, -1, -1, -1, -1]])


def test_sampler_balances_and_draws_candidates_only():
    positive = np.zeros((2, 40), bool)
    negative = np.zeros((2, 40), bool)
    positive[0, [1, 5, 7, 9, 11, 13]] = True       # 6 positives > 4 allowed
    negative[0, 20:40] = True
    positive[1, [2]] = True                         # 1 positive; only 3 negatives: 4 of 8 slots filled
    negative[1, [30, 31, 32]] = True
    seed = keras.random.SeedGenerator(3)
    index, is_positive, valid = (np_(t) for t in maskrcnn_targets.sample(positive, negative, 8, 4, seed))
    np.testing.assert_array_equal(is_positive[0], [1, 1, 1, 1, 0, 0, 0, 0])
    assert valid[0].all() and positive[0, index[0, :4]].all() and negative[0, index[0, 4:]].all()
    assert len(set(index[0].tolist())) == 8
    np.testing.assert_array_equal(is_positive[1], [1, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(valid[1], [1, 1, 1, 1, 0, 0, 0, 0])
    assert index[1, 0] == 2 and sorted(index[1, 1:4].tolist()) == [30, 31, 32]
    # uniform draws: over many draws every positive of image 0 is picked about 4/6 of the time
    counts = np.zeros(40)
    for _ in range(60):
        counts[np_(maskrcnn_targets.sample(positive, negative, 8, 4, seed)[0])[0, :4]] += 1
    assert counts[[1, 5, 7, 9, 11, 13]].min() > 0.4 * 60 and counts.sum() == 240


def _bce(x, y):
    return np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))


def _smooth_l1(x, beta):
    return np.where(np.abs(x) < beta, 0.5 * x * x / beta, np.abs(x) - 0.5 * beta)


def test_rpn_losses_by_hand():
    logits = np.array([[2.0, -1.0, 0.5, 3.0], [0.0, 1.0, -2.0, 0.3]], np.float32)
    deltas = np.arange(32, dtype=np.float32).reshape(2, 4, 4) / 50
    index = np.array([[3, 0, 1], [1, 2, 0]], np.int32)
    labels = np.array([[1, 0, 0], [1, 0, 0]], np.float32)
    valid = np.array([[1, 1, 1], [1, 1, 0]], bool)       # image 1's third slot is empty
    targets = np.full((2, 3, 4), 0.05, np.float32)
    obj, box = (float(v) for v in maskrcnn_targets.rpn_losses(logits, deltas, index, labels, valid, targets))
    x = np.array([3.0, 2.0, -1.0, 1.0, -2.0])
    y = np.array([1, 0, 0, 1, 0.0])
    assert obj == pytest.approx(_bce(x, y).mean(), rel=1e-6)
    want_box = (_smooth_l1(deltas[0, 3] - 0.05, 1 / 9).sum() + _smooth_l1(deltas[1, 1] - 0.05, 1 / 9).sum()) / 5
    assert box == pytest.approx(want_box, rel=1e-5)


def test_box_losses_by_hand_class_specific():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(1, 4, 3)).astype(np.float32)
    deltas = rng.normal(size=(1, 4, 3, 4)).astype(np.float32)
    labels = np.array([[2, 1, 0, 0]], np.int32)
    valid = np.array([[1, 1, 1, 0]], bool)
    targets = rng.normal(size=(1, 4, 4)).astype(np.float32)
    cls, box = (float(v) for v in maskrcnn_targets.box_losses(logits, deltas, labels, valid, targets))
    log_p = logits[0] - np.log(np.exp(logits[0]).sum(-1, keepdims=True))
    assert cls == pytest.approx(-(log_p[0, 2] + log_p[1, 1] + log_p[2, 0]) / 3, rel=1e-5)
    want = (_smooth_l1(deltas[0, 0, 2] - targets[0, 0], 1).sum() + _smooth_l1(deltas[0, 1, 1] - targets[0, 1], 1).sum())
    assert box == pytest.approx(want / 3, rel=1e-5)


def test_roi_box_targets_use_the_references_coder_weights_10_10_5_5():
    """The box head's targets: BoxCoder(weights=cfg.MODEL.ROI_HEADS.BBOX_REG_WEIGHTS) with BBOX_REG_WEIGHTS
    (10., 10., 5., 5.) (maskrcnn_benchmark/config/defaults.py and modeling/roi_heads/box_head/loss.py, mlcommons/
    training 0badcd17), BoxCoder.encode written out by hand (modeling/box_coder.py, TO_REMOVE = 1)."""
    gt = np.array([[[10.0, 20.0, 49.0, 69.0], [0, 0, 0, 0]]], np.float32)
    proposal = np.array([14.0, 16.0, 53.0, 59.0], np.float32)    # IoU 0.62 with the ground truth
    proposals = np.array([[proposal, [200.0, 200.0, 230.0, 230.0]]], np.float32)
    spec = maskrcnn.Spec(num_classes=3, roi_batch=4)
    rois, labels, valid, targets, _ = (np_(t) for t in maskrcnn_targets.roi_targets(
        proposals, np.array([[True, True]]), gt, np.array([[2, 0]], np.int32), np.array([[True, False]]), spec,
        seed=keras.random.SeedGenerator(1)))
    slot = [i for i in range(4) if labels[0, i] == 2 and np.allclose(rois[0, i], proposal)]
    assert len(slot) == 1, (rois, labels)
    ex_w, ex_h = 53.0 - 14.0 + 1, 59.0 - 16.0 + 1
    ex_x, ex_y = 14.0 + 0.5 * ex_w, 16.0 + 0.5 * ex_h
    gt_w, gt_h = 49.0 - 10.0 + 1, 69.0 - 20.0 + 1
    gt_x, gt_y = 10.0 + 0.5 * gt_w, 20.0 + 0.5 * gt_h
    want = [10.0 * (gt_x - ex_x) / ex_w, 10.0 * (gt_y - ex_y) / ex_h, 5.0 * np.log(gt_w / ex_w),
            5.0 * np.log(gt_h / ex_h)]
    np.testing.assert_allclose(targets[0, slot[0]], want, rtol=1e-5, atol=1e-6)


def test_mask_targets_and_loss_by_hand():
    """Polygons cropped to ROIs and scaled to 28x28 (project_masks_on_boxes: subtract (x1, y1), scale by
    28 / max(x2 - x1, 1)), each cell inside when its centre is."""
    polygons = np.zeros((1, 2, 8, 5), np.float32)
    polygons[0, 0, :4] = polygon_masks.edge_rows([[10, 10, 29, 10, 29, 29, 10, 29]])   # the square 10..29
    polygons[0, 1, :4] = polygon_masks.edge_rows([[0, 0, 20, 0, 20, 40, 0, 40]])       # the left half of 0..40
    rois = np.array([[[10, 10, 29, 29], [0, 0, 40, 40], [0, 0, 39, 39]]], np.float32)
    instance = np.array([[0, 0, 1]], np.int32)
    t = np_(maskrcnn_targets.mask_targets(polygons, rois, instance, size=28))
    assert t[0, 0].all()                           # the ROI is the square: all ones
    square = np.zeros((28, 28))                    # x 7..20.3 at scale 0.7: centres 7.5..19.5
    square[7:20, 7:20] = 1
    np.testing.assert_array_equal(t[0, 1], square)
    np.testing.assert_array_equal(t[0, 2][:, :14], 1)   # x up to 20 x 28 / 39 = 14.4
    np.testing.assert_array_equal(t[0, 2][:, 14:], 0)
    logits = np.random.default_rng(2).normal(size=(1, 3, 28, 28, 3)).astype(np.float32)
    labels = np.array([[1, 2, 0]], np.int32)
    valid = np.array([[1, 1, 0]], bool)
    got = float(maskrcnn_targets.mask_loss(logits, labels, t, valid))
    want = np.concatenate([_bce(logits[0, 0, ..., 1], t[0, 0]).ravel(), _bce(logits[0, 1, ..., 2], t[0, 1]).ravel()])
    assert got == pytest.approx(want.mean(), rel=1e-5)


def test_rpn_targets_encode_the_matched_box():
    anchors = anchor_lib.fpn_anchors(64, 64)
    gt = np.array([[[8, 8, 40, 40], [0, 0, 0, 0]]], np.float32)
    index, labels, valid, targets = (np_(t) for t in maskrcnn_targets.rpn_targets(
        anchors, gt, np.array([[True, False]]), np.array([[64, 64]], np.int32), maskrcnn.TINY_SPEC,
        keras.random.SeedGenerator(0)))
    flat = np.concatenate(anchors)
    iou = np_iou(gt[0, :1].astype(np.float64), flat.astype(np.float64))[0]
    inside = anchor_lib.visible(flat, 64, 64)
    pos = index[0][labels[0] > 0]
    assert len(pos) > 0 and inside[pos].all()
    assert all(iou[p] >= 0.7 or iou[p] == iou.max() for p in pos)
    neg = index[0][(labels[0] == 0) & valid[0]]
    assert (iou[neg] < 0.3).all() and inside[neg].all()
    np.testing.assert_allclose(targets[0][labels[0] > 0], anchor_lib.encode(np.repeat(gt[0, :1], len(pos), 0),
                                                                            flat[pos], (1, 1, 1, 1)), atol=1e-4)


def tiny_batch():
    """Two 64x96 images with three boxes and their masks (image 1 resized to 48x64 before padding)."""
    b, h, w, g = 2, 64, 96, maskrcnn.TINY_SPEC.max_gt
    polygons = np.zeros((b, g, 8, 5), np.float32)   # each object the rectangle of its box
    boxes = np.zeros((b, g, 4), np.float32)
    classes = np.zeros((b, g), np.int32)
    for i, j, box, cls in ((0, 0, (10, 12, 40, 50), 1), (0, 1, (50, 5, 90, 30), 2), (1, 0, (0, 0, 63, 47), 2)):
        boxes[i, j] = box
        x1, y1, x2, y2 = box
        polygons[i, j, :4] = polygon_masks.edge_rows([[x1, y1, x2, y1, x2, y2, x1, y2]])
        classes[i, j] = cls
    images = np.random.default_rng(0).integers(0, 255, (b, h, w, 3)).astype(np.uint8)
    return {"images": images, "image_sizes": np.array([[64, 96], [48, 64]], np.int32), "gt_boxes": boxes,
            "gt_classes": classes, "gt_polygons": polygons}


def test_gradients_reach_every_trainable_layer():
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = maskrcnn.MaskRCNN(maskrcnn.TINY_SPEC, seed=1)
    batch = tiny_batch()
    model(batch, training=True)
    with tf.GradientTape(persistent=True) as tape:
        pred = model(batch, training=True)
        losses = maskrcnn_targets.training_losses(pred)
        total = sum(losses.values())
        # Every head output at once: on a 64x96 image no anchor of P4/P5 lies inside the image and no ROI is large
        # enough for P4/P5, so the losses alone leave fpn_layer4/5 without gradient; connectivity is checked here.
        outputs = sum(tf.reduce_mean(pred[k]) for k in ("rpn_logits", "rpn_deltas", "class_logits", "box_deltas",
                                                        "mask_logits"))
    assert all(np.isfinite(float(v)) for v in losses.values()) and float(losses["loss_mask"]) > 0
    grads = tape.gradient(total, model.trainable_variables)
    assert all(g is not None and np.isfinite(np_(tf.convert_to_tensor(g))).all() for g in grads)
    reached = tape.gradient(outputs, model.trainable_variables)
    missing = [v.path for v, g in zip(model.trainable_variables, reached)
               if g is None or not np.any(np_(tf.convert_to_tensor(g)))]
    assert not missing
    frozen = {v.path.split("/")[-2] for v in model.non_trainable_variables}
    assert "stem_conv" in frozen and "stage1_block1_1_conv" in frozen and "stage2_block1_1_conv" not in frozen


STEP_CODE = """
import os, time, numpy as np, keras
JIT = os.environ["STEP_JIT"] == "1"
start = time.time()
from mlperf_keras import distribute, steps
from mlperf_keras.layers import maskrcnn, maskrcnn_targets
from tests.test_maskrcnn_losses import tiny_batch
keras.utils.set_random_seed(0)
model = maskrcnn.MaskRCNN(maskrcnn.TINY_SPEC, seed=1)
batch = tiny_batch()
model(batch, training=True)
before = [np.array(v.value) for v in model.trainable_variables]
step = steps.make_train_step(model, keras.optimizers.SGD(1e-4, momentum=0.9), maskrcnn_targets.total_loss,
                             distribute.create(keras.backend.backend()), jit_compile=JIT)
loss = float(step(batch, np.zeros(2, np.float32)))
step.sync_to_model()
still = sorted({v.path.split("/")[-2] for b, v in zip(before, model.trainable_variables)
                if np.array_equal(b, np.array(v.value))})
print("RESULT", keras.backend.backend(), np.isfinite(loss), ",".join(still) or "-", time.time() - start)
"""


# TensorFlow runs its step as a tf.function without XLA here: XLA's CPU compile of the whole detector did not finish
# in 10 minutes on the shared 2-core test machine; JAX compiles it with jax.jit.
@pytest.mark.slow
@pytest.mark.parametrize("backend,jit", [("tensorflow", "0"), ("jax", "1")])
def test_one_train_step_through_steps_py(backend, jit):
    proc = subprocess.run([sys.executable, "-c", STEP_CODE], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu", "STEP_JIT": jit})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")][-1].split()
    # Every trainable layer moves but P4/P5's output convolutions: on the 64x96 test images no P4/P5 anchor is
    # inside the image and no ROI is large enough for those levels (test_gradients_reach_every_trainable_layer).
    assert result[1] == backend and result[2] == "True", result
    assert set(result[3].split(",")) <= {"fpn_layer4", "fpn_layer5"}, result
