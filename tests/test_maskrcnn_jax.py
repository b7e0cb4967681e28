"""Mask R-CNN's JAX input path (inputs/maskrcnn_jax.py) against the closed tf.data path (inputs/maskrcnn.py) given
the same flips: the record parse and counts, ground truth (exact), whole training batches (pixels within the
measured tolerance), every trainable image once per pass, evaluation batches, a corrupt record, the workload's
epochs on the JAX path, and a run on JAX that never imports TensorFlow (slow)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from mlperf_keras.inputs import jpeg_batches, maskrcnn, maskrcnn_jax, record_reader, records
from mlperf_keras.inputs.manifest import DataError, read_manifest, worker_files

jax = pytest.importorskip("jax")

MIN, MAX = 64, 112      # the generated images (96-170 px a side) shrink to it: PIL's widened triangle
GROW = (160, 256)       # they grow to it: the bilinear kernel (all of COCO's images grow to 800 / 1333)


@pytest.fixture(scope="module")
def prepared(prepared_maskrcnn_coco):
    _, out = prepared_maskrcnn_coco
    manifest = read_manifest(out, "maskrcnn")
    return worker_files(out, manifest, "train", 0, 1), worker_files(out, manifest, "validation", 0, 1), out


@pytest.fixture(scope="module")
def decoder():
    return jpeg_batches.HostDecoder(2)


def _pairs(paths):
    """Every record parsed by both paths, in file order: (maskrcnn_jax's dict, maskrcnn's dict of tensors)."""
    ours = [maskrcnn_jax.parse_instances(r) for p in paths for r in record_reader.iter_records(p)]
    theirs = list(records.record_dataset(paths, cycle_length=1).map(maskrcnn.parse_instances))
    assert len(ours) == len(theirs)
    return list(zip(ours, theirs))


def test_parse_counts_and_edges_are_tensorflows(prepared):
    train, val, _ = prepared
    pairs = _pairs(train)
    for a, b in pairs:
        assert a["jpeg"] == b["jpeg"].numpy() and a["image_id"] == int(b["image_id"])
        for key in ("boxes", "labels", "is_crowd", "polygon_parts", "polygon_vertices", "polygon_xy"):
            np.testing.assert_array_equal(a[key], b[key].numpy())
            assert a[key].dtype == b[key].numpy().dtype, key
        assert maskrcnn_jax.trainable(a) == bool(maskrcnn.trainable(b))
        edges = maskrcnn_jax.object_edges(a["polygon_parts"], a["polygon_vertices"], a["polygon_xy"], 64)
        np.testing.assert_array_equal(edges, maskrcnn.object_edges(b["polygon_parts"], b["polygon_vertices"],
                                                                   b["polygon_xy"], 64).numpy())
    assert any(a["is_crowd"].any() for a, _ in pairs) and not all(maskrcnn_jax.trainable(a) for a, _ in pairs)
    for paths in (train, val):
        assert maskrcnn_jax.count_groups(paths) == maskrcnn.count_groups(paths)
    # the same sizes as the reference's get_size (tests/test_maskrcnn_input.py checks the TF one against it)
    rng = np.random.default_rng(0)
    for h, w in [(480, 640), (640, 480), (800, 800), (800, 1333), (1, 2000)] + [tuple(rng.integers(50, 1500, 2))
                                                                              for _ in range(40)]:
        assert maskrcnn_jax.resized_size(h, w) == tuple(int(v) for v in maskrcnn.resized_size(h, w)), (h, w)
    # an object of more vertices than max_vertices, an image of more objects than max_gt: DataError
    a = next(a for a, _ in pairs if maskrcnn_jax.trainable(a) and (~a["is_crowd"]).sum() >= 2)
    with pytest.raises(DataError, match="max_vertices=3"):
        maskrcnn_jax.object_edges(a["polygon_parts"], a["polygon_vertices"], a["polygon_xy"], 3)
    with pytest.raises(DataError, match="max_gt=1; raise it with --hparams=max_gt=N"):
        maskrcnn_jax.train_targets(a, False, 64, 90, max_gt=1)


@pytest.mark.parametrize("sizes", [(MIN, MAX), GROW])
def test_training_batch_is_the_tf_data_paths_given_the_same_flips(prepared, decoder, sizes):
    """Both orientations, half the images flipped: a TrainPlan decoded on the host (PIL) and resized by the jitted
    function against maskrcnn.train_example with the same flips. Ground truth, sizes, shapes and dtypes exactly the
    same. Pixels: both paths decode with libjpeg's accurate DCT (PIL here, the reference's decoder; the tf.data path
    with image.ACCURATE_DCT, which equals PIL's), so only the resize differs: at most 1 level in 0.001% of values
    when shrinking (float32 sums in another order) and not at all when growing: allowed 1 level in 0.1%. The
    padding is PAD_RGB."""
    train, _, _ = prepared
    min_size, max_size = sizes
    trainable = [(a, b) for a, b in _pairs(train) if maskrcnn_jax.trainable(a)]
    seen = 0
    for group in (maskrcnn.LANDSCAPE, maskrcnn.PORTRAIT):
        chosen = [(a, b) for a, b in trainable if maskrcnn_jax.orientation(a["height"], a["width"]) == group][:4]
        flips = np.arange(len(chosen)) % 2 == 0
        plan = maskrcnn_jax.TrainPlan([a for a, _ in chosen], flips, min_size=min_size, max_size=max_size,
                                      max_gt=6)
        inputs, labels = plan.decode(decoder)
        assert labels.shape == (len(chosen),) and labels.dtype == np.float32 and not labels.any()
        differences = []
        for i, (_, b) in enumerate(chosen):
            want = maskrcnn.train_example(b, tf.constant(bool(flips[i])), min_size=min_size, max_size=max_size,
                                          max_gt=6)
            for key in ("gt_boxes", "gt_classes", "gt_polygons", "image_sizes"):
                got = np.asarray(inputs[key][i])
                assert got.dtype == want[key].dtype.as_numpy_dtype and got.shape == tuple(want[key].shape), key
                np.testing.assert_array_equal(got, want[key].numpy(), err_msg=key)
            seen += int((want["gt_classes"].numpy() > 0).sum())
            pixels = np.asarray(inputs["images"][i])
            assert pixels.dtype == np.uint8 and pixels.shape == tuple(want["images"].shape)
            differences.append(np.abs(pixels.astype(int) - want["images"].numpy().astype(int)).ravel())
            h, w = (int(v) for v in want["image_sizes"])
            assert (pixels[h:] == maskrcnn.PAD_RGB).all() and (pixels[:, w:] == maskrcnn.PAD_RGB).all()
        differences = np.concatenate(differences)
        assert differences.max() <= 1 and np.mean(differences > 0) < 1e-3, np.mean(differences > 0)
    assert seen >= 8


def test_axis_taps_are_pils_when_shrinking_and_tfs_bilinear_when_growing():
    """The taps on a 1-pixel-high image against PIL's Image.resize (BILINEAR: libImaging's float coefficients on
    8-bit pixels, rounded between passes) and TF's bilinear kernel: within 1 level."""
    from PIL import Image

    rng = np.random.default_rng(1)
    row = rng.integers(0, 256, 97).astype(np.uint8)
    for out in (13, 40, 96, 97, 150, 300):
        index, weight = maskrcnn_jax.axis_taps(97, out, np.arange(out))
        ours = np.round((row[index] * weight).sum(axis=1))
        pil = np.asarray(Image.fromarray(row[None]).resize((out, 1), Image.BILINEAR))[0]
        assert np.abs(ours - pil).max() <= 1, out
        assert np.allclose(weight.sum(axis=1), 1, atol=1e-6) and index.min() >= 0 and index.max() <= 96
        if out >= 97:
            theirs = tf.image.resize(row[None, :, None].astype(np.float32), (1, out)).numpy()[0, :, 0]
            np.testing.assert_allclose((row[index] * weight).sum(axis=1), theirs, atol=1e-3)


def test_train_batches_serve_every_trainable_image_once_per_pass(prepared, decoder):
    """The tf.data path's structure (keys, shapes, dtypes of train_dataset's batches), orientation groups, every
    trainable image once in a pass with only the groups' last batches repeating images (with their flips), the pass
    again for a batch beyond it, another order in another pass; skip leaves the batches after it alone; a pass that
    needs more batches than the epoch has is refused."""
    train, _, _ = prepared
    groups = maskrcnn_jax.count_groups(train)
    batch = 3
    needed = maskrcnn.grouped_batches_needed(groups, batch)
    options = dict(seed=5, rank=0, batch_size=batch, shuffle_buffer=8, min_size=MIN, max_size=MAX, max_gt=6,
                   groups=groups, keep_image_id=True)
    out = list(maskrcnn_jax.train_batches(train, decoder, epoch=0, num_batches=needed + 1, **options))
    spec = maskrcnn.train_dataset(train, epoch=0, num_batches=1, **{k: v for k, v in options.items()
                                                                     if k != "groups"}).element_spec
    assert len(out) == needed + 1
    seen = []
    for i, (x, y) in enumerate(out):
        assert set(x) == set(spec[0]) and y.shape == (batch,) and y.dtype == np.float32
        for key, s in spec[0].items():
            assert x[key].dtype == s.dtype.as_numpy_dtype, key
            assert x[key].shape[0] == batch and len(x[key].shape) == len(s.shape), key
            assert all(d is None or d == x[key].shape[k] for k, d in enumerate(s.shape) if k), key
        assert x["images"].shape[1:3] in ((64, 128), (128, 64))
        if i < needed:
            seen.extend(x["image_id"].tolist())
    ids = [a["image_id"] for a, _ in _pairs(train) if maskrcnn_jax.trainable(a)]
    assert sorted(set(seen)) == sorted(ids) and len(ids) == sum(groups)
    assert len(seen) - len(set(seen)) == needed * batch - sum(groups) > 0
    for x, _ in out[:needed]:   # a repeated image is the same batch element again: pixels and flipped boxes
        for i, j in [(i, j) for i in range(batch) for j in range(i) if x["image_id"][i] == x["image_id"][j]]:
            np.testing.assert_array_equal(np.asarray(x["images"][i]), np.asarray(x["images"][j]))
            np.testing.assert_array_equal(x["gt_boxes"][i], x["gt_boxes"][j])
    np.testing.assert_array_equal(np.asarray(out[needed][0]["images"]), np.asarray(out[0][0]["images"]))
    skipped = list(maskrcnn_jax.train_batches(train, decoder, epoch=0, num_batches=needed, skip=needed - 2,
                                              **options))
    assert len(skipped) == 2
    for (x, _), (want, _) in zip(skipped, out[needed - 2:needed]):
        np.testing.assert_array_equal(np.asarray(x["images"]), np.asarray(want["images"]))
        np.testing.assert_array_equal(x["gt_polygons"], want["gt_polygons"])
    other = next(iter(maskrcnn_jax.train_batches(train, decoder, epoch=1, num_batches=needed, **options)))[0]
    first = out[0][0]
    assert not (np.array_equal(other["image_id"], first["image_id"])
                and np.array_equal(np.asarray(other["images"]), np.asarray(first["images"])))
    with pytest.raises(DataError, match="more than its"):
        maskrcnn_jax.train_batches(train, decoder, epoch=0, num_batches=needed - 1, **options)


def test_eval_batches_are_the_tf_data_paths(prepared, decoder):
    """Every val record once in the tf.data path's order and orientation groups, repeats under id -1, the same
    sizes; pixels within the resize's rounding (see the training batch test)."""
    _, val, _ = prepared
    ours = list(maskrcnn_jax.eval_batches(val, decoder, batch_size=2, min_size=MIN, max_size=MAX))
    theirs = list(maskrcnn.eval_dataset(val, batch_size=2, min_size=MIN, max_size=MAX).as_numpy_iterator())
    assert len(ours) == len(theirs) >= 3
    for a, b in zip(ours, theirs):
        assert set(a) == set(b)
        for key in ("image_sizes", "image_id", "height", "width"):
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        images = np.asarray(a["images"])
        assert images.dtype == np.uint8 and images.shape == b["images"].shape
        diff = np.abs(images.astype(int) - b["images"].astype(int))
        assert diff.max() <= 1 and np.mean(diff > 0) < 1e-3, np.mean(diff > 0)
    assert any((b["image_id"] < 0).any() for b in ours)


def test_a_corrupt_record_names_its_file(prepared, tmp_path, decoder):
    train, val, _ = prepared
    data = bytearray(open(train[0], "rb").read())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "train-corrupt.tfrecord"
    bad.write_bytes(bytes(data))
    paths = [str(bad), train[1]]
    with pytest.raises(DataError, match="train-corrupt.tfrecord: corrupt TFRecord"):
        maskrcnn_jax.count_groups(paths)
    with pytest.raises(DataError, match="train-corrupt.tfrecord: corrupt TFRecord"):
        list(maskrcnn_jax.train_batches(paths, decoder, seed=1, epoch=0, rank=0, batch_size=2, num_batches=8,
                                        min_size=MIN, max_size=MAX, max_gt=6, groups=(4, 4)))
    with pytest.raises(DataError, match="train-corrupt.tfrecord: corrupt TFRecord"):
        list(maskrcnn_jax.eval_batches(paths, decoder, batch_size=2, min_size=MIN, max_size=MAX))
    old = tmp_path / "no-polygons.tfrecord"
    with records.writer(str(old)) as w:   # a record as data_prep.coco wrote them before it stored polygons
        w.write(records.example({
            "image/encoded": records.bytes_feature(b"x"), "image/id": records.int64_feature(1),
            "image/height": records.int64_feature(10), "image/width": records.int64_feature(10),
            **{f"image/object/bbox/{k}": records.float_feature([0.5]) for k in ("xmin", "ymin", "xmax", "ymax")},
            "image/object/class/label": records.int64_list_feature([1]),
            "image/object/is_crowd": records.int64_list_feature([0])}))
    with pytest.raises(DataError, match="polygon/parts and class/label differ"):
        maskrcnn_jax.parse_instances(next(record_reader.iter_records(str(old))))


def test_the_workload_cuts_the_jax_paths_passes_into_epochs(prepared, monkeypatch):
    """_CocoTrainData on input_pipeline=host (chosen here without the JAX backend): its epochs are the JAX path's
    passes back to back, cut as on the tf.data path (tests/test_maskrcnn_input.py), a resumed run's epoch too; the
    workload refuses input_pipeline=host on the TensorFlow backend."""
    from mlperf_keras import distribute
    from mlperf_keras.compliance import tunable
    from mlperf_keras.config import ConfigError
    from mlperf_keras.workloads import maskrcnn as workload_module
    from tests.conftest import resolve_run

    train, _, out = prepared
    groups = maskrcnn_jax.count_groups(train)
    hparams = f"min_size={MIN},max_size={MAX},max_gt=6,shuffle_buffer=8"
    batch = next(b for b in (3, 4, 5, 2) if maskrcnn.grouped_batches_needed(groups, b) != sum(groups) // b + 1)
    _, _, config, _ = resolve_run("maskrcnn", data_dir=out, batch_size=batch, hparams=hparams, division="open")
    assert config.hparams["input_pipeline"] == "auto" and jpeg_batches.choose_pipeline("auto") == "tf.data"
    assert "input_pipeline" in tunable.tunable_keys("maskrcnn", "0.7", config.hparams)   # closed: how it runs
    workload, manifest, host, _ = resolve_run("maskrcnn", data_dir=out, batch_size=batch, division="open",
                                              hparams=hparams + ",input_pipeline=host", backbone_weights="none")
    with pytest.raises(ConfigError, match="input_pipeline=host runs on the JAX backend"):
        workload.check(host, manifest)
    monkeypatch.setattr(jpeg_batches, "choose_pipeline", lambda requested: "host")
    steps = sum(groups) // batch + 1
    pass_batches = maskrcnn.grouped_batches_needed(groups, batch)
    data = workload_module._CocoTrainData(config, distribute.create("tensorflow"), train, steps)
    assert data.groups == groups and (data.steps_per_epoch, data.pass_batches) == (steps, pass_batches)

    def key(x):
        return np.asarray(x["gt_boxes"]).tobytes() + np.asarray(x["images"]).tobytes()

    epochs = [[key(x) for x, _ in data.batches(e)] for e in range(2)]
    decoder = jpeg_batches.make_decoder("host")
    passes = []
    for p in range(2 * steps // pass_batches + 1):
        passes += [key(x) for x, _ in maskrcnn_jax.train_batches(
            train, decoder, seed=config.seed, epoch=p, rank=0, batch_size=batch, num_batches=pass_batches,
            shuffle_buffer=8, min_size=MIN, max_size=MAX, max_gt=6, groups=groups)]
    assert sum(epochs, []) == passes[:2 * steps]
    resumed = workload_module._CocoTrainData(config, distribute.create("tensorflow"), train, steps)
    assert [key(x) for x, _ in resumed.batches(1)] == epochs[1]


@pytest.mark.slow
def test_maskrcnn_trains_from_records_on_jax_without_tensorflow(prepared, tmp_path):
    """input_pipeline=host: one epoch of a tiny Mask R-CNN trains and evaluates (box and mask AP) on the JAX backend
    from data_prep.coco's records (record_reader, PIL, the jitted resize) and the process never imports TensorFlow.
    Slow: jax.jit of the detector's train and predict steps on CPU."""
    from tests.conftest import mllog_events, run_on_jax_without_tensorflow
    from tests.test_maskrcnn import SMALL

    _, _, out = prepared
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--model=maskrcnn", "--backend=jax", f"--data_dir={out}", f"--output_dir={tmp_path}", "--seed=2",
                  "--ruleset=0.7", "--max_epochs=1", "--batch_size=4", "--division=open", "--backbone_weights=none",
                  f"--hparams={SMALL},input_pipeline=host"], tmp_path)
    summary = json.loads(lines[-1])
    assert check == {"exit": 5, "tensorflow_imported": False}, lines[-5:]
    events = mllog_events(summary["log"])
    accuracy = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert len(accuracy) == 1 and set(accuracy[0]) == {"BBOX", "SEGM"}
    values = {e["key"]: e["value"] for e in events}
    assert values["train_samples"] == sum(maskrcnn_jax.count_groups(worker_files(
        out, read_manifest(out, "maskrcnn"), "train", 0, 1)))
