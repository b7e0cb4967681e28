"""Time our Mask R-CNN training graph alone on one accelerator, without the workload's input and loop (JAX backend).

    KERAS_BACKEND=jax python benchmarks/experiments/maskrcnn_graph.py [--batch=8] [--steps=20] [--split]
        [--max_gt=100] [--objects=7] [--height=800 --width=1344 --content_width=1333] [--json_out=F]

Builds `layers.maskrcnn.MaskRCNN(Spec())` (the reference's ROI counts: 2000 per level before NMS, 1000 proposals
per image, 256 RPN anchors and 512 ROIs per image, 81 classes) under mixed_bfloat16, and times the jitted
stateless train step of `steps.make_train_step` (forward, `total_loss`, gradients, SGD momentum update, state
donated: what `mlperf_keras.benchmark` calls "bare") on one synthetic padded batch resident on the device:
`synthetic_instances` below, the same boxes and masks that benchmarks/torch_peers.py --model=maskrcnn gives
torchvision. --split also times the parts of the forward on their own (each jitted alone, so their sum is not the
step: XLA fuses and overlaps across them), and the backward of the costly ones.

Prints one JSON line per measurement ("part", "ms", and images_per_s for the step); --json_out appends them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def synthetic_instances(batch: int, height: int, width: int, content_height: int, content_width: int,
                        objects: int, seed: int = 0, num_classes: int = 81):
    """A few objects per image, COCO-like sizes (sqrt(area) log-uniform in [16, 512) pixels, aspect 0.5-2), each
    mask the ellipse inscribed in its box. -> boxes (batch, objects, 4) float32 x1, y1, x2, y2 (inclusive pixels),
    classes (batch, objects) int32 in 1..num_classes - 1, masks (batch, objects, height, width) uint8, images (batch, height,
    width, 3) uint8 (zero outside the content area)."""
    rng = np.random.default_rng(seed)
    side = np.exp(rng.uniform(np.log(16), np.log(512), (batch, objects)))
    aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0), (batch, objects)))
    w = np.minimum(side * np.sqrt(aspect), content_width - 1)
    h = np.minimum(side / np.sqrt(aspect), content_height - 1)
    x1 = rng.uniform(0, content_width - w)
    y1 = rng.uniform(0, content_height - h)
    boxes = np.stack([x1, y1, x1 + w, y1 + h], -1).astype(np.float32)
    classes = rng.integers(1, num_classes, (batch, objects)).astype(np.int32)
    masks = np.zeros((batch, objects, height, width), np.uint8)
    yy, xx = np.mgrid[:height, :width]
    for b in range(batch):
        for o in range(objects):
            bx1, by1, bx2, by2 = boxes[b, o]
            cx, cy, rx, ry = (bx1 + bx2) / 2, (by1 + by2) / 2, max((bx2 - bx1) / 2, 1), max((by2 - by1) / 2, 1)
            t, l, btm, r = int(by1), int(bx1), int(np.ceil(by2)) + 1, int(np.ceil(bx2)) + 1
            inside = ((xx[t:btm, l:r] - cx) / rx) ** 2 + ((yy[t:btm, l:r] - cy) / ry) ** 2 <= 1
            masks[b, o, t:btm, l:r] = inside
    images = np.zeros((batch, height, width, 3), np.uint8)
    images[:, :content_height, :content_width] = rng.integers(0, 256, (batch, content_height, content_width, 3))
    return boxes, classes, masks, images


def our_batch(args, num_classes: int):
    """The MaskRCNN input dict: `synthetic_instances` padded to max_gt objects (class 0 pads)."""
    boxes, classes, _, images = synthetic_instances(args.batch, args.height, args.width, args.content_height,
                                                    args.content_width, args.objects, num_classes=num_classes)
    g = args.max_gt
    # The graph takes polygon edges (inputs/maskrcnn.object_edges): the same ellipse as a 32-gon, padded to the
    # edges per object that the workload pads to without a manifest.
    from mlperf_keras.workloads.maskrcnn import MAX_VERTICES
    angles = np.arange(33) * (2 * np.pi / 32)
    cx, cy = (boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2
    rx, ry = (boxes[..., 2] - boxes[..., 0]) / 2, (boxes[..., 3] - boxes[..., 1]) / 2
    px, py = cx[..., None] + rx[..., None] * np.cos(angles), cy[..., None] + ry[..., None] * np.sin(angles)
    polygons = np.zeros((*classes.shape, MAX_VERTICES, 5), np.float32)
    polygons[..., :32, :4] = np.stack([px[..., :-1], py[..., :-1], px[..., 1:], py[..., 1:]], -1)
    pad = lambda a, value=0: np.concatenate(  # noqa: E731
        [a, np.full((a.shape[0], g - a.shape[1], *a.shape[2:]), value, a.dtype)], axis=1)
    return {"images": images,
            "image_sizes": np.tile(np.array([[args.content_height, args.content_width]], np.int32), (args.batch, 1)),
            "gt_boxes": pad(boxes), "gt_classes": pad(classes), "gt_polygons": pad(polygons)}


VARIANTS = {
    "barrier": "ROI boxes and matched indices materialised (jax.lax.optimization_barrier) before ROIAlign and "
               "mask_targets, so XLA cannot fuse their computation into every gathered element",
    "mask_logits_bf16": "the mask head's 1x1 logits convolution in bf16 (the policy's compute dtype), its output "
                        "cast to float32",
}


def apply_variants(names: str, maskrcnn) -> None:
    """Patch the graph's module for the named VARIANTS (measurements only)."""
    import jax
    import keras

    for name in filter(None, names.split(",")):
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: {', '.join(VARIANTS)}")
        if name == "barrier":
            roi_align, mask_targets = maskrcnn.multilevel_roi_align, maskrcnn.mask_targets
            maskrcnn.multilevel_roi_align = lambda f, boxes, *a, **k: roi_align(
                f, jax.lax.optimization_barrier(boxes), *a, **k)
            maskrcnn.mask_targets = lambda polygons, rois, instance, *a, **k: mask_targets(
                polygons, *jax.lax.optimization_barrier((rois, instance)), *a, **k)
        if name == "mask_logits_bf16":
            original = maskrcnn.mask_head_model

            def mask_head_model(num_classes=maskrcnn.NUM_CLASSES, name="mask_head"):
                head = original(num_classes, name)
                features = head.get_layer("conv5_mask").output
                logits = keras.layers.Conv2D(num_classes, 1, kernel_initializer=maskrcnn._kaiming_normal_fan_out(),
                                             name="mask_fcn_logits")(features)
                logits = keras.layers.Activation("linear", dtype="float32", name="mask_logits_float32")(logits)
                return keras.Model(head.input, logits, name=name)
            maskrcnn.mask_head_model = mask_head_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup_steps", type=int, default=3)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--width", type=int, default=1344)
    parser.add_argument("--content_height", type=int, default=800)
    parser.add_argument("--content_width", type=int, default=1333)
    parser.add_argument("--objects", type=int, default=None,
                        help="real objects per image (default 7, COCO train's mean being 7.3, or max_gt if fewer)")
    parser.add_argument("--max_gt", type=int, default=None, help="padded objects per image (default Spec().max_gt)")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--split", action="store_true", help="also time the forward's parts on their own")
    parser.add_argument("--no_step", action="store_true", help="only the split")
    parser.add_argument("--tiny", action="store_true", help="maskrcnn.TINY_SPEC (a check of this script on a CPU)")
    parser.add_argument("--variant", default="", help="comma-separated changes to time: " + ", ".join(VARIANTS))
    parser.add_argument("--trace_dir", default="", help="write a jax.profiler trace of two steps here")
    parser.add_argument("--data", choices=("graph", "workload"), default="graph",
                        help="graph: synthetic_instances (log-uniform object sizes); workload: the registered "
                             "workload's --synthetic batch (workloads.maskrcnn.synthetic_batch)")
    parser.add_argument("--optimizer", choices=("sgd", "workload"), default="sgd",
                        help="sgd: Keras SGD at --learning_rate; workload: the workload's own (torch-form momentum "
                             "SGD, biases at 2x and undecayed, the warm-up schedule at the batch's base LR)")
    parser.add_argument("--json_out", default="")
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    benchmarks_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.dirname(benchmarks_dir), benchmarks_dir]
    import jax
    import keras
    from jax_timing import timed

    from mlperf_keras import distribute, steps
    from mlperf_keras.inputs import anchors as anchor_lib
    from mlperf_keras.layers import box_ops, maskrcnn, maskrcnn_targets
    from mlperf_keras.layers.roi_align import multilevel_roi_align

    import dataclasses

    apply_variants(args.variant, maskrcnn)
    spec = maskrcnn.TINY_SPEC if args.tiny else maskrcnn.Spec()
    spec = spec if args.max_gt is None else dataclasses.replace(spec, max_gt=args.max_gt)
    args.max_gt = spec.max_gt
    args.objects = min(7, spec.max_gt) if args.objects is None else args.objects
    if args.objects > spec.max_gt:
        parser.error(f"--objects={args.objects}: at most max_gt={spec.max_gt} objects fit an image's padded rows")
    keras.config.set_dtype_policy(args.precision)
    keras.utils.set_random_seed(0)
    model = maskrcnn.MaskRCNN(spec, seed=1)
    common = {"batch": args.batch, "image": [args.height, args.width], "content": [args.content_height,
              args.content_width], "objects": args.objects, "max_gt": spec.max_gt, "precision": args.precision,
              "variant": args.variant or "as committed", "backend": keras.backend.backend(), "jax": jax.__version__, "device": str(jax.devices()[0].device_kind)}

    def report(part, ms, **extra):
        line = {"part": part, "ms": round(ms, 3), **extra, **common}
        print(json.dumps(line), flush=True)
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(json.dumps(line) + "\n")

    # Variables exist once the model has run: a small eager call (the shapes of the weights do not depend on the
    # image size), then the full-size batch for the compiled step.
    small = dict(our_batch(argparse.Namespace(**{**vars(args), "batch": 1, "height": 64, "width": 96,
                                                "content_height": 64, "content_width": 96, "objects": 1}), spec.num_classes))
    model(small, training=True)
    trainable = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    common["trainable_parameters"] = trainable
    host = our_batch(args, spec.num_classes)
    labels = np.zeros(args.batch, np.float32)
    dist = distribute.create("jax")
    from mlperf_keras import registry
    workload = registry.get("maskrcnn")
    hp = {**workload.reference_hparams("0.7"), "max_gt": spec.max_gt, "num_classes": spec.num_classes}
    if args.tiny:
        hp.update(min_size=args.content_height, max_size=args.content_width)
    if args.data == "workload":
        from mlperf_keras.workloads.maskrcnn import synthetic_batch
        host, labels = synthetic_batch(hp, args.batch, seed=1)
    common.update(data=args.data, optimizer=args.optimizer)
    if args.optimizer == "workload":
        from mlperf_keras import optimizers
        from mlperf_keras.workloads.maskrcnn import is_bias
        base = hp["learning_rate"] * args.batch / 16
        optimizer = optimizers.MomentumSGD(
            optimizers.WarmupMultiStepLR(base, hp["warmup_steps"], hp["warmup_factor"],
                                         [s * 16 // args.batch for s in hp["decay_steps"]], hp["decay_factor"]),
            momentum=hp["momentum"], weight_decay=hp["weight_decay"], decay=lambda v: not is_bias(v),
            lr_multiplier=lambda v: hp["bias_lr_factor"] if is_bias(v) else 1.0)
    else:
        # A learning rate near the reference's warm-up start (0.02 / 3): the weights stay near their initial values
        # over the timed steps (a large rate from random weights diverges, and NaN boxes would make NMS trivially
        # fast).
        optimizer = keras.optimizers.SGD(args.learning_rate, momentum=0.9)
    step = steps.make_train_step(model, optimizer, maskrcnn_targets.total_loss, dist)
    x, y = step.to_device((host, labels))
    if not args.no_step:
        first = float(step(x, y))  # compiles
        if not np.isfinite(first):
            raise SystemExit(f"non-finite loss {first} in the first step")
        ms, compile_s = timed(step, x, y, steps=args.steps, warmup=args.warmup_steps)
        last = float(step(x, y))
        if not np.isfinite(last):  # a diverged state times NaN boxes (NMS converges at once): not a measurement
            raise SystemExit(f"non-finite loss {last} after {args.steps + args.warmup_steps + 2} steps")
        report("train_step", ms, images_per_s=round(1e3 * args.batch / ms, 2), first_loss=first, last_loss=last)
        if args.trace_dir:  # a Perfetto trace of two steps (GPU kernels with their XLA op names)
            with jax.profiler.trace(args.trace_dir, create_perfetto_trace=True):
                for _ in range(2):
                    loss = step(x, y)
                jax.block_until_ready(loss)
    if not args.split:
        return

    import jax.numpy as jnp

    trainable_values, non_trainable_values, _ = step._state
    backbone = model.backbone
    bb_t = [v.value for v in backbone.trainable_variables]
    bb_n = [v.value for v in backbone.non_trainable_variables]
    level_anchors = anchor_lib.fpn_anchors(args.height, args.width)
    n = args.steps

    def backbone_fwd(t, nt, images):
        return backbone.stateless_call(t, nt, images, training=True)[0]

    outs = jax.jit(backbone_fwd)(bb_t, bb_n, x["images"])
    pyramid, logits, deltas = outs[:5], outs[5:10], outs[10:]
    report("backbone+fpn+rpn_head forward", timed(jax.jit(backbone_fwd), bb_t, bb_n, x["images"], steps=n)[0])

    def backbone_train(t, nt, images):
        def scalar(t):
            return sum(jnp.sum(o.astype("float32")) for o in backbone_fwd(t, nt, images))
        return jax.grad(scalar)(t)
    report("backbone+fpn+rpn_head forward+backward", timed(jax.jit(backbone_train), bb_t, bb_n, x["images"],
                                                           steps=n)[0])

    sizes = x["image_sizes"]
    proposals_fn = jax.jit(lambda lg, dl, s: maskrcnn.rpn_proposals(lg, dl, level_anchors, s, spec.pre_nms_train,
                                                                     spec.proposals_per_image, spec.rpn_nms))
    report("rpn_proposals (top-k, decode, NMS x 5 levels, top 1000)", timed(proposals_fn, logits, deltas, sizes,
                                                                              steps=n)[0])
    proposals, proposal_valid = proposals_fn(logits, deltas, sizes)

    # NMS alone on the P2 candidates: the costliest level.
    def p2_boxes(lg, dl, s):
        top, index = jax.lax.top_k(lg[0], spec.pre_nms_train)
        codes = jnp.take_along_axis(dl[0], index[..., None], axis=1)
        boxes = anchor_lib.decode_ops(codes, jnp.take(jnp.asarray(level_anchors[0]), index, axis=0),
                                      anchor_lib.RPN_CODER_WEIGHTS)
        return box_ops.clip_boxes(boxes, s)
    report("top_k 2000 of P2 (+decode)", timed(jax.jit(p2_boxes), logits, deltas, sizes, steps=n)[0])
    boxes_p2 = jax.jit(p2_boxes)(logits, deltas, sizes)
    report("nms_keep on P2's 2000", timed(jax.jit(lambda b: box_ops.nms_keep(b, spec.rpn_nms)), boxes_p2,
                                           steps=n)[0])

    def nms_rounds(boxes, threshold):  # nms_keep's loop, counting its rounds
        n_ = boxes.shape[-2]
        overlap = box_ops.inclusive_iou(boxes, boxes) > threshold
        earlier = jnp.arange(n_)[:, None] < jnp.arange(n_)[None, :]
        suppresses = jnp.logical_and(overlap, earlier[None]).astype("float32")

        def body(state):
            keep, _, rounds = state
            new = jnp.logical_not(jnp.einsum("bj,bji->bi", keep.astype("float32"), suppresses) > 0)
            return new, jnp.any(new != keep), rounds + 1
        start = jnp.ones(boxes.shape[:-1], bool)
        return jax.lax.while_loop(lambda s: jnp.logical_and(s[1], s[2] < n_ + 1), body, (start, True, 0))[2]
    report("nms rounds on P2 (count, not ms)", float(jax.jit(lambda b: nms_rounds(b, spec.rpn_nms))(boxes_p2)))

    def proposals_one_loop(objectness, deltas_, s):
        """rpn_proposals with every level's NMS in one loop (levels stacked, P6 padded): a variant to time."""
        k = spec.pre_nms_train
        boxes_all, top_all, valid_all = [], [], []
        for lg, codes, anchors in zip(objectness, deltas_, level_anchors):
            kl = min(k, lg.shape[-1])
            top, index = jax.lax.top_k(lg, kl)
            codes = jnp.take_along_axis(codes, index[..., None], axis=1)
            boxes = anchor_lib.decode_ops(codes, jnp.take(jnp.asarray(anchors), index, axis=0),
                                          anchor_lib.RPN_CODER_WEIGHTS)
            boxes = box_ops.clip_boxes(boxes, s)
            pad = k - kl
            boxes_all.append(jnp.pad(boxes, ((0, 0), (0, pad), (0, 0))))
            top_all.append(jnp.pad(top, ((0, 0), (0, pad))))
            valid_all.append(jnp.pad(jnp.ones_like(top, bool), ((0, 0), (0, pad))))
        b = objectness[0].shape[0]
        stacked = jnp.stack(boxes_all, 1).reshape(b * len(boxes_all), k, 4)
        valid = jnp.stack(valid_all, 1).reshape(b * len(boxes_all), k)
        keep = box_ops.nms_keep(stacked, spec.rpn_nms, valid).reshape(b, -1)
        scores = jnp.where(keep, jax.nn.sigmoid(jnp.stack(top_all, 1).reshape(b, -1)), -1.0)
        best, index = jax.lax.top_k(scores, spec.proposals_per_image)
        return jnp.take_along_axis(stacked.reshape(b, -1, 4), index[..., None], axis=1), best >= 0.0
    report("variant: rpn_proposals, one NMS loop for all levels", timed(jax.jit(proposals_one_loop), logits, deltas,
                                                                         sizes, steps=n)[0])

    gt_boxes = x["gt_boxes"]
    gt_classes = x["gt_classes"]
    gt_valid = gt_classes > 0
    report("rpn_targets (IoU with every anchor, match, sample)", timed(jax.jit(
        lambda g, v, s: maskrcnn_targets.rpn_targets(level_anchors, g, v, s, spec, 1)), gt_boxes, gt_valid, sizes,
        steps=n)[0])
    roi_fn = jax.jit(lambda p, pv, g, c, v: maskrcnn_targets.roi_targets(p, pv, g, c, v, spec, 1))
    report("roi_targets", timed(roi_fn, proposals, proposal_valid, gt_boxes, gt_classes, gt_valid, steps=n)[0])
    rois, roi_labels, roi_valid, box_targets, matched = roi_fn(proposals, proposal_valid, gt_boxes, gt_classes,
                                                               gt_valid)
    mask_rois = rois[:, :spec.roi_positives]
    report("mask_targets", timed(jax.jit(maskrcnn_targets.mask_targets), x["gt_polygons"], mask_rois,
                                 matched[:, :spec.roi_positives], steps=n)[0])

    for name, r, pool in (("box", rois, maskrcnn.BOX_POOL), ("mask", mask_rois, maskrcnn.MASK_POOL)):
        fwd = jax.jit(lambda feats, r, pool=pool: multilevel_roi_align(feats, r, pool, 2))
        report(f"roi_align {name} {r.shape[1]}/image {pool}x{pool} forward", timed(fwd, pyramid[:4], r, steps=n)[0])

        def fwd_bwd(feats, r, pool=pool):
            return jax.grad(lambda f: jnp.sum(multilevel_roi_align(f, r, pool, 2).astype("float32")))(feats)
        report(f"roi_align {name} forward+backward", timed(jax.jit(fwd_bwd), pyramid[:4], r, steps=n)[0])

        def fwd_bwd_f32(feats, r, pool=pool):  # variant: gather from (and scatter the gradient into) float32
            def scalar(f):
                out = multilevel_roi_align([t.astype("float32") for t in f], r, pool, 2).astype(f[0].dtype)
                return jnp.sum(out.astype("float32"))
            return jax.grad(scalar)(feats)
        report(f"variant: roi_align {name} forward+backward in float32", timed(jax.jit(fwd_bwd_f32), pyramid[:4], r,
                                                                             steps=n)[0])

    for name, head, shape in (("box_head", model.box_head, (args.batch * spec.roi_batch, 7, 7, 256)),
                              ("mask_head", model.mask_head, (args.batch * spec.roi_positives, 14, 14, 256))):
        ht = [v.value for v in head.trainable_variables]
        features = jnp.ones(shape, pyramid[0].dtype)

        def head_train(t, f, head=head):
            def scalar(t, f):
                out = head.stateless_call(t, [], f, training=True)[0]
                out = out if isinstance(out, (list, tuple)) else [out]
                return sum(jnp.sum(o.astype("float32")) for o in out)
            return jax.grad(scalar, argnums=(0, 1))(t, f)
        report(f"{name} forward+backward ({shape[0]} ROIs)", timed(jax.jit(head_train), ht, features, steps=n)[0])

    def full_forward(t, nt, batch):
        pred = model.stateless_call(t, nt, batch, training=True)[0]
        return maskrcnn_targets.total_loss(None, pred)
    report("whole forward + losses", timed(jax.jit(full_forward), trainable_values, non_trainable_values, x,
                                           steps=n)[0])


if __name__ == "__main__":
    main()
