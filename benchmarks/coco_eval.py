"""Benchmark: the COCO box-mAP evaluator backends (pycocotools, faster-coco-eval) on val2017-sized detections.

    python benchmarks/coco_eval.py [--images=5000] [--seed=0] [--backends=pycocotools,faster_coco_eval]
                                   [--work_dir=/tmp/coco_eval_bench] [--out=results.jsonl] [--masks]

Data: tests/test_coco_metric.synthetic_coco, a COCO-format instances file shaped like val2017 (5,000 images of which
~48 have no objects, ~36k objects over the 80 real category ids with their gaps, ~1% crowd, realistic small / medium
/ large shares, `area` below the box's as a polygon's is) and detections shaped like SSD's after post-processing
(~70 per image, up to 200, 10% of the images above maxDets=100, most objects matched by one to three jittered boxes,
low-scored clutter, float32 scores with some ties). As in the MLPerf SSD evaluation, images without objects get no
detections (the SSD pipeline drops them: 4,952 images evaluated) but stay in the annotation file, so COCOeval's image
list has all of them.

--masks (Mask R-CNN): box AND mask evaluation, as metrics.coco_instances.evaluate_instances scores a Mask R-CNN run.
The same data with at most 100 detections per image (the reference's DETECTIONS_PER_IMG) and one mask per detection: the
ellipse inscribed in its box as a 24-gon, rasterised at image resolution and RLE-encoded by pycocotools (what
encode_mask hands the evaluator); ground-truth masks are the annotations' polygons (their boxes). Then also timed:
loadRes, evaluate, accumulate and summarize of the "segm" evaluation, and the whole evaluate_instances; and, on a
sample of detections, paste_mask + encode_mask of 28x28 mask probabilities (the per-detection work before the
evaluator), extrapolated to the whole set.

Each backend runs in a fresh process and times, wall and process CPU seconds: load (COCO(annotation file)), loadRes
(the [K, 7] rows), evaluate, accumulate, summarize; then the whole mlperf_keras.metrics.coco.evaluate_detections on
the loaded index (what the chief runs at every evaluation: loadRes to summarize). faster-coco-eval's evaluate() runs
its C++ evaluate and accumulate in one call, so its accumulate is ~0. Prints seconds per stage, the 12 numbers' max
difference between backends, and the machine's load average (CPU time says what a stage costs on a shared machine).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

STAGES = ("load", "loadRes", "evaluate", "accumulate", "summarize", "evaluate_detections")
MASK_STAGES = ("segm_loadRes", "segm_evaluate", "segm_accumulate", "segm_summarize", "evaluate_instances")
DETECTIONS_PER_IMAGE = 100  # Mask R-CNN (the reference's TEST.DETECTIONS_PER_IMG)


def ellipse_masks(rows, heights: dict, widths: dict, vertices: int = 24) -> list:
    """One RLE per row [image_id, x, y, w, h, ...]: the ellipse inscribed in the box, rasterised at the image's size."""
    import numpy as np
    import pycocotools.mask as mask_util

    angle = np.linspace(0, 2 * np.pi, vertices, endpoint=False)
    x, y, w, h = rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4]
    px = (x + w / 2)[:, None] + (w / 2)[:, None] * np.cos(angle)[None]
    py = (y + h / 2)[:, None] + (h / 2)[:, None] * np.sin(angle)[None]
    polygons = np.stack([px, py], -1).reshape(len(rows), -1)
    out = [None] * len(rows)
    image_ids = rows[:, 0].astype(np.int64)
    order = np.argsort(image_ids, kind="stable")
    bounds = np.flatnonzero(np.r_[True, image_ids[order][1:] != image_ids[order][:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index = order[lo:hi]
        image = int(image_ids[index[0]])
        rles = mask_util.frPyObjects(polygons[index].tolist(), heights[image], widths[image])  # one per polygon
        for i, rle in zip(index, rles):
            out[i] = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
    return out


def ensure_data(work_dir: str, images: int, seed: int, masks: bool = False):
    """-> (annotation file, rows file, masks file or None), generated once per (images, seed, masks)."""
    import numpy as np

    from tests.test_coco_metric import synthetic_coco

    os.makedirs(work_dir, exist_ok=True)
    stem = os.path.join(work_dir, f"val{images}_seed{seed}")
    annotations, rows_file = stem + ".json", stem + ("_rows100.npy" if masks else "_rows.npy")
    masks_file = stem + "_masks100.json" if masks else None
    if all(os.path.exists(f) for f in (annotations, rows_file, masks_file or annotations)):
        return annotations, rows_file, masks_file
    start = time.time()
    dataset, rows = synthetic_coco(seed, images, empty_fraction=48 / 5000)
    annotated = {a["image_id"] for a in dataset["annotations"]}
    rows = rows[np.isin(rows[:, 0], list(annotated))]  # the SSD pipeline evaluates annotated images only
    if masks:  # the best DETECTIONS_PER_IMAGE of each image (rows come per image, best first)
        image_ids = rows[:, 0]
        first = np.flatnonzero(np.r_[True, image_ids[1:] != image_ids[:-1]])
        rank = np.arange(len(rows)) - np.repeat(first, np.diff(np.r_[first, len(rows)]))
        rows = rows[rank < DETECTIONS_PER_IMAGE]
        sizes = {im["id"]: (im["height"], im["width"]) for im in dataset["images"]}
        segmentations = ellipse_masks(rows, {k: v[0] for k, v in sizes.items()}, {k: v[1] for k, v in sizes.items()})
        with open(masks_file, "w") as f:
            json.dump(segmentations, f)
    with open(annotations, "w") as f:
        json.dump(dataset, f)
    np.save(rows_file, rows)
    print(f"generated {images} images, {len(dataset['annotations'])} objects, {len(rows)} detections"
          f"{' with masks' if masks else ''} in {time.time() - start:.0f} s into {work_dir}", flush=True)
    return annotations, rows_file, masks_file


def describe(annotations: str, rows_file: str) -> str:
    import numpy as np

    with open(annotations) as f:
        dataset = json.load(f)
    rows = np.load(rows_file)
    area = np.asarray([a["area"] for a in dataset["annotations"]])
    _, per_image = np.unique(rows[:, 0], return_counts=True)
    annotated = len({a["image_id"] for a in dataset["annotations"]})
    return (f"{len(dataset['images'])} images ({annotated} with objects, {len(per_image)} with detections), "
            f"{len(area)} objects ({sum(a['iscrowd'] for a in dataset['annotations'])} crowd; small / medium / large "
            f"{(area < 32 ** 2).mean():.0%} / {((area >= 32 ** 2) & (area < 96 ** 2)).mean():.0%} / "
            f"{(area >= 96 ** 2).mean():.0%}), {len({a['category_id'] for a in dataset['annotations']})} classes, "
            f"{len(rows)} detections ({per_image.mean():.1f} per image, max {per_image.max()}, "
            f"{(per_image > 100).sum()} images above 100)")


def child(backend: str, annotations: str, rows_file: str, masks_file: str | None = None) -> dict:
    """One backend in this process: time each stage; -> {"backend", "seconds": {stage: [wall, cpu]}, "stats"}."""
    import numpy as np

    from mlperf_keras.metrics import coco, coco_instances

    rows = np.load(rows_file)
    if backend == "faster_coco_eval":
        from faster_coco_eval import COCO, COCOeval_faster as COCOeval
    else:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    seconds = {}

    @contextlib.contextmanager
    def timed(stage):
        wall, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            yield
        seconds[stage] = [time.perf_counter() - wall, time.process_time() - cpu]

    def stages(results, iou_type, prefix=""):  # loadRes to summarize, each timed -> the COCOeval
        with timed(prefix + "loadRes"):
            dt = gt.loadRes(results)
        evaluation = COCOeval(gt, dt, iouType=iou_type)
        evaluation.print_function = lambda *args: None
        for stage in ("evaluate", "accumulate", "summarize"):
            with timed(prefix + stage):
                getattr(evaluation, stage)()
        return evaluation

    with timed("load"):
        gt = COCO(annotations)
    evaluation = stages(rows, "bbox")
    with timed("evaluate_detections"):  # the metric's path, on the loaded index
        stats = coco.evaluate_detections(gt, rows)
    if not np.array_equal(stats, np.asarray(evaluation.stats)):
        raise AssertionError(f"{backend}: evaluate_detections gave {stats}, the stages {evaluation.stats}")
    result = {"backend": backend, "version": _version(backend), "seconds": seconds, "stats": stats.tolist()}
    if masks_file is None:
        return result
    with open(masks_file) as f:
        segmentations = json.load(f)
    results = [{"image_id": int(r[0]), "category_id": int(r[6]), "segmentation": seg, "score": float(r[5])}
               for r, seg in zip(rows, segmentations)]
    evaluation = stages(results, "segm", "segm_")
    with timed("evaluate_instances"):  # the metric's path: box and mask evaluation of the same detections
        both = coco_instances.evaluate_instances(gt, rows, segmentations)
    if not (np.array_equal(both["bbox"], stats) and np.array_equal(both["segm"], np.asarray(evaluation.stats))):
        raise AssertionError(f"{backend}: evaluate_instances gave {both}, the stages {stats}, {evaluation.stats}")
    result["segm_stats"] = both["segm"].tolist()
    return result


def paste_seconds(rows_file: str, annotations: str, sample: int = 2000, seed: int = 0) -> dict:
    """paste_mask + encode_mask of `sample` detections' random 28x28 probabilities at image resolution -> seconds
    for the sample and extrapolated to every row (the work a Mask R-CNN evaluation does before the evaluator)."""
    import numpy as np

    from mlperf_keras.metrics import coco_instances

    rows = np.load(rows_file)
    with open(annotations) as f:
        sizes = {im["id"]: (im["height"], im["width"]) for im in json.load(f)["images"]}
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(rows), min(sample, len(rows)), replace=False)
    probabilities = rng.random((len(pick), 28, 28)).astype(np.float32)
    wall, cpu = time.perf_counter(), time.process_time()
    for row, mask in zip(rows[pick], probabilities):
        height, width = sizes[int(row[0])]
        box = (row[1], row[2], row[1] + row[3], row[2] + row[4])
        coco_instances.encode_mask(coco_instances.paste_mask(mask, box, height, width))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"paste_encode_sample": len(pick), "paste_encode_seconds": [wall, cpu],
            "paste_encode_seconds_all_rows": [wall * len(rows) / len(pick), cpu * len(rows) / len(pick)],
            "rows": len(rows)}


def _version(backend: str) -> str:
    from importlib.metadata import version

    return version(backend.replace("_", "-"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default="pycocotools,faster_coco_eval")
    parser.add_argument("--work_dir", default="/tmp/coco_eval_bench")
    parser.add_argument("--out", default="", help="append one JSON line per backend to this file")
    parser.add_argument("--masks", action="store_true", help="box and mask (segm) evaluation, Mask R-CNN's")
    parser.add_argument("--paste_sample", type=int, default=2000, help="--masks: detections to paste and encode "
                        "(0: none)")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    annotations, rows_file, masks_file = ensure_data(args.work_dir, args.images, args.seed, args.masks)
    if args.child:
        print(json.dumps(child(args.child, annotations, rows_file, masks_file)))
        return
    print(describe(annotations, rows_file), flush=True)
    stages = STAGES + (MASK_STAGES if args.masks else ())
    results = []
    for backend in args.backends.split(","):
        load_before = os.getloadavg()[0]
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--child={backend}",
                               f"--images={args.images}", f"--seed={args.seed}", f"--work_dir={args.work_dir}"]
                              + (["--masks"] if args.masks else []),
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
        if proc.returncode != 0:
            raise SystemExit(f"{backend} failed:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result.update(loadavg=[load_before, os.getloadavg()[0]], cpus=os.cpu_count(), images=args.images,
                      seed=args.seed, masks=args.masks, time=time.strftime("%Y-%m-%dT%H:%M:%S"))
        results.append(result)
        secs = result["seconds"]
        total = sum(secs[s][0] for s in STAGES[:-1])
        print(f"{backend} {result['version']}: " + ", ".join(f"{s} {secs[s][0]:.2f} s ({secs[s][1]:.2f} cpu)"
                                                              for s in stages)
              + f"; load..summarize {total:.2f} s; 1-min load average {load_before:.1f} -> "
                f"{result['loadavg'][1]:.1f} on {os.cpu_count()} cpus", flush=True)
        print(f"    AP {result['stats'][0]:.6f}, AP50 {result['stats'][1]:.6f}, stats {result['stats']}", flush=True)
        if args.masks:
            print(f"    mask AP {result['segm_stats'][0]:.6f}; evaluate_instances (box + mask, load excluded) "
                  f"{secs['evaluate_instances'][0]:.2f} s", flush=True)
    if args.masks and args.paste_sample:
        pasted = paste_seconds(rows_file, annotations, args.paste_sample, args.seed)
        print(f"paste_mask + encode_mask: {pasted['paste_encode_seconds'][0]:.2f} s for {pasted['paste_encode_sample']} "
              f"detections, {pasted['paste_encode_seconds_all_rows'][0]:.0f} s extrapolated to all "
              f"{pasted['rows']} (one process)", flush=True)
        for result in results:
            result.update(pasted)
    if len(results) > 1:
        import numpy as np

        stats = np.asarray([r["stats"] for r in results])
        print(f"max |stats difference| between {' and '.join(r['backend'] for r in results)}: "
              f"{np.max(np.abs(stats - stats[0])):.3g}")
        if args.masks:
            segm = np.asarray([r["segm_stats"] for r in results])
            print(f"max |segm stats difference|: {np.max(np.abs(segm - segm[0])):.3g}")
        first, last = results[0]["seconds"], results[-1]["seconds"]
        for stage in ("evaluate_detections",) + (("evaluate_instances",) if args.masks else ()):
            print(f"{stage}: {first[stage][0] / max(last[stage][0], 1e-9):.0f}x faster with {results[-1]['backend']}")
    if args.out:
        with open(args.out, "a") as f:
            for result in results:
                f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
