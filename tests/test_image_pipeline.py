"""The shared image input layer: per-worker file split, deterministic order and augmentation, eval crop, padding."""
from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from mlperf_keras.inputs import image, records
from mlperf_keras.inputs.manifest import DataError, read_manifest
from tests.conftest import prepare_imagenet


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = prepare_imagenet(tmp_path_factory.mktemp("pipeline"), train_shards=6, val_shards=3, num_classes=3,
                           train_per_class=10, val_images=13, size=(56, 40), oddities=False, seed=11)
    return out, read_manifest(out, "resnet")


def filenames(paths):
    features = {"image/filename": tf.io.FixedLenFeature([], tf.string)}
    return [records.parse(r, features)["image/filename"].numpy().decode() for r in records.record_dataset(paths)]


def test_files_are_split_by_worker_before_reading(prepared):
    data_dir, manifest = prepared
    parts = [records.worker_files(data_dir, manifest, "train", rank, 3) for rank in range(3)]
    assert [len(p) for p in parts] == [2, 2, 2]
    names = [set(filenames(p)) for p in parts]
    assert not (names[0] & names[1]) and not (names[1] & names[2]) and not (names[0] & names[2])
    assert sum(len(n) for n in names) == 30
    assert [records.worker_rows(manifest, "train", rank, 3) for rank in range(3)] == [len(n) for n in names]
    with pytest.raises(DataError, match="6 train files cannot be shared by 7 workers"):
        records.worker_files(data_dir, manifest, "train", 0, 7)


def train_batches(paths, **overrides):
    args = dict(seed=1, epoch=0, rank=0, batch_size=4, num_batches=9, image_size=24, shuffle_buffer=16)
    args.update(overrides)
    return [(x.numpy(), y.numpy()) for x, y in image.classification_train_dataset(paths, **args)]


def test_train_stream_is_deterministic_per_seed_and_epoch(prepared):
    data_dir, manifest = prepared
    paths = records.worker_files(data_dir, manifest, "train", 0, 1)
    first = train_batches(paths)
    assert len(first) == 9  # exactly num_batches, more than one pass over the 30 images (wraps around)
    images, labels = first[0]
    assert images.dtype == np.uint8 and images.shape == (4, 24, 24, 3) and labels.dtype == np.int32
    again = train_batches(paths)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, again))
    for changed in ({"epoch": 1}, {"seed": 2}):
        other = train_batches(paths, **changed)
        assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first, other)), changed
    offset = train_batches(paths, label_offset=1)
    assert all(np.array_equal(a[1] + 1, b[1]) for a, b in zip(first, offset))


@pytest.mark.parametrize("world", [1, 2])
def test_every_training_image_exactly_once_per_epoch(prepared, world):
    """30 images at global batch 8: 4 steps = 32 samples per epoch across the workers; each image comes once in its
    worker's first pass, and only the 2 samples that fill the last batches (DistributedSampler's padding) repeat."""
    data_dir, manifest = prepared
    names, orders = [], []
    for epoch in (0, 1):
        per_rank = []
        for rank in range(world):
            paths = records.worker_files(data_dir, manifest, "train", rank, world)
            rows = records.worker_rows(manifest, "train", rank, world)
            image.check_epoch_fits(rows, 8 // world, 4)
            stream = image.train_records(paths, seed=3, epoch=epoch, num_samples=4 * 8 // world, shuffle_buffer=4)
            features = {"image/filename": tf.io.FixedLenFeature([], tf.string)}
            own = [records.parse(r, features)["image/filename"].numpy().decode() for r in stream]
            assert len(set(own[:rows])) == rows                       # the worker's images once, then the wrap
            per_rank.append(own)
        names = [n for own in per_rank for n in own]
        assert len(names) == 32 and len(set(names)) == 30              # every image of the epoch, 2 repeats
        orders.append(per_rank[0])
    assert orders[0] != orders[1]
    with pytest.raises(DataError, match="hold 30 training images, more than its 3 x 8 samples"):
        train_batches(records.worker_files(data_dir, manifest, "train", 0, 1), batch_size=8, num_batches=3,
                      num_images=30)


def test_random_crop_covers_the_reference_range_and_flips(prepared):
    jpeg = Image.new("RGB", (80, 60))
    pixels = np.zeros((60, 80, 3), np.uint8)
    pixels[:, :40] = (255, 0, 0)  # left half red, right half blue: a flip swaps the sides
    pixels[:, 40:] = (0, 0, 255)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=95)
    jpeg = tf.constant(buffer.getvalue())
    left_red = []
    for i in range(40):
        out = image.random_crop_flip_resize(jpeg, tf.constant([3, i], tf.int64), 16).numpy()
        assert out.shape == (16, 16, 3) and out.dtype == np.uint8
        left, right = out[:, :2].astype(int), out[:, -2:].astype(int)
        if left[..., 0].mean() > 128 and right[..., 2].mean() > 128:
            left_red.append(True)
        elif left[..., 2].mean() > 128 and right[..., 0].mean() > 128:
            left_red.append(False)
    assert 5 < sum(left_red) < len(left_red) - 5  # both orientations occur
    again = image.random_crop_flip_resize(jpeg, tf.constant([3, 0], tf.int64), 16).numpy()
    assert np.array_equal(again, image.random_crop_flip_resize(jpeg, tf.constant([3, 0], tf.int64), 16).numpy())


def test_eval_is_shorter_side_resize_and_center_crop(prepared):
    rng = np.random.default_rng(0)
    pixels = np.kron(rng.integers(0, 255, (15, 20, 3)), np.ones((4, 4, 1))).astype(np.uint8)  # 60x80, smooth blocks
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=100, subsampling=0)
    out = image.center_crop_resize(tf.constant(buffer.getvalue()), 24, 30).numpy()
    # Shorter side 60 -> 30 (80 -> 40); the reference's bilinear convention (TF1, align_corners=False) maps output
    # pixel i to input 2i, so a 2x reduction samples every other pixel; then the central 24x24 (rows 3..27,
    # columns 8..32 of the 30x40 image) = input rows 6, 8, ..., 52 and columns 16, 18, ..., 62.
    decoded = tf.io.decode_jpeg(buffer.getvalue()).numpy()
    assert out.shape == (24, 24, 3) and np.array_equal(out, decoded[6:54:2, 16:64:2])


def test_eval_reads_every_image_once_in_padded_batches(prepared):
    data_dir, manifest = prepared
    seen = []
    for rank in range(2):
        paths = records.worker_files(data_dir, manifest, "validation", rank, 2)
        batches = list(image.classification_eval_dataset(paths, batch_size=4, image_size=24, resize_min=28))
        assert all(x.shape == (4, 24, 24, 3) and x.dtype == tf.uint8 for x, _ in batches)
        labels = np.concatenate([y.numpy() for _, y in batches])
        valid = labels[labels >= 0]
        assert np.all(labels[len(valid):] == -1)  # padding only at the end
        seen.append(len(valid))
    assert sum(seen) == 13 == manifest["counts"]["val_images"]
