"""Mask R-CNN inference and evaluation: the box head's post-processing against a NumPy port of the reference's
PostProcessor, mask pasting against pycocotools' RLE, box and mask AP 1.0 on the ground truth."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import pycocotools.mask as mask_util

from mlperf_keras.inputs import anchors as anchor_lib
from mlperf_keras.layers import maskrcnn
from mlperf_keras.metrics import coco, coco_instances
from tests.test_maskrcnn_losses import np_nms

np_ = keras.ops.convert_to_numpy


def ref_filter_results(proposals, logits, deltas, height, width, spec):
    """PostProcessor.forward + filter_results (mlcommons/training 0badcd17, maskrcnn_benchmark/modeling/roi_heads/
    box_head/inference.py) for one image, in NumPy."""
    prob = np.exp(logits - logits.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    k = logits.shape[-1]
    boxes = anchor_lib.decode(deltas, np.repeat(proposals[:, None], k, 1), anchor_lib.BOX_CODER_WEIGHTS)
    boxes[..., 0::2] = np.clip(boxes[..., 0::2], 0, width - 1)
    boxes[..., 1::2] = np.clip(boxes[..., 1::2], 0, height - 1)
    out = []
    for j in range(1, k):
        inds = np.flatnonzero(prob[:, j] > spec.score_threshold)
        order = inds[np.argsort(-prob[inds, j], kind="stable")]
        keep = np_nms(boxes[order, j], spec.detection_nms)
        out += [(prob[i, j], j, tuple(boxes[i, j])) for i in order[keep]]
    out.sort(key=lambda t: -t[0])
    return out[:spec.detections_per_image]


def test_detections_match_the_reference_post_processing():
    rng = np.random.default_rng(5)
    spec = maskrcnn.Spec(num_classes=4, detections_per_image=12)
    n = 30
    xy = rng.uniform(0, 80, (1, n, 2))
    proposals = np.concatenate([xy, xy + rng.uniform(5, 40, (1, n, 2))], -1).astype(np.float32)
    logits = rng.normal(0, 2, (1, n, 4)).astype(np.float32)
    deltas = rng.normal(0, 0.5, (1, n, 4, 4)).astype(np.float32)
    sizes = np.array([[100, 110]], np.int32)
    boxes, scores, labels, valid = (np_(t) for t in maskrcnn.detections(
        proposals, np.ones((1, n), bool), logits, deltas, sizes, spec))
    want = ref_filter_results(proposals[0].astype(np.float64), logits[0].astype(np.float64),
                              deltas[0].astype(np.float64), 100, 110, spec)
    assert valid[0].sum() == len(want) == 12
    np.testing.assert_allclose(scores[0], [w[0] for w in want], rtol=1e-5)
    np.testing.assert_array_equal(labels[0], [w[1] for w in want])
    np.testing.assert_allclose(boxes[0], [w[2] for w in want], rtol=1e-4, atol=1e-3)


def test_paste_mask_against_pycocotools_rle():
    # torch's bilinear, align_corners=False: [0, 1] -> 4 columns is [0, 0.25, 0.75, 1]
    np.testing.assert_allclose(coco_instances._resize_bilinear(np.array([[0.0, 1.0]]), 1, 4), [[0, 0.25, 0.75, 1]])
    # A full 28x28 mask on box (10, 20, 37, 47): the box scaled by 30/28 about its centre (23.5, 33.5) is
    # (9.04, 19.04, 37.96, 47.96), truncated to (9, 19, 37, 47): 29 pixels a side. The padded 30-pixel mask resized
    # to 29 samples at (i + 0.5) x 30/29 - 0.5: i = 0 reads 0.02 of the first real pixel and i = 28 0.47 of the last,
    # both below 0.5, so pixels 1..27 of the box are set: x 10..36, y 20..46.
    pasted = coco_instances.paste_mask(np.ones((28, 28), np.float32), (10, 20, 37, 47), 60, 70)
    rle = coco_instances.encode_mask(pasted)
    assert isinstance(rle["counts"], str) and rle["size"] == [60, 70]
    decoded = mask_util.decode({"size": rle["size"], "counts": rle["counts"].encode()})
    np.testing.assert_array_equal(decoded, pasted)
    ys, xs = np.nonzero(pasted)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (10, 36, 20, 46)
    assert float(mask_util.area(rle)) == 27 * 27 == pasted.sum()
    # A box crossing the image border is cut to the image (its scaled box (-10.96, -5.96, 17.96, 22.96) truncates
    # toward zero to (-10, -5, 17, 22): the mask ends before column 17 and row 22).
    border = coco_instances.paste_mask(np.ones((28, 28), np.float32), (-10, -5, 17, 22), 30, 30)
    assert border[:17, :17].all() and not border[:, 17:].any() and not border[22:].any()
    # A half mask keeps its half.
    half = np.zeros((28, 28), np.float32)
    half[:, :14] = 1
    pasted = coco_instances.paste_mask(half, (0, 0, 55, 55), 56, 56)
    # (the box scales to (-1.96, .., 56.96): the outermost pasted rows and columns are the zero padding)
    assert pasted[1:55, 1:27].all() and not pasted[:, 29:].any() and not pasted[0].any()


def _paste_cases(count, seed=0):
    """Random masks and boxes in small images: boxes inside, across every border, larger than the image, full-height
    masks whose runs go on into the next column, empty and full masks."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        height, width = (int(v) for v in rng.integers(1, 60, 2))
        mask = rng.random((28, 28)).astype(np.float32)
        mask = {0: mask, 1: np.ones_like(mask), 2: np.zeros_like(mask), 3: (mask > 0.3).astype(np.float32)}[i % 4]
        x1, y1 = rng.uniform(-30, width), rng.uniform(-30, height)
        box = (x1, y1, x1 + rng.uniform(0, width + 40), y1 + rng.uniform(0, height + 40))
        if i % 5 == 0:
            box = (-5.0, -5.0, width + 5.0, height + 5.0)
        yield mask, box, height, width


def test_encode_pasted_mask_is_the_rle_of_the_pasted_image():
    for mask, box, height, width in _paste_cases(600):
        assert coco_instances.encode_pasted_mask(mask, box, height, width) == \
            coco_instances.encode_mask(coco_instances.paste_mask(mask, box, height, width)), (box, height, width)


def test_paste_pool_processes_give_the_same_masks_in_order(monkeypatch):
    images = [list(zip(*cases)) for cases in (list(_paste_cases(7, seed)) for seed in (1, 2, 3))]
    want = [[coco_instances.encode_pasted_mask(m, b, h, w) for m, b, h, w in zip(*image)] for image in images]
    pool = coco_instances.PastePool(2)
    try:
        futures = [[pool.submit(np.stack([m]), np.array([b]), h, w) for m, b, h, w in zip(*image)]
                   for image in images]
        assert [[f.result()[0] for f in image] for image in futures] == want
        assert pool._executor is not None      # it did run in worker processes
    finally:
        pool.close()
    inline = coco_instances.PastePool(1)
    assert inline.submit(np.stack(images[0][0]), np.array(images[0][1]), 1, 1).done() and inline._executor is None
    # auto: the host's cores among its workers, one left to each worker, at most 8; no pool below 2 processes
    monkeypatch.setattr(coco_instances.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    for local, expected in (("1", 8), ("4", 3), ("8", 1)):
        monkeypatch.setenv("HOROVOD_LOCAL_SIZE", local)
        assert coco_instances.auto_processes() == expected
    with pytest.raises(ValueError, match="paste processes"):
        coco_instances.PastePool(-1)


def _annotations(tmp_path):
    cats = [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    images = [{"id": 7, "height": 50, "width": 60}, {"id": 9, "height": 40, "width": 40}]
    anns = [
        {"id": 1, "image_id": 7, "category_id": 1, "iscrowd": 0, "bbox": [5, 5, 20, 30],
         "segmentation": [[5, 5, 25, 5, 25, 35, 5, 35]], "area": 600},
        {"id": 2, "image_id": 7, "category_id": 3, "iscrowd": 0, "bbox": [30, 10, 25, 25],
         "segmentation": [[30, 10, 55, 10, 42, 35]], "area": 312.5},
        {"id": 3, "image_id": 9, "category_id": 3, "iscrowd": 0, "bbox": [2, 2, 30, 30],
         "segmentation": [[2, 2, 32, 2, 32, 32, 2, 32]], "area": 900},
    ]
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return str(path), anns, images


@pytest.mark.parametrize("backend", ["pycocotools", "faster_coco_eval"])
def test_ground_truth_scores_box_and_mask_ap_1(tmp_path, backend):
    if backend == "faster_coco_eval" and coco.coco_backend("auto") != "faster_coco_eval":
        pytest.skip("faster-coco-eval is not installed")
    path, anns, images = _annotations(tmp_path)
    size = {im["id"]: (im["height"], im["width"]) for im in images}
    rows, rles = [], []
    for a in anns:
        h, w = size[a["image_id"]]
        mask = mask_util.decode(mask_util.merge(mask_util.frPyObjects(a["segmentation"], h, w)))
        rows.append([a["image_id"], *a["bbox"], 0.9, a["category_id"]])
        rles.append(coco_instances.encode_mask(mask))
    result = coco_instances.evaluate_instances(path, np.array(rows), rles, backend=backend)
    assert result["bbox"][0] == pytest.approx(1.0) and result["segm"][0] == pytest.approx(1.0)
    # a wrong mask lowers segm only
    rles[0] = coco_instances.encode_mask(np.zeros((50, 60), np.uint8))
    worse = coco_instances.evaluate_instances(path, np.array(rows), rles, backend=backend)
    assert worse["bbox"][0] == pytest.approx(1.0) and worse["segm"][0] < 0.9


class _Recording:
    """One worker of two as CocoInstanceMetric sees it: what it contributes to each gather, recorded."""
    is_chief, world_size = True, 1

    def __init__(self):
        self.sent = []

    def gather_rows(self, array):
        self.sent.append(np.asarray(array))
        return np.asarray(array)

    def sum_across_workers(self, values):
        return np.asarray(values, np.float64)


class _ChiefOfTwo(_Recording):
    """The chief of two workers: each gather appends the other worker's recorded contribution (rank order)."""

    def __init__(self, other_sent):
        super().__init__()
        self.other = iter(other_sent)

    def gather_rows(self, array):
        return np.concatenate([np.asarray(array), next(self.other)])


def test_instance_metric_gathers_rows_and_rles_from_every_worker(tmp_path):
    """Two workers' detections and RLE masks (sent as bytes) are merged and scored once: ground truth split over two
    workers scores box and mask AP 1.0, and the same as evaluate_instances on the union."""
    path, anns, images = _annotations(tmp_path)
    size = {im["id"]: (im["height"], im["width"]) for im in images}
    per_image = {}
    for a in anns:
        h, w = size[a["image_id"]]
        mask = mask_util.decode(mask_util.merge(mask_util.frPyObjects(a["segmentation"], h, w)))
        rows, rles = per_image.setdefault(a["image_id"], ([], []))
        rows.append([a["image_id"], *a["bbox"], 0.9, a["category_id"]])
        rles.append(coco_instances.encode_mask(mask))
    ids = sorted(size)
    share = {0: ids[: len(ids) // 2], 1: ids[len(ids) // 2:]}
    worker = _Recording()
    second = coco_instances.CocoInstanceMetric(path, worker, expected_images=len(share[1]))
    for image_id in share[1]:
        second.add_image(image_id, *per_image.get(image_id, ([], [])))
    second.result()
    chief = coco_instances.CocoInstanceMetric(path, _ChiefOfTwo(worker.sent), expected_images=len(ids))
    for image_id in share[0]:
        chief.add_image(image_id, *per_image.get(image_id, ([], [])))
    result = chief.result()
    assert result == {"bbox": pytest.approx(1.0), "segm": pytest.approx(1.0)}
    all_rows = [r for i in ids for r in per_image.get(i, ([], []))[0]]
    all_rles = [m for i in ids for m in per_image.get(i, ([], []))[1]]
    union = coco_instances.evaluate_instances(path, np.array(all_rows), all_rles)
    np.testing.assert_allclose(chief.stats["segm"], union["segm"])
    from mlperf_keras.inputs.manifest import DataError

    with pytest.raises(DataError, match="validation images"):   # a worker's images missing: refused
        short = coco_instances.CocoInstanceMetric(path, _Recording(), expected_images=len(ids))
        short.add_image(ids[0], *per_image.get(ids[0], ([], [])))
        short.result()
