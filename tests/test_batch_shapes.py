"""Workload.batch_shapes, what the loop compiles ahead: exactly the shapes and dtypes an epoch of the worker's training
batches takes on the JAX backend (the translation workloads' length buckets with both readers, one worker and the
second of two; the image workloads' and NCF's, each pipeline); and the loop compiles them while init runs, before
run_start from v0.6 (v0.5: after it)."""
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


@pytest.fixture(scope="module")
def image_demos(tmp_path_factory):
    from data_prep import demos

    cache = str(tmp_path_factory.mktemp("batch_shapes_image_demos"))
    return {m: demos.prepare(m, cache, log=lambda _: None) for m in ("resnet", "ssd", "maskrcnn", "ncf")}


def _declared_and_seen(workload, config, dist, manifest, batches: int = 40) -> tuple[list, set]:
    import itertools

    declared = [_key(b) for b in workload.batch_shapes(config, dist, manifest)]
    return declared, {_key(b) for b in itertools.islice(workload.train_data(config, dist, manifest).batches(0), batches)}


@pytest.mark.parametrize("model", ["resnet", "ssd", "maskrcnn", "ncf"])
def test_one_batch_per_shape_of_the_image_and_ncf_epochs(image_demos, model):
    """The synthetic batch's shape where the epoch has one; Mask R-CNN's two orientations (the demo has both). On
    the JAX backend with TensorFlow installed the images come through tf.data (the JAX pipelines: next test)."""
    workload, manifest, config, dist = resolve_run(model, data_dir=image_demos[model])
    declared, seen = _declared_and_seen(workload, dataclasses.replace(config, backend="jax"), dist, manifest)
    assert len(declared) == len(set(declared)) == (2 if model == "maskrcnn" else 1)
    assert set(declared) == seen


_JAX_PIPELINES = """
import dataclasses, json, sys
sys.path.insert(0, %(root)r)
from tests.conftest import resolve_run
from tests.test_batch_shapes import _declared_and_seen
out = {}
for model, data_dir in %(demos)r.items():
    workload, manifest, config, dist = resolve_run(model, data_dir=data_dir)
    config = dataclasses.replace(config, backend="jax", hparams={**config.hparams, "input_pipeline": "host"})
    declared, seen = _declared_and_seen(workload, config, dist, manifest)
    out[model] = [len(declared), len(set(declared)), set(declared) == seen]
print(json.dumps(out))
"""


def test_one_batch_per_shape_of_the_jax_image_pipelines(image_demos):
    """As above for the JAX pipelines (input_pipeline=host: the host decoder in place of the GPU's), which run on
    the JAX backend only: in a fresh interpreter."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    demos = {m: image_demos[m] for m in ("resnet", "ssd", "maskrcnn")}
    proc = subprocess.run([sys.executable, "-c", _JAX_PIPELINES % {"root": root, "demos": demos}], cwd=root,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"resnet": [1, 1, True], "ssd": [1, 1, True], "maskrcnn": [2, 2, True]}


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
