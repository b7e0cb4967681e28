"""The Mask R-CNN pipeline of the shared tf.data input layer: COCO instance records (data_prep.coco) -> the batches
layers.maskrcnn.MaskRCNN takes.

As the v0.6/v0.7 reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/; paths below are under it):
- training images: those with at least one annotation whose box is wider and taller than 1 pixel, crowd ones
  included (data/datasets/coco.py has_valid_annotation, remove_images_without_annotations); their crowd objects
  are then dropped (COCODataset.__getitem__ keeps iscrowd == 0);
- boxes in the reference's pixel convention: COCO [x, y, w, h] -> (x, y, x + w - 1, y + h - 1) (BoxList.convert,
  TO_REMOVE = 1), clipped to [0, W - 1] x [0, H - 1] and dropped unless x2 > x1 and y2 > y1 (clip_to_image);
- resize (data/transforms/transforms.py Resize.get_size): the short side to 800 unless the long side would pass 1333,
  then the short side to round(1333 x short / long); the other side int(size x long / short); boxes scaled by the
  two ratios (BoxList.resize); pixels by PIL's bilinear resize (Resize calls torchvision F.resize on a PIL image;
  resize_like_pil);
- training flip with p 0.5 (RandomHorizontalFlip): x1' = W - x2 - 1, x2' = W - x1 - 1 (BoxList.transpose) and the
  polygons x' = W - x - 1 (Polygons.transpose);
- evaluation: every val2017 image (the test dataset keeps images without annotations), resized alike, no flip;
- aspect-ratio grouping (data/samplers/grouped_batch_sampler.py, DATALOADER.ASPECT_RATIO_GROUPING): a batch holds
  landscape images (height < width) or portrait ones (height >= width), never both;
- pixels leave as uint8 RGB; layers.maskrcnn.CaffeInput makes them BGR minus Detectron's means inside the model.

Differences, on purpose:
- Static shapes (so XLA compiles two programs, not one per image size): every image is padded at the bottom and
  right to one shape per orientation, (800, 1344) landscape and (1344, 800) portrait (min/max size rounded up to
  the reference's SIZE_DIVISIBILITY 32; the reference pads each batch to its largest image). The padding is
  Detectron's mean pixel rounded to uint8, (123, 116, 103) RGB, which the model's normalisation turns into values
  within 0.5 of the reference's zero padding. Ground truth is padded to max_gt objects (class 0 = none); an image
  with more non-crowd objects than max_gt (default 100) stops the run with a message naming the hparam rather than
  dropping objects (COCO's maximum per image was not counted here).
- Masks travel as polygons: each object's polygon edges (object_edges, from the vertices data_prep.coco stores),
  scaled and flipped as the reference's Polygons.resize and transpose move the vertices, padded to max_vertices
  edges per object (the workload takes the manifest's max_object_vertices, rounded up to 32; 256 without one; an
  object with more stops the run). layers.maskrcnn_targets.mask_targets rasterises them on each positive
  proposal's 28x28 grid in the graph (layers/polygon_masks.py: the reference's crop and resize, then an even-odd
  test per polygon part at the cell centres, the parts' union, where the reference calls pycocotools;
  tests/test_polygon_masks.py measures 0.42% of cells differing on random polygons, 0.57% on objects of overlapping
  parts). 100 objects of 256 edges cost 512 KB per image (full-image masks: 107 MB).
- A pass (train_dataset): every trainable image of a worker once, in a seeded shuffled order (file order, then a
  shuffle buffer), grouped by orientation as the images come (tf.data group_by_window); a group's last, partial
  batch is filled with its own images again, where the reference's GroupedBatchSampler ends a pass with smaller
  batches. As the reference's IterationBasedBatchSampler, passes follow each other and an epoch (the iterations
  between two evaluations, epoch_size // global batch + 1) need not end with one (stream_position): a pass may be
  one batch longer or shorter than an epoch.
- An image whose objects are all crowds trains here with no object; the reference's Matcher raises ValueError("No
  ground-truth boxes available for one of the images during training") on it (modeling/matcher.py).
- "Wider and taller than 1 pixel" is checked on the stored boxes (clipped to the image) where the reference checks
  the annotation's [w, h] before clipping.

Randomness is stateless: each training image's flip depends on (seed, epoch, rank, position in the worker's
stream) only, as in inputs/image.py.
"""
from __future__ import annotations

import tensorflow as tf

from mlperf_keras.inputs import coco_records, image, records
# the TF-free shapes, constants and pass arithmetic, shared with inputs/maskrcnn_jax.py (re-exported here)
from mlperf_keras.inputs.maskrcnn_shapes import (LANDSCAPE, MAX_SIZE, MAX_VERTICES, MIN_SIZE, PAD_RGB,  # noqa: F401
                                                 PORTRAIT, check_epoch_fits, check_pass_fits, grouped_batches_needed,
                                                 padded_shape, stream_position)

_POLYGONS = {"image/object/polygon/parts": tf.io.VarLenFeature(tf.int64),
             "image/object/polygon/vertices": tf.io.VarLenFeature(tf.int64),
             "image/object/polygon/xy": tf.io.VarLenFeature(tf.float32)}


def orientation(height, width):
    """LANDSCAPE (height < width) or PORTRAIT (height >= width), int32."""
    return tf.cast(height >= width, tf.int32)


def resized_size(height, width, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE):
    """Resize.get_size in float64 (Python's arithmetic): (new height, new width) int32."""
    h, w = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    short, long = tf.minimum(h, w), tf.maximum(h, w)
    # Python's round() is half-to-even, as tf.round
    size = tf.where(long / short * min_size > max_size, tf.round(max_size * short / long), float(min_size))
    unchanged = tf.logical_or(tf.logical_and(w <= h, tf.equal(w, size)), tf.logical_and(h <= w, tf.equal(h, size)))
    new_h = tf.where(w < h, tf.floor(size * h / w), size)
    new_w = tf.where(w < h, size, tf.floor(size * w / h))
    return (tf.cast(tf.where(unchanged, h, new_h), tf.int32), tf.cast(tf.where(unchanged, w, new_w), tf.int32))


def reference_boxes(normalized, height, width):
    """Stored ltrb boxes (normalised, [n, 4]) -> the reference's pixel boxes (x1, y1, x2, y2 inclusive, clipped) and
    which of them are not empty (x2 > x1 and y2 > y1)."""
    w, h = tf.cast(width, tf.float32), tf.cast(height, tf.float32)
    x1, y1, x2, y2 = tf.unstack(tf.reshape(normalized, [-1, 4]), axis=1)
    x1, x2 = tf.clip_by_value(x1 * w, 0.0, w - 1), tf.clip_by_value(x2 * w - 1, 0.0, w - 1)
    y1, y2 = tf.clip_by_value(y1 * h, 0.0, h - 1), tf.clip_by_value(y2 * h - 1, 0.0, h - 1)
    return tf.stack([x1, y1, x2, y2], axis=1), tf.logical_and(x2 > x1, y2 > y1)


def object_edges(parts, vertices, xy, max_vertices: int):
    """Each object's polygon edges, padded: parts (polygons per object, [n]), vertices (vertices per polygon), xy
    (their x, y pairs, [V, 2]) -> float32 [n, max_vertices, 5] rows (x0, y0, x1, y1, part), each polygon's last
    vertex joined to its first, part its number within the object, zero rows after an object's edges
    (layers.polygon_masks reads them)."""
    parts, vertices = tf.cast(parts, tf.int64), tf.cast(vertices, tf.int64)
    xy = tf.reshape(tf.cast(xy, tf.float32), [-1, 2])
    polygon = tf.repeat(tf.range(tf.size(vertices, out_type=tf.int64)), vertices)       # [V]: each vertex's polygon
    first = tf.gather(tf.cumsum(vertices, exclusive=True), polygon)
    k = tf.range(tf.size(polygon, out_type=tf.int64))
    following = tf.where(k + 1 == first + tf.gather(vertices, polygon), first, k + 1)
    owner_of_polygon = tf.repeat(tf.range(tf.size(parts, out_type=tf.int64)), parts)
    part = tf.range(tf.size(vertices, out_type=tf.int64)) - tf.gather(tf.cumsum(parts, exclusive=True),
                                                                     owner_of_polygon)
    edges = tf.concat([xy, tf.gather(xy, following), tf.cast(tf.gather(part, polygon), tf.float32)[:, None]], axis=1)
    owner = tf.gather(owner_of_polygon, polygon)
    ragged = tf.RaggedTensor.from_value_rowids(edges, owner, nrows=tf.size(parts, out_type=tf.int64))
    check = tf.debugging.assert_less_equal(
        tf.reduce_max(tf.concat([ragged.row_lengths(), [0]], 0)), tf.cast(max_vertices, tf.int64),
        message=f"an object has more polygon vertices than max_vertices={max_vertices} (the workload takes the "
                f"manifest's max_object_vertices: is the manifest the one data_prep.coco wrote with these records?)")
    with tf.control_dependencies([check]):
        return tf.ensure_shape(ragged.to_tensor(0.0, shape=[None, max_vertices, 5]), [None, max_vertices, 5])


def parse_instances(serialized) -> dict:
    """coco_records.parse_detection's dict plus the objects' polygons (data_prep.coco): "polygon_parts" int64 [n],
    "polygon_vertices" int64 [P], "polygon_xy" float32 [V, 2] (pixels of the original image)."""
    example = coco_records.parse_detection(serialized)
    ex = records.parse(serialized, _POLYGONS)
    parts, vertices = ex["image/object/polygon/parts"].values, ex["image/object/polygon/vertices"].values
    xy = ex["image/object/polygon/xy"].values
    checks = [tf.debugging.assert_equal(tf.size(parts), tf.size(example["labels"]),
                                        message="COCO record: polygon/parts and class/label differ in length"),
              tf.debugging.assert_equal(tf.reduce_sum(parts), tf.size(vertices, out_type=tf.int64),
                                        message="COCO record: polygon/parts and polygon/vertices disagree"),
              tf.debugging.assert_equal(2 * tf.reduce_sum(vertices), tf.size(xy, out_type=tf.int64),
                                        message="COCO record: polygon/vertices and polygon/xy disagree")]
    with tf.control_dependencies(checks):
        xy = tf.reshape(xy, [-1, 2])
    return {**example, "polygon_parts": parts, "polygon_vertices": vertices, "polygon_xy": xy}


def trainable(example) -> tf.Tensor:
    """has_valid_annotation: some object (crowd included) wider and taller than 1 pixel."""
    b = example["boxes"]
    w = (b[:, 2] - b[:, 0]) * tf.cast(example["width"], tf.float32)
    h = (b[:, 3] - b[:, 1]) * tf.cast(example["height"], tf.float32)
    return tf.reduce_any(tf.logical_and(w > 1.0, h > 1.0))


def _pad_image(pixels, group, min_size, max_size):
    landscape, portrait = padded_shape(LANDSCAPE, min_size, max_size), padded_shape(PORTRAIT, min_size, max_size)
    target = tf.where(tf.equal(group, PORTRAIT), tf.constant(portrait), tf.constant(landscape))
    shape = tf.shape(pixels)
    paddings = [[0, target[0] - shape[0]], [0, target[1] - shape[1]]]
    return tf.stack([tf.pad(pixels[..., c], paddings, constant_values=PAD_RGB[c]) for c in range(3)], axis=-1)


def resize_like_pil(pixels, height, width):
    """PIL's Image.resize(BILINEAR), which the reference's Resize calls (torchvision F.resize of a PIL image):
    half-pixel centres, and when shrinking a triangle filter widened by the scale. tf.image.resize's bilinear
    kernel does both (antialias=True); TF1's legacy resize (inputs.image.resize) samples at i x in / out and puts
    the content about 0.33 px up and left of the scaled boxes at COCO's 640 -> 1066. The antialias kernel costs
    about twice the plain one and equals it when enlarging (every COCO image: none is over 640 px), so it runs only
    when a side shrinks. float32 out."""
    shape = tf.shape(pixels)
    shrinks = tf.logical_or(height < shape[0], width < shape[1])
    size = tf.stack([height, width])
    return tf.cond(shrinks, lambda: tf.image.resize(pixels, size, method="bilinear", antialias=True),
                   lambda: tf.image.resize(pixels, size, method="bilinear"))


def _decode_resized(example, min_size, max_size):
    new_h, new_w = resized_size(example["height"], example["width"], min_size, max_size)
    jpeg = tf.image.decode_jpeg(example["jpeg"], channels=3, dct_method=image.ACCURATE_DCT)
    pixels = image.to_uint8(resize_like_pil(jpeg, new_h, new_w))
    return pixels, new_h, new_w


def train_example(example, flip, *, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE, max_gt: int = 100,
                  max_vertices: int = MAX_VERTICES) -> dict:
    """One parsed training image (parse_instances) -> the model's inputs for it, padded: images uint8 [H, W, 3],
    image_sizes int32 [2] (resized height, width), gt_boxes float32 [max_gt, 4] (pixels of the resized image),
    gt_classes int32 [max_gt] (0 pads), gt_polygons float32 [max_gt, max_vertices, 5] (each object's polygon edges
    in pixels of the resized, flipped image: object_edges), group int32 (orientation)."""
    keep = tf.logical_not(example["is_crowd"])
    height, width = example["height"], example["width"]
    pixel_boxes, nonempty = reference_boxes(tf.boolean_mask(example["boxes"], keep), height, width)
    labels = tf.boolean_mask(tf.boolean_mask(example["labels"], keep), nonempty)
    edges = object_edges(example["polygon_parts"], example["polygon_vertices"], example["polygon_xy"], max_vertices)
    edges = tf.boolean_mask(tf.boolean_mask(edges, keep), nonempty)
    pixel_boxes = tf.boolean_mask(pixel_boxes, nonempty)
    pixels, new_h, new_w = _decode_resized(example, min_size, max_size)
    ratio_w = tf.cast(new_w, tf.float32) / tf.cast(width, tf.float32)
    ratio_h = tf.cast(new_h, tf.float32) / tf.cast(height, tf.float32)
    scaled = pixel_boxes * tf.stack([ratio_w, ratio_h, ratio_w, ratio_h])
    edges = edges * tf.stack([ratio_w, ratio_h, ratio_w, ratio_h, 1.0])            # Polygons.resize
    w = tf.cast(new_w, tf.float32)
    pixels = tf.cond(flip, lambda: tf.reverse(pixels, axis=[1]), lambda: pixels)
    scaled = tf.cond(flip, lambda: tf.stack([w - scaled[:, 2] - 1, scaled[:, 1], w - scaled[:, 0] - 1, scaled[:, 3]],
                                            axis=1), lambda: scaled)
    # Polygons.transpose: x' = W - x - 1 (padding rows stay horizontal, so they still never cross)
    edges = tf.cond(flip, lambda: tf.stack([w - edges[..., 0] - 1, edges[..., 1], w - edges[..., 2] - 1,
                                            edges[..., 3], edges[..., 4]], axis=-1), lambda: edges)
    n = tf.size(labels)
    check = tf.debugging.assert_less_equal(n, max_gt, message=f"an image has more objects than max_gt={max_gt}; "
                                                              f"raise it with --hparams=max_gt=N")
    with tf.control_dependencies([check]):
        missing = max_gt - n
    group = orientation(height, width)
    return {"images": _pad_image(pixels, group, min_size, max_size),
            "image_sizes": tf.stack([new_h, new_w]),
            "gt_boxes": tf.ensure_shape(tf.pad(scaled, [[0, missing], [0, 0]]), [max_gt, 4]),
            "gt_classes": tf.ensure_shape(tf.pad(labels, [[0, missing]]), [max_gt]),
            "gt_polygons": tf.ensure_shape(tf.pad(edges, [[0, missing], [0, 0], [0, 0]]), [max_gt, max_vertices, 5]),
            "group": group}


def _grouped_batches(dataset, batch_size: int, filled=None):
    """Batches of one orientation each, as the elements come (group_by_window); a group's last, partial batch is
    filled to batch_size with its own elements again; filled(batch, real) may mark the repeats."""
    dataset = dataset.group_by_window(key_func=lambda x: tf.cast(x["group"], tf.int64),
                                      reduce_func=lambda key, window: window.batch(batch_size),
                                      window_size=batch_size)

    def fill(batch):
        n = tf.shape(batch["group"])[0]
        index = tf.range(batch_size) % n
        out = tf.nest.map_structure(lambda t: tf.gather(t, index), batch)
        return filled(out, tf.range(batch_size) < n) if filled else out

    return dataset.map(fill, num_parallel_calls=records.AUTOTUNE, deterministic=True)


def count_groups(paths: list[str]) -> tuple[int, int]:
    """(landscape, portrait) trainable images (`trainable`) in `paths`; one read of the files."""
    features = {k: coco_records.DETECTION_FEATURES[k] for k in ("image/height", "image/width", "image/object/bbox/xmin",
                                                           "image/object/bbox/ymin", "image/object/bbox/xmax",
                                                           "image/object/bbox/ymax")}

    def group(serialized):
        ex = records.parse(serialized, features)
        b = tf.stack([ex[f"image/object/bbox/{k}"].values for k in ("xmin", "ymin", "xmax", "ymax")], axis=1)
        example = {"boxes": tf.reshape(b, [-1, 4]), "height": ex["image/height"], "width": ex["image/width"]}
        return tf.where(trainable(example), orientation(ex["image/height"], ex["image/width"]), -1)

    groups = records.record_dataset(paths).map(group, num_parallel_calls=records.AUTOTUNE)
    counts = groups.reduce(tf.zeros([2], tf.int64),
                           lambda total, g: total + tf.one_hot(g, 2, dtype=tf.int64))  # -1: a zero row
    return int(counts[0]), int(counts[1])


def train_dataset(paths: list[str], *, seed: int, epoch: int, rank: int, batch_size: int, num_batches: int,
                  shuffle_buffer: int = 1024, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE, max_gt: int = 100,
                  max_vertices: int = MAX_VERTICES, groups: tuple[int, int] | None = None, cycle_length: int = 10,
                  threads: int | None = None, keep_image_id: bool = False) -> tf.data.Dataset:
    """Exactly num_batches (inputs, dummy labels) batches of one worker for one epoch; inputs as train_example's
    dict without "group", batched; every trainable image of `paths` at least once (see the module docstring).
    groups: count_groups(paths), checked to fit (None skips the check: a benchmark timing part of an epoch).
    keep_image_id: the inputs also carry "image_id" (int64 [B]), for checks of the epoch's order."""
    if groups is not None:
        check_epoch_fits(groups, batch_size, num_batches, paths)
    e_seed = image.epoch_seed(seed, epoch)
    dataset = records.record_dataset(paths, shuffle_seed=e_seed, cycle_length=cycle_length)
    dataset = dataset.map(parse_instances, num_parallel_calls=records.AUTOTUNE, deterministic=True).filter(trainable)
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=e_seed, reshuffle_each_iteration=False)
    stream = tf.constant(int(rank) << 40, tf.int64)

    def preprocess(index, example):
        flip = tf.random.stateless_uniform([], tf.stack([tf.constant(e_seed, tf.int64), stream + index])) < 0.5
        out = train_example(example, flip, min_size=min_size, max_size=max_size, max_gt=max_gt,
                            max_vertices=max_vertices)
        return {**out, "image_id": example["image_id"]} if keep_image_id else out

    dataset = dataset.enumerate().map(preprocess, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    dataset = _grouped_batches(dataset, batch_size).repeat().take(num_batches)

    def split(batch):
        inputs = {k: v for k, v in batch.items() if k != "group"}
        return inputs, tf.zeros([batch_size], tf.float32)

    dataset = dataset.map(split).prefetch(records.AUTOTUNE)
    return image.with_threads(dataset, threads)


def eval_dataset(paths: list[str], *, batch_size: int, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE,
                 cycle_length: int = 10, threads: int | None = None) -> tf.data.Dataset:
    """Every record of `paths` once, in batches of one orientation: dicts of images uint8 [B, H, W, 3], image_sizes
    int32 [B, 2], image_id int64 [B], height, width int32 [B] (the original image's). A group's last batch is filled
    with repeats of its images under image_id -1."""
    @tf.autograph.experimental.do_not_convert
    def preprocess(serialized):
        example = coco_records.parse_detection(serialized)
        pixels, new_h, new_w = _decode_resized(example, min_size, max_size)
        group = orientation(example["height"], example["width"])
        return {"images": _pad_image(pixels, group, min_size, max_size), "image_sizes": tf.stack([new_h, new_w]),
                "image_id": example["image_id"], "height": example["height"], "width": example["width"],
                "group": group}

    def mark(batch, real):
        return {**{k: v for k, v in batch.items() if k != "group"},
                "image_id": tf.where(real, batch["image_id"], tf.constant(-1, tf.int64))}

    dataset = records.record_dataset(paths, cycle_length=cycle_length)
    dataset = dataset.map(preprocess, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    dataset = _grouped_batches(dataset, batch_size, filled=mark).prefetch(records.AUTOTUNE)
    return image.with_threads(dataset, threads)


__all__ = ["MAX_VERTICES", "PAD_RGB", "object_edges",
           "check_epoch_fits", "check_pass_fits", "count_groups", "eval_dataset", "grouped_batches_needed",
           "orientation", "parse_instances", "reference_boxes", "resize_like_pil", "resized_size",
           "stream_position", "train_dataset", "train_example", "trainable"]
