"""Benchmark: the COCO box-mAP evaluator backends (pycocotools, faster-coco-eval) on val2017-sized detections.

    python benchmarks/coco_eval.py [--images=5000] [--seed=0] [--backends=pycocotools,faster_coco_eval]
                                   [--work_dir=/tmp/coco_eval_bench] [--out=results.jsonl]

Data: tests/test_coco_metric.synthetic_coco, a COCO-format instances file shaped like val2017 (5,000 images of which
~48 have no objects, ~36k objects over the 80 real category ids with their gaps, ~1% crowd, realistic small / medium
/ large shares, `area` below the box's as a polygon's is) and detections shaped like SSD's after post-processing
(~70 per image, up to 200, 10% of the images above maxDets=100, most objects matched by one to three jittered boxes,
low-scored clutter, float32 scores with some ties). As in the MLPerf SSD evaluation, images without objects get no
detections (the SSD pipeline drops them: 4,952 images evaluated) but stay in the annotation file, so COCOeval's image
list has all of them.

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


def ensure_data(work_dir: str, images: int, seed: int):
    """-> (annotation file, rows file), generated once per (images, seed)."""
    import numpy as np

    from tests.test_coco_metric import synthetic_coco

    os.makedirs(work_dir, exist_ok=True)
    stem = os.path.join(work_dir, f"val{images}_seed{seed}")
    annotations, rows_file = stem + ".json", stem + "_rows.npy"
    if os.path.exists(annotations) and os.path.exists(rows_file):
        return annotations, rows_file
    start = time.time()
    dataset, rows = synthetic_coco(seed, images, empty_fraction=48 / 5000)
    annotated = {a["image_id"] for a in dataset["annotations"]}
    rows = rows[np.isin(rows[:, 0], list(annotated))]  # the SSD pipeline evaluates annotated images only
    with open(annotations, "w") as f:
        json.dump(dataset, f)
    np.save(rows_file, rows)
    print(f"generated {images} images, {len(dataset['annotations'])} objects, {len(rows)} detections in "
          f"{time.time() - start:.0f} s into {work_dir}", flush=True)
    return annotations, rows_file


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


def child(backend: str, annotations: str, rows_file: str) -> dict:
    """One backend in this process: time each stage; -> {"backend", "seconds": {stage: [wall, cpu]}, "stats"}."""
    import numpy as np

    from mlperf_keras.metrics import coco

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

    with timed("load"):
        gt = COCO(annotations)
    with timed("loadRes"):
        dt = gt.loadRes(rows)
    evaluation = COCOeval(gt, dt, iouType="bbox")
    evaluation.print_function = lambda *args: None
    with timed("evaluate"):
        evaluation.evaluate()
    with timed("accumulate"):
        evaluation.accumulate()
    with timed("summarize"):
        evaluation.summarize()
    with timed("evaluate_detections"):  # the metric's path, on the loaded index
        stats = coco.evaluate_detections(gt, rows)
    if not np.array_equal(stats, np.asarray(evaluation.stats)):
        raise AssertionError(f"{backend}: evaluate_detections gave {stats}, the stages {evaluation.stats}")
    return {"backend": backend, "version": _version(backend), "seconds": seconds, "stats": stats.tolist()}


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
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    annotations, rows_file = ensure_data(args.work_dir, args.images, args.seed)
    if args.child:
        print(json.dumps(child(args.child, annotations, rows_file)))
        return
    print(describe(annotations, rows_file), flush=True)
    results = []
    for backend in args.backends.split(","):
        load_before = os.getloadavg()[0]
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--child={backend}",
                               f"--images={args.images}", f"--seed={args.seed}", f"--work_dir={args.work_dir}"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
        if proc.returncode != 0:
            raise SystemExit(f"{backend} failed:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result.update(loadavg=[load_before, os.getloadavg()[0]], cpus=os.cpu_count(), images=args.images,
                      seed=args.seed, time=time.strftime("%Y-%m-%dT%H:%M:%S"))
        results.append(result)
        secs = result["seconds"]
        total = sum(secs[s][0] for s in STAGES[:-1])
        print(f"{backend} {result['version']}: " + ", ".join(f"{s} {secs[s][0]:.2f} s ({secs[s][1]:.2f} cpu)"
                                                              for s in STAGES)
              + f"; load..summarize {total:.2f} s; 1-min load average {load_before:.1f} -> "
                f"{result['loadavg'][1]:.1f} on {os.cpu_count()} cpus", flush=True)
        print(f"    AP {result['stats'][0]:.6f}, AP50 {result['stats'][1]:.6f}, stats {result['stats']}", flush=True)
    if len(results) > 1:
        import numpy as np

        stats = np.asarray([r["stats"] for r in results])
        print(f"max |stats difference| between {' and '.join(r['backend'] for r in results)}: "
              f"{np.max(np.abs(stats - stats[0])):.3g}")
        first, last = results[0]["seconds"], results[-1]["seconds"]
        for stage in ("evaluate_detections",):
            print(f"{stage}: {first[stage][0] / max(last[stage][0], 1e-9):.0f}x faster with {results[-1]['backend']}")
    if args.out:
        with open(args.out, "a") as f:
            for result in results:
                f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
