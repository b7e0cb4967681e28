"""COCO evaluation: ground truth loading, the COCOeval backend and the box AP of COCO result rows [image_id, x, y,
w, h, score, category_id], merged exactly across workers. NumPy and pycocotools or faster-coco-eval only (no
TensorFlow, no Keras), so a JAX-only machine can evaluate. Mask R-CNN's box and mask AP: metrics/coco_instances.py.

`CocoDetectionMetric` is SSD's box AP: the model's outputs post-processed by layers/ssd_postprocess.py, their
detections turned into rows in pixels of the original image (x = left * width, w = (right - left) * width; boxes
are not clipped, as in the reference) and scored by COCOeval(iouType="bbox") once over every worker's rows with its
default image list (every image of the annotation file), as the reference does (mlcommons/training
single_stage_detector/ssd/train.py coco_eval).

The evaluator (coco_backend): faster-coco-eval, a C++ port of COCOeval's evaluate and accumulate (from detectron2's),
when it is installed, else pycocotools; $MLPERF_KERAS_COCO_EVAL or the metric's `coco_evaluator` argument forces
either. On val2017-sized detections (4,952 images, 353k detections) loadRes to summarize took 60-74 s with
pycocotools and 10-12 s with faster-coco-eval, on one core of a loaded machine (benchmarks/coco_eval.py), at every
evaluation on the MLPerf clock. Their numbers are the same: IoUs, matches, recalls
and scores are bit-identical; the one arithmetic difference is the precision, pycocotools' tp / (tp + fp +
np.spacing(1)) against tp / (tp + fp), which differ only where tp + fp = 1 (1 - 2^-52 against 1.0), so the 12 summary
numbers differ by at most a few 1e-16 (tests/test_coco_metric.py checks every array).

Mean AP is not a sum of per-worker numbers, so workers do not merge statistics: every worker's rows are gathered
(dist.gather_rows), the chief runs COCOeval once on the union, and the 12 summary numbers reach the other workers
through dist.sum_across_workers (zeros elsewhere), together with a failure flag so that an error on the chief stops
every worker instead of leaving them waiting.

Where this differs from the reference, and why:
- Rows are float64 (the reference casts to float32, which rounds pixel coordinates of large images by ~1e-5 px).
- The evaluator is faster-coco-eval where installed (the reference: pycocotools), with the same numbers (above).
"""
from __future__ import annotations

import contextlib
import io
import os
from typing import Callable, Sequence

import numpy as np

from mlperf_keras.inputs import default_boxes
from mlperf_keras.layers.ssd_postprocess import postprocess

STAT_NAMES = ("AP", "AP50", "AP75", "AP_small", "AP_medium", "AP_large",
              "AR1", "AR10", "AR100", "AR_small", "AR_medium", "AR_large")
ROW_COLUMNS = 7  # image_id, x, y, w, h, score, category_id


def _data_error(message):
    from mlperf_keras.inputs.manifest import DataError

    return DataError(message)


def label_to_category_table(categories: Sequence[dict]) -> np.ndarray:
    """The manifest's [{"id", "name", "label"}, ...] -> table[label] = COCO category id (-1 where unmapped)."""
    try:
        labels = [int(c["label"]) for c in categories]
        ids = [int(c["id"]) for c in categories]
    except (KeyError, TypeError, ValueError) as e:
        raise _data_error(f"categories must be a list of {{'id', 'name', 'label'}} ({e!r})") from None
    if not labels or len(set(labels)) != len(labels) or len(set(ids)) != len(ids) or min(labels) < 1:
        raise _data_error(f"categories must map distinct labels >= 1 to distinct COCO ids; got labels {labels} "
                          f"for ids {ids}")
    table = np.full(max(labels) + 1, -1, np.int64)
    table[labels] = ids
    return table


def detection_rows(image_ids, heights, widths, detections: Sequence, label_to_category: np.ndarray) -> np.ndarray:
    """Per-image detections (postprocess's output) -> COCO result rows [K, 7] float64 in original-image pixels:
    [image_id, x, y, w, h, score, category_id]. Images with id < 0 (batch padding) give no rows."""
    out = []
    for image_id, height, width, (boxes, scores, labels) in zip(image_ids, heights, widths, detections):
        if image_id < 0 or len(scores) == 0:
            continue
        if labels.max() >= len(label_to_category) or (label_to_category[labels] < 0).any():
            raise _data_error(f"detections of labels {sorted(set(labels.tolist()))} but the categories map only "
                              f"labels {np.flatnonzero(label_to_category >= 0).tolist()}: the model's class count "
                              f"does not match the dataset's")
        b = boxes.astype(np.float64)
        out.append(np.stack([np.full(len(scores), float(image_id)), b[:, 0] * width, b[:, 1] * height,
                             (b[:, 2] - b[:, 0]) * width, (b[:, 3] - b[:, 1]) * height,
                             scores.astype(np.float64), label_to_category[labels].astype(np.float64)], axis=1))
    return np.concatenate(out) if out else np.zeros((0, ROW_COLUMNS))


# --- the evaluator backend -------------------------------------------------------------------------------------------

BACKENDS = ("faster_coco_eval", "pycocotools")
BACKEND_ENV = "MLPERF_KERAS_COCO_EVAL"  # auto (the default), faster_coco_eval or pycocotools


def _faster_coco_eval_installed() -> bool:
    """Importable, C++ extension included (a wheel that does not load here makes "auto" use pycocotools)."""
    import importlib

    try:
        importlib.import_module("faster_coco_eval")
    except ImportError:
        return False
    return True


def coco_backend(requested: str | None = None) -> str:
    """The evaluator to use: `requested`, else $MLPERF_KERAS_COCO_EVAL, else "auto" -> faster_coco_eval when it is
    installed, pycocotools otherwise. Both give the same 12 numbers (see the module docstring)."""
    from mlperf_keras.config import ConfigError

    choice = (requested or os.environ.get(BACKEND_ENV) or "auto").strip().lower().replace("-", "_")
    if choice == "auto":
        return BACKENDS[0] if _faster_coco_eval_installed() else BACKENDS[1]
    if choice not in BACKENDS:
        source = "requested" if requested else f"${BACKEND_ENV}"
        raise ConfigError(f"unknown COCO evaluator {choice!r} ({source}): use auto, {' or '.join(BACKENDS)}")
    if choice == BACKENDS[0] and not _faster_coco_eval_installed():
        raise ConfigError("the faster_coco_eval COCO evaluator was asked for but is not installed "
                          "(pip install faster-coco-eval)")
    return choice


def _index_backend(index) -> str:
    """Which backend's COCO class a ground-truth index is (each evaluates only its own: loadRes builds its class)."""
    module = type(index).__module__
    for backend in BACKENDS:
        if module == backend or module.startswith(backend + "."):
            return backend
    raise TypeError(f"expected a COCO index from load_ground_truth or a path, got {type(index).__name__}")


def load_ground_truth(annotation_file: str, backend: str | None = None):
    """The chosen backend's COCO index of an annotation JSON (see coco_backend; its prints silenced); DataError naming
    the file if bad."""
    if coco_backend(backend) == "faster_coco_eval":
        from faster_coco_eval import COCO
    else:
        from pycocotools.coco import COCO

    if not os.path.isfile(annotation_file):
        raise _data_error(f"{annotation_file}: missing (the COCO annotation file the evaluator scores against)")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return COCO(annotation_file)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:  # json errors are ValueErrors
        raise _data_error(f"{annotation_file}: not a COCO annotation file ({e!r})") from None


def evaluate_detections(annotation_file, rows, log: Callable[[str], None] | None = None,
                        backend: str | None = None) -> np.ndarray:
    """COCOeval(iouType="bbox") of result rows [K, 7] -> its 12 summary numbers (stats[0] is AP@[.5:.95]).

    annotation_file: a path (loaded with `backend`, see coco_backend), or a COCO index from load_ground_truth (to
    load a large file once; it is scored by the backend that loaded it). The evaluator's prints are captured; `log`,
    if given, receives the 12 summary lines (the same text from either backend).
    """
    is_path = isinstance(annotation_file, (str, os.PathLike))
    gt = load_ground_truth(annotation_file, backend) if is_path else annotation_file
    name = str(annotation_file) if is_path else "the annotation file"
    used = _index_backend(gt)
    if not is_path and backend is not None and coco_backend(backend) != used:
        raise ValueError(f"evaluate_detections: the ground truth was loaded by {used}, not {backend}")
    rows = np.asarray(rows, np.float64)
    if rows.size == 0:
        rows = rows.reshape(0, ROW_COLUMNS)
    if rows.ndim != 2 or rows.shape[1] != ROW_COLUMNS:
        raise ValueError(f"detection rows must be [K, {ROW_COLUMNS}], got {rows.shape}")
    unknown_images = set(rows[:, 0].astype(np.int64).tolist()) - set(gt.getImgIds())
    unknown_categories = set(rows[:, 6].astype(np.int64).tolist()) - set(gt.getCatIds())
    if unknown_images or unknown_categories:
        raise _data_error(f"{name}: detections name image ids {sorted(unknown_images)[:10]} and category ids "
                          f"{sorted(unknown_categories)[:10]} that the annotation file does not have")
    evaluation, lines = _run_cocoeval(gt, rows, used)
    if log is not None:
        for line in lines:
            log(line)
    return np.asarray(evaluation.stats, np.float64)


def _run_cocoeval(gt, rows, backend: str, iou_type: str = "bbox"):
    """COCOeval(iouType) evaluate + accumulate + summarize of results against the index `gt` of `backend` -> (the
    COCOeval object, its 12 summary lines). rows: [K, 7] for "bbox", a list of result dicts (image_id,
    category_id, segmentation RLE, score) for "segm"."""
    if backend == "faster_coco_eval":
        from faster_coco_eval import COCO, COCOeval_faster as COCOeval
    else:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    lines = []
    with contextlib.redirect_stdout(io.StringIO()):
        if len(rows):
            dt = gt.loadRes(rows)
        else:  # pycocotools' loadRes cannot take zero results; an empty result set scores 0
            dt = COCO()
            dt.dataset = {"images": list(gt.dataset["images"]), "categories": list(gt.dataset["categories"]),
                          "annotations": []}
            dt.createIndex()
        evaluation = COCOeval(gt, dt, iouType=iou_type)
        # faster_coco_eval prints through print_function (its evaluate() runs the C++ evaluate and accumulate in one
        # call; accumulate() then has nothing left to do), pycocotools through print.
        evaluation.print_function = lambda *args: None
        evaluation.evaluate()
        evaluation.accumulate()
        summary = io.StringIO()
        with contextlib.redirect_stdout(summary):
            evaluation.print_function = lines.append
            evaluation.summarize()
    # faster_coco_eval prints AR@0.5 and AR@0.75 after the 12 (its stats are the 12 alone).
    return evaluation, (lines or summary.getvalue().splitlines())[:len(STAT_NAMES)]


class CocoDetectionMetric:
    """COCO box AP@[.5:.95] over the whole eval set, each worker feeding its share of images.

    add_batch() post-processes a batch and keeps its result rows; result() gathers every worker's rows and image
    ids, checks that exactly `expected_images` distinct images were evaluated (each once, every id in the
    annotation file), scores once on the chief and returns the AP on every worker. self.stats holds the 12 summary
    numbers (STAT_NAMES) of the last result(), self.rows_evaluated its detection count. reset() starts a new
    evaluation. coco_evaluator: "auto" (None), "faster_coco_eval" or "pycocotools" (see coco_backend).
    """

    def __init__(self, annotation_file: str, categories: Sequence[dict], dist, expected_images: int,
                 log: Callable[[str], None] | None = None, dboxes_xywh: np.ndarray | None = None,
                 coco_evaluator: str | None = None, **postprocess_args):
        self.annotation_file, self.dist, self.expected_images, self.log = annotation_file, dist, expected_images, log
        self.label_to_category = label_to_category_table(categories)
        self.dboxes_xywh = default_boxes.default_boxes() if dboxes_xywh is None else np.asarray(dboxes_xywh)
        self.postprocess_args = postprocess_args
        # Only the chief scores; loading val2017's annotations takes seconds, so once, and early (bad file: now).
        self._ground_truth = load_ground_truth(annotation_file, coco_evaluator) if dist.is_chief else None
        self.stats, self.rows_evaluated = np.zeros(len(STAT_NAMES)), 0
        self.reset()

    def reset(self):
        self._rows, self._image_ids = [], []

    def add_batch(self, image_ids, heights, widths, loc, logits):
        """One eval batch: COCO image ids (-1 for padding), original heights and widths, the model's outputs."""
        image_ids = np.asarray(image_ids, np.int64).reshape(-1)
        real = image_ids >= 0
        if not real.any():
            return
        loc, logits = np.asarray(loc)[real], np.asarray(logits)[real]
        ids = image_ids[real]
        heights, widths = np.asarray(heights).reshape(-1)[real], np.asarray(widths).reshape(-1)[real]
        num_classes = logits.shape[-1]
        if num_classes != len(self.label_to_category) or (self.label_to_category[1:] < 0).any():
            raise _data_error(f"the model predicts {num_classes - 1} classes, the dataset's categories map labels "
                              f"{np.flatnonzero(self.label_to_category >= 0).tolist()}")
        detections = postprocess(loc, logits, self.dboxes_xywh, **self.postprocess_args)
        self._rows.append(detection_rows(ids, heights, widths, detections, self.label_to_category))
        self._image_ids.append(ids)

    def result(self) -> float:
        """AP@[.5:.95] over every worker's images (a collective: every worker must call it)."""
        rows = self.dist.gather_rows(np.concatenate(self._rows) if self._rows else np.zeros((0, ROW_COLUMNS)))
        self.rows_evaluated = len(rows)
        self.stats = score_gathered(self.dist, self._image_ids, self.expected_images, self.annotation_file,
                                    self._ground_truth, len(STAT_NAMES),
                                    lambda gt: evaluate_detections(gt, rows, log=self.log))
        return float(self.stats[0])


def score_gathered(dist, image_ids: list, expected_images: int, annotation_file: str, ground_truth, size: int,
                   score: Callable) -> np.ndarray:
    """The collective end of an evaluation: gather every worker's image ids, check that exactly expected_images
    distinct images were evaluated once each and that the annotation file has them, run score(ground_truth) -> size
    numbers on the chief and share them (a failure on the chief raises on every worker)."""
    image_ids = dist.gather_rows(np.concatenate(image_ids) if image_ids else np.zeros(0, np.int64))
    # Same gathered ids on every worker, so every worker raises together.
    distinct = np.unique(image_ids)
    if len(distinct) != len(image_ids):
        values, counts = np.unique(image_ids, return_counts=True)
        raise _data_error(f"{len(image_ids) - len(distinct)} evaluations of images already evaluated (ids "
                          f"{values[counts > 1][:10].tolist()}...): the eval shards overlap")
    if len(distinct) != expected_images:
        raise _data_error(f"evaluated {len(distinct)} validation images, {expected_images} were expected: "
                          f"the workers' eval shards miss some, or the prepared data changed since it was written")
    shared = np.zeros(size + 1)
    failure = None
    if dist.is_chief:
        try:
            missing = set(distinct.tolist()) - set(ground_truth.getImgIds())
            if missing:
                raise _data_error(f"{annotation_file}: has no images with ids {sorted(missing)[:10]} "
                                  f"that were evaluated: the annotations do not belong to these records")
            shared[:-1] = score(ground_truth)
        except Exception as e:  # noqa: BLE001 (re-raised below, after the others have been told)
            failure, shared[-1] = e, 1.0
    shared = dist.sum_across_workers(shared)
    if failure is not None:
        raise failure
    if shared[-1]:
        raise _data_error(f"the chief failed to evaluate {annotation_file} (its error is in its output)")
    return shared[:-1]


__all__ = ["BACKENDS", "BACKEND_ENV", "CocoDetectionMetric", "STAT_NAMES", "coco_backend", "detection_rows",
           "evaluate_detections", "label_to_category_table", "load_ground_truth", "score_gathered"]
