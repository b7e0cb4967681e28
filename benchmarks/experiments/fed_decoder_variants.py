"""Experiment: the fed benchmark of ResNet or SSD (the GPU input pipeline) with the process's nvImageCodec decoder
made differently: does the decode stage keep up with the train step when it reuses its output images (shipped
since 2026-12-07), runs on a high-priority CUDA stream, in several threads, or is given other nvImageCodec options?

    KERAS_BACKEND=jax python benchmarks/experiments/fed_decoder_variants.py [--reuse_images | --no_reuse] \
        [--stream_priority=high] [--cpu_threads=N] [--options=":num_cuda_streams=4"] [--decode_threads=N] [--one_copy] \
        -- <python -m mlperf_keras.benchmark flags, with --data_dir>

- --reuse_images: what GpuDecoder.canvas now does itself: each decode call is given the previous call's output
  images (nvImageCodec `decode(images=...)`), resized and reused instead of allocated (the flag is kept so that the
  commands of benchmarks/RESULTS.md still run); --no_reuse: new output images every call, as before.
- --stream_priority=high: the decoder's CUDA stream (given to nvImageCodec's decode; our copies run on it) is created
  at the device's highest priority, so that kernels on it are scheduled ahead of the train step's when both wait for
  SMs.
- --cpu_threads, --options: nvImageCodec's Decoder(max_num_cpu_threads=, options=).
- --one_copy: the decoded images copied into the canvas by one CUDA kernel (a gather over a table of pointers,
  pitches and offsets) instead of a runtime call an image: one release of the interpreter's lock a batch instead of
  one an image (each re-acquisition can wait a switch interval for a thread that holds it). Not yet run on a GPU.
- --decode_threads=N: ResNet's batches decoded by N threads, each with its own nvImageCodec decoder and stream, N
  batches in flight, handed on in order (beside a busy GPU one decode call takes 3-8 times as long; fed, 2 and 3
  threads were far slower than one).
Everything after `--` goes to python -m mlperf_keras.benchmark. Results: benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class AllocatingDecoder:
    """An nvImageCodec decoder that ignores the images offered for reuse: new output images every batch."""

    def __init__(self, inner):
        self._inner = inner

    def decode(self, streams, cuda_stream=0, images=None):
        return self._inner.decode(streams, cuda_stream=cuda_stream)


def make_state(no_reuse: bool, stream_priority: str, cpu_threads: int, options: str,
               backend: str = "default") -> dict:
    """An nvImageCodec decoder and CUDA stream made as asked, in inputs/jpeg_batches' state dict's form; backend:
    'default' (nvImageCodec's own choice) or a BackendKind name such as HW_GPU_ONLY."""
    import cupy
    from nvidia import nvimgcodec

    kwargs = {}
    if backend != "default":
        kwargs["backends"] = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, backend))]
    if cpu_threads:
        kwargs["max_num_cpu_threads"] = cpu_threads
    if options:
        kwargs["options"] = options
    decoder = nvimgcodec.Decoder(**kwargs)
    if no_reuse:
        decoder = AllocatingDecoder(decoder)
    # CUDA clamps a priority outside the device's range to its nearest end: -100 is the highest (lower is higher)
    priority = {"priority": -100} if stream_priority == "high" else {}
    return dict(decoder=decoder, stream=cupy.cuda.Stream(non_blocking=True, **priority), hardware=False)


def install_decoder(no_reuse: bool, stream_priority: str, cpu_threads: int, options: str,
                    decode_threads: int = 1):
    """Makes the process's GPU decoder state (inputs/jpeg_batches) now, as asked, before the benchmark does; with
    decode_threads > 1 one state per thread, and ResNet's batches decoded by that many threads."""
    import atexit
    import threading

    from mlperf_keras.inputs import imagenet_gpu, jpeg_batches

    jpeg_batches._gpu_state.update(make_state(no_reuse, stream_priority, cpu_threads, options))
    atexit.register(jpeg_batches._release_gpu_decoder)
    if decode_threads <= 1:
        return
    local, states = threading.local(), []

    def state_of_thread(hardware: bool = False):
        if not hasattr(local, "state"):
            local.state = make_state(no_reuse, stream_priority, cpu_threads, options)
            local.state.update(lock=threading.Lock(), images=None)
            states.append(local.state)
        return local.state

    def release():
        for state in states:
            state["stream"].synchronize()
        states.clear()

    atexit.register(release)
    jpeg_batches._gpu_decoder_state = state_of_thread
    imagenet_gpu._decoded = lambda plans, decoder, prefetch: decoded_in_threads(plans, decoder, prefetch,
                                                                               decode_threads)


_GATHER = r"""
extern "C" __global__ void gather(const unsigned long long* table, unsigned char* canvas) {
  // table: 4 entries an image (source pointer, source row pitch, row bytes, rows) then the canvas offsets
  const unsigned long long* t = table + 4 * blockIdx.y;
  const unsigned char* source = (const unsigned char*)t[0];
  unsigned long long pitch = t[1], row_bytes = t[2], total = t[2] * t[3];
  unsigned char* target = canvas + table[4 * gridDim.y + blockIdx.y];
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long row = i / row_bytes;
    target[i] = source[row * pitch + (i - row * row_bytes)];
  }
}
"""


def install_one_copy():
    """GpuDecoder copies a batch's images into its canvas with one gather kernel (see --one_copy)."""
    import cupy
    import numpy as np

    from mlperf_keras.inputs import jpeg_batches

    kernel = cupy.RawKernel(_GATHER, "gather")

    def copy_to_canvas(self, sources, geometry, stream, canvas=None):
        windows = np.asarray(geometry.windows, np.int64)
        table = np.concatenate([
            np.stack([np.array([p for p, _ in sources], np.uint64), np.array([q for _, q in sources], np.uint64),
                      (windows[:, 3] * 3).astype(np.uint64), windows[:, 2].astype(np.uint64)], 1).ravel(),
            np.asarray(geometry.bases, np.uint64)])
        if canvas is None:
            canvas = cupy.empty(geometry.canvas_size(), cupy.uint8)
        with stream:
            kernel((64, len(sources)), (256,), (cupy.asarray(table), canvas))
        return canvas

    jpeg_batches.GpuDecoder._copy_to_canvas = copy_to_canvas


def decoded_in_threads(plans, decoder, prefetch: int, threads: int):
    """imagenet_gpu._decoded with `threads` batches decoded at once, each by a pool thread, yielded in order."""
    import collections
    import concurrent.futures

    from mlperf_keras.inputs import record_streams
    from mlperf_keras.inputs.jpeg_batches import resize_from_canvas

    def one(plan):
        jpegs, geometry, labels = plan
        return resize_from_canvas(decoder.canvas(jpegs, geometry), geometry.taps(), geometry.valid), labels

    def decode():
        with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="imagenet-decode") as pool:
            pending = collections.deque()
            for plan in plans:
                pending.append(pool.submit(one, plan))
                if len(pending) >= threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()

    return record_streams.prefetched(decode(), prefetch, "imagenet-input")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reuse_images", action="store_true", help="(shipped; kept for earlier commands)")
    parser.add_argument("--no_reuse", action="store_true")
    parser.add_argument("--stream_priority", choices=("normal", "high"), default="normal")
    parser.add_argument("--cpu_threads", type=int, default=0)
    parser.add_argument("--options", default="")
    parser.add_argument("--decode_threads", type=int, default=1)
    parser.add_argument("--one_copy", action="store_true")
    args, rest = parser.parse_known_args()
    if args.one_copy:
        install_one_copy()
    install_decoder(args.no_reuse, args.stream_priority, args.cpu_threads, args.options, args.decode_threads)
    print(f"variant: reuse_images={not args.no_reuse} stream_priority={args.stream_priority} "
          f"cpu_threads={args.cpu_threads} options={args.options!r} decode_threads={args.decode_threads} "
          f"one_copy={args.one_copy}",
          flush=True)
    from absl import app

    from mlperf_keras import benchmark

    app.run(benchmark.main, argv=[sys.argv[0]] + [a for a in rest if a != "--"])


if __name__ == "__main__":
    main()
