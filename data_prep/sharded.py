"""What the image data_prep commands (imagenet, coco) share: chunks of images read and checked by a worker pool,
written in submission order into numbered TFRecord shards of a StagedOutput."""
from __future__ import annotations

import collections
import time

import numpy as np

from mlperf_keras.inputs.manifest import StagedOutput


class ShardWriter:
    """Writes one split's serialized records into its shards in order; each shard lands in the manifest when closed.
    Subclasses turn a chunk's results into records in add(shard, results) and call write(shard, record)."""

    def __init__(self, out: StagedOutput, split: str, num_shards: int):
        from mlperf_keras.inputs import records

        self.records = records
        self.out, self.split, self.num_shards = out, split, num_shards
        self.written = 0
        self._writer, self._shard, self._rows = None, None, 0

    def shard_name(self, shard: int) -> str:
        raise NotImplementedError

    def add(self, shard: int, results: list):
        raise NotImplementedError

    def write(self, shard: int, record: bytes):
        if shard != self._shard:
            self.close_shard()
            self._shard, self._rows = shard, 0
            self._writer = self.records.writer(self.out.path(self.shard_name(shard)))
        self._writer.write(record)
        self._rows += 1
        self.written += 1

    def close_shard(self):
        if self._writer is None:
            return
        self._writer.close()
        self.out.add(self.shard_name(self._shard), rows=self._rows, split=self.split)
        self._writer = None


def shard_chunks(items: list, num_shards: int, chunk: int):
    """(shard, up to `chunk` items) in order; shards hold contiguous, equal-sized (+-1) runs of items."""
    bounds = np.linspace(0, len(items), num_shards + 1).astype(int)
    for shard in range(num_shards):
        for lo in range(bounds[shard], bounds[shard + 1], chunk):
            yield shard, items[lo:min(lo + chunk, bounds[shard + 1])]


def convert(pool, process_chunk, source: str, items: list, writer: ShardWriter, chunk: int, log, in_flight: int):
    """process_chunk(source, items) on the pool's workers (or here when pool is None), at most in_flight chunks
    outstanding; results are written in submission order, so the output does not depend on the worker count."""
    start, done, last = time.time(), 0, time.time()
    pending = collections.deque()

    def drain_one():
        nonlocal done, last
        shard, result = pending.popleft()
        results = result.get() if pool is not None else result
        writer.add(shard, results)
        done += len(results)
        if time.time() - last > 30:
            last = time.time()
            log(f"  {writer.split}: {done:,}/{len(items):,} images, {done / (last - start):,.0f} images/s")

    for shard, part in shard_chunks(items, writer.num_shards, chunk):
        if pool is None:
            pending.append((shard, process_chunk(source, part)))
        else:
            pending.append((shard, pool.apply_async(process_chunk, (source, part))))
        while len(pending) >= in_flight:
            drain_one()
    while pending:
        drain_one()
    writer.close_shard()
