"""NCF input: training positives + freshly sampled negatives each epoch, and the fixed leave-one-out eval set.

NCF is the one workload whose whole dataset is a few hundred MB of integers, so it is held in NumPy arrays (and on
the device, for synthetic benchmarks) instead of a tf.data record stream; sampling is vectorised over the epoch.
Sharding: worker r owns the prepared shards r, r+W, r+2W... (contiguous user ranges), so every user's positives are
on one worker and the negative check against "items this user rated" stays local.
"""
from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass

import numpy as np

from mlperf_keras.inputs.manifest import DataError


def load_rows(data_dir: str, files: list[dict], columns: int) -> np.ndarray:
    parts = []
    for entry in files:
        path = os.path.join(data_dir, entry["name"])
        try:
            rows = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable ({e})") from None
        if rows.ndim != 2 or rows.shape[1] != columns or rows.dtype != np.int32:
            raise DataError(f"{path}: expected int32 rows of {columns} columns, found {rows.dtype} {rows.shape}")
        parts.append(rows)
    return np.concatenate(parts) if parts else np.zeros((0, columns), np.int32)


def steps_per_epoch(num_positives_per_worker: list[int], negatives_per_positive: int, per_worker_batch: int) -> int:
    """Every worker runs the same number of steps: enough for the worker with the most samples."""
    most = max(num_positives_per_worker) * (1 + negatives_per_positive)
    return max(1, -(-most // per_worker_batch))


class TrainSampler:
    """One epoch = every local positive once + `negatives` sampled negatives each, shuffled, in fixed-size batches.

    Negatives are drawn uniformly from all items and redrawn while they hit an item the user rated (the reference's
    rejection rule), vectorised: each pass redraws only the collisions. The draw depends on (seed, epoch, rank) only.

    An epoch at ml-20m size is 102.7 M samples, and building it on one core takes about 20 s (benchmarks/
    ncf_pipeline.py): far slower than a GPU trains it. So the work is split into CHUNKS fixed pieces, each with its
    own random stream (the result does not depend on how many threads run them), run on `threads` threads (NumPy
    releases the GIL in these loops). The shuffle is a parallel one: every sample goes to one of CHUNKS buckets
    uniformly at random, each bucket is shuffled on its own, and the buckets are concatenated; that is a uniformly
    random permutation, as one sequential shuffle would give.
    """
    CHUNKS = 64

    def __init__(self, positives: np.ndarray, num_items: int, negatives: int, seed: int, rank: int = 0,
                 threads: int = 1):
        self.users = positives[:, 0].astype(np.int32)
        self.items = positives[:, 1].astype(np.int32)
        self.num_items = num_items
        self.negatives = negatives
        self.seed, self.rank = seed, rank
        self.threads = max(1, int(threads))
        self.rated_keys = np.unique(self.users.astype(np.int64) * num_items + self.items)

    @property
    def samples_per_epoch(self) -> int:
        return len(self.users) * (1 + self.negatives)

    def _is_rated(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        keys = users.astype(np.int64) * self.num_items + items
        pos = np.searchsorted(self.rated_keys, keys).clip(max=len(self.rated_keys) - 1)
        return self.rated_keys[pos] == keys

    def _run(self, function, pieces):
        if self.threads == 1:
            return [function(*piece) for piece in pieces]
        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(lambda piece: function(*piece), pieces))

    def _draw_negatives(self, rng, neg_users: np.ndarray, out: np.ndarray) -> None:
        out[:] = rng.integers(0, self.num_items, size=len(neg_users), dtype=np.int32)
        redo = np.flatnonzero(self._is_rated(neg_users, out))
        while redo.size:
            out[redo] = rng.integers(0, self.num_items, size=redo.size, dtype=np.int32)
            redo = redo[self._is_rated(neg_users[redo], out[redo])]

    def epoch(self, epoch: int):
        """(users, items, labels) for one epoch, shuffled."""
        streams = [np.random.default_rng(s) for s in
                   np.random.SeedSequence([self.seed, epoch, self.rank]).spawn(2 * self.CHUNKS + 1)]
        negative_streams, shuffle_streams, bucket_stream = (streams[:self.CHUNKS], streams[self.CHUNKS:-1],
                                                            streams[-1])
        positives = len(self.users)
        total = positives * (1 + self.negatives)
        users = np.empty(total, np.int32)
        items = np.empty(total, np.int32)
        users[:positives], items[:positives] = self.users, self.items
        users[positives:] = np.repeat(self.users, self.negatives)
        bounds = np.linspace(positives, total, self.CHUNKS + 1).astype(np.int64)
        self._run(lambda rng, lo, hi: self._draw_negatives(rng, users[lo:hi], items[lo:hi]),
                  [(rng, bounds[k], bounds[k + 1]) for k, rng in enumerate(negative_streams)])

        bucket = bucket_stream.integers(0, self.CHUNKS, size=total, dtype=np.uint8)
        order = np.argsort(bucket, kind="stable")   # a radix sort for 8-bit keys
        sizes = np.bincount(bucket, minlength=self.CHUNKS)
        ends = np.cumsum(sizes)
        starts = ends - sizes
        self._run(lambda rng, lo, hi: rng.shuffle(order[lo:hi]),
                  [(rng, starts[k], ends[k]) for k, rng in enumerate(shuffle_streams)])

        out_users, out_items = np.empty_like(users), np.empty_like(items)
        labels = np.zeros(total, np.float32)
        gather_bounds = np.linspace(0, total, self.CHUNKS + 1).astype(np.int64)

        def gather(lo, hi):
            index = order[lo:hi]
            np.take(users, index, out=out_users[lo:hi])
            np.take(items, index, out=out_items[lo:hi])
            labels[lo:hi] = index < positives

        self._run(gather, [(gather_bounds[k], gather_bounds[k + 1]) for k in range(self.CHUNKS)])
        return out_users, out_items, labels

    def batches(self, epoch: int, batch_size: int, steps: int):
        """`steps` batches of exactly batch_size; the epoch wraps around at the end so shapes never change."""
        users, items, labels = self.epoch(epoch)
        n = len(users)
        for step in range(steps):
            idx = np.arange(step * batch_size, (step + 1) * batch_size) % n
            yield (users[idx], items[idx]), labels[idx]


@dataclass
class EvalSet:
    """Per user: [user, test item, negatives...] as an int32 matrix."""
    rows: np.ndarray

    @property
    def num_users(self) -> int:
        return len(self.rows)

    def candidates(self, lo: int, hi: int):
        """Flattened (users, items) for users lo..hi; the positive is column 0 of each user's block."""
        block = self.rows[lo:hi]
        width = block.shape[1] - 1
        users = np.repeat(block[:, 0], width)
        items = block[:, 1:].reshape(-1)
        return users, items, width


def synthetic_eval_rows(num_users: int, num_items: int, negatives: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    cand = rng.integers(0, num_items, size=(num_users, negatives + 1), dtype=np.int32)
    return np.concatenate([np.arange(num_users, dtype=np.int32)[:, None], cand], axis=1)
