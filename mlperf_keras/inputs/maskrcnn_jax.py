"""Mask R-CNN's COCO input on the JAX backend without TensorFlow: boxes, polygons and resize taps on the host, whole
JPEGs decoded on the GPU (or the host), one jitted resize that pads and flips, batched.

The same batches as the closed tf.data path (inputs/maskrcnn.py, whose docstring cites the reference: the v0.6/v0.7
maskrcnn_benchmark's resize to a short side of 800 / long side <= 1333 with PIL's bilinear filter, the flip with
p 0.5 of pixels, boxes and polygons, the orientation groups), split where each part is cheap:
1. host: the worker's records (inputs/record_reader, CRCs checked) in the closed path's kind of order
   (record_streams.epoch_stream: seeded file order, interleave, the images without a usable object left out
   before the shuffle buffer; one pass is every trainable image once), grouped by orientation as they come, each
   group's last, partial batch of a pass filled with its own images again (the same flips), passes back to back
   (maskrcnn_shapes.stream_position: the workload cuts them into epochs as the tf.data path does);
2. host, NumPy, in float32 as the tf.data path's TensorFlow ops: the crowd objects dropped, the reference's pixel
   boxes (`reference_boxes`), each object's polygon edges (`object_edges`), scaled by the resize and flipped, padded
   to max_gt objects and max_vertices edges (an image with more stops the run: DataError); the flips (one NumPy
   generator per (seed, data pass, worker, batch): the tf.data path's distribution, not its numbers); the resize's
   taps per output row and column (`axis_taps`), the flip folded into the columns;
3. GPU: each whole JPEG decoded into one canvas (inputs/jpeg_batches: nvImageCodec, or PIL on the host where
   nvImageCodec, CuPy or a GPU is missing, said once); Mask R-CNN does not crop;
4. GPU, one jitted function of static shapes (`resize_and_pad`: the canvas size, the batch, the orientation's
   padded shape and the taps per output pixel, 2 for COCO's images, which are all enlarged): the resize, rounded to
   uint8, and the padding with PAD_RGB at the bottom and right, as maskrcnn.resize_like_pil, image.to_uint8 and
   _pad_image. The resize is the tf.data path's: where a side grows, TensorFlow's bilinear kernel with half-pixel
   centres in its float32 steps (source = (i + 0.5) x in / out - 0.5, lerps across then down); where a side
   shrinks, PIL's triangle filter widened by the scale (Image.resize BILINEAR's spans and weights, which
   tf.image.resize with antialias computes too).
Evaluation: every record once in file order, the whole image resized alike without a flip, grouped by orientation,
a group's last batch filled with repeats under image_id -1 (maskrcnn.eval_dataset's batches).

Where this differs from the tf.data path, measured in tests/test_maskrcnn_jax.py on generated COCO images (14
images of 96-170 px a side, shrunk to 64/112 and grown to 160/256):
- pixels: PIL decodes with libjpeg's accurate integer DCT, as the reference's PIL does, and so does the tf.data
  path (image.ACCURATE_DCT: TF's decode then equals PIL's); nvJPEG, behind nvImageCodec, has its own IDCT. With
  PIL's decode the resize is the tf.data path's exactly when growing (all of COCO) and within 1 level in 0.001% of
  values when shrinking (0.02% at 96/170, where sides shrink by a few pixels; float32 sums in another order; the
  test allows 1 level in 0.1%, for training and evaluation batches). Boxes, classes and polygon edges equal the
  tf.data path's bit for bit (the same float32 operations);
- the random flips are NumPy's (above), so the same seed flips other images;
- where num_batches asks for more than a pass, the same pass again (the tf.data path's repeat re-shuffles its file
  order); the workload asks for exactly one pass at a time.
The GPU decoder is the one ResNet and SSD use (tests/test_imagenet_gpu_decode.py, marked gpu, compares it with
PIL's through their jitted resize).

One file over 400 lines on purpose: it follows inputs/maskrcnn.py step for step (records, ground truth, resize,
batches), and the host arithmetic, the taps and the jitted function that reads them belong together. Nothing here
imports TensorFlow.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from mlperf_keras.inputs import image_geometry, record_reader, record_streams, ssd_jax
from mlperf_keras.inputs.jpeg_batches import CanvasLayout
from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.inputs.maskrcnn_shapes import (LANDSCAPE, MAX_SIZE, MAX_VERTICES, MIN_SIZE, PAD_RGB, PORTRAIT,
                                                 check_epoch_fits, padded_shape)

_F32 = np.float32
_POLYGON = "image/object/polygon/"


# ---- records ----

def parse_instances(serialized) -> dict:
    """maskrcnn.parse_instances without TensorFlow: ssd_jax.parse_detection's dict plus "polygon_parts" int64 [n],
    "polygon_vertices" int64 [P], "polygon_xy" float32 [V, 2] (pixels of the original image)."""
    ex = record_reader.parse_example(serialized)
    example = ssd_jax.detection(ex)
    try:
        parts = np.asarray(ex.get(_POLYGON + "parts", []), np.int64).reshape(-1)
        vertices = np.asarray(ex.get(_POLYGON + "vertices", []), np.int64).reshape(-1)
        xy = np.asarray(ex.get(_POLYGON + "xy", []), np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise DataError("COCO record: image/object/polygon/* are not number lists") from None
    if len(parts) != len(example["labels"]):
        raise DataError("COCO record: polygon/parts and class/label differ in length (data_prep.coco writes "
                        "polygons since Mask R-CNN trains on them: prepare the data again)")
    if parts.sum() != len(vertices) or (parts < 0).any() or (vertices < 0).any():
        raise DataError("COCO record: polygon/parts and polygon/vertices disagree")
    if 2 * vertices.sum() != len(xy):
        raise DataError("COCO record: polygon/vertices and polygon/xy disagree")
    return {**example, "polygon_parts": parts, "polygon_vertices": vertices, "polygon_xy": xy.reshape(-1, 2)}


def orientation(height: int, width: int) -> int:
    """LANDSCAPE (height < width) or PORTRAIT (height >= width)."""
    return PORTRAIT if height >= width else LANDSCAPE


def trainable(example: dict) -> bool:
    """maskrcnn.trainable (has_valid_annotation): some object, crowd included, wider and taller than 1 pixel."""
    b = example["boxes"]
    w = (b[:, 2] - b[:, 0]) * _F32(example["width"])
    h = (b[:, 3] - b[:, 1]) * _F32(example["height"])
    return bool(np.any((w > 1.0) & (h > 1.0)))


def _trainable_instances(serialized) -> dict | None:
    example = parse_instances(serialized)
    return example if trainable(example) else None


def count_groups(paths: list[str]) -> tuple[int, int]:
    """(landscape, portrait) trainable images in `paths` (maskrcnn.count_groups without TensorFlow); one read."""
    counts = [0, 0]
    for serialized in record_streams.in_order(paths):
        example = ssd_jax.parse_detection(serialized)
        if trainable(example):
            counts[orientation(example["height"], example["width"])] += 1
    return counts[0], counts[1]


# ---- host: sizes, boxes, polygons ----

def resized_size(height: int, width: int, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE) -> tuple[int, int]:
    """The reference's Resize.get_size in Python's float arithmetic (maskrcnn.resized_size): (new height, width)."""
    h, w = float(height), float(width)
    short, long = min(h, w), max(h, w)
    size = float(round(max_size * short / long)) if long / short * min_size > max_size else float(min_size)
    if (w <= h and w == size) or (h <= w and h == size):
        return int(h), int(w)
    if w < h:
        return int(math.floor(size * h / w)), int(size)
    return int(size), int(math.floor(size * w / h))


def reference_boxes(normalized: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """maskrcnn.reference_boxes in float32: stored ltrb boxes (normalised, [n, 4]) -> the reference's pixel boxes
    (x1, y1, x2, y2 inclusive, clipped to the image) and which of them are not empty."""
    w, h, one, zero = _F32(width), _F32(height), _F32(1), _F32(0)
    b = np.asarray(normalized, np.float32).reshape(-1, 4)
    x1, x2 = np.clip(b[:, 0] * w, zero, w - one), np.clip(b[:, 2] * w - one, zero, w - one)
    y1, y2 = np.clip(b[:, 1] * h, zero, h - one), np.clip(b[:, 3] * h - one, zero, h - one)
    return np.stack([x1, y1, x2, y2], axis=1), (x2 > x1) & (y2 > y1)


def object_edges(parts, vertices, xy, max_vertices: int) -> np.ndarray:
    """maskrcnn.object_edges in NumPy: float32 [n, max_vertices, 5] rows (x0, y0, x1, y1, part) per object, each
    polygon's last vertex joined to its first, zero rows after an object's edges; DataError for an object of more
    than max_vertices vertices."""
    parts, vertices = np.asarray(parts, np.int64), np.asarray(vertices, np.int64)
    xy = np.asarray(xy, np.float32).reshape(-1, 2)
    n = len(parts)
    polygon = np.repeat(np.arange(len(vertices)), vertices)                 # [V]: each vertex's polygon
    first = (np.cumsum(vertices) - vertices)[polygon]
    k = np.arange(len(polygon))
    following = np.where(k + 1 == first + vertices[polygon], first, k + 1)
    owner_of_polygon = np.repeat(np.arange(n), parts)
    part = np.arange(len(vertices)) - (np.cumsum(parts) - parts)[owner_of_polygon]
    owner = owner_of_polygon[polygon]
    per_object = np.bincount(owner, minlength=n)
    if n and per_object.max() > max_vertices:
        raise DataError(f"an object has more polygon vertices than max_vertices={max_vertices} (the workload takes "
                        f"the manifest's max_object_vertices: is the manifest the one data_prep.coco wrote with "
                        f"these records?)")
    edges = np.zeros((n, max_vertices, 5), np.float32)
    position = k - (np.cumsum(per_object) - per_object)[owner]
    edges[owner, position] = np.concatenate([xy, xy[following], part[polygon].astype(np.float32)[:, None]], axis=1)
    return edges


def train_targets(example: dict, flip: bool, new_h: int, new_w: int, *, max_gt: int = 100,
                  max_vertices: int = MAX_VERTICES) -> dict:
    """maskrcnn.train_example's ground truth of one parsed image, in its float32 steps: gt_boxes float32 [max_gt, 4]
    (pixels of the resized, flipped image), gt_classes int32 [max_gt] (0 pads), gt_polygons float32 [max_gt,
    max_vertices, 5]."""
    keep = ~example["is_crowd"]
    height, width = example["height"], example["width"]
    boxes, nonempty = reference_boxes(example["boxes"][keep], height, width)
    labels = example["labels"][keep][nonempty].astype(np.int32)
    edges = object_edges(example["polygon_parts"], example["polygon_vertices"], example["polygon_xy"],
                         max_vertices)[keep][nonempty]
    ratio_w, ratio_h = _F32(new_w) / _F32(width), _F32(new_h) / _F32(height)
    scaled = boxes[nonempty] * np.array([ratio_w, ratio_h, ratio_w, ratio_h], np.float32)
    edges = edges * np.array([ratio_w, ratio_h, ratio_w, ratio_h, 1], np.float32)     # Polygons.resize
    if flip:
        w, one = _F32(new_w), _F32(1)
        scaled = np.stack([w - scaled[:, 2] - one, scaled[:, 1], w - scaled[:, 0] - one, scaled[:, 3]], axis=1)
        # Polygons.transpose on every row: padding rows stay horizontal, so they still never cross
        edges = np.stack([w - edges[..., 0] - one, edges[..., 1], w - edges[..., 2] - one, edges[..., 3],
                          edges[..., 4]], axis=-1)
    n = len(labels)
    if n > max_gt:
        raise DataError(f"an image has more objects than max_gt={max_gt}; raise it with --hparams=max_gt=N")
    out = {"gt_boxes": np.zeros((max_gt, 4), np.float32), "gt_classes": np.zeros(max_gt, np.int32),
           "gt_polygons": np.zeros((max_gt, max_vertices, 5), np.float32)}
    out["gt_boxes"][:n], out["gt_classes"][:n], out["gt_polygons"][:n] = scaled, labels, edges
    return out


# ---- host: the resize's taps ----

def axis_taps(in_size: int, out_size: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Taps of resized positions (ints in [0, out_size)) along one side of in_size: (index int64 [n, K], weight
    float32 [n, K]), unused taps of weight 0. Growing (out_size >= in_size): TensorFlow's bilinear kernel with
    half-pixel centres in float32 (K = 2, weights 1 - lerp and lerp; resize_bilinear_op.cc). Shrinking: PIL's
    ImagingResample spans and weights (a triangle widened by in / out, normalised; libImaging/Resample.c
    precompute_coeffs), in float64."""
    positions = np.asarray(positions, np.int64)
    if out_size >= in_size:
        scale = _F32(in_size) / _F32(out_size)
        source = (positions.astype(np.float32) + _F32(0.5)) * scale - _F32(0.5)
        floor = np.floor(source)
        lower = np.maximum(floor.astype(np.int64), 0)
        upper = np.minimum(np.ceil(source).astype(np.int64), in_size - 1)
        lerp = (source - floor).astype(np.float32)
        return np.stack([lower, upper], axis=1), np.stack([_F32(1) - lerp, lerp], axis=1)
    scale = in_size / out_size                    # > 1: PIL's filterscale and support (bilinear's support is 1)
    centre = (positions + 0.5) * scale
    low = np.maximum(np.trunc(centre - scale + 0.5).astype(np.int64), 0)
    high = np.minimum(np.trunc(centre + scale + 0.5).astype(np.int64), in_size)
    k = int((high - low).max())
    index = low[:, None] + np.arange(k)
    weight = np.maximum(1.0 - np.abs((index - centre[:, None] + 0.5) / scale), 0.0)
    weight = np.where(index < high[:, None], weight, 0.0)
    total = weight.sum(axis=1, keepdims=True)
    weight = weight / np.where(total > 0, total, 1.0)
    return np.minimum(index, in_size - 1), weight.astype(np.float32)


def _stack_taps(taps: list) -> tuple[np.ndarray, np.ndarray]:
    """Per-image (index [n, k], weight [n, k]) padded to one k (2, else a power of two) -> [B, n, K] each."""
    k = max(t[0].shape[1] for t in taps)
    k = 2 if k <= 2 else 1 << (k - 1).bit_length()
    index = np.zeros((len(taps), taps[0][0].shape[0], k), np.int64)
    weight = np.zeros((len(taps), taps[0][0].shape[0], k), np.float32)
    for i, (idx, w) in enumerate(taps):
        index[i, :, :idx.shape[1]], weight[i, :, :w.shape[1]] = idx, w
    return index, weight


class ImageGeometry(CanvasLayout):
    """A batch's whole images in the canvas and the taps that resize each to its (new height, new width), flipped
    where asked, into one padded shape: rows (canvas offsets [B, H, K], weights), cols (offsets within a row
    [B, W, K], weights), and which rows and cols lie inside each resized image."""

    def __init__(self, jpegs: list[bytes], new_sizes, flips, padded: tuple[int, int]):
        sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs], np.int64).reshape(-1, 2)
        windows = np.concatenate([np.zeros_like(sizes), sizes], axis=1)
        super().__init__(windows, np.ones(len(jpegs), bool))
        rows, cols, self.row_valid, self.col_valid = [], [], [], []
        out_h, out_w = np.arange(padded[0]), np.arange(padded[1])
        for (in_h, in_w), (new_h, new_w), flip in zip(sizes, new_sizes, flips):
            rows.append(axis_taps(int(in_h), int(new_h), np.minimum(out_h, new_h - 1)))
            source_col = np.clip(new_w - 1 - out_w if flip else out_w, 0, new_w - 1)   # the flip after the resize
            cols.append(axis_taps(int(in_w), int(new_w), source_col))
            self.row_valid.append(out_h < new_h)
            self.col_valid.append(out_w < new_w)
        row_index, self.row_weight = _stack_taps(rows)
        col_index, self.col_weight = _stack_taps(cols)
        self.row_index = row_index * (sizes[:, 1] * 3)[:, None, None] + self.bases[:, None, None]
        self.col_index = col_index * 3
        self.row_valid, self.col_valid = np.stack(self.row_valid), np.stack(self.col_valid)

    def taps(self):
        return (self.row_index.astype(np.int32), self.row_weight, self.col_index.astype(np.int32), self.col_weight,
                self.row_valid, self.col_valid)


# ---- device: resize, round, pad ----

def _resize_pad(canvas, row_index, row_weight, col_index, col_weight, row_valid, col_valid):
    """uint8 [B, H, W, 3]: each output pixel's taps gathered from the flat canvas and weighted in float32, across
    then down (with 2 taps as TF's bilinear kernel: a + (b - a) x lerp), rounded; PAD_RGB outside the image."""
    import jax.numpy as jnp

    channel = jnp.arange(3, dtype=jnp.int32)

    def across(a):   # one row tap of every output row, interpolated across the columns: [B, H, W, 3]
        rows = row_index[:, :, a, None, None]
        taps = [canvas[rows + col_index[:, None, :, k, None] + channel].astype(jnp.float32)
                for k in range(col_index.shape[2])]
        if len(taps) == 2:
            return taps[0] + (taps[1] - taps[0]) * col_weight[:, None, :, 1, None]
        return sum(t * col_weight[:, None, :, k, None] for k, t in enumerate(taps))

    lines = [across(a) for a in range(row_index.shape[2])]
    if len(lines) == 2:
        out = lines[0] + (lines[1] - lines[0]) * row_weight[:, :, 1, None, None]
    else:
        out = sum(line * row_weight[:, :, a, None, None] for a, line in enumerate(lines))
    pixels = jnp.clip(jnp.round(out), 0.0, 255.0).astype(jnp.uint8)
    inside = (row_valid[:, :, None] & col_valid[:, None, :])[..., None]
    return jnp.where(inside, pixels, jnp.asarray(PAD_RGB, jnp.uint8))


_resize_fn = None


def resize_and_pad(canvas, taps):
    """The jitted _resize_pad (compiled once per canvas size, batch, padded shape and taps per side)."""
    global _resize_fn
    if _resize_fn is None:
        import jax

        _resize_fn = jax.jit(_resize_pad)
    return _resize_fn(canvas, *taps)


# ---- batches ----

def _grouped(items: Iterator, batch_size: int, key) -> Iterator[tuple[list, int]]:
    """(batch_size items of one group, how many are real) as the items come (tf.data's group_by_window); at the end
    each group's partial batch, landscape first, filled with its own items again in turn."""
    groups: dict[int, list] = {LANDSCAPE: [], PORTRAIT: []}
    for item in items:
        group = groups[key(item)]
        group.append(item)
        if len(group) == batch_size:
            yield list(group), batch_size
            group.clear()
    for group in (groups[LANDSCAPE], groups[PORTRAIT]):
        if group:
            yield [group[i % len(group)] for i in range(batch_size)], len(group)


def _group_of(example: dict) -> int:
    return orientation(example["height"], example["width"])


class TrainPlan:
    """The host half of one training batch: the JPEGs, the resize taps and the padded ground truth."""

    def __init__(self, examples: list[dict], flips, *, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE,
                 max_gt: int = 100, max_vertices: int = MAX_VERTICES, keep_image_id: bool = False):
        self.flips = np.asarray(flips, bool)
        sizes = [resized_size(e["height"], e["width"], min_size, max_size) for e in examples]
        group = _group_of(examples[0])
        self.jpegs = [e["jpeg"] for e in examples]
        self.geometry = ImageGeometry(self.jpegs, sizes, self.flips, padded_shape(group, min_size, max_size))
        targets = [train_targets(e, f, h, w, max_gt=max_gt, max_vertices=max_vertices)
                   for e, f, (h, w) in zip(examples, self.flips, sizes)]
        self.inputs = {"image_sizes": np.array(sizes, np.int32).reshape(-1, 2),
                       **{k: np.stack([t[k] for t in targets]) for k in ("gt_boxes", "gt_classes", "gt_polygons")}}
        if keep_image_id:
            self.inputs["image_id"] = np.array([e["image_id"] for e in examples], np.int64)

    def decode(self, decoder) -> tuple[dict, np.ndarray]:
        """(inputs, dummy labels): the images resized on the device (a JAX array), the rest NumPy."""
        canvas = decoder.canvas(self.jpegs, self.geometry)
        images = resize_and_pad(canvas, self.geometry.taps())
        return {"images": images, **self.inputs}, np.zeros(len(self.jpegs), np.float32)


def draw_flips(rng: np.random.Generator, real: int, batch_size: int) -> np.ndarray:
    """Flips with p 0.5 for a batch's real images; its repeats (a group's filled last batch) repeat their flips."""
    flips = rng.random(real) < 0.5
    return flips[np.arange(batch_size) % real]


def train_batches(paths: list[str], decoder, *, seed: int, epoch: int, rank: int, batch_size: int, num_batches: int,
                  shuffle_buffer: int = 1024, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE, max_gt: int = 100,
                  max_vertices: int = MAX_VERTICES, groups: tuple[int, int] | None = None, cycle_length: int = 10,
                  keep_image_id: bool = False, skip: int = 0, prefetch: int = 2) -> Iterator:
    """maskrcnn.train_dataset's batches without TensorFlow: num_batches (inputs, dummy labels) of one worker's data
    pass `epoch`, inputs {"images" uint8 [B, H, W, 3] (a JAX array), "image_sizes" int32 [B, 2], "gt_boxes" float32
    [B, max_gt, 4], "gt_classes" int32 [B, max_gt], "gt_polygons" float32 [B, max_gt, max_vertices, 5]} (+ "image_id"
    int64 [B] with keep_image_id), labels float32 [B] zeros. The pass repeats while num_batches asks for more.
    groups: count_groups(paths), checked to fit (None: counted here, one more read of the files, and not checked).
    skip: the first `skip` batches are planned (the order and flips stay the same) but not decoded."""
    if groups is None:
        groups = count_groups(paths)
    else:
        check_epoch_fits(groups, batch_size, num_batches, paths)
    if sum(groups) == 0:
        check_epoch_fits(groups, batch_size, num_batches, paths)   # no trainable image: DataError
    options = dict(min_size=min_size, max_size=max_size, max_gt=max_gt, max_vertices=max_vertices,
                   keep_image_id=keep_image_id)

    def plan():
        index = 0
        while True:
            examples = record_streams.epoch_stream(paths, seed=seed, epoch=epoch, num_samples=sum(groups),
                                                   shuffle_buffer=shuffle_buffer, cycle_length=cycle_length,
                                                   parse=_trainable_instances)
            for position, (chunk, real) in enumerate(_grouped(examples, batch_size, _group_of)):
                if index == num_batches:
                    return
                if index >= skip:
                    rng = np.random.default_rng([int(seed), int(epoch), int(rank), position, 0x3A5C])
                    yield TrainPlan(chunk, draw_flips(rng, real, batch_size), **options)
                index += 1

    def decode():
        for p in record_streams.prefetched(plan(), prefetch, "maskrcnn-input"):
            yield p.decode(decoder)

    return record_streams.prefetched(decode(), prefetch, "maskrcnn-input")


def eval_batches(paths: list[str], decoder, *, batch_size: int, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE,
                 cycle_length: int = 10, prefetch: int = 2) -> Iterator:
    """maskrcnn.eval_dataset's batches without TensorFlow: every record of `paths` once, in file order, grouped by
    orientation: dicts of images uint8 [B, H, W, 3] (a JAX array), image_sizes int32 [B, 2], image_id int64 [B],
    height, width int32 [B] (the original image's); a group's last batch filled with repeats under image_id -1."""
    examples = (ssd_jax.parse_detection(r) for r in record_streams.in_order(paths, cycle_length))

    def plan():
        for chunk, real in _grouped(examples, batch_size, _group_of):
            sizes = [resized_size(e["height"], e["width"], min_size, max_size) for e in chunk]
            jpegs = [e["jpeg"] for e in chunk]
            geometry = ImageGeometry(jpegs, sizes, np.zeros(batch_size, bool),
                                     padded_shape(_group_of(chunk[0]), min_size, max_size))
            ids = np.array([e["image_id"] for e in chunk], np.int64)
            info = {"image_sizes": np.array(sizes, np.int32),
                    "image_id": np.where(np.arange(batch_size) < real, ids, -1),
                    "height": np.array([e["height"] for e in chunk], np.int32),
                    "width": np.array([e["width"] for e in chunk], np.int32)}
            yield jpegs, geometry, info

    def decode():
        for jpegs, geometry, info in record_streams.prefetched(plan(), prefetch, "maskrcnn-eval"):
            canvas = decoder.canvas(jpegs, geometry)
            yield {"images": resize_and_pad(canvas, geometry.taps()), **info}

    return record_streams.prefetched(decode(), prefetch, "maskrcnn-eval")


__all__ = ["ImageGeometry", "TrainPlan", "axis_taps", "count_groups", "draw_flips", "eval_batches", "object_edges",
           "orientation", "parse_instances", "reference_boxes", "resize_and_pad", "resized_size", "train_batches",
           "train_targets", "trainable"]
