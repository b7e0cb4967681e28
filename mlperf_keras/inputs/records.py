"""Generic TFRecord reading and writing for the shared tf.data input layer (ImageNet, COCO...).

Reading: the list of record files is split by worker *first* (worker r of W takes files r, r+W, r+2W... of the
manifest's order), then shuffled with a seed, then interleaved deterministically, so every worker reads a disjoint
part of the data and a given (seed, epoch, worker) always yields the same record order. Writing: tf.train.Example
protos through tf.io.TFRecordWriter, for the data_prep commands.
"""
from __future__ import annotations

import os

import tensorflow as tf

from mlperf_keras.inputs.manifest import DataError, worker_files, worker_rows  # noqa: F401 (re-exported)

AUTOTUNE = tf.data.AUTOTUNE


def record_dataset(paths: list[str], *, shuffle_seed: int | None = None, repeat: bool = False,
                   cycle_length: int = 10, buffer_bytes: int = 8 << 20) -> tf.data.Dataset:
    """Serialized records of `paths` (one worker's files).

    shuffle_seed: None reads files in the given order; an int shuffles the file order with that seed (a new
    deterministic order each repetition when repeat=True). Records of up to cycle_length files are interleaved one
    at a time in a fixed order (deterministic even though files are read in parallel).
    """
    if not paths:
        raise DataError("no record files to read")
    files = tf.data.Dataset.from_tensor_slices(list(paths))
    if shuffle_seed is not None:
        files = files.shuffle(len(paths), seed=shuffle_seed, reshuffle_each_iteration=True)
    if repeat:
        files = files.repeat()
    return files.interleave(lambda path: tf.data.TFRecordDataset(path, buffer_size=buffer_bytes),
                            cycle_length=max(1, min(cycle_length, len(paths))), block_length=1,
                            num_parallel_calls=AUTOTUNE, deterministic=True)


def backend_batches(dataset: tf.data.Dataset):
    """Iterate tf.data batches as the active Keras backend wants them: tf tensors on TensorFlow, NumPy arrays on
    the others (JAX takes NumPy without copying through TensorFlow's device placement)."""
    import keras

    return iter(dataset) if keras.backend.backend() == "tensorflow" else dataset.as_numpy_iterator()


def parse(serialized, features: dict):
    return tf.io.parse_single_example(serialized, features)


def find_corrupt_file(paths: list[str]) -> tuple[str, str] | None:
    """(path, TensorFlow's message) of the first record file whose records fail their CRC check, or None. Only on
    the failure path: it reads the files (a DataLossError from a pipeline names no file)."""
    for path in paths:
        try:
            for _ in tf.data.TFRecordDataset(path, buffer_size=8 << 20):
                pass
        except tf.errors.DataLossError as e:
            return path, " ".join(str(e.message).split())[:200]
    return None


def data_loss_message(error, data_dir: str, manifest: dict) -> str:
    """One line for a tf.errors.DataLossError met while training: which prepared file is corrupt."""
    paths = [os.path.join(data_dir, f["name"]) for f in manifest["files"]
             if f.get("split") in ("train", "validation", "eval") and not f["name"].endswith(".npy")]
    found = find_corrupt_file(paths)
    if found is None:
        return f"corrupt record data in {data_dir} ({' '.join(str(error).split())[:200]})"
    return (f"{found[0]}: corrupt TFRecord ({found[1]}); prepare the data again, or check all files with "
            f"python -m data_prep.verify --data_dir={data_dir}")


# ---- writing (data_prep) ----

def bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def int64_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))


def int64_list_feature(values) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def bytes_list_feature(values) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def float_feature(values) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def example(features: dict) -> bytes:
    """A serialized tf.train.Example of {name: tf.train.Feature}; deterministic (map keys sorted), so the same data
    gives the same bytes and checksums in any process."""
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString(deterministic=True)


def writer(path: str) -> tf.io.TFRecordWriter:
    return tf.io.TFRecordWriter(path)


__all__ = ["AUTOTUNE", "backend_batches", "data_loss_message", "find_corrupt_file", "bytes_feature", "bytes_list_feature", "example", "float_feature", "int64_feature",
           "int64_list_feature", "parse",
           "record_dataset", "worker_files", "worker_rows", "writer"]
