"""Mask R-CNN's per-detection paste and RLE encoding (metrics.coco.encode_pasted_mask), spread over processes.

An evaluation of COCO val pastes about 314,000 masks at image resolution, on the MLPerf clock; in one Python process
that is minutes. Each image's masks go to a pool of worker processes as soon as the accelerator has predicted them,
so the paste runs beside the next batches' predictions and the results come back in order at the end.

The workers are started with "spawn": forking a process that runs TensorFlow or JAX can deadlock the child (their
threads hold locks across fork). They import only NumPy, pycocotools and this package's metrics, and live for the
whole run (started at the first evaluation).
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os

import numpy as np

MAX_AUTO_PROCESSES = 8


def encode_image_masks(masks: np.ndarray, boxes: np.ndarray, height: int, width: int) -> list[dict]:
    """One image's K masks (K, M, M) of probabilities at boxes (K, 4) in image pixels -> K COCO RLEs."""
    from mlperf_keras.metrics import coco

    return [coco.encode_pasted_mask(m, b, height, width) for m, b in zip(masks, boxes)]


def auto_processes() -> int:
    """The host's cores shared among the training workers on it, one left to each worker itself, at most 8;
    1 (no pool, paste in the worker) where that leaves fewer than 2."""
    from mlperf_keras import distribute

    local = distribute.local_workers()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = cores // max(local, 1) - 1
    return min(share, MAX_AUTO_PROCESSES) if share >= 2 else 1


class PastePool:
    """submit(masks, boxes, height, width) -> a future of encode_image_masks' RLEs.

    processes: worker processes (0: auto_processes()); 1 pastes in this process at submit time (no pool)."""

    def __init__(self, processes: int = 0):
        if processes < 0:
            raise ValueError(f"paste processes {processes}: 0 (auto), 1 (none) or more")
        self.processes = processes or auto_processes()
        self._executor = None

    def submit(self, masks, boxes, height: int, width: int) -> concurrent.futures.Future:
        if self.processes == 1:
            done = concurrent.futures.Future()
            done.set_result(encode_image_masks(masks, boxes, height, width))
            return done
        if self._executor is None:
            self._executor = concurrent.futures.ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn"))
        return self._executor.submit(encode_image_masks, np.ascontiguousarray(masks, np.float32),
                                     np.asarray(boxes, np.float64), int(height), int(width))

    def close(self):
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


__all__ = ["MAX_AUTO_PROCESSES", "PastePool", "auto_processes", "encode_image_masks"]
