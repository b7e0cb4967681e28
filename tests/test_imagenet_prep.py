"""data_prep.imagenet on small real JPEGs packed in the official tar layout (with a PNG, a CMYK and a grayscale image
under .JPEG names, as the real train set has): counts, labels, re-encoding, corrupt images, clear errors."""
from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from data_prep import demo_imagenet, imagenet
from mlperf_keras.inputs.manifest import DataError, read_manifest, verify_files
from tests.conftest import example_features, run_cli

CLASSES, PER_CLASS, VAL = 4, 6, 9


def read_records(data_dir, split):
    return [{"name": feature["image/filename"].bytes_list.value[0].decode(),
             "label": feature["image/class/label"].int64_list.value[0],
             "synset": feature["image/class/synset"].bytes_list.value[0].decode(),
             "height": feature["image/height"].int64_list.value[0],
             "width": feature["image/width"].int64_list.value[0],
             "jpeg": feature["image/encoded"].bytes_list.value[0]}
            for feature in example_features(data_dir, "resnet", split)]


def raw_member(raw, name):
    """The bytes of a train image as it is in the official tar."""
    with tarfile.open(os.path.join(raw, imagenet.TRAIN_TAR)) as outer:
        with tarfile.open(fileobj=outer.extractfile(name.split("_")[0] + ".tar")) as inner:
            return inner.extractfile(name).read()


@pytest.fixture(scope="module")
def devkit_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    info = demo_imagenet.write_raw(str(root / "raw"), num_classes=CLASSES, train_per_class=PER_CLASS,
                                   val_images=VAL, labels="devkit", seed=3)
    manifest = imagenet.prepare(str(root / "raw"), str(root / "out"), train_shards=4, val_shards=2, num_workers=0,
                                log=lambda _: None)
    return str(root / "raw"), str(root / "out"), info, manifest


def test_counts_labels_and_layout(devkit_data):
    raw, out, info, manifest = devkit_data
    assert manifest["counts"] == {"num_classes": CLASSES, "train_images": CLASSES * PER_CLASS, "val_images": VAL,
                                  "train_skipped": 0, "val_skipped": 0, "reencoded": 2}
    names = sorted(f["name"] for f in manifest["files"])
    assert names == ["synsets.txt"] + [f"train-0000{i}-of-00004" for i in range(4)] + \
        ["validation-00000-of-00002", "validation-00001-of-00002"]
    assert sum(f["rows"] for f in manifest["files"] if f["split"] == "train") == CLASSES * PER_CLASS
    verify_files(out, manifest, progress=None)
    wnids = sorted(info["wnids"])
    assert open(os.path.join(out, "synsets.txt")).read().split() == wnids
    assert info["wnids"] != wnids  # the generator's class order is not sorted: labels must come from sorting

    train = read_records(out, "train")
    assert len(train) == CLASSES * PER_CLASS and len({r["name"] for r in train}) == len(train)
    for r in train:  # label = index of the image's class tar in the sorted wnid list
        assert r["synset"] == r["name"].split("_")[0] and r["label"] == wnids.index(r["synset"])
    # shuffled with a fixed seed: the first shard mixes classes
    assert len({r["label"] for r in train[:PER_CLASS]}) > 1

    val = read_records(out, "validation")
    assert [r["name"] for r in val] == [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(1, VAL + 1)]
    assert [r["synset"] for r in val] == info["val_wnids"]  # devkit ids mapped through meta.mat
    assert [r["label"] for r in val] == [wnids.index(w) for w in info["val_wnids"]]


def test_png_and_cmyk_come_out_as_rgb_jpeg_others_unchanged(devkit_data):
    raw, out, info, manifest = devkit_data
    records = {r["name"]: r for r in read_records(out, "train")}
    assert {(r["name"], r["kind"]) for r in manifest["reencoded"]} == {(info["png"][0], "png"),
                                                                       (info["cmyk"][0], "cmyk")}
    for name in info["png"] + info["cmyk"]:
        original = Image.open(io.BytesIO(raw_member(raw, name)))
        assert original.format == "PNG" or original.mode == "CMYK"
        converted = Image.open(io.BytesIO(records[name]["jpeg"]))
        assert (converted.format, converted.mode) == ("JPEG", "RGB")
        decoded = tf.io.decode_jpeg(records[name]["jpeg"], channels=3).numpy()
        expected = np.asarray(original.convert("RGB"), np.float32)
        assert decoded.shape == expected.shape == (records[name]["height"], records[name]["width"], 3)
        # The same picture, not a colour swap: 8x8 block means agree (chroma subsampling blurs single pixels).
        blocks = lambda a: a.reshape(a.shape[0] // 8, 8, a.shape[1] // 8, 8, 3).mean(axis=(1, 3))
        assert np.abs(blocks(decoded.astype(np.float32)) - blocks(expected)).max() < 6
    gray = info["gray"][0]  # grayscale JPEGs are not re-encoded (the reference keeps them; TF decodes to RGB)
    assert records[gray]["jpeg"] == raw_member(raw, gray)
    plain = next(n for n in records if n not in info["png"] + info["cmyk"] + info["gray"])
    assert records[plain]["jpeg"] == raw_member(raw, plain)


def test_one_wnid_per_line_labels_give_the_same_dataset(devkit_data, tmp_path):
    raw, out, info, _ = devkit_data
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{w}\n" for w in info["val_wnids"]))
    imagenet.prepare(raw, str(tmp_path / "out"), train_shards=4, val_shards=2, num_workers=0,
                     val_labels=str(labels), log=lambda _: None)
    assert [(r["name"], r["label"]) for r in read_records(str(tmp_path / "out"), "validation")] == \
        [(r["name"], r["label"]) for r in read_records(out, "validation")]
    # deterministic: the same train order and bytes as the first preparation
    assert [r["name"] for r in read_records(str(tmp_path / "out"), "train")] == \
        [r["name"] for r in read_records(out, "train")]


@pytest.mark.parametrize("split", ["train", "val"])
def test_corrupt_image_fails_by_name_or_is_skipped_and_listed(tmp_path, split):
    raw = tmp_path / "raw"
    info = demo_imagenet.write_raw(str(raw), num_classes=3, train_per_class=4, val_images=5, oddities=False,
                                   corrupt=split, seed=5)
    (bad,) = info["truncated"]
    with pytest.raises(DataError, match=f"{bad}: corrupt image .*--on_corrupt=skip"):
        imagenet.prepare(str(raw), str(tmp_path / "failed"), train_shards=2, val_shards=1, num_workers=0,
                         log=lambda _: None)
    assert os.listdir(tmp_path / "failed") == []  # nothing half-written: no shard, no manifest, no staging

    messages = []
    manifest = imagenet.prepare(str(raw), str(tmp_path / "out"), train_shards=2, val_shards=1, num_workers=0,
                                on_corrupt="skip", log=messages.append)
    counts = manifest["counts"]
    assert (counts["train_images"], counts["val_images"]) == ((11, 5) if split == "train" else (12, 4))
    assert counts[f"{'train' if split == 'train' else 'val'}_skipped"] == 1
    assert [s["name"] for s in manifest["skipped"]] == [bad] and "truncated" in manifest["skipped"][0]["reason"]
    assert any(bad in m for m in messages)
    assert bad not in {r["name"] for r in read_records(str(tmp_path / "out"), "train" if split == "train"
                                                         else "validation")}


def test_parallel_workers_from_the_command_line_match_in_process(devkit_data, tmp_path):
    raw, out, _, _ = devkit_data
    proc = run_cli("data_prep.imagenet", f"--raw_dir={raw}", f"--output_dir={tmp_path / 'out'}", "--train_shards=4",
                   "--val_shards=2", "--num_workers=2", "--allow_subset", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = json.load(open(tmp_path / "out" / "manifest.json"))
    theirs = json.load(open(os.path.join(out, "manifest.json")))
    assert ours["counts"] == theirs["counts"]
    assert [(r["name"], r["jpeg"]) for r in read_records(str(tmp_path / "out"), "train")] == \
        [(r["name"], r["jpeg"]) for r in read_records(out, "train")]
    assert [(f["name"], f["sha256"]) for f in ours["files"]] == [(f["name"], f["sha256"]) for f in theirs["files"]]


def _official_tar_with(path, members):
    with tarfile.open(path, "w") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("breakage, message", [
    ("no_train", "ILSVRC2012_img_train.tar: missing"),
    ("flat_train", "member 'n01440764_1.JPEG' is not a per-class tar <wnid>.tar"),
    ("not_a_tar", "ILSVRC2012_img_val.tar: not a readable"),
    ("nested_val", "member 'val/x.JPEG' is not a validation image"),
    ("bad_label_line", "ILSVRC2012_validation_labels.txt:2: 'cat' is not a wnid"),
    ("unknown_wnid", "wnid n12345678 of ILSVRC2012_val_00000003.JPEG is not a class"),
    ("no_labels", "no validation labels"),
])
def test_bad_raw_input_is_one_clear_error(tmp_path, breakage, message, monkeypatch):
    raw = tmp_path / "raw"
    info = demo_imagenet.write_raw(str(raw), num_classes=2, train_per_class=2, val_images=3, oddities=False, seed=1)
    labels = raw / "ILSVRC2012_validation_labels.txt"
    if breakage == "no_train":
        os.remove(raw / imagenet.TRAIN_TAR)
    elif breakage == "flat_train":
        _official_tar_with(raw / imagenet.TRAIN_TAR, [("n01440764_1.JPEG", b"x")])
    elif breakage == "not_a_tar":
        (raw / imagenet.VAL_TAR).write_bytes(b"not a tar at all" * 100)
    elif breakage == "nested_val":
        _official_tar_with(raw / imagenet.VAL_TAR, [("val/x.JPEG", b"x")])
    elif breakage == "bad_label_line":
        labels.write_text(f"{info['val_wnids'][0]}\ncat\n")
    elif breakage == "unknown_wnid":
        labels.write_text("".join(f"{w}\n" for w in info["val_wnids"][:2]) + "n12345678\n")
    elif breakage == "no_labels":
        os.remove(labels)
        monkeypatch.setattr(imagenet, "_tfds_file", lambda name: None)
    if breakage in ("no_train", "flat_train", "not_a_tar"):  # also through the command line: one line, exit 2
        proc = run_cli("data_prep.imagenet", f"--raw_dir={raw}", f"--output_dir={tmp_path / 'out'}")
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        imagenet.prepare(str(raw), str(tmp_path / "out2"), num_workers=0, log=lambda _: None)


def test_tensorflow_datasets_lists_are_found_without_importing_it():
    pytest.importorskip("tensorflow_datasets")
    png, cmyk = imagenet.known_reencoded_files()
    assert png == {"n02105855_2933.JPEG"} and len(cmyk) == 22
    labels, source = imagenet.load_val_labels("/nonexistent")
    assert len(labels) == 50_000 and "tensorflow-datasets" in source and labels[0] == "n01751748"
