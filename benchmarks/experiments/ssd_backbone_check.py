"""Check our SSD300-ResNet34 against PyTorch: the converted backbone numerically, the whole model's size and outputs.

    python benchmarks/experiments/ssd_backbone_check.py [--backend=jax|tensorflow] [--seed=0]

Needs torch and torchvision (plus our package and the chosen Keras backend); no download: torchvision's resnet34 is
built with random weights and random batch-norm statistics (so an unconverted or mis-mapped tensor shows), and:
1. its state dict goes through data_prep.ssd_backbone.convert into our ssd300's backbone (load_backbone_weights); the
   same random uint8 image runs through both (inference, float32, full-precision matmuls/convolutions); prints the
   max abs difference of the 38x38x256 feature map (the reference ResNet34's output: conv1..layer3 with layer3's
   first block at stride 1);
2. a faithful PyTorch SSD300 (the reference ssd300.py structure: extra blocks of biased convolutions, no batch
   norm) gets the same
   backbone; its extras and heads are copied into ours (head channels reordered from torch's (4, boxes) to our
   (boxes, 4) layout) and both outputs compared after putting the reference's size-major boxes into our cell-major
   order; prints both parameter counts.
Prints one JSON line per check. Written for verification only (not part of the package).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plain_resnet34():
    """torchvision.models.resnet34's modules, names and defaults, for a machine without torchvision."""
    import torch.nn as nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + identity)

    class ResNet34(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin = 64
            for i, (blocks, cout) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
                stride = 1 if i == 1 else 2
                layer = [BasicBlock(cin, cout, stride)] + [BasicBlock(cout, cout, 1) for _ in range(blocks - 1)]
                setattr(self, f"layer{i}", nn.Sequential(*layer))
                cin = cout
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, 1000)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    return ResNet34()


def torch_models(seed):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    try:
        import torchvision

        rn34 = torchvision.models.resnet34(weights=None)
    except ImportError:
        print("torchvision is not installed: using a ResNet-34 with its module names and shapes", file=sys.stderr)
        rn34 = plain_resnet34()
    from torch_peers import SSD300  # the same faithful PyTorch SSD300 the GPU peer comparison trains

    model = SSD300(rn34=rn34)
    backbone = model.model
    with torch.no_grad():   # random BN affine and statistics everywhere, so every tensor matters
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
    return rn34.eval(), backbone.eval(), model.eval()


def copy_extras_and_heads(tssd, model):
    """Our extras and heads <- the PyTorch SSD300's (kernels OIHW -> HWIO; head channels (4, boxes) -> (boxes, 4))."""
    import numpy as np

    def np_(t):
        return t.detach().cpu().numpy()

    for k, block in enumerate(tssd.additional_blocks, start=1):
        for conv_i, part in ((0, 1), (2, 2)):   # Conv2d, ReLU, Conv2d, ReLU
            layer = model.get_layer(f"extra{k}_{part}_conv")
            layer.kernel.assign(np_(block[conv_i].weight).transpose(2, 3, 1, 0))
            layer.bias.assign(np_(block[conv_i].bias))
    for k, nd in enumerate(tssd.num_defaults):
        for head, per in (("loc", 4), ("conf", tssd.label_num)):
            conv = getattr(tssd, head)[k]
            perm = np.array([c * nd + b for b in range(nd) for c in range(per)])   # our channel b*per+c <- torch's
            layer = model.get_layer(f"{head}{k + 1}")
            layer.kernel.assign(np_(conv.weight)[perm].transpose(2, 3, 1, 0))
            layer.bias.assign(np_(conv.bias)[perm])


def reference_to_cell_major(out, feat_sizes, per_cell):
    """Reference (N, C, boxes) in size-major order per map -> (N, boxes, C) in our cell-major order."""
    import numpy as np

    index, start = [], 0
    for size, nd in zip(feat_sizes, per_cell):
        cells = size * size
        index += [start + b * cells + cell for cell in range(cells) for b in range(nd)]
        start += cells * nd
    return out.transpose(0, 2, 1)[:, np.array(index)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax", choices=("jax", "tensorflow"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = args.backend
    sys.path.insert(0, ROOT)

    import numpy as np
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")   # no TF32: compare float32 with float32
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
    import keras

    from data_prep import ssd_backbone
    from mlperf_keras.inputs import default_boxes
    from mlperf_keras.layers import ssd

    rn34, backbone, tssd = torch_models(args.seed)
    keras.utils.set_random_seed(args.seed)
    model = ssd.ssd300()
    state = {k: v.detach().cpu().numpy() for k, v in rn34.state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet34_backbone.npz")
        np.savez(path, **ssd_backbone.convert(state, source="torchvision resnet34 (random)"))
        loaded = ssd.load_backbone_weights(model, path)

    image = np.random.default_rng(args.seed).integers(0, 256, (2, 300, 300, 3), dtype=np.uint8)
    mean, std = torch.tensor(ssd.IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(ssd.IMAGENET_STD).view(1, 3, 1, 1)
    x = ((torch.from_numpy(image).permute(0, 3, 1, 2).float() / 255 - mean) / std).contiguous()   # plain NCHW
    with torch.no_grad():
        theirs = backbone(x).permute(0, 2, 3, 1).numpy()
        t_loc, t_conf = (o.numpy() for o in tssd(x))
    features = keras.Model(model.input, model.get_layer("stage3_block6_out").output)
    ours = keras.ops.convert_to_numpy(features(image, training=False))
    diff = float(np.abs(ours - theirs).max())
    print(json.dumps({"check": "backbone feature map", "backend": args.backend, "tensors_loaded": loaded,
                      "shape": list(ours.shape), "max_abs_diff": diff, "max_abs_value": float(np.abs(theirs).max()),
                      "relative": diff / float(np.abs(theirs).max())}))

    copy_extras_and_heads(tssd, model)
    loc, logits = (keras.ops.convert_to_numpy(o) for o in model(image, training=False))
    spec = default_boxes.SSD300
    t_loc = reference_to_cell_major(t_loc, spec.feat_size, default_boxes.boxes_per_cell(spec))
    t_conf = reference_to_cell_major(t_conf, spec.feat_size, default_boxes.boxes_per_cell(spec))
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    print(json.dumps({"check": "whole SSD300", "backend": args.backend,
                      "torch_parameters": sum(p.numel() for p in tssd.parameters()), "our_parameters": trainable,
                      "loc_max_abs_diff": float(np.abs(loc - t_loc).max()),
                      "logits_max_abs_diff": float(np.abs(logits - t_conf).max()),
                      "logits_max_abs_value": float(np.abs(t_conf).max())}))


if __name__ == "__main__":
    main()
