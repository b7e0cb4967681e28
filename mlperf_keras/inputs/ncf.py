"""NCF input: training positives + freshly sampled negatives each epoch, and the fixed leave-one-out eval set.

NCF is the one workload whose whole dataset is a few hundred MB of integers, so it is held in NumPy arrays (and on
the device, for synthetic benchmarks) instead of a tf.data record stream; sampling is vectorised over the epoch.
Sharding: worker r owns the prepared shards r, r+W, r+2W... (contiguous user ranges), so every user's positives are
on one worker and the negative check against "the user's training items" stays local.
"""
from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass

import numpy as np

from mlperf_keras.inputs.manifest import DataError

PAD_LABEL = -1.0   # a sample that only fills the epoch's last batch to a fixed shape: the loss gives it no weight


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

    Negatives are drawn uniformly from all items and redrawn while they hit one of the user's training positives
    (the reference's rejection rule: dataset.py CFTrainDataset, mlcommons/training fe17e837, checks the training
    matrix only, so the user's held-out test item can be drawn), vectorised: each pass redraws only the
    collisions. Random numbers: NumPy's stock PCG64 (np.random.default_rng), from (seed, epoch, rank) only.

    An epoch at ml-20m size is 99.3 M samples (19,861,770 positives x 5), and building it on one core takes about 20 s (benchmarks/
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
        """`steps` batches of exactly batch_size. Past the end of the epoch the batch is filled from its start with
        label PAD_LABEL, which the loss ignores (workloads/ncf.py), so shapes never change and every sample trains
        exactly once per epoch."""
        users, items, labels = self.epoch(epoch)
        n = len(users)
        for step in range(steps):
            position = np.arange(step * batch_size, (step + 1) * batch_size)
            idx = position % n
            yield (users[idx], items[idx]), np.where(position < n, labels[idx], np.float32(PAD_LABEL))


def rated_mask(sorted_items, lo, end, items, search_steps: int):
    """Is items[i] in sorted_items[lo[i]:end[i]]? A vectorised lower-bound binary search in keras.ops, int32 only;
    search_steps >= log2(longest block + 1). sorted_items must not be empty."""
    from keras import ops

    last = ops.shape(sorted_items)[0] - 1
    hi = end
    for _ in range(search_steps):
        active = ops.less(lo, hi)
        mid = ops.floor_divide(lo + hi, 2)
        smaller = ops.less(ops.take(sorted_items, ops.minimum(mid, last)), items)
        lo = ops.where(ops.logical_and(active, smaller), mid + 1, lo)
        hi = ops.where(ops.logical_and(active, ops.logical_not(smaller)), mid, hi)
    found = ops.equal(ops.take(sorted_items, ops.minimum(lo, last)), items)
    return ops.logical_and(ops.less(lo, end), found)


MAX_EVAL_ROUNDS = 10_000   # redraw rounds for eval negatives; a user with almost no unrated item needs many


def draw_eval_negatives(users: np.ndarray, positives: np.ndarray, num_items: int, count: int,
                        seed: int) -> np.ndarray:
    """(len(users), count) int32: per user, `count` items drawn uniformly WITH replacement from the items that are
    not among the user's training positives, so repeats occur and the held-out test item can be drawn.

    As the reference: convert.py draws np.random.choice(sorted(all_items - user's training items), 999), whose
    default is replace=True, and logs preproc_hp_sample_eval_replacement: true; it runs after run_start, so the
    draw is on the clock (mlcommons/training fe17e837ed12974d15c86d5173fe8f2c188434d5,
    recommendation/pytorch/convert.py). NVIDIA's v0.5 submission draws them the same way on the GPU after
    run_start (training_results_v0.5 v0.5.0/nvidia/submission/code/recommendation/pytorch/ncf.py, generate_neg:
    uniform over all items, redrawn while the item is a training positive), and so does this function: stock
    keras.random.randint from one keras.random.SeedGenerator(seed) (jax.random on JAX, TensorFlow's stateless
    ops on TensorFlow), on the backend's default device (the GPU when there is one). Rejection keeps the draw
    uniform over the unrated items; a user with fewer unrated items than `count` simply gets repeats.
    positives: this worker's training (user, item) rows, holding every training positive of `users`.
    """
    from keras import ops, random

    users = np.asarray(users, np.int32)
    keys = np.unique(positives[:, 0].astype(np.int64) * num_items + positives[:, 1])
    rated_users, rated_items = (keys // num_items).astype(np.int32), (keys % num_items).astype(np.int32)
    start = np.searchsorted(rated_users, users, "left").astype(np.int32)
    end = np.searchsorted(rated_users, users, "right").astype(np.int32)
    full = np.flatnonzero(end - start >= num_items)
    if full.size:
        raise DataError(f"user index {users[full[0]]} rated all {num_items} items: no eval negative can be drawn")
    generator = random.SeedGenerator(seed)
    total = len(users) * count

    def draw(size):
        return random.randint((size,), 0, num_items, seed=generator, dtype="int32")

    drawn = draw(total)
    if not len(rated_items):
        return np.asarray(drawn).reshape(len(users), count)
    steps = max(1, int(np.ceil(np.log2(int((end - start).max()) + 1))))
    sorted_items = ops.convert_to_tensor(rated_items)
    lo, hi = np.repeat(start, count), np.repeat(end, count)
    pending = np.flatnonzero(np.asarray(rated_mask(sorted_items, ops.convert_to_tensor(lo),
                                                   ops.convert_to_tensor(hi), drawn, steps)))
    drawn = np.array(drawn)
    for _ in range(MAX_EVAL_ROUNDS):
        if not pending.size:
            return drawn.reshape(len(users), count)
        # Redraw only the rejected ones, padded to a power of two so only a few shapes are ever compiled.
        size = 1 << int(pending.size - 1).bit_length()
        pad = size - pending.size
        new = draw(size)
        # Padding rows search the empty block [0, 0): never rated.
        rated = np.asarray(rated_mask(sorted_items, ops.convert_to_tensor(np.pad(lo[pending], (0, pad))),
                                      ops.convert_to_tensor(np.pad(hi[pending], (0, pad))), new, steps))
        drawn[pending] = np.asarray(new)[:pending.size]
        pending = pending[rated[:pending.size]]
    raise DataError(f"{pending.size} eval negatives found no unrated item in {MAX_EVAL_ROUNDS} draws: a user has "
                    f"rated nearly all {num_items} items")


def duplicate_mask(items: np.ndarray) -> np.ndarray:
    """(users, candidates) bool: True where the item already occurred in an earlier column of its row. Computed
    with keras.ops (on the device when there is one), as NVIDIA computes its dup_mask on the GPU."""
    from keras import ops

    width = items.shape[1]
    if int(items.max(initial=0)) >= (2**31 - 1) // width:
        raise DataError(f"{int(items.max()) + 1} items x {width} candidates overflow int32 sort keys")
    items = ops.convert_to_tensor(np.asarray(items, np.int32))
    key = items * width + ops.arange(width, dtype="int32")[None, :]   # unique per row: any sort is stable
    order = ops.argsort(key, axis=1)
    in_order = ops.take_along_axis(items, order, axis=1)
    repeat = ops.concatenate([ops.zeros_like(in_order[:, :1], dtype="bool"),
                              ops.equal(in_order[:, 1:], in_order[:, :-1])], axis=1)
    return np.asarray(ops.take_along_axis(repeat, ops.argsort(order, axis=1), axis=1))


@dataclass
class EvalSet:
    """Per user: the candidates in the reference's order, the negatives then the held-out test item (ncf.py
    eval_one appends the test item to the negatives), which of them repeat an earlier column, and the column where
    the test item first occurs (metrics/ranking.hits_at_k)."""
    users: np.ndarray            # (U,) int32
    items: np.ndarray            # (U, negatives + 1) int32
    duplicate: np.ndarray        # (U, negatives + 1) bool
    positive_column: np.ndarray  # (U,) int

    @classmethod
    def build(cls, users: np.ndarray, test_items: np.ndarray, negatives: np.ndarray) -> "EvalSet":
        items = np.concatenate([negatives, np.asarray(test_items, np.int32)[:, None]], axis=1).astype(np.int32)
        positive_column = np.argmax(items == items[:, -1:], axis=1)
        return cls(np.asarray(users, np.int32), items, duplicate_mask(items), positive_column)

    @property
    def num_users(self) -> int:
        return len(self.users)

    def candidates(self, lo: int, hi: int):
        """Flattened (users, items) for users lo..hi, and the number of candidates per user."""
        width = self.items.shape[1]
        return np.repeat(self.users[lo:hi], width), self.items[lo:hi].reshape(-1), width
