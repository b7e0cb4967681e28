"""Benchmark: data_prep.imagenet conversion speed, in images/s and images/s per core.

    python benchmarks/imagenet_prep.py [--work_dir=/tmp/imagenet_bench] [--classes=20] [--per_class=100]
                                       [--val=500] [--num_workers=N]

Generates ImageNet-format tars (the official layout) of photo-sized JPEGs (500x375, about 130 KB each, close to
ImageNet's average of ~110 KB), then runs data_prep.imagenet's prepare() on them (as `python -m data_prep.imagenet`
does, with TensorFlow already loaded) and prints the wall time, images/s, images/s per core (all cores the
conversion may use) and images per CPU-second (this process's and its workers' CPU time: what one fully busy core
converts).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from data_prep import demo_imagenet  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="/tmp/imagenet_bench")
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--per_class", type=int, default=100)
    parser.add_argument("--val", type=int, default=500)
    parser.add_argument("--num_workers", type=int, default=os.cpu_count())
    args = parser.parse_args()

    raw = os.path.join(args.work_dir, "raw")
    stamp = os.path.join(raw, "generated.json")
    wanted = {"classes": args.classes, "per_class": args.per_class, "val": args.val}
    if not os.path.exists(stamp) or json.load(open(stamp)) != wanted:
        start = time.time()
        demo_imagenet.write_raw(raw, num_classes=args.classes, train_per_class=args.per_class, val_images=args.val,
                                size=(500, 375), photo=True, seed=1)
        json.dump(wanted, open(stamp, "w"))
        print(f"generated {args.classes * args.per_class + args.val} images in {time.time() - start:.0f} s")
    tar_bytes = sum(os.path.getsize(os.path.join(raw, n)) for n in ("ILSVRC2012_img_train.tar",
                                                                     "ILSVRC2012_img_val.tar"))
    images = args.classes * args.per_class + args.val
    out = os.path.join(args.work_dir, "prepared")
    from data_prep import imagenet
    import mlperf_keras.inputs.records  # noqa: F401  (TensorFlow loaded before the clock starts)

    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    imagenet.prepare(raw, out, train_shards=16, val_shards=4, num_workers=args.num_workers, overwrite=True)
    seconds = time.time() - start
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
    cores = max(1, min(os.cpu_count(), args.num_workers + 1))
    print(f"data_prep.imagenet: {images} images ({tar_bytes / images / 1024:.0f} KB average) in {seconds:.1f} s "
          f"(indexing, checking, writing, checksums): {images / seconds:,.0f} images/s on {cores} cores = "
          f"{images / seconds / cores:,.0f} images/s per core; {cpu:.1f} CPU-s (main + workers) = "
          f"{images / cpu:,.0f} images per CPU-second; {args.num_workers} workers, {os.cpu_count()} cores")

if __name__ == "__main__":
    main()
