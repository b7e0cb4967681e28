"""SSD's COCO input on the JAX backend without TensorFlow: box arithmetic on the host, JPEGs decoded on the GPU,
resize, colour jitter and the matching to the 8,732 default boxes there, batched.

The same augmentation as the closed tf.data path (inputs/ssd.py, which follows the reference's SSDCropping,
RandomHorizontalFlip, ColorJitter and Encoder), split where each part is cheap:
1. host: the worker's records (inputs/record_reader, CRCs checked) in the closed path's kind of order
   (record_streams.epoch_stream: seeded file order, interleave, images without objects left out before the shuffle
   buffer, every trainable image once per epoch, the last batch filled by reading again);
2. host, NumPy: per image the crop (`choose_crop`: ssd.ssd_crop's arithmetic on the same kind of draws: the mode of
   each of max_rounds rounds, max_samples candidate windows each), the kept boxes clipped and re-normalised
   (`crop_boxes`), the flip, the crop's pixel window from the JPEG header's size (ssd.decode_window's arithmetic),
   the bilinear taps of the flipped window resized to 300x300 (image_geometry.train_geometry), the four jitter
   factors and their order. One NumPy generator per (seed, epoch, worker, batch): the same distributions as the
   tf.data path's stateless TensorFlow draws, not the same numbers;
3. GPU: each crop window decoded alone (inputs/jpeg_batches: nvImageCodec region decodes into one canvas; PIL on
   the host where nvImageCodec, CuPy or a GPU is missing, said once);
4. GPU, one jitted function of static shapes (inputs/ssd_jax_augment): the bilinear resize in float32 (TF's legacy kernel), ColorJitter in
   float32 with saturation after each adjustment and one rounding at the end (`jitter`: ssd.color_jitter's
   arithmetic, tf.image.adjust_hue's HSV shift), and the targets (`encode`: every default box takes the
   ground-truth box it overlaps most, each box claims its best default box, offsets against the default boxes).
   Ground truth is padded to a power of two of boxes per batch, so a handful of shapes compile.
Steps 1-2 run in a thread, or (hparam input_workers) in worker processes (inputs/worker_process), each planning
every N-th batch.
Evaluation: the whole image resized to 300x300, image id, height and width (ssd.ssd_eval_dataset), the last batch
padded with zero images of id -1.

Where this differs from the tf.data path, measured in tests/test_ssd_jax.py: the targets are matched in float32
(the tf.data path: float64; the reference: float32). Where two default boxes overlap an object equally (mirror-image
boxes, IoUs 2e-8 apart in float64), the object's forced positive can land on the other box of the pair: on 64
random images, 8 objects of 7 images; a default box whose IoU lies within float32's rounding of 0.5 could change
label too (none seen).
"""
from __future__ import annotations

import functools
from typing import Iterator

import numpy as np

from mlperf_keras.inputs import (decode_process, default_boxes, image_geometry, record_reader, record_streams,
                                  worker_process)
from mlperf_keras.inputs.jpeg_batches import BatchGeometry, resize_from_canvas
from mlperf_keras.inputs.ssd_jax_augment import train_images_and_targets
from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.inputs.ssd_augmentation import COLOR_JITTER, CROP_MAX_IOU, CROP_MIN_IOU, check_max_samples

_COORDS = ("xmin", "ymin", "xmax", "ymax")
_DETECTION_KEYS = frozenset(["image/encoded", "image/object/class/label", "image/object/is_crowd", "image/id",
                             "image/height", "image/width", *(f"image/object/bbox/{k}" for k in _COORDS)])
_MIN_GT = 8


# ---- records ----

def parse_detection(serialized) -> dict:
    """One COCO detection record of data_prep.coco -> {"jpeg", "boxes" float32 [n, 4] ltrb normalised, "labels"
    int32 [n], "is_crowd" bool [n], "image_id", "height", "width"} (coco_records.parse_detection without TF)."""
    return detection(record_reader.parse_example(serialized, _DETECTION_KEYS))


def detection(ex: dict) -> dict:
    """parse_detection's dict from a record already parsed by record_reader.parse_example (Mask R-CNN's parse reads
    its polygons from the same dict)."""
    try:
        (jpeg,) = ex["image/encoded"]
        coords = [np.asarray(ex[f"image/object/bbox/{k}"], np.float32) for k in _COORDS]
        labels = np.asarray(ex["image/object/class/label"], np.int64)
        crowd = np.asarray(ex["image/object/is_crowd"], np.int64)
        (image_id,), (height,), (width,) = ex["image/id"], ex["image/height"], ex["image/width"]
    except (KeyError, ValueError):
        raise DataError("record is not a COCO detection example of data_prep.coco (image/encoded, image/id, "
                        "image/object/bbox/*, image/object/class/label, image/object/is_crowd)") from None
    if any(len(c) != len(labels) for c in coords) or len(crowd) != len(labels):
        raise DataError("COCO record: bbox coordinates, class/label and is_crowd differ in length")
    return {"jpeg": jpeg, "boxes": np.stack(coords, axis=1).reshape(-1, 4), "labels": labels.astype(np.int32),
            "is_crowd": crowd != 0, "image_id": int(image_id), "height": int(height), "width": int(width)}


def trainable(serialized, skip_crowd: bool = False) -> dict | None:
    """The parsed record, crowd objects dropped when skip_crowd; None for an image left without objects."""
    example = parse_detection(serialized)
    if skip_crowd:
        keep = ~example["is_crowd"]
        example = {**example, "boxes": example["boxes"][keep], "labels": example["labels"][keep],
                   "is_crowd": example["is_crowd"][keep]}
    return example if len(example["labels"]) else None


def count_images(paths: list[str], *, skip_crowd: bool = False) -> int:
    """How many images of `paths` hold an object (coco_records.count_images without TF)."""
    return sum(trainable(r, skip_crowd) is not None for r in record_streams.in_order(paths))


# ---- host: the crop, the boxes, the window ----

def draw_crop(rng: np.random.Generator, max_samples: int = 1, max_rounds: int = 50):
    """The draws of one image's crop: (modes int [R], uniforms float32 [R, S, 4])."""
    return (rng.integers(0, len(CROP_MIN_IOU), max_rounds),
            rng.random((max_rounds, max_samples, 4), dtype=np.float32))


def choose_crop(boxes: np.ndarray, modes: np.ndarray, uniforms: np.ndarray):
    """ssd.ssd_crop's choice given its draws: -> (window ltrb float32 [4] normalised, keep bool [n], mode)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    window, keep, mode = choose_crops(boxes[None], np.ones((1, len(boxes)), bool), np.asarray(modes)[None],
                                      np.asarray(uniforms, np.float32)[None])
    return window[0], keep[0], int(mode[0])


def choose_crops(boxes: np.ndarray, box_valid: np.ndarray, modes: np.ndarray, uniforms: np.ndarray):
    """choose_crop for a batch at once (a call per image was a third of SSD's host time): boxes float32 [B, G, 4]
    padded, box_valid bool [B, G] (at least one per image), modes [B, R], uniforms float32 [B, R, S, 4] ->
    (windows float32 [B, 4], keep bool [B, G], modes [B]). The same float32 operations per element as one image."""
    b, rounds = modes.shape
    u = uniforms
    w, h = np.float32(0.3) + np.float32(0.7) * u[..., 0], np.float32(0.3) + np.float32(0.7) * u[..., 1]
    left, top = u[..., 2] * (np.float32(1) - w), u[..., 3] * (np.float32(1) - h)
    right, bottom = left + w, top + h
    candidates = np.stack([left, top, right, bottom], axis=-1)                    # [B, R, S, 4]
    aspect_ok = (w / h >= 0.5) & (w / h <= 2.0)
    ious = _iou32(candidates.reshape(b, -1, 4), boxes).reshape(*w.shape, boxes.shape[1])   # [B, R, S, G]
    low = np.asarray(CROP_MIN_IOU, np.float32)[modes][:, :, None, None]
    high = np.asarray(CROP_MAX_IOU, np.float32)[modes][:, :, None, None]
    padding = ~box_valid[:, None, None, :]
    with np.errstate(invalid="ignore"):   # mode 0's bounds are NaN: never valid, as in TF
        iou_ok = np.all(((ious > low) & (ious < high)) | padding, axis=3)
    centre_x = ((boxes[..., 0] + boxes[..., 2]) / np.float32(2))[:, None, None]
    centre_y = ((boxes[..., 1] + boxes[..., 3]) / np.float32(2))[:, None, None]
    inside = ((centre_x > left[..., None]) & (centre_x < right[..., None])
              & (centre_y > top[..., None]) & (centre_y < bottom[..., None]) & ~padding)
    valid = aspect_ok & iou_ok & inside.any(axis=3)                              # [B, R, S]
    whole_mode = modes == 0
    round_ok = whole_mode | valid.any(axis=2)
    first_round = np.where(round_ok.any(axis=1), np.argmax(round_ok, axis=1), rounds)
    image = np.arange(b)
    r = np.minimum(first_round, rounds - 1)
    valid_r = valid[image, r]                                                     # [B, S]
    s = np.where(valid_r.any(axis=1), np.argmax(valid_r, axis=1), valid.shape[2] - 1)
    whole = whole_mode[image, r] | (first_round >= rounds)
    windows = np.where(whole[:, None], np.array([0, 0, 1, 1], np.float32), candidates[image, r, s])
    keep = np.where(whole[:, None], box_valid, inside[image, r, s])
    return windows, keep, np.where(whole, 0, modes[image, r])


def _iou32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ssd.iou_matrix's float32 arithmetic (the crop's; the targets' is in `encode`): a [..., N, 4], b [..., M, 4]
    -> [..., N, M]."""
    a, b = a[..., :, None, :], b[..., None, :, :]
    wh = np.maximum(np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2]), np.float32(0))
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    union = area_a + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, np.float32(1)), np.float32(0))


def crop_boxes(boxes, labels, window, keep):
    """The kept boxes clipped to the window and re-normalised to it (ssd.crop_boxes)."""
    boxes = np.asarray(boxes, np.float32)
    return _clip_to_windows(boxes[None], np.asarray(window, np.float32)[None])[0][keep], np.asarray(labels)[keep]


def _clip_to_windows(boxes, windows):
    """boxes [B, G, 4] clipped to each image's window [B, 4] and re-normalised to it (float32)."""
    left, top, right, bottom = (windows[:, None, k] for k in range(4))
    w, h = right - left, bottom - top
    clipped = np.stack([np.maximum(boxes[..., 0], left), np.maximum(boxes[..., 1], top),
                        np.minimum(boxes[..., 2], right), np.minimum(boxes[..., 3], bottom)], axis=-1)
    return (clipped - np.stack([left, top, left, top], axis=-1)) / np.stack([w, h, w, h], axis=-1)


def flip_boxes(boxes):
    return np.stack([1.0 - boxes[..., 2], boxes[..., 1], 1.0 - boxes[..., 0], boxes[..., 3]],
                    axis=-1).astype(np.float32)


def pixel_window(window, height: int, width: int) -> tuple[int, int, int, int]:
    """(y, x, h, w) of a normalised ltrb window in an image of height x width (ssd.decode_window's arithmetic)."""
    return tuple(int(v) for v in pixel_windows(np.asarray(window, np.float32)[None], [height], [width])[0])


def pixel_windows(windows, heights, widths) -> np.ndarray:
    """pixel_window of a batch: windows float32 [B, 4], heights and widths [B] -> int64 [B, 4] (y, x, h, w)."""
    heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    size = np.stack([widths, heights, widths, heights], axis=1).astype(np.float32)
    left, top, right, bottom = np.floor(np.asarray(windows, np.float32) * size).astype(np.int64).T
    h, w = np.maximum(bottom - top, 1), np.maximum(right - left, 1)
    return np.stack([np.minimum(top, heights - h), np.minimum(left, widths - w), h, w], axis=1)


def draw_jitter(rng: np.random.Generator, brightness: float = 0.125, contrast: float = 0.5,
                saturation: float = 0.5, hue: float = 0.05):
    """ColorJitter's draws for one image: (factors float32 [4]: brightness, contrast, saturation, hue shift;
    order int32 [4]: the adjustments' order)."""
    low = np.array([max(0.0, 1 - brightness), max(0.0, 1 - contrast), max(0.0, 1 - saturation), -hue], np.float32)
    high = np.array([1 + brightness, 1 + contrast, 1 + saturation, hue], np.float32)
    return low + (high - low) * rng.random(4, dtype=np.float32), rng.permutation(4).astype(np.int32)


# ---- batches ----

class TrainPlan:
    """The host half of one training batch: JPEGs, decode geometry, jitter draws and padded ground truth.

    Draws per image in a fixed order (the crop's modes and uniforms, the flip, the jitter's factors and order), the
    rest batched."""

    def __init__(self, examples: list[dict], rng: np.random.Generator, *, size: int, max_samples: int,
                 max_rounds: int = 50):
        n = len(examples)
        modes = np.empty((n, max_rounds), np.int64)
        uniforms = np.empty((n, max_rounds, max_samples, 4), np.float32)
        flips = np.empty(n, bool)
        self.factors, self.order = np.empty((n, 4), np.float32), np.empty((n, 4), np.int32)
        for i in range(n):
            modes[i], uniforms[i] = draw_crop(rng, max_samples, max_rounds)
            flips[i] = rng.random() < 0.5
            self.factors[i], self.order[i] = draw_jitter(rng, **COLOR_JITTER)
        counts = np.array([len(e["labels"]) for e in examples])
        g = max(_MIN_GT, 1 << max(0, int(counts.max()) - 1).bit_length())
        boxes = np.zeros((n, g, 4), np.float32)
        labels = np.zeros((n, g), np.int32)
        box_valid = np.arange(g) < counts[:, None]
        boxes[box_valid] = np.concatenate([e["boxes"] for e in examples])
        labels[box_valid] = np.concatenate([e["labels"] for e in examples])
        windows, keep, _ = choose_crops(boxes, box_valid, modes, uniforms)
        cropped = _clip_to_windows(boxes, windows)
        cropped = np.where(flips[:, None, None], flip_boxes(cropped), cropped)
        # each image's kept boxes, in order, to the front of its row
        image, box = np.nonzero(keep)
        slot = (np.cumsum(keep, axis=1) - 1)[image, box]
        self.gt = np.zeros((n, g, 4), np.float32)
        self.gt_labels = np.zeros((n, g), np.int32)
        self.gt_valid = np.zeros((n, g), bool)
        self.gt[image, slot], self.gt_labels[image, slot], self.gt_valid[image, slot] = (
            cropped[image, box], labels[image, box], True)
        self.jpegs = worker_process.Blobs(e["jpeg"] for e in examples)
        sizes = np.array([image_geometry.jpeg_size(j) for j in self.jpegs], np.int64).reshape(n, 2)
        pixels = pixel_windows(windows, sizes[:, 0], sizes[:, 1])
        rows, cols = image_geometry.train_geometry(pixels, flips, size)
        self.geometry = BatchGeometry(pixels, rows, cols, np.ones(n, bool))


def train_batches(paths: list[str], decoder, *, seed: int, epoch: int, rank: int, batch_size: int, num_batches: int,
                  max_samples: int = 1, shuffle_buffer: int = 4096, skip_crowd: bool = False,
                  spec: default_boxes.DefaultBoxSpec = default_boxes.SSD300, max_rounds: int = 50,
                  cycle_length: int = 10, prefetch: int = 2, plan_workers: int = 0,
                  decode_workers: int = 0) -> Iterator:
    """Exactly num_batches (images uint8 [B, S, S, 3], (offsets float32 [B, D, 4], labels int32 [B, D])) of one
    worker's epoch, as JAX arrays (ssd.ssd_train_dataset's batches).

    plan_workers: 0 reads and plans the batches in a thread; N > 0 in N worker processes (inputs/worker_process),
    each reading the whole stream and planning every N-th batch: the same batches. decode_workers: N > 0, with a
    GPU decoder, reads, plans and decodes every N-th batch in each of N processes that see the GPU
    (inputs/decode_process; plan_workers is then unused): the same batches."""
    check_max_samples(max_samples)
    plan = dict(paths=paths, seed=seed, epoch=epoch, rank=rank, batch_size=batch_size, num_batches=num_batches,
                max_samples=max_samples, shuffle_buffer=shuffle_buffer, skip_crowd=skip_crowd, size=spec.fig_size,
                max_rounds=max_rounds, cycle_length=cycle_length)
    plans, decoder = decode_process.plans_and_decoder(_train_plans, plan, decoder, prefetch=prefetch,
                                                      plan_workers=plan_workers, decode_workers=decode_workers,
                                                      name="ssd-input")

    def decode():
        for p in plans:
            canvas = decoder.canvas(p.jpegs, p.geometry)
            yield train_images_and_targets(canvas, p.geometry.taps(), p.factors, p.order, p.gt, p.gt_labels,
                                           p.gt_valid, spec=spec)

    return record_streams.prefetched(decode(), prefetch, "ssd-input")


def _train_plans(paths, *, seed, epoch, rank, batch_size, num_batches, max_samples, shuffle_buffer, skip_crowd, size,
                 max_rounds, cycle_length, shard=(0, 1)) -> Iterator:
    """A TrainPlan for each of the epoch's batches i with i % shard[1] == shard[0] (all by default): the host half of
    train_batches. Images without objects are left out before the shuffle buffer. Planning every batch, each record
    is parsed once, there; one of several shards counts every record's objects (a two-feature parse) and parses
    only its own batches in full."""
    every_batch = shard[1] == 1
    examples = record_streams.epoch_stream(paths, seed=seed, epoch=epoch, num_samples=num_batches * batch_size,
                                           shuffle_buffer=shuffle_buffer, cycle_length=cycle_length,
                                           parse=functools.partial(trainable if every_batch else _with_objects,
                                                                   skip_crowd=skip_crowd))
    for index in range(num_batches):
        chunk = [next(examples) for _ in range(batch_size)]
        if index % shard[1] != shard[0]:
            continue
        rng = np.random.default_rng([int(seed), int(epoch), int(rank), index, 0x55D])
        yield TrainPlan(chunk if every_batch else [trainable(r, skip_crowd) for r in chunk], rng, size=size,
                        max_samples=max_samples, max_rounds=max_rounds)


_COUNT_KEYS = frozenset(["image/object/class/label", "image/object/is_crowd"])


def _with_objects(serialized, skip_crowd: bool = False):
    """The record where `trainable` keeps it (an object left after crowd objects are dropped), else None, from its
    labels and crowd flags alone (a record whose fields are wrong is kept, for trainable to refuse)."""
    ex = record_reader.parse_example(serialized, _COUNT_KEYS)
    labels, crowd = ex.get("image/object/class/label"), ex.get("image/object/is_crowd")
    if labels is None or crowd is None or len(labels) != len(crowd):
        return serialized
    kept = int(np.count_nonzero(np.asarray(crowd) == 0)) if skip_crowd else len(labels)
    return serialized if kept else None


def eval_batches(paths: list[str], decoder, *, batch_size: int, skip_empty: bool = True, size: int = 300,
                 cycle_length: int = 10, prefetch: int = 2) -> Iterator:
    """Every record of `paths` once, in order, in full batches: (images uint8 [B, size, size, 3] as a JAX array,
    image_id int64 [B], height int32 [B], width int32 [B]), the last batch padded with zero images of id -1
    (ssd.ssd_eval_dataset's batches)."""
    examples = (parse_detection(r) for r in record_streams.in_order(paths, cycle_length))
    if skip_empty:
        examples = (e for e in examples if len(e["labels"]))

    def plan():
        while True:
            chunk = [e for _, e in zip(range(batch_size), examples)]
            if not chunk:
                return
            missing = batch_size - len(chunk)
            sizes = [image_geometry.jpeg_size(e["jpeg"]) for e in chunk] + [(1, 1)] * missing
            windows = np.array([(0, 0, h, w) for h, w in sizes], np.int64)
            rows, cols = image_geometry.train_geometry(windows, np.zeros(batch_size, bool), size)
            valid = np.arange(batch_size) < len(chunk)
            # a padding entry decodes a 1x1 window of the first image, zeroed by the mask
            jpegs = [e["jpeg"] for e in chunk] + [chunk[0]["jpeg"]] * missing
            ids = np.array([e["image_id"] for e in chunk] + [-1] * missing, np.int64)
            heights = np.array([e["height"] for e in chunk] + [0] * missing, np.int32)
            widths = np.array([e["width"] for e in chunk] + [0] * missing, np.int32)
            yield jpegs, BatchGeometry(windows, rows, cols, valid), ids, heights, widths
            if missing:
                return

    def decode():
        for jpegs, geometry, ids, heights, widths in record_streams.prefetched(plan(), prefetch, "ssd-eval"):
            canvas = decoder.canvas(jpegs, geometry)
            yield resize_from_canvas(canvas, geometry.taps(), geometry.valid), ids, heights, widths

    return record_streams.prefetched(decode(), prefetch, "ssd-eval")


__all__ = ["TrainPlan", "choose_crop", "choose_crops", "count_images", "crop_boxes", "detection", "draw_crop",
           "draw_jitter", "eval_batches", "flip_boxes", "parse_detection", "pixel_window", "pixel_windows",
           "train_batches", "trainable"]
