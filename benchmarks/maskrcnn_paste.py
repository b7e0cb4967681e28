"""Benchmark: the mask paste and RLE encoding of a Mask R-CNN evaluation (the work before COCOeval), on the CPU.

    python benchmarks/maskrcnn_paste.py [--images=5000] [--detections=63] [--processes=1,2,4,8]
                                        [--reference_sample=2000] [--out=results.jsonl]

Every detection's 28 x 28 mask of probabilities is pasted at its image's resolution, thresholded at 0.5 and
RLE-encoded. Timed:
- reference: metrics.coco_instances.paste_mask into a full image, then pycocotools' encode of that image (the
  reference's Masker + mask_util.encode), on a sample of detections, extrapolated to all;
- box-local: metrics.coco_instances.encode_pasted_mask (the same RLE, read off the box alone), every detection, in
  one process;
- pool: metrics.coco_instances.PastePool(N), every detection, one task per image as the evaluator submits them (the
  pool started and warmed before the clock starts: a run starts it once).

Data (NumPy, seed 0): COCO val's shape, 5,000 images of 640 x 480, 480 x 640 or 640 x 427, 63 detections each (the
313,969 of 5,000 images that benchmarks/coco_eval.py --masks evaluates), box sides log-uniform in [8, 400) pixels
with aspect 0.5-2, cut to the image, uniform random probabilities. Prints seconds and detections per second.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

SIZES = ((480, 640), (640, 480), (427, 640))


def synthetic_detections(images: int, detections: int, seed: int = 0):
    """[(height, width, masks (K, 28, 28) float32, boxes (K, 4) x1 y1 x2 y2)] per image."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(images):
        height, width = SIZES[i % len(SIZES)]
        side = np.exp(rng.uniform(np.log(8), np.log(400), detections))
        aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0), detections))
        w, h = np.minimum(side * np.sqrt(aspect), width - 1), np.minimum(side / np.sqrt(aspect), height - 1)
        x1, y1 = rng.uniform(0, width - w), rng.uniform(0, height - h)
        boxes = np.stack([x1, y1, x1 + w, y1 + h], axis=1)
        out.append((height, width, rng.random((detections, 28, 28), dtype=np.float32), boxes))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--detections", type=int, default=63, help="per image")
    parser.add_argument("--processes", default="1,2,4,8", help="PastePool sizes to time (1: in this process)")
    parser.add_argument("--reference_sample", type=int, default=2000, help="detections for the full-image way")
    parser.add_argument("--out", default="", help="append one JSON line to this file")
    args = parser.parse_args(argv)
    from mlperf_keras.metrics import coco_instances

    data = synthetic_detections(args.images, args.detections)
    total = args.images * args.detections
    result = {"images": args.images, "detections": total, "cpus": os.cpu_count(),
              "loadavg_before": os.getloadavg()[0], "seconds": {}}

    def report(name, seconds, timed_detections):
        all_seconds = seconds * total / timed_detections
        result["seconds"][name] = round(all_seconds, 2)
        print(f"{name}: {all_seconds:.1f} s for {total:,} detections ({timed_detections / seconds:,.0f} per s"
              f"{'' if timed_detections == total else f', {timed_detections:,} timed and extrapolated'})",
              flush=True)

    sample = [(h, w, m, b) for h, w, masks, boxes in data for m, b in zip(masks, boxes)][:args.reference_sample]
    start = time.perf_counter()
    reference = [coco_instances.encode_mask(coco_instances.paste_mask(m, b, h, w)) for h, w, m, b in sample]
    report("reference (full-image paste + encode)", time.perf_counter() - start, len(sample))
    local = [coco_instances.encode_pasted_mask(m, b, h, w) for h, w, m, b in sample]
    if local != reference:
        raise SystemExit("encode_pasted_mask differs from encode_mask(paste_mask(...))")
    for processes in (int(p) for p in args.processes.split(",")):
        pool = coco_instances.PastePool(processes)
        try:
            if processes > 1:  # start the workers (a run does this once, at its first evaluation)
                for future in [pool.submit(*data[0][2:], *data[0][:2]) for _ in range(processes)]:
                    future.result()
            start = time.perf_counter()
            futures = [pool.submit(masks, boxes, h, w) for h, w, masks, boxes in data]
            encoded = [f.result() for f in futures]
            seconds = time.perf_counter() - start
        finally:
            pool.close()
        if encoded[0][:5] != local[:5]:
            raise SystemExit(f"PastePool({processes}) differs from encode_pasted_mask")
        report(f"box-local, {processes} process{'es' if processes > 1 else ''}", seconds, total)
    result["loadavg_after"] = os.getloadavg()[0]
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
