"""The translation workloads' training batches and eval records without TensorFlow: what the JAX backend reads on a
machine that has no TensorFlow (a GPU server with JAX alone).

The same steps as inputs/text.py's tf.data pipelines, on the TF-free record reader (CRCs checked) and NumPy's
generators: the files in a seeded order, cycle_length files interleaved one record at a time, pairs longer than
max_length left out, a seeded shuffle buffer, then bucketing by the longer side into the plan's fixed shapes
(tf.data's group_by_window: a bucket's batch goes out when it fills; at the end of the pass the partly filled ones
in bucket order). Every pair of the worker's files is in exactly one batch per epoch. The order differs from the
tf.data pipeline's for the same seed (another generator), as any two stock generators' orders do; the batches'
shapes, the buckets and the steps per epoch are the same. A background thread builds batches ahead.
"""
from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from mlperf_keras.inputs import record_reader, record_streams
from mlperf_keras.inputs.manifest import DataError


def _ids(example: dict, key: str, where: str) -> np.ndarray:
    if key not in example:
        raise DataError(f"{where}: a record without {key!r}: not a translation record of data_prep.wmt")
    return np.asarray(example[key], dtype=np.int32)


def shuffled_pairs(files, seed: int, cycle_length: int, max_length: int, shuffle_buffer: int) -> Iterator:
    """(source, target) int32 arrays of the files, as text._shuffled_pairs orders them (see the module doc)."""
    files = list(files)
    if not files:
        raise DataError("no record files to read")
    rng = np.random.default_rng([int(seed), 0x7E47])
    order = [files[i] for i in rng.permutation(len(files))]
    records = record_streams.interleave(order, max(1, min(cycle_length, len(order))))

    # The interleaved stream does not say which file a record came from: name the folder.
    where = f"{os.path.dirname(files[0]) or '.'} ({len(files)} record files)"

    def pairs():
        for record in records:
            example = record_reader.parse_example(record)
            source, target = _ids(example, "inputs", where), _ids(example, "targets", where)
            if max(len(source), len(target)) <= max_length:
                yield source, target

    return record_streams.shuffled(pairs(), shuffle_buffer, rng) if shuffle_buffer > 1 else pairs()


def bucketed(pairs, plan, window_sizes, drop_remainder: bool) -> Iterator:
    """(bucket, [(source, target), ...]) windows of window_sizes[bucket] pairs, as group_by_window gives them."""
    lengths = np.asarray(plan.lengths)
    windows: dict[int, list] = {}
    for source, target in pairs:
        key = int(np.searchsorted(lengths, max(len(source), len(target)), side="left"))
        window = windows.setdefault(key, [])
        window.append((source, target))
        if len(window) == window_sizes[key]:
            yield key, windows.pop(key)
    if not drop_remainder:
        for key in sorted(windows):
            yield key, windows[key]


def padded(window, rows: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """A window's sources and targets as [rows, length] int32 (0 = padding; missing rows empty)."""
    source, target = np.zeros((rows, length), np.int32), np.zeros((rows, length), np.int32)
    for i, (s, t) in enumerate(window):
        source[i, :len(s)], target[i, :len(t)] = s, t
    return source, target


def train_batches(files, plan, max_length: int, steps: int, shuffle_buffer: int, seed: int,
                  cycle_length: int, prefetch: int = 2) -> Iterator:
    """text.TrainPipeline's batches of one epoch (seed: the epoch's) as padded (source, target) arrays: exactly
    `steps` of them, empty ones after the last pair."""
    def make():
        out = 0
        windows = bucketed(shuffled_pairs(files, seed, cycle_length, max_length, shuffle_buffer), plan,
                           plan.batch_sizes, drop_remainder=False)
        for key, window in windows:
            if out == steps:
                return
            yield padded(window, plan.batch_sizes[key], plan.lengths[key])
            out += 1
        empty = np.zeros((plan.batch_sizes[0], plan.lengths[0]), np.int32)
        for _ in range(steps - out):
            yield empty, empty

    return record_streams.prefetched(make(), prefetch, "text-input")


def global_batches(files, plan, max_length: int, steps: int, shuffle_buffer: int, seed: int, rank: int,
                   world_size: int, cycle_length: int, prefetch: int = 2) -> Iterator:
    """text.GlobalBatchTrainPipeline's batches of one epoch: full global batches per bucket (remainders dropped),
    this worker's rows of each; the decoder reads targets[:-1] and predicts targets[1:]."""
    global_sizes = [b * world_size for b in plan.batch_sizes]

    def make():
        windows = bucketed(shuffled_pairs(files, seed, cycle_length, max_length, shuffle_buffer), plan,
                           global_sizes, drop_remainder=True)
        for out, (key, window) in enumerate(windows):
            if out == steps:
                return
            size = plan.batch_sizes[key]
            source, target = padded(window[rank * size:(rank + 1) * size], size, plan.lengths[key])
            yield {"source": source, "target_input": target[:, :-1]}, target[:, 1:]

    return record_streams.prefetched(make(), prefetch, "text-input")


def eval_records(paths) -> list[tuple[int, np.ndarray]]:
    """(index, source ids) of every eval record of the files (data_prep.wmt's "index" and "inputs")."""
    out = []
    for path in paths:
        for record in record_reader.iter_records(path):
            example = record_reader.parse_example(record)
            if "index" not in example:
                raise DataError(f"{path}: an eval record without 'index': not an eval file of data_prep.wmt")
            out.append((int(example["index"][0]), _ids(example, "inputs", path)))
    return out


READERS = ("auto", "tf.data", "numpy")


def choose_reader(requested: str, backend: str) -> str:
    """tf.data or numpy (this module) for the hparam input_reader: auto reads with tf.data where TensorFlow is
    installed, else (the JAX backend) with this module; numpy runs on the JAX backend only."""
    import importlib.util

    from mlperf_keras.config import ConfigError

    if requested not in READERS:
        raise ConfigError(f"input_reader={requested!r}: expected one of {', '.join(READERS)}")
    if requested == "numpy" and backend == "tensorflow":
        raise ConfigError("input_reader=numpy runs on the JAX backend (KERAS_BACKEND=jax); the tensorflow backend "
                          "reads with tf.data")
    if requested != "auto":
        return requested
    if backend != "tensorflow" and importlib.util.find_spec("tensorflow") is None:
        return "numpy"
    return "tf.data"
