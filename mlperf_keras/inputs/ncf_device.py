"""NCF's training epoch built on the accelerator, in one compiled function written in keras.ops.

Why: at ml-20m size an epoch is 99.3 M samples (19,861,770 training positives x 5). An H200 trains it in about
0.5 s, while the host build (inputs/ncf.TrainSampler) takes about 14 s on two cores and still 2.7 s serially on any
number of cores. Here the positives stay on the device, and per epoch only a few 32-bit keys cross from the host;
the epoch is the same distribution as the host sampler's (and the reference's):
- every local positive once, label 1;
- `negatives` items per positive drawn uniformly from all items and redrawn while the item is one of the user's
  training positives (the reference's dataset.py rejection rule), label 0;
- the whole epoch in a uniformly random order, in `steps` batches of `batch` (the end wraps to the start so every
  batch has the same shape, the repeats labelled PAD_LABEL for the loss to ignore, as TrainSampler.batches does).

Random numbers, two choices:
- "stock" (closed division, the default): the framework's own generators. On JAX jax.random (the default
  threefry2x32 key; jax.random.randint for the negatives, jax.random.permutation for the shuffle); on TensorFlow
  the stateless Philox ops (tf.random.stateless_uniform; the shuffle sorts twice by 32-bit stateless keys, as
  jax.random.permutation does, since TensorFlow has no stateless permutation that XLA compiles). Per epoch the
  key is derived from (seed, epoch, rank) by NumPy's SeedSequence; each redraw round and the shuffle fold their
  own index into it.
- "hash" (only with --division=open): counter-based bits (mlperf_keras/counter_hash.py), a pure function of an
  index and six 32-bit keys per epoch, the same on TensorFlow and JAX and cheaper than threefry. Not a stock
  generator, so the closed division may not use it.
keras.random.shuffle is not used for either: on TensorFlow it sorts float32 keys, whose 24 random bits tie
hundreds of thousands of pairs at 100 M elements. The two-sort shuffle resolves ties by 62 bits.

The rejection test (inputs/ncf.py rated_mask, which the eval negatives share) is a binary search of each
negative's item in its user's sorted block of rated items (the positives sorted by user, then item): int32 only, so
ml-20m's 138,493 x 26,744 keys need no 64-bit integers, which JAX does not enable by default.
"""
from __future__ import annotations

import math

import numpy as np

from mlperf_keras.counter_hash import GOLDEN, mix, random_bits
from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.inputs.ncf import PAD_LABEL, rated_mask

MAX_ROUNDS = 1000   # redraw rounds; a user who rated (almost) every item could otherwise never get a negative
RANDOM_SOURCES = ("stock", "hash")
_SHUFFLE_STREAM = 2**31 - 1   # folded into the epoch key for the shuffle; the redraw rounds fold 0, 1, 2...


def _backend() -> str:
    import keras

    return keras.backend.backend()


def stock_randint(key, stream, size: int, maxval: int):
    """(size,) int32 uniform in [0, maxval) from the backend's stock generator; key: (2,) uint32 tensor; stream:
    an int32 scalar (traced or not) giving this draw its own substream."""
    if _backend() == "jax":
        import jax

        return jax.random.randint(jax.random.fold_in(key, stream), (size,), 0, maxval, dtype="int32")
    import tensorflow as tf

    seed = tf.random.experimental.stateless_fold_in(tf.cast(key, tf.int64), tf.cast(stream, tf.int64))
    return tf.random.stateless_uniform((size,), seed, minval=0, maxval=maxval, dtype=tf.int32)


def stock_permutation(key, stream, n: int):
    """A uniformly random permutation of range(n) (int32) from the backend's stock generator."""
    if _backend() == "jax":
        import jax

        return jax.random.permutation(jax.random.fold_in(key, stream), n).astype("int32")
    import tensorflow as tf

    seed = tf.random.experimental.stateless_fold_in(tf.cast(key, tf.int64), tf.cast(stream, tf.int64))
    first, second = (tf.random.stateless_uniform((n,), tf.random.experimental.stateless_fold_in(seed, k),
                                                 minval=None, maxval=None, dtype=tf.int32) for k in (0, 1))
    # Sorting by one set of 32-bit keys leaves ties in input order; permuting that result by a second independent
    # sort leaves only pairs that tie in both (64 bits), as jax.random.permutation's repeated sorts do.
    return tf.gather(tf.argsort(first, stable=True), tf.argsort(second, stable=True))


def _sort_key(counters, key0, key1):
    from keras import ops

    return ops.cast(ops.right_shift(random_bits(counters, key0, key1), np.uint32(1)), "int32")


class DeviceTrainSampler:
    """inputs/ncf.TrainSampler's epoch computed on the device: the same constructor arguments (less `threads`, plus
    `random`: "stock" or "hash", see the module docstring), and batches() yields ((users, items), labels) as device
    tensors instead of NumPy arrays.

    The compiled epoch function returns each step's batch as its own array (no slicing op per batch). With
    `overlap` (the default where an accelerator is present) batches() never waits for the device: the check that
    every negative found an unrated item is read after the epoch's last batch is handed out (it then waits for the
    epoch's build only, never for the training steps queued behind it), and the next epoch's build is dispatched as
    soon as this epoch's second batch is asked for, so it is computed behind this epoch's first step and a consumer
    that waits for the device at the end of an epoch (an evaluation, a benchmark) finds the next epoch ready. It
    holds one more epoch on the device (12 bytes a sample). Without it (the CPU: its "device" is the host's own
    cores, so nothing is gained, and XLA's CPU collectives can stall while a build runs beside a step that
    all-reduces over several CPU devices) each epoch is built and checked before its first batch. The samples are
    the same either way: each epoch is a function of (seed, epoch, rank) only."""

    def __init__(self, positives: np.ndarray, num_items: int, negatives: int, seed: int, rank: int = 0,
                 random: str = "stock", overlap: bool | None = None):
        from keras import ops

        if random not in RANDOM_SOURCES:
            raise ValueError(f"random={random!r}: choose one of {RANDOM_SOURCES}")
        self.random = random

        users, items = positives[:, 0].astype(np.int32), positives[:, 1].astype(np.int32)
        order = np.lexsort((items, users))
        users, items = users[order], items[order]
        if len(users) == 0:
            raise DataError("this worker has no training positives")
        # Each positive's user block [start, end) in the sorted positives: the items that user rated.
        first = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
        sizes = np.diff(np.r_[first, len(users)])
        block_start = np.repeat(first, sizes).astype(np.int32)
        block_end = (block_start + np.repeat(sizes, sizes)).astype(np.int32)
        self.search_steps = max(1, math.ceil(math.log2(int(sizes.max()) + 1)))
        self.num_positives = len(users)
        self.num_items, self.negatives, self.seed, self.rank = num_items, negatives, seed, rank
        self._device = [ops.convert_to_tensor(a) for a in (users, items, block_start, block_end)]
        self._compiled = {}
        if overlap is None:
            from mlperf_keras.steps import accelerator_present

            overlap = accelerator_present()
        self.overlap = overlap
        self._ahead = None   # ((epoch, batch, steps), outputs): the next epoch, dispatched while this one trains

    @property
    def samples_per_epoch(self) -> int:
        return self.num_positives * (1 + self.negatives)

    def _keys(self, epoch: int):
        from keras import ops

        state = np.random.SeedSequence([self.seed, epoch, self.rank]).generate_state(6, dtype=np.uint32)
        return ops.convert_to_tensor(state, dtype="uint32")

    def _build(self, steps: int, batch: int):
        """The compiled epoch function for this (steps, batch)."""
        from keras import ops

        from mlperf_keras.steps import compile_function

        positives, k, num_items = self.num_positives, self.negatives, self.num_items
        total, search_steps = positives * (1 + k), self.search_steps

        def is_rated(sorted_items, lo, end, items):
            return rated_mask(sorted_items, lo, end, items, search_steps)

        stock = self.random == "stock"

        def epoch(users, items, block_start, block_end, keys):
            counters = ops.cast(ops.arange(positives * k, dtype="int32"), "uint32")
            neg_users = ops.repeat(users, k)
            lo, end = ops.repeat(block_start, k), ops.repeat(block_end, k)

            def draw(round_index):
                if stock:
                    return stock_randint(keys[:2], round_index, positives * k, num_items)
                round_key = mix(ops.bitwise_xor(keys[0], ops.multiply(ops.cast(round_index, "uint32"),
                                                                        np.uint32(GOLDEN))))
                bits = random_bits(counters, round_key, keys[1])
                return ops.cast(ops.mod(bits, np.uint32(num_items)), "int32")

            first = draw(0)
            state = (ops.convert_to_tensor(1, "int32"), first, is_rated(items, lo, end, first))

            def more(round_index, drawn, rated):
                return ops.logical_and(ops.any(rated), ops.less(round_index, MAX_ROUNDS))

            def redraw(round_index, drawn, rated):
                drawn = ops.where(rated, draw(round_index), drawn)
                return round_index + 1, drawn, ops.logical_and(rated, is_rated(items, lo, end, drawn))

            rounds, neg_items, rated = ops.while_loop(more, redraw, state)

            if stock:
                order = stock_permutation(keys[:2], _SHUFFLE_STREAM, total)
            else:
                index = ops.cast(ops.arange(total, dtype="int32"), "uint32")
                order = ops.argsort(_sort_key(index, keys[2], keys[3]))
                order = ops.take(order, ops.argsort(_sort_key(index, keys[4], keys[5])))
            # Exactly steps x batch samples: the end wraps around to the start of the shuffled epoch, labelled
            # PAD_LABEL so the loss ignores the repeats (every sample trains once per epoch).
            position = ops.arange(steps * batch, dtype="int32")
            order = ops.take(order, ops.mod(position, total))
            all_users = ops.concatenate([users, neg_users])
            all_items = ops.concatenate([items, neg_items])
            labels = ops.where(ops.less(position, total), ops.cast(ops.less(order, positives), "float32"), PAD_LABEL)
            columns = (ops.take(all_users, order), ops.take(all_items, order), labels)
            # One array per step and column, so handing out a batch is no device op of its own.
            per_step = tuple(tuple(column[step * batch:(step + 1) * batch] for column in columns)
                             for step in range(steps))
            return per_step, ops.sum(ops.cast(rated, "int32")), rounds

        return compile_function(epoch)

    def _dispatch(self, epoch: int, batch: int, steps: int):
        """The compiled epoch's outputs (per-step (users, items, labels), unresolved count, rounds), not waited for:
        on JAX the call returns once the work is queued on the device."""
        if (steps, batch) not in self._compiled:
            self._compiled[(steps, batch)] = self._build(steps, batch)
        outputs = self._compiled[(steps, batch)](*self._device, self._keys(epoch))
        copy = getattr(outputs[1], "copy_to_host_async", None)   # jax.Array: start the 4-byte copy now
        if copy is not None:
            copy()
        return outputs

    def _outputs(self, epoch: int, batch: int, steps: int):
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (epoch, batch, steps):
            return ahead[1]
        return self._dispatch(epoch, batch, steps)

    def _check(self, unresolved) -> None:
        if int(unresolved):
            raise DataError(f"{int(unresolved)} negatives found no unrated item in {MAX_ROUNDS} draws: a user has "
                            f"rated (nearly) all {self.num_items} items")

    def epoch_batches(self, epoch: int, batch: int, steps: int):
        """(users, items, labels) of shape (steps, batch) on the device, and the redraw rounds it took (waits for
        the device: for tests and benchmarks; training reads batches())."""
        from keras import ops

        per_step, unresolved, rounds = self._outputs(epoch, batch, steps)
        self._check(unresolved)
        users, items, labels = (ops.stack([b[column] for b in per_step]) for column in range(3))
        return users, items, labels, int(rounds)

    def batches(self, epoch: int, batch_size: int, steps: int):
        per_step, unresolved, _ = self._outputs(epoch, batch_size, steps)
        if not self.overlap:
            self._check(unresolved)
        for step, (users, items, labels) in enumerate(per_step):
            yield (users, items), labels
            if step == 0 and self.overlap:
                # The consumer has queued this epoch's first step: the next epoch's build queues behind it.
                self._ahead = ((epoch + 1, batch_size, steps), self._dispatch(epoch + 1, batch_size, steps))
        # Every batch is handed out (and queued for training): waiting for the build's count now costs nothing.
        self._check(unresolved)
