"""JPEG batches for the JAX input pipelines (ResNet: inputs/imagenet_gpu.py, SSD: inputs/ssd_jax.py, Mask R-CNN:
inputs/maskrcnn_jax.py, which brings its own resize taps): each image's source window decoded into one flat uint8
canvas, on the GPU (nvImageCodec region decodes, copied into a CuPy canvas, imported into JAX once by DLPack) or on
the host (PIL threads, one device_put), then one jitted bilinear resize of static shapes gathers every output
pixel's four taps from the canvas.

Why one canvas: per-image JAX operations on variable shapes compile per shape and dispatch one by one; a canvas
whose size is rounded up to a power of two keeps the jitted functions to a handful of shapes.

Without nvImageCodec, CuPy or a CUDA device the GPU decoder falls back to the host one, said once on the console.
input_pipeline=gpu_hardware decodes on the GPU's hardware JPEG engines only (nvImageCodec's HW_GPU_ONLY backend:
A100, H100 and H200 have them, T4 and V100 do not): slower alone than nvImageCodec's choice, which decodes region
crops with CUDA kernels (ResNet's crops on an H100: 16,101 against 22,660 images/s), but it leaves the SMs to the
training step that runs beside it. That has not made feeding faster: ResNet-50 fed at 0.77 of its resident step
against 0.71-0.72 on one H100, at 0.66 against 0.66-0.69 on another.
"""
from __future__ import annotations

import concurrent.futures
import io
import os
import threading

import numpy as np

from mlperf_keras.inputs.manifest import DataError

PIPELINES = ("auto", "tf.data", "gpu", "gpu_hardware", "host")
_MIN_CANVAS = 1 << 20
_said: set = set()


# ---- geometry of a batch ----

class CanvasLayout:
    """Where each image's decoded source window (y, x, h, w) lies in the flat canvas: the decoders' part of a batch's
    geometry (BatchGeometry adds the 2-tap resize; Mask R-CNN's inputs/maskrcnn_jax.py its PIL-like taps)."""

    def __init__(self, windows: np.ndarray, valid: np.ndarray):
        """windows [B, 4] int64; valid [B] bool."""
        self.windows, self.valid = windows, valid
        sizes = windows[:, 2] * windows[:, 3] * 3
        self.bases = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.needed = int(sizes.sum())

    def canvas_size(self) -> int:
        size = max(_MIN_CANVAS, 1 << max(0, self.needed - 1).bit_length())
        if size > 2**31 - 1:
            raise DataError(f"one batch's crops need {self.needed:,} bytes, more than one canvas indexes (2 GiB): "
                            f"use a smaller batch per worker")
        return size


class BatchGeometry(CanvasLayout):
    """Per image: the source window to decode (y, x, h, w) and the taps of the output rows and cols relative to it;
    packed, the flat canvas offsets the jitted resize gathers from."""

    def __init__(self, windows: np.ndarray, rows: tuple, cols: tuple, valid: np.ndarray):
        """windows [B, 4]; rows and cols: (lower, upper, lerp), each [B, S]."""
        super().__init__(windows, valid)
        widths = windows[:, 3:4] * 3
        self.row_lo = rows[0] * widths + self.bases[:, None]
        self.row_hi = rows[1] * widths + self.bases[:, None]
        self.row_lerp = rows[2].astype(np.float32)
        self.col_lo, self.col_hi = cols[0] * 3, cols[1] * 3
        self.col_lerp = cols[2].astype(np.float32)

    def taps(self):
        return (self.row_lo.astype(np.int32), self.row_hi.astype(np.int32), self.row_lerp,
                self.col_lo.astype(np.int32), self.col_hi.astype(np.int32), self.col_lerp)


# ---- the jitted resize ----

def bilinear_from_canvas(canvas, row_lo, row_hi, row_lerp, col_lo, col_hi, col_lerp):
    """float32 [B, S, S, 3] in [0, 255]: every output pixel's four taps gathered from the flat uint8 canvas and
    interpolated in float32, as TF's legacy bilinear kernel does (traced inside the callers' jitted functions)."""
    import jax.numpy as jnp

    channel = jnp.arange(3, dtype=jnp.int32)

    def tap(rows, cols):
        return canvas[rows[:, :, None, None] + cols[:, None, :, None] + channel].astype(jnp.float32)

    x_lerp, y_lerp = col_lerp[:, None, :, None], row_lerp[:, :, None, None]
    top_left, top_right = tap(row_lo, col_lo), tap(row_lo, col_hi)
    bottom_left, bottom_right = tap(row_hi, col_lo), tap(row_hi, col_hi)
    # the order of TF's compute_lerp: across first, then down
    top = top_left + (top_right - top_left) * x_lerp
    bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
    return top + (bottom - top) * y_lerp


def to_uint8(pixels, valid):
    """Rounded and saturated to uint8 (inputs/image.to_uint8), images where not valid zeroed."""
    import jax.numpy as jnp

    out = jnp.clip(jnp.round(pixels), 0.0, 255.0).astype(jnp.uint8)
    return jnp.where(valid[:, None, None, None], out, jnp.zeros_like(out))


_resize_fn = None


def resize_from_canvas(canvas, taps, valid):
    """uint8 [B, S, S, 3] from a flat uint8 canvas and the batch's taps (jitted once per canvas size)."""
    global _resize_fn
    if _resize_fn is None:
        import jax

        _resize_fn = jax.jit(lambda canvas, taps, valid: to_uint8(bilinear_from_canvas(canvas, *taps), valid))
    return _resize_fn(canvas, tuple(taps), valid)


# ---- decoders ----

def say_once(message: str):
    if message not in _said:
        _said.add(message)
        print(f"[input] {message}", flush=True)


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
        return ("nvImageCodec is not installed (pip install mlperf_keras[gpu-decode], or nvidia-nvimgcodec-cu13 "
                "nvidia-nvjpeg)")
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed (pip install mlperf_keras[gpu-decode], or cupy-cuda13x)"
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

    def canvas(self, jpegs: list[bytes], geometry: CanvasLayout):
        import jax

        canvas = np.empty(geometry.canvas_size(), np.uint8)
        crops = self._pool.map(self._decode, jpegs, geometry.windows)
        for base, crop in zip(geometry.bases, crops):
            canvas[base:base + crop.size] = crop.reshape(-1)
        return jax.device_put(canvas)


class GpuDecoder:
    """nvImageCodec region decodes on the GPU, copied into one CuPy canvas, imported into JAX by DLPack; with
    hardware=True on the GPU's JPEG engines only."""

    def __init__(self, hardware: bool = False):
        import cupy
        from nvidia import nvimgcodec

        self._cupy, self._nvimgcodec = cupy, nvimgcodec
        self.hardware = hardware
        self.name = "gpu_hardware" if hardware else "gpu"
        _gpu_decoder_state(hardware)   # made here, so a missing library fails at start-up

    def canvas(self, jpegs: list[bytes], geometry: CanvasLayout):
        import jax

        return jax.dlpack.from_dlpack(self.decode_into(jpegs, geometry))

    def decode_into(self, jpegs: list[bytes], geometry: CanvasLayout, canvas=None):
        """The batch's windows decoded into `canvas` (a flat CuPy uint8 array of at least geometry.needed bytes; a
        new one of geometry.canvas_size() bytes when None), complete when this returns; returns the canvas."""
        nv = self._nvimgcodec
        streams = []
        for jpeg, (y, x, h, w) in zip(jpegs, geometry.windows):
            code = nv.CodeStream(jpeg)
            streams.append(code.get_sub_code_stream(region=nv.Region(int(y), int(x), int(y + h), int(x + w))))
        state = _gpu_decoder_state(self.hardware)
        decoder, stream = state["decoder"], state["stream"]
        # One batch at a time through the process's decoder (training's and eval's pipelines may share it), and the
        # previous batch's output images resized and reused (decode(images=)) rather than 256 buffers allocated a
        # batch: they were copied out and their stream waited for before the previous call returned.
        with state["lock"], stream:
            previous = state["images"]
            reuse = {"images": previous} if previous is not None and len(previous) == len(streams) else {}
            images = decoder.decode(streams, cuda_stream=stream.ptr, **reuse)
            state["images"] = None   # until this batch's copies are done, nothing reuses its images
            sources = []
            for image, (_, _, h, w) in zip(images, geometry.windows):
                if image is None:
                    raise DataError("nvImageCodec could not decode a JPEG record" + (
                        " on the GPU's hardware JPEG decoder (input_pipeline=gpu_hardware; T4 and V100 have none: "
                        "use input_pipeline=gpu)" if self.hardware else ""))
                interface = image.__cuda_array_interface__
                shape, typestr = tuple(interface["shape"]), interface["typestr"]
                if shape != (h, w, 3) or typestr != "|u1":
                    raise DataError(f"nvImageCodec decoded a {shape} {typestr} crop, {(int(h), int(w), 3)} uint8 "
                                    f"expected")
                pitch = interface["strides"][0] if interface.get("strides") else int(w) * 3
                sources.append((interface["data"][0], pitch))
            canvas = self._copy_to_canvas(sources, geometry, stream, canvas)
            stream.synchronize()
            state["images"] = images
        return canvas

    def _copy_to_canvas(self, sources: list, geometry: CanvasLayout, stream, canvas=None):
        """The decoded images, (device pointer, row pitch) each, copied into the flat canvas (a new one when None)
        on `stream`; returns the canvas."""
        cp = self._cupy
        runtime = cp.cuda.runtime
        if canvas is None:
            canvas = cp.empty(geometry.canvas_size(), cp.uint8)
        for base, (pointer, pitch), (_, _, h, w) in zip(geometry.bases, sources, geometry.windows):
            # one 2-D copy per image (its rows may be pitched): a runtime call, no CuPy array or kernel
            runtime.memcpy2DAsync(canvas.data.ptr + int(base), int(w) * 3, pointer, pitch, int(w) * 3, int(h),
                                  runtime.memcpyDeviceToDevice, stream.ptr)
        return canvas


_gpu_state: dict = {}


def _gpu_decoder_state(hardware: bool = False) -> dict:
    """The process's one nvImageCodec decoder and CUDA stream (with the lock a batch's decode holds and the last
    batch's output images), shared by every GpuDecoder and released at exit before JAX's and CuPy's own teardown
    (atexit runs last-registered first). On an H100 a second GpuDecoder made in one process segfaulted, and
    benchmark processes whose decoder lived until the interpreter's shutdown aborted there; so a process decodes
    with one kind of decoder (hardware: the HW_GPU_ONLY backend), and asking for the other is a RuntimeError."""
    if not _gpu_state:
        import atexit

        import cupy
        from nvidia import nvimgcodec

        backends = [nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY)] if hardware else None
        _gpu_state.update(decoder=nvimgcodec.Decoder(backends=backends) if backends else nvimgcodec.Decoder(),
                          stream=cupy.cuda.Stream(non_blocking=True), hardware=hardware)
        atexit.register(_release_gpu_decoder)
    elif _gpu_state["hardware"] != hardware:
        raise RuntimeError("this process already decodes JPEGs with nvImageCodec's "
                           f"{'hardware' if _gpu_state['hardware'] else 'default'} backends; one decoder a process")
    _gpu_state.setdefault("lock", threading.Lock())   # held for a batch's decode and copies
    _gpu_state.setdefault("images", None)             # the last batch's output images, to reuse
    return _gpu_state


def _release_gpu_decoder():
    stream = _gpu_state.get("stream")
    if stream is not None:
        stream.synchronize()
    _gpu_state.clear()


_decoders: dict = {}


def make_decoder(pipeline: str, threads: int | None = None):
    """The decoder for input_pipeline 'gpu', 'gpu_hardware' or 'host' (one per process, shared by training and eval);
    the GPU ones fall back to the host, said once, where they cannot run."""
    threads = threads or min(8, os.cpu_count() or 1)
    if pipeline in ("gpu", "gpu_hardware"):
        missing = gpu_decoder_missing()
        if missing is None:
            if pipeline not in _decoders:
                where = "the GPU's hardware JPEG decoder" if pipeline == "gpu_hardware" else "the GPU"
                say_once(f"input: JPEGs decoded on {where} (nvImageCodec), resized there (JAX)")
                _decoders[pipeline] = GpuDecoder(hardware=pipeline == "gpu_hardware")
            return _decoders[pipeline]
        say_once(f"input: JPEGs decoded on the host (PIL, {threads} threads): {missing}")
    if "host" not in _decoders:
        _decoders["host"] = HostDecoder(threads)
    return _decoders["host"]


def check_pipeline(requested: str, backend: str) -> None:
    """Refuses an input_pipeline value that cannot run on `backend` (ConfigError), at start-up."""
    from mlperf_keras.config import ConfigError

    if requested not in PIPELINES:
        raise ConfigError(f"input_pipeline={requested!r}: expected one of {', '.join(PIPELINES)}")
    if requested in ("gpu", "gpu_hardware", "host") and backend != "jax":
        raise ConfigError(f"input_pipeline={requested} runs on the JAX backend (KERAS_BACKEND=jax); "
                          f"the {backend} backend reads with tf.data")


def check_input_workers(value, name: str = "input_workers") -> None:
    """Refuses an input_workers value (the processes that read and plan ResNet's and SSD's JAX batches; 0: a thread)
    or decode_workers value (ResNet's and SSD's: processes that also decode on the GPU; 0: none) that is not a count
    (ConfigError), at start-up."""
    from mlperf_keras.config import ConfigError

    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        zero = "read and plan batches in a thread" if name == "input_workers" else "decode in this process"
        raise ConfigError(f"{name}={value!r}: expected 0 ({zero}) or a number of worker processes")


def check_decode_workers(value, pipeline: str, backend: str) -> None:
    """Refuses a decode_workers value (ResNet's and SSD's GPU decode in worker processes; 0: in this process) that is
    not a count, or that asks for GPU decode workers where the pipeline cannot decode on the GPU (ConfigError), at
    start-up."""
    from mlperf_keras.config import ConfigError

    check_input_workers(value, "decode_workers")
    if value and (backend != "jax" or pipeline in ("tf.data", "host")):
        raise ConfigError(f"decode_workers={value} decodes JPEGs on the GPU in worker processes: it needs the JAX "
                          f"backend and input_pipeline auto, gpu or gpu_hardware (here: the {backend} backend, "
                          f"input_pipeline={pipeline})")


def choose_pipeline(requested: str) -> str:
    """tf.data, gpu, gpu_hardware or host for a workload's hparam input_pipeline (PIPELINES) on this backend and machine."""
    import keras

    backend = keras.backend.backend()
    check_pipeline(requested, backend)
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


__all__ = ["BatchGeometry", "CanvasLayout", "GpuDecoder", "HostDecoder", "PIPELINES", "bilinear_from_canvas",
           "check_decode_workers", "check_input_workers", "check_pipeline", "choose_pipeline", "gpu_decoder_missing",
           "make_decoder", "resize_from_canvas", "say_once", "to_uint8"]
