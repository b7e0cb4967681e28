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
