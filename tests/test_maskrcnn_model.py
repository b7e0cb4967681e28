"""Mask R-CNN model facts: MSRA backbone options, FPN anchors against the reference's generate_anchors, the box
coder, the parameter count, head shapes."""
from __future__ import annotations

import keras
import numpy as np
import pytest

from mlperf_keras.inputs import anchors
from mlperf_keras.layers import maskrcnn, resnet


# --- A NumPy port of the reference's generate_anchors (mlcommons/training
# 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/maskrcnn_benchmark/modeling/rpn/
# anchor_generator.py), np.float -> float, torch.from_numpy dropped.
def ref_generate_anchors(stride=16, sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1, 2)):
    return _ref_generate_anchors(stride, np.array(sizes, dtype=float) / stride,
                                 np.array(aspect_ratios, dtype=float))


def _ref_generate_anchors(base_size, scales, aspect_ratios):
    anchor = np.array([1, 1, base_size, base_size], dtype=float) - 1
    a = _ratio_enum(anchor, aspect_ratios)
    return np.vstack([_scale_enum(a[i, :], scales) for i in range(a.shape[0])])


def _whctrs(anchor):
    w = anchor[2] - anchor[0] + 1
    h = anchor[3] - anchor[1] + 1
    return w, h, anchor[0] + 0.5 * (w - 1), anchor[1] + 0.5 * (h - 1)


def _mkanchors(ws, hs, x_ctr, y_ctr):
    ws, hs = ws[:, np.newaxis], hs[:, np.newaxis]
    return np.hstack((x_ctr - 0.5 * (ws - 1), y_ctr - 0.5 * (hs - 1), x_ctr + 0.5 * (ws - 1), y_ctr + 0.5 * (hs - 1)))


def _ratio_enum(anchor, ratios):
    w, h, x_ctr, y_ctr = _whctrs(anchor)
    ws = np.round(np.sqrt(w * h / ratios))
    hs = np.round(ws * ratios)
    return _mkanchors(ws, hs, x_ctr, y_ctr)


def _scale_enum(anchor, scales):
    w, h, x_ctr, y_ctr = _whctrs(anchor)
    return _mkanchors(w * scales, h * scales, x_ctr, y_ctr)


def ref_grid_anchors(grid_h, grid_w, stride, base):
    """AnchorGenerator.grid_anchors of the same file, in NumPy."""
    shift_y, shift_x = np.meshgrid(np.arange(0, grid_h * stride, stride, dtype=np.float32),
                                   np.arange(0, grid_w * stride, stride, dtype=np.float32), indexing="ij")
    shifts = np.stack((shift_x.reshape(-1), shift_y.reshape(-1), shift_x.reshape(-1), shift_y.reshape(-1)), axis=1)
    return (shifts.reshape(-1, 1, 4) + base.reshape(1, -1, 4)).reshape(-1, 4)


def test_cell_anchors_are_detectrons_rounded_anchors():
    for stride, size in zip(anchors.ANCHOR_STRIDES, anchors.ANCHOR_SIZES):
        np.testing.assert_array_equal(anchors.cell_anchors(stride, size), ref_generate_anchors(stride, (size,)))
    # maskrcnn-benchmark's well-known P2 cell anchors (rounded widths 23, 16, 11 at ratio 0.5, 1, 2, scaled x8).
    np.testing.assert_array_equal(anchors.cell_anchors(4, 32),
                                  [[-22, -10, 25, 13], [-14, -14, 17, 17], [-10, -22, 13, 25]])


def test_fpn_anchors_per_level_and_visibility():
    height, width = 800, 1344
    levels = anchors.fpn_anchors(height, width)
    assert anchors.feature_sizes(height, width) == [(200, 336), (100, 168), (50, 84), (25, 42), (13, 21)]
    assert [len(a) for a in levels] == [200 * 336 * 3, 100 * 168 * 3, 50 * 84 * 3, 25 * 42 * 3, 13 * 21 * 3]
    for a, (h, w), stride, size in zip(levels, anchors.feature_sizes(height, width), anchors.ANCHOR_STRIDES,
                                       anchors.ANCHOR_SIZES):
        np.testing.assert_array_equal(a, ref_grid_anchors(h, w, stride, ref_generate_anchors(stride, (size,))))
    vis = anchors.visible(levels[0], 600, 900)
    a = levels[0]
    assert vis.sum() == ((a[:, 0] >= 0) & (a[:, 1] >= 0) & (a[:, 2] < 900) & (a[:, 3] < 600)).sum() > 0
    assert not anchors.visible(np.array([[-1, 0, 10, 10], [0, 0, 900, 10]], np.float32), 600, 900).any()


@pytest.mark.parametrize("weights", [anchors.RPN_CODER_WEIGHTS, anchors.BOX_CODER_WEIGHTS])
def test_box_coder_round_trip_and_ops_twin(weights):
    rng = np.random.default_rng(2)
    ref = np.concatenate([rng.uniform(0, 500, (50, 2)), rng.uniform(0, 500, (50, 2))], 1)
    ref[:, 2:] = ref[:, :2] + rng.uniform(1, 300, (50, 2))
    gt = ref + rng.normal(0, 20, ref.shape)
    gt[:, 2:] = np.maximum(gt[:, 2:], gt[:, :2] + 1)
    codes = anchors.encode(gt, ref, weights)
    np.testing.assert_allclose(anchors.decode(codes, ref, weights), gt, atol=1e-6)
    # the reference encodes centres of inclusive boxes: a box equal to its anchor codes to 0
    np.testing.assert_allclose(anchors.encode(ref, ref, weights), 0, atol=1e-12)
    ops_codes = keras.ops.convert_to_numpy(anchors.encode_ops(keras.ops.convert_to_tensor(gt, "float32"),
                                                              keras.ops.convert_to_tensor(ref, "float32"), weights))
    np.testing.assert_allclose(ops_codes, codes, rtol=1e-4, atol=1e-3)
    ops_boxes = keras.ops.convert_to_numpy(anchors.decode_ops(keras.ops.convert_to_tensor(codes, "float32"),
                                                              keras.ops.convert_to_tensor(ref, "float32"), weights))
    np.testing.assert_allclose(ops_boxes, gt, rtol=1e-4, atol=1e-2)
    # dw beyond log(1000 / 16) is clamped (as BoxCoder.decode)
    huge = anchors.decode(np.array([[0, 0, 100.0 * weights[2], 0]]), np.array([[0, 0, 15, 15]]), weights)
    assert huge[0, 2] - huge[0, 0] + 1 == pytest.approx(1000.0)


def test_msra_bottleneck_options():
    x = keras.Input((32, 32, 64))
    options = resnet.BlockOptions(stride_in_1x1=True, frozen_batch_norm=True, trainable=False)
    model = keras.Model(x, resnet.bottleneck_block(x, 32, 2, "b", options, projection=True))
    assert model.get_layer("b_1_conv").strides == (2, 2) and model.get_layer("b_2_conv").strides == (1, 1)
    assert model.get_layer("b_proj_conv").strides == (2, 2)
    assert model.output.shape == (None, 16, 16, 128)
    assert not model.trainable_weights
    assert isinstance(model.get_layer("b_1_bn"), resnet.FrozenAffine)
    # v1.5 (the default) keeps the stride on the 3x3
    default = keras.Model(x, resnet.bottleneck_block(x, 32, 2, "c", resnet.BlockOptions(), projection=True))
    assert default.get_layer("c_1_conv").strides == (1, 1) and default.get_layer("c_2_conv").strides == (2, 2)


def test_frozen_affine_is_scale_and_bias_without_epsilon():
    layer = resnet.FrozenAffine()
    x = np.arange(12, dtype=np.float32).reshape(1, 2, 2, 3)
    layer.build(x.shape)
    layer.scale.assign([2.0, 0.5, -1.0])
    layer.bias.assign([1.0, 0.0, 3.0])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), x * [2.0, 0.5, -1.0] + [1.0, 0.0, 3.0])
    assert not layer.trainable_weights and len(layer.non_trainable_weights) == 2


@pytest.fixture(scope="module")
def full_size():
    """The 81-class backbone and heads, built once for this module (building ResNet-50-FPN takes seconds)."""
    return maskrcnn.backbone_model(), maskrcnn.box_head_model(), maskrcnn.mask_head_model()


def test_parameter_count_matches_torchvision_with_81_classes(full_size):
    backbone, box_head, mask_head = full_size
    # ResNet-50 convolutions (25,557,032 less the 1000-way fc 2,049,000 and 2 x 26,560 batch-norm affines).
    resnet_convs = 25_557_032 - 2_049_000 - 2 * 26_560
    fpn = 256 * (256 + 512 + 1024 + 2048) + 4 * 256 + 4 * (9 * 256 * 256 + 256)
    rpn = (9 * 256 * 256 + 256) + (256 * 3 + 3) + (256 * 12 + 12)
    box = (7 * 7 * 256 * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 81 + 81) + (1024 * 324 + 324)
    mask = 4 * (9 * 256 * 256 + 256) + (4 * 256 * 256 + 256) + (256 * 81 + 81)
    weights = resnet_convs + fpn + rpn + box + mask
    assert weights == 44_347_573   # torchvision maskrcnn_resnet50_fpn: 44,401,393 at 91 classes, minus 53,820
    frozen_affines = 2 * 26_560    # FrozenAffine scale + bias: buffers in the reference, weights here
    frozen_convs = 7 * 7 * 3 * 64 + (64 * 64 + 9 * 64 * 64 + 64 * 256 + 64 * 256) + 2 * (256 * 64 + 9 * 64 * 64 + 64 * 256)
    assert frozen_convs == 9_408 + 212_992
    total = backbone.count_params() + box_head.count_params() + mask_head.count_params()
    trainable = sum(int(np.prod(w.shape)) for m in (backbone, box_head, mask_head) for w in m.trainable_weights)
    assert total == weights + frozen_affines == 44_400_693
    assert trainable == weights - frozen_convs == 44_125_173


def test_backbone_and_head_shapes(full_size):
    backbone, box_head, mask_head = full_size
    outs = backbone(np.zeros((1, 64, 96, 3), np.float32))
    pyramid, logits, deltas = outs[:5], outs[5:10], outs[10:]
    sizes = anchors.feature_sizes(64, 96)
    assert [tuple(p.shape) for p in pyramid] == [(1, h, w, 256) for h, w in sizes]
    level_anchors = anchors.fpn_anchors(64, 96)
    assert [tuple(t.shape) for t in logits] == [(1, len(a)) for a in level_anchors]
    assert [tuple(t.shape) for t in deltas] == [(1, len(a), 4) for a in level_anchors]
    scores, box_deltas = box_head(np.zeros((3, 7, 7, 256), np.float32))
    assert scores.shape == (3, 81) and box_deltas.shape == (3, 81, 4)
    assert mask_head(np.zeros((2, 14, 14, 256), np.float32)).shape == (2, 28, 28, 81)


def test_caffe_input_is_bgr_minus_means():
    rgb = np.array([[[[10, 20, 30]]]], np.uint8)
    out = keras.ops.convert_to_numpy(maskrcnn.CaffeInput()(rgb))
    np.testing.assert_allclose(out[0, 0, 0], np.array([30, 20, 10]) - np.array(maskrcnn.PIXEL_MEANS_BGR), rtol=1e-6)
