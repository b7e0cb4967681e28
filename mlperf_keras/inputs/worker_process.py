"""The host half of a JAX input pipeline (reading records, parsing them, planning each batch's crops) run in worker
processes, its items sent back through a pipe (and a batch's JPEGs through a shared-memory file: Blobs).

Why: in one process the pipeline's Python shares the interpreter with the thread that dispatches the train step. On
an H100, ResNet-50's GPU-decode pipeline alone delivered 1.23x the step's rate at 1.2 host cores, and fed the step
at 0.74 of it. A worker process has its own interpreter. One worker planning every batch was slower than that
thread (alone 4,974 images/s, fed 0.67, another H100), so the pipelines plan in a thread unless asked for workers
(hparam input_workers); with N workers each plans every N-th batch (`stream(..., workers=N)`). Measured since,
on one H100: two workers fed ResNet-50 at 0.68 against 0.66-0.69 from the thread, three at 0.58, SSD 0.60 against
0.62-0.66; so the plan is not what limits the pipeline there (its GPU decode stage is: benchmarks/RESULTS.md).

Workers started with stream(gpu=True) see the parent's GPU (JAX kept on their CPU): inputs/decode_process's, which
also decode each batch there.

A long-lived worker serves one stream at a time (a pipeline asks for one per epoch, so a worker is started once,
not once an epoch); a stream open at the same time gets another worker. Workers are spawned, not forked (the
parent holds CUDA and JAX's threads), and stop with the parent. Items and errors (DataError and the like) arrive in
order; closing a stream early stops the worker's generator and leaves the worker for the next stream.
"""
from __future__ import annotations

import atexit
import itertools
import multiprocessing
import os
import queue
import sys
import threading
import types
from typing import Callable, Iterator

_POLL_S = 0.5
_CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}
_JAX_ON_CPU = {"JAX_PLATFORMS": "cpu"}   # a GPU worker: CUDA for CuPy, and JAX (if imported) off the GPU
_idle: dict = {False: [], True: []}   # idle workers, by whether they see the GPU
_all: list = []
_lock = threading.Lock()
_job_ids = itertools.count()


# ---- byte strings through shared memory ----

_SHM_DIR = "/dev/shm"
_shm_names = itertools.count()
_shm_prefix: list = []   # set in the worker: its files' name prefix (the parent's pid in it)
_depth: list = []        # set in the worker: how many items it may send ahead of the parent's reads


def depth_ahead() -> int:
    """In a worker: the most items it sends that the parent has not yet taken (its queue's size)."""
    return _depth[0]


class Blobs(list):
    """A list of byte strings (a batch's JPEGs, 17 MB for ResNet's 256) that a worker sends through a shared-memory
    file rather than the pipe, so neither side copies them through the kernel in 64 KB pieces (on an H100 machine the
    pipeline's host CPU was 0.274 CPU-ms an image this way against 0.279 through the pipe: not what limits it). The
    parent gets read-only uint8 NumPy views of one mapping, which the file's name no longer holds (unlinked on
    arrival), so the memory goes when the last view does. Where /dev/shm is missing or full they travel by the pipe,
    as bytes. Anywhere else (the plan in a thread) a plain list."""

    def __reduce_ex__(self, protocol):
        if _shm_prefix:
            try:
                return _attach, _write_shared(list(self))
            except OSError:
                pass
        return Blobs, (list(self),)


def _write_shared(items: list) -> tuple:
    lengths = [len(b) for b in items]
    if not sum(lengths):
        raise OSError("nothing to share")
    path = os.path.join(_SHM_DIR, f"{_shm_prefix[0]}-{next(_shm_names)}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb", buffering=0) as f:
            for b in items:
                view = memoryview(b)
                while view:
                    view = view[f.write(view):]
    except OSError:
        os.unlink(path)
        raise
    return path, lengths


def _attach(path: str, lengths: list) -> Blobs:
    import mmap

    import numpy as np

    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = mmap.mmap(fd, sum(lengths), access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
        os.unlink(path)
    whole = np.frombuffer(mapped, np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return Blobs(whole[lo:hi] for lo, hi in zip(offsets[:-1], offsets[1:]))


def _remove_leftovers(parent: int):
    """Shared files of items a worker sent that never arrived (the parent stopped first)."""
    import glob

    for path in glob.glob(os.path.join(_SHM_DIR, f"mlperf-input-{parent}-*")):
        try:
            os.unlink(path)
        except OSError:
            pass


# ---- the worker ----

def _serve(jobs, results, cancel, parent: int, depth: int = 2):
    """The worker's loop: each job is (id, make, kwargs); every item of make(**kwargs) is sent as (id, "item", x),
    then (id, "done", None), or (id, "error", exception). Stops when the parent is gone or sends None."""
    _depth.append(depth)

    if os.path.isdir(_SHM_DIR):
        _shm_prefix.append(f"mlperf-input-{parent}-{os.getpid()}")

    def send(message) -> bool:
        while not cancel.is_set():
            try:
                results.put(message, timeout=_POLL_S)
                return True
            except queue.Full:
                if os.getppid() != parent:
                    raise SystemExit(0) from None
        return False

    while True:
        try:
            job = jobs.get(timeout=_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if job is None:
            return
        job_id, make, kwargs = job
        outcome = ("done", None)
        try:
            for item in make(**kwargs):
                if not send((job_id, "item", item)):
                    outcome = None
                    break
        except BaseException as e:  # noqa: BLE001 (handed to the parent)
            outcome = ("error", _picklable(e))
        if outcome is not None and send((job_id, *outcome)):
            continue
        # cancelled: the parent waits for this mark before it hands the worker to another stream
        cancel.clear()
        results.put((job_id, "cancelled", None))


def _picklable(error: BaseException) -> BaseException:
    """The error itself, or a RuntimeError with its text where it cannot be pickled (the queue would drop it and
    leave the parent waiting)."""
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(error).__name__}: {error}")


class _Worker:
    def __init__(self, depth: int, gpu: bool = False):
        ctx = multiprocessing.get_context("spawn")
        self.jobs, self.results, self.cancel = ctx.Queue(), ctx.Queue(maxsize=max(1, depth)), ctx.Event()
        self.process = ctx.Process(target=_serve, args=(self.jobs, self.results, self.cancel, os.getpid(), depth),
                                   daemon=True, name="mlperf-input-worker")
        # A spawned child imports the parent's __main__ module, running a script's top level again (and the entry
        # points import Keras and JAX): shown a bare __main__ while it starts, it imports only what unpickling the
        # job needs. Hidden from the GPU unless asked for (it reads records and plans batches).
        self.gpu = gpu
        env = _JAX_ON_CPU if gpu else _CPU_ONLY
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            self.process.start()
        finally:
            sys.modules["__main__"] = main
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def get(self):
        while True:
            try:
                return self.results.get(timeout=_POLL_S)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(f"the input worker process died (exit code {self.process.exitcode})") from None

    def stop(self):
        if self.process.is_alive():
            self.jobs.put(None)
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.terminate()


def _stop_all():
    for worker in _all:
        worker.stop()
    if _all:
        _remove_leftovers(os.getpid())


atexit.register(_stop_all)


def stream(make: Callable[..., Iterator], kwargs: dict, depth: int = 2, workers: int = 1,
           gpu: bool = False) -> Iterator:
    """The items of make(**kwargs), built in worker processes (`make` a module-level generator function, its
    arguments and items picklable), started at once. depth: the items each worker builds ahead (fixed when a worker
    starts). gpu: workers that see the parent's CUDA devices (for CuPy; JAX stays on their CPU), else none.

    workers > 1: each worker k runs make(**kwargs, shard=(k, workers)), which must yield the items i with
    i % workers == k of the whole sequence, in order; they are handed out in turn, so the sequence is the one-worker
    sequence."""
    if workers <= 1:
        return _one(make, kwargs, depth, gpu)
    return _in_turn([_one(make, {**kwargs, "shard": (k, workers)}, depth, gpu) for k in range(workers)])


def _in_turn(streams: list) -> Iterator:
    try:
        while True:
            for s in streams:
                item = next(s, _END)
                if item is _END:
                    return
                yield item
    finally:
        for s in streams:
            s.close()


_END = object()


def _one(make, kwargs: dict, depth: int, gpu: bool = False) -> Iterator:
    with _lock:
        worker = _idle[gpu].pop() if _idle[gpu] else None
        if worker is None or not worker.process.is_alive():
            worker = _Worker(depth, gpu)
            _all.append(worker)
    job_id = next(_job_ids)
    worker.jobs.put((job_id, make, kwargs))
    items = _items(worker, job_id)
    next(items)   # into its try: closing it before its first item still cancels the job and frees the worker
    return items


def _items(worker: _Worker, job_id: int) -> Iterator:
    finished = False
    try:
        yield None
        while True:
            got_id, kind, value = worker.get()
            if got_id != job_id:
                continue   # a message of an earlier, abandoned job
            if kind == "item":
                yield value
            elif kind == "done":
                finished = True
                return
            else:
                finished = True
                raise value
    finally:
        if not finished and worker.process.is_alive():
            # stop the worker's generator, then wait for its mark so its leftover items are not the next stream's
            worker.cancel.set()
            try:
                while True:
                    got_id, kind, _ = worker.get()
                    if got_id == job_id and kind in ("cancelled", "done", "error"):
                        break
            except RuntimeError:
                pass
            worker.cancel.clear()
        if worker.process.is_alive():
            with _lock:
                _idle[worker.gpu].append(worker)


__all__ = ["Blobs", "depth_ahead", "stream"]
