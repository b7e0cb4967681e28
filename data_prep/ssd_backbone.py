"""python -m data_prep.ssd_backbone --torchvision_checkpoint=resnet34-333f7ec4.pth --output=resnet34_backbone.npz

Converts torchvision's ImageNet-trained ResNet-34 (the SSD reference's pretrained backbone: the state dict of
torchvision.models.resnet34(pretrained=True), file resnet34-333f7ec4.pth) into the .npz that
mlperf_keras.layers.ssd.load_backbone_weights reads: keys are our backbone's variable names
("stem_conv/kernel", "stage2_block1_proj_bn/moving_mean", ...), values float32 NumPy arrays.

Only conv1..layer3 are kept (the SSD backbone drops layer4, the pool and fc). Convolution weights go from torch's
OIHW to Keras' HWIO; batch norm weight/bias/running_mean/running_var become gamma/beta/moving_mean/moving_variance
(num_batches_tracked is dropped). layer3's first block runs at stride 1 in SSD: strides are not weights, so the
ImageNet weights load unchanged, as in the reference (_ModifyBlock only changes the stride).

Reading a .pth needs PyTorch (`pip install torch`); nothing else here does: `convert` maps a dict of NumPy arrays in
torch's layout and naming, so it is testable (and usable) without torch.
"""
from __future__ import annotations

import re
from typing import Mapping

import numpy as np
from absl import flags

from data_prep import backbone_convert
from mlperf_keras import entry
from mlperf_keras.inputs.manifest import DataError

RESNET34_BACKBONE_BLOCKS = (3, 4, 6)   # torchvision resnet34's layer1..layer3
BN_VARIABLES = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean", "running_var": "moving_variance"}
_BLOCK_RE = re.compile(r"^layer(\d+)\.(\d+)\.(conv|bn)([12])\.(\w+)$")
_DOWNSAMPLE_RE = re.compile(r"^layer(\d+)\.(\d+)\.downsample\.([01])\.(\w+)$")
_STEM_RE = re.compile(r"^(conv|bn)1\.(\w+)$")


def _variable(layer: str, kind: str, torch_name: str, key: str) -> str:
    if kind == "conv":
        if torch_name != "weight":
            raise DataError(f"{key}: torchvision ResNet convolutions have no {torch_name!r} (bias-free)")
        return f"{layer}_conv/kernel"
    if torch_name not in BN_VARIABLES:
        raise DataError(f"{key}: unknown batch-norm tensor {torch_name!r}")
    return f"{layer}_bn/{BN_VARIABLES[torch_name]}"


def keras_name(key: str, stages: int = len(RESNET34_BACKBONE_BLOCKS)) -> str | None:
    """torchvision ResNet state-dict key -> our backbone variable name; None for what the SSD backbone drops
    (layer4 and later, fc, num_batches_tracked)."""
    if key.endswith("num_batches_tracked") or key.startswith("fc."):
        return None
    m = _STEM_RE.match(key)
    if m:
        return _variable("stem", m.group(1), m.group(2), key)
    m = _BLOCK_RE.match(key)
    if m:
        stage, block, kind, index, name = m.groups()
        if int(stage) > stages:
            return None
        return _variable(f"stage{stage}_block{int(block) + 1}_{index}", kind, name, key)
    m = _DOWNSAMPLE_RE.match(key)
    if m:
        stage, block, index, name = m.groups()
        if int(stage) > stages:
            return None
        return _variable(f"stage{stage}_block{int(block) + 1}_proj", ("conv", "bn")[int(index)], name, key)
    raise DataError(f"{key}: not a torchvision ResNet state-dict key")


def torch_backbone_keys(block_sizes=RESNET34_BACKBONE_BLOCKS) -> list[str]:
    """The state-dict keys (without num_batches_tracked) the backbone needs, in torchvision's order; a stage's first
    block has a downsample from layer2 on (basic blocks: layer1 keeps 64 channels at stride 1)."""
    def bn(prefix):
        return [f"{prefix}.{n}" for n in BN_VARIABLES]

    keys = ["conv1.weight", *bn("bn1")]
    for s, blocks in enumerate(block_sizes, start=1):
        for b in range(blocks):
            p = f"layer{s}.{b}"
            keys += [f"{p}.conv1.weight", *bn(f"{p}.bn1"), f"{p}.conv2.weight", *bn(f"{p}.bn2")]
            if b == 0 and s > 1:
                keys += [f"{p}.downsample.0.weight", *bn(f"{p}.downsample.1")]
    return keys


def convert(state_dict: Mapping[str, np.ndarray], source: str = "state dict",
            block_sizes=RESNET34_BACKBONE_BLOCKS) -> dict[str, np.ndarray]:
    """torchvision ResNet-34 state dict (NumPy arrays, torch layout) -> {our variable name: float32 array}."""
    missing = [k for k in torch_backbone_keys(block_sizes) if k not in state_dict]
    if missing:
        raise DataError(f"{source}: no {missing[0]} ({len(missing)} backbone tensors missing); expected the state "
                        f"dict of torchvision.models.resnet34")
    return backbone_convert.to_keras_arrays(state_dict, lambda key: keras_name(key, len(block_sizes)), source,
                                            "a batch-norm tensor")


def read_torch_state_dict(path: str) -> dict[str, np.ndarray]:
    """A .pth state dict -> {key: NumPy array} (needs PyTorch)."""
    try:
        import torch
    except ImportError:
        raise DataError(f"{path}: reading a PyTorch checkpoint needs torch (pip install torch)") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DataError(f"{path}: not found") from None
    except Exception as e:   # torch raises many types (pickle, zip, RuntimeError) for a bad file
        raise DataError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__}: {e})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise DataError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return {k: v.detach().cpu().numpy() for k, v in state.items() if hasattr(v, "detach")}


def convert_file(checkpoint: str, output: str) -> int:
    """The .pth -> the .npz (written to a temporary name, then renamed); returns the number of tensors written."""
    return backbone_convert.write_npz(output, convert(read_torch_state_dict(checkpoint), source=checkpoint))


FLAGS = flags.FLAGS


def main(argv):
    del argv
    backbone_convert.run(convert_file, FLAGS.torchvision_checkpoint, FLAGS.output, "tensors")


def define_flags():
    flags.DEFINE_string("torchvision_checkpoint", None,
                        "torchvision ResNet-34 ImageNet state dict (resnet34-333f7ec4.pth, as the SSD reference uses)")
    flags.DEFINE_string("output", None, "The .npz to write; train with python -m mlperf_keras.train --model=ssd "
                        "--backbone_weights=<this file>")
    flags.mark_flags_as_required(["torchvision_checkpoint", "output"])


if __name__ == "__main__":
    define_flags()
    entry.run(main)
