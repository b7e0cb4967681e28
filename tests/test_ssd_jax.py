"""SSD's JAX input path (inputs/ssd_jax.py) against the closed tf.data path (inputs/ssd.py) given the same draws:
the record parse, the crop choice, the pixel window, the jitter, the targets and whole batches; the epoch order;
evaluation batches; a run on JAX that never imports TensorFlow. The GPU decoder against the host one is in
tests/test_imagenet_gpu_decode.py (the same decoders)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from data_prep import coco, demo_coco
from mlperf_keras.inputs import (coco_records, image, jpeg_batches, record_reader, record_streams, records, ssd, ssd_jax,
                                 ssd_jax_augment)
from mlperf_keras.inputs.manifest import DataError, read_manifest, worker_files
from tests.test_box_pipeline import BLUE, RED, record, write

jax = pytest.importorskip("jax")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco_jax")
    demo_coco.write_raw(str(root / "raw"), num_train=24, num_val=7, seed=3)
    coco.prepare(str(root / "raw"), str(root / "out"), train_shards=2, val_shards=2, num_workers=0,
                 log=lambda _: None)
    data_dir = str(root / "out")
    manifest = read_manifest(data_dir, "ssd")
    return worker_files(data_dir, manifest, "train", 0, 1), worker_files(data_dir, manifest, "validation", 0, 1)


def _examples(paths):
    return [ssd_jax.parse_detection(r) for p in paths for r in record_reader.iter_records(p)]


def test_parse_and_count_match_tensorflows(prepared, tmp_path):
    train, _ = prepared
    ours = _examples(train)
    theirs = [coco_records.parse_detection(r) for r in records.record_dataset(train, cycle_length=1)]
    assert len(ours) == len(theirs) == 24
    for a, b in zip(ours, theirs):
        assert a["jpeg"] == b["jpeg"].numpy() and a["image_id"] == int(b["image_id"])
        np.testing.assert_array_equal(a["boxes"], b["boxes"].numpy())
        np.testing.assert_array_equal(a["labels"], b["labels"].numpy())
        np.testing.assert_array_equal(a["is_crowd"], b["is_crowd"].numpy())
    crowd = write(tmp_path / "crowd.tfrecord", [record(1, [(10, 10, 60, 60, RED)], crowd=[1]),
                                                record(2, [(10, 10, 60, 60, RED), (80, 80, 150, 150, BLUE)],
                                                       crowd=[1, 0]),
                                                record(3, [])])
    for skip in (False, True):
        assert ssd_jax.count_images([crowd], skip_crowd=skip) == coco_records.count_images([crowd], skip_crowd=skip)
    bad = write(tmp_path / "bad.tfrecord", [records.example({"image/encoded": records.bytes_feature(b"x")})])
    with pytest.raises(DataError, match="COCO detection example"):
        ssd_jax.count_images([bad])


def _random_boxes(rng, n):
    lt = rng.random((n, 2)) * 0.8
    return np.concatenate([lt, lt + 0.05 + rng.random((n, 2)) * 0.5], 1).clip(0, 1).astype(np.float32)


@pytest.mark.parametrize("max_samples", [1, 50])
def test_crop_choice_is_tensorflows_given_its_draws(max_samples):
    """choose_crop on ssd.crop_draws' numbers returns ssd.ssd_crop's window, kept boxes and mode, over 300 images
    of 1-4 boxes (at least five of the seven modes come up)."""
    rng = np.random.default_rng(0)
    modes_seen = set()
    for i in range(300):
        boxes = _random_boxes(rng, int(rng.integers(1, 5)))
        seed = tf.constant([7, i], tf.int64)
        window, keep, mode = (t.numpy() for t in ssd.ssd_crop(boxes, seed, max_samples))
        draws = [t.numpy() for t in ssd.crop_draws(seed, max_samples)]
        ours = ssd_jax.choose_crop(boxes, *draws)
        np.testing.assert_array_equal(ours[0], window)
        np.testing.assert_array_equal(ours[1], keep)
        assert ours[2] == mode
        modes_seen.add(int(mode))
        kept = ssd_jax.crop_boxes(boxes, np.arange(len(boxes)), window, keep)
        tf_kept = ssd.crop_boxes(tf.constant(boxes), tf.range(len(boxes)), tf.constant(window), tf.constant(keep))
        np.testing.assert_allclose(kept[0], tf_kept[0].numpy(), atol=1e-6)
        np.testing.assert_array_equal(kept[1], tf_kept[1].numpy())
        np.testing.assert_array_equal(ssd_jax.flip_boxes(kept[0]), ssd.flip_boxes(tf.constant(kept[0])).numpy())
    assert len(modes_seen) >= (5 if max_samples == 50 else 4), modes_seen


def test_batched_crop_choice_and_plan_boxes_are_the_per_image_ones():
    """choose_crops over a padded batch (1-9 boxes an image) picks each image's choose_crop window, boxes and mode,
    and TrainPlan's ground truth is each image's crop_boxes (flipped where the plan flips), in order, then zeros."""
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 10, 64)
    boxes = np.zeros((64, 16, 4), np.float32)
    valid = np.arange(16) < counts[:, None]
    for i, n in enumerate(counts):
        boxes[i, :n] = _random_boxes(rng, int(n))
    modes, uniforms = rng.integers(0, 7, (64, 50)), rng.random((64, 50, 2, 4), dtype=np.float32)
    windows, keep, chosen = ssd_jax.choose_crops(boxes, valid, modes, uniforms)
    for i, n in enumerate(counts):
        window, kept, mode = ssd_jax.choose_crop(boxes[i, :n], modes[i], uniforms[i])
        np.testing.assert_array_equal(windows[i], window)
        np.testing.assert_array_equal(keep[i], np.concatenate([kept, np.zeros(16 - n, bool)]))
        assert chosen[i] == mode
    assert len(set(chosen.tolist())) >= 4

    jpeg = tf.io.encode_jpeg(np.zeros((40, 60, 3), np.uint8)).numpy()
    examples = [{"jpeg": jpeg, "boxes": boxes[i, :n], "labels": np.arange(1, n + 1, dtype=np.int32)}
                for i, n in enumerate(counts)]
    plan = ssd_jax.TrainPlan(examples, np.random.default_rng(4), size=300, max_samples=1)
    draws = np.random.default_rng(4)
    for i, example in enumerate(examples):
        window, kept, _ = ssd_jax.choose_crop(example["boxes"], *ssd_jax.draw_crop(draws, 1))
        flip = draws.random() < 0.5
        ssd_jax.draw_jitter(draws)
        gt, labels = ssd_jax.crop_boxes(example["boxes"], example["labels"], window, kept)
        gt = ssd_jax.flip_boxes(gt) if flip else gt
        np.testing.assert_array_equal(plan.gt[i, :len(gt)], gt)
        np.testing.assert_array_equal(plan.gt_labels[i, :len(gt)], labels)
        assert plan.gt_valid[i].sum() == len(gt) and not plan.gt[i, len(gt):].any()
        np.testing.assert_array_equal(plan.geometry.windows[i], ssd_jax.pixel_window(window, 40, 60))


def test_pixel_window_is_decode_windows():
    """pixel_window's (y, x, h, w) is the slice ssd.decode_window takes (unfused: full decode, then the slice)."""
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(pixels, quality=100).numpy()
    full = tf.image.decode_jpeg(jpeg, channels=3, dct_method="INTEGER_ACCURATE").numpy()
    for _ in range(200):
        lt = rng.random(2) * 0.99
        window = np.concatenate([lt, lt + rng.random(2) * (1 - lt)]).astype(np.float32)
        y, x, h, w = ssd_jax.pixel_window(window, 37, 53)
        np.testing.assert_array_equal(full[y:y + h, x:x + w], ssd.decode_window(jpeg, window, fused=False).numpy())


def test_jitter_is_tensorflows_given_its_draws():
    """ssd_jax_augment.jitter (batched, JAX) against ssd.apply_jitter with ssd.jitter_draws' factors and order on float
    images in [0, 255], 16 images, every order position covered: float32 arithmetic in a different order (the hue
    kernel's), measured here at most 2e-3 of a level; allowed 0.02."""
    rng = np.random.default_rng(2)
    images = (rng.random((16, 20, 24, 3)) * 255).astype(np.float32)
    images[0, :5] = 128.0          # grey pixels: the hue kernel's v_max == v_min case
    images[1, :, :, 1] = images[1, :, :, 0]  # ties between channels
    factors, orders, expected = [], [], []
    for i in range(16):
        f, o = ssd.jitter_draws(tf.constant([3, i], tf.int64), **ssd.COLOR_JITTER)
        factors.append(f.numpy())
        orders.append(o.numpy())
        expected.append(ssd.apply_jitter(tf.constant(images[i]), f, o).numpy())
    ours = np.asarray(jax.jit(ssd_jax_augment.jitter)(images, np.stack(factors), np.stack(orders).astype(np.int32)))
    assert np.abs(ours - np.stack(expected)).max() < 0.02
    assert len({tuple(o) for o in orders}) > 8


def test_hue_shift_is_tf_image_adjust_hue():
    rng = np.random.default_rng(3)
    x = (rng.random((4, 9, 11, 3)) * 255).astype(np.float32)
    x[0, 0, 0] = (10, 10, 10)
    x[0, 0, 1] = (200, 10, 10)
    deltas = np.array([-0.05, 0.0, 0.03, 0.5], np.float32)
    ours = np.asarray(ssd_jax_augment.adjust_hue(x, deltas))
    theirs = np.stack([tf.image.adjust_hue(x[i], deltas[i]).numpy() for i in range(4)])
    assert np.abs(ours - theirs).max() < 1e-2


def test_targets_are_encode_targets_in_float32():
    """ssd_jax_augment.encode (batched, float32, padded ground truth) against ssd.encode_targets (float64): offsets within
    1e-4 where labels agree. Labels: measured on these 64 images, 7 images have one object (one has two) whose best
    default box is a near tie of two default boxes (IoUs 2e-8 apart: mirror-image boxes), which float32 and float64
    break differently, so the object's forced positive sits on the other box of the pair; allowed: the same labels
    per image as a multiset, at most 4 of 8,732 boxes changed."""
    rng = np.random.default_rng(4)
    gts = [_random_boxes(rng, int(rng.integers(1, 20))) for _ in range(64)]
    labels = [rng.integers(1, 81, len(g)).astype(np.int32) for g in gts]
    gts[0] = np.repeat(gts[0][:1], 3, axis=0)   # identical boxes: the last claimant wins
    labels[0] = np.array([5, 6, 7], np.int32)
    g = 32
    pad = lambda arrays, shape, dtype: np.stack([np.pad(a, [(0, g - len(a))] + [(0, 0)] * (a.ndim - 1))  # noqa: E731
                                                 for a in arrays]).astype(dtype)
    valid = np.stack([np.arange(g) < len(x) for x in gts])
    offsets, out_labels = (np.asarray(t) for t in jax.jit(ssd_jax_augment.encode)(
        pad(gts, (4,), np.float32), pad(labels, (), np.int32), valid))
    for i, (gt, lab) in enumerate(zip(gts, labels)):
        want_offsets, want_labels = (t.numpy() for t in ssd.encode_targets(gt, lab))
        same = out_labels[i] == want_labels
        assert (~same).sum() <= 4
        np.testing.assert_array_equal(np.sort(out_labels[i]), np.sort(want_labels))
        np.testing.assert_allclose(offsets[i][same], want_offsets[same], atol=1e-4)
    from mlperf_keras.inputs import default_boxes

    claimed = np.argmax(default_boxes.iou_matrix(gts[0][:1], default_boxes.to_ltrb(default_boxes.default_boxes())))
    assert out_labels[0][claimed] == 7   # three identical boxes claim one default box: the last one wins


def _tf_batch(plan, size=300):
    """The closed path's pixels and targets for a TrainPlan's own windows, flips, jitter draws and boxes."""
    images, targets = [], []
    for i, jpeg in enumerate(plan.jpegs):
        y, x, h, w = (int(v) for v in plan.geometry.windows[i])
        crop = tf.image.decode_jpeg(jpeg, channels=3, dct_method="INTEGER_ACCURATE")[y:y + h, x:x + w]
        flipped = plan.geometry.col_lo[i, 0] > plan.geometry.col_lo[i, -1]
        if flipped:
            crop = tf.image.flip_left_right(crop)
        pixels = ssd.apply_jitter(image.resize(crop, size, size), tf.constant(plan.factors[i]),
                                  tf.constant(plan.order[i]))
        images.append(image.to_uint8(pixels).numpy())
        valid = plan.gt_valid[i]
        targets.append([t.numpy() for t in ssd.encode_targets(plan.gt[i][valid], plan.gt_labels[i][valid])])
    return np.stack(images), targets


def test_host_batch_matches_the_tf_data_path_given_the_same_draws(prepared):
    """A TrainPlan decoded on the host (PIL) through the jitted resize + jitter + encode, against TF's decode
    (accurate DCT, as PIL's) + flip + resize + jitter + encode_targets on the same windows, flips and draws:
    pixels within 1 level but for 1 in 1,000 values (rounding of float32 sums in another order), labels the same
    multiset per image with at most 4 boxes moved (near-tied default boxes, see the test above), offsets within
    1e-4."""
    train, _ = prepared
    examples = [e for e in _examples(train) if len(e["labels"])][:12]
    plan = ssd_jax.TrainPlan(examples, np.random.default_rng(5), size=300, max_samples=1)
    assert plan.gt_valid.any(axis=1).all()
    canvas = jpeg_batches.HostDecoder(2).canvas(plan.jpegs, plan.geometry)
    images, (offsets, labels) = (np.asarray(t) if not isinstance(t, tuple) else tuple(map(np.asarray, t))
                                 for t in ssd_jax_augment.train_images_and_targets(
                                     canvas, plan.geometry.taps(), plan.factors, plan.order, plan.gt,
                                     plan.gt_labels, plan.gt_valid))
    want_images, want_targets = _tf_batch(plan)
    diff = np.abs(images.astype(int) - want_images.astype(int))
    assert images.shape == (12, 300, 300, 3) and images.dtype == np.uint8
    assert diff.max() <= 2 and np.mean(diff > 1) < 1e-3, (diff.max(), np.mean(diff > 1))
    for i, (want_offsets, want_labels) in enumerate(want_targets):
        same = labels[i] == want_labels
        assert (~same).sum() <= 4 and (want_labels > 0).any()
        np.testing.assert_array_equal(np.sort(labels[i]), np.sort(want_labels))
        np.testing.assert_allclose(offsets[i][same], want_offsets[same], atol=1e-4)


def test_train_batches_serve_every_image_once_per_epoch_with_synthetic_shapes(prepared):
    train, _ = prepared
    decoder = jpeg_batches.HostDecoder(2)
    ids = []
    for epoch in (0, 1):
        batches = list(ssd_jax.train_batches(train, decoder, seed=1, epoch=epoch, rank=0, batch_size=8,
                                             num_batches=3, shuffle_buffer=8))
        assert len(batches) == 3
        for images, (offsets, labels) in batches:
            assert images.shape == (8, 300, 300, 3) and images.dtype == np.uint8
            assert offsets.shape == (8, 8732, 4) and offsets.dtype == np.float32
            assert labels.shape == (8, 8732) and labels.dtype == np.int32 and (np.asarray(labels) > 0).any()
        ids.append(batches)
    first = next(iter(ssd_jax.train_batches(train, decoder, seed=1, epoch=0, rank=0, batch_size=8, num_batches=1,
                                            shuffle_buffer=8)))
    np.testing.assert_array_equal(np.asarray(first[0]), np.asarray(ids[0][0][0]))
    # planned in two worker processes, each taking every other batch: the same batches
    for (x, (o, lab)), (x2, (o2, lab2)) in zip(ids[1], ssd_jax.train_batches(
            train, decoder, seed=1, epoch=1, rank=0, batch_size=8, num_batches=3, shuffle_buffer=8,
            plan_workers=2), strict=True):
        for a, b in ((x, x2), (o, o2), (lab, lab2)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(ids[0][0][0]), np.asarray(ids[1][0][0]))
    # the order: every trainable record once per epoch
    trainable = [e["image_id"] for e in _examples(train) if len(e["labels"])]
    assert 12 < len(trainable) < 24 == ssd_jax.count_images(train) + 24 - len(trainable)
    stream = record_streams.epoch_stream(train, seed=1, epoch=0, num_samples=len(trainable), shuffle_buffer=8,
                                         parse=ssd_jax.trainable)
    assert sorted(e["image_id"] for e in stream) == sorted(trainable)


def test_eval_batches_are_the_tf_data_paths(prepared):
    _, val = prepared
    out = list(ssd_jax.eval_batches(val, jpeg_batches.HostDecoder(2), batch_size=3))
    theirs = list(ssd.ssd_eval_dataset(val, batch_size=3))
    assert len(out) == len(theirs)
    for (images, ids, heights, widths), (t_images, t_ids, t_heights, t_widths) in zip(out, theirs):
        np.testing.assert_array_equal(ids, t_ids.numpy())
        np.testing.assert_array_equal(heights, t_heights.numpy())
        np.testing.assert_array_equal(widths, t_widths.numpy())
        diff = np.abs(np.asarray(images).astype(int) - t_images.numpy().astype(int))
        assert diff.mean() < 1.5 and diff[np.asarray(ids) < 0].max(initial=0) == 0


@pytest.mark.slow
def test_ssd_trains_from_records_on_jax_without_tensorflow(tmp_path_factory, tmp_path):
    """input_pipeline=host: a short SSD run trains and evaluates on the JAX backend from data_prep.coco's records
    (record_reader, PIL, the jitted resize, jitter and matching; batches planned in two worker processes) and the
    process never imports TensorFlow."""
    from tests.conftest import mllog_events, run_on_jax_without_tensorflow

    root = tmp_path_factory.mktemp("coco_run")
    demo_coco.write_raw(str(root / "raw"), num_train=8, num_val=4, seed=5)
    coco.prepare(str(root / "raw"), str(root / "out"), train_shards=1, val_shards=1, num_workers=0,
                 log=lambda _: None)
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--model=ssd", "--backend=jax", f"--data_dir={root / 'out'}", f"--output_dir={tmp_path}",
                  "--seed=2", "--ruleset=0.7", "--max_epochs=1", "--batch_size=4", "--division=open",
                  "--backbone_weights=none",
                  "--hparams=width=8,eval_epochs=1,decay_epochs=1-2,shuffle_buffer=8,input_pipeline=host,"
                  "input_workers=2"],
        tmp_path)
    summary = json.loads(lines[-1])
    assert check == {"exit": 5, "tensorflow_imported": False}, lines[-5:]
    events = mllog_events(summary["log"])
    accuracy = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert len(accuracy) == 1 and 0.0 <= accuracy[0] <= 1.0
