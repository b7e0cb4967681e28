"""SSD post-processing (mlperf_keras/layers/ssd_postprocess.py) and the COCO box-mAP evaluator
(mlperf_keras/metrics/coco.py), on a small annotation file in the official COCO JSON format written by the test."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mlperf_keras import distribute
from mlperf_keras.inputs import default_boxes
from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.layers import ssd_postprocess
from mlperf_keras.metrics import coco
from tests.conftest import needs_horovod

# Non-contiguous COCO ids, as in instances_val2017.json: labels 1, 2, 3 map back to ids 1, 3, 18.
CATEGORIES = [{"id": 18, "name": "dog", "supercategory": "animal"}, {"id": 1, "name": "person",
              "supercategory": "person"}, {"id": 3, "name": "car", "supercategory": "vehicle"}]
IMAGES = {10: (640, 480), 20: (500, 375), 30: (300, 400), 40: (320, 240)}  # id: (width, height); 40 has no objects
# (image id, category id, [x, y, w, h] pixels, iscrowd); boxes of one image do not overlap.
OBJECTS = [
    (10, 1, [20, 30, 100, 200], 0), (10, 1, [200, 40, 120, 220], 0), (10, 3, [400, 300, 200, 150], 0),
    (20, 18, [30, 200, 150, 120], 0), (20, 3, [250, 50, 200, 100], 0), (20, 1, [300, 250, 150, 100], 1),
    (30, 1, [10, 10, 80, 150], 0), (30, 1, [150, 200, 100, 180], 0), (30, 18, [120, 20, 150, 150], 0),
]
# The manifest's form: labels 1.. in sorted COCO id order (data_prep.coco's convention).
MANIFEST_CATEGORIES = [{"id": c["id"], "name": c["name"], "label": label}
                       for label, c in enumerate(sorted(CATEGORIES, key=lambda c: c["id"]), 1)]
DROPPED_PERSONS = {1, 7}  # indices in OBJECTS of half the (non-crowd) persons: 10's second, 30's second


def write_annotations(path) -> str:
    """A COCO-format instances JSON of IMAGES and OBJECTS."""
    data = {"info": {"description": "test"}, "licenses": [], "categories": CATEGORIES,
            "images": [{"id": i, "width": w, "height": h, "file_name": f"{i:012d}.jpg"} for i, (w, h) in
                       IMAGES.items()],
            "annotations": [{"id": k + 1, "image_id": img, "category_id": cat, "bbox": box, "iscrowd": crowd,
                             "area": float(box[2] * box[3]),
                             "segmentation": ({"counts": [0, 10], "size": [IMAGES[img][1], IMAGES[img][0]]}
                                              if crowd else [[box[0], box[1], box[0] + box[2], box[1],
                                                              box[0] + box[2], box[1] + box[3]]])}
                            for k, (img, cat, box, crowd) in enumerate(OBJECTS)]}
    with open(path, "w") as f:
        json.dump(data, f)
    return str(path)


def gt_rows(skip=(), score=0.9, shift_to_iou=None) -> np.ndarray:
    """The non-crowd ground truth as result rows; shift_to_iou moves each box right so IoU with itself is that."""
    rows = []
    for k, (img, cat, (x, y, w, h), crowd) in enumerate(OBJECTS):
        if crowd or k in skip:
            continue
        if shift_to_iou is not None:  # same height, overlap w - dx over union w + dx
            x += w * (1 - shift_to_iou) / (1 + shift_to_iou)
        rows.append([img, x, y, w, h, score - 0.01 * k, cat])
    return np.asarray(rows, np.float64)


def model_outputs(image_ids, skip=(), confidence=10.0):
    """What a perfect SSD head would output for these images: offsets encoding each default box's matched object and
    a logit `confidence` on its class (background where unmatched). -> (ids, heights, widths, loc, logits)."""
    dboxes = default_boxes.default_boxes()
    label_of = {c["id"]: c["label"] for c in MANIFEST_CATEGORIES}
    locs, logits = [], []
    for image_id in image_ids:
        width, height = IMAGES[image_id]
        objs = [(cat, box) for k, (img, cat, box, crowd) in enumerate(OBJECTS)
                if img == image_id and not crowd and k not in skip]
        ltrb = np.asarray([[x / width, y / height, (x + w) / width, (y + h) / height] for _, (x, y, w, h) in objs],
                          np.float32).reshape(-1, 4)
        boxes, labels = default_boxes.match(ltrb, np.asarray([label_of[c] for c, _ in objs], np.int32), dboxes)
        locs.append(default_boxes.encode(boxes, dboxes))
        one_hot = np.zeros((len(dboxes), len(CATEGORIES) + 1), np.float32)
        one_hot[np.arange(len(dboxes)), labels] = confidence
        logits.append(one_hot)
    heights = [IMAGES[i][1] for i in image_ids]
    widths = [IMAGES[i][0] for i in image_ids]
    return np.asarray(image_ids), np.asarray(heights), np.asarray(widths), np.stack(locs), np.stack(logits)


def realistic_outputs(rng, num_images, dboxes, num_classes=81, objects=6, boxes_per_object=8):
    """Outputs shaped like a trained SSD's: background confident everywhere, a few objects each claimed by several
    overlapping default boxes with a class logit spread around the background's, so a few dozen (box, class) pairs
    per image score above 0.05 (random logits would give tens of thousands)."""
    ltrb = default_boxes.to_ltrb(dboxes)
    logits = rng.normal(0.0, 1.0, (num_images, len(dboxes), num_classes)).astype(np.float32)
    logits[..., 0] += 8.0
    loc = rng.normal(0.0, 0.3, (num_images, len(dboxes), 4)).astype(np.float32)
    for n in range(num_images):
        for centre in rng.choice(len(dboxes), objects, replace=False):
            near = np.argsort(-default_boxes.iou_matrix(ltrb[centre:centre + 1], ltrb)[0])[:boxes_per_object]
            classes = rng.integers(1, num_classes, 2)  # a likely class and a confusable one
            logits[n, near, classes[0]] = 8.0 + rng.normal(1.0, 2.0, len(near))
            logits[n, near, classes[1]] = 8.0 + rng.normal(-2.0, 1.5, len(near))
    return loc, logits


# --- A plain transcription of the reference's Encoder.scale_back_batch + decode_single, one box at a time. ----------

def _plain_iou(a, b) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def reference_postprocess(loc, logits, dboxes, criteria=0.5, max_output=200, max_num=200, threshold=0.05):
    results = []
    for image_loc, image_logits in zip(loc, logits):
        boxes = []
        for (ox, oy, ow, oh), (cx, cy, w, h) in zip(image_loc.astype(float), dboxes.astype(float)):
            bx, by = ox * 0.1 * w + cx, oy * 0.1 * h + cy
            bw, bh = np.exp(ow * 0.2) * w, np.exp(oh * 0.2) * h
            boxes.append((bx - bw / 2, by - bh / 2, bx + bw / 2, by + bh / 2))
        x = image_logits.astype(np.float32)
        probs = np.exp(x - x.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        out = []
        for c in range(1, probs.shape[1]):
            score = probs[:, c]
            idx = [i for i in range(len(score)) if score[i] > threshold]
            remaining = sorted(idx, key=lambda i: score[i])[-max_num:]      # ascending: the best is last
            while remaining:
                best = remaining[-1]
                remaining = [i for i in remaining if _plain_iou(boxes[i], boxes[best]) < criteria]
                out.append((float(score[best]), c, boxes[best]))
        out.sort(key=lambda t: t[0])
        results.append(out[-max_output:][::-1])
    return results


def assert_same_detections(ours, reference):
    assert len(ours) == len(reference)
    for (boxes, scores, labels), ref in zip(ours, reference):
        assert len(scores) == len(ref)
        np.testing.assert_allclose(scores, [r[0] for r in ref], rtol=1e-6)
        assert labels.tolist() == [r[1] for r in ref]
        np.testing.assert_allclose(boxes, [r[2] for r in ref], atol=1e-6)


# --- post-processing ------------------------------------------------------------------------------------------------

def test_postprocess_matches_the_reference_loop_on_random_inputs():
    rng = np.random.default_rng(0)
    num_boxes, num_classes = 300, 6
    centres = rng.uniform(0.2, 0.8, (num_boxes, 2))
    dboxes = np.concatenate([centres, rng.uniform(0.05, 0.4, (num_boxes, 2))], axis=1).astype(np.float32)
    loc = rng.normal(0, 0.5, (3, num_boxes, 4)).astype(np.float32)
    logits = rng.normal(0, 2.0, (3, num_boxes, num_classes)).astype(np.float32)
    # Small caps so that the top-candidates cut (about 100 boxes per class pass 0.05) and the final cut both bite.
    ours = ssd_postprocess.postprocess(loc, logits, dboxes, max_candidates=40, max_detections=30)
    reference = reference_postprocess(loc, logits, dboxes, max_num=40, max_output=30)
    assert_same_detections(ours, reference)
    assert all(len(scores) == 30 for _, scores, _ in ours)
    # Greedy NMS over the top 10 keeps a prefix of what it keeps over all, so the candidate cut shows only when the
    # final cut does not hide it; without either cap the NMS alone decides, and more survive.
    few = ssd_postprocess.postprocess(loc, logits, dboxes, max_candidates=10, max_detections=1000)
    assert_same_detections(few, reference_postprocess(loc, logits, dboxes, max_num=10, max_output=1000))
    loose = ssd_postprocess.postprocess(loc, logits, dboxes, max_candidates=1000, max_detections=1000)
    assert_same_detections(loose, reference_postprocess(loc, logits, dboxes, max_num=1000, max_output=1000))
    assert all(30 < len(a[1]) < len(b[1]) for a, b in zip(few, loose))


def test_postprocess_matches_the_reference_loop_on_ssd300_sized_outputs():
    dboxes = default_boxes.default_boxes()
    loc, logits = realistic_outputs(np.random.default_rng(1), 2, dboxes)
    ours = ssd_postprocess.postprocess(loc, logits, dboxes)
    assert_same_detections(ours, reference_postprocess(loc, logits, dboxes))
    assert all(10 <= len(scores) <= 100 for _, scores, _ in ours)


def _two_box_case(second_box_ltrb, scores=(0.9, 0.8)):
    """Two default boxes (zero offsets decode to exactly these), one foreground class with the given scores."""
    boxes = np.asarray([[0.0, 0.0, 0.75, 0.5], second_box_ltrb], np.float32)
    dboxes = default_boxes.to_xywh(boxes).astype(np.float32)
    p = np.asarray(scores, np.float64)
    logits = np.log(np.stack([1 - p, p], axis=1))[None].astype(np.float32)
    return np.zeros((1, 2, 4), np.float32), logits, dboxes


def test_nms_suppresses_at_iou_equal_to_the_threshold_and_keeps_below():
    # Dyadic boxes: intersection 0.25, union 0.5, IoU exactly 0.5. The reference keeps `iou < criteria`.
    loc, logits, dboxes = _two_box_case([0.25, 0.0, 1.0, 0.5])
    (boxes, scores, labels), = ssd_postprocess.postprocess(loc, logits, dboxes, nms_iou=0.5)
    assert len(scores) == 1 and np.allclose(boxes[0], [0, 0, 0.75, 0.5]) and labels.tolist() == [1]
    (_, scores, _), = ssd_postprocess.postprocess(loc, logits, dboxes, nms_iou=0.5 + 1e-6)
    assert len(scores) == 2
    # Less overlap (IoU 0.225 / 0.525 = 3/7) survives at 0.43; at 0.42 the lower-scored box (the first) is dropped.
    loc, logits, dboxes = _two_box_case([0.3, 0.0, 1.05, 0.5], scores=(0.6, 0.95))
    (boxes, scores, _), = ssd_postprocess.postprocess(loc, logits, dboxes, nms_iou=0.43)
    assert np.allclose(scores, [0.95, 0.6], atol=1e-6)
    (boxes, scores, _), = ssd_postprocess.postprocess(loc, logits, dboxes, nms_iou=0.42)
    assert np.allclose(scores, [0.95], atol=1e-6) and np.allclose(boxes[0], [0.3, 0.0, 1.05, 0.5], atol=1e-6)


def test_nms_is_greedy_a_suppressed_box_suppresses_nothing():
    # A overlaps B (IoU 0.6), B overlaps C (0.6), A and C barely: A kept, B dropped, so C survives.
    boxes = np.asarray([[0.0, 0, 1.0, 1], [0.25, 0, 1.25, 1], [0.5, 0, 1.5, 1]])
    assert ssd_postprocess.nms(boxes, 0.5).tolist() == [0, 2]
    assert ssd_postprocess.nms(boxes, 0.3).tolist() == [0]


def test_score_threshold_and_max_detections_cut():
    # Five disjoint boxes, one class each (labels 1..5), scores 0.9 .. 0.5; one more box at 0.04 (below 0.05).
    ltrb = np.asarray([[0.1 * i, 0.1, 0.1 * i + 0.08, 0.2] for i in range(6)], np.float32)
    dboxes = default_boxes.to_xywh(ltrb).astype(np.float32)
    logits = np.full((1, 6, 7), -30.0, np.float32)
    for i, p in enumerate([0.9, 0.8, 0.7, 0.6, 0.5, 0.04]):
        logits[0, i, [0, i + 1]] = np.log([1 - p, p])
    loc = np.zeros((1, 6, 4), np.float32)
    (boxes, scores, labels), = ssd_postprocess.postprocess(loc, logits, dboxes)
    assert labels.tolist() == [1, 2, 3, 4, 5] and np.allclose(scores, [0.9, 0.8, 0.7, 0.6, 0.5], atol=1e-5)
    (boxes, scores, labels), = ssd_postprocess.postprocess(loc, logits, dboxes, max_detections=3)
    assert labels.tolist() == [1, 2, 3] and np.allclose(boxes, ltrb[:3], atol=1e-6)
    (_, scores, _), = ssd_postprocess.postprocess(loc, logits, dboxes, score_threshold=0.03)
    assert len(scores) == 6


def test_an_image_without_detections_and_an_empty_batch():
    dboxes = default_boxes.default_boxes()
    logits = np.zeros((2, len(dboxes), 81), np.float32)
    logits[..., 0] = 10.0
    assert [len(s) for _, s, _ in ssd_postprocess.postprocess(np.zeros((2, len(dboxes), 4)), logits, dboxes)] == [0, 0]
    assert ssd_postprocess.postprocess(np.zeros((0, len(dboxes), 4)), np.zeros((0, len(dboxes), 81)), dboxes) == []
    with pytest.raises(ValueError, match="loc"):
        ssd_postprocess.postprocess(np.zeros((2, 10, 4)), logits, dboxes)


# --- rows and categories --------------------------------------------------------------------------------------------

def test_rows_are_pixels_of_the_original_image_with_coco_category_ids():
    table = coco.label_to_category_table(MANIFEST_CATEGORIES)
    assert table.tolist() == [-1, 1, 3, 18]
    detections = [(np.asarray([[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]], np.float32), np.asarray([0.9, 0.3]),
                   np.asarray([3, 2])),
                  (np.asarray([[0.1, 0.1, 0.2, 0.2]], np.float32), np.asarray([0.8]), np.asarray([1]))]
    rows = coco.detection_rows([10, -1], [480, 100], [640, 100], detections, table)   # the second is padding
    np.testing.assert_allclose(rows, [[10, 64, 96, 256, 192, 0.9, 18], [10, 0, 0, 640, 480, 0.3, 3]], rtol=1e-6)
    with pytest.raises(DataError, match="labels"):
        coco.detection_rows([10], [480], [640], [(np.zeros((1, 4)), np.ones(1), np.asarray([4]))], table)
    with pytest.raises(DataError, match="distinct"):
        coco.label_to_category_table([{"id": 1, "label": 1}, {"id": 2, "label": 1}])


# --- COCOeval -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def annotations(tmp_path_factory):
    return write_annotations(tmp_path_factory.mktemp("coco") / "instances_val2017.json")


def test_ground_truth_as_detections_scores_one(annotations):
    stats = coco.evaluate_detections(annotations, gt_rows())
    assert stats.shape == (12,) and stats[0] == pytest.approx(1.0) and stats[1] == pytest.approx(1.0)


def test_dropping_half_of_one_class_gives_the_hand_computed_ap(annotations):
    # Persons: 4 non-crowd objects, 2 detected (precision 1 at recall 0.25 and 0.5, nothing beyond). COCO's AP is the
    # mean over 101 recall points 0, 0.01, ..., 1 of the interpolated precision: 1 at the 51 points <= 0.5, 0 after,
    # so 51/101 at every IoU threshold. Cars and dogs: 1. Mean over the 3 classes: (51/101 + 2) / 3 = 253/303.
    stats = coco.evaluate_detections(annotations, gt_rows(skip=DROPPED_PERSONS))
    assert stats[0] == pytest.approx(253 / 303, abs=1e-12)
    assert stats[8] == pytest.approx((0.5 + 2) / 3)  # AR@100: recall 0.5, 1, 1


def test_boxes_shifted_to_iou_052_count_only_at_iou_050(annotations):
    # IoU 0.52 with its object: a hit at threshold 0.50, a miss at 0.55 ... 0.95, so AP@[.5:.95] = 1/10.
    stats = coco.evaluate_detections(annotations, gt_rows(shift_to_iou=0.52))
    assert stats[0] == pytest.approx(0.1) and stats[1] == pytest.approx(1.0) and stats[2] == pytest.approx(0.0)


def test_a_detection_on_the_crowd_region_is_ignored_and_no_detections_score_zero(annotations):
    crowd = [20, 300, 250, 150, 100, 0.95, 1]  # exactly the crowd box, highest score
    assert coco.evaluate_detections(annotations, np.vstack([gt_rows(), crowd]))[0] == pytest.approx(1.0)
    assert coco.evaluate_detections(annotations, np.zeros((0, 7)))[0] == 0.0


def test_detections_naming_unknown_images_or_categories_are_a_data_error(annotations):
    with pytest.raises(DataError, match="image ids \\[99\\]"):
        coco.evaluate_detections(annotations, [[99, 1, 1, 5, 5, 0.5, 1]])
    with pytest.raises(DataError, match="category ids \\[2\\]"):
        coco.evaluate_detections(annotations, [[10, 1, 1, 5, 5, 0.5, 2]])
    with pytest.raises(DataError, match="missing"):
        coco.evaluate_detections(annotations + ".nope", gt_rows())
    bad = annotations + ".bad.json"
    with open(bad, "w") as f:
        f.write("{not json")
    with pytest.raises(DataError, match="not a COCO annotation file"):
        coco.load_ground_truth(bad)


# --- the metric -----------------------------------------------------------------------------------------------------

def _metric(annotations, expected=4, dist=None, **kwargs):
    return coco.CocoDetectionMetric(annotations, MANIFEST_CATEGORIES,
                                    dist or distribute.SingleProcess(), expected, **kwargs)


def test_metric_end_to_end_from_model_outputs(annotations):
    lines = []
    metric = _metric(annotations, log=lines.append)
    ids, heights, widths, loc, logits = model_outputs([10, 20, 30, 40])
    # Padding (-1) carrying a copy of image 10's outputs must add nothing.
    pad = lambda a: np.concatenate([a[:1], a])  # noqa: E731
    metric.add_batch(np.r_[-1, ids[:2]], pad(heights[:2]), pad(widths[:2]), pad(loc[:2]), pad(logits[:2]))
    metric.add_batch(ids[2:], heights[2:], widths[2:], loc[2:], logits[2:])
    assert metric.result() == pytest.approx(1.0)
    assert len(lines) == 12 and lines[0].startswith(" Average Precision")
    rows = np.concatenate(metric._rows)
    assert sorted(rows[:, 6].tolist()) == sorted(c for _, c, _, crowd in OBJECTS if not crowd)  # one per object
    np.testing.assert_allclose(rows[np.lexsort(rows[:, [1, 0]].T)][:, :5],
                               gt_rows()[np.lexsort(gt_rows()[:, [1, 0]].T)][:, :5], atol=1e-3)
    metric.reset()
    ids, heights, widths, loc, logits = model_outputs([10, 20, 30, 40], skip=DROPPED_PERSONS)
    metric.add_batch(ids, heights, widths, loc, logits)
    assert metric.result() == pytest.approx(253 / 303) and metric.stats[0] == pytest.approx(253 / 303)


def test_metric_checks_the_images_evaluated(annotations):
    ids, heights, widths, loc, logits = model_outputs([10, 20, 30])
    metric = _metric(annotations, expected=4)
    metric.add_batch(ids, heights, widths, loc, logits)
    with pytest.raises(DataError, match="evaluated 3 validation images, 4 were expected"):
        metric.result()
    metric = _metric(annotations, expected=3)
    metric.add_batch(ids, heights, widths, loc, logits)
    metric.add_batch(ids[:1], heights[:1], widths[:1], loc[:1], logits[:1])
    with pytest.raises(DataError, match="ids \\[10\\]"):
        metric.result()
    metric = _metric(annotations, expected=3)
    metric.add_batch(np.asarray([10, 20, 77]), heights, widths, loc, logits)
    with pytest.raises(DataError, match="no images with ids \\[77\\]"):
        metric.result()


def test_metric_rejects_a_model_with_another_class_count_and_a_missing_file(annotations, tmp_path):
    ids, heights, widths, loc, logits = model_outputs([10])
    with pytest.raises(DataError, match="predicts 4 classes"):
        _metric(annotations).add_batch(ids, heights, widths, loc, np.concatenate([logits, logits[..., :1]], -1))
    with pytest.raises(DataError, match=str(tmp_path / "none.json")):
        _metric(str(tmp_path / "none.json"))


def test_single_process_gather_rows_is_the_identity():
    dist = distribute.SingleProcess()
    rows = np.arange(14.0).reshape(2, 7)
    assert dist.gather_rows(rows) is rows or np.array_equal(dist.gather_rows(rows), rows)
    assert dist.gather_rows(np.zeros((0, 7))).shape == (0, 7)
    with pytest.raises(ValueError, match="scalar"):
        dist.gather_rows(3.0)


WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "coco_eval_shares.py")


@pytest.mark.multiprocess
@needs_horovod
def test_two_horovod_workers_give_the_ap_of_one_worker_seeing_everything(annotations, tmp_path):
    from tests.test_distributed import horovodrun

    proc = horovodrun(WORKER, annotations, str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    single = subprocess.run([sys.executable, WORKER, annotations, str(tmp_path)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert single.returncode == 0, single.stderr[-2000:]
    results = {name: json.load(open(tmp_path / name)) for name in ("rank0_of2.json", "rank1_of2.json",
                                                                    "rank0_of1.json")}
    two, other, one = results["rank0_of2.json"], results["rank1_of2.json"], results["rank0_of1.json"]
    assert two["ap"] == pytest.approx(253 / 303) and two["stats"] == other["stats"] == one["stats"]
    # Rows gathered in rank order, identical on both, with rank 1 contributing none in the second gather.
    assert two["gathered"] == other["gathered"] == [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]
    assert two["gathered_empty_rank1"] == other["gathered_empty_rank1"] == [[0, 0], [0, 1]]
    assert two["rows"] == one["rows"] and two["rows"] > 0


# --- the evaluator backends: faster-coco-eval gives pycocotools' numbers ---------------------------------------------

needs_faster_coco_eval = pytest.mark.skipif(not coco._faster_coco_eval_installed(),
                                            reason="faster-coco-eval not installed")
# val2017's 80 category ids: 1..90 without the 10 that the 2014 paper's list has and the 2017 annotations do not.
COCO_CATEGORY_IDS = np.asarray([i for i in range(1, 91) if i not in {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}])
IMAGE_SHAPES = np.asarray([(640, 480), (640, 427), (480, 640), (640, 425), (500, 375), (427, 640), (640, 360),
                           (612, 612)])


def _random_boxes(rng, count, width, height, median_side, spread):
    """[count, 4] [x, y, w, h] inside the image, log-normal sides, aspect ratios around 1, 2 decimals as COCO's."""
    side = np.exp(rng.normal(np.log(median_side), spread, count))
    aspect = np.exp(rng.normal(0.0, 0.5, count))
    w = np.clip(side * np.sqrt(aspect), 1.0, width)
    h = np.clip(side / np.sqrt(aspect), 1.0, height)
    return np.round(np.stack([rng.uniform(0, width - w), rng.uniform(0, height - h), w, h], 1), 2)


def synthetic_coco(seed, num_images, objects_per_image=7.3, detections_per_image=70.0, empty_fraction=0.01,
                   crowd_fraction=0.01, crowded_fraction=0.1, tie_fraction=0.1):
    """A val2017-like COCO instances dict and result rows [K, 7] for it -> (dataset, rows).

    Like val2017 (4,952 of whose 5,000 images have objects, 36,781 objects, ~1% crowd, 41/34/24% small/medium/large):
    images of COCO's sizes with random ids in shuffled order, 1 + negative-binomial objects (mean objects_per_image,
    a long tail), empty_fraction without any, a long-tailed class distribution over the 80 real category ids (with
    their gaps), log-normal box sizes, `area` below the box's (as a polygon's is), crowd_fraction crowd regions.
    Detections: 0-3 jittered copies of 85% of the objects (crowd ones too; 15% with another class), then low-scored
    clutter up to a Poisson count (mean detections_per_image); crowded_fraction of the images get 150-230 (more
    than maxDets=100), cut to the reference's 200 best; clutter also on images without objects; boxes not clipped;
    float32 scores (as SSD's), tie_fraction of them rounded to 2 decimals so that ties occur within and across images.
    """
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(1.0 / np.arange(1, 81) ** 1.1)  # the first class (person) ~20% of the objects

    def classes(count):
        return COCO_CATEGORY_IDS[np.searchsorted(cumulative / cumulative[-1], rng.random(count))]

    images, annotations, rows = [], [], []
    for image_id in rng.choice(600_000, num_images, replace=False).tolist():
        width, height = IMAGE_SHAPES[rng.integers(len(IMAGE_SHAPES))].tolist()
        images.append({"id": image_id, "width": width, "height": height, "file_name": f"{image_id:012d}.jpg"})
        count = 0 if rng.random() < empty_fraction else 1 + min(
            int(rng.negative_binomial(1.2, 1.2 / (objects_per_image + 0.2))), 80)
        crowd = rng.random(count) < crowd_fraction
        boxes = np.where(crowd[:, None], _random_boxes(rng, count, width, height, 150.0, 0.6),
                         _random_boxes(rng, count, width, height, 48.0, 1.1))
        labels = classes(count)
        areas = np.round(boxes[:, 2] * boxes[:, 3] * rng.uniform(0.4, 0.95, count), 3)
        for (x, y, w, h), label, is_crowd, area in zip(boxes.tolist(), labels.tolist(), crowd.tolist(),
                                                       areas.tolist()):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": label,
                                "bbox": [x, y, w, h], "iscrowd": int(is_crowd), "area": area,
                                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
        copies = np.where(rng.random(count) < 0.85, 1 + rng.poisson(1.2, count), 0)
        source = np.repeat(np.arange(count), copies)
        jitter = rng.normal(0.0, 0.08, (len(source), 4))
        b = boxes[source]
        hits = np.stack([b[:, 0] + jitter[:, 0] * b[:, 2], b[:, 1] + jitter[:, 1] * b[:, 3],
                         b[:, 2] * np.exp(jitter[:, 2]), b[:, 3] * np.exp(jitter[:, 3])], 1)
        hit_labels = np.where(rng.random(len(source)) < 0.85, labels[source], classes(len(source)))
        if rng.random() < crowded_fraction:
            target = int(rng.integers(150, 230))
        else:
            target = int(rng.poisson(0.85 * detections_per_image))
        clutter = max(target - len(source), 0)
        det_boxes = np.concatenate([hits, _random_boxes(rng, clutter, width, height, 50.0, 1.0) * [1, 1, 1.2, 1]])
        det_labels = np.concatenate([hit_labels, classes(clutter)])
        scores = np.concatenate([rng.beta(4, 2, len(source)), rng.beta(1, 8, clutter)])
        scores = np.where(rng.random(len(scores)) < tie_fraction, np.round(scores, 2), scores)
        scores = np.maximum(scores, 0.05).astype(np.float32)
        keep = np.argsort(-scores, kind="stable")[:200]
        rows.append(np.column_stack([np.full(len(keep), image_id), det_boxes[keep], scores[keep],
                                     det_labels[keep]]))
    order = rng.permutation(len(images))
    dataset = {"info": {"description": "synthetic val2017-like"}, "licenses": [],
               "categories": [{"id": int(c), "name": f"class{c}", "supercategory": "thing"}
                              for c in COCO_CATEGORY_IDS],
               "images": [images[i] for i in order], "annotations": annotations}
    return dataset, np.concatenate(rows).astype(np.float64)


def _evaluations(annotation_file, rows):
    """Both backends' COCOeval objects and summary lines for the same rows."""
    out = {}
    for backend in coco.BACKENDS:
        gt = coco.load_ground_truth(annotation_file, backend)
        out[backend] = coco._run_cocoeval(gt, np.asarray(rows, np.float64), backend)
    return out["pycocotools"], out["faster_coco_eval"]


def assert_backends_agree(annotation_file, rows):
    """The 12 numbers to 1e-12 (in fact 1e-15) and the same summary lines; recall and score arrays bit-identical;
    precision bit-identical except where pycocotools' tp / (tp + fp + eps) with tp + fp = 1 gives 1 - 2^-52 and
    faster-coco-eval's tp / (tp + fp) gives 1 (see the module docstring). -> (the number of such entries,
    pycocotools' 12 numbers)."""
    (slow, slow_lines), (fast, fast_lines) = _evaluations(annotation_file, rows)
    np.testing.assert_allclose(fast.stats, slow.stats, rtol=0, atol=1e-12)
    assert np.max(np.abs(np.asarray(fast.stats) - np.asarray(slow.stats))) <= 1e-15
    assert fast_lines == slow_lines and len(slow_lines) == 12
    for key in ("recall", "scores"):
        assert np.array_equal(fast.eval[key], slow.eval[key]), key
    differ = fast.eval["precision"] != slow.eval["precision"]
    assert (slow.eval["precision"][differ] == 1 - 2.0 ** -52).all() and (fast.eval["precision"][differ] == 1).all()
    return int(differ.sum()), np.asarray(slow.stats)


def test_backend_choice(monkeypatch):
    monkeypatch.delenv(coco.BACKEND_ENV, raising=False)
    from mlperf_keras.config import ConfigError

    assert coco.coco_backend("pycocotools") == "pycocotools"
    monkeypatch.setenv(coco.BACKEND_ENV, "pycocotools")
    assert coco.coco_backend() == "pycocotools"
    # An argument overrides the environment.
    assert coco.coco_backend("auto") == ("faster_coco_eval" if coco._faster_coco_eval_installed() else "pycocotools")
    monkeypatch.setenv(coco.BACKEND_ENV, "cocoapi")
    with pytest.raises(ConfigError, match="MLPERF_KERAS_COCO_EVAL"):
        coco.coco_backend()
    with pytest.raises(ConfigError, match="unknown COCO evaluator 'fast'"):
        coco.coco_backend("fast")
    monkeypatch.delenv(coco.BACKEND_ENV)
    monkeypatch.setattr(coco, "_faster_coco_eval_installed", lambda: False)
    assert coco.coco_backend() == "pycocotools"
    with pytest.raises(ConfigError, match="pip install faster-coco-eval"):
        coco.coco_backend("faster-coco-eval")


@needs_faster_coco_eval
def test_auto_prefers_faster_coco_eval_and_an_index_is_scored_by_its_own_backend(annotations, monkeypatch):
    monkeypatch.delenv(coco.BACKEND_ENV, raising=False)
    assert coco.coco_backend() == "faster_coco_eval"
    monkeypatch.setenv(coco.BACKEND_ENV, "faster-coco-eval")
    assert coco.coco_backend() == "faster_coco_eval"
    assert type(coco.load_ground_truth(annotations)).__module__.startswith("faster_coco_eval")
    monkeypatch.setenv(coco.BACKEND_ENV, "pycocotools")
    gt = coco.load_ground_truth(annotations)
    assert type(gt).__module__.startswith("pycocotools")
    assert coco.evaluate_detections(gt, gt_rows(skip=DROPPED_PERSONS))[0] == pytest.approx(253 / 303, abs=1e-12)
    with pytest.raises(ValueError, match="loaded by pycocotools"):
        coco.evaluate_detections(gt, gt_rows(), backend="faster_coco_eval")
    bad = annotations + ".bad.json"
    with open(bad, "w") as f:
        f.write("[1, 2]")
    with pytest.raises(DataError, match="not a COCO annotation file"):
        coco.load_ground_truth(bad, "faster_coco_eval")


@needs_faster_coco_eval
@pytest.mark.parametrize("case", ["all", "half_the_persons", "iou_052", "crowd_hit", "jittered", "none"])
def test_backends_agree_on_the_small_set(annotations, case):
    rng = np.random.default_rng(5)
    rows = {"all": gt_rows(), "half_the_persons": gt_rows(skip=DROPPED_PERSONS),
            "iou_052": gt_rows(shift_to_iou=0.52),
            "crowd_hit": np.vstack([gt_rows(), [20, 300, 250, 150, 100, 0.95, 1]]),
            "jittered": gt_rows() + np.c_[np.zeros(8), rng.normal(0, 8, (8, 4)), np.zeros((8, 2))],
            "none": np.zeros((0, 7))}[case]
    if len(rows):
        assert_backends_agree(annotations, rows)
    stats = {b: coco.evaluate_detections(annotations, rows, backend=b) for b in coco.BACKENDS}
    np.testing.assert_allclose(stats["faster_coco_eval"], stats["pycocotools"], rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """300 val2017-like images (synthetic_coco) as an annotation file, with their detections."""
    dataset, rows = synthetic_coco(seed=11, num_images=300)
    # Two classes without objects (val2017 has all 80, a subset may not): their detections are scored by no class.
    dataset["annotations"] = [a for a in dataset["annotations"] if a["category_id"] not in (88, 90)]
    path = tmp_path_factory.mktemp("coco_generated") / "instances_val2017.json"
    with open(path, "w") as f:
        json.dump(dataset, f)
    return str(path), dataset, rows


@needs_faster_coco_eval
def test_backends_agree_on_a_generated_val2017_like_set(generated):
    path, dataset, rows = generated
    # The set exercises what can differ: images without objects (scored: their detections are false positives),
    # crowd regions, every area range, more than 100 detections on an image (the maxDets cut), tied scores, classes
    # without objects here (-1 entries), detections of a class absent from their image.
    annotated = {a["image_id"] for a in dataset["annotations"]}
    per_image = np.unique(rows[:, 0], return_counts=True)
    assert 0 < len({i["id"] for i in dataset["images"]} - annotated) < 20
    assert np.isin(per_image[0], list(annotated), invert=True).any()
    assert sum(a["iscrowd"] for a in dataset["annotations"]) >= 10
    assert (per_image[1] > 100).sum() >= 10 and 60 < per_image[1].mean() < 85
    assert len(np.unique(rows[:, 5])) < 0.9 * len(rows)
    assert len({a["category_id"] for a in dataset["annotations"]}) == 78 and np.isin([88, 90], rows[:, 6]).all()
    entries, reference = assert_backends_agree(path, rows)
    assert entries > 0  # the tp + fp = 1 case occurs, and is the only difference
    assert (reference[3:6] > 0).all() and 0.1 < reference[0] < 0.6
    stats = coco.evaluate_detections(path, rows, backend="faster_coco_eval")
    np.testing.assert_allclose(stats, reference, rtol=0, atol=1e-12)


@needs_faster_coco_eval
def test_faster_coco_eval_index_reused_across_evaluations(generated):
    # The metric loads the annotations once and evaluates 8 times; evaluating mutates the index ("ignore" flags), so
    # a second result on the same index must equal a fresh one.
    path, _, rows = generated
    gt = coco.load_ground_truth(path, "faster_coco_eval")
    first = coco.evaluate_detections(gt, rows)
    other = coco.evaluate_detections(gt, rows[::2])
    assert not np.array_equal(first, other)
    assert np.array_equal(coco.evaluate_detections(gt, rows), first)
    assert np.array_equal(coco.evaluate_detections(path, rows[::2], backend="faster_coco_eval"), other)


@needs_faster_coco_eval
def test_metric_with_either_evaluator(annotations):
    results = {}
    for backend in coco.BACKENDS:
        lines = []
        metric = _metric(annotations, log=lines.append, coco_evaluator=backend)
        metric.add_batch(*model_outputs([10, 20, 30, 40], skip=DROPPED_PERSONS))
        results[backend] = (metric.result(), lines)
    assert results["pycocotools"][0] == pytest.approx(253 / 303, abs=1e-12)
    assert results["faster_coco_eval"][0] == pytest.approx(results["pycocotools"][0], abs=1e-12)
    assert results["faster_coco_eval"][1] == results["pycocotools"][1]


@pytest.mark.slow
@needs_faster_coco_eval
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_backends_agree_on_larger_generated_sets(tmp_path, seed):
    dataset, rows = synthetic_coco(seed=seed, num_images=1000, crowd_fraction=0.03, tie_fraction=0.3)
    path = tmp_path / "instances.json"
    with open(path, "w") as f:
        json.dump(dataset, f)
    assert assert_backends_agree(str(path), rows)[0] > 0
