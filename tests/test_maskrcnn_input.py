"""The Mask R-CNN input pipeline (inputs/maskrcnn.py) on data_prep.coco output of generated COCO data: the
reference's resize, box convention and flip, polygon mask targets against pycocotools, orientation groups of static
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
def prepared(prepared_maskrcnn_coco):
    return prepared_maskrcnn_coco


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


def test_object_edges_close_every_part_and_pad_with_rows_that_never_cross():
    """Two objects: a triangle and two squares (one object, two parts), then a crowd with no polygon."""
    import tensorflow as tf

    xy = [[0, 0], [4, 0], [0, 3], [1, 1], [2, 1], [2, 2], [1, 2], [5, 5], [6, 5], [6, 6], [5, 6]]
    edges = pipeline.object_edges(tf.constant([1, 2, 0]), tf.constant([3, 4, 4]), tf.constant(xy, tf.float32),
                                  10).numpy()
    assert edges.shape == (3, 10, 5)
    np.testing.assert_array_equal(edges[0, :3], [[0, 0, 4, 0, 0], [4, 0, 0, 3, 0], [0, 3, 0, 0, 0]])
    np.testing.assert_array_equal(edges[1, :8], [[1, 1, 2, 1, 0], [2, 1, 2, 2, 0], [2, 2, 1, 2, 0], [1, 2, 1, 1, 0],
                                                 [5, 5, 6, 5, 1], [6, 5, 6, 6, 1], [6, 6, 5, 6, 1], [5, 6, 5, 5, 1]])
    assert not edges[0, 3:].any() and not edges[1, 8:].any() and not edges[2].any()
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_vertices=7"):
        pipeline.object_edges(tf.constant([1, 2, 0]), tf.constant([3, 4, 4]), tf.constant(xy, tf.float32), 7)


def reference_targets(annotation, ratio_w, ratio_h, flip_width, rois):
    """project_masks_on_boxes (mlcommons/training 0badcd17, object_detection/pytorch/maskrcnn_benchmark/modeling/
    roi_heads/mask_head/loss.py) on one annotation's polygons after the training transforms (structures/
    segmentation_mask.py Polygons.resize: x * ratio_w, y * ratio_h; transpose: x' = W - x - 1): crop to each ROI,
    scale to 28x28, pycocotools frPyObjects + merge + decode."""
    out = []
    for x1, y1, x2, y2 in rois:
        w, h = max(x2 - x1, 1), max(y2 - y1, 1)
        polygons = []
        for flat in annotation["segmentation"]:
            p = np.asarray(flat, np.float64).reshape(-1, 2) * (ratio_w, ratio_h)
            if flip_width is not None:
                p[:, 0] = flip_width - p[:, 0] - 1
            polygons.append(((p - (x1, y1)) * (28 / w, 28 / h)).ravel().tolist())
        out.append(mask_util.decode(mask_util.merge(mask_util.frPyObjects(polygons, 28, 28))))
    return np.array(out)


def _examples(paths):
    import tensorflow as tf

    dataset = records.record_dataset(paths).map(pipeline.parse_instances)
    return [ex for ex in dataset if bool(pipeline.trainable(ex))], tf


def test_flip_mirrors_image_boxes_and_polygons_and_targets_match_the_references(prepared):
    """One image through train_example with and without the flip: the image mirrors, boxes and polygon vertices
    follow the reference's transposes (x1' = W - x2 - 1, x' = W - x - 1); the mask targets on each object's own box
    (mask_targets) agree with the reference's (reference_targets, from the annotation file) on 95% of cells."""
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
    p, fp = plain["gt_polygons"].numpy()[:n], flipped["gt_polygons"].numpy()[:n]
    np.testing.assert_allclose(fp[..., [0, 2]], w - p[..., [0, 2]] - 1, atol=1e-4)
    np.testing.assert_array_equal(fp[..., [1, 3, 4]], p[..., [1, 3, 4]])
    assert not plain["gt_polygons"].numpy()[n:].any() and not plain["gt_classes"].numpy()[n:].any()
    # the same objects' polygons in the annotation file, transformed as the reference transforms them
    from pycocotools.coco import COCO
    import contextlib
    import io

    from keras import ops

    from mlperf_keras.layers import maskrcnn_targets

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(os.path.join(raw, "annotations", "instances_train2017.json"))
    anns = [a for a in gt.loadAnns(gt.getAnnIds(imgIds=[int(example["image_id"])])) if not a["iscrowd"]]
    assert len(anns) == n
    ratio_w, ratio_h = w / int(example["width"]), h / int(example["height"])
    for out, flip_width in ((plain, None), (flipped, w)):
        rois = out["gt_boxes"].numpy()[:n]
        got = ops.convert_to_numpy(maskrcnn_targets.mask_targets(out["gt_polygons"][None], rois[None],
                                                                 np.arange(n, dtype=np.int32)[None]))[0]
        for k, ann in enumerate(anns):
            want = reference_targets(ann, ratio_w, ratio_h, flip_width, rois[k:k + 1])[0]
            assert np.mean(got[k] != want) < 0.05, (k, flip_width, np.mean(got[k] != want))


THIN = [[20.0, 20.0, 28.0, 20.0, 620.0, 420.0, 612.0, 420.0]]   # a band 8 px wide from (20, 20) to (620, 420)


@pytest.fixture(scope="module")
def thin_object(tmp_path_factory):
    """data_prep.coco output of one 640x480 demo image that carries the THIN diagonal band as its only object."""
    root = tmp_path_factory.mktemp("thin_object")
    raw = root / "raw"
    demo_coco.write_raw(str(raw), num_train=1, num_val=1, size=(640, 480), seed=4)
    path = raw / "annotations" / "instances_train2017.json"
    document = json.loads(path.read_text())
    image = document["images"][0]
    document["annotations"] = [{"id": 1, "image_id": image["id"], "category_id": document["categories"][0]["id"],
                                "segmentation": THIN, "iscrowd": 0, "area": 3200.0,
                                "bbox": [20.0, 20.0, 600.0, 400.0]}]
    path.write_text(json.dumps(document))
    coco.prepare(str(raw), str(root / "out"), train_shards=1, val_shards=1, num_workers=0, log=lambda _: None)
    return document["annotations"][0], str(root / "out")


def test_thin_diagonal_object_targets_match_the_references(thin_object):
    """An 8 px band across its whole 600x400 box, through the records, train_example and mask_targets, on its box
    and on three proposals along it (mirrored with the flip), against the reference's targets (reference_targets).
    A 64x64 raster of the object's box cannot hold the band: main (8b982ed) resampled it onto the three proposals
    with IoU 0.26-0.63 against the reference and gave an empty target on the box (the reference's has 21 cells).
    Measured here: at most 1.3% of cells differ (pycocotools' boundary cells), IoU on the proposals 0.80-0.98."""
    import tensorflow as tf
    from keras import ops

    from mlperf_keras.layers import maskrcnn_targets

    annotation, out = thin_object
    manifest = read_manifest(out, "maskrcnn")
    (example,), _ = _examples(records.worker_files(out, manifest, "train", 0, 1))
    along = np.array([[270, 170, 370, 270], [100, 60, 180, 140], [400, 300, 520, 380]], np.float32)
    for flip in (False, True):
        x = pipeline.train_example(example, tf.constant(flip), min_size=480, max_size=640, max_gt=2,
                                   max_vertices=8)
        h, w = (int(v) for v in x["image_sizes"])
        proposals = np.stack([w - along[:, 2] - 1, along[:, 1], w - along[:, 0] - 1, along[:, 3]], 1) if flip \
            else along
        rois = np.concatenate([x["gt_boxes"].numpy()[:1], proposals])
        got = ops.convert_to_numpy(maskrcnn_targets.mask_targets(x["gt_polygons"][None], rois[None],
                                                                 np.zeros((1, 4), np.int32)))[0]
        want = reference_targets(annotation, w / 640, h / 480, w if flip else None, rois)
        differ = np.mean(got != want, axis=(1, 2))
        iou = np.logical_and(got, want).sum((1, 2))[1:] / np.logical_or(got, want).sum((1, 2))[1:]
        assert differ.max() < 0.025 and iou.min() > 0.75 and got[0].any(), (flip, differ, iou)


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
        assert x["gt_boxes"].shape == (batch, 6, 4)
        assert x["gt_polygons"].shape == (batch, 6, pipeline.MAX_VERTICES, 5)
        h, w = x["images"].shape[1:3]
        assert (x["image_sizes"] <= [h, w]).all() and (x["image_sizes"].min(axis=1) <= MIN).all()
        real = x["gt_classes"] > 0
        assert (x["gt_boxes"][real][:, 2] <= x["image_sizes"][:, 1].repeat(real.sum(1)) - 1 + 1e-3).all()
        assert (x["gt_polygons"][~real] == 0).all()
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
