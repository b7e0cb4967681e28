"""Streams of TFRecord records without TensorFlow, as tf.data orders them: files interleaved one record at a time,
a shuffle buffer, and a background thread that builds items ahead (the JAX input pipelines: inputs/imagenet_gpu.py,
inputs/text_numpy.py)."""
from __future__ import annotations

import queue
import threading
from typing import Iterator

import numpy as np

from mlperf_keras.inputs import record_reader


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
    """The items of `make` built by a background thread, up to depth ahead; its errors re-raised here."""
    items: queue.Queue = queue.Queue(maxsize=max(1, depth))
    done = object()
    stop = threading.Event()

    def work():
        try:
            for item in make:
                while not stop.is_set():
                    try:
                        items.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(done)
        except BaseException as e:  # noqa: BLE001 (handed to the consumer)
            items.put(e)

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
