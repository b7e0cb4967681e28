"""data_prep.coco on small generated data in the official COCO 2017 layout (data_prep.demo_coco): the records against
the annotation JSON (ids, boxes, contiguous labels, crowd flags, segmentations), grayscale / CMYK / PNG images,
images without annotations, dropped degenerate boxes, determinism, clear errors, and the shared manifest."""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from data_prep import coco, demo_coco
from mlperf_keras.inputs.manifest import DataError, read_manifest, verify_files
from tests.conftest import example_features, run_cli

TRAIN, VAL = 12, 6
GAPS = {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}  # the COCO category ids that do not exist


def read_records(data_dir, split):
    out = []
    for f in example_features(data_dir, "ssd", split):
        floats = lambda key: list(f[key].float_list.value)  # noqa: E731
        out.append({"name": f["image/filename"].bytes_list.value[0].decode(),
                    "id": f["image/id"].int64_list.value[0],
                    "height": f["image/height"].int64_list.value[0],
                    "width": f["image/width"].int64_list.value[0],
                    "jpeg": f["image/encoded"].bytes_list.value[0],
                    "boxes": np.stack([floats(f"image/object/bbox/{k}") for k in ("xmin", "ymin", "xmax", "ymax")],
                                      axis=-1).reshape(-1, 4),
                    "labels": list(f["image/object/class/label"].int64_list.value),
                    "crowd": list(f["image/object/is_crowd"].int64_list.value),
                    "area": floats("image/object/area"),
                    "segmentation": [json.loads(s) for s in f["image/object/segmentation"].bytes_list.value],
                    "polygon_parts": list(f["image/object/polygon/parts"].int64_list.value),
                    "polygon_vertices": list(f["image/object/polygon/vertices"].int64_list.value),
                    "polygon_xy": floats("image/object/polygon/xy")})
    return out


def load_json(raw, split):
    with open(os.path.join(raw, "annotations", f"instances_{split}2017.json")) as f:
        return json.load(f)


def polygons(ann):
    """The polygons Mask R-CNN's targets read: a non-crowd object's parts of 3 or more vertices."""
    return [] if ann["iscrowd"] else [p for p in ann["segmentation"] if len(p) >= 6]


def expected_objects(document, image):
    """The annotations of one image as the records should hold them (degenerate boxes left out)."""
    width, height = image["width"], image["height"]
    out = []
    for ann in document["annotations"]:
        if ann["image_id"] != image["id"]:
            continue
        x, y, w, h = ann["bbox"]
        box = np.clip([x / width, y / height, (x + w) / width, (y + h) / height], 0, 1)
        if box[2] > box[0] and box[3] > box[1]:
            out.append((box, ann))
    return out


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    raw, out = str(root / "raw"), str(root / "out")
    info = demo_coco.write_raw(raw, num_train=TRAIN, num_val=VAL, oddities=True, seed=4)
    manifest = coco.prepare(raw, out, train_shards=3, val_shards=2, num_workers=0, log=lambda _: None)
    return raw, out, info, manifest


def test_label_map_is_sorted_ids_to_1_to_80_and_back():
    categories = [{"id": cid, "name": name} for cid, name, _ in reversed(demo_coco.COCO_CATEGORIES)]
    assert {c["id"] for c in categories} == set(range(1, 91)) - GAPS and len(categories) == 80
    labels = coco.label_map(categories)  # the file's order does not matter: sorted ids
    assert sorted(labels.values()) == list(range(1, 81))
    assert (labels[1], labels[11], labels[13], labels[44], labels[46], labels[90]) == (1, 11, 12, 40, 41, 80)
    # and back: the evaluator's table from the manifest's categories (label -> COCO id)
    from mlperf_keras.metrics.coco import label_to_category_table

    table = label_to_category_table([{"id": cid, "name": "", "label": label} for cid, label in labels.items()])
    assert table[0] == -1 and all(table[labels[cid]] == cid for cid in labels)


def test_counts_files_and_manifest(prepared):
    raw, out, info, manifest = prepared
    train_json, val_json = load_json(raw, "train"), load_json(raw, "val")
    objects = {split: {img["id"]: expected_objects(doc, img) for img in doc["images"]}
               for split, doc in (("train", train_json), ("val", val_json))}
    assert manifest["counts"] == {
        "num_classes": 80, "train_images": TRAIN, "val_images": VAL,
        "train_images_annotated": sum(bool(o) for o in objects["train"].values()),
        "val_images_annotated": sum(bool(o) for o in objects["val"].values()),
        "train_objects": sum(map(len, objects["train"].values())),
        "val_objects": sum(map(len, objects["val"].values())),
        "train_boxes_dropped": 1, "val_boxes_dropped": 0, "reencoded": 2,
        "max_object_vertices": max(sum(len(p) // 2 for p in polygons(ann)) for split in objects
                                   for objs in objects[split].values() for _, ann in objs)}
    assert manifest["record_version"] == 2
    assert manifest["counts"]["train_images_annotated"] == TRAIN - 1  # the image without annotations
    assert manifest["counts"]["train_objects"] == len(train_json["annotations"]) - 1  # the zero-width box
    assert manifest["workload"] == "ssd" and manifest["workloads"] == ["ssd", "maskrcnn"]
    assert [(c["id"], c["label"]) for c in manifest["categories"]] == \
        [(cid, n) for n, cid in enumerate(sorted(set(range(1, 91)) - GAPS), 1)]
    assert manifest["categories"][-1] == {"id": 90, "name": "toothbrush", "label": 80}
    assert [(f["name"], f["split"]) for f in manifest["files"]] == \
        [(f"train-0000{i}-of-00003.tfrecord", "train") for i in range(3)] + \
        [(f"validation-0000{i}-of-00002.tfrecord", "validation") for i in range(2)] + \
        [("instances_val2017.json", "annotations")]
    assert sum(f["rows"] for f in manifest["files"] if f["split"] == "train") == TRAIN
    verify_files(out, manifest, progress=None)
    with open(os.path.join(out, "instances_val2017.json"), "rb") as copied, \
            open(os.path.join(raw, "annotations", "instances_val2017.json"), "rb") as original:
        assert copied.read() == original.read()
    assert not [n for n in os.listdir(out) if n.startswith(".staging")]


@pytest.mark.parametrize("split", ["train", "val"])
def test_records_hold_the_json_annotations(prepared, split):
    raw, out, info, manifest = prepared
    document = load_json(raw, split)
    records = read_records(out, "train" if split == "train" else "validation")
    images = {img["id"]: img for img in document["images"]}
    labels = {c["id"]: c["label"] for c in manifest["categories"]}
    assert sorted(r["id"] for r in records) == sorted(images)
    if split == "val":  # validation keeps the file's order; train is shuffled (with a fixed seed)
        assert [r["id"] for r in records] == [img["id"] for img in document["images"]]
    else:
        assert [r["id"] for r in records] not in ([img["id"] for img in document["images"]], sorted(images))
    reencoded = {r["name"] for r in manifest["reencoded"]}
    for r in records:
        image = images[r["id"]]
        assert (r["name"], r["width"], r["height"]) == (image["file_name"], image["width"], image["height"])
        with open(os.path.join(raw, f"{split}2017", r["name"]), "rb") as f:
            assert (r["jpeg"] == f.read()) == (r["name"] not in reencoded)
        expected = expected_objects(document, image)
        assert len(r["labels"]) == len(expected) == len(r["crowd"]) == len(r["area"]) == len(r["segmentation"])
        for n, (box, ann) in enumerate(expected):
            np.testing.assert_allclose(r["boxes"][n], box, rtol=0, atol=1e-6)
            assert r["labels"][n] == labels[ann["category_id"]] == \
                sorted(set(range(1, 91)) - GAPS).index(ann["category_id"]) + 1
            assert r["crowd"][n] == ann["iscrowd"]
            assert r["area"][n] == pytest.approx(ann["area"], rel=1e-6)
            assert r["segmentation"][n] == ann["segmentation"]  # polygons or RLE, JSON round trip
        # the non-crowd polygons of at least 3 vertices as numbers, objects and parts in order (crowds: none)
        parts = [polygons(ann) for _, ann in expected]
        assert r["polygon_parts"] == [len(p) for p in parts]
        assert r["polygon_vertices"] == [len(flat) // 2 for p in parts for flat in p]
        np.testing.assert_array_equal(r["polygon_xy"], np.array([v for p in parts for flat in p for v in flat],
                                                                np.float32))
        assert ((r["boxes"] >= 0) & (r["boxes"] <= 1)).all()


def test_special_images(prepared):
    from pycocotools import mask as mask_utils

    raw, out, info, manifest = prepared
    train = {r["name"]: r for r in read_records(out, "train")}
    val = {r["name"]: r for r in read_records(out, "validation")}

    gray = train[info["train"]["gray"][0]]  # kept byte for byte; TensorFlow decodes it to 3 channels
    assert Image.open(io.BytesIO(gray["jpeg"])).mode == "L"
    assert tf.io.decode_jpeg(gray["jpeg"], channels=3).shape == (gray["height"], gray["width"], 3)

    assert {(r["name"], r["kind"]) for r in manifest["reencoded"]} == \
        {(info["train"]["cmyk"][0], "cmyk"), (info["train"]["png"][0], "png")}
    for kind in ("cmyk", "png"):
        name = info["train"][kind][0]
        original = Image.open(os.path.join(raw, "train2017", name))
        assert (original.format, original.mode) in (("JPEG", "CMYK"), ("PNG", "RGB"))
        converted = Image.open(io.BytesIO(train[name]["jpeg"]))
        assert (converted.format, converted.mode) == ("JPEG", "RGB")
        decoded = tf.io.decode_jpeg(train[name]["jpeg"], channels=3).numpy().astype(np.float32)
        assert np.abs(decoded.mean(axis=(0, 1)) - np.asarray(original.convert("RGB"), np.float32).mean(axis=(0, 1))
                      ).max() < 3  # the same picture, not a colour swap

    for records, name in ((train, info["train"]["empty"][0]), (val, info["val"]["empty"][0])):
        assert records[name]["labels"] == [] and records[name]["boxes"].shape == (0, 4)

    for records, name, counts_type in ((train, info["train"]["crowd"][0], list),
                                       (val, info["val"]["crowd_string"][0], str)):
        r = records[name]
        (n,) = [i for i, c in enumerate(r["crowd"]) if c == 1]
        rle = r["segmentation"][n]
        assert isinstance(rle["counts"], counts_type) and rle["size"] == [r["height"], r["width"]]
        if counts_type is list:
            rle = mask_utils.frPyObjects(rle, *rle["size"])
        assert float(mask_utils.area(rle)) == r["area"][n]
        x, y, w, h = mask_utils.toBbox(rle)
        np.testing.assert_allclose(r["boxes"][n], [x / r["width"], y / r["height"], (x + w) / r["width"],
                                                   (y + h) / r["height"]], atol=1e-4)

    odd = train[info["train"]["odd_boxes"][0]]  # the border-crossing box is clipped to the image
    assert odd["boxes"][-1][2] == 1.0 and odd["boxes"][-1][3] == 1.0 and odd["boxes"][-1][0] < 1.0
    assert all(xmax > xmin and ymax > ymin for xmin, ymin, xmax, ymax in odd["boxes"])


def test_command_line_with_workers_gives_identical_files(prepared, tmp_path):
    raw, out, _, manifest = prepared
    proc = run_cli("data_prep.coco", f"--raw_dir={raw}", f"--output_dir={tmp_path / 'out'}", "--train_shards=3",
                   "--val_shards=2", "--num_workers=2", "--allow_subset")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "images/s" in proc.stdout
    again = read_manifest(str(tmp_path / "out"), "maskrcnn")
    assert [(f["name"], f["sha256"]) for f in again["files"]] == [(f["name"], f["sha256"]) for f in manifest["files"]]
    assert again["counts"] == manifest["counts"]


def test_records_without_polygon_vertices_are_refused_naming_the_command(prepared, tmp_path):
    """A folder prepared before the records carried polygon vertices (no record_version: version 1) fails at the
    manifest with one line saying to prepare it again, not at the first batch."""
    _, out, _, manifest = prepared
    old = {k: v for k, v in manifest.items() if k != "record_version"}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    for workload in ("maskrcnn", "ssd"):
        with pytest.raises(DataError, match=r"coco-2017 records of version 1, this package reads version 2; prepare "
                                             r"the data again \(python -m data_prep.coco ") as error:
            read_manifest(str(tmp_path), workload)
        assert "\n" not in str(error.value)


def test_manifest_workloads_accept_each_listed_workload(prepared, tmp_path):
    _, out, _, _ = prepared
    assert read_manifest(out, "ssd")["dataset"] == "coco-2017"
    assert read_manifest(out, "maskrcnn")["dataset"] == "coco-2017"
    with pytest.raises(DataError, match=r"prepared for --model=ssd or --model=maskrcnn, not --model=resnet"):
        read_manifest(out, "resnet")
    # A manifest without "workloads" is for its one workload, with the message as before.
    one_file = [{"name": "a.npy", "bytes": 1, "sha256": "0" * 64}]  # read_manifest checks the structure too
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1, "workload": "ncf", "counts": {},
                                                        "files": one_file}))
    assert read_manifest(str(tmp_path), "ncf")["workload"] == "ncf"
    with pytest.raises(DataError, match=r"manifest.json: this folder was prepared for --model=ncf, not --model=ssd$"):
        read_manifest(str(tmp_path), "ssd")


def _first_image(raw, split):
    document = load_json(raw, split)
    return document, next(img for img in document["images"]
                          if any(a["image_id"] == img["id"] for a in document["annotations"]))


def _write_json(raw, split, document):
    with open(os.path.join(raw, "annotations", f"instances_{split}2017.json"), "w") as f:
        json.dump(document, f)


def _break(raw, breakage):
    """Damage the raw data one way; returns the text the error must contain."""
    annotations = os.path.join(raw, "annotations")
    if breakage == "missing_json":
        os.remove(os.path.join(annotations, "instances_val2017.json"))
        return "instances_val2017.json: missing"
    if breakage == "malformed_json":
        with open(os.path.join(annotations, "instances_train2017.json"), "w") as f:
            f.write('{\n  "images": [\n    {"id": 1,}\n  ]\n}\n')
        return "instances_train2017.json: not valid JSON: line 3 column 14"
    document, image = _first_image(raw, "train")
    name = image["file_name"]
    if breakage == "no_categories":
        del document["categories"]
        _write_json(raw, "train", document)
        return "instances_train2017.json: no 'categories' list"
    if breakage == "unknown_image":
        document["annotations"][0]["image_id"] = 999_999_999
        _write_json(raw, "train", document)
        return "names image_id 999999999, which is not in 'images'"
    if breakage == "unknown_category":
        document["annotations"][-1]["category_id"] = 12  # a gap in COCO's ids
        _write_json(raw, "train", document)
        return "names category_id 12, which is not in 'categories'"
    if breakage == "missing_image":
        os.remove(os.path.join(raw, "train2017", name))
        return f"train2017/{name}: missing (image {image['id']} of "
    if breakage == "corrupt_image":
        path = os.path.join(raw, "train2017", name)
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 3])
        return f"train2017/{name}: corrupt image"
    if breakage == "wrong_size":
        width = image["width"]
        image["width"] = width + 7
        _write_json(raw, "train", document)
        return f"train2017/{name}: {width}x{image['height']} pixels, but "
    raise AssertionError(breakage)


@pytest.mark.parametrize("breakage", ["missing_json", "malformed_json", "no_categories", "unknown_image",
                                      "unknown_category", "missing_image", "corrupt_image", "wrong_size"])
def test_bad_raw_input_is_one_clear_line_and_leaves_nothing(tmp_path, breakage):
    raw = str(tmp_path / "raw")
    demo_coco.write_raw(raw, num_train=4, num_val=2, size=(96, 64), seed=2)
    message = _break(raw, breakage)
    out = tmp_path / "out"
    proc = run_cli("data_prep.coco", f"--raw_dir={raw}", f"--output_dir={out}", "--num_workers=0")
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-2000:])
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists() or os.listdir(out) == []  # no manifest, no shard, no staging folder
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        coco.prepare(raw, str(tmp_path / "out2"), num_workers=0, log=lambda _: None)


def test_log_lines_say_1_shard_and_1_worker(tmp_path):
    """Issue 32: the demo's preparation printed "in 1 shards" and "with 1 workers"."""
    demo_coco.write_raw(str(tmp_path / "raw"), num_train=2, num_val=1, size=(40, 30), seed=2)
    lines = []
    coco.prepare(str(tmp_path / "raw"), str(tmp_path / "out"), train_shards=1, val_shards=1, num_workers=0,
                 log=lines.append)
    text = "\n".join(lines)
    assert "in 1 shard," in text and "with 1 worker)" in text and ", 1 worker)" in text, text
    assert "1 shards" not in text and "1 workers" not in text, text


def test_polygon_parts_keep_three_vertices_or_more_and_refuse_a_non_crowd_rle():
    """Mask R-CNN's reference (mlcommons/training 0badcd17, maskrcnn_benchmark/structures/segmentation_mask.py
    Polygons) reads polygons only: a non-crowd RLE stops data_prep with one line; a crowd gives no polygon; parts
    under 3 vertices are left out (pycocotools' frPyObjects reads a 4-number list as a box)."""
    polygon = {"id": 7, "iscrowd": 0, "segmentation": [[0, 0, 4, 0, 4, 4], [1, 1, 2, 2], [5, 5, 6, 5, 6, 6, 5]]}
    assert coco.polygon_parts(polygon, "x.json", 3) == [[0.0, 0.0, 4.0, 0.0, 4.0, 4.0], [5.0, 5.0, 6.0, 5.0, 6.0, 6.0]]
    assert coco.polygon_parts({"iscrowd": 1, "segmentation": {"counts": [4], "size": [2, 2]}}, "x.json", 3) == []
    with pytest.raises(DataError, match=r"^x.json: annotation 8 \(image 3\) is not a crowd but its segmentation is "
                                         r"not a list of polygons") as error:
        coco.polygon_parts({"id": 8, "iscrowd": 0, "segmentation": {"counts": "abc", "size": [2, 2]}}, "x.json", 3)
    assert "\n" not in str(error.value)
