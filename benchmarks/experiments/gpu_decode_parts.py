"""Where ResNet's and SSD's GPU input batches spend their time, on prepared records (a device investigation):
the host half (records read, parsed, each batch planned) as one pass; nvImageCodec's region decodes of one batch's
crop windows alone, per backend, and reusing the previous batch's output images; the whole canvas (decodes and
copies, inputs/jpeg_batches.GpuDecoder); the jitted resize; host CPU per batch for each.

    python benchmarks/experiments/gpu_decode_parts.py --data_dir=.cache/realdata/imagenet [--backend=HW_GPU_ONLY]
    python benchmarks/experiments/gpu_decode_parts.py --model=ssd --data_dir=.cache/realdata/coco --batch_size=128
    ... --busy_gpu   the same while another thread keeps the GPU busy (as the train step does, fed)

One backend per process (a second nvImageCodec decoder in one process has crashed on an H100). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--model", default="resnet", choices=["resnet", "ssd"])
    parser.add_argument("--backend", default="default", help="default, HW_GPU_ONLY, HYBRID_CPU_GPU or GPU_ONLY")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--busy_gpu", action="store_true",
                        help="time the GPU parts while another thread keeps JAX's stream busy (a chain of bf16 "
                             "matmuls, at most two calls queued), as a training step does when the pipeline is fed")
    args = parser.parse_args()

    import cupy as cp
    import jax
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
              "device": str(jax.devices()[0])}

    busy = _BusyGpu() if args.busy_gpu else None
    if busy:
        result["busy_gpu_ms_per_call"] = busy.start()

    def timed(fn, label):
        for p in plans[:2]:
            fn(p)
        cpu, start = time.process_time(), time.perf_counter()
        for p in plans[2:]:
            fn(p)
        wall = time.perf_counter() - start
        images = (len(plans) - 2) * args.batch_size
        result[f"{label}_images_per_s"] = images / wall
        result[f"{label}_host_cpu_ms_per_batch"] = 1e3 * (time.process_time() - cpu) / (len(plans) - 2)

    if args.backend == "default":
        decoder = jpeg_batches.make_decoder("gpu")
        assert decoder.name == "gpu", jpeg_batches.gpu_decoder_missing()
        nvdecoder, stream = jpeg_batches._gpu_decoder_state()
    else:
        nvdecoder = nv.Decoder(backends=[nv.Backend(getattr(nv.BackendKind, args.backend))])
        stream = cp.cuda.Stream(non_blocking=True)

    def streams_of(p):
        return [nv.CodeStream(j).get_sub_code_stream(region=nv.Region(int(y), int(x), int(y + h), int(x + w)))
                for j, (y, x, h, w) in zip(p[0], p[1].windows)]

    def decode_only(p, reused: list | None = None):
        # reused: nvImageCodec's decode(images=...), the previous batch's output images resized and reused
        images = nvdecoder.decode(streams_of(p), cuda_stream=stream.ptr, **({"images": reused} if reused else {}))
        stream.synchronize()
        assert all(i is not None for i in images)
        if reused is not None:
            reused[:] = images

    timed(lambda p: streams_of(p), "code_streams_only")
    timed(decode_only, "region_decode")
    reused: list = []
    timed(lambda p: decode_only(p, reused), "region_decode_reusing_images")
    if args.backend == "default":
        timed(lambda p: jax.block_until_ready(decoder.canvas(p[0], p[1])), "canvas")
        canvases = [(decoder.canvas(p[0], p[1]), p[1]) for p in plans[:2]]

        def resize(i):
            canvas, geometry = canvases[i % 2]
            jax.block_until_ready(jpeg_batches.resize_from_canvas(canvas, geometry.taps(), geometry.valid))

        counter = iter(range(10**9))
        timed(lambda p: resize(next(counter)), "resize")
        timed(lambda p: jax.block_until_ready(jpeg_batches.resize_from_canvas(
            decoder.canvas(p[0], p[1]), p[1].taps(), p[1].valid)), "canvas_and_resize")
        if args.model == "ssd":   # the GPU half of SSD's batch on a decoded canvas: resize, jitter, targets
            def augment(i):
                canvas, geometry = canvases[i % 2]
                t = plans[i % 2][2]
                jax.block_until_ready(ssd_jax_augment.train_images_and_targets(
                    canvas, geometry.taps(), t.factors, t.order, t.gt, t.gt_labels, t.gt_valid))

            counter = iter(range(10**9))
            timed(lambda p: augment(next(counter)), "resize_jitter_targets")
    if busy:
        result["busy_gpu_calls_during_timing"] = busy.stop()
    print(json.dumps(result), flush=True)
    stream.synchronize()


class _BusyGpu:
    """A thread that keeps JAX's compute stream busy, as the train step does in a fed run: does a decode slow down
    because the SMs are shared (then the hardware backend should not), or because something in it waits for the
    device (then both do)?"""

    def __init__(self):
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.calls = 0

    def start(self) -> float:
        import jax
        import jax.numpy as jnp

        self._x = jnp.ones((8192, 8192), jnp.bfloat16)
        self._fn = jax.jit(lambda x: jax.lax.fori_loop(0, 20, lambda _, y: (y @ x) * 1e-4, x))
        jax.block_until_ready(self._fn(self._x))
        start = time.perf_counter()
        jax.block_until_ready(self._fn(self._x))
        self._thread.start()
        return 1e3 * (time.perf_counter() - start)

    def _run(self):
        import jax

        pending = []
        while not self._stop.is_set():
            pending.append(self._fn(self._x))
            self.calls += 1
            if len(pending) >= 2:
                jax.block_until_ready(pending.pop(0))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.calls


if __name__ == "__main__":
    main()
