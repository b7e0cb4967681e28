"""Benchmark: data_prep.coco conversion speed (images/s) and peak memory (RSS).

    python benchmarks/coco_prep.py [--work_dir=/tmp/coco_bench] [--images=2000] [--num_workers=N]
    python benchmarks/coco_prep.py --annotations_only [--work_dir=...]

Default mode: generates a COCO-2017-format set (data_prep.demo_coco, the official layout) of photo-like JPEGs of
COCO's typical size (640x480 with fine detail, ~100-150 KB each, COCO averages ~160 KB), 90% train / 10% val, then
runs data_prep.coco's prepare() in a fresh process (TensorFlow loaded before the clock starts) and prints wall time,
images/s, images/s per core, images per CPU-second, and the peak RSS of the main process and of the largest worker.

--annotations_only: the part whose memory grows with the annotation file, at full COCO 2017 train scale and without
images: writes an instances JSON of 118,287 images and 860,001 polygon annotations (~24 points each, so the file is
about the official 448 MB), then times reading and checking it as prepare() does and prints the peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


def generate(raw: str, images: int):
    from data_prep import demo_coco

    start = time.time()
    num_val = max(2, images // 10)
    demo_coco.write_raw(raw, num_train=images - num_val, num_val=num_val, size=(640, 480), photo=True, seed=1)
    print(f"generated {images} images in {time.time() - start:.0f} s")


def _children_peak_kib(peaks: dict, stop) -> None:
    """Sample the high-water RSS (VmHWM) of this process's children until stop is set. ru_maxrss of children is no
    use here: Linux carries the parent's RSS at fork into a child's maximum, through exec."""
    while not stop.wait(0.2):
        for task in os.listdir("/proc/self/task"):
            try:
                pids = open(f"/proc/self/task/{task}/children").read().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    for line in open(f"/proc/{pid}/status"):
                        if line.startswith("VmHWM:"):
                            peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]))
                except OSError:
                    pass


def convert(raw: str, out: str, num_workers: int):
    import importlib
    import threading

    from data_prep import coco
    importlib.import_module("mlperf_keras.inputs.records")  # TensorFlow loaded before the clock starts

    image_bytes = sum(os.path.getsize(os.path.join(raw, d, n)) for d in ("train2017", "val2017")
                      for n in os.listdir(os.path.join(raw, d)))
    peaks, stop = {}, threading.Event()
    sampler = threading.Thread(target=_children_peak_kib, args=(peaks, stop), daemon=True)
    sampler.start()
    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    manifest = coco.prepare(raw, out, train_shards=16, val_shards=4, num_workers=num_workers, overwrite=True,
                            log=lambda _: None)
    seconds = time.time() - start
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
    images = manifest["counts"]["train_images"] + manifest["counts"]["val_images"]
    objects = manifest["counts"]["train_objects"] + manifest["counts"]["val_objects"]
    cores = max(1, min(os.cpu_count(), num_workers + 1))
    print(f"data_prep.coco: {images} images ({image_bytes / images / 1024:.0f} KB average, {objects} objects) in "
          f"{seconds:.1f} s (annotations, checking, writing, checksums): {images / seconds:,.0f} images/s on "
          f"{cores} cores = {images / seconds / cores:,.0f} images/s per core; {cpu:.1f} CPU-s (main + workers) = "
          f"{images / cpu:,.0f} images per CPU-second; {num_workers} workers, {os.cpu_count()} cores")
    print(f"peak RSS: main process {_mib(after[0].ru_maxrss)} (TensorFlow included), largest worker "
          f"{_mib(max(peaks.values(), default=0))} (sampled every 0.2 s)")


def write_full_scale_json(path: str, num_images: int = 118_287, num_annotations: int = 860_001, seed: int = 0):
    """An instances file with COCO 2017 train's counts and polygon sizes (streamed out, never held whole)."""
    import numpy as np

    from data_prep.demo_coco import COCO_CATEGORIES

    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.choice(np.arange(1, 600_000), size=num_images, replace=False)]
    cats = [c[0] for c in COCO_CATEGORIES]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write('{"info": {}, "licenses": [], "images": [')
        f.write(",".join(json.dumps({"license": 1, "file_name": f"{i:012d}.jpg", "coco_url": "", "height": 480,
                                     "width": 640, "date_captured": "", "flickr_url": "", "id": i}) for i in ids))
        f.write('], "annotations": [')
        for n in range(num_annotations):
            x, y = round(rng.uniform(0, 500), 2), round(rng.uniform(0, 340), 2)
            w, h = rng.uniform(1, 140, 2).round(2)
            polygon = (rng.uniform(0, 1, 48) * 100 + 200).round(2).tolist()
            f.write(("," if n else "") + json.dumps({
                "segmentation": [polygon], "area": float(round(w * h * 0.6, 2)), "iscrowd": 0,
                "image_id": ids[n % num_images], "bbox": [float(x), float(y), float(w), float(h)],
                "category_id": cats[n % len(cats)], "id": n + 1}))
        f.write('], "categories": ' + json.dumps([{"supercategory": s, "id": i, "name": m}
                                                 for i, m, s in COCO_CATEGORIES]) + "}")
    os.replace(path + ".tmp", path)


def annotations_only(work_dir: str):
    from data_prep import coco

    path = os.path.join(work_dir, "full_scale", "annotations", "instances_train2017.json")
    if not os.path.exists(path):
        start = time.time()
        write_full_scale_json(path)
        print(f"wrote {path} ({os.path.getsize(path) / 2**20:,.0f} MiB) in {time.time() - start:.0f} s")
    start = time.time()
    document = coco.load_annotations(path)
    loaded = time.time() - start
    categories = coco.check_categories(document, path)
    items = coco.index_images(document, path)
    objects, dropped = coco.collect_objects(document, path, items, coco.label_map(categories))
    del document
    print(f"annotations at full train scale ({os.path.getsize(path) / 2**20:,.0f} MiB JSON): {len(items):,} images, "
          f"{sum(len(o.label) for o in objects.values()):,} objects read and checked in {time.time() - start:.1f} s "
          f"(json.load {loaded:.1f} s); peak RSS {_mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="/tmp/coco_bench")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--num_workers", type=int, default=os.cpu_count())
    parser.add_argument("--annotations_only", action="store_true")
    parser.add_argument("--_step", choices=["generate", "convert"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    raw, out = os.path.join(args.work_dir, "raw"), os.path.join(args.work_dir, "prepared")
    if args.annotations_only:
        return annotations_only(args.work_dir)
    if args._step == "generate":
        return generate(raw, args.images)
    if args._step == "convert":
        return convert(raw, out, args.num_workers)
    # Each step in its own process, so the conversion's peak RSS is its own (not the generator's).
    stamp = os.path.join(raw, "generated.json")
    if not os.path.exists(stamp) or json.load(open(stamp)) != {"images": args.images}:
        subprocess.run([sys.executable, __file__, f"--work_dir={args.work_dir}", f"--images={args.images}",
                        "--_step=generate"], check=True)
        json.dump({"images": args.images}, open(stamp, "w"))
    subprocess.run([sys.executable, __file__, f"--work_dir={args.work_dir}", f"--num_workers={args.num_workers}",
                    "--_step=convert"], check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                                         "TF_ENABLE_ONEDNN_OPTS": "0"})


if __name__ == "__main__":
    main()
