"""The SSD box pipeline (inputs/ssd.py) and the COCO records it reads (inputs/coco_records.py): parsing, SSD crop,
flip, target encoding, train and eval datasets.

The records are written here in the COCO record format (records.example), with JPEGs whose objects are solid
coloured rectangles, so where the boxes say an object is can be checked against the pixels.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from mlperf_keras.config import ConfigError
from mlperf_keras.inputs import coco_records, default_boxes, records
from mlperf_keras.inputs import ssd as pipeline
from mlperf_keras.inputs.manifest import DataError

GREY, RED, BLUE, GREEN = (128, 128, 128), (255, 0, 0), (0, 0, 255), (0, 200, 0)
WIDTH, HEIGHT = 320, 240


def jpeg_of(rects, background=GREY, size=(WIDTH, HEIGHT)) -> bytes:
    """A JPEG (4:4:4, so colour edges stay sharp) of `background` with filled pixel rectangles [(l, t, r, b, rgb)]."""
    pixels = np.empty((size[1], size[0], 3), np.uint8)
    pixels[:] = background
    for left, top, right, bottom, rgb in rects:
        pixels[top:bottom, left:right] = rgb
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=95, subsampling=0)
    return buffer.getvalue()


def record(image_id, rects, labels=None, crowd=None, background=GREY) -> bytes:
    """A COCO record as data_prep.coco writes it: one object per rectangle, boxes normalised ltrb."""
    labels = labels if labels is not None else list(range(1, len(rects) + 1))
    crowd = crowd if crowd is not None else [0] * len(rects)
    norm = [(l / WIDTH, t / HEIGHT, r / WIDTH, b / HEIGHT) for l, t, r, b, _ in rects]
    features = {
        "image/encoded": records.bytes_feature(jpeg_of(rects, background)),
        "image/filename": records.bytes_feature(f"{image_id:012d}.jpg".encode()),
        "image/id": records.int64_feature(image_id),
        "image/height": records.int64_feature(HEIGHT),
        "image/width": records.int64_feature(WIDTH),
        "image/object/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=labels)),
        "image/object/is_crowd": tf.train.Feature(int64_list=tf.train.Int64List(value=crowd)),
        "image/object/area": records.float_feature([(r - l) * (b - t) for l, t, r, b, _ in rects]),
    }
    for i, key in enumerate(("xmin", "ymin", "xmax", "ymax")):
        features[f"image/object/bbox/{key}"] = records.float_feature([box[i] for box in norm])
    return records.example(features)


def write(path, serialized) -> str:
    with records.writer(str(path)) as w:
        for s in serialized:
            w.write(s)
    return str(path)


# Red (label 1) on the left and blue (label 2) on the right: a flip swaps them.
TWO_OBJECTS = [(40, 48, 136, 176, RED), (200, 64, 296, 144, BLUE)]


@pytest.fixture(scope="module")
def two_object_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("boxes")
    return [write(root / f"train-{i}.tfrecord", [record(10 * i + j, TWO_OBJECTS) for j in range(4)])
            for i in range(2)]


# ---- target encoding ----

def random_boxes(rng, n):
    left_top = rng.uniform(0, 0.9, (n, 2))
    return np.clip(np.concatenate([left_top, left_top + rng.uniform(0.005, 0.6, (n, 2))], 1), 0, 1).astype(np.float32)


def assert_encoder_matches_numpy(gt, labels):
    dboxes = default_boxes.default_boxes()
    with np.errstate(divide="ignore"):   # a zero-size box has log(0) = -inf offsets in both
        matched, want_labels = default_boxes.match(gt, labels, dboxes)
        want = default_boxes.encode(matched, dboxes)
    offsets, got_labels = pipeline.encode_targets(tf.constant(gt, tf.float32), tf.constant(labels, tf.int32))
    assert offsets.shape == (8732, 4) and offsets.dtype == tf.float32 and got_labels.dtype == tf.int32
    np.testing.assert_array_equal(got_labels.numpy(), want_labels)
    np.testing.assert_allclose(offsets.numpy(), want, rtol=1e-5, atol=1e-5)


def test_tf_encoder_matches_numpy_on_random_boxes():
    rng = np.random.default_rng(5)
    for n in (1, 2, 5, 13, 40):
        assert_encoder_matches_numpy(random_boxes(rng, n), rng.integers(1, 81, n))


def test_tf_encoder_matches_numpy_on_ties_zero_boxes_and_no_boxes():
    dboxes_ltrb = default_boxes.to_ltrb(default_boxes.default_boxes())
    # Two identical objects with different labels (every IoU tied: the first wins a default box, the last one the
    # box both claim), an object equal to a default box (IoU exactly 1), and one sitting between two default boxes.
    same = random_boxes(np.random.default_rng(1), 1)
    tied = np.concatenate([same, same, dboxes_ltrb[100:101], dboxes_ltrb[5000:5001]]).astype(np.float32)
    assert_encoder_matches_numpy(tied, np.array([3, 7, 9, 11]))
    # A zero-size box (IoU 0 with everything, it still claims default box 0) beside a real one.
    zero = np.array([[0.0, 0.0, 0.0, 0.0], [0.2, 0.2, 0.6, 0.7]], np.float32)
    assert_encoder_matches_numpy(zero, np.array([4, 5]))
    # No objects: everything background, offsets of the default boxes against themselves (zero up to rounding).
    offsets, labels = pipeline.encode_targets(tf.zeros([0, 4]), tf.zeros([0], tf.int32))
    assert not labels.numpy().any() and np.abs(offsets.numpy()).max() < 1e-5


# ---- parsing ----

def test_parse_detection_reads_the_record_format():
    serialized = record(42, TWO_OBJECTS, labels=[17, 80], crowd=[0, 1])
    ex = coco_records.parse_detection(tf.constant(serialized))
    assert ex["image_id"].numpy() == 42 and ex["height"].numpy() == HEIGHT and ex["width"].numpy() == WIDTH
    np.testing.assert_allclose(ex["boxes"].numpy(), [[40 / 320, 48 / 240, 136 / 320, 176 / 240],
                                                     [200 / 320, 64 / 240, 296 / 320, 144 / 240]], rtol=1e-6)
    assert ex["boxes"].dtype == tf.float32 and ex["labels"].dtype == tf.int32
    assert ex["labels"].numpy().tolist() == [17, 80] and ex["is_crowd"].numpy().tolist() == [False, True]
    assert tf.io.decode_jpeg(ex["jpeg"]).shape == (HEIGHT, WIDTH, 3)
    dropped = coco_records.drop_crowd(ex)
    assert dropped["labels"].numpy().tolist() == [17] and dropped["boxes"].shape == (1, 4)
    empty = coco_records.parse_detection(tf.constant(record(7, [])))
    assert empty["boxes"].shape == (0, 4) and not coco_records.has_objects(empty)


def test_parse_detection_rejects_inconsistent_object_lists():
    ex = tf.train.Example.FromString(record(1, TWO_OBJECTS))
    del ex.features.feature["image/object/bbox/ymax"].float_list.value[-1]
    with pytest.raises(tf.errors.InvalidArgumentError, match="bbox/ymax and class/label differ in length"):
        coco_records.parse_detection(tf.constant(ex.SerializeToString()))


# ---- SSD crop ----

def test_crop_respects_the_iou_mode_and_keeps_box_centres():
    # Every box must pass the IoU bound (the reference's .all()), so the boxes are large enough for IoU 0.3 modes.
    gt = np.array([[0.1, 0.15, 0.6, 0.7], [0.45, 0.3, 0.9, 0.85]], np.float32)
    centres = (gt[:, :2] + gt[:, 2:]) / 2
    crop = tf.function(lambda i: pipeline.ssd_crop(tf.constant(gt), tf.stack([tf.constant(9, tf.int64), i]),
                                                max_samples=50))
    modes = []
    for i in range(300):
        window, keep, mode = (t.numpy() for t in crop(tf.constant(i, tf.int64)))
        modes.append(int(mode))
        if mode == 0:
            assert window.tolist() == [0, 0, 1, 1] and keep.all()
            continue
        w, h = window[2] - window[0], window[3] - window[1]
        assert 0.3 <= w <= 1.0 and 0.3 <= h <= 1.0 and 0.5 <= w / h <= 2.0 and window.min() >= 0 and window.max() <= 1
        ious = default_boxes.iou_matrix(window[None], gt)[0]
        assert (ious > pipeline.CROP_MIN_IOU[mode] - 1e-6).all(), (mode, ious)
        inside = ((centres > window[:2]) & (centres < window[2:])).all(axis=1)
        assert keep.any() and np.array_equal(keep, inside)
    counts = np.bincount(modes, minlength=7)
    # Possible modes come out about 1/7 of the time each, or more: impossible ones (0.9 here) are drawn again.
    assert counts[[0, 1, 2, 6]].min() > 25 and counts.sum() == 300, counts


def test_crop_without_objects_or_rounds_keeps_the_whole_image():
    crop = tf.function(lambda gt, i, rounds: pipeline.ssd_crop(gt, tf.stack([tf.constant(2, tf.int64), i]),
                                                             max_samples=50 if rounds > 1 else 1, max_rounds=rounds))
    for i in range(20):
        window, keep, mode = crop(tf.zeros([0, 4]), tf.constant(i, tf.int64), 50)
        assert window.numpy().tolist() == [0, 0, 1, 1] and int(mode) == 0 and keep.shape == (0,)
    # max_rounds=1: a round whose single attempt fails ends in the whole image, like a chosen "whole image" mode.
    gt = tf.constant([[0.45, 0.45, 0.55, 0.55]])
    results = [crop(gt, tf.constant(i, tf.int64), 1) for i in range(60)]
    whole = [r for r in results if r[0].numpy().tolist() == [0, 0, 1, 1]]
    assert all(int(r[2]) == 0 for r in whole) and 60 / 7 < len(whole) < 60


def test_crop_boxes_clips_and_renormalises_and_flip_mirrors():
    gt = tf.constant([[0.1, 0.1, 0.5, 0.5], [0.6, 0.6, 0.7, 0.9]])
    out, labels = pipeline.crop_boxes(gt, tf.constant([1, 2]), tf.constant([0.2, 0.0, 0.8, 0.8]),
                                   tf.constant([True, False]))
    np.testing.assert_allclose(out.numpy(), [[0.0, 0.125, 0.5, 0.625]], atol=1e-6)
    assert labels.numpy().tolist() == [1]
    np.testing.assert_allclose(pipeline.flip_boxes(gt).numpy(), [[0.5, 0.1, 0.9, 0.5], [0.3, 0.6, 0.4, 0.9]], atol=1e-6)


def test_fused_and_unfused_window_decoding_agree():
    jpeg = tf.constant(jpeg_of(TWO_OBJECTS))
    for window in ([0, 0, 1, 1], [0.13, 0.27, 0.71, 0.94], [0.5, 0.0, 1.0, 0.33]):
        window = tf.constant(window, tf.float32)
        fused, plain = pipeline.decode_window(jpeg, window, True), pipeline.decode_window(jpeg, window, False)
        assert fused.shape == plain.shape
        assert np.abs(fused.numpy().astype(int) - plain.numpy()).max() <= 2   # same pixels up to IDCT rounding
    left, top, right, bottom = 0.13, 0.27, 0.71, 0.94
    assert fused.shape[:2] == (int(0.33 * HEIGHT) - 0, int(1.0 * WIDTH) - int(0.5 * WIDTH))
    assert pipeline.decode_window(jpeg, tf.constant([left, top, right, bottom]), True).shape[:2] == (
        int(bottom * HEIGHT) - int(top * HEIGHT), int(right * WIDTH) - int(left * WIDTH))


# ---- colour jitter ----

def test_color_jitter_follows_torchvision_factors():
    flat = tf.fill([8, 8, 3], 100.0)
    seeds = [tf.constant([1, i], tf.int64) for i in range(30)]
    # Brightness alone scales by a factor in [0.875, 1.125]; contrast, saturation and hue leave a flat grey alone.
    values = [pipeline.color_jitter(flat, s, 0.125, 0, 0, 0).numpy() for s in seeds]
    assert all(np.ptp(v) == 0 and 87.5 <= v[0, 0, 0] <= 112.5 for v in values)
    assert len({float(v[0, 0, 0]) for v in values}) > 20
    for s in seeds[:5]:
        np.testing.assert_allclose(pipeline.color_jitter(flat, s, 0, 0.5, 0.5, 0.05).numpy(), 100.0, atol=1e-3)
    # Contrast blends with the rounded mean grey; saturation with each pixel's grey: a colour image changes.
    pixels = tf.constant(np.random.default_rng(0).uniform(0, 255, (8, 8, 3)), tf.float32)
    out = pipeline.color_jitter(pixels, seeds[0]).numpy()
    assert out.min() >= 0 and out.max() <= 255 and np.abs(out - pixels.numpy()).max() > 1
    np.testing.assert_allclose(pipeline.color_jitter(pixels, seeds[0], 0, 0, 0, 0).numpy(), pixels.numpy(), atol=1e-3)


# ---- training dataset ----

def colour_box(image, rgb, threshold=25):
    """Normalised ltrb bounding box of the pixels of colour rgb (red or blue) in a jittered uint8 image, or None."""
    x = image.astype(int)
    channel = int(np.argmax(rgb))
    others = [c for c in range(3) if c != channel]
    mask = x[..., channel] - x[..., others].max(axis=-1) > threshold
    if mask.sum() < 20:
        return None
    rows, cols = np.nonzero(mask)
    size = image.shape[0]
    return np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]) / size


def test_train_boxes_decode_back_to_where_the_colours_are(two_object_files):
    dataset = pipeline.ssd_train_dataset(two_object_files, seed=3, epoch=0, rank=0, batch_size=8, num_batches=6,
                                      max_samples=50, shuffle_buffer=8)
    dboxes = default_boxes.default_boxes()
    checked, orientations = 0, []
    for images, (offsets, labels) in dataset:
        assert images.shape == (8, 300, 300, 3) and images.dtype == tf.uint8
        assert offsets.shape == (8, 8732, 4) and labels.shape == (8, 8732) and labels.dtype == tf.int32
        for img, off, lab in zip(images.numpy(), offsets.numpy(), labels.numpy()):
            assert set(np.unique(lab)) <= {0, 1, 2} and (lab > 0).any()
            lefts = {}
            for label, rgb in ((1, RED), (2, BLUE)):
                positive = lab == label
                if not positive.any():
                    continue
                decoded = default_boxes.decode(off[positive], dboxes[positive])
                np.testing.assert_allclose(decoded, np.repeat(decoded[:1], len(decoded), 0), atol=1e-4)
                where = colour_box(img, rgb)
                assert where is not None, "an object's box in an image without its colour"
                np.testing.assert_allclose(decoded[0], where, atol=0.025)
                checked += 1
                lefts[label] = decoded[0][0]
            if len(lefts) == 2:
                orientations.append(lefts[1] < lefts[2])     # red left of blue: not flipped
    assert checked > 40 and 3 <= sum(orientations) <= len(orientations) - 3   # both flip orientations seen


def batches_of(files, **overrides):
    args = dict(seed=1, epoch=0, rank=0, batch_size=4, num_batches=5, max_samples=1, shuffle_buffer=8)
    args.update(overrides)
    return [(x.numpy(), o.numpy(), y.numpy()) for x, (o, y) in pipeline.ssd_train_dataset(files, **args)]


def same(a, b):
    return all(np.array_equal(p, q) for x, y in zip(a, b) for p, q in zip(x, y))


def test_train_stream_is_deterministic_per_seed_epoch_and_rank(two_object_files):
    first = batches_of(two_object_files)
    assert len(first) == 5   # exactly num_batches: 20 images from 8 records (repeated)
    assert same(first, batches_of(two_object_files))
    for changed in ({"epoch": 1}, {"rank": 1}, {"seed": 2}):
        assert not same(first, batches_of(two_object_files, **changed)), changed


def test_train_drops_images_without_objects_and_optionally_crowd_ones(tmp_path):
    path = write(tmp_path / "mixed.tfrecord", [
        record(1, [(80, 60, 240, 180, RED)]),
        record(2, [], background=GREEN),                          # no object: never trained on
        record(3, [(0, 0, 320, 240, BLUE)], crowd=[1]),           # only a crowd object (a blue image)
        record(4, [], background=GREEN)])

    def colours(**overrides):
        found = set()
        for images, _, _ in batches_of([path], num_batches=3, **overrides):
            for img in images.astype(int):
                means = img.reshape(-1, 3).mean(axis=0)
                found.add("green" if means[1] > means[0] + 50 and means[1] > means[2] + 50 else
                          "blue" if means[2] > means[0] + 50 else "red")
        return found

    assert colours() == {"red", "blue"}                   # the reference keeps crowd objects
    assert colours(skip_crowd=True) == {"red"}
    assert coco_records.count_images([path]) == 2 and coco_records.count_images([path], skip_crowd=True) == 1
    assert coco_records.count_images([path], skip_empty=False) == 4
    nothing = write(tmp_path / "empty.tfrecord", [record(5, [])])   # files without any object: an error, not a hang
    with pytest.raises(DataError, match="no image with an object"):
        batches_of([nothing], num_batches=1, num_images=coco_records.count_images([nothing]))
    assert batches_of([nothing], num_batches=1) == []               # unchecked: an empty stream, never a hang


@pytest.fixture(scope="module")
def numbered_files(tmp_path_factory):
    """Five record files of unequal sizes (6 + 9 + 6 + 9 + 7 = 37 images with an object, ids 0..36) and three
    images without one (ids 100..102), tiny JPEGs: for counting which images an epoch serves."""
    root = tmp_path_factory.mktemp("numbered")
    sizes, files, next_id = (6, 9, 6, 9, 7), [], 0
    for k, n in enumerate(sizes):
        recs = [record(next_id + j, [(8, 8, 24, 24, RED)]) for j in range(n)]
        next_id += n
        if k < 3:
            recs.insert(2, record(100 + k, []))
        files.append(write(root / f"train-{k}.tfrecord", recs))
    return files, next_id


def epoch_ids(files, *, world, rank, global_batch, epoch=0, shuffle_buffer=4):
    """The image ids one worker's epoch serves: its files as records.worker_files splits them (every world-th from
    rank), ceil(images / global batch) steps of global_batch / world images, as workloads.ssd sizes the epoch."""
    paths = files[rank::world]
    total = sum(coco_records.count_images(files[r::world]) for r in range(world))
    steps = -(-total // global_batch)
    per_worker = global_batch // world
    pipeline.check_epoch_fits(coco_records.count_images(paths), per_worker, steps, paths)
    stream = pipeline.ssd_train_examples(paths, seed=5, epoch=epoch, num_samples=steps * per_worker,
                                      shuffle_buffer=shuffle_buffer)
    return [int(ex["image_id"]) for ex in stream]


@pytest.mark.parametrize("world", [1, 2])
def test_every_training_image_exactly_once_per_epoch(numbered_files, world):
    """Across the workers of one epoch every image with an object appears, and only the few samples that fill the
    last batches (what the reference's DistributedSampler pads with) repeat: 37 images at global batch 8 give 5 steps
    = 40 samples, 3 of them wrapped."""
    files, count = numbered_files
    orders = []
    for epoch in (0, 1):
        per_rank = [epoch_ids(files, world=world, rank=rank, global_batch=8, epoch=epoch) for rank in range(world)]
        ids = [i for own in per_rank for i in own]
        assert len(ids) == 40
        assert set(ids) == set(range(count))                      # everything, and never an image without objects
        assert len(ids) - len(set(ids)) == 3
        for rank, own in enumerate(per_rank):
            first_pass = count if world == 1 else (19, 18)[rank]   # rank 0 reads files 0, 2, 4; rank 1 files 1, 3
            assert len(set(own[:first_pass])) == first_pass        # each of the worker's images once, then the wrap
        orders.append(per_rank[0])
    assert orders[0] != orders[1]                                  # a new order every epoch


def test_an_unbalanced_worker_share_fails_instead_of_dropping_images(numbered_files):
    files, _ = numbered_files
    # A worker holding 30 images (files 0-3) in an epoch of 1 step x 16: 14 would be left out, so it refuses.
    with pytest.raises(DataError, match="more than its 1 x 16 samples per epoch"):
        pipeline.check_epoch_fits(coco_records.count_images(files[:4]), 16, 1, files[:4])
    with pytest.raises(DataError, match="30 trainable images, more than its 1 x 16"):
        batches_of(files[:4], batch_size=16, num_batches=1, num_images=30)


def test_max_samples_must_be_an_mlperf_value(two_object_files):
    with pytest.raises(ConfigError, match="max_samples=7"):
        pipeline.ssd_train_dataset(two_object_files, seed=1, epoch=0, rank=0, batch_size=2, num_batches=1,
                                max_samples=7, shuffle_buffer=2)


# ---- eval dataset ----

def test_eval_keeps_annotated_images_in_order_and_pads_the_last_batch(tmp_path):
    files = [write(tmp_path / "val-0.tfrecord", [record(11, TWO_OBJECTS), record(12, []),
                                                  record(13, [(0, 0, 160, 240, RED)], crowd=[1])]),
             write(tmp_path / "val-1.tfrecord", [record(21, TWO_OBJECTS), record(22, TWO_OBJECTS)])]
    batches = list(pipeline.ssd_eval_dataset(files, batch_size=3))
    assert len(batches) == 2
    for images, ids, heights, widths in batches:
        assert images.shape == (3, 300, 300, 3) and images.dtype == tf.uint8 and ids.dtype == tf.int64
    ids = np.concatenate([b[1].numpy() for b in batches])
    # Files interleave one record at a time (11, 21, 12, 22, 13); the empty image 12 is skipped, the crowd-only
    # image 13 is kept.
    assert ids.tolist() == [11, 21, 22, 13, -1, -1]
    heights = np.concatenate([b[2].numpy() for b in batches])
    widths = np.concatenate([b[3].numpy() for b in batches])
    assert heights.tolist() == [HEIGHT] * 4 + [0, 0] and widths.tolist() == [WIDTH] * 4 + [0, 0]
    last = batches[1][0].numpy()
    assert not last[1:].any()                             # padding images are zeros
    # No augmentation: the red object of image 11 is where its box says, in the 300x300 resize.
    np.testing.assert_allclose(colour_box(batches[0][0].numpy()[0], RED), [40 / 320, 48 / 240, 136 / 320, 176 / 240],
                               atol=0.01)
    every = np.concatenate([b[1].numpy() for b in pipeline.ssd_eval_dataset(files, batch_size=4, skip_empty=False)])
    assert every.tolist() == [11, 21, 12, 22, 13, -1, -1, -1]
    assert coco_records.count_images(files) == 4
