"""COCO box mAP: SSD post-processing (decode, softmax, per-class NMS) and the COCOeval evaluator, merged exactly
across workers. NumPy and pycocotools or faster-coco-eval only (no TensorFlow, no Keras), so a JAX-only machine can
evaluate. For Mask R-CNN: `paste_mask` (a 28x28 mask pasted at image resolution as the reference), `encode_mask`
(RLE), `evaluate_instances` (box and mask AP of the same detections) and `CocoInstanceMetric` (both, gathered from
every worker and scored once).

Post-processing follows the MLPerf reference (mlcommons/training single_stage_detector/ssd/utils.py,
`Encoder.decode_batch` / `decode_single`, called by train.py's coco_eval with criteria 0.50 and max_output 200):
box offsets are decoded against the default boxes, class scores are the softmax over the 81 logits, and for every
class but background: the boxes scoring above 0.05, the 200 highest of them, greedy NMS that keeps a box only while
its IoU with every kept box of its class is below 0.5 (the reference keeps `iou < criteria`, so IoU exactly 0.5
suppresses), then the 200 highest-scoring detections of the image over all classes. Detections become COCO result
rows [image_id, x, y, w, h, score, category_id] in pixels of the original image (x = left * width, w = (right -
left) * width; boxes are not clipped, as in the reference), and COCOeval(iouType="bbox") scores them once over every
worker's rows with its default image list (every image of the annotation file), as the reference does.

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
- Only a cheap necessary condition is evaluated for every box: a class c can score above t only if its logit
  beats the background's by log(t / (1 - t)) (the softmax denominator is at least e^x_c + e^x_0, so the score is at
  most sigmoid(x_c - x_0)). The exact softmax, with the same arithmetic as a full one, is computed only for boxes
  that pass, and only their boxes are decoded. The detections are the same; it avoids 700k exponentials per image.
- IoU for NMS is computed in float64 from the float32 boxes (the reference: float32), and two zero-area boxes have
  IoU 0 here where the reference's 0/0 gives NaN (which suppresses). Neither matters for boxes decoded from finite
  offsets (positive areas; an IoU within float32 rounding of 0.5 is the only case the precision can change).
- Ties in score are broken by default-box index (a stable sort); torch's sort leaves their order unspecified.
- An image with no detection yields no rows (the reference's torch.cat of nothing raised, and it skipped the batch
  or image with a message). Detections are returned highest score first (the reference: ascending); COCOeval sorts
  by score itself.
- Rows are float64 (the reference casts to float32, which rounds pixel coordinates of large images by ~1e-5 px).
- The evaluator is faster-coco-eval where installed (the reference: pycocotools), with the same numbers (above).
"""
from __future__ import annotations

import contextlib
import io
import math
import os
from typing import Callable, Sequence

import numpy as np

from mlperf_keras.inputs import default_boxes

STAT_NAMES = ("AP", "AP50", "AP75", "AP_small", "AP_medium", "AP_large",
              "AR1", "AR10", "AR100", "AR_small", "AR_medium", "AR_large")
ROW_COLUMNS = 7  # image_id, x, y, w, h, score, category_id


def _data_error(message):
    from mlperf_keras.inputs.manifest import DataError

    return DataError(message)


def _softmax_rows(logits: np.ndarray) -> np.ndarray:
    """float32 softmax over the last axis, max-subtracted like torch's F.softmax."""
    x = np.asarray(logits, np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def _self_iou(boxes_ltrb: np.ndarray) -> np.ndarray:
    """default_boxes.iou_matrix(b, b) with fewer temporaries: NMS calls it for every class of every image."""
    left, top, right, bottom = np.asarray(boxes_ltrb, np.float64).T
    area = (right - left) * (bottom - top)
    width = np.minimum(right[:, None], right) - np.maximum(left[:, None], left)
    height = np.minimum(bottom[:, None], bottom) - np.maximum(top[:, None], top)
    inter = np.maximum(width, 0.0) * np.maximum(height, 0.0)
    union = area[:, None] + area - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def nms(boxes_ltrb: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS of boxes already sorted by descending score -> indices kept, in that order.

    As the reference: take the best remaining box, drop every remaining box whose IoU with it is >= the threshold
    (it keeps `iou < criteria`), repeat. The IoU matrix of the candidates (at most max_candidates) is computed once.
    """
    count = len(boxes_ltrb)
    if count <= 1:
        return np.arange(count)
    suppresses = _self_iou(boxes_ltrb) >= iou_threshold
    alive = np.ones(count, bool)
    keep = []
    i = 0
    while True:
        keep.append(i)
        alive &= ~suppresses[i]
        alive[i] = False
        if not alive.any():
            return np.asarray(keep)
        i = int(np.argmax(alive))  # the best-scoring box still alive


def postprocess(loc, logits, dboxes_xywh, score_threshold: float = 0.05, nms_iou: float = 0.5,
                max_candidates: int = 200, max_detections: int = 200) -> list:
    """SSD outputs of a batch -> per image (boxes ltrb [k, 4] float32 normalised, scores [k] float32, labels [k]
    int32 contiguous 1..C-1), highest score first; the reference's decode_batch (see the module docstring).

    loc: [N, D, 4] offsets; logits: [N, D, C] with class 0 background; dboxes_xywh: the [D, 4] default boxes.
    """
    loc, logits = np.asarray(loc), np.asarray(logits, np.float32)
    dboxes_xywh = np.asarray(dboxes_xywh)
    if logits.ndim != 3 or loc.shape != logits.shape[:2] + (4,) or dboxes_xywh.shape != (logits.shape[1], 4):
        raise ValueError(f"postprocess expects loc [N, D, 4], logits [N, D, C] and default boxes [D, 4]; got "
                         f"{loc.shape}, {logits.shape} and {dboxes_xywh.shape}")
    if not 0.0 < score_threshold < 1.0:
        raise ValueError(f"score_threshold must be in (0, 1), got {score_threshold}")
    num_images, num_classes = logits.shape[0], logits.shape[2]
    empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    if num_images == 0:
        return []

    # Necessary condition (see the module docstring): the best foreground logit must beat the background's by
    # logit(threshold); the margin covers float32 rounding. Only the boxes passing it get the exact softmax.
    # (1e-6 |x_0| is float32's rounding of x_0 + bound, far above any real logit's.)
    background = logits[..., :1]
    bound = background + np.float32(math.log(score_threshold / (1.0 - score_threshold)) - 1e-3)
    bound -= np.float32(1e-6) * np.abs(background)
    may_pass = (logits[..., 1:] > bound).any(axis=-1)                                  # [N, D]
    rows = np.flatnonzero(may_pass)                                                    # image * D + box
    probs = _softmax_rows(logits.reshape(-1, num_classes)[rows])                       # as a full softmax would
    row, cls = np.nonzero(probs[:, 1:] > score_threshold)
    if len(row) == 0:
        return [empty] * num_images
    img, box = np.divmod(rows[row], logits.shape[1])
    label, scores = cls + 1, probs[row, cls + 1]

    # Group by (image, class), each group by descending score (stable: ties by default-box index).
    group = img * num_classes + label
    order = np.lexsort((-scores, group))
    img, box, label, scores, group = img[order], box[order], label[order], scores[order], group[order]
    boxes = default_boxes.decode(loc[img, box], dboxes_xywh[box])
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    ends = np.r_[starts[1:], len(group)]
    kept = []
    for start, end in zip(starts, ends):
        end = min(end, start + max_candidates)
        kept.append(start + nms(boxes[start:end], nms_iou))
    kept = np.concatenate(kept)
    img, label, scores, boxes = img[kept], label[kept], scores[kept], boxes[kept]

    # Per image, the max_detections best over all classes.
    order = np.lexsort((-scores, img))
    img, label, scores, boxes = img[order], label[order], scores[order], boxes[order]
    first = np.searchsorted(img, np.arange(num_images))
    rank = np.arange(len(img)) - first[img]
    cut = rank < max_detections
    img, label, scores, boxes = img[cut], label[cut], scores[cut], boxes[cut]
    bounds = np.searchsorted(img, np.arange(num_images + 1))
    return [(boxes[lo:hi].astype(np.float32), scores[lo:hi].astype(np.float32), label[lo:hi].astype(np.int32))
            for lo, hi in zip(bounds[:-1], bounds[1:])]


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


# --- Instance segmentation (Mask R-CNN): box rows plus one RLE mask per row, scored as "bbox" and "segm". -----------


def _resize_bilinear(mask: np.ndarray, height: int, width: int) -> np.ndarray:
    """torch.nn.functional.interpolate(mode="bilinear", align_corners=False) of a 2-D float32 array, in NumPy, in
    float32 as torch computes a float32 tensor (and at half the memory traffic of float64 for every pasted box)."""
    def axis(n_in, n_out):
        src = np.maximum((np.arange(n_out, dtype=np.float32) + 0.5) * np.float32(n_in / n_out) - 0.5, 0)
        low = np.minimum(src.astype(np.int64), n_in - 1)     # src >= 0: truncation is the floor
        high = np.minimum(low + 1, n_in - 1)
        return low, high, src - low

    y0, y1, ly = axis(mask.shape[0], height)
    x0, x1, lx = axis(mask.shape[1], width)
    rows = mask[y0] * (1 - ly)[:, None] + mask[y1] * ly[:, None]
    return rows[:, x0] * (1 - lx)[None, :] + rows[:, x1] * lx[None, :]


def _pasted_box(mask: np.ndarray, box, threshold: float, padding: int):
    """The box-sized binary mask that paste_mask writes, and its top-left corner (x, y) in the image (may lie
    outside it)."""
    m = mask.shape[-1]
    padded = np.zeros((m + 2 * padding, m + 2 * padding), np.float32)
    padded[padding:padding + m, padding:padding + m] = mask
    scale = (m + 2 * padding) / m
    x1, y1, x2, y2 = (float(v) for v in box)
    cx, cy = (x1 + x2) * 0.5, (y1 + y2) * 0.5
    w_half, h_half = (x2 - x1) * 0.5 * scale, (y2 - y1) * 0.5 * scale
    # torch's .to(torch.int32) truncates toward zero
    bx1, by1, bx2, by2 = (int(np.float32(v)) for v in (cx - w_half, cy - h_half, cx + w_half, cy + h_half))
    w, h = max(bx2 - bx1 + 1, 1), max(by2 - by1 + 1, 1)
    return _resize_bilinear(padded, h, w) > threshold, bx1, by1


def _inside_image(binary: np.ndarray, bx1: int, by1: int, height: int, width: int):
    """The part of a box-sized mask with top-left corner (bx1, by1) that lies inside a (height, width) image, and
    that part's top-left corner (xa, ya)."""
    xa, ya = max(bx1, 0), max(by1, 0)
    xb, yb = min(bx1 + binary.shape[1], width), min(by1 + binary.shape[0], height)
    if xb <= xa or yb <= ya:
        return binary[:0, :0], xa, ya
    return binary[ya - by1:yb - by1, xa - bx1:xb - bx1], xa, ya


def paste_mask(mask: np.ndarray, box, height: int, width: int, threshold: float = 0.5, padding: int = 1):
    """A square mask of probabilities (M x M) pasted into a (height, width) uint8 image at box (x1, y1, x2, y2), as
    the Mask R-CNN reference's paste_mask_in_image (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52,
    object_detection/pytorch/maskrcnn_benchmark/modeling/roi_heads/mask_head/inference.py): the mask padded by one
    zero pixel a side and the box scaled about its centre by (M + 2) / M, the box truncated to integers, the mask
    resized bilinearly to the box's inclusive size, thresholded (> threshold) and cut to the image."""
    part, xa, ya = _inside_image(*_pasted_box(mask, box, threshold, padding), height, width)
    out = np.zeros((height, width), np.uint8)
    out[ya:ya + part.shape[0], xa:xa + part.shape[1]] = part
    return out


def encode_pasted_mask(mask: np.ndarray, box, height: int, width: int, threshold: float = 0.5,
                       padding: int = 1) -> dict:
    """encode_mask(paste_mask(mask, box, height, width)), the same RLE, at a cost that follows the box's area
    rather than the image's: the run lengths are read off the box region alone, then pycocotools compresses them
    (mask.frPyObjects of the uncompressed RLE). Evaluation pastes every detection (about 314,000 on COCO val), so
    the full-image array, its Fortran copy and the scan of every pixel were most of an evaluation's time."""
    import pycocotools.mask as mask_util

    part, xa, ya = _inside_image(*_pasted_box(mask, box, threshold, padding), height, width)
    # Column-major (COCO's RLE order), a zero above and below each column of the part: every run of ones starts and
    # ends inside its column, and the changes alternate start, end, start, ...
    columns = np.zeros((part.shape[1], part.shape[0] + 2), bool)
    columns[:, 1:-1] = part.T
    # change k of column c, between its padded rows k and k + 1, is where the part's row k starts or follows a run
    column, row = np.divmod(np.flatnonzero(columns[:, 1:] != columns[:, :-1]), part.shape[0] + 1)
    edges = (xa + column) * height + ya + row     # pixel indices in the whole image, column-major
    # A run down to the last row that goes on at row 0 of the next column is one run in the whole image.
    inner = np.flatnonzero(edges[2::2] == edges[1:-1:2])
    if len(inner):
        edges = np.delete(edges, np.concatenate([2 * inner + 1, 2 * inner + 2]))
    counts = np.diff(np.r_[0, edges, height * width])
    if len(counts) > 1 and counts[-1] == 0:  # pycocotools ends on the last run of ones when it touches the end
        counts = counts[:-1]
    rle = mask_util.frPyObjects({"counts": counts.tolist(), "size": [height, width]}, height, width)
    rle["counts"] = rle["counts"].decode("ascii")
    return rle


def encode_mask(mask: np.ndarray) -> dict:
    """A binary (H, W) mask -> COCO RLE with a str "counts" (pycocotools.mask.encode, as the reference)."""
    import pycocotools.mask as mask_util

    rle = mask_util.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode("ascii")
    return rle


def evaluate_instances(annotation_file, rows, segmentations: Sequence[dict], log: Callable[[str], None] | None = None,
                       backend: str | None = None) -> dict:
    """COCO "bbox" and "segm" evaluation of detections: rows [K, 7] as evaluate_detections, segmentations the K RLE
    masks of those rows (image resolution) -> {"bbox": 12 summary numbers, "segm": 12 summary numbers}."""
    is_path = isinstance(annotation_file, (str, os.PathLike))
    gt = load_ground_truth(annotation_file, backend) if is_path else annotation_file
    rows = np.asarray(rows, np.float64).reshape(-1, ROW_COLUMNS)
    if len(segmentations) != len(rows):
        raise ValueError(f"{len(rows)} detection rows but {len(segmentations)} masks")
    boxes = evaluate_detections(gt, rows, log=log)
    results = [{"image_id": int(r[0]), "category_id": int(r[6]), "segmentation": seg, "score": float(r[5])}
               for r, seg in zip(rows, segmentations)]
    evaluation, lines = _run_cocoeval(gt, results if results else np.zeros((0, ROW_COLUMNS)), _index_backend(gt),
                                      iou_type="segm")
    if log is not None:
        for line in lines:
            log(line)
    return {"bbox": boxes, "segm": np.asarray(evaluation.stats, np.float64)}


class CocoInstanceMetric:
    """COCO box and mask AP@[.5:.95] over the whole eval set (Mask R-CNN), each worker feeding its share of images.

    add_image() keeps one image's result rows [K, 7] (as detection_rows) and their K RLE masks at image resolution;
    result() gathers every worker's rows and masks (the RLE strings travel as bytes), checks the image ids as
    CocoDetectionMetric does, runs evaluate_instances once on the chief and returns {"bbox": AP, "segm": AP} on
    every worker; self.stats holds both 12-number summaries of the last result()."""

    def __init__(self, annotation_file: str, dist, expected_images: int, log: Callable[[str], None] | None = None,
                 coco_evaluator: str | None = None):
        self.annotation_file, self.dist, self.expected_images, self.log = annotation_file, dist, expected_images, log
        self._ground_truth = load_ground_truth(annotation_file, coco_evaluator) if dist.is_chief else None
        self.stats = {"bbox": np.zeros(len(STAT_NAMES)), "segm": np.zeros(len(STAT_NAMES))}
        self.rows_evaluated = 0
        self.reset()

    def reset(self):
        self._rows, self._image_ids, self._rles = [], [], []

    def add_image(self, image_id: int, rows, rles: Sequence[dict]):
        rows = np.asarray(rows, np.float64).reshape(-1, ROW_COLUMNS)
        if len(rles) != len(rows):
            raise ValueError(f"{len(rows)} detection rows but {len(rles)} masks")
        self._image_ids.append(np.array([image_id], np.int64))
        self._rows.append(rows)
        self._rles.extend(rles)

    def result(self) -> dict:
        """{"bbox": AP, "segm": AP} over every worker's images (a collective: every worker must call it)."""
        rows = self.dist.gather_rows(np.concatenate(self._rows) if self._rows else np.zeros((0, ROW_COLUMNS)))
        counts = [r["counts"].encode("ascii") if isinstance(r["counts"], str) else bytes(r["counts"])
                  for r in self._rles]
        sizes = self.dist.gather_rows(np.array([r["size"] for r in self._rles], np.int64).reshape(-1, 2))
        lengths = self.dist.gather_rows(np.array([len(c) for c in counts], np.int64))
        data = self.dist.gather_rows(np.frombuffer(b"".join(counts), np.uint8))
        ends = np.cumsum(lengths)
        rles = [{"size": [int(h), int(w)], "counts": data[end - n:end].tobytes().decode("ascii")}
                for (h, w), n, end in zip(sizes, lengths, ends)]
        self.rows_evaluated = len(rows)
        size = len(STAT_NAMES)

        def score(gt):
            stats = evaluate_instances(gt, rows, rles, log=self.log)
            return np.concatenate([stats["bbox"], stats["segm"]])

        shared = score_gathered(self.dist, self._image_ids, self.expected_images, self.annotation_file,
                                self._ground_truth, 2 * size, score)
        self.stats = {"bbox": shared[:size], "segm": shared[size:]}
        return {"bbox": float(shared[0]), "segm": float(shared[size])}


__all__ = ["BACKENDS", "BACKEND_ENV", "CocoDetectionMetric", "CocoInstanceMetric", "STAT_NAMES", "coco_backend",
           "detection_rows", "score_gathered",
           "encode_mask", "encode_pasted_mask", "evaluate_detections", "evaluate_instances", "label_to_category_table", "load_ground_truth",
           "nms", "paste_mask", "postprocess"]
