"""Streams of TFRecord records without TensorFlow, as tf.data orders them: files interleaved one record at a time,
a shuffle buffer, and a background thread that builds items ahead (the JAX input pipelines: inputs/imagenet_gpu.py,
inputs/ssd_jax.py, inputs/text_numpy.py)."""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

import numpy as np

from mlperf_keras.inputs import record_reader
from mlperf_keras.inputs.manifest import DataError


def interleave(paths: list[str], cycle_length: int) -> Iterator[bytes]:
    """Records of up to cycle_length open files one at a time in turn; a finished file's slot takes the next file
    (tf.data's interleave with block_length=1)."""
    pending = iter(paths)
    slots = []
    for path in pending:
        slots.append(record_reader.iter_records(path))
        if len(slots) == cycle_length:
            break
    while slots:
        i = 0
        while i < len(slots):
            try:
                yield next(slots[i])
                i += 1
            except StopIteration:
                nxt = next(pending, None)
                if nxt is None:
                    del slots[i]
                else:
                    slots[i] = record_reader.iter_records(nxt)


def shuffled(stream: Iterator[bytes], buffer_size: int, rng: np.random.Generator) -> Iterator[bytes]:
    """tf.data's shuffle: a buffer of buffer_size elements, each output a uniform pick replaced by the next input."""
    buffer, uniforms, used = [], rng.random(4096), 0

    def pick() -> int:
        nonlocal uniforms, used
        if used == len(uniforms):  # drawn in blocks: one Generator call per record costs more than the rest
            uniforms, used = rng.random(4096), 0
        used += 1
        return int(uniforms[used - 1] * len(buffer))

    for record in stream:
        if len(buffer) < buffer_size:
            buffer.append(record)
            continue
        i = pick()
        yield buffer[i]
        buffer[i] = record
    while buffer:
        i = pick()
        buffer[i], buffer[-1] = buffer[-1], buffer[i]
        yield buffer.pop()


def prefetched(make: Iterator, depth: int, name: str = "input"):
    """The items of `make` built by a background thread, up to depth ahead; its errors re-raised here.
    Closing this generator (or dropping it) stops the thread and waits for it to finish the item in hand, and
    closes `make` (so a chain of prefetched stages stops from the end): a thread left decoding on the GPU while the
    interpreter exits aborts the process."""
    items: queue.Queue = queue.Queue(maxsize=max(1, depth))
    done = object()
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            for item in make:
                if not offer(item):
                    return
            offer(done)
        except BaseException as e:  # noqa: BLE001 (handed to the consumer)
            offer(e)
        finally:
            close = getattr(make, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=work, daemon=True, name=name)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        if thread is not threading.current_thread():
            thread.join(timeout=30)


def epoch_stream(paths: list[str], *, seed: int, epoch: int, num_samples: int, shuffle_buffer: int = 10_000,
                 cycle_length: int = 10, parse: Callable | None = None) -> Iterator:
    """One worker's epoch of training records, num_samples of them: every record of `paths` once, in a seeded
    shuffled order (files in a seeded order, cycle_length of them interleaved, a shuffle buffer), then read again from
    the start (a new file order) until num_samples are out, as the tf.data paths' repeat().take(num_samples).

    parse: record -> item, or None to leave the record out (SSD's images without objects); applied before the
    shuffle buffer, as the tf.data paths map and filter before they shuffle. NumPy's generator from (seed, epoch):
    the same kind of order as tf.data's, not the same draws."""
    if not paths:
        raise DataError("no record files to read")
    rng = np.random.default_rng([int(seed), int(epoch), 0x5EED])
    out = 0
    while True:
        order = [paths[i] for i in rng.permutation(len(paths))]
        stream = interleave(order, max(1, min(cycle_length, len(order))))
        if parse is not None:
            stream = (item for item in map(parse, stream) if item is not None)
        if shuffle_buffer > 1:
            stream = shuffled(stream, shuffle_buffer, rng)
        empty = True
        for item in stream:
            empty = False
            yield item
            out += 1
            if out == num_samples:
                return
        if empty:
            raise DataError(f"the record files hold no {'usable ' if parse else ''}records: {paths[0]} ...")


def in_order(paths: list[str], cycle_length: int = 10) -> Iterator[bytes]:
    """Every record of `paths` once, files interleaved in the given order (as inputs/records.record_dataset without a
    shuffle seed: the evaluation order)."""
    if not paths:
        raise DataError("no record files to read")
    return interleave(list(paths), max(1, min(cycle_length, len(paths))))
