"""JPEG batches read, planned and decoded on the GPU in worker processes of their own (hparam decode_workers), each
batch's canvas handed to the training process through CUDA IPC.

Why: in the training process the decode shares the interpreter with the train step's dispatch and the planning
thread, and nvImageCodec's decode call takes the GIL many times a batch (beside a thread running Python, 3 s a
batch of 256 on an H100). Worker processes have interpreters of their own, and two of them decode two batches at
once. What they do not escape is the busy GPU: on an H100 a batch's region decode ran at 17,788 images/s alone,
3,372 beside a JAX load in its process and 2,549 beside the same load in another process (its own CUDA context).
Fed from two workers, ResNet-50 ran at 0.714 and 0.710 of its step on resident batches against 0.661 decoding in
the training process, SSD at 0.736 and 0.606 against 0.542 (one H100, two calls); one worker, which plans and
decodes in turn, fed ResNet-50 at 0.579, and three at 0.704. decode_workers stays 0 (off) by default: the gain is
measured on one machine, and each worker's CUDA context and canvases take GPU memory beside JAX's pool (not tried
on a 16 GB card).

A worker (inputs/worker_process, with the GPU visible and JAX kept off it) runs the pipeline's host half for every
N-th batch, decodes the batch into one of a ring of canvases it allocated (cudaMalloc, exported once by
cudaIpcGetMemHandle) and sends the canvas's handle with the batch's geometry and labels. The training process maps
each handle once and copies the batch's bytes into a canvas of its own before it asks for the next batch. That copy
is what lets the worker reuse its canvases: the worker runs at most `depth` items ahead of the batch being copied, so
a ring of depth + 3 canvases is never written while read (worker_process.depth_ahead: the worker's queue size).
"""
from __future__ import annotations

import functools
import os
from typing import Callable, Iterator

from mlperf_keras.inputs import jpeg_batches


class SharedCanvas:
    """Where a worker decoded a batch: its process and the IPC handle of the canvas (bytes)."""

    def __init__(self, pid: int, handle: bytes):
        self.pid, self.handle = pid, handle


# ---- in the worker ----

class _Ring:
    """`count` canvases of one size, used in turn; when a batch needs more, a new ring of the larger size. The old
    canvases are kept (the training process may still have them mapped; freeing would also synchronise the device):
    sizes are powers of two, so the old rings add less than the current one."""

    def __init__(self, count: int):
        self.count, self.size, self.canvases, self.old, self.turn = count, 0, [], [], 0

    def take(self, size: int):
        import cupy

        if size > self.size:
            self.old.extend(self.canvases)
            self.canvases = []
            for _ in range(self.count):
                memory = cupy.cuda.Memory(size)   # its own cudaMalloc: an IPC handle names a whole allocation
                array = cupy.ndarray((size,), cupy.uint8, cupy.cuda.MemoryPointer(memory, 0))
                self.canvases.append((array, cupy.cuda.runtime.ipcGetMemHandle(memory.ptr)))
            self.size = size
        self.turn = (self.turn + 1) % self.count
        return self.canvases[self.turn]


_rings: dict = {}


def _ring(count: int) -> _Ring:
    """The worker's ring, kept from stream to stream (epoch to epoch), so the parent maps each canvas once."""
    if count not in _rings:
        _rings[count] = _Ring(count)
    return _rings[count]


def decoded_batches(make: Callable[..., Iterator], kwargs: dict, hardware: bool, shard: tuple = (0, 1)) -> Iterator:
    """In a worker: the plans of make(**kwargs, shard=shard), each batch decoded on the GPU into a canvas of the
    worker's ring, its JPEGs replaced by the SharedCanvas: a plan is a tuple (jpegs, geometry, *rest) (ResNet's) or
    an object with .jpegs and .geometry (SSD's TrainPlan)."""
    from mlperf_keras.inputs import worker_process

    decoder = jpeg_batches.GpuDecoder(hardware=hardware)
    # Sent items the parent has not taken, the one it is copying, and the one being written: depth + 2 canvases
    # in use at most. The parent copies a batch before it takes the next.
    ring = _ring(worker_process.depth_ahead() + 3)
    for plan in make(**kwargs, shard=shard):
        jpegs, geometry = plan[:2] if isinstance(plan, tuple) else (plan.jpegs, plan.geometry)
        canvas, handle = ring.take(geometry.canvas_size())
        decoder.decode_into(jpegs, geometry, canvas)
        shared = SharedCanvas(os.getpid(), handle)
        if isinstance(plan, tuple):
            yield (shared, *plan[1:])
        else:
            plan.jpegs = shared
            yield plan


# ---- in the training process ----

class SharedCanvases:
    """The training process's side: maps each worker canvas once and copies a batch out of it."""

    def __init__(self):
        import cupy

        self._cupy = cupy
        self._mapped: dict = {}
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def canvas(self, shared: SharedCanvas, geometry: jpeg_batches.CanvasLayout):
        """The batch's canvas as a JAX array of the training process's own memory, complete when this returns (so the
        worker may write the shared canvas again)."""
        import jax

        cp = self._cupy
        source = self._map(shared)
        canvas = cp.empty(geometry.canvas_size(), cp.uint8)
        cp.cuda.runtime.memcpyAsync(canvas.data.ptr, source, geometry.needed, cp.cuda.runtime.memcpyDeviceToDevice,
                                    self._stream.ptr)
        self._stream.synchronize()
        return jax.dlpack.from_dlpack(canvas)

    def _map(self, shared: SharedCanvas) -> int:
        key = (shared.pid, shared.handle)
        if key not in self._mapped:
            self._mapped[key] = self._cupy.cuda.runtime.ipcOpenMemHandle(shared.handle)
        return self._mapped[key]


def used(decode_workers: int, decoder) -> bool:
    """Whether a pipeline given hparam decode_workers and its decoder decodes in GPU workers: only a GPU decoder
    does (said once where the decoder fell back to the host)."""
    if decode_workers <= 0:
        return False
    if isinstance(decoder, jpeg_batches.GpuDecoder):
        return True
    jpeg_batches.say_once(f"input: decode_workers={decode_workers} unused: JPEGs are decoded on the host here")
    return False


@functools.cache
def shared_canvases() -> SharedCanvases:
    """The process's one SharedCanvases (a handle is mapped once a process)."""
    return SharedCanvases()


def plans_and_decoder(make: Callable[..., Iterator], kwargs: dict, decoder, *, prefetch: int, plan_workers: int,
                      decode_workers: int, name: str) -> tuple:
    """A JAX pipeline's batch plans (the items of make(**kwargs)) and the decoder to decode them with: planned in a
    thread (plan_workers 0), in plan_workers processes, or, with a GPU decoder and decode_workers > 0, planned and
    decoded in decode_workers GPU processes (their plans then carry SharedCanvas for shared_canvases())."""
    from mlperf_keras.inputs import record_streams, worker_process

    if used(decode_workers, decoder):
        return stream(make, kwargs, decoder.hardware, decode_workers, prefetch), shared_canvases()
    if plan_workers > 0:
        return worker_process.stream(make, kwargs, prefetch, plan_workers), decoder
    return record_streams.prefetched(make(**kwargs), prefetch, name), decoder


def stream(make: Callable[..., Iterator], kwargs: dict, hardware: bool, workers: int, depth: int = 2) -> Iterator:
    """make's plans (decoded_batches), `workers` GPU worker processes each decoding every workers-th batch (make
    takes shard=(k, workers)); the plans' SharedCanvas and geometry go to shared_canvases().canvas."""
    from mlperf_keras.inputs import worker_process

    where = "the GPU's hardware JPEG engines" if hardware else "the GPU"
    jpeg_batches.say_once(f"input: records read and JPEGs decoded on {where} (nvImageCodec) in {workers} worker "
                          f"process{'es' if workers > 1 else ''}, resized in this one (JAX)")

    job = dict(make=make, kwargs=kwargs, hardware=hardware)
    return worker_process.stream(decoded_batches, job, depth, workers, gpu=True)


__all__ = ["SharedCanvas", "SharedCanvases", "decoded_batches", "plans_and_decoder", "shared_canvases", "stream",
           "used"]
