"""NCF input: training positives + freshly sampled negatives each epoch, and the fixed leave-one-out eval set.

NCF is the one workload whose whole dataset is a few hundred MB of integers, so it is held in NumPy arrays (and on
the device, for synthetic benchmarks) instead of a tf.data record stream; sampling is vectorised over the epoch.
Sharding: worker r owns the prepared shards r, r+W, r+2W... (contiguous user ranges), so every user's positives are
on one worker and the negative check against "items this user rated" stays local.
"""
from __future__ import annotations

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
    """

    def __init__(self, positives: np.ndarray, num_items: int, negatives: int, seed: int, rank: int = 0):
        self.users = positives[:, 0].astype(np.int32)
        self.items = positives[:, 1].astype(np.int32)
        self.num_items = num_items
        self.negatives = negatives
        self.seed, self.rank = seed, rank
        self.rated_keys = np.unique(self.users.astype(np.int64) * num_items + self.items)

    @property
    def samples_per_epoch(self) -> int:
        return len(self.users) * (1 + self.negatives)

    def _is_rated(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        keys = users.astype(np.int64) * self.num_items + items
        pos = np.searchsorted(self.rated_keys, keys).clip(max=len(self.rated_keys) - 1)
        return self.rated_keys[pos] == keys

    def epoch(self, epoch: int):
        """(users, items, labels) for one epoch, shuffled."""
        rng = np.random.default_rng([self.seed, epoch, self.rank])
        neg_users = np.repeat(self.users, self.negatives)
        neg_items = rng.integers(0, self.num_items, size=len(neg_users), dtype=np.int32)
        redo = np.flatnonzero(self._is_rated(neg_users, neg_items))
        while redo.size:
            neg_items[redo] = rng.integers(0, self.num_items, size=redo.size, dtype=np.int32)
            redo = redo[self._is_rated(neg_users[redo], neg_items[redo])]
        users = np.concatenate([self.users, neg_users])
        items = np.concatenate([self.items, neg_items])
        labels = np.concatenate([np.ones(len(self.users), np.float32), np.zeros(len(neg_users), np.float32)])
        order = rng.permutation(len(users))
        return users[order], items[order], labels[order]

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
