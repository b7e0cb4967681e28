"""Workload.batch_shapes, what the loop compiles ahead: for the translation workloads exactly the shapes and dtypes an
epoch of the worker's training batches takes (checked against the batches of both readers, one worker and the
second of two); and the loop compiles them while init runs, before run_start from v0.6 (v0.5: after it)."""
from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from tests.conftest import resolve_run


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from data_prep import demos

    cache = str(tmp_path_factory.mktemp("batch_shapes_demo"))
    return {m: demos.prepare(m, cache, log=lambda _: None) for m in ("transformer", "gnmt")}


def _key(batch) -> tuple:
    """A batch's structure with each array's shape and dtype (what a compiled step is specific to)."""
    if isinstance(batch, dict):
        return tuple((k, _key(v)) for k, v in sorted(batch.items()))
    if isinstance(batch, tuple):
        return tuple(_key(v) for v in batch)
    array = np.asarray(batch)
    return array.shape, str(array.dtype)


@pytest.mark.parametrize("model,batch_size,max_length", [("transformer", 2048, 64), ("gnmt", 32, 20)])
@pytest.mark.parametrize("reader", ["numpy", "tf.data"])
@pytest.mark.parametrize("rank,world_size", [(0, 1), (1, 2)])
def test_the_declared_shapes_are_the_epochs_shapes(demo, model, batch_size, max_length, reader, rank, world_size):
    workload, manifest, config, _ = resolve_run(model, data_dir=demo[model], batch_size=batch_size)
    config = dataclasses.replace(config, backend="jax", num_workers=world_size,
                                 hparams={**config.hparams, "input_reader": reader, "max_length": max_length})
    dist = types.SimpleNamespace(rank=rank, world_size=world_size)
    declared = [_key(b) for b in workload.batch_shapes(config, dist, manifest)]
    seen = {_key(b) for b in workload.train_data(config, dist, manifest).batches(0)}
    assert len(declared) == len(set(declared)) >= 2     # one batch per shape; the demo's lengths fill several buckets
    assert set(declared) == seen


def _skewed_copy(demo_dir: str, out, shard_lengths: list[list[int]]) -> dict:
    """The demo's manifest with its training shards replaced by pairs of the given lengths (one list per shard),
    written as data_prep.wmt writes them (the manifest's histogram of the longer side)."""
    import json
    import shutil

    import tensorflow as tf

    from mlperf_keras.inputs import text

    shutil.copytree(demo_dir, out)
    manifest = json.load(open(out / "manifest.json"))
    files = [f for f in manifest["files"] if f["split"] != "train"]
    rng = np.random.default_rng(0)
    for k, lengths in enumerate(shard_lengths):
        name = f"train-{k:05d}-of-{len(shard_lengths):05d}.tfrecord"
        with tf.io.TFRecordWriter(str(out / name)) as writer:
            for length in lengths:
                writer.write(text.serialize_pair(rng.integers(4, 50, length).tolist(),
                                                 rng.integers(4, 50, max(1, length - 1)).tolist()))
        files.append({"name": name, "rows": len(lengths), "split": "train",
                      "lengths": text.length_histogram(lengths, manifest["counts"]["max_length"])})
    manifest["files"] = files
    manifest["counts"]["train_pairs"] = sum(map(len, shard_lengths))
    return manifest


def test_the_edges_of_an_epoch_are_declared_too(demo, tmp_path):
    """A Transformer worker with fewer batches than the epoch's steps gets empty batches of the first bucket's
    shape; GNMT drops a bucket holding less than one global batch."""
    shards = [[5] * 300 + [15] * 3, [18] * 40]   # worker 0: 2 buckets, several batches; worker 1: one bucket, 1 batch
    manifest = _skewed_copy(demo["transformer"], tmp_path / "transformer", shards)
    workload, _, config, _ = resolve_run("transformer", data_dir=demo["transformer"], batch_size=2048)
    config = dataclasses.replace(config, backend="jax", num_workers=2, data_dir=str(tmp_path / "transformer"),
                                 hparams={**config.hparams, "input_reader": "numpy", "max_length": 20})
    for rank, first_bucket_empty in ((0, False), (1, True)):
        dist = types.SimpleNamespace(rank=rank, world_size=2)
        declared = {_key(b) for b in workload.batch_shapes(config, dist, manifest)}
        batches = list(workload.train_data(config, dist, manifest).batches(0))
        assert declared == {_key(b) for b in batches}
        assert (not np.asarray(batches[-1][1]).any()) == first_bucket_empty

    manifest = _skewed_copy(demo["gnmt"], tmp_path / "gnmt", [[6] * 70 + [16] * 10, [6] * 70 + [16] * 10])
    workload, _, config, _ = resolve_run("gnmt", data_dir=demo["gnmt"], batch_size=32)
    config = dataclasses.replace(config, backend="jax", data_dir=str(tmp_path / "gnmt"),
                                 hparams={**config.hparams, "input_reader": "numpy", "max_length": 20})
    dist = types.SimpleNamespace(rank=0, world_size=1)
    declared = {_key(b) for b in workload.batch_shapes(config, dist, manifest)}
    assert declared == {_key(b) for b in workload.train_data(config, dist, manifest).batches(0)}
    assert len(declared) == 1   # the 20 pairs of length 16 do not fill a global batch of 32: dropped


def test_batch_shapes_are_none_by_default(prepared_ncf):
    workload, manifest, config, dist = resolve_run("ncf", data_dir=prepared_ncf)
    assert workload.batch_shapes(config, dist, manifest) == []


class _Step:
    """A train step that records when precompile ran, against the MLPerf log written so far."""

    def __init__(self, log_path_of):
        self.log_path_of, self.calls = log_path_of, []

    def precompile(self, batches, say=None):
        batches = list(batches)
        with open(self.log_path_of()) as f:
            self.calls.append(([_key(b) for b in batches], f.read()))
        return {"shapes": len(batches), "compiled": len(batches), "threads": 1, "seconds": 0.0}


@pytest.mark.parametrize("ruleset,before_run_start", [("0.6", True), ("0.5", False)])
def test_the_loop_compiles_the_declared_shapes_during_init(demo, monkeypatch, tmp_path, ruleset, before_run_start):
    from mlperf_keras import loop

    workload, manifest, config, dist = resolve_run("transformer", data_dir=demo["transformer"], batch_size=2048,
                                                   ruleset=ruleset, output_dir=str(tmp_path))
    step = _Step(lambda: next(str(p) for p in tmp_path.rglob("*.log")))
    monkeypatch.setattr(loop, "build", lambda *a: (None, step))

    class Stop(Exception):
        pass

    def stop_at_training(*a, **k):
        raise Stop

    monkeypatch.setattr(loop, "_train", stop_at_training)
    with pytest.raises(Stop):
        loop.run(config, workload, dist, manifest)
    [(compiled, log_so_far)] = step.calls
    assert compiled == [_key(b) for b in workload.batch_shapes(config, dist, manifest)] and len(compiled) >= 2
    assert "init_start" in log_so_far and ('"run_start"' in log_so_far) != before_run_start
