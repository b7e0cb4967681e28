"""COCO instance segmentation (Mask R-CNN): masks pasted at image resolution as the reference, COCO RLE, box and
mask AP of the same detections ("bbox" and "segm", with metrics/coco.py's evaluator), gathered from every worker
and scored once; and the process pool that pastes and encodes the masks beside the predictions.

The pool: an evaluation of COCO val pastes about 314,000 masks at image resolution, on the MLPerf clock; in one
Python process that is minutes. Each image's masks go to a pool of worker processes as soon as the accelerator has
predicted them, so the paste runs beside the next batches' predictions and the results come back in order at the
end.

The workers are started with "spawn": forking a process that runs TensorFlow or JAX can deadlock the child (their
threads hold locks across fork). They import only NumPy, pycocotools and this package's metrics, and live for the
whole run (started at the first evaluation).
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from typing import Callable, Sequence

import numpy as np

from mlperf_keras.metrics.coco import (ROW_COLUMNS, STAT_NAMES, _index_backend, _run_cocoeval, evaluate_detections,
                                       load_ground_truth, score_gathered)


# --- pasting and RLE: box rows plus one RLE mask per row, scored as "bbox" and "segm" --------------------------------

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


# --- the paste pool --------------------------------------------------------------------------------------------------

MAX_AUTO_PROCESSES = 8


def encode_image_masks(masks: np.ndarray, boxes: np.ndarray, height: int, width: int) -> list[dict]:
    """One image's K masks (K, M, M) of probabilities at boxes (K, 4) in image pixels -> K COCO RLEs."""
    return [encode_pasted_mask(m, b, height, width) for m, b in zip(masks, boxes)]


def auto_processes() -> int:
    """The host's cores shared among the training workers on it, one left to each worker itself, at most 8;
    1 (no pool, paste in the worker) where that leaves fewer than 2."""
    from mlperf_keras import distribute

    local = distribute.local_workers()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = cores // max(local, 1) - 1
    return min(share, MAX_AUTO_PROCESSES) if share >= 2 else 1


class PastePool:
    """submit(masks, boxes, height, width) -> a future of encode_image_masks' RLEs.

    processes: worker processes (0: auto_processes()); 1 pastes in this process at submit time (no pool)."""

    def __init__(self, processes: int = 0):
        if processes < 0:
            raise ValueError(f"paste processes {processes}: 0 (auto), 1 (none) or more")
        self.processes = processes or auto_processes()
        self._executor = None

    def submit(self, masks, boxes, height: int, width: int) -> concurrent.futures.Future:
        if self.processes == 1:
            done = concurrent.futures.Future()
            done.set_result(encode_image_masks(masks, boxes, height, width))
            return done
        if self._executor is None:
            self._executor = concurrent.futures.ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn"))
        return self._executor.submit(encode_image_masks, np.ascontiguousarray(masks, np.float32),
                                     np.asarray(boxes, np.float64), int(height), int(width))

    def close(self):
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


__all__ = ["CocoInstanceMetric", "MAX_AUTO_PROCESSES", "PastePool", "auto_processes", "encode_image_masks",
           "encode_mask", "encode_pasted_mask", "evaluate_instances", "paste_mask"]
