"""python -m data_prep.maskrcnn_backbone --detectron_pickle=R-50.pkl --output=maskrcnn_r50_backbone.npz

Converts Detectron's ImageNet-trained MSRA ResNet-50 (`R-50.pkl`, md5 b19105fdd7baafb40480251377de18f2: the Mask
R-CNN reference's MODEL.WEIGHT "catalog://ImageNetPretrained/MSRA/R-50", mlcommons/training
0badcd1786fcb007725ed05f1c44e9d80bbeac52 object_detection/pytorch/configs/e2e_mask_rcnn_R_50_FPN_1x.yaml and
maskrcnn_benchmark/config/paths_catalog.py) into an .npz keyed by our backbone's variable names
("stem_conv/kernel", "stage2_block1_proj_bn/scale", ...; layers/resnet.py, layers/maskrcnn.py), float32.

The pickle is a dict of NumPy arrays in Caffe2 naming, possibly under a "blobs" key, read with encoding latin1 (as the
reference's utils/c2_model_loading.py `_load_c2_pickled_weights`): `conv1_w`, `res_conv1_bn_{s,b}`,
`res{2..5}_{i}_branch2{a,b,c}_w`, `..._bn_{s,b}`, `res{2..5}_0_branch1_w` / `_bn_{s,b}` (the projection), and
`fc1000_{w,b}` (dropped, as are `*_momentum` blobs). Convolution weights go from Caffe2's OIHW to Keras' HWIO; a
batch norm's `_s`/`_b` are the already-folded affine scale and bias (AffineChannel), loaded into FrozenAffine's
`scale`/`bias` (the reference loads them into FrozenBatchNorm2d's weight/bias with running mean 0 and variance 1).
Stage k of our names is Caffe2's res{k + 1}.
"""
from __future__ import annotations

import pickle
import re
from typing import Mapping

import numpy as np
from absl import flags

from data_prep import backbone_convert
from mlperf_keras import entry
from mlperf_keras.inputs.manifest import DataError

RESNET50_BLOCKS = (3, 4, 6, 3)   # res2..res5
_BRANCH = {"branch2a": "1", "branch2b": "2", "branch2c": "3", "branch1": "proj"}
_BLOCK_RE = re.compile(r"^res(\d)_(\d+)_(branch2a|branch2b|branch2c|branch1)(_bn)?_([wsb])$")
_DROPPED_RE = re.compile(r"^(fc1000_[wb]|pred_[wb])$|_momentum$")


def keras_name(key: str) -> str | None:
    """Caffe2 blob name -> our variable name; None for blobs the backbone does not use."""
    if _DROPPED_RE.search(key):
        return None
    if key == "conv1_w":
        return "stem_conv/kernel"
    if key in ("res_conv1_bn_s", "res_conv1_bn_b"):
        return "stem_bn/" + ("scale" if key.endswith("_s") else "bias")
    m = _BLOCK_RE.match(key)
    if not m:
        raise DataError(f"{key}: not a blob of Detectron's ResNet-50")
    stage, block, branch, bn, kind = m.groups()
    layer = f"stage{int(stage) - 1}_block{int(block) + 1}_{_BRANCH[branch]}"
    if bn:
        if kind == "w":
            raise DataError(f"{key}: an affine channel has _s and _b, not _w")
        return f"{layer}_bn/" + ("scale" if kind == "s" else "bias")
    if kind != "w":
        raise DataError(f"{key}: Detectron's ResNet convolutions have no bias")
    return f"{layer}_conv/kernel"


def expected_names(block_sizes=RESNET50_BLOCKS) -> list[str]:
    """Every backbone variable the converted file must hold."""
    names = ["stem_conv/kernel", "stem_bn/scale", "stem_bn/bias"]
    for s, blocks in enumerate(block_sizes, start=1):
        for b in range(1, blocks + 1):
            for part in ("1", "2", "3") + (("proj",) if b == 1 else ()):
                names += [f"stage{s}_block{b}_{part}_conv/kernel", f"stage{s}_block{b}_{part}_bn/scale",
                          f"stage{s}_block{b}_{part}_bn/bias"]
    return names


def convert(blobs: Mapping[str, np.ndarray], source: str = "pickle") -> dict[str, np.ndarray]:
    """Detectron blobs (NumPy, Caffe2 layout) -> {our variable name: float32 array}."""
    if "blobs" in blobs and isinstance(blobs["blobs"], Mapping):
        blobs = blobs["blobs"]
    out = backbone_convert.to_keras_arrays(blobs, keras_name, source, "an affine channel blob")
    missing = [n for n in expected_names() if n not in out]
    if missing:
        raise DataError(f"{source}: no blob for {missing[0]} ({len(missing)} backbone variables missing); expected "
                        f"Detectron's ImageNetPretrained/MSRA/R-50.pkl")
    return out


def read_pickle(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = pickle.load(f, encoding="latin1")
    except FileNotFoundError:
        raise DataError(f"{path}: not found") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        raise DataError(f"{path}: not a readable pickle ({e})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: holds a {type(data).__name__}, not a dict of arrays")
    return data


def convert_file(pickle_path: str, output: str) -> int:
    """The .pkl -> the .npz (written to a temporary name, then renamed); returns the number of arrays written."""
    return backbone_convert.write_npz(output, convert(read_pickle(pickle_path), source=pickle_path))


FLAGS = flags.FLAGS


def main(argv):
    del argv
    backbone_convert.run(convert_file, FLAGS.detectron_pickle, FLAGS.output, "arrays")


def define_flags():
    flags.DEFINE_string("detectron_pickle", None, "Detectron's ImageNetPretrained/MSRA/R-50.pkl (the Mask R-CNN "
                        "reference's pretrained backbone)")
    flags.DEFINE_string("output", None, "The .npz to write (for layers.maskrcnn.load_backbone_weights)")
    flags.mark_flags_as_required(["detectron_pickle", "output"])


if __name__ == "__main__":
    define_flags()
    entry.run(main)
