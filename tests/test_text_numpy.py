"""The translation records read without TensorFlow (inputs/text_numpy, hparam input_reader=numpy on JAX): the same
pairs, shapes and steps per epoch as the tf.data pipelines, and a JAX run that never imports TensorFlow."""
from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest

from mlperf_keras.inputs import text, text_numpy
from mlperf_keras.inputs.manifest import read_manifest, worker_shards


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from data_prep import demos

    cache = str(tmp_path_factory.mktemp("text_demo"))
    return {m: demos.prepare(m, cache, log=lambda _: None) for m in ("transformer", "gnmt")}


def _files(data_dir, model, rank=0, world_size=1):
    manifest = read_manifest(data_dir, model)
    return manifest, [os.path.join(data_dir, f["name"]) for f in worker_shards(manifest, "train", rank, world_size)]


def _real_pairs(batches):
    """Counter of the non-empty (source, target) rows of TrainPipeline batches, padding stripped."""
    pairs = collections.Counter()
    for x, y in batches:
        for s, t in zip(np.asarray(x["source"]), np.asarray(y)):
            if s.any() or t.any():
                pairs[(tuple(s[s != 0]), tuple(t[t != 0]))] += 1
    return pairs


def test_the_transformer_batches_hold_every_pair_once_as_tf_data_does(demo):
    manifest, files = _files(demo["transformer"], "transformer")
    plan = text.BucketPlan.create(1024, 32)
    steps = text.epoch_steps(plan, manifest, 1, 0, 32)
    make = lambda reader: text.TrainPipeline(files, plan, 32, steps, 256, seed=5, as_numpy=True,  # noqa: E731
                                             reader=reader)
    numpy_batches, tf_batches = list(make("numpy").batches(0)), list(make("tf.data").batches(0))
    assert len(numpy_batches) == len(tf_batches) == steps
    shapes = set(zip(plan.batch_sizes, plan.lengths))
    assert all(tuple(x["source"].shape) in shapes and x["source"].dtype == np.int32 for x, _ in numpy_batches)
    pairs = _real_pairs(numpy_batches)
    assert pairs == _real_pairs(tf_batches) and sum(pairs.values()) == manifest["counts"]["train_pairs"]
    again = list(make("numpy").batches(0))
    assert all((a[1] == b[1]).all() for a, b in zip(numpy_batches, again))          # the seed decides the order
    other = list(make("numpy").batches(1))
    assert _real_pairs(other) == pairs and any(a[1].shape != b[1].shape or (a[1] != b[1]).any()
                                               for a, b in zip(numpy_batches, other))  # each epoch its own order


def test_gnmt_global_batches_deal_disjoint_full_rows_to_each_worker(demo):
    manifest, files = _files(demo["gnmt"], "gnmt")
    plan = text.sentence_bucket_plan(16, 20)
    steps = text.global_batch_steps(plan, text.worker_length_histogram(manifest, 0, 1), 2)
    ranks = [list(text.GlobalBatchTrainPipeline(files, plan, 20, steps, 256, seed=3, rank=r, world_size=2,
                                                as_numpy=True, reader="numpy").batches(0)) for r in (0, 1)]
    assert [len(b) for b in ranks] == [steps, steps]
    rows = collections.Counter()
    for batches in ranks:
        for x, y in batches:
            assert x["source"].shape[0] == 16 and x["target_input"].shape == y.shape
            assert x["source"].shape[1] in plan.lengths and y.shape[1] == x["source"].shape[1] - 1
            for s, t_in, t_out in zip(x["source"], x["target_input"], y):
                assert (t_in[1:] == t_out[:-1]).all()                                   # targets shifted by one
                target = np.concatenate([t_in[:1], t_out])
                rows[(tuple(s[s != 0]), tuple(target[target != 0]))] += 1
    assert sum(rows.values()) == steps * 32                                         # full global batches
    data = collections.Counter((tuple(s), tuple(t)) for s, t in text_numpy.shuffled_pairs(files, 0, 8, 20, 0))
    assert all(count <= data[row] for row, count in rows.items())                  # no pair dealt twice
    tf_batches = list(text.GlobalBatchTrainPipeline(files, plan, 20, steps, 256, seed=3, rank=0, world_size=2,
                                                    as_numpy=True).batches(0))
    assert len(tf_batches) == steps and {x["source"].shape for x, _ in tf_batches} <= {
        (16, length) for length in plan.lengths}


def test_eval_records_equal_tf_data(demo):
    for model in ("transformer", "gnmt"):
        manifest = read_manifest(demo[model], model)
        numpy_sources, numpy_refs, vocab = text.load_eval_records(demo[model], manifest, reader="numpy")
        tf_sources, tf_refs, tf_vocab = text.load_eval_records(demo[model], manifest)
        assert numpy_refs == tf_refs and vocab == tf_vocab and len(numpy_sources) == len(tf_sources) > 0
        assert all((a == b).all() for a, b in zip(numpy_sources, tf_sources))


def test_a_corrupted_record_is_refused_with_its_file_named(demo, tmp_path):
    from mlperf_keras.inputs.manifest import DataError

    _, files = _files(demo["transformer"], "transformer")
    broken = tmp_path / "broken.tfrecord"
    data = bytearray(open(files[0], "rb").read())
    data[40] ^= 0xFF
    broken.write_bytes(bytes(data))
    with pytest.raises(DataError, match="broken.tfrecord"):
        list(text_numpy.shuffled_pairs([str(broken)], 0, 1, 1 << 30, 0))


def test_the_reader_choice():
    from mlperf_keras.config import ConfigError

    assert text_numpy.choose_reader("auto", "tensorflow") == "tf.data"
    assert text_numpy.choose_reader("numpy", "jax") == "numpy"
    with pytest.raises(ConfigError, match="runs on the JAX backend"):
        text_numpy.choose_reader("numpy", "tensorflow")
    with pytest.raises(ConfigError, match="expected one of auto, tf.data, numpy"):
        text_numpy.choose_reader("fast", "jax")


@pytest.mark.slow
def test_the_transformer_trains_on_jax_from_records_without_tensorflow(demo, tmp_path):
    from tests.conftest import mllog_events, run_on_jax_without_tensorflow

    pytest.importorskip("jax")
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--model=transformer", "--backend=jax", f"--data_dir={demo['transformer']}",
                  f"--output_dir={tmp_path}", "--seed=2", "--max_epochs=1", "--batch_size=1024", "--division=open",
                  "--hparams=input_reader=numpy,d_model=32,num_layers=1,num_heads=2,filter_size=64,max_length=32,"
                  "shuffle_buffer=256,eval_batch_size=64,beam_size=1,extra_decode_length=4"],
        tmp_path)
    assert check["tensorflow_imported"] is False and check["exit"] in (0, 5), lines[-5:]
    events = mllog_events(json.loads(lines[-1])["log"])
    assert [e["key"] for e in events].count("eval_accuracy") == 1
    # the length buckets' shapes were compiled before the first batch (loop.compile_ahead), not in the epoch
    assert any("compiled 5 batch shapes" in line for line in lines), lines[:6]
    assert not any("compiling the train step (its first call)" in line for line in lines)


def test_a_record_that_is_not_a_training_pair_is_refused_with_its_folder_named(tmp_path):
    import tensorflow as tf

    from mlperf_keras.inputs.manifest import DataError

    path = tmp_path / "train-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(text.serialize_eval(0, [5, 6, 1]))   # an eval record: inputs and index, no targets
    with pytest.raises(DataError, match=f"{tmp_path} \\(1 record files\\): a record without 'targets'"):
        list(text_numpy.shuffled_pairs([str(path)], 0, 1, 1 << 30, 0))
