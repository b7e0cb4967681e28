"""PyTorch peers for the GPU comparison: the closest public/torchvision model per workload, timed the same way.

    python benchmarks/torch_peers.py --model=ncf --batch_size=1048576 --steps=50 --warmup_steps=10

Written for the comparison only (not part of the package): NeuMF below is a faithful PyTorch NeuMF of the same
sizes as ours; ResNet-50 is torchvision's resnet50 (channels_last, bf16 autocast); Transformer big is
torch.nn.Transformer at the same sizes (--batch_size counts target tokens, 64 per sentence); SSD300 is the MLPerf
reference's SSD-ResNet34 (ssd300.py and base_model.py's Loss, rewritten here: torchvision's resnet34 to layer3
with layer3's stride removed, the extra layers, 3x3 heads, smooth L1 + hard-negative-mined cross-entropy); all steps
are torch.compile'd (--no_compile: eager). GNMT is the reference's model (rnn_translator/pytorch @ 69dbe8b) on
cuDNN LSTMs with bf16 autocast (--batch_size counts sentences; tokens = source + target, as NVIDIA publishes).
Mask R-CNN is torchvision's (ResNet-50-FPN, the reference's ROI counts; eager, bf16 autocast; see maskrcnn_setup),
--batch_size images of 800 x 1333 padded to 800 x 1344 with a few synthetic objects each.
Prints one JSON line: samples/s with the same back-to-back timing as mlperf_keras.benchmark's "bare".
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn as nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU only to check a peer runs (maskrcnn)


class NeuMF(nn.Module):
    def __init__(self, users=138_493, items=26_744, mf_dim=64, mlp=(256, 256, 128, 64)):
        super().__init__()
        self.mf_user, self.mf_item = nn.Embedding(users, mf_dim), nn.Embedding(items, mf_dim)
        self.mlp_user, self.mlp_item = nn.Embedding(users, mlp[0] // 2), nn.Embedding(items, mlp[0] // 2)
        layers = []
        for a, b in zip(mlp[:-1], mlp[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.final = nn.Linear(mf_dim + mlp[-1], 1)
        for emb in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, 0.0, 0.01)

    def forward(self, users, items):
        mf = self.mf_user(users) * self.mf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=1))
        return self.final(torch.cat([mf, mlp], dim=1)).squeeze(1)


def ncf_setup(batch):
    model = NeuMF().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.0045, betas=(0.25, 0.5), eps=1e-8, fused=True)
    users = torch.randint(0, 138_493, (batch,), device="cuda")
    items = torch.randint(0, 26_744, (batch,), device="cuda")
    labels = (torch.rand(batch, device="cuda") < 0.2).float()
    loss_fn = nn.BCEWithLogitsLoss()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(users, items).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def resnet_setup(batch):
    import torchvision

    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


class TransformerBig(nn.Module):
    """torch.nn.Transformer at the MLPerf "big" sizes with shared, scaled embeddings and sinusoidal positions."""

    def __init__(self, vocab=33_708, d_model=1024, heads=16, layers=6, ffn=4096, max_len=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.core = nn.Transformer(d_model, heads, layers, layers, ffn, dropout=0.1, batch_first=True,
                                   norm_first=True)
        position = torch.arange(max_len).unsqueeze(1)
        rate = torch.exp(torch.arange(0, d_model, 2) * (-torch.log(torch.tensor(10000.0)) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.register_buffer("positions", table)
        self.scale = d_model ** 0.5

    def forward(self, source, target_in, padded=False):
        def embed(tokens):
            return self.embed(tokens) * self.scale + self.positions[: tokens.shape[1]]
        mask = self.core.generate_square_subsequent_mask(target_in.shape[1], device=source.device)
        pads = {}
        if padded:
            # As ours: no query attends to padded source positions. The decoder's self-attention is only causal:
            # target_input starts with the id 0, and padded target positions come last, seen only by other padded
            # positions, whose loss is masked.
            keys = torch.zeros(source.shape, device=source.device).masked_fill(source == 0, float("-inf"))
            pads = {"src_key_padding_mask": keys, "memory_key_padding_mask": keys}
        hidden = self.core(embed(source), embed(target_in), tgt_mask=mask, tgt_is_causal=True, **pads)
        return hidden @ self.embed.weight.t()


def transformer_setup(batch_tokens, seq_len=64, batch_file=None):
    """Unpadded random sentences of seq_len tokens, or (batch_file) the exact batch our benchmark measured
    (mlperf_keras.benchmark --save_batch), with its padding masked in attention and in the loss."""
    model = TransformerBig().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.997), eps=1e-9, fused=True)
    if batch_file:
        import numpy as np

        batch = np.load(batch_file)
        source, target_in, target = (torch.from_numpy(batch[k]).long().cuda()
                                     for k in ("source", "target_input", "labels"))
    else:
        sentences = batch_tokens // seq_len
        source = torch.randint(1, 33_708, (sentences, seq_len), device="cuda")
        target_in, target = torch.randint(1, 33_708, (2, sentences, seq_len), device="cuda")
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(source, target_in, padded=batch_file is not None)
            loss = loss_fn(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


class SSD300(nn.Module):
    """The MLPerf SSD-ResNet34 (reference ssd300.py, mlcommons/training 0badcd1 / d99c36dc / f9e0e82d: extra blocks of
    biased convolutions and ReLUs, no batch norm; 19,972,534 parameters), with the reference's attribute names:
    8,732 boxes, heads viewed as (N, 4 / classes, boxes). rn34: a torchvision ResNet-34 (or one with its module
    names) to take the backbone from; default a fresh torchvision one."""

    def __init__(self, label_num=81, boxes_per_cell=(4, 6, 6, 6, 4, 4), rn34=None):
        super().__init__()
        if rn34 is None:
            import torchvision

            rn34 = torchvision.models.resnet34()
        rn34.layer3[0].conv1.stride, rn34.layer3[0].downsample[0].stride = (1, 1), (1, 1)
        self.model = nn.Sequential(*list(rn34.children())[:7])  # conv1 ... layer3
        out_chan, mid_chan = (256, 512, 512, 256, 256, 256), (256, 256, 128, 128, 128)
        self.additional_blocks = nn.ModuleList()
        for i, (cin, cout, mid) in enumerate(zip(out_chan[:-1], out_chan[1:], mid_chan)):
            stride, pad = (2, 1) if i < 3 else (1, 0)
            self.additional_blocks.append(nn.Sequential(
                nn.Conv2d(cin, mid, 1), nn.ReLU(inplace=True),
                nn.Conv2d(mid, cout, 3, padding=pad, stride=stride), nn.ReLU(inplace=True)))
        self.label_num, self.num_defaults = label_num, tuple(boxes_per_cell)
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for n, c in zip(boxes_per_cell, out_chan))
        self.conf = nn.ModuleList(nn.Conv2d(c, n * label_num, 3, padding=1) for n, c in zip(boxes_per_cell, out_chan))
        for layer in [*self.additional_blocks, *self.loc, *self.conf]:
            for p in layer.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

    def forward(self, x):
        features = [self.model(x)]
        for block in self.additional_blocks:
            features.append(block(features[-1]))
        n = x.shape[0]
        locs = torch.cat([loc(f).reshape(n, 4, -1) for f, loc in zip(features, self.loc)], 2)
        confs = torch.cat([conf(f).reshape(n, self.label_num, -1) for f, conf in zip(features, self.conf)], 2)
        return locs, confs


def ssd_loss(ploc, plabel, gloc, glabel):
    """The reference base_model.Loss on already-encoded targets: smooth L1 + 3:1 hard-negative-mined cross-entropy."""
    mask = glabel > 0
    pos_num = mask.sum(dim=1)
    sl1 = (nn.functional.smooth_l1_loss(ploc, gloc, reduction="none").sum(dim=1) * mask).sum(dim=1)
    con = nn.functional.cross_entropy(plabel, glabel, reduction="none")
    con_neg = con.clone()
    con_neg[mask] = 0
    _, con_idx = con_neg.sort(dim=1, descending=True)
    _, con_rank = con_idx.sort(dim=1)
    neg_mask = con_rank < torch.clamp(3 * pos_num, max=mask.size(1)).unsqueeze(-1)
    closs = (con * (mask.float() + neg_mask.float())).sum(dim=1)
    num_mask = (pos_num > 0).float()
    return ((sl1 + closs) * num_mask / pos_num.float().clamp(min=1e-6)).mean(dim=0)


def ssd_setup(batch):
    model = SSD300().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=2.5e-3 * batch / 32, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 300, 300, device="cuda").to(memory_format=torch.channels_last)
    positive = torch.rand(batch, 8732, device="cuda") < 0.01  # about 1% positive boxes, as on COCO
    glabel = torch.where(positive, torch.randint(1, 81, (batch, 8732), device="cuda"), 0)
    gloc = torch.randn(batch, 4, 8732, device="cuda") * positive.unsqueeze(1)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ploc, plabel = model(x)
        loss = ssd_loss(ploc.float(), plabel.float(), gloc, glabel)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


class GNMT(nn.Module):
    """The MLPerf reference's GNMT (mlcommons/training rnn_translator/pytorch/seq2seq/models/{gnmt,encoder,decoder,
    attention}.py @ 69dbe8b): shared embedding, a bidirectional then three LSTMs (residuals from the third),
    a recurrent attention layer (LSTM + normalized Bahdanau), three LSTMs fed [output, context] (residuals on the
    last two), classifier. 160,671,297 parameters at vocabulary 32,320 (PyTorch's two biases per LSTM)."""

    def __init__(self, vocab=32_320, hidden=1024, dropout=0.2):
        super().__init__()
        h = hidden
        self.embedding = nn.Embedding(vocab, h, padding_idx=0)
        self.enc = nn.ModuleList([nn.LSTM(h, h, batch_first=True, bidirectional=True),
                                  nn.LSTM(2 * h, h, batch_first=True), nn.LSTM(h, h, batch_first=True),
                                  nn.LSTM(h, h, batch_first=True)])
        self.att_rnn = nn.LSTM(h, h, batch_first=True)
        self.linear_q, self.linear_k = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
        self.linear_att = nn.Parameter(torch.empty(h).uniform_(-0.1, 0.1))
        self.normalize_scalar = nn.Parameter(torch.tensor([h ** -0.5]))
        self.normalize_bias = nn.Parameter(torch.zeros(h))
        self.dec = nn.ModuleList([nn.LSTM(2 * h, h, batch_first=True) for _ in range(3)])
        self.classifier = nn.Linear(h, vocab)
        self.dropout = nn.Dropout(dropout)
        for p in self.parameters():  # U(-0.1, 0.1) everywhere, then the attention's own init, as the reference
            nn.init.uniform_(p, -0.1, 0.1)
        with torch.no_grad():
            self.normalize_scalar.fill_(h ** -0.5)
            self.normalize_bias.zero_()

    def forward(self, source, target_input):
        src_mask = source != 0
        x = self.dropout(self.embedding(source))
        x, _ = self.enc[0](x)
        x = self.dropout(x)
        x, _ = self.enc[1](x)
        for layer in self.enc[2:]:
            residual = x
            x, _ = layer(self.dropout(x))
            x = x + residual
        keys = self.linear_k(x)
        y, _ = self.att_rnn(self.dropout(self.embedding(target_input)))
        q = self.linear_q(y)
        v = self.normalize_scalar * self.linear_att / self.linear_att.norm()
        scores = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1) + self.normalize_bias) @ v  # [B, T, S]
        scores = scores.masked_fill(~src_mask.unsqueeze(1), float("-inf"))
        context = torch.softmax(scores, dim=-1) @ x
        y, _ = self.dec[0](self.dropout(torch.cat([y, context], dim=2)))
        for layer in self.dec[1:]:
            residual = y
            y, _ = layer(self.dropout(torch.cat([y, context], dim=2)))
            y = y + residual
        return self.classifier(y)


def gnmt_setup(batch, seq_len=32, batch_file=None):
    """batch sentences of seq_len tokens a side (or our saved batch, padding masked); label-smoothed (0.1) loss
    summed over tokens / sentences; Adam with global-norm clipping at 5, as the reference trains."""
    model = GNMT().cuda()
    print(json.dumps({"peer_parameters": sum(p.numel() for p in model.parameters())}))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, fused=True)
    if batch_file:
        import numpy as np

        data = np.load(batch_file)
        source = torch.from_numpy(data["source"]).long().cuda()
        target_input = torch.from_numpy(data["target_input"]).long().cuda()
        labels = torch.from_numpy(data["labels"]).long().cuda()
    else:
        source = torch.randint(4, 32_320, (batch, seq_len), device="cuda")
        target_input = torch.randint(4, 32_320, (batch, seq_len), device="cuda")
        labels = torch.randint(4, 32_320, (batch, seq_len), device="cuda")
    loss_fn = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1, reduction="sum")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(source, target_input)
        loss = loss_fn(logits.float().flatten(0, 1), labels.flatten()) / source.shape[0]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, int((source != 0).sum() + (labels != 0).sum())


def maskrcnn_setup(batch, height=800, width=1333, objects=7, autocast=True):
    """torchvision's Mask R-CNN (ResNet-50-FPN) as `maskrcnn_resnet50_fpn(weights=...)` builds it (frozen batch
    norms, conv1 and layer1 frozen: the reference's FREEZE_CONV_BODY_AT 2), untrained, 81 classes: 44,347,573
    parameters. ROI counts as the MLPerf reference's (and ours): 2000 per level before NMS, NMS 0.7, 1000
    proposals per image after it (torchvision's post_nms_top_n counts per image; its default is 2000), 256 RPN
    anchors per image at 50% positives, 512 ROIs per image at 25%. Images of height x width (800 x 1333, the
    reference's resize of a 3:5 image) with min_size=height, max_size=width: GeneralizedRCNNTransform's resize is then
    a scale of 1.0 (the size does not change) and it pads the batch to 800 x 1344 (size_divisible 32), the padded
    shape ours trains on. Ground truth: benchmarks/experiments/maskrcnn_graph.py's synthetic_instances (the same
    boxes and masks as our benchmark's). Eager: torch.compile does not take torchvision's detection models
    (data-dependent shapes), and --no_compile is implied."""
    import os
    import sys

    import torchvision
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.ops import misc

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "experiments"))
    from maskrcnn_graph import synthetic_instances

    backbone = _resnet_fpn_extractor(torchvision.models.resnet50(norm_layer=misc.FrozenBatchNorm2d), 3)
    # min_size = height, max_size = width (800, 1333 by default: the reference's INPUT.MIN/MAX_SIZE_TRAIN): the
    # transform's resize keeps every image as it is
    model = MaskRCNN(backbone, num_classes=81, min_size=height, max_size=width,
                     rpn_pre_nms_top_n_train=2000, rpn_post_nms_top_n_train=1000, rpn_nms_thresh=0.7,
                     rpn_batch_size_per_image=256, rpn_positive_fraction=0.5,
                     box_batch_size_per_image=512, box_positive_fraction=0.25).to(DEVICE)
    parameters = sum(p.numel() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    print(json.dumps({"peer_parameters": parameters, "peer_trainable": sum(p.numel() for p in trainable)}))
    assert parameters == 44_347_573, parameters
    model.train()
    opt = torch.optim.SGD(trainable, lr=1e-4, momentum=0.9, weight_decay=1e-4)
    boxes, classes, masks, images = synthetic_instances(batch, height, width, height, width, objects)
    images = [torch.from_numpy(i).to(DEVICE).permute(2, 0, 1).float().div(255) for i in images]
    targets = [{"boxes": torch.from_numpy(b).to(DEVICE), "labels": torch.from_numpy(c).long().to(DEVICE),
                "masks": torch.from_numpy(m).to(DEVICE)} for b, c, m in zip(boxes, classes, masks)]
    checked = []

    def step():
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
            losses = model(images, targets)
        loss = sum(losses.values())
        if not checked:  # the padded batch the model computed on, once
            checked.append(model.transform(images, targets)[0].tensors.shape)
            print(json.dumps({"peer_padded_batch": list(checked[0])}))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


PEERS = {"gnmt": gnmt_setup, "maskrcnn": maskrcnn_setup, "ncf": ncf_setup, "resnet": resnet_setup, "ssd": ssd_setup, "transformer": transformer_setup}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(PEERS), required=True)
    parser.add_argument("--batch_size", type=int, required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup_steps", type=int, default=10)
    parser.add_argument("--seq_len", type=int, default=64, help="transformer, gnmt: tokens per sentence (source and "
                        "target)")
    parser.add_argument("--height", type=int, default=800, help="maskrcnn: image height (before padding to 32)")
    parser.add_argument("--width", type=int, default=1333, help="maskrcnn: image width (before padding to 32)")
    parser.add_argument("--objects", type=int, default=7, help="maskrcnn: objects (boxes and masks) per image")
    parser.add_argument("--fp32", action="store_true", help="maskrcnn: no bf16 autocast (as ours under "
                        "flags/cpu.flags, float32)")
    parser.add_argument("--no_compile", action="store_true", help="time the eager step (gnmt: cuDNN LSTMs run "
                        "eagerly either way)")
    parser.add_argument("--batch_file", help="transformer, gnmt: time this batch instead (an .npz written by "
                        "python -m mlperf_keras.benchmark --save_batch), padding included and masked")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    setup = PEERS[args.model]
    compile_ = (lambda f: f) if args.no_compile else torch.compile
    gnmt_tokens = None
    if args.model == "transformer":
        step = compile_(setup(args.batch_size, args.seq_len, args.batch_file))
    elif args.model == "gnmt":
        step, gnmt_tokens = setup(args.batch_size, args.seq_len, args.batch_file)
        step = compile_(step)
    elif args.model == "maskrcnn":  # eager only (see maskrcnn_setup)
        args.no_compile = True
        # The mask head's batch is the sampled positives, a count that changes from step to step: cuDNN's
        # autotuner would search again for every new shape.
        torch.backends.cudnn.benchmark = False
        step = setup(args.batch_size, args.height, args.width, args.objects, autocast=not args.fp32)
    else:
        step = compile_(setup(args.batch_size))
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    for _ in range(args.warmup_steps):
        loss = step()
    sync()
    if not torch.isfinite(loss):
        raise SystemExit(f"non-finite loss {float(loss)} after the warm-up")
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    if args.model == "gnmt":  # real source + target tokens, as ours counts them
        samples = gnmt_tokens
    elif args.model != "transformer":
        samples = args.batch_size
    elif args.batch_file:  # real (non-padding) target tokens, as ours counts them
        import numpy as np

        samples = int(np.count_nonzero(np.load(args.batch_file)["labels"]))
    else:
        samples = (args.batch_size // args.seq_len) * args.seq_len
    rate = args.steps * samples / (time.perf_counter() - start)
    batch = "ours (padded)" if args.batch_file else "unpadded"
    if args.model == "maskrcnn":
        batch = f"{args.height}x{args.width} images padded to multiples of 32, {args.objects} objects each"
    print(json.dumps({"peer": args.model, "samples_per_s": rate, "samples_per_step": samples, "batch": batch,
                      "compiled": not args.no_compile, "torch": torch.__version__, "bf16_autocast": not args.fp32,
                      "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"}))


if __name__ == "__main__":
    main()
