"""The Mask R-CNN input pipeline (inputs/maskrcnn.py) on data_prep.coco output of generated COCO data: the
reference's resize, box convention and flip, box-local masks against pycocotools, orientation groups of static
shapes, every image once per epoch."""
from __future__ import annotations

import json
import os

import numpy as np
import pycocotools.mask as mask_util
import pytest

from data_prep import coco, demo_coco
from mlperf_keras.inputs import maskrcnn as pipeline
from mlperf_keras.inputs import maskrcnn_shapes, records
from mlperf_keras.inputs.manifest import DataError, read_manifest

MIN, MAX = 64, 112      # a short side of 64, long sides up to 112: padded to (64, 128) / (128, 64)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("maskrcnn_data")
    demo_coco.write_raw(str(root / "raw"), num_train=14, num_val=5, size=((96, 170), (96, 170)), seed=4)
    coco.prepare(str(root / "raw"), str(root / "out"), train_shards=2, val_shards=2, num_workers=0,
                 log=lambda _: None)
    return str(root / "raw"), str(root / "out")


def reference_get_size(w, h, min_size=800, max_size=1333):
    """transforms.py Resize.get_size (mlcommons/training 0badcd17 object_detection/pytorch), verbatim in Python."""
    size = min_size
    min_original_size, max_original_size = float(min((w, h))), float(max((w, h)))
    if max_original_size / min_original_size * size > max_size:
        size = int(round(max_size * min_original_size / max_original_size))
    if (w <= h and w == size) or (h <= w and h == size):
        return (h, w)
    if w < h:
        return (int(size * h / w), size)
    return (size, int(size * w / h))


def test_resize_is_the_references_get_size_and_fits_the_padded_shapes():
    rng = np.random.default_rng(0)
    sizes = [(640, 480), (480, 640), (800, 800), (1333, 800), (500, 375), (427, 640), (640, 200), (200, 640),
             (801, 799)] + [tuple(int(v) for v in rng.integers(50, 1500, 2)) for _ in range(40)]
    for w, h in sizes:
        got = tuple(int(v) for v in pipeline.resized_size(h, w))
        assert got == reference_get_size(w, h), (w, h)
        group = maskrcnn_shapes.LANDSCAPE if h < w else maskrcnn_shapes.PORTRAIT
        bound = maskrcnn_shapes.padded_shape(group)
        assert got[0] <= bound[0] and got[1] <= bound[1], (w, h, got, bound)
    assert maskrcnn_shapes.padded_shape(maskrcnn_shapes.LANDSCAPE) == (800, 1344)
    assert maskrcnn_shapes.padded_shape(maskrcnn_shapes.PORTRAIT) == (1344, 800)


def test_box_masks_rasterise_each_polygon_over_its_own_box():
    square = json.dumps([[10, 20, 30, 20, 30, 40, 10, 40]]).encode()        # fills the box (10, 20)-(30, 40)
    left_half = json.dumps([[0, 0, 20, 0, 20, 40, 0, 40]]).encode()          # the left half of (0, 0)-(40, 40)
    full = np.zeros((50, 60), np.uint8)
    full[5:15, 30:50] = 1
    rle = mask_util.encode(np.asfortranarray(full))
    rle["counts"] = rle["counts"].decode()
    masks = pipeline.box_masks([square, left_half, json.dumps(rle).encode()],
                               np.array([[10, 20, 30, 40], [0, 0, 40, 40], [30, 5, 50, 15]], np.float32), 50, 60,
                               resolution=16)
    assert masks.shape == (3, 16, 16) and masks.dtype == np.uint8
    assert masks[0].all()
    np.testing.assert_array_equal(masks[1][:, :8], 1)
    np.testing.assert_array_equal(masks[1][:, 8:], 0)
    assert masks[2].all()


def _examples(paths):
    import tensorflow as tf

    dataset = records.record_dataset(paths).map(pipeline.parse_instances)
    return [ex for ex in dataset if bool(pipeline.trainable(ex))], tf


def test_flip_mirrors_image_boxes_and_masks_and_masks_match_pycocotools(prepared):
    """One image through train_example with and without the flip: the image and the box-local masks mirror, the
    boxes follow the reference's transpose (x1' = W - x2 - 1); the unflipped masks agree with pycocotools' full-image
    mask of the same annotation sampled at the raster's cell centres."""
    raw, out = prepared
    manifest = read_manifest(out, "maskrcnn")
    examples, tf = _examples(records.worker_files(out, manifest, "train", 0, 1))
    example = next(ex for ex in examples if int(tf.size(ex["labels"])) >= 2 and not bool(tf.reduce_any(ex["is_crowd"])))
    plain = pipeline.train_example(example, tf.constant(False), min_size=MIN, max_size=MAX, max_gt=6)
    flipped = pipeline.train_example(example, tf.constant(True), min_size=MIN, max_size=MAX, max_gt=6)
    h, w = (int(v) for v in plain["image_sizes"])
    np.testing.assert_array_equal(flipped["images"].numpy()[:h, :w], plain["images"].numpy()[:h, :w][:, ::-1])
    n = int(np.sum(plain["gt_classes"].numpy() > 0))
    b, fb = plain["gt_boxes"].numpy()[:n], flipped["gt_boxes"].numpy()[:n]
    np.testing.assert_allclose(fb, np.stack([w - b[:, 2] - 1, b[:, 1], w - b[:, 0] - 1, b[:, 3]], 1), atol=1e-4)
    np.testing.assert_array_equal(flipped["gt_masks"].numpy()[:n], plain["gt_masks"].numpy()[:n, :, ::-1])
    assert not plain["gt_masks"].numpy()[n:].any() and not plain["gt_classes"].numpy()[n:].any()
    # the same objects from the annotation file, rasterised at image size by pycocotools
    from pycocotools.coco import COCO
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(os.path.join(raw, "annotations", "instances_train2017.json"))
    anns = [a for a in gt.loadAnns(gt.getAnnIds(imgIds=[int(example["image_id"])])) if not a["iscrowd"]]
    assert len(anns) == n
    height, width = int(example["height"]), int(example["width"])
    r = pipeline.MASK_RESOLUTION
    for ann, local in zip(anns, plain["gt_masks"].numpy()[:n]):
        full = gt.annToMask(ann)
        x, y, bw, bh = ann["bbox"]
        x1, y1, x2, y2 = x, y, min(x + bw - 1, width - 1), min(y + bh - 1, height - 1)
        xs = np.clip(np.floor(x1 + (np.arange(r) + 0.5) / r * (x2 - x1)).astype(int), 0, width - 1)
        ys = np.clip(np.floor(y1 + (np.arange(r) + 0.5) / r * (y2 - y1)).astype(int), 0, height - 1)
        assert np.mean(full[ys][:, xs] == local) > 0.95


def test_mask_targets_agree_with_the_reference_rasterising_on_the_proposal():
    """The box-local 64x64 mask resampled onto a proposal against project_masks_on_boxes (the polygon cropped to
    the proposal and rasterised at 28x28 there): the one documented difference of the mask targets stays small."""
    import keras

    from mlperf_keras.layers import maskrcnn_targets

    t = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    polygon = np.stack([60 + 40 * np.cos(t), 50 + 25 * np.sin(t)], 1)              # an ellipse in (20..100, 25..75)
    box = np.array([polygon[:, 0].min(), polygon[:, 1].min(), polygon[:, 0].max(), polygon[:, 1].max()])
    local = pipeline.box_masks([json.dumps([polygon.ravel().tolist()]).encode()], box[None], 120, 120)
    for proposal in ([20, 25, 100, 75], [30, 20, 110, 70], [10, 35, 90, 80]):
        x1, y1, x2, y2 = proposal
        p = (polygon - (x1, y1)) * (28 / max(x2 - x1, 1), 28 / max(y2 - y1, 1))
        want = mask_util.decode(mask_util.merge(mask_util.frPyObjects([p.ravel().tolist()], 28, 28)))
        got = keras.ops.convert_to_numpy(maskrcnn_targets.mask_targets(local[None], box[None, None].astype(np.float32),
                                                                np.array([[proposal]], np.float32),
                                                                np.zeros((1, 1), np.int32)))[0, 0]
        iou = np.logical_and(got, want).sum() / np.logical_or(got, want).sum()
        assert iou > 0.95, (proposal, iou)


def test_train_epoch_groups_orientations_with_static_shapes_and_every_image_once(prepared):
    _, out = prepared
    manifest = read_manifest(out, "maskrcnn")
    paths = records.worker_files(out, manifest, "train", 0, 1)
    groups = pipeline.count_groups(paths)
    assert min(groups) > 0 and sum(groups) == manifest["counts"]["train_images_annotated"]
    batch = 3
    needed = pipeline.grouped_batches_needed(groups, batch)
    steps = needed + 1                                  # one more: the worker repeats its first batch
    dataset = pipeline.train_dataset(paths, seed=5, epoch=0, rank=0, batch_size=batch, num_batches=steps,
                                     shuffle_buffer=8, min_size=MIN, max_size=MAX, max_gt=6, groups=groups,
                                     keep_image_id=True)
    seen, shapes = [], set()
    for i, (x, y) in enumerate(dataset.as_numpy_iterator()):
        shapes.add(x["images"].shape)
        assert y.shape == (batch,)
        assert x["gt_boxes"].shape == (batch, 6, 4) and x["gt_masks"].shape == (batch, 6, 64, 64)
        h, w = x["images"].shape[1:3]
        assert (x["image_sizes"] <= [h, w]).all() and (x["image_sizes"].min(axis=1) <= MIN).all()
        real = x["gt_classes"] > 0
        assert (x["gt_boxes"][real][:, 2] <= x["image_sizes"][:, 1].repeat(real.sum(1)) - 1 + 1e-3).all()
        assert (x["gt_masks"][~real] == 0).all()
        if i < needed:
            seen.extend(x["image_id"].tolist())
    assert i + 1 == steps
    assert shapes == {(batch, 64, 128, 3), (batch, 128, 64, 3)}
    # every trainable image within the epoch's grouped batches; only the groups' last batches repeat images
    ids = [ex["image_id"] for ex in _examples(paths)[0]]
    assert set(seen) == {int(v) for v in ids}
    assert len(seen) - len(set(seen)) == needed * batch - sum(groups)
    with pytest.raises(DataError, match="more than its"):
        pipeline.train_dataset(paths, seed=5, epoch=0, rank=0, batch_size=batch, num_batches=needed - 1,
                               min_size=MIN, max_size=MAX, max_gt=6, groups=groups)


def test_eval_batches_hold_every_val_image_once(prepared):
    raw, out = prepared
    manifest = read_manifest(out, "maskrcnn")
    ids = []
    for rank in range(2):
        paths = records.worker_files(out, manifest, "validation", rank, 2)
        for batch in pipeline.eval_dataset(paths, batch_size=2, min_size=MIN, max_size=MAX).as_numpy_iterator():
            assert batch["images"].shape in ((2, 64, 128, 3), (2, 128, 64, 3))
            ids.extend(int(i) for i in batch["image_id"] if i >= 0)
    with open(os.path.join(raw, "annotations", "instances_val2017.json")) as f:
        want = sorted(image["id"] for image in json.load(f)["images"])
    assert sorted(ids) == want


def test_epochs_cut_one_stream_of_passes_as_the_references_iteration_based_sampler(prepared):
    """IterationBasedBatchSampler (data/samplers/iteration_based_batch_sampler.py, mlcommons/training 0badcd17)
    re-runs the grouped batch sampler pass after pass; the evaluation comes every iters_per_epoch iterations wherever
    a pass ends. Here: a pass of ceil(landscape / b) + ceil(portrait / b) batches, epochs of N // b + 1, and epoch k
    the batches k x steps .. (k + 1) x steps - 1 of the passes back to back, also for a resumed run's first epoch."""
    from mlperf_keras import distribute
    from mlperf_keras.workloads import maskrcnn as workload_module
    from tests.conftest import resolve_run

    _, out = prepared
    manifest = read_manifest(out, "maskrcnn")
    paths = records.worker_files(out, manifest, "train", 0, 1)
    groups = pipeline.count_groups(paths)
    hparams = f"min_size={MIN},max_size={MAX},max_gt=6,shuffle_buffer=8"
    batch = next(b for b in (3, 4, 5, 2) if pipeline.grouped_batches_needed(groups, b) != sum(groups) // b + 1)
    _, _, config, dist = resolve_run("maskrcnn", data_dir=out, batch_size=batch, hparams=hparams, division="open")
    steps = sum(groups) // batch + 1
    pass_batches = pipeline.grouped_batches_needed(groups, batch)
    data = workload_module._CocoTrainData(config, distribute.create("tensorflow"), paths, steps)
    assert (data.steps_per_epoch, data.pass_batches) == (steps, pass_batches) and steps != pass_batches

    def key(x):
        return np.asarray(x["gt_boxes"]).tobytes() + np.asarray(x["images"]).tobytes()

    epochs = [[key(x) for x, _ in data.batches(e)] for e in range(3)]
    assert [len(e) for e in epochs] == [steps] * 3
    passes = []
    for p in range(3 * steps // pass_batches + 1):
        passes += [key(x) for x, _ in pipeline.train_dataset(
            paths, seed=config.seed, epoch=p, rank=0, batch_size=batch, num_batches=pass_batches, shuffle_buffer=8,
            min_size=MIN, max_size=MAX, max_gt=6).as_numpy_iterator()]
    assert sum(epochs, []) == passes[:3 * steps]
    resumed = workload_module._CocoTrainData(config, distribute.create("tensorflow"), paths, steps)
    assert [key(x) for x, _ in resumed.batches(2)] == epochs[2]


@pytest.mark.parametrize("size,new", [((480, 640), (800, 1066)), ((640, 427), (1199, 800)),
                                      ((1500, 2000), (800, 1066))])
def test_resize_is_pils_bilinear(size, new):
    """The reference resizes PIL images (transforms.py Resize -> torchvision F.resize -> PIL Image.resize BILINEAR,
    mlcommons/training 0badcd17): a vertical step edge at x = W/2 lands at new_W/2 (533.0 at 640 -> 1066), and
    every pixel is within 1 of PIL's (noise too, shrinking included). TF1's legacy resize put the edge at 532.67."""
    from PIL import Image

    rng = np.random.default_rng(3)
    h, w = size
    step = np.zeros((h, w, 3), np.uint8)
    step[:, w // 2:] = 200
    noise = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    for picture in (step, noise):
        want = np.asarray(Image.fromarray(picture).resize(new[::-1], Image.BILINEAR), np.int32)
        got = np.asarray(pipeline.image.to_uint8(pipeline.resize_like_pil(picture, *new)), np.int32)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1 and np.abs(got - want).mean() < 0.2, np.abs(got - want).mean()
    row = np.asarray(pipeline.resize_like_pil(step, *new))[0, :, 0]
    i = int(np.argmax(row >= 100))
    crossing = i - 1 + (100 - row[i - 1]) / (row[i] - row[i - 1]) + 0.5   # pixel i spans [i, i + 1)
    assert crossing == pytest.approx(new[1] * (w // 2) / w, abs=0.02)


def test_a_pass_may_outlast_an_epoch_by_one_batch_only():
    """(5, 5) images at batch 4: the reference's epoch is 10 // 4 + 1 = 3 iterations, the grouped pass 2 + 2 = 4
    (both groups end with a partial batch) is allowed; (9, 5) needs 5, more than one batch over: unbalanced shards."""
    pipeline.check_pass_fits((5, 5), 4, 3, ["a"])
    with pytest.raises(DataError, match=r"5 batches of 4, more than the 3 of an epoch by more than one; the train"):
        pipeline.check_pass_fits((9, 5), 4, 3, ["a"])
    with pytest.raises(DataError, match="no trainable image"):
        pipeline.check_pass_fits((0, 0), 4, 3, ["a"])
