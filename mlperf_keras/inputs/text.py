"""The text input layer (translation workloads): token-budget batches bucketed by length, from sharded TFRecords.

Records (written by data_prep.wmt): tf.train.Example with "inputs" and "targets", int64 token ids ending with EOS (1);
0 is padding. Eval records carry "inputs" and "index" (the sentence's line in the test set).

Batching as the reference (tensor2tensor's scheme): a pair's length is max(len(inputs), len(targets)); pairs longer
than max_length are discarded; lengths fall into buckets with boundaries 8, then x1.1 (at least +1) up to max_length;
a bucket's batches hold batch_tokens // (bucket length) pairs. Unlike the reference, which pads each batch to its own
longest sequence, every batch here is padded to its bucket's length and to its bucket's batch size (empty rows), so a
compiled step sees one shape per bucket (XLA compiles a few dozen shapes once, instead of one per batch); padding
rows and positions weigh nothing in the loss. Because each bucket emits ceil(count / batch size) batches per pass
whatever the order, steps per epoch follow from the length histogram alone, which the manifest stores per shard.

TrainPipeline (the Transformer's) shards per worker on files, before any shuffling: worker r reads shards r, r + W,
...; it shuffles its shard order and then examples (a seeded buffer) per epoch, deterministically for a given seed,
rank and epoch. Every pair is read exactly once per epoch across the workers: an epoch has as many steps as the
worker with the most batches needs, and a worker with fewer ends its epoch with empty batches (all padding: no loss,
no gradient), as the Transformer reference's single-worker epoch is one full pass with partial last batches per
bucket. GNMT's batches are dealt differently, by rows of full global batches as its reference's sampler
(GlobalBatchTrainPipeline, at the end of this module).
Everything except the TFRecord helpers is NumPy only where TensorFlow is missing: the pipelines and eval loaders read
with tf.data, or with reader="numpy" with inputs/text_numpy (the JAX backend's choice where TensorFlow is not
installed), and the synthetic source never imports it.

One file over 400 lines on purpose: both translation batchers, their synthetic stand-ins and the record helpers share
BucketPlan and the length histograms; the vocabularies live in vocabulary.py and subword.py.
"""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from mlperf_keras.inputs import text_numpy, vocabulary
from mlperf_keras.inputs.vocabulary import EOS_ID, PAD_ID
from mlperf_keras.inputs.manifest import DataError, worker_shards



# ---------------------------------------------------------------------------------------------------------------------
# Buckets and the step count (NumPy only)

@dataclasses.dataclass(frozen=True)
class BucketPlan:
    lengths: tuple      # padded length of each bucket = the longest pair it holds; ascending, the last is max_length
    batch_sizes: tuple  # pairs per batch of each bucket

    @classmethod
    def create(cls, batch_tokens: int, max_length: int, min_boundary: int = 8, scale: float = 1.1,
               multiple: int = 1) -> "BucketPlan":
        """Buckets (.., min_boundary], .., (.., max_length]; batch size batch_tokens // length, rounded down to a
        multiple of 8 when at least 8 (tensor-core friendly) and of `multiple` (devices sharing a batch)."""
        from mlperf_keras.config import ConfigError

        if batch_tokens < max_length:
            raise ConfigError(f"a batch of {batch_tokens} tokens cannot hold one pair of max_length {max_length}; "
                              f"raise the batch (--batch_size / batch_tokens) or lower max_length")
        lengths, x = [], max(1, int(min_boundary))
        while x < max_length:
            lengths.append(x)
            x = max(x + 1, int(x * scale))
        lengths.append(int(max_length))
        sizes = []
        for length in lengths:
            size = batch_tokens // length
            if size >= 8:
                size -= size % 8
            if multiple > 1:
                size = max(multiple, size - size % multiple)
            sizes.append(size)
        return cls(tuple(lengths), tuple(sizes))

    def bucket_of(self, lengths) -> np.ndarray:
        """Bucket index of each length (lengths above max_length get len(self.lengths))."""
        return np.searchsorted(np.asarray(self.lengths), np.asarray(lengths), side="left")

    def bucket_counts(self, histogram) -> np.ndarray:
        """Pairs per bucket from a histogram indexed by pair length (longer than max_length: dropped)."""
        histogram = np.asarray(histogram, dtype=np.int64)
        buckets = self.bucket_of(np.arange(len(histogram)))
        keep = buckets < len(self.lengths)
        return np.bincount(buckets[keep], weights=histogram[keep], minlength=len(self.lengths)).astype(np.int64)

    def batches_per_bucket(self, histogram) -> np.ndarray:
        counts = self.bucket_counts(histogram)
        return -(-counts // np.asarray(self.batch_sizes))

    def steps(self, histogram) -> int:
        """Batches in one pass over pairs with this length histogram."""
        return int(self.batches_per_bucket(histogram).sum())

    def padding_fraction(self, histogram) -> float:
        """Padding of the longer side alone (bucket rounding and partly filled batches), from the histogram: a lower
        bound of the measured fraction (text.padding_fraction), to which the shorter side adds its difference."""
        histogram = np.asarray(histogram, dtype=np.float64)
        real = float((histogram * np.arange(len(histogram))).sum())
        allocated = float((self.batches_per_bucket(histogram) * np.asarray(self.batch_sizes)
                           * np.asarray(self.lengths)).sum())
        return 1.0 - real / allocated if allocated else 0.0


def length_histogram(lengths, max_length: int) -> list[int]:
    """Counts of pair lengths 0..max_length (what the manifest stores per shard)."""
    return np.bincount(np.minimum(np.asarray(lengths, dtype=np.int64), max_length + 1),
                       minlength=max_length + 2)[:max_length + 1].tolist()


def worker_length_histogram(manifest: dict, rank: int, world_size: int) -> np.ndarray:
    hists = [np.asarray(f["lengths"], dtype=np.int64) for f in worker_shards(manifest, "train", rank, world_size)]
    out = np.zeros(max(len(h) for h in hists), dtype=np.int64)
    for h in hists:
        out[:len(h)] += h
    return out


def synthetic_length_histogram(pairs: int, max_length: int, median: float = 27.0, sigma: float = 0.6) -> np.ndarray:
    """A log-normal pair-length histogram (median ~27 subwords, like WMT En-De) of `pairs` pairs up to max_length."""
    edges = np.arange(max_length + 1) + 0.5
    cdf = np.array([0.5 * (1 + math.erf((math.log(e) - math.log(median)) / (sigma * math.sqrt(2)))) for e in edges])
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    pmf[:2] = 0.0
    pmf /= pmf.sum()
    hist = np.floor(pmf * pairs).astype(np.int64)
    hist[int(np.argmax(pmf))] += pairs - hist.sum()
    return hist


# ---------------------------------------------------------------------------------------------------------------------
# Training batches

def to_model_inputs(source, target):
    """(source, target) [B, L] -> the train step's (x, y): the decoder reads the targets shifted right behind a 0."""
    target_input = np.concatenate([np.zeros_like(target[:, :1]), target[:, :-1]], axis=1)
    return {"source": source, "target_input": target_input}, target


def _epoch_seed(seed: int, rank: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0] & 0x7FFFFFFF)


def _shuffled_pairs(files, seed: int, cycle_length: int, max_length: int, shuffle_buffer: int):
    """The (source, target) records of files, in an order the seed decides (files shuffled, interleaved, then a
    shuffle buffer), pairs longer than max_length left out: the stream both training pipelines bucket."""
    import tensorflow as tf

    order = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=seed, reshuffle_each_iteration=False)
    ds = order.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)), block_length=1,
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.map(parse_pair, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.filter(lambda s, t: tf.maximum(tf.size(s), tf.size(t)) <= max_length)
    if shuffle_buffer > 1:
        ds = ds.shuffle(shuffle_buffer, seed=seed + 1, reshuffle_each_iteration=False)
    return ds


def _bucket_of(lengths):
    """A pair's bucket: the first bucket length that holds its longer side (lengths: a tf int64 tensor)."""
    import tensorflow as tf

    def bucket(s, t):
        length = tf.cast(tf.maximum(tf.size(s), tf.size(t)), tf.int64)
        return tf.reduce_min(tf.where(length <= lengths))
    return bucket


class TrainPipeline:
    """tf.data over one worker's TFRecord shards: shard shuffle, interleave, parse, length filter, example shuffle,
    bucketing to fixed shapes, then empty batches up to exactly `steps` batches per epoch (the most any worker
    needs: no pair is cut off)."""

    def __init__(self, files, plan: BucketPlan, max_length: int, steps: int, shuffle_buffer: int, seed: int,
                 rank: int = 0, as_numpy: bool = False, cycle_length: int = 8, reader: str = "tf.data"):
        self.files, self.plan, self.max_length, self.steps = list(files), plan, max_length, steps
        self.shuffle_buffer, self.seed, self.rank, self.as_numpy = shuffle_buffer, seed, rank, as_numpy
        self.cycle_length, self.reader = cycle_length, reader

    def dataset(self, epoch: int):
        import tensorflow as tf

        seed = _epoch_seed(self.seed, self.rank, epoch)
        lengths = tf.constant(self.plan.lengths, tf.int64)
        sizes = tf.constant(self.plan.batch_sizes, tf.int64)
        max_length = self.max_length

        ds = _shuffled_pairs(self.files, seed, self.cycle_length, max_length, self.shuffle_buffer)
        bucket = _bucket_of(lengths)

        def batch(key, window):
            size, length = tf.gather(sizes, key), tf.gather(lengths, key)
            shape = tf.reshape(length, [1])

            def fill_rows(s, t):
                missing = [[0, size - tf.cast(tf.shape(s)[0], tf.int64)], [0, 0]]
                return tf.pad(s, missing), tf.pad(t, missing)

            return window.padded_batch(size, padded_shapes=(shape, shape)).map(fill_rows)

        ds = ds.group_by_window(bucket, batch, window_size_func=lambda key: tf.gather(sizes, key))
        empty = tf.zeros([self.plan.batch_sizes[0], self.plan.lengths[0]], tf.int32)
        ds = ds.concatenate(tf.data.Dataset.from_tensors((empty, empty)).repeat())

        def split(s, t):
            target_input = tf.concat([tf.zeros_like(t[:, :1]), t[:, :-1]], axis=1)
            return {"source": s, "target_input": target_input}, t

        return ds.map(split).take(self.steps).prefetch(2)

    def batches(self, epoch: int):
        if self.reader == "numpy":
            return (to_model_inputs(source, target) for source, target in text_numpy.train_batches(
                self.files, self.plan, self.max_length, self.steps, self.shuffle_buffer,
                _epoch_seed(self.seed, self.rank, epoch), self.cycle_length))
        ds = self.dataset(epoch)
        return ds.as_numpy_iterator() if self.as_numpy else iter(ds)


class SyntheticTextBatches:
    """Random token batches with the real pipeline's shapes (its buckets, a WMT-like length mix); NumPy only."""

    def __init__(self, plan: BucketPlan, vocab_size: int, max_length: int, pairs: int, steps: int, seed: int):
        self.plan, self.vocab_size, self.steps, self.seed = plan, vocab_size, steps, seed
        per_bucket = plan.batches_per_bucket(synthetic_length_histogram(pairs, max_length))
        self.buckets = np.repeat(np.arange(len(per_bucket)), per_bucket)

    def _side(self, rng, size, low, high):
        lengths = rng.integers(low + 1, high + 1, size=size)
        ids = rng.integers(EOS_ID + 2, self.vocab_size, size=(size, high)).astype(np.int32)
        positions = np.arange(high)
        ids[positions >= lengths[:, None] - 1] = 0
        ids[np.arange(size), lengths - 1] = EOS_ID
        return ids

    def batches(self, epoch: int):
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.buckets)
        # The first batch comes from the most common bucket: a loop that repeats one batch measures a typical one.
        common = int(np.bincount(self.buckets).argmax())
        first = int(np.flatnonzero(order == common)[0])
        order[[0, first]] = order[[first, 0]]
        for k in order[:self.steps]:
            high = self.plan.lengths[k]
            low = self.plan.lengths[k - 1] if k else 1
            size = self.plan.batch_sizes[k]
            yield to_model_inputs(self._side(rng, size, low, high), self._side(rng, size, max(0, low - 4), high))


def epoch_steps(plan: BucketPlan, manifest: dict | None, num_workers: int, train_pairs: int, max_length: int) -> int:
    """Steps per epoch, the same on every worker: the most batches any worker's shards give. The others end their
    epoch with empty batches (TrainPipeline; they add nothing to the loss), so every pair is trained on once per
    epoch however the shards divide. Without a manifest (synthetic data): a WMT-like length mix of train_pairs."""
    if manifest is None:
        return plan.steps(synthetic_length_histogram(train_pairs // num_workers, max_length))
    return max(plan.steps(worker_length_histogram(manifest, r, num_workers)) for r in range(num_workers))


def padding_fraction(batches) -> tuple[float, int]:
    """(padded positions / allocated positions, real tokens) measured over (x, y) batches (source + target)."""
    real = allocated = 0
    for x, y in batches:
        source, target = np.asarray(x["source"]), np.asarray(y)
        real += int(np.count_nonzero(source) + np.count_nonzero(target))
        allocated += source.size + target.size
    return (1.0 - real / allocated if allocated else 0.0), real


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation set

def eval_batches(lengths, batch_size: int, min_boundary: int = 8, scale: float = 1.5):
    """Sentences sorted by length in batches of batch_size rows (-1 = empty row), each padded to a length on the
    grid min_boundary * scale^k: few distinct shapes, so beam search compiles a handful of times per run."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return []
    grid, x = [], max(1, int(min_boundary))
    while not grid or grid[-1] < lengths.max():
        grid.append(x)
        x = max(x + 1, int(math.ceil(x * scale)))
    order = np.argsort(lengths, kind="stable")
    out = []
    for lo in range(0, len(order), batch_size):
        rows = order[lo:lo + batch_size]
        length = grid[int(np.searchsorted(grid, lengths[rows].max(), side="left"))]
        out.append((np.concatenate([rows, -np.ones(batch_size - len(rows), dtype=np.int64)]), length))
    return out


def pad_eval_batch(sequences, rows: int, length: int) -> np.ndarray:
    batch = np.zeros((rows, length), dtype=np.int32)
    for i, seq in enumerate(sequences):
        batch[i, :len(seq)] = seq
    return batch


def synthetic_eval_set(sentences: int, vocab_size: int, max_length: int, seed: int):
    """Random sources and references (ids as words), for --synthetic: measures decoding, not quality."""
    rng = np.random.default_rng([seed, 2014])
    sources, references = [], []
    for _ in range(sentences):
        n = int(rng.integers(4, max_length))
        ids = rng.integers(EOS_ID + 2, vocab_size, size=n).astype(np.int32)
        ids[-1] = EOS_ID
        sources.append(ids)
        references.append(" ".join(str(t) for t in rng.integers(EOS_ID + 2, vocab_size, size=n - 1)))
    return sources, references, lambda ids: " ".join(str(t) for t in ids)


def load_eval_records(data_dir: str, manifest: dict, reader: str = "tf.data"):
    """(source id arrays in test-set order, reference sentences, the vocabulary file) of a prepared dataset, read
    with tf.data or without TensorFlow (reader "numpy": inputs/text_numpy)."""
    by_split = {}
    for f in manifest["files"]:
        by_split.setdefault(f.get("split"), []).append(os.path.join(data_dir, f["name"]))
    for split in ("eval", "reference", "vocab"):
        if split not in by_split:
            raise DataError(f"{os.path.join(data_dir, 'manifest.json')}: lists no {split} file")
    if reader == "numpy":
        records = text_numpy.eval_records(sorted(by_split["eval"]))
    else:
        import tensorflow as tf

        records = []
        for path in sorted(by_split["eval"]):
            for index, ids in tf.data.TFRecordDataset(path).map(parse_eval).as_numpy_iterator():
                records.append((int(index), ids.astype(np.int32)))
    records.sort(key=lambda r: r[0])
    with open(by_split["reference"][0], encoding="utf-8") as f:
        references = f.read().split("\n")[:-1]
    if len(references) != len(records) or [r[0] for r in records] != list(range(len(records))):
        raise DataError(f"{by_split['reference'][0]}: {len(references)} reference lines for {len(records)} "
                        f"eval records (prepare the data again)")
    return [r[1] for r in records], references, by_split["vocab"][0]


def load_eval_set(data_dir: str, manifest: dict, reader: str = "tf.data"):
    """(source id arrays, their test-set indices, reference sentences, detokenize) of a prepared dataset, with the
    vocabulary named by the manifest's options.tokenizer (open_vocabulary)."""
    sources, references, vocab_path = load_eval_records(data_dir, manifest, reader)
    tokenizer = manifest.get("options", {}).get("tokenizer", "sentencepiece")
    return sources, np.arange(len(sources)), references, vocabulary.open_vocabulary(vocab_path, tokenizer).decode


# ---------------------------------------------------------------------------------------------------------------------
# TFRecord helpers (data_prep writes, the pipelines read)

def serialize_pair(source, target) -> bytes:
    import tensorflow as tf

    feature = {"inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=source)),
               "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=target))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def serialize_eval(index: int, source) -> bytes:
    import tensorflow as tf

    feature = {"inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=source)),
               "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[index]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_pair(record):
    import tensorflow as tf

    parsed = tf.io.parse_single_example(record, {"inputs": tf.io.VarLenFeature(tf.int64),
                                                 "targets": tf.io.VarLenFeature(tf.int64)})
    return (tf.cast(tf.sparse.to_dense(parsed["inputs"]), tf.int32),
            tf.cast(tf.sparse.to_dense(parsed["targets"]), tf.int32))


def parse_eval(record):
    import tensorflow as tf

    parsed = tf.io.parse_single_example(record, {"inputs": tf.io.VarLenFeature(tf.int64),
                                                 "index": tf.io.FixedLenFeature([], tf.int64)})
    return parsed["index"], tf.cast(tf.sparse.to_dense(parsed["inputs"]), tf.int32)


__all__ = ["PAD_ID", "EOS_ID", "BucketPlan", "length_histogram", "worker_length_histogram",
           "synthetic_length_histogram", "to_model_inputs", "TrainPipeline", "SyntheticTextBatches",
           "padding_fraction", "eval_batches", "pad_eval_batch", "synthetic_eval_set", "load_eval_set",
           "serialize_pair", "serialize_eval", "parse_pair", "parse_eval"]


# ---------------------------------------------------------------------------------------------------------------------
# GNMT (data_prep.wmt_gnmt): sentence-count buckets, <s>-started targets, BPE vocabulary

def sentence_bucket_plan(batch_size: int, max_length: int, num_buckets: int = 5) -> BucketPlan:
    """The GNMT reference's BucketingSampler buckets (mlcommons/training rnn_translator/pytorch/seq2seq/data/
    sampler.py at 69dbe8b): width w = ceil(max_length / num_buckets), a pair goes to bucket
    min(max(len(src) // w, len(tgt) // w), num_buckets - 1), every batch holds batch_size sentences. As a BucketPlan:
    bucket b holds lengths up to (b + 1) * w - 1, the last up to max_length."""
    width = -(-max_length // num_buckets)
    lengths = tuple((b + 1) * width - 1 for b in range(num_buckets - 1)) + (int(max_length),)
    return BucketPlan(lengths, (int(batch_size),) * num_buckets)


def global_batch_steps(plan: BucketPlan, histogram, num_workers: int) -> int:
    """Steps per epoch of the GNMT reference's BucketingSampler (mlcommons/training rnn_translator/pytorch/seq2seq/
    data/sampler.py at 69dbe8b, lines 195-229): each bucket cut into full global batches of batch_size x workers
    sentences, its remainder dropped, so sum over buckets of count // global batch, whatever the worker count."""
    global_sizes = np.asarray(plan.batch_sizes, dtype=np.int64) * int(num_workers)
    return int((plan.bucket_counts(histogram) // global_sizes).sum())


class GlobalBatchTrainPipeline:
    """GNMT's training batches as the reference's BucketingSampler deals them (sampler.py at 69dbe8b): every worker
    reads all shards in the same seeded order (one seed per epoch, the same on every worker), bucket by length into
    full global batches of batch_size x world_size sentences (each bucket's remainder dropped), and takes rows
    [rank x batch_size, (rank + 1) x batch_size) of each (distribute_batches: consecutive ranks, consecutive
    slices). So every worker runs global_batch_steps steps with full batches, and the workers' rows of an epoch
    are disjoint. The reference shuffles each bucket with a full permutation and then the global batches; here the
    shuffle is a seeded buffer over shuffled shards, and buckets interleave in the order they fill. Records hold
    <s> ... </s> on both sides: the decoder reads targets[:-1] and predicts targets[1:]."""

    def __init__(self, files, plan: BucketPlan, max_length: int, steps: int, shuffle_buffer: int, seed: int,
                 rank: int = 0, world_size: int = 1, as_numpy: bool = False, cycle_length: int = 8,
                 reader: str = "tf.data"):
        self.files, self.plan, self.max_length, self.steps = list(files), plan, max_length, steps
        self.shuffle_buffer, self.seed, self.as_numpy = shuffle_buffer, seed, as_numpy
        self.rank, self.world_size, self.cycle_length, self.reader = rank, world_size, cycle_length, reader

    def dataset(self, epoch: int):
        import tensorflow as tf

        seed = _epoch_seed(self.seed, 0, epoch)   # rank 0's: every worker deals the same global batches
        lengths = tf.constant(self.plan.lengths, tf.int64)
        global_sizes = tf.constant([b * self.world_size for b in self.plan.batch_sizes], tf.int64)
        local_sizes = tf.constant(self.plan.batch_sizes, tf.int64)
        max_length, rank = self.max_length, self.rank

        ds = _shuffled_pairs(self.files, seed, self.cycle_length, max_length, self.shuffle_buffer)
        bucket = _bucket_of(lengths)

        def batch(key, window):
            shape = tf.reshape(tf.gather(lengths, key), [1])
            return window.padded_batch(tf.gather(global_sizes, key), padded_shapes=(shape, shape),
                                       drop_remainder=True)

        def my_rows(s, t):
            size = tf.cast(tf.gather(local_sizes, bucket_of_batch(s, t)), tf.int32)
            s, t = s[rank * size:(rank + 1) * size], t[rank * size:(rank + 1) * size]
            return {"source": s, "target_input": t[:, :-1]}, t[:, 1:]

        def bucket_of_batch(s, t):
            return tf.reduce_min(tf.where(tf.cast(tf.shape(s)[1], tf.int64) <= lengths))

        ds = ds.group_by_window(bucket, batch, window_size_func=lambda key: tf.gather(global_sizes, key))
        return ds.map(my_rows).take(self.steps).prefetch(2)

    def batches(self, epoch: int):
        if self.reader == "numpy":
            return text_numpy.global_batches(self.files, self.plan, self.max_length, self.steps, self.shuffle_buffer,
                                             _epoch_seed(self.seed, 0, epoch), self.rank, self.world_size,
                                             self.cycle_length)
        ds = self.dataset(epoch)
        return ds.as_numpy_iterator() if self.as_numpy else iter(ds)


__all__ += ["sentence_bucket_plan", "GlobalBatchTrainPipeline", "global_batch_steps", "load_eval_records"]
