"""The SSD box pipeline of the shared tf.data input layer: COCO detection records (inputs/coco_records.py) -> SSD300
training and eval batches.

Follows the MLPerf SSD-ResNet34 reference (mlcommons/training single_stage_detector/ssd/utils.py: COCODetection,
SSDCropping, RandomHorizontalFlip, SSDTransformer, Encoder):
- data: every annotation of an image is an object, crowd ones included (COCODetection reads `annotations` without
  looking at `iscrowd`), so `skip_crowd` defaults to False; images without annotations are dropped from training and
  evaluation (COCODetection pops them; hence MLPerf's eval_samples 4952 of val2017's 5000). An image whose only
  objects are crowd ones is kept for evaluation and, with skip_crowd=True, dropped from training.
- training: SSD random crop; horizontal flip with p 0.5; resize to 300x300 (bilinear); ColorJitter(brightness=0.125,
  contrast=0.5, saturation=0.5, hue=0.05) with torchvision's multiplicative factors and random order of the four
  adjustments; box targets matched and encoded against the 8,732 default boxes (default_boxes.match + encode, here in
  TensorFlow: `encode_targets`). Images leave as uint8; normalisation is inside the model.
- the crop (SSDCropping): choose uniformly among {whole image, min IoU 0.1, 0.3, 0.5, 0.7, 0.9, no IoU constraint};
  for an IoU mode try `max_samples` crops (w, h uniform in [0.3, 1], rejected unless 0.5 <= w/h <= 2, left uniform in
  [0, 1 - w], top in [0, 1 - h]) and take the first whose IoU with every ground-truth box is above the mode's minimum
  and that holds at least one box centre (every box, as the reference's `.all()`: one small box rules the IoU modes
  out, leaving whole image and no-constraint crops); keep the boxes whose centres are inside (strictly), clip them
  to the crop and re-normalise them by the crop's size; the pixel window is int(left * W) .. int(right * W) (same
  for y). When no attempt succeeds a mode is chosen again. `max_samples` is the reference's
  `num_cropping_iterations`, logged as MLLOG `max_samples`: the v0.5 reference hard-codes 1 (`for _ in range(1)`,
  its comment speaks of 50), the later SSD-ResNet34 references default `--num-cropping-iterations` to 1 with 50 the
  other legal value; default 1 here.
- evaluation: decode, resize to 300x300, no augmentation (the reference's trans_val); image id, height and width
  travel with the image so the evaluator can scale boxes back to pixels.

Where and why this differs from the reference:
- the reference's `while True` over modes is bounded to `max_rounds` (50) rounds, after which the whole image is
  kept. With 1/7 chance of "whole image" per round, a 50-round miss has probability (6/7)^50 < 1e-3 for an image
  where no crop can ever succeed, and less otherwise.
- all max_rounds x max_samples attempts (and the rounds' modes) are drawn and checked at once, and the first valid
  attempt of the first successful round is taken: the same distribution as the reference's sequential loops, with
  no tf.while_loop (in a tf.data graph a loop of small ops cost more than the extra arithmetic; XLA-friendly too).
- the crop's pixel size comes from the JPEG header (tf.image.extract_jpeg_shape); the reference uses the
  annotation's height/width, which data_prep.coco checked to be equal.
- the crop is decoded with libjpeg's accurate DCT, as the reference's PIL does (image.ACCURATE_DCT), by
  tf.image.decode_and_crop_jpeg (only the window's blocks are inverse-transformed; on
  640x480 photos, one thread: 3.6 CPU-ms per image against 3.4 for decode-then-slice at max_samples=1, equal within
  noise, and 3.6 against 4.3 at max_samples=50, whose crops are smaller; `fused_crop=False` selects the other) and
  resized with the house convention (inputs.image.resize,
  TF1 bilinear, no antialiasing); the reference resizes with PIL (bilinear, antialiased when shrinking) and applies
  ColorJitter to a uint8 PIL image, rounding after each adjustment. Here the jitter runs in float32 on the resized
  image, clipping to [0, 255] after each adjustment as uint8 saturation does, and rounds once at the end.
- contrast uses torchvision/PIL's definition (blend with the mean of the image's grayscale, rounded to an integer),
  not tf.image.adjust_contrast's per-channel mean; saturation blends with the per-pixel grayscale (PIL's "L"
  weights 0.299, 0.587, 0.114); hue shifts the HSV hue by a fraction of a turn (tf.image.adjust_hue), as PIL's HSV
  shift does.
- box matching computes IoUs in float64 (the NumPy contract, default_boxes.match); the reference uses float32.

Randomness is stateless: each training image's crop, flip and jitter depend on (seed, epoch, rank, position in the
worker's stream) only, as in inputs/image.py, so a run is reproducible whatever the number of parallel calls.
"""
from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from mlperf_keras.inputs import default_boxes, image, records
from mlperf_keras.inputs.coco_records import drop_crowd, has_objects, parse_detection
from mlperf_keras.inputs.ssd_augmentation import (COLOR_JITTER, CROP_MAX_IOU, CROP_MIN_IOU, MAX_SAMPLES_ALLOWED,
                                                check_epoch_fits, check_max_samples)

# ---- box geometry ----

def iou_matrix(a_ltrb, b_ltrb):
    """default_boxes.iou_matrix in TensorFlow (for the tf.data graph): [len(a), len(b)] IoU of ltrb boxes with
    continuous corners, the same arithmetic (0 where the union is empty)."""
    a, b = a_ltrb[:, None, :], b_ltrb[None, :, :]
    wh = tf.maximum(tf.minimum(a[..., 2:], b[..., 2:]) - tf.maximum(a[..., :2], b[..., :2]), 0.0)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    union = area_a + area_b - inter
    return tf.where(union > 0, inter / tf.where(union > 0, union, tf.ones_like(union)), tf.zeros_like(union))


def _first_argmax(x, axis: int):
    """Index of the first maximum along axis (NumPy's argmax; tf.argmax does not promise which of tied maxima)."""
    size = tf.shape(x, out_type=tf.int32)[axis]
    index = tf.reshape(tf.range(size), [-1, 1] if axis == 0 else [1, -1])
    top = tf.reduce_max(x, axis=axis, keepdims=True)
    return tf.reduce_min(tf.where(tf.equal(x, top), index, size), axis=axis)


# ---- target encoding (default_boxes.match + default_boxes.encode) ----

@functools.lru_cache(maxsize=None)
def _dboxes(spec: default_boxes.DefaultBoxSpec):
    xywh = default_boxes.default_boxes(spec)
    return xywh, default_boxes.to_ltrb(xywh).astype(np.float32)


def encode_targets(gt_ltrb, gt_labels, spec: default_boxes.DefaultBoxSpec = default_boxes.SSD300,
                   iou_threshold: float = 0.5):
    """Ground truth (ltrb [n, 4], labels [n]) -> (offsets float32 [D, 4], labels int32 [D]); D = 8,732 for SSD300.

    Same matching and offsets as default_boxes.match + default_boxes.encode (float64 inside, like them): every
    default box takes the box it overlaps most (the first on ties) and is positive above the threshold; every box
    claims the default box it overlaps most (the last box wins a default box claimed twice). No boxes: all background.
    """
    xywh_np, ltrb_np = _dboxes(spec)
    num = len(xywh_np)
    d_ltrb = tf.constant(ltrb_np.astype(np.float64))
    d_xywh = tf.constant(xywh_np.astype(np.float64))
    gt = tf.cast(tf.reshape(gt_ltrb, [-1, 4]), tf.float64)
    gt_labels = tf.cast(tf.reshape(gt_labels, [-1]), tf.int32)
    n = tf.shape(gt)[0]

    def matched():
        ious = iou_matrix(gt, d_ltrb)                              # [n, D]
        best_iou = tf.reduce_max(ious, axis=0)
        best_gt = _first_argmax(ious, axis=0)
        best_dbox = _first_argmax(ious, axis=1)                    # [n]
        # The last box claiming a default box wins it; unclaimed default boxes get int32's minimum (< 0).
        claimant = tf.math.unsorted_segment_max(tf.range(n), best_dbox, num)
        forced = claimant >= 0
        best_iou = tf.where(forced, tf.constant(2.0, tf.float64), best_iou)
        best_gt = tf.where(forced, claimant, best_gt)
        positive = best_iou > iou_threshold
        labels = tf.where(positive, tf.gather(gt_labels, best_gt), 0)
        boxes = tf.where(positive[:, None], tf.gather(gt, best_gt), d_ltrb)
        return boxes, labels

    boxes, labels = tf.cond(n > 0, matched, lambda: (d_ltrb, tf.zeros([num], tf.int32)))
    centre, size = (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]
    xy = (centre - d_xywh[:, :2]) / (spec.scale_xy * d_xywh[:, 2:])
    wh = tf.math.log(size / d_xywh[:, 2:]) / spec.scale_wh
    offsets = tf.cast(tf.concat([xy, wh], axis=1), tf.float32)
    return tf.ensure_shape(offsets, [num, 4]), tf.ensure_shape(labels, [num])


# ---- training augmentation ----

def ssd_crop(boxes, seed, max_samples: int = 1, max_rounds: int = 50):
    """SSDCropping's choice of window for ground truth `boxes` (ltrb [n, 4] normalised). seed: int64 [2].

    -> (window ltrb float32 [4] normalised, keep bool [n]: the boxes whose centres lie inside, mode int32: the index
    into CROP_MIN_IOU of the mode that produced the window; 0 = whole image, also after max_rounds failed rounds).
    All rounds' modes and attempts are drawn and checked at once (no loop: cheaper in a tf.data graph than a
    tf.while_loop of small ops, and XLA-friendly); the first successful round and its first valid attempt are taken,
    which is what the reference's sequential loops return.
    """
    boxes = tf.reshape(tf.cast(boxes, tf.float32), [-1, 4])
    n = tf.shape(boxes)[0]
    rounds, samples = int(max_rounds), int(max_samples)
    modes, u = crop_draws(seed, samples, rounds)
    w, h = 0.3 + 0.7 * u[..., 0], 0.3 + 0.7 * u[..., 1]
    left, top = u[..., 2] * (1.0 - w), u[..., 3] * (1.0 - h)
    right, bottom = left + w, top + h
    candidates = tf.stack([left, top, right, bottom], axis=-1)                       # [R, S, 4]
    aspect_ok = tf.logical_and(w / h >= 0.5, w / h <= 2.0)                           # [R, S]
    ious = tf.reshape(iou_matrix(tf.reshape(candidates, [-1, 4]), boxes), [rounds, samples, n])
    low = tf.gather(tf.constant(CROP_MIN_IOU, tf.float32), modes)[:, None, None]
    high = tf.gather(tf.constant(CROP_MAX_IOU, tf.float32), modes)[:, None, None]
    iou_ok = tf.reduce_all(tf.logical_and(ious > low, ious < high), axis=2)          # [R, S]
    centre_x = ((boxes[:, 0] + boxes[:, 2]) / 2)[None, None]
    centre_y = ((boxes[:, 1] + boxes[:, 3]) / 2)[None, None]
    inside = ((centre_x > left[..., None]) & (centre_x < right[..., None])
              & (centre_y > top[..., None]) & (centre_y < bottom[..., None]))       # [R, S, n]
    valid = aspect_ok & iou_ok & tf.reduce_any(inside, axis=2)
    whole_mode = tf.equal(modes, 0)
    round_ok = whole_mode | tf.reduce_any(valid, axis=1)
    first_round = tf.reduce_min(tf.where(round_ok, tf.range(rounds), rounds))
    r = tf.minimum(first_round, rounds - 1)
    s = tf.minimum(tf.reduce_min(tf.where(valid[r], tf.range(samples), samples)), samples - 1)
    # Whole image when the chosen mode is 0, or when no round succeeded (the bound on the reference's while True).
    whole = whole_mode[r] | (first_round >= rounds)
    window = tf.where(whole, tf.constant([0.0, 0.0, 1.0, 1.0]), candidates[r, s])
    keep = tf.where(whole, tf.ones([n], tf.bool), inside[r, s])
    return window, keep, tf.where(whole, 0, modes[r])


def crop_draws(seed, max_samples: int = 1, max_rounds: int = 50):
    """ssd_crop's draws: (modes int32 [R], uniforms float32 [R, S, 4]: width, height, left, top fractions)."""
    mode_seed, sample_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
    modes = tf.random.stateless_uniform([max_rounds], mode_seed, minval=0, maxval=len(CROP_MIN_IOU), dtype=tf.int32)
    return modes, tf.random.stateless_uniform([max_rounds, max_samples, 4], sample_seed)


def crop_boxes(boxes, labels, window, keep):
    """The kept boxes clipped to the window and re-normalised to it (the reference's order: clip, filter, scale)."""
    boxes = tf.boolean_mask(boxes, keep)
    left, top, right, bottom = tf.unstack(window)
    w, h = right - left, bottom - top
    clipped = tf.stack([tf.maximum(boxes[:, 0], left), tf.maximum(boxes[:, 1], top),
                        tf.minimum(boxes[:, 2], right), tf.minimum(boxes[:, 3], bottom)], axis=1)
    scaled = (clipped - tf.stack([left, top, left, top])) / tf.stack([w, h, w, h])
    return scaled, tf.boolean_mask(labels, keep)


def decode_window(jpeg, window, fused: bool = True):
    """Decode the part of a JPEG under a normalised ltrb window -> uint8 [h, w, 3]; the reference's pixel window
    int(left * W) .. int(right * W). fused: tf.image.decode_and_crop_jpeg (decodes only the window's blocks), else
    decode the whole image and slice."""
    shape = tf.image.extract_jpeg_shape(jpeg)
    size = tf.cast(tf.stack([shape[1], shape[0], shape[1], shape[0]]), tf.float32)     # W, H, W, H
    left, top, right, bottom = tf.unstack(tf.cast(tf.floor(window * size), tf.int32))
    height, width = tf.maximum(bottom - top, 1), tf.maximum(right - left, 1)
    top, left = tf.minimum(top, shape[0] - height), tf.minimum(left, shape[1] - width)
    if fused:
        return tf.image.decode_and_crop_jpeg(jpeg, tf.stack([top, left, height, width]), channels=3,
                                             dct_method=image.ACCURATE_DCT)
    return tf.slice(tf.image.decode_jpeg(jpeg, channels=3, dct_method=image.ACCURATE_DCT), tf.stack([top, left, 0]),
                    tf.stack([height, width, 3]))


def flip_boxes(boxes):
    return tf.stack([1.0 - boxes[:, 2], boxes[:, 1], 1.0 - boxes[:, 0], boxes[:, 3]], axis=1)


def _grayscale(image):
    return tf.tensordot(image, tf.constant([0.299, 0.587, 0.114]), axes=[[2], [0]])[..., None]


def color_jitter(image, seed, brightness: float = 0.125, contrast: float = 0.5, saturation: float = 0.5,
                 hue: float = 0.05):
    """torchvision ColorJitter on a float32 RGB image in [0, 255]: factors uniform in [max(0, 1 - x), 1 + x] (hue
    shift in [-hue, hue]), the four adjustments in a random order. seed: int64 [2]."""
    factors, order = jitter_draws(seed, brightness, contrast, saturation, hue)
    return apply_jitter(image, factors, order)


def jitter_draws(seed, brightness: float = 0.125, contrast: float = 0.5, saturation: float = 0.5, hue: float = 0.05):
    """ColorJitter's draws: (factors float32 [4]: brightness, contrast, saturation, hue shift; order int32 [4])."""
    factor_seed, order_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
    low = tf.constant([max(0.0, 1 - brightness), max(0.0, 1 - contrast), max(0.0, 1 - saturation), -hue], tf.float32)
    high = tf.constant([1 + brightness, 1 + contrast, 1 + saturation, hue], tf.float32)
    factors = low + (high - low) * tf.random.stateless_uniform([4], factor_seed)
    return factors, tf.random.experimental.stateless_shuffle(tf.range(4), order_seed)


def apply_jitter(image, factors, order):
    """The four adjustments with the given factors, in the given order."""
    def blend(base, x, f):       # PIL ImageEnhance: base + f * (x - base), saturated to uint8's range
        return tf.clip_by_value(base + f * (x - base), 0.0, 255.0)

    branches = [
        lambda x: blend(tf.zeros_like(x), x, factors[0]),
        lambda x: blend(tf.round(tf.reduce_mean(_grayscale(x))), x, factors[1]),
        lambda x: blend(_grayscale(x), x, factors[2]),
        # The hue of an RGB triple does not depend on its scale: no need to bring the image to [0, 1] and back.
        lambda x: tf.clip_by_value(tf.image.adjust_hue(x, factors[3]), 0.0, 255.0),
    ]
    for i in range(4):
        image = tf.switch_case(order[i], [functools.partial(b, image) for b in branches])
    return image


def ssd_train_preprocess(jpeg, boxes, labels, seed, *, max_samples: int = 1, size: int = 300,
                         max_rounds: int = 50, fused_crop: bool = True, jitter: bool = True):
    """One training image: SSD crop, flip p 0.5, resize to size x size, colour jitter.

    -> (uint8 [size, size, 3], boxes float32 [m, 4] ltrb normalised to the output image, labels [m]). seed: int64 [2].
    """
    crop_seed, flip_seed, jitter_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=3))
    window, keep, _ = ssd_crop(boxes, crop_seed, max_samples, max_rounds)
    boxes, labels = crop_boxes(tf.reshape(boxes, [-1, 4]), labels, window, keep)
    pixels = decode_window(jpeg, window, fused_crop)
    flip = tf.random.stateless_uniform([], flip_seed) < 0.5
    pixels = tf.cond(flip, lambda: tf.reverse(pixels, axis=[1]), lambda: pixels)
    boxes = tf.cond(flip, lambda: flip_boxes(boxes), lambda: boxes)
    pixels = image.resize(pixels, size, size)
    if jitter:
        pixels = color_jitter(pixels, jitter_seed, **COLOR_JITTER)
    pixels = image.to_uint8(pixels)
    pixels.set_shape([size, size, 3])
    return pixels, boxes, labels


# ---- datasets ----

def ssd_train_examples(paths: list[str], *, seed: int, epoch: int, num_samples: int, shuffle_buffer: int = 10_000,
                       skip_crowd: bool = False, cycle_length: int = 10) -> tf.data.Dataset:
    """One worker's epoch of parsed training examples (parse_detection's dicts), num_samples of them: every image of
    `paths` with an object exactly once, in a seeded shuffled order, then the stream wrapped (read again from the
    start, in a new file order) until num_samples are out. The wrapped part only fills the epoch's last batch(es),
    as torch's DistributedSampler pads its index list with the first indices again."""
    e_seed = image.epoch_seed(seed, epoch)
    dataset = records.record_dataset(paths, shuffle_seed=e_seed, cycle_length=cycle_length)
    dataset = dataset.map(lambda r: drop_crowd(parse_detection(r)) if skip_crowd else parse_detection(r),
                          num_parallel_calls=records.AUTOTUNE, deterministic=True).filter(has_objects)
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=e_seed, reshuffle_each_iteration=False)
    return dataset.repeat().take(num_samples)


def ssd_train_dataset(paths: list[str], *, seed: int, epoch: int, rank: int, batch_size: int, num_batches: int,
                      max_samples: int = 1, shuffle_buffer: int = 10_000, skip_crowd: bool = False,
                      num_images: int | None = None,
                      spec: default_boxes.DefaultBoxSpec = default_boxes.SSD300, max_rounds: int = 50,
                      cycle_length: int = 10, threads: int | None = None, fused_crop: bool = True) -> tf.data.Dataset:
    """Exactly num_batches training batches of one worker for one epoch:
    (images uint8 [B, S, S, 3], (offsets float32 [B, D, 4], labels int32 [B, D])), S = spec.fig_size, D = 8,732.

    paths: the worker's record files (records.worker_files). Each image with an object (after dropping crowd objects
    when skip_crowd) comes exactly once per epoch, in an order shuffled per (seed, epoch) (file order, then a seeded
    shuffle buffer), and the epoch's remaining samples wrap around (ssd_train_examples); each image gets its own
    stateless seed from (seed, epoch, rank, position). num_images: how many such images `paths` hold (count_images;
    the workload counts them once per run): none, or more than num_batches x batch_size, fails (DataError) rather
    than leaving images out; None skips the check (a benchmark timing part of an epoch). max_samples: crop attempts
    per mode (MLPerf: 1 or 50; logged as `max_samples`). threads: private tf.data thread pool size (None:
    TensorFlow's default pool).
    """
    check_max_samples(max_samples)
    if num_images is not None:
        check_epoch_fits(num_images, batch_size, num_batches, paths)
    e_seed = image.epoch_seed(seed, epoch)
    dataset = ssd_train_examples(paths, seed=seed, epoch=epoch, num_samples=num_batches * batch_size,
                                 shuffle_buffer=shuffle_buffer, skip_crowd=skip_crowd,
                                 cycle_length=cycle_length).enumerate()
    stream = tf.constant(int(rank) << 40, tf.int64)

    def preprocess(index, example):
        element_seed = tf.stack([tf.constant(e_seed, tf.int64), stream + index])
        pixels, boxes, labels = ssd_train_preprocess(example["jpeg"], example["boxes"], example["labels"],
                                                     element_seed, max_samples=max_samples, size=spec.fig_size,
                                                     max_rounds=max_rounds, fused_crop=fused_crop)
        return pixels, encode_targets(boxes, labels, spec)

    dataset = dataset.map(preprocess, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size, drop_remainder=True).prefetch(records.AUTOTUNE)
    return image.with_threads(dataset, threads)


def ssd_eval_dataset(paths: list[str], *, batch_size: int, skip_empty: bool = True, size: int = 300,
                     cycle_length: int = 10, threads: int | None = None) -> tf.data.Dataset:
    """Every record of `paths` once, in order, in full batches: (images uint8 [B, size, size, 3] resized without
    augmentation, image_id int64 [B], height int32 [B], width int32 [B]) with height/width the original image's.

    skip_empty drops images without objects (the reference's evaluation set; crowd objects count). The last batch
    is padded to batch_size with zero images of image_id -1, height 0 and width 0 (static shapes under XLA).
    """
    # No Python control flow below: AutoGraph has nothing to convert (and mistakes these closures for the training
    # pipeline's same-named ones, warning at every evaluation).
    @tf.autograph.experimental.do_not_convert
    def preprocess(example):
        decoded = tf.image.decode_jpeg(example["jpeg"], channels=3, dct_method=image.ACCURATE_DCT)
        pixels = image.to_uint8(image.resize(decoded, size, size))
        pixels.set_shape([size, size, 3])
        return pixels, example["image_id"], example["height"], example["width"]

    @tf.autograph.experimental.do_not_convert
    def pad(pixels, ids, heights, widths):
        missing = batch_size - tf.shape(ids)[0]
        pixels = tf.pad(pixels, [[0, missing], [0, 0], [0, 0], [0, 0]])
        ids = tf.pad(ids, [[0, missing]], constant_values=-1)
        heights, widths = tf.pad(heights, [[0, missing]]), tf.pad(widths, [[0, missing]])
        return (tf.ensure_shape(pixels, [batch_size, size, size, 3]), tf.ensure_shape(ids, [batch_size]),
                tf.ensure_shape(heights, [batch_size]), tf.ensure_shape(widths, [batch_size]))

    dataset = records.record_dataset(paths, cycle_length=cycle_length)
    dataset = dataset.map(parse_detection, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    if skip_empty:
        dataset = dataset.filter(has_objects)
    dataset = dataset.map(preprocess, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size).map(pad).prefetch(records.AUTOTUNE)
    return image.with_threads(dataset, threads)


__all__ = ["COLOR_JITTER", "CROP_MAX_IOU", "CROP_MIN_IOU", "MAX_SAMPLES_ALLOWED", "apply_jitter",
           "check_epoch_fits", "check_max_samples", "color_jitter", "crop_boxes", "crop_draws", "decode_window",
           "encode_targets", "flip_boxes", "iou_matrix", "jitter_draws", "ssd_crop",
           "ssd_eval_dataset", "ssd_train_dataset", "ssd_train_examples", "ssd_train_preprocess"]
