"""Benchmark: ResNet's JAX input pipeline (inputs/imagenet_gpu) on a GPU machine with no TensorFlow, in one call.

    KERAS_BACKEND=jax python benchmarks/imagenet_gpu_input.py [--images=2048] [--batch=256] [--steps=30]
                                                               [--out=results.json]

Writes --images JPEGs of ImageNet's kind (crops of the photos scikit-image ships, long side 500, quality 95) into
TFRecord shards with a TF-free writer, then measures:
- the GPU decode rate (nvImageCodec) of the training crop windows and of whole images, batches of --batch;
- the host decode rate (PIL, one thread per core) of the same windows;
- the input pipeline alone (records -> uint8 batches on the GPU), images/s and host CPU-ms per image (process CPU
  time over images: every thread of this process, so the host cores it keeps busy are CPU time / wall time);
- ResNet-50's train step (bf16, the reference hparams at --batch) on one synthetic device batch against the same
  step fed by the pipeline, in the same process;
- the pixel difference between the GPU and host decoders, through the same resize.
Each rate is measured, not multiplied up from one core.
"""
from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import struct
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mlperf_keras.inputs import image_geometry, imagenet_gpu, jpeg_batches, record_reader, record_streams  # noqa: E402


def _photos() -> list[np.ndarray]:
    try:
        from skimage import data
    except ImportError:  # smooth fields and noise instead, to try the script where scikit-image is missing
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:512, 0:640]
        return [np.clip(np.stack([128 + 100 * np.sin(x / (9 + k)), 128 + 90 * np.cos(y / (13 + k)),
                                  128 + 60 * np.sin((x + y) / 29)], -1) + rng.normal(0, 10, (512, 640, 3)),
                        0, 255).astype(np.uint8) for k in range(3)]

    photos = []
    for name in ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field",
                 "motorcycle_left", "retina", "colorwheel", "logo"):
        try:
            photo = np.asarray(getattr(data, name)())
        except Exception:  # noqa: BLE001 (a photo that needs a download is left out)
            continue
        if photo.ndim == 3 and photo.shape[2] >= 3:
            photos.append(photo[..., :3].astype(np.uint8))
    return photos


def _jpeg(args) -> bytes:
    from PIL import Image

    photo, seed = args
    rng = np.random.default_rng(seed)
    h, w = photo.shape[:2]
    ch, cw = int(h * rng.uniform(0.5, 1.0)), int(w * rng.uniform(0.5, 1.0))
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = Image.fromarray(photo[y:y + ch, x:x + cw])
    long_side = 500
    scale = long_side / max(ch, cw)
    crop = crop.resize((max(1, round(cw * scale)), max(1, round(ch * scale))), Image.BICUBIC)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    out = io.BytesIO()
    crop.save(out, "JPEG", quality=QUALITY)
    return out.getvalue()


QUALITY = 95


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        if v < 0x80:
            return bytes(out + bytes([v]))
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(jpeg: bytes, label: int) -> bytes:
    """A tf.train.Example with image/encoded and image/class/label, as data_prep.imagenet writes them."""
    feature = {"image/encoded": _field(1, _field(1, jpeg)), "image/class/label": _field(3, _field(1, _varint(label)))}
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v)) for k, v in sorted(feature.items()))
    return _field(1, entries)


def write_records(paths: list[str], examples: list[bytes]):
    per = -(-len(examples) // len(paths))
    for i, path in enumerate(paths):
        with open(path, "wb") as f:
            for e in examples[i * per:(i + 1) * per]:
                header = struct.pack("<Q", len(e))
                f.write(header + struct.pack("<I", record_reader.masked_crc(header)) + e
                        + struct.pack("<I", record_reader.masked_crc(e)))


def timed(fn, repeats: int):
    fn()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats, (time.process_time() - cpu) / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--work_dir", default="/tmp/imagenet_gpu_bench")
    parser.add_argument("--out", default="")
    parser.add_argument("--skip_step", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    photos = _photos()
    with multiprocessing.Pool() as pool:  # before JAX starts its threads
        jpegs = pool.map(_jpeg, [(photos[i % len(photos)], i) for i in range(args.images)])
    import jax

    result = {"devices": str(jax.devices()), "cores": os.cpu_count(), "photos": len(photos)}
    result["mean_jpeg_kb"] = float(np.mean([len(j) for j in jpegs]) / 1e3)
    paths = [os.path.join(args.work_dir, f"train-{i:05d}-of-00008") for i in range(8)]
    write_records(paths, [_example(j, i % 1000) for i, j in enumerate(jpegs)])
    print(json.dumps(result), flush=True)

    batch = jpegs[:args.batch]
    sizes = np.array([image_geometry.jpeg_size(j) for j in batch])
    geometry, _ = imagenet_gpu.train_geometry(sizes, np.random.default_rng(0), 224, image_geometry.CropParams())
    whole_windows = np.array([(0, 0, h, w) for h, w in sizes])
    whole = jpeg_batches.BatchGeometry(whole_windows, *image_geometry.train_geometry(whole_windows, np.zeros(
        len(sizes), bool), 224), np.ones(len(sizes), bool))
    host = jpeg_batches.HostDecoder(os.cpu_count())
    missing = jpeg_batches.gpu_decoder_missing()
    result["gpu_decoder_missing"] = missing

    # host-side work per image without decoding: read + parse + header + draws + taps
    def host_side():
        stream = record_streams.epoch_stream(paths, seed=1, epoch=0, num_samples=args.batch)
        js = [imagenet_gpu._jpeg_and_label(r, 0)[0] for r in stream]
        s = np.array([image_geometry.jpeg_size(j) for j in js])
        imagenet_gpu.train_geometry(s, np.random.default_rng(1), 224, image_geometry.CropParams())[0].taps()
    wall, cpu = timed(host_side, 5)
    result["host_side_cpu_ms_per_image"] = 1e3 * cpu / args.batch

    def block(canvas):
        jax.block_until_ready(canvas)

    wall, cpu = timed(lambda: block(host.canvas(batch, geometry)), 3)
    result["host_decode_crops_per_s"] = args.batch / wall
    result["host_decode_cpu_ms_per_image"] = 1e3 * cpu / args.batch
    if missing is None:
        gpu = jpeg_batches.GpuDecoder()
        wall, cpu = timed(lambda: block(gpu.canvas(batch, geometry)), 10)
        result["gpu_decode_crops_per_s"] = args.batch / wall
        result["gpu_decode_cpu_ms_per_image"] = 1e3 * cpu / args.batch
        wall, cpu = timed(lambda: block(gpu.canvas(batch, whole)), 10)
        result["gpu_decode_whole_per_s"] = args.batch / wall
        canvas = gpu.canvas(batch, geometry)
        taps = [jax.device_put(t) for t in geometry.taps()]
        valid = jax.device_put(geometry.valid)
        wall, _ = timed(lambda: jax.block_until_ready(jpeg_batches.resize_from_canvas(canvas, taps, valid)), 20)
        result["resize_ms_per_batch"] = 1e3 * wall
        a = np.asarray(jpeg_batches.resize_from_canvas(canvas, geometry.taps(), geometry.valid)).astype(int)
        b = np.asarray(jpeg_batches.resize_from_canvas(host.canvas(batch, geometry), geometry.taps(),
                                                       geometry.valid)).astype(int)
        d = np.abs(a - b)
        result["gpu_vs_host_pixels"] = {"max": int(d.max()), "mean": float(d.mean()),
                                        "share_over_2": float(np.mean(d > 2)), "p99.9": float(np.percentile(d, 99.9))}
    print(json.dumps(result), flush=True)

    for name in (["gpu"] if missing is None else []) + ["host"]:
        decoder = jpeg_batches.make_decoder(name)
        n = max(4, args.images // args.batch)
        it = imagenet_gpu.train_batches(paths, decoder, seed=1, epoch=0, rank=0, batch_size=args.batch,
                                        num_batches=n + 1, image_size=224, shuffle_buffer=1000)
        jax.block_until_ready(next(it)[0])
        start, cpu = time.perf_counter(), time.process_time()
        for images, _ in it:
            jax.block_until_ready(images)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        result[f"{name}_pipeline_images_per_s"] = n * args.batch / wall
        result[f"{name}_pipeline_cpu_ms_per_image"] = 1e3 * cpu / (n * args.batch)
        result[f"{name}_pipeline_cores_busy"] = cpu / wall
        print(json.dumps(result), flush=True)

    if not args.skip_step:
        result.update(step_fed_vs_synthetic(paths, args))
    print(json.dumps(result, indent=1), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


def step_fed_vs_synthetic(paths, args) -> dict:
    """ResNet-50 (bf16, reference hparams) train step: a synthetic device batch repeated, then fed by the pipeline."""
    import types

    import jax
    from absl import flags

    from mlperf_keras import distribute, loop
    from mlperf_keras import train as train_cli

    flags.FLAGS(["bench"])
    values = {name: flags.FLAGS[name].default for name in
              ("model", "data_dir", "output_dir", "seed", "ruleset", "precision", "batch_size",
               "batch_per_accelerator", "max_epochs", "hparams", "synthetic", "dry_run", "jit_compile",
               "platform", "org", "division", "status", "peak_tflops", "eval_offset", "progress_seconds",
               "cache_dir", "backbone_weights")}
    values.update(model="resnet", synthetic=True, batch_size=args.batch, precision="bf16", division="open",
                  output_dir="/tmp/imagenet_gpu_bench_run")
    dist = distribute.create("jax")
    workload, manifest, config = train_cli.resolve(types.SimpleNamespace(**values), dist, say=lambda _: None,
                                                   closed_lock=False)
    _, step = loop.build(config, workload, dist, manifest)
    x, y = step.to_device(next(iter(workload.synthetic_train_data(config, dist).batches(0))))
    for _ in range(5):
        loss = step(x, y)
    float(loss)
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step(x, y)
    float(loss)
    synthetic = args.steps * args.batch / (time.perf_counter() - start)
    out = {"synthetic_step_images_per_s": synthetic}
    default_interval = sys.getswitchinterval()
    runs = [("gpu", None), ("gpu", 5e-4), ("gpu", 1e-4), ("host", None)]
    for name, interval in runs:
        if name == "gpu" and jpeg_batches.gpu_decoder_missing() is not None:
            continue
        key = name + ("" if interval is None else f"_switch_{interval * 1e3:g}ms")
        sys.setswitchinterval(interval or default_interval)
        decoder = jpeg_batches.make_decoder(name)
        steps = args.steps if name == "gpu" else max(5, args.steps // 3)
        it = imagenet_gpu.train_batches(paths, decoder, seed=2, epoch=0, rank=0, batch_size=args.batch,
                                        num_batches=steps + 3, image_size=224, shuffle_buffer=1000)
        for _ in range(3):
            xb, yb = next(it)
            loss = step(xb, yb)
        float(loss)
        start, cpu = time.perf_counter(), time.process_time()
        for xb, yb in it:
            loss = step(xb, yb)
        float(loss)
        wall = time.perf_counter() - start
        out[f"{key}_fed_step_images_per_s"] = steps * args.batch / wall
        out[f"{key}_fed_vs_synthetic"] = out[f"{key}_fed_step_images_per_s"] / synthetic
        out[f"{key}_fed_cores_busy"] = (time.process_time() - cpu) / wall
        print(json.dumps(out), flush=True)
    sys.setswitchinterval(default_interval)
    if jpeg_batches.gpu_decoder_missing() is None:
        # the synthetic step while the pipeline runs beside it, its batches thrown away: what the two share
        it = imagenet_gpu.train_batches(paths, jpeg_batches.make_decoder("gpu"), seed=3, epoch=0, rank=0,
                                        batch_size=args.batch, num_batches=4 * args.steps, image_size=224,
                                        shuffle_buffer=1000)
        done = []
        import threading

        def drain():
            for images, _ in it:
                if done:
                    return
                jax.block_until_ready(images)
        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        time.sleep(1.0)
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step(x, y)
        float(loss)
        out["synthetic_step_beside_pipeline_images_per_s"] = args.steps * args.batch / (time.perf_counter() - start)
        done.append(True)
        print(json.dumps(out), flush=True)
    jax.block_until_ready(loss)
    return out


if __name__ == "__main__":
    main()
