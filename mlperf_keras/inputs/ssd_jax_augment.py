"""SSD's training augmentation on the GPU (the device half of inputs/ssd_jax's batches), in one jitted function of
static shapes: the bilinear resize from the decoded canvas (inputs/jpeg_batches), ColorJitter in float32 with
saturation after each adjustment and one rounding at the end (`jitter`: inputs/ssd.color_jitter's arithmetic;
`adjust_hue`: tf.image.adjust_hue's CPU kernel), and the targets (`encode`: inputs/ssd.encode_targets batched, in
float32: every default box takes the ground-truth box it overlaps most, each box claims its best default box,
offsets against the default boxes)."""
from __future__ import annotations

import functools

import numpy as np

from mlperf_keras.inputs import default_boxes
from mlperf_keras.inputs.jpeg_batches import bilinear_from_canvas, to_uint8


def _grayscale(x):
    import jax.numpy as jnp

    return jnp.tensordot(x, jnp.asarray([0.299, 0.587, 0.114], jnp.float32), axes=[[-1], [0]])[..., None]


def adjust_hue(x, delta):
    """tf.image.adjust_hue's CPU kernel (tensorflow/core/kernels/image/adjust_hue_op.cc: rgb_to_hv_range,
    hv_range_to_rgb) on float32 RGB [..., 3]; delta [...] broadcast per image, a fraction of a turn."""
    import jax.numpy as jnp

    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    # the kernel's six orderings, ties to whichever side its comparisons put them
    r_lt_g = r < g
    category = jnp.where(r_lt_g, jnp.where(b < r, 1, jnp.where(b > g, 3, 2)),
                         jnp.where(b < g, 0, jnp.where(b > r, 4, 5)))
    v_max = jnp.where(r_lt_g, jnp.where(b > g, b, g), jnp.where(b > r, b, r))
    v_min = jnp.where(r_lt_g, jnp.where(b < r, b, r), jnp.where(b < g, b, g))
    v_mid = jnp.select([category == 0, category == 1, category == 2, category == 3, category == 4],
                       [g, r, b, g, r], b)
    span = v_max - v_min
    ratio = (v_mid - v_min) / jnp.where(span > 0, span, 1.0)
    increase = (category % 2) == 0
    h = jnp.where(span > 0, category + jnp.where(increase, ratio, 1.0 - ratio), 0.0)
    h = jnp.fmod(h + delta[..., None, None] * 6.0, 6.0)
    h = jnp.where(h < 0, h + 6.0, h)
    out_category = h.astype(jnp.int32)
    out_ratio = h - out_category
    out_ratio = jnp.where((out_category % 2) == 0, out_ratio, 1.0 - out_ratio)
    mid = v_min + out_ratio * span
    c = out_category
    new_r = jnp.select([c == 0, c == 1, c == 2, c == 3, c == 4], [v_max, mid, v_min, v_min, mid], v_max)
    new_g = jnp.select([c == 0, c == 1, c == 2, c == 3, c == 4], [mid, v_max, v_max, mid, v_min], v_min)
    new_b = jnp.select([c == 0, c == 1, c == 2, c == 3, c == 4], [v_min, v_min, mid, v_max, v_max], mid)
    return jnp.stack([new_r, new_g, new_b], axis=-1)


def jitter(x, factors, order):
    """ssd.color_jitter on float32 images [B, H, W, 3] in [0, 255], per image factors [B, 4] and order [B, 4]."""
    import jax.numpy as jnp

    f = factors[:, :, None, None, None]

    def blend(base, image, k):   # PIL ImageEnhance: base + f * (x - base), saturated to uint8's range
        return jnp.clip(base + f[:, k] * (image - base), 0.0, 255.0)

    for i in range(4):
        gray = _grayscale(x)
        step = order[:, i, None, None, None]
        # per image the adjustment its order puts here, chosen element by element: where-selects fuse into one
        # pass over the batch (a stack of the four results, then a gather, wrote all four out first)
        x = jnp.where(step == 0, blend(jnp.zeros_like(x), x, 0),
                      jnp.where(step == 1, blend(jnp.round(jnp.mean(gray, axis=(1, 2, 3), keepdims=True)), x, 1),
                                jnp.where(step == 2, blend(gray, x, 2),
                                          jnp.clip(adjust_hue(x, factors[:, 3]), 0.0, 255.0))))
    return x


@functools.lru_cache(maxsize=None)
def _dboxes(spec: default_boxes.DefaultBoxSpec):
    xywh = default_boxes.default_boxes(spec)
    return xywh, default_boxes.to_ltrb(xywh).astype(np.float32)


def encode(gt_ltrb, gt_labels, gt_valid, spec: default_boxes.DefaultBoxSpec = default_boxes.SSD300,
           iou_threshold: float = 0.5):
    """ssd.encode_targets, batched and in float32: ground truth [B, G, 4], labels [B, G], valid [B, G] ->
    (offsets float32 [B, D, 4], labels int32 [B, D])."""
    import jax
    import jax.numpy as jnp

    xywh_np, ltrb_np = _dboxes(spec)
    d_ltrb, d_xywh = jnp.asarray(ltrb_np), jnp.asarray(xywh_np)
    num = len(xywh_np)

    def one(gt, labels, valid):
        a, b = gt[:, None, :], d_ltrb[None, :, :]
        wh = jnp.maximum(jnp.minimum(a[..., 2:], b[..., 2:]) - jnp.maximum(a[..., :2], b[..., :2]), 0.0)
        inter = wh[..., 0] * wh[..., 1]
        area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
        union = area_a + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - inter
        ious = jnp.where(union > 0, inter / jnp.where(union > 0, union, 1.0), 0.0)
        ious = jnp.where(valid[:, None], ious, -1.0)                            # [G, D]
        best_iou, best_gt = jnp.max(ious, axis=0), jnp.argmax(ious, axis=0)
        best_dbox = jnp.argmax(ious, axis=1)                                   # [G]
        g = jnp.arange(gt.shape[0], dtype=jnp.int32)
        # the last box claiming a default box wins it (padding claims nothing)
        claimant = jnp.full((num,), -1, jnp.int32).at[jnp.where(valid, best_dbox, num)].max(g, mode="drop")
        forced = claimant >= 0
        best_iou = jnp.where(forced, 2.0, best_iou)
        best_gt = jnp.where(forced, claimant, best_gt)
        positive = best_iou > iou_threshold
        out_labels = jnp.where(positive, labels[best_gt], 0).astype(jnp.int32)
        boxes = jnp.where(positive[:, None], gt[best_gt], d_ltrb)
        centre, size = (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]
        xy = (centre - d_xywh[:, :2]) / (spec.scale_xy * d_xywh[:, 2:])
        wh = jnp.log(size / d_xywh[:, 2:]) / spec.scale_wh
        return jnp.concatenate([xy, wh], axis=1), out_labels

    return jax.vmap(one)(gt_ltrb, gt_labels, gt_valid)


_train_fn = None


def train_images_and_targets(canvas, taps, factors, order, gt, labels, valid_gt, spec=default_boxes.SSD300,
                             color_jitter: bool = True):
    """The jitted GPU half of a training batch: (uint8 images [B, S, S, 3], (offsets [B, D, 4], labels [B, D]))."""
    global _train_fn
    if _train_fn is None:
        import jax
        import jax.numpy as jnp

        def build(canvas, taps, factors, order, gt, labels, valid_gt, spec, color_jitter):
            pixels = bilinear_from_canvas(canvas, *taps)
            if color_jitter:
                pixels = jitter(pixels, factors, order)
            images = to_uint8(pixels, jnp.ones(pixels.shape[0], bool))
            return images, encode(gt, labels, valid_gt, spec)

        _train_fn = jax.jit(build, static_argnames=("spec", "color_jitter"))
    return _train_fn(canvas, tuple(taps), factors, order, gt, labels, valid_gt, spec=spec, color_jitter=color_jitter)


__all__ = ["adjust_hue", "encode", "jitter", "train_images_and_targets"]
