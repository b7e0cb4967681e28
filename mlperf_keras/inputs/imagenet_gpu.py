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
   uint8 canvas (CuPy), imported into JAX once (DLPack);
4. one jitted function of static shapes (the canvas size rounded up to a power of two) gathers the four taps of
   every output pixel and interpolates in float32, as TF's legacy bilinear kernel does, then rounds to uint8:
   resize, flip (folded into the column taps) and the closed path's rounding. Normalisation stays the model's
   first layer (layers/resnet.Normalize), as on the tf.data path.
Eval: the closed path's resize of the shorter side to eval_resize and centre crop, decoding the region the crop's
taps read.

Without nvImageCodec, CuPy or a CUDA device the same host work runs with PIL decoding (threads) into the same canvas
in host memory, then the same jitted function: said once on the console.
"""
from __future__ import annotations

import concurrent.futures
import io
import os
from typing import Iterator

import numpy as np

from mlperf_keras.inputs import image_geometry, record_reader, record_streams
from mlperf_keras.inputs.manifest import DataError

PIPELINES = ("auto", "tf.data", "gpu", "host")
_MIN_CANVAS = 1 << 20
_said: set = set()


# ---- record order ----

def train_record_stream(paths: list[str], *, seed: int, epoch: int, num_samples: int, shuffle_buffer: int = 10_000,
                        cycle_length: int = 10) -> Iterator[bytes]:
    """One worker's epoch of serialized training records, num_samples of them: every record of `paths` once, in a
    seeded shuffled order, then read again from the start (a new file order) until num_samples are out."""
    if not paths:
        raise DataError("no record files to read")
    rng = np.random.default_rng([int(seed), int(epoch), 0x5EED])
    out = 0
    while True:
        order = [paths[i] for i in rng.permutation(len(paths))]
        stream = record_streams.interleave(order, max(1, min(cycle_length, len(order))))
        if shuffle_buffer > 1:
            stream = record_streams.shuffled(stream, shuffle_buffer, rng)
        empty = True
        for record in stream:
            empty = False
            yield record
            out += 1
            if out == num_samples:
                return
        if empty:
            raise DataError(f"the record files hold no records: {paths[0]} ...")


def eval_record_stream(paths: list[str], cycle_length: int = 10) -> Iterator[bytes]:
    """Every record of `paths` once, files interleaved in the given order (as inputs/records.record_dataset)."""
    if not paths:
        raise DataError("no record files to read")
    return record_streams.interleave(list(paths), max(1, min(cycle_length, len(paths))))


def _jpeg_and_label(serialized: bytes, label_offset: int) -> tuple[bytes, int]:
    example = record_reader.parse_example(serialized)
    try:
        (jpeg,) = example["image/encoded"]
        (label,) = example["image/class/label"]
    except (KeyError, ValueError):
        raise DataError("record is not an ImageNet example of data_prep.imagenet (image/encoded, "
                        "image/class/label)") from None
    return jpeg, int(label) + label_offset


# ---- geometry of a batch ----

class BatchGeometry:
    """Per image: the source window to decode (y, x, h, w) and the taps of the output rows and cols relative to it;
    packed, the flat canvas offsets the jitted resize gathers from."""

    def __init__(self, windows: np.ndarray, rows: tuple, cols: tuple, valid: np.ndarray):
        """windows [B, 4]; rows and cols: (lower, upper, lerp), each [B, S]."""
        self.windows, self.valid = windows, valid
        sizes = windows[:, 2] * windows[:, 3] * 3
        self.bases = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.needed = int(sizes.sum())
        widths = windows[:, 3:4] * 3
        self.row_lo = rows[0] * widths + self.bases[:, None]
        self.row_hi = rows[1] * widths + self.bases[:, None]
        self.row_lerp = rows[2].astype(np.float32)
        self.col_lo, self.col_hi = cols[0] * 3, cols[1] * 3
        self.col_lerp = cols[2].astype(np.float32)

    def canvas_size(self) -> int:
        size = max(_MIN_CANVAS, 1 << max(0, self.needed - 1).bit_length())
        if size > 2**31 - 1:
            raise DataError(f"one batch's crops need {self.needed:,} bytes, more than one canvas indexes (2 GiB): "
                            f"use a smaller batch per worker")
        return size

    def taps(self):
        return (self.row_lo.astype(np.int32), self.row_hi.astype(np.int32), self.row_lerp,
                self.col_lo.astype(np.int32), self.col_hi.astype(np.int32), self.col_lerp)


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


# ---- the jitted resize ----

_resize_fn = None


def resize_from_canvas(canvas, taps, valid):
    """uint8 [B, S, S, 3] from a flat uint8 canvas and the batch's taps (jitted once per canvas size)."""
    global _resize_fn
    if _resize_fn is None:
        import jax
        import jax.numpy as jnp

        def resize(canvas, row_lo, row_hi, row_lerp, col_lo, col_hi, col_lerp, valid):
            channel = jnp.arange(3, dtype=jnp.int32)

            def tap(rows, cols):
                return canvas[rows[:, :, None, None] + cols[:, None, :, None] + channel].astype(jnp.float32)

            x_lerp, y_lerp = col_lerp[:, None, :, None], row_lerp[:, :, None, None]
            top_left, top_right = tap(row_lo, col_lo), tap(row_lo, col_hi)
            bottom_left, bottom_right = tap(row_hi, col_lo), tap(row_hi, col_hi)
            # the order of TF's compute_lerp: across first, then down
            top = top_left + (top_right - top_left) * x_lerp
            bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
            out = jnp.clip(jnp.round(top + (bottom - top) * y_lerp), 0.0, 255.0).astype(jnp.uint8)
            return jnp.where(valid[:, None, None, None], out, jnp.zeros_like(out))

        _resize_fn = jax.jit(resize)
    return _resize_fn(canvas, *taps, valid)


# ---- decoders ----

def _say_once(message: str):
    if message not in _said:
        _said.add(message)
        print(f"[resnet] {message}", flush=True)


def gpu_decoder_missing() -> str | None:
    """Why the GPU decoder cannot run here (None when it can): a CUDA device for JAX, nvImageCodec and CuPy."""
    try:
        import jax

        if jax.devices()[0].platform != "gpu":
            return "no CUDA device for JAX"
    except Exception as e:  # noqa: BLE001 (any backend failure means: no GPU here)
        return f"JAX has no device ({e})"
    try:
        from nvidia import nvimgcodec  # noqa: F401
    except ImportError:
        return "nvImageCodec is not installed (pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg)"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda13x)"
    return None


class HostDecoder:
    """PIL (libjpeg-turbo) in threads into a canvas in host memory."""

    name = "host"

    def __init__(self, threads: int = 8):
        self._pool = concurrent.futures.ThreadPoolExecutor(max(1, threads))

    @staticmethod
    def _decode(jpeg: bytes, window) -> np.ndarray:
        from PIL import Image

        y, x, h, w = (int(v) for v in window)
        try:
            with Image.open(io.BytesIO(jpeg)) as im:
                im = im.convert("RGB")
                return np.asarray(im.crop((x, y, x + w, y + h)), dtype=np.uint8)
        except OSError as e:
            raise DataError(f"cannot decode a JPEG record ({e})") from None

    def canvas(self, jpegs: list[bytes], geometry: BatchGeometry):
        import jax

        canvas = np.empty(geometry.canvas_size(), np.uint8)
        crops = self._pool.map(self._decode, jpegs, geometry.windows)
        for base, crop in zip(geometry.bases, crops):
            canvas[base:base + crop.size] = crop.reshape(-1)
        return jax.device_put(canvas)


class GpuDecoder:
    """nvImageCodec region decodes on the GPU, copied into one CuPy canvas, imported into JAX by DLPack."""

    name = "gpu"

    def __init__(self):
        import cupy
        from nvidia import nvimgcodec

        self._cupy, self._nvimgcodec = cupy, nvimgcodec
        self._decoder = nvimgcodec.Decoder()
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def canvas(self, jpegs: list[bytes], geometry: BatchGeometry):
        import jax

        cp, nv = self._cupy, self._nvimgcodec
        streams = []
        for jpeg, (y, x, h, w) in zip(jpegs, geometry.windows):
            code = nv.CodeStream(jpeg)
            streams.append(code.get_sub_code_stream(region=nv.Region(int(y), int(x), int(y + h), int(x + w))))
        runtime = cp.cuda.runtime
        with self._stream:
            images = self._decoder.decode(streams, cuda_stream=self._stream.ptr)
            canvas = cp.empty(geometry.canvas_size(), cp.uint8)
            for base, image, (_, _, h, w) in zip(geometry.bases, images, geometry.windows):
                if image is None:
                    raise DataError("nvImageCodec could not decode a JPEG record")
                interface = image.__cuda_array_interface__
                shape, typestr = tuple(interface["shape"]), interface["typestr"]
                if shape != (h, w, 3) or typestr != "|u1":
                    raise DataError(f"nvImageCodec decoded a {shape} {typestr} crop, {(int(h), int(w), 3)} uint8 "
                                    f"expected")
                pitch = interface["strides"][0] if interface.get("strides") else int(w) * 3
                # one 2-D copy per image (its rows may be pitched): a runtime call, no CuPy array or kernel
                runtime.memcpy2DAsync(canvas.data.ptr + int(base), int(w) * 3, interface["data"][0], pitch,
                                      int(w) * 3, int(h), runtime.memcpyDeviceToDevice, self._stream.ptr)
        self._stream.synchronize()
        return jax.dlpack.from_dlpack(canvas)


_decoders: dict = {}


def make_decoder(pipeline: str, threads: int | None = None):
    """The decoder for input_pipeline 'gpu' or 'host' (one per process, shared by training and eval); 'gpu' falls
    back to the host, said once, where it cannot run."""
    threads = threads or min(8, os.cpu_count() or 1)
    if pipeline == "gpu":
        missing = gpu_decoder_missing()
        if missing is None:
            if "gpu" not in _decoders:
                _say_once("input: JPEGs decoded on the GPU (nvImageCodec), resized there (JAX)")
                _decoders["gpu"] = GpuDecoder()
            return _decoders["gpu"]
        _say_once(f"input: JPEGs decoded on the host (PIL, {threads} threads): {missing}")
    if "host" not in _decoders:
        _decoders["host"] = HostDecoder(threads)
    return _decoders["host"]


def choose_pipeline(requested: str) -> str:
    """tf.data, gpu or host for the hparam input_pipeline (PIPELINES) on this backend and machine."""
    import keras

    from mlperf_keras.config import ConfigError

    if requested not in PIPELINES:
        raise ConfigError(f"input_pipeline={requested!r}: expected one of {', '.join(PIPELINES)}")
    backend = keras.backend.backend()
    if requested in ("gpu", "host") and backend != "jax":
        raise ConfigError(f"input_pipeline={requested} runs on the JAX backend (KERAS_BACKEND=jax); "
                          f"the {backend} backend reads with tf.data")
    if requested != "auto":
        return requested
    if backend != "jax":
        return "tf.data"
    import jax

    try:
        on_gpu = jax.devices()[0].platform == "gpu"
    except RuntimeError:
        on_gpu = False
    if on_gpu:
        return "gpu"  # make_decoder says so and decodes on the host where nvImageCodec or CuPy is missing
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return "host"
    return "tf.data"


# ---- batches ----

def train_batches(paths: list[str], decoder, *, seed: int, epoch: int, rank: int, batch_size: int, num_batches: int,
                  image_size: int, crop: image_geometry.CropParams = image_geometry.CropParams(),
                  shuffle_buffer: int = 10_000, label_offset: int = 0, cycle_length: int = 10,
                  prefetch: int = 2) -> Iterator:
    """Exactly num_batches (uint8 images [B, S, S, 3] as a JAX array, int32 labels [B]) of one worker's epoch."""
    records = train_record_stream(paths, seed=seed, epoch=epoch, num_samples=num_batches * batch_size,
                                  shuffle_buffer=shuffle_buffer, cycle_length=cycle_length)

    def plan():
        for index in range(num_batches):
            jpegs, labels = zip(*(_jpeg_and_label(next(records), label_offset) for _ in range(batch_size)))
            sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs], np.int64)
            rng = np.random.default_rng([int(seed), int(epoch), int(rank), index])
            geometry, _ = train_geometry(sizes, rng, image_size, crop)
            yield list(jpegs), geometry, np.array(labels, np.int32)

    return _decoded(record_streams.prefetched(plan(), prefetch, "imagenet-input"), decoder, prefetch)


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
    records = eval_record_stream(paths, cycle_length)

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


__all__ = ["BatchGeometry", "GpuDecoder", "HostDecoder", "PIPELINES", "choose_pipeline", "eval_batches", "eval_geometry",
           "eval_record_stream", "gpu_decoder_missing", "make_decoder", "resize_from_canvas", "train_batches",
           "train_geometry", "train_record_stream"]
