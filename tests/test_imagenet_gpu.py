"""ResNet's TF-free input pipeline (inputs/imagenet_gpu, inputs/image_geometry) against the closed tf.data path
(inputs/image): the crop distribution of tf.image.sample_distorted_bounding_box, the same pixels given the same
draws (within what the JPEG decoders differ by), every record once per epoch, batch shapes and dtypes. The GPU
decoder's comparison with the host's is tests/test_imagenet_gpu_decode.py (marked gpu, no TensorFlow)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from data_prep import demo_imagenet, imagenet
from mlperf_keras.inputs import image, image_geometry, imagenet_gpu, jpeg_batches, record_streams, records
from mlperf_keras.inputs.manifest import DataError, read_manifest, worker_files, worker_rows
from tests.conftest import photo_jpeg


@pytest.fixture(scope="module")
def jpegs():
    sizes = np.random.default_rng(0).integers(60, 300, (12, 2))
    return [photo_jpeg(int(h), int(w), i) for i, (h, w) in enumerate(sizes)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet_gpu")
    demo_imagenet.write_raw(str(root / "raw"), num_classes=3, train_per_class=10, val_images=13, size=(56, 40),
                            oddities=False, seed=11)
    imagenet.prepare(str(root / "raw"), str(root / "out"), train_shards=6, val_shards=3, num_workers=0,
                     log=lambda _: None)
    return str(root / "out"), read_manifest(str(root / "out"), "resnet")


def test_jpeg_size_is_tensorflows(jpegs, prepared):
    data_dir, manifest = prepared
    demo = [imagenet_gpu._jpeg_and_label(r, 0)[0]
            for r in record_streams.in_order(worker_files(data_dir, manifest, "train", 0, 1))]
    for jpeg in jpegs + demo[:5]:
        assert image_geometry.jpeg_size(jpeg) == tuple(tf.image.extract_jpeg_shape(jpeg).numpy()[:2])


@pytest.mark.parametrize("height,width", [(375, 500), (40, 56), (8, 300)])
def test_crop_windows_have_tensorflows_distribution(height, width):
    """4,000 windows from image_geometry.sample_crop_windows and from tf.image.stateless_sample_distorted_bounding_box
    (the closed path's inputs/image.sample_crop_window) with the reference's crop (area [0.05, 1], aspect
    [0.75, 1.33], 10% of the image covered, 100 tries). Two-sample Kolmogorov-Smirnov distances of the areas,
    heights and offsets stay under 0.045 (measured: 0.012-0.024; the 1% critical value at n = 4,000 is 0.036 and the
    draws are seeded, so the test is deterministic), and the means of area and aspect agree to 0.01. An 8 x 300
    image admits no window (too wide for any aspect): both give the whole image every time."""
    from scipy.stats import ks_2samp

    n, crop = 4000, image_geometry.CropParams()
    ours = image_geometry.sample_crop_windows(np.full(n, height), np.full(n, width), np.random.default_rng(3), crop)
    seeds = tf.stack([tf.fill([n], tf.constant(11, tf.int64)), tf.range(n, dtype=tf.int64)], axis=1)
    shape = tf.constant([height, width, 3], tf.int32)
    draw = tf.function(lambda s: tf.map_fn(lambda seed: image.sample_crop_window(shape, seed, crop), s,
                                           fn_output_signature=tf.int32))
    theirs = draw(seeds).numpy()
    for w in (ours, theirs):
        assert (w[:, 0] + w[:, 2] <= height).all() and (w[:, 1] + w[:, 3] <= width).all() and (w >= 0).all()
    if height == 8:
        whole = np.array([0, 0, height, width])
        assert (ours == whole).all() and (theirs == whole).all()
        return
    area = lambda w: w[:, 2] * w[:, 3] / (height * width)  # noqa: E731
    for column in (lambda w: area(w), lambda w: w[:, 2], lambda w: w[:, 0], lambda w: w[:, 1]):
        assert ks_2samp(column(ours), column(theirs)).statistic < 0.045
    assert abs(area(ours).mean() - area(theirs).mean()) < 0.01
    assert abs((ours[:, 3] / ours[:, 2]).mean() - (theirs[:, 3] / theirs[:, 2]).mean()) < 0.01
    assert area(ours).min() >= 0.1 - 1e-6  # min_object_covered of the whole image


def _tf_train_pixels(jpeg, window, flip, size, dct_method=None):
    """The closed path's pixels (decode_and_crop_jpeg, TF's default DCT); with dct_method, TF's full decode with
    that DCT, then the window."""
    if dct_method is None:
        crop = tf.image.decode_and_crop_jpeg(jpeg, tf.constant(window, tf.int32), channels=3)
    else:
        y, x, h, w = (int(v) for v in window)
        crop = tf.image.decode_jpeg(jpeg, channels=3, dct_method=dct_method)[y:y + h, x:x + w]
    if flip:
        crop = tf.image.flip_left_right(crop)
    return image.to_uint8(image.resize(crop, size, size)).numpy()


def test_resize_is_tensorflows_given_the_same_decoded_crops(jpegs):
    """TF's own decoded crops packed into the canvas: the jitted gather-and-lerp equals tf.compat.v1.image.resize
    (bilinear, TF1 corners) + flip + rounding to uint8. Measured: 4 of 2.4 M values differ, by 1 (float rounding
    order); allowed: 1 level, in at most 1 of 10,000 values."""
    size = 224
    sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
    geometry, flips = imagenet_gpu.train_geometry(sizes, np.random.default_rng(1), size, image_geometry.CropParams())
    assert flips.any() and not flips.all()
    canvas = np.zeros(geometry.canvas_size(), np.uint8)
    expected = []
    for jpeg, window, flip, base in zip(jpegs, geometry.windows, flips, geometry.bases):
        crop = tf.image.decode_and_crop_jpeg(jpeg, tf.constant(window, tf.int32), channels=3).numpy()
        canvas[base:base + crop.size] = crop.reshape(-1)
        expected.append(_tf_train_pixels(jpeg, window, flip, size))
    ours = np.asarray(jpeg_batches.resize_from_canvas(canvas, geometry.taps(), geometry.valid))
    diff = np.abs(ours.astype(int) - np.stack(expected).astype(int))
    assert ours.dtype == np.uint8 and ours.shape == (len(jpegs), size, size, 3)
    assert diff.max() <= 1 and np.mean(diff > 0) < 1e-4


def test_host_path_matches_tf_data_given_the_same_draws(jpegs):
    """The host fallback (PIL decode, the canvas, the jitted resize) against the closed path's decode_and_crop_jpeg
    + flip + resize on the same windows and flips. Two decoder differences, both TF's: its default DCT is the fast
    integer one (PIL's libjpeg-turbo uses the accurate one), and decode_and_crop_jpeg's first and last columns
    differ from a full decode's by up to 7 levels (libjpeg-turbo's cropped chroma upsampling; measured here on its
    own). Measured on these photo-like JPEGs against the closed path: at most 8 levels, mean 0.97; allowed: 12 and
    1.5. Against TF's full decode with dct_method=INTEGER_ACCURATE, then the window: the same pixels but for
    rounding (at most 1 level, in 1 of 10,000 values)."""
    size = 224
    sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
    geometry, flips = imagenet_gpu.train_geometry(sizes, np.random.default_rng(2), size, image_geometry.CropParams())
    ours = np.asarray(jpeg_batches.resize_from_canvas(jpeg_batches.HostDecoder(2).canvas(jpegs, geometry),
                                                      geometry.taps(), geometry.valid)).astype(int)
    closed = np.stack([_tf_train_pixels(j, w, f, size) for j, w, f in zip(jpegs, geometry.windows, flips)])
    accurate = np.stack([_tf_train_pixels(j, w, f, size, "INTEGER_ACCURATE")
                         for j, w, f in zip(jpegs, geometry.windows, flips)])
    diff = np.abs(ours - closed)
    assert diff.max() <= 12 and diff.mean() < 1.5, (diff.max(), diff.mean())
    same_decoder = np.abs(ours - accurate)
    assert same_decoder.max() <= 1 and np.mean(same_decoder > 0) < 1e-4


def test_eval_geometry_is_the_closed_centre_crop(jpegs):
    """The eval taps read from TF's decoded image give inputs/image.center_crop_resize (shorter side to 256,
    truncated sides, centre 224 crop) but for float rounding (measured: equal; allowed: 1 level in 1 of 10,000)."""
    size, resize_min = 224, 256
    sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
    geometry = imagenet_gpu.eval_geometry(sizes, size, resize_min, np.ones(len(jpegs), bool))
    canvas = np.zeros(geometry.canvas_size(), np.uint8)
    for jpeg, (y, x, h, w), base in zip(jpegs, geometry.windows, geometry.bases):
        full = tf.image.decode_jpeg(jpeg, channels=3).numpy()
        canvas[base:base + h * w * 3] = full[y:y + h, x:x + w].reshape(-1)
    ours = np.asarray(jpeg_batches.resize_from_canvas(canvas, geometry.taps(), geometry.valid)).astype(int)
    closed = np.stack([image.center_crop_resize(j, size, resize_min).numpy() for j in jpegs]).astype(int)
    diff = np.abs(ours - closed)
    assert diff.max() <= 1 and np.mean(diff > 0) < 1e-4


def _filenames(serialized_records) -> list[str]:
    from mlperf_keras.inputs import record_reader

    return [record_reader.parse_example(r)["image/filename"][0].decode() for r in serialized_records]


def test_eval_order_is_tf_datas_interleave(prepared):
    data_dir, manifest = prepared
    paths = worker_files(data_dir, manifest, "validation", 0, 1)
    theirs = [t.numpy() for t in records.record_dataset(paths, cycle_length=2)]
    assert list(record_streams.in_order(paths, cycle_length=2)) == theirs


@pytest.mark.parametrize("world", [1, 2])
def test_every_record_once_per_epoch_per_worker(prepared, world):
    """Each worker's epoch holds each of its records once before any repeats; the workers' records are disjoint and
    cover the split; a new epoch has a new order; the same (seed, epoch) the same one."""
    data_dir, manifest = prepared
    seen = []
    for rank in range(world):
        paths = worker_files(data_dir, manifest, "train", rank, world)
        rows = worker_rows(manifest, "train", rank, world)
        stream = lambda epoch, n: _filenames(record_streams.epoch_stream(  # noqa: E731
            paths, seed=5, epoch=epoch, num_samples=n, shuffle_buffer=8, cycle_length=3))
        epoch0 = stream(0, rows + 4)
        assert len(set(epoch0[:rows])) == rows and set(epoch0[rows:]) <= set(epoch0[:rows])
        assert stream(0, rows + 4) == epoch0 and stream(1, rows) != epoch0[:rows]
        seen += epoch0[:rows]
    assert sorted(seen) == sorted(_filenames(record_streams.in_order(
        worker_files(data_dir, manifest, "train", 0, 1))))


def test_train_and_eval_batches_shapes_dtypes_and_padding(prepared):
    data_dir, manifest = prepared
    decoder = jpeg_batches.HostDecoder(2)
    paths = worker_files(data_dir, manifest, "train", 0, 1)
    batches = list(imagenet_gpu.train_batches(paths, decoder, seed=1, epoch=0, rank=0, batch_size=4, num_batches=8,
                                              image_size=24, shuffle_buffer=16, label_offset=1))
    assert len(batches) == 8
    for images, labels in batches:
        assert images.shape == (4, 24, 24, 3) and images.dtype == np.uint8
        assert labels.shape == (4,) and labels.dtype == np.int32 and set(labels) <= {1, 2, 3}
    again = next(iter(imagenet_gpu.train_batches(paths, decoder, seed=1, epoch=0, rank=0, batch_size=4,
                                                 num_batches=1, image_size=24, shuffle_buffer=16)))
    np.testing.assert_array_equal(np.asarray(again[0]), np.asarray(batches[0][0]))

    val = worker_files(data_dir, manifest, "validation", 0, 1)
    out = list(imagenet_gpu.eval_batches(val, decoder, batch_size=5, image_size=24, resize_min=28))
    labels = np.concatenate([b[1] for b in out])
    assert len(out) == 3 and (labels >= 0).sum() == 13 and (labels[13:] == -1).all()
    assert np.asarray(out[-1][0])[3:].max() == 0  # padding images are zero, as the closed path's
    closed = [b for b in image.classification_eval_dataset(val, batch_size=5, image_size=24, resize_min=28)]
    np.testing.assert_array_equal(labels, np.concatenate([b[1].numpy() for b in closed]))
    diff = np.abs(np.concatenate([np.asarray(b[0]) for b in out]).astype(int)
                  - np.concatenate([b[0].numpy() for b in closed]).astype(int))
    assert diff.mean() < 1.5


def test_batches_planned_in_worker_processes_are_the_threads_ones(prepared, tmp_path):
    """plan_workers=1 and 3 (reading and planning in inputs/worker_process, 3 taking every third batch) give the
    batches of the in-thread plan; a stream closed early leaves its workers to the next one; a bad record's
    DataError reaches the caller."""
    data_dir, manifest = prepared
    decoder = jpeg_batches.HostDecoder(2)
    paths = worker_files(data_dir, manifest, "train", 0, 1)

    def batches(workers, num_batches=4):
        return [(np.asarray(x), y) for x, y in imagenet_gpu.train_batches(
            paths, decoder, seed=2, epoch=1, rank=0, batch_size=4, num_batches=num_batches, image_size=24,
            shuffle_buffer=16, plan_workers=workers)]

    in_thread = batches(0)
    early = imagenet_gpu.train_batches(paths, decoder, seed=2, epoch=1, rank=0, batch_size=4, num_batches=8,
                                       image_size=24, shuffle_buffer=16, plan_workers=3)
    next(early)
    early.close()
    for workers in (1, 3):
        for (x, y), (x2, y2) in zip(in_thread, batches(workers), strict=True):
            np.testing.assert_array_equal(x, x2)
            np.testing.assert_array_equal(y, y2)
    bad = tmp_path / "bad.tfrecord"
    with tf.io.TFRecordWriter(str(bad)) as w:
        w.write(b"not an example")
    with pytest.raises(DataError, match="not a tf.train.Example"):
        list(imagenet_gpu.train_batches([str(bad)], decoder, seed=2, epoch=1, rank=0, batch_size=4, num_batches=1,
                                        image_size=24, plan_workers=1))


def test_decode_workers_without_a_gpu_decoder_are_unused_and_said(prepared, monkeypatch, capsys):
    """decode_workers (inputs/decode_process) needs a GPU decoder: with the host one the batches are those decoded
    in this process, and the console says the workers are unused."""
    monkeypatch.setattr(jpeg_batches, "_said", set())
    data_dir, manifest = prepared
    paths = worker_files(data_dir, manifest, "train", 0, 1)
    decoder = jpeg_batches.HostDecoder(2)
    kw = dict(seed=2, epoch=1, rank=0, batch_size=4, num_batches=2, image_size=24, shuffle_buffer=16)
    plain = [(np.asarray(x), y) for x, y in imagenet_gpu.train_batches(paths, decoder, **kw)]
    asked = [(np.asarray(x), y) for x, y in imagenet_gpu.train_batches(paths, decoder, decode_workers=2, **kw)]
    for (x, y), (x2, y2) in zip(plain, asked, strict=True):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    assert "decode_workers=2 unused: JPEGs are decoded on the host here" in capsys.readouterr().out


def test_choose_pipeline(monkeypatch):
    import keras

    from mlperf_keras.config import ConfigError

    assert jpeg_batches.choose_pipeline("tf.data") == "tf.data"
    with pytest.raises(ConfigError, match="input_pipeline='dali'"):
        jpeg_batches.choose_pipeline("dali")
    if keras.backend.backend() == "tensorflow":
        assert jpeg_batches.choose_pipeline("auto") == "tf.data"
        with pytest.raises(ConfigError, match="JAX backend"):
            jpeg_batches.choose_pipeline("gpu")
        with pytest.raises(ConfigError, match="input_pipeline=gpu_hardware runs on the JAX backend"):
            jpeg_batches.choose_pipeline("gpu_hardware")
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    assert jpeg_batches.choose_pipeline("auto") == "tf.data"  # JAX on the CPU, TensorFlow installed
    assert jpeg_batches.choose_pipeline("host") == "host"
    assert jpeg_batches.choose_pipeline("gpu_hardware") == "gpu_hardware"


@pytest.mark.parametrize("pipeline", ["gpu", "gpu_hardware"])
def test_gpu_pipelines_fall_back_to_the_host_decoder_without_a_gpu(pipeline, monkeypatch, capsys):
    monkeypatch.setattr(jpeg_batches, "gpu_decoder_missing", lambda: "no CUDA device for JAX")
    monkeypatch.setattr(jpeg_batches, "_said", set())       # each pipeline says why, in a fresh process
    monkeypatch.setattr(jpeg_batches, "_decoders", {})
    assert jpeg_batches.make_decoder(pipeline, threads=1).name == "host"
    assert "JPEGs decoded on the host (PIL, 1 threads): no CUDA device for JAX" in capsys.readouterr().out



@pytest.mark.slow
def test_resnet_trains_from_records_on_jax_without_tensorflow(prepared, tmp_path):
    """input_pipeline=host: a tiny ResNet trains and evaluates on the JAX backend from data_prep.imagenet's records
    (record_reader, PIL, the jitted resize) and the process never imports TensorFlow."""
    from tests.conftest import mllog_events, run_on_jax_without_tensorflow

    pytest.importorskip("jax")
    data_dir, _ = prepared
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--model=resnet", "--backend=jax", f"--data_dir={data_dir}", f"--output_dir={tmp_path}",
                  "--seed=2", "--ruleset=0.7", "--max_epochs=1", "--batch_size=10",
                  "--hparams=image_size=24,eval_resize=28,width=8,block_sizes=1-1-1-1,optimizer=sgd,"
                  "learning_rate=0.1,warmup_epochs=0,shuffle_buffer=16,input_pipeline=host",
                  "--division=open"],
        tmp_path)
    summary = json.loads(lines[-1])
    assert check == {"exit": 5, "tensorflow_imported": False}, lines[-5:]   # one epoch does not reach the target
    events = mllog_events(summary["log"])
    accuracy = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert len(accuracy) == 1 and 0.0 <= accuracy[0] <= 1.0
