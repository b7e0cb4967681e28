"""Where ResNet's and SSD's GPU input batches spend their time, on prepared records (a device investigation):
the host half (records read, parsed, each batch planned) as one pass; nvImageCodec's region decodes of one batch's
crop windows alone, per backend, and reusing the previous batch's output images; the whole canvas (decodes and
copies, inputs/jpeg_batches.GpuDecoder); the jitted resize; host CPU per batch for each.

    python benchmarks/experiments/gpu_decode_parts.py --data_dir=.cache/realdata/imagenet [--backend=HW_GPU_ONLY]
    python benchmarks/experiments/gpu_decode_parts.py --model=ssd --data_dir=.cache/realdata/coco --batch_size=128
    ... --loads=none,jax,cupy_nonblocking,cupy_blocking,python   the GPU parts again beside each load (below)

A load is a thread started beside the timed parts, as the train step runs beside the pipeline when fed: `jax` keeps
JAX's stream busy (chained 4096^2 bf16 matmuls, at most two calls queued, as a fed step does); `jax_process` runs
that load in a process of its own (its own CUDA context, which the GPU time-slices with the decoder's): what a
decoder in a separate process would meet; `cupy_nonblocking`
and `cupy_blocking` do the same work on a CuPy stream created non-blocking or blocking (a blocking stream waits for,
and is waited on by, work on CUDA's legacy default stream); `python` holds the interpreter in a pure-Python loop
(the planning thread's share of the GIL). If a decode slows beside `jax` but not beside `cupy_nonblocking`, it waits
on the device through a synchronising call rather than sharing the SMs; `python` shows the GIL's share. Beside
`python` a decode call of 256 crops took 3 s on an H100: give it few --batches (runs with it and `cupy_blocking`
over 25 batches did not finish in 150 s).

One backend per process (a second nvImageCodec decoder of another backend in one process has crashed on an H100);
region_decode_threads makes --decode_threads decoders of the one backend. Prints a JSON line a load.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # fed_decoder_variants, beside this file


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--model", default="resnet", choices=["resnet", "ssd"])
    parser.add_argument("--backend", default="default", help="default, HW_GPU_ONLY, HYBRID_CPU_GPU or GPU_ONLY")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--loads", default="none",
                        help="comma-separated loads to time the GPU parts beside, each in turn: " + ", ".join(LOADS))
    parser.add_argument("--parts", default="",
                        help="comma-separated parts to time (default all): " + ", ".join(PARTS))
    parser.add_argument("--decode_threads", type=int, default=2,
                        help="threads for the region_decode_threads part, each with its own decoder and stream")
    parser.add_argument("--stream_priority", choices=("normal", "high"), default="normal",
                        help="the decoders' CUDA streams' priority (fed_decoder_variants.py)")
    parser.add_argument("--options", default="", help="nvImageCodec Decoder(options=...), default backend only")
    parser.add_argument("--one_copy", action="store_true",
                        help="the canvas's copies by one gather kernel (fed_decoder_variants.py); first checked "
                             "against the shipped copies on one batch")
    args = parser.parse_args()
    wanted = set(args.parts.split(",")) if args.parts else set(PARTS)
    if wanted - set(PARTS):
        parser.error(f"unknown parts {sorted(wanted - set(PARTS))}; known: {', '.join(PARTS)}")

    import cupy as cp
    import jax
    import numpy as np
    from fed_decoder_variants import install_one_copy, make_state
    from nvidia import nvimgcodec as nv

    from mlperf_keras.inputs import image_geometry, imagenet_gpu, jpeg_batches, ssd_jax, ssd_jax_augment

    paths = sorted(glob.glob(os.path.join(args.data_dir, "train-*")))
    common = dict(seed=1, epoch=0, rank=0, batch_size=args.batch_size, num_batches=args.batches, cycle_length=10)
    # the host half (read, parse, plan) of the batches, timed as one pass: the pipeline's first stage on its own
    plan_cpu, plan_start = time.process_time(), time.perf_counter()
    if args.model == "resnet":
        plans = list(imagenet_gpu._train_plans(paths, image_size=224, crop=image_geometry.CropParams(),
                                               shuffle_buffer=10_000, label_offset=0, **common))
    else:
        plans = [(p.jpegs, p.geometry, p) for p in ssd_jax._train_plans(
            paths, max_samples=1, shuffle_buffer=4096, skip_crowd=False, size=300, max_rounds=50, **common)]
    plan_wall, plan_cpu = time.perf_counter() - plan_start, time.process_time() - plan_cpu
    result = {"model": args.model, "backend": args.backend, "batch_size": args.batch_size, "batches": args.batches,
              "plan_images_per_s": args.batches * args.batch_size / plan_wall,
              "plan_host_cpu_ms_per_batch": 1e3 * plan_cpu / args.batches,
              "mean_jpeg_kb": sum(len(j) for p in plans for j in p[0]) / (1024 * len(plans) * args.batch_size),
              "device": str(jax.devices()[0]), "decode_threads": args.decode_threads,
              "stream_priority": args.stream_priority, "options": args.options, "one_copy": args.one_copy}

    loads = args.loads.split(",")
    unknown = [load for load in loads if load not in LOADS]
    if unknown:
        parser.error(f"unknown loads {unknown}; known: {', '.join(LOADS)}")

    def new_state() -> tuple:
        state = make_state(False, args.stream_priority, 0, args.options, args.backend)
        return state["decoder"], state["stream"]

    nvdecoder, stream = new_state()
    if args.backend == "default":
        jpeg_batches._gpu_state.update(decoder=nvdecoder, stream=stream, hardware=False)
        decoder = jpeg_batches.make_decoder("gpu")
        assert decoder.name == "gpu", jpeg_batches.gpu_decoder_missing()

    if args.one_copy:
        if args.backend != "default":
            parser.error("--one_copy times the canvas: the default backend only")
        shipped = np.asarray(decoder.canvas(plans[0][0], plans[0][1]))[:plans[0][1].needed]
        install_one_copy()
        gathered = np.asarray(decoder.canvas(plans[0][0], plans[0][1]))[:plans[0][1].needed]
        result["one_copy_equals_shipped_copies"] = bool(np.array_equal(shipped, gathered))
        assert result["one_copy_equals_shipped_copies"], "the gather kernel's canvas differs from the shipped one"

    def streams_of(p):
        return [nv.CodeStream(j).get_sub_code_stream(region=nv.Region(int(y), int(x), int(y + h), int(x + w)))
                for j, (y, x, h, w) in zip(p[0], p[1].windows)]

    call_ms: list = []

    def decode_only(p, reused: list | None = None, state: tuple | None = None):
        # reused: nvImageCodec's decode(images=...), the previous batch's output images resized and reused
        dec, st = state or (nvdecoder, stream)
        start = time.perf_counter()
        images = dec.decode(streams_of(p), cuda_stream=st.ptr, **({"images": reused} if reused else {}))
        call_ms.append(1e3 * (time.perf_counter() - start))   # the call's return, before the stream is waited on
        st.synchronize()
        assert all(i is not None for i in images)
        if reused is not None:
            reused[:] = images

    threads: list = []
    if "region_decode_threads" in wanted:   # decoders made up front: making one while others decode is untested
        import concurrent.futures

        states = [(nvdecoder, stream)] + [new_state() for _ in range(args.decode_threads - 1)]
        pool = concurrent.futures.ThreadPoolExecutor(args.decode_threads)

        def decode_in_threads(p):
            # the batch split into one part a thread, each decoded by its own decoder: decodes in flight at once
            n = len(states)
            parts_of = [((p[0][k::n], jpeg_batches.CanvasLayout(p[1].windows[k::n], p[1].valid[k::n])), states[k])
                        for k in range(n)]
            list(pool.map(lambda a: decode_only(a[0], state=a[1]), parts_of))

        threads.append(decode_in_threads)

    canvases = []
    if args.backend == "default":
        canvases = [(decoder.canvas(p[0], p[1]), p[1]) for p in plans[:2]]

    def resize(i):
        canvas, geometry = canvases[i % 2]
        jax.block_until_ready(jpeg_batches.resize_from_canvas(canvas, geometry.taps(), geometry.valid))

    def augment(i):   # the GPU half of SSD's batch on a decoded canvas: resize, jitter, targets
        canvas, geometry = canvases[i % 2]
        t = plans[i % 2][2]
        jax.block_until_ready(ssd_jax_augment.train_images_and_targets(
            canvas, geometry.taps(), t.factors, t.order, t.gt, t.gt_labels, t.gt_valid))

    result["loads"] = {}
    for load in loads:
        parts: dict = {}

        def timed(fn, label):
            for p in plans[:2]:
                fn(p)
            del call_ms[:]
            cpu, start = time.process_time(), time.perf_counter()
            for p in plans[2:]:
                fn(p)
            wall = time.perf_counter() - start
            images = (len(plans) - 2) * args.batch_size
            parts[f"{label}_images_per_s"] = images / wall
            parts[f"{label}_host_cpu_ms_per_batch"] = 1e3 * (time.process_time() - cpu) / (len(plans) - 2)
            if call_ms:
                parts[f"{label}_call_returns_ms"] = sum(call_ms) / len(call_ms)

        busy = _Load(load, cp) if load != "none" else None
        if busy:
            parts["load_ms_per_call_alone"] = busy.start()
        runs = {"code_streams_only": lambda p: streams_of(p), "region_decode": decode_only}
        reused: list = []
        runs["region_decode_reusing_images"] = lambda p: decode_only(p, reused)
        if threads:
            runs["region_decode_threads"] = threads[0]
        if args.backend == "default":
            resizes, augments = iter(range(10**9)), iter(range(10**9))
            runs.update(
                canvas=lambda p: jax.block_until_ready(decoder.canvas(p[0], p[1])),
                resize=lambda p: resize(next(resizes)),
                canvas_and_resize=lambda p: jax.block_until_ready(jpeg_batches.resize_from_canvas(
                    decoder.canvas(p[0], p[1]), p[1].taps(), p[1].valid)))
            if args.model == "ssd":
                runs["resize_jitter_targets"] = lambda p: augment(next(augments))
        for label, fn in runs.items():
            if label in wanted:
                timed(fn, label)
        if busy:
            parts["load_calls_during_timing"] = busy.stop()
            if busy.calls:   # against load_ms_per_call_alone: what the decode took from the load
                parts["load_ms_per_call_during_timing"] = 1e3 * busy.seconds / busy.calls
        result["loads"][load] = parts
        # a line a load as it ends, so that a load that hangs or crashes leaves the others' figures
        print(json.dumps({**{k: v for k, v in result.items() if k != "loads"}, "load": load, **parts}), flush=True)
    stream.synchronize()


PARTS = ("code_streams_only", "region_decode", "region_decode_reusing_images", "region_decode_threads", "canvas",
         "resize", "canvas_and_resize", "resize_jitter_targets")
LOADS = ("none", "jax", "jax_process", "cupy_nonblocking", "cupy_blocking", "python")

# jax_process's child: the `jax` load in a process (a CUDA context) of its own, until its stdin closes
_CHILD = """
import sys, threading, time
import jax, jax.numpy as jnp
x = jnp.ones((4096, 4096), jnp.bfloat16)
fn = jax.jit(lambda x: jax.lax.fori_loop(0, 40, lambda _, y: (y @ x) * 1e-4, x))
jax.block_until_ready(fn(x))
start = time.perf_counter(); jax.block_until_ready(fn(x))
print("ready", 1e3 * (time.perf_counter() - start), flush=True)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
pending, calls, start = [], 0, time.perf_counter()
while not stop.is_set():
    pending.append(fn(x)); calls += 1
    if len(pending) >= 2:
        jax.block_until_ready(pending.pop(0))
jax.block_until_ready(pending)
print("calls", calls, time.perf_counter() - start, flush=True)
"""


class _Load:
    """A thread beside the timed parts (the module's doc says what each kind of load tells)."""

    def __init__(self, kind: str, cp):
        import threading

        self.kind, self._cp = kind, cp
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.calls, self.seconds, self._child = 0, 0.0, None

    def start(self) -> float:
        """Starts the thread (or process); returns one call's time on an idle GPU in ms (0 for the Python load)."""
        if self.kind == "jax_process":
            import subprocess

            # without preallocation: both processes' JAX would ask for 75% of the GPU (the child's first tries
            # failed with out-of-memory errors and it ran on what was left, on an H100)
            env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
            self._child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, env=env)
            word, ms = self._child.stdout.readline().split()
            assert word == "ready", word
            return float(ms)
        if self.kind == "python":
            self._thread.start()
            return 0.0
        if self.kind == "jax":
            import jax
            import jax.numpy as jnp

            x = jnp.ones((4096, 4096), jnp.bfloat16)
            fn = jax.jit(lambda x: jax.lax.fori_loop(0, 40, lambda _, y: (y @ x) * 1e-4, x))
            self._call, self._wait = (lambda: fn(x)), jax.block_until_ready
        else:
            cp = self._cp
            stream = cp.cuda.Stream(non_blocking=self.kind == "cupy_nonblocking")
            with stream:
                x = cp.ones((4096, 4096), cp.float16)

            def call():
                with stream:
                    y = x
                    for _ in range(40):
                        y = (y @ x) * 1e-4
                    return stream.record()

            self._call, self._wait = call, (lambda event: event.synchronize())
        self._wait(self._call())
        start = time.perf_counter()
        self._wait(self._call())
        ms = 1e3 * (time.perf_counter() - start)
        self._thread.start()
        return ms

    def _run(self):
        start = time.perf_counter()
        try:
            self._loop()
        finally:
            self.seconds = time.perf_counter() - start

    def _loop(self):
        if self.kind == "python":
            while not self._stop.is_set():
                sum(i * i for i in range(10_000))
                self.calls += 1
            return
        pending = []
        while not self._stop.is_set():
            pending.append(self._call())
            self.calls += 1
            if len(pending) >= 2:
                self._wait(pending.pop(0))
        for p in pending:
            self._wait(p)

    def stop(self) -> int:
        """Stops the load; returns its calls (and sets self.seconds, the time they took)."""
        if self._child is not None:
            self._child.stdin.close()
            word, calls, seconds = self._child.stdout.readline().split()
            self._child.wait()
            self.calls, self.seconds = int(calls), float(seconds)
            return self.calls
        self._stop.set()
        self._thread.join()
        return self.calls


if __name__ == "__main__":
    main()
