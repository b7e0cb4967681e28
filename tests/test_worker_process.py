"""inputs/worker_process.Blobs: a batch's byte strings cross from a worker through a shared-memory file (read-only
views in the parent, the file gone on arrival), or through the pipe where no such file can be made. The worker
process itself is tested through the pipelines that use it (test_imagenet_gpu, test_ssd_jax)."""
from __future__ import annotations

import os
import pickle

import numpy as np

from mlperf_keras.inputs import worker_process


def test_blobs_travel_through_a_shared_file_and_leave_nothing_behind(tmp_path, monkeypatch):
    items = [b"\xff\xd8first", b"", os.urandom(70_000)]
    assert pickle.loads(pickle.dumps(worker_process.Blobs(items))) == items   # outside a worker: plain bytes
    monkeypatch.setattr(worker_process, "_SHM_DIR", str(tmp_path))
    monkeypatch.setattr(worker_process, "_shm_prefix", ["mlperf-input-test"])
    arrived = pickle.loads(pickle.dumps(worker_process.Blobs(items)))
    assert isinstance(arrived, worker_process.Blobs) and len(arrived) == 3
    assert all(isinstance(a, np.ndarray) and a.dtype == np.uint8 and not a.flags.writeable for a in arrived)
    assert [a.tobytes() for a in arrived] == items
    assert os.listdir(tmp_path) == []

    monkeypatch.setattr(worker_process, "_SHM_DIR", str(tmp_path / "missing"))
    fallback = pickle.loads(pickle.dumps(worker_process.Blobs(items)))
    assert list(fallback) == items and isinstance(fallback[0], bytes)


def _environment(shard=(0, 1)):
    yield os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("JAX_PLATFORMS"), worker_process.depth_ahead(), shard


def test_gpu_workers_see_the_parents_devices_and_keep_jax_off_them(monkeypatch):
    """stream(gpu=True) (inputs/decode_process's workers): the parent's CUDA devices for CuPy, JAX on the CPU; the
    planning workers see no device. depth_ahead is the queue size the worker was started with."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert list(worker_process.stream(_environment, {}, depth=2, workers=2, gpu=True)) == [
        ("3", "cpu", 2, (0, 2)), ("3", "cpu", 2, (1, 2))]
    assert list(worker_process.stream(_environment, {}, depth=2)) == [("", "cpu", 2, (0, 1))]
