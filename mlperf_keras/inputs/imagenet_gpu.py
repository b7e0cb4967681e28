"""ResNet's ImageNet input on the JAX backend without TensorFlow: JPEGs decoded on the GPU, resized there.

Why: an H200 trains ResNet-50 at about 7,100 images/s, and decoding alone on its host's 16 cores reaches 2,300-6,500
JPEGs/s; the GPU's JPEG decoders reach 9,600-22,700/s (nvImageCodec). Per-image JAX operations on variable shapes
compile per shape and dispatch one by one, so the batch is built outside JAX and enters it once.

Per batch:
1. the host reads the worker's records (inputs/record_reader, CRCs checked), in the closed path's kind of order:
   the worker's files in a seeded order, cycle_length files interleaved one record at a time, a shuffle buffer of
   shuffle_buffer records, every record once per epoch, then the stream read again (new file order) to fill the
   epoch's last batch (as inputs/image.train_records);
2. the host draws each image's crop window from the JPEG header's size and the flip (image_geometry: the
   distribution of tf.image.sample_distorted_bounding_box, NumPy's random numbers; one generator per (seed,
   epoch, worker, batch)), and computes the bilinear taps of the resize;
3. nvImageCodec decodes only each crop window (a region decode) on the GPU; each crop is copied into one flat
   uint8 canvas (CuPy), imported into JAX once (DLPack): inputs/jpeg_batches, shared with SSD;
4. one jitted function of static shapes (the canvas size rounded up to a power of two) gathers the four taps of
   every output pixel and interpolates in float32, as TF's legacy bilinear kernel does, then rounds to uint8:
   resize, flip (folded into the column taps) and the closed path's rounding. Normalisation stays the model's
   first layer (layers/resnet.Normalize), as on the tf.data path.
Steps 1-2 run in a thread, or (hparam input_workers) in worker processes (inputs/worker_process), each planning
every N-th batch; or (hparam decode_workers) steps 1-3 run in worker processes that see the GPU, each canvas passed
to the training process through CUDA IPC (inputs/decode_process).
Eval: the closed path's resize of the shorter side to eval_resize and centre crop, decoding the region the crop's
taps read.

Without nvImageCodec, CuPy or a CUDA device the same host work runs with PIL decoding (threads) into the same canvas
in host memory, then the same jitted function: said once on the console.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from mlperf_keras.inputs import decode_process, image_geometry, record_reader, record_streams, worker_process
from mlperf_keras.inputs.jpeg_batches import BatchGeometry, resize_from_canvas
from mlperf_keras.inputs.manifest import DataError


# ---- record order ----

_KEYS = frozenset(["image/encoded", "image/class/label"])


def _jpeg_and_label(serialized: bytes, label_offset: int) -> tuple[bytes, int]:
    example = record_reader.parse_example(serialized, _KEYS)
    try:
        (jpeg,) = example["image/encoded"]
        (label,) = example["image/class/label"]
    except (KeyError, ValueError):
        raise DataError("record is not an ImageNet example of data_prep.imagenet (image/encoded, "
                        "image/class/label)") from None
    return jpeg, int(label) + label_offset


# ---- geometry of a batch ----

def train_geometry(sizes: np.ndarray, rng: np.random.Generator, image_size: int,
                   crop: image_geometry.CropParams) -> tuple[BatchGeometry, np.ndarray]:
    """Crop windows and flips of a batch of images of sizes [B, 2] (height, width): (geometry, flips)."""
    windows = image_geometry.sample_crop_windows(sizes[:, 0], sizes[:, 1], rng, crop)
    flips = rng.random(len(sizes)) < 0.5
    rows, cols = image_geometry.train_geometry(windows, flips, image_size)
    return BatchGeometry(windows, rows, cols, np.ones(len(sizes), bool)), flips


def eval_geometry(sizes: np.ndarray, image_size: int, resize_min: int, valid: np.ndarray) -> BatchGeometry:
    parts = [image_geometry.eval_geometry(int(h), int(w), image_size, resize_min) for h, w in sizes]
    windows = np.array([p[0] for p in parts], np.int64)
    stacked = lambda which: tuple(np.stack([p[which][k] for p in parts]) for k in range(3))  # noqa: E731
    return BatchGeometry(windows, stacked(1), stacked(2), valid)


# ---- batches ----

def train_batches(paths: list[str], decoder, *, seed: int, epoch: int, rank: int, batch_size: int, num_batches: int,
                  image_size: int, crop: image_geometry.CropParams = image_geometry.CropParams(),
                  shuffle_buffer: int = 10_000, label_offset: int = 0, cycle_length: int = 10,
                  prefetch: int = 2, plan_workers: int = 0, decode_workers: int = 0) -> Iterator:
    """Exactly num_batches (uint8 images [B, S, S, 3] as a JAX array, int32 labels [B]) of one worker's epoch.

    plan_workers: 0 reads and plans the batches in a thread; N > 0 in N worker processes (inputs/worker_process),
    each reading the whole stream and planning every N-th batch: the same batches. decode_workers: N > 0, with a
    GPU decoder, reads, plans and decodes every N-th batch in each of N processes that see the GPU
    (inputs/decode_process; plan_workers is then unused): the same batches."""
    plan = dict(paths=paths, seed=seed, epoch=epoch, rank=rank, batch_size=batch_size, num_batches=num_batches,
                image_size=image_size, crop=crop, shuffle_buffer=shuffle_buffer, label_offset=label_offset,
                cycle_length=cycle_length)
    plans, decoder = decode_process.plans_and_decoder(_train_plans, plan, decoder, prefetch=prefetch,
                                                      plan_workers=plan_workers, decode_workers=decode_workers,
                                                      name="imagenet-input")
    return _decoded(plans, decoder, prefetch)


def _train_plans(paths, *, seed, epoch, rank, batch_size, num_batches, image_size, crop, shuffle_buffer,
                 label_offset, cycle_length, shard=(0, 1)) -> Iterator:
    """(jpegs, geometry, labels) of the epoch's batches i with i % shard[1] == shard[0] (all by default): the host
    half of train_batches. Every record is read, to keep the order; only the shard's batches are parsed."""
    records = record_streams.epoch_stream(paths, seed=seed, epoch=epoch, num_samples=num_batches * batch_size,
                                          shuffle_buffer=shuffle_buffer, cycle_length=cycle_length)
    for index in range(num_batches):
        chunk = [next(records) for _ in range(batch_size)]
        if index % shard[1] != shard[0]:
            continue
        jpegs, labels = zip(*(_jpeg_and_label(r, label_offset) for r in chunk))
        sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs], np.int64)
        rng = np.random.default_rng([int(seed), int(epoch), int(rank), index])
        geometry, _ = train_geometry(sizes, rng, image_size, crop)
        yield worker_process.Blobs(jpegs), geometry, np.array(labels, np.int32)


def _decoded(plans: Iterator, decoder, prefetch: int) -> Iterator:
    """Batches of planned (jpegs, geometry, labels), decoded and resized by a second thread: the decoder's waits
    (GPU, or PIL's threads) leave the interpreter to the thread that reads and plans the next batches."""

    def decode():
        for jpegs, geometry, labels in plans:
            canvas = decoder.canvas(jpegs, geometry)
            yield resize_from_canvas(canvas, geometry.taps(), geometry.valid), labels

    return record_streams.prefetched(decode(), prefetch, "imagenet-input")


def eval_batches(paths: list[str], decoder, *, batch_size: int, image_size: int, resize_min: int,
                 label_offset: int = 0, cycle_length: int = 10, prefetch: int = 2) -> Iterator:
    """Every record of `paths` once, in full batches: the last one padded with zero images labelled -1."""
    records = record_streams.in_order(paths, cycle_length)

    def plan():
        while True:
            chunk = [_jpeg_and_label(r, label_offset) for _, r in zip(range(batch_size), records)]
            if not chunk:
                return
            jpegs, labels = map(list, zip(*chunk))
            valid = np.arange(batch_size) < len(chunk)
            missing = batch_size - len(chunk)
            sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs] + [(1, 1)] * missing, np.int64)
            # a padding entry decodes a 1x1 window (its size's geometry) of the first image, zeroed by the mask
            yield (jpegs + [jpegs[0]] * missing, eval_geometry(sizes, image_size, resize_min, valid),
                   np.array(labels + [-1] * missing, np.int32))
            if missing:
                return

    return _decoded(record_streams.prefetched(plan(), prefetch, "imagenet-input"), decoder, prefetch)


__all__ = ["eval_batches", "eval_geometry", "train_batches", "train_geometry"]
