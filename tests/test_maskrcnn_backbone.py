"""data_prep.maskrcnn_backbone: Detectron's R-50.pkl (a pickle of Caffe2-named NumPy arrays) -> our backbone's
variables, tested on a generated pickle with the real names and shapes."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from data_prep import maskrcnn_backbone
from mlperf_keras.inputs.manifest import DataError


def detectron_r50_blobs(rng) -> dict:
    """Every blob of Detectron's ImageNetPretrained/MSRA/R-50.pkl with its shape (plus fc1000 and a momentum blob)."""
    blobs = {"conv1_w": (64, 3, 7, 7), "res_conv1_bn_s": (64,), "res_conv1_bn_b": (64,),
             "fc1000_w": (1000, 2048), "fc1000_b": (1000,), "conv1_w_momentum": (64, 3, 7, 7)}
    inputs = 64
    for stage, blocks in zip(range(2, 6), maskrcnn_backbone.RESNET50_BLOCKS):
        width = 64 * 2 ** (stage - 2)
        for b in range(blocks):
            p = f"res{stage}_{b}"
            for branch, shape in (("branch2a", (width, inputs, 1, 1)), ("branch2b", (width, width, 3, 3)),
                                  ("branch2c", (4 * width, width, 1, 1))) + (
                    (("branch1", (4 * width, inputs, 1, 1)),) if b == 0 else ()):
                blobs[f"{p}_{branch}_w"] = shape
                blobs[f"{p}_{branch}_bn_s"] = (shape[0],)
                blobs[f"{p}_{branch}_bn_b"] = (shape[0],)
            inputs = 4 * width
    return {k: rng.normal(size=s).astype(np.float32) for k, s in blobs.items()}


def test_converts_and_loads_into_the_backbone(tmp_path):
    from mlperf_keras.layers import maskrcnn

    blobs = detectron_r50_blobs(np.random.default_rng(0))
    path = tmp_path / "R-50.pkl"
    with open(path, "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)      # Detectron's pickles may wrap the arrays in "blobs"
    out = tmp_path / "backbone.npz"
    assert maskrcnn_backbone.convert_file(str(path), str(out)) == len(maskrcnn_backbone.expected_names()) == 3 * 53
    model = maskrcnn.backbone_model()
    assert maskrcnn.load_backbone_weights(model, str(out)) == 3 * 53
    variables = maskrcnn.backbone_variables(model)
    np.testing.assert_array_equal(variables["stem_conv/kernel"].numpy(), blobs["conv1_w"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(variables["stage3_block1_proj_conv/kernel"].numpy(),
                                  blobs["res4_0_branch1_w"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(variables["stage4_block3_2_bn/scale"].numpy(), blobs["res5_2_branch2b_bn_s"])
    np.testing.assert_array_equal(variables["stage1_block2_3_bn/bias"].numpy(), blobs["res2_1_branch2c_bn_b"])


def test_refuses_what_is_not_detectrons_resnet50(tmp_path):
    blobs = detectron_r50_blobs(np.random.default_rng(1))
    del blobs["res3_2_branch2b_w"]
    with pytest.raises(DataError, match="no blob for stage2_block3_2_conv/kernel"):
        maskrcnn_backbone.convert(blobs)
    with pytest.raises(DataError, match="not a blob of Detectron's ResNet-50"):
        maskrcnn_backbone.convert({**detectron_r50_blobs(np.random.default_rng(1)), "conv_rpn_fpn2_w": np.zeros(1)})
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="not a readable pickle"):
        maskrcnn_backbone.read_pickle(str(bad))
