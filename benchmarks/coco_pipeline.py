"""Benchmark: the SSD training input pipeline (inputs/ssd.py) alone on the CPU, images/s and images/s per core.

    python benchmarks/coco_pipeline.py [--data_dir=PREPARED] [--work_dir=/tmp/coco_pipeline_bench] [--images=400]
                                       [--cores=1,2] [--max_samples=1,50] [--decode=fused,full] [--batch=32]
                                       [--batches=12] [--eval]

Data: a dataset prepared by data_prep.coco; without --data_dir, a COCO-2017-format set of photo-like 640x480 JPEGs
with up to 7 objects each (data_prep.demo_coco, COCO averages 7.3 per image) is generated into --work_dir and
prepared there (once; reused afterwards). Each configuration (cores x max_samples x decode) runs in a fresh process
pinned to that many cores (os.sched_setaffinity) with a private tf.data thread pool of as many threads, and times
records -> parse -> SSD crop (decode_and_crop_jpeg, or decode then slice) -> flip -> resize 300x300 -> colour jitter
-> target encoding (8,732 default boxes) -> uint8 batches. No model runs. The first --warmup batches (start-up and
tracing) are not timed. Prints images/s, images/s per core, and CPU-ms per image (process CPU time, which says what
an image costs even on a machine others share).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from child_process import ROOT, run_child

sys.path.insert(0, ROOT)


def ensure_data(work_dir: str, images: int) -> str:
    prepared = os.path.join(work_dir, "prepared")
    if os.path.exists(os.path.join(prepared, "manifest.json")):
        return prepared
    from data_prep import coco, demo_coco

    raw = os.path.join(work_dir, "raw")
    start = time.time()
    num_val = max(2, images // 10)
    demo_coco.write_raw(raw, num_train=images - num_val, num_val=num_val, size=(640, 480), photo=True, seed=3,
                        max_objects=7)
    coco.prepare(raw, prepared, train_shards=8, val_shards=2, num_workers=0, overwrite=True, log=lambda _: None)
    print(f"generated and prepared {images} images in {time.time() - start:.0f} s into {prepared}", flush=True)
    return prepared


def child(args):
    """One configuration, in this process: pin to the first args.cores cores, then import TensorFlow and time."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(args.cores)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from mlperf_keras.inputs import records
    from mlperf_keras.inputs import ssd as ssd_pipeline
    from mlperf_keras.inputs.manifest import read_manifest

    manifest = read_manifest(args.data_dir, "ssd")
    if args.eval:
        paths = records.worker_files(args.data_dir, manifest, "validation", 0, 1)
        dataset = ssd_pipeline.ssd_eval_dataset(paths, batch_size=args.batch, threads=args.cores).repeat()
        dataset = dataset.take(args.batches + args.warmup).map(lambda x, *_: x)
    else:
        paths = records.worker_files(args.data_dir, manifest, "train", 0, 1)
        dataset = ssd_pipeline.ssd_train_dataset(paths, seed=1, epoch=0, rank=0, batch_size=args.batch,
                                          num_batches=args.batches + args.warmup, max_samples=args.max_samples,
                                          shuffle_buffer=1000, threads=args.cores, fused_crop=args.decode == "fused")
        dataset = dataset.map(lambda x, y: x)
    images, start, cpu = 0, None, None
    for i, batch in enumerate(dataset):
        if i == args.warmup:
            start, cpu = time.time(), time.process_time()
        if i >= args.warmup:
            images += int(batch.shape[0])
    seconds, cpu_seconds = time.time() - start, time.process_time() - cpu
    print(json.dumps({"images": images, "seconds": seconds, "cpu_seconds": cpu_seconds}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=None, help="a dataset prepared by data_prep.coco")
    parser.add_argument("--work_dir", default="/tmp/coco_pipeline_bench")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--cores", default="1,2")
    parser.add_argument("--max_samples", default="1,50")
    parser.add_argument("--decode", default="fused,full")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--eval", action="store_true", help="also time the eval pipeline (decode, resize)")
    parser.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        args.cores, args.max_samples = int(args.cores), int(args.max_samples)
        return child(args)

    data_dir = args.data_dir or ensure_data(args.work_dir, args.images)
    with open(os.path.join(data_dir, "manifest.json")) as f:
        counts = json.load(f)["counts"]
    print(f"data: {data_dir}: {counts['train_images']} train images, {counts['train_objects']} objects "
          f"({counts['train_objects'] / counts['train_images']:.1f} per image); {os.cpu_count()} cores here, "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    configs = [dict(cores=c, max_samples=m, decode=d, eval=False) for c in args.cores.split(",")
               for m in args.max_samples.split(",") for d in args.decode.split(",")]
    if args.eval:
        configs += [dict(cores=c, max_samples=1, decode="full", eval=True) for c in args.cores.split(",")]
    for config in configs:
        r = run_child(__file__, f"--data_dir={data_dir}", f"--batch={args.batch}", f"--batches={args.batches}",
                      f"--warmup={args.warmup}", *(f"--{k}={v}" for k, v in config.items() if k != "eval"),
                      *(["--eval"] if config["eval"] else []))
        rate, cores = r["images"] / r["seconds"], int(config["cores"])
        what = "eval (decode, resize 300)" if config["eval"] else (
            f"train max_samples={config['max_samples']:>2} decode={config['decode']:<5}")
        print(f"{what}: {rate:6.1f} images/s on {cores} core(s) = {rate / cores:6.1f} images/s per core; "
              f"{1000 * r['cpu_seconds'] / r['images']:5.1f} CPU-ms per image; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
