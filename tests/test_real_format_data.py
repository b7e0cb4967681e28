"""The demo writers' options benchmarks/real_format_data.py uses (pictures and text supplied by the caller), and the
helper's own photo crops and sentence lengths. Fast: raw files only, no data_prep run."""
from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest

from data_prep import demo_coco, demo_imagenet, wmt, wmt_gnmt


def _flat(rng, width, height):
    return np.full((height, width, 3), 77, np.uint8)


def test_coco_photos_and_size_function(tmp_path):
    from PIL import Image

    sizes = iter([(40, 30), (30, 40), (40, 32), (36, 40)])
    demo_coco.write_raw(str(tmp_path), num_train=3, num_val=1, seed=1, size=lambda rng: next(sizes), photos=_flat)
    with open(tmp_path / "annotations" / "instances_train2017.json") as f:
        document = json.load(f)
    assert [(i["width"], i["height"]) for i in document["images"]] == [(40, 30), (30, 40), (40, 32)]
    # The objects are annotated on the picture, not painted in: every pixel is still the picture's (JPEG aside).
    for image in document["images"]:
        if image["id"] in {a["image_id"] for a in document["annotations"] if not a["iscrowd"]}:
            pixels = np.asarray(Image.open(tmp_path / "train2017" / image["file_name"]).convert("RGB"), np.int16)
            assert np.abs(pixels - 77).max() <= 2
    assert all(a["bbox"][2] > 0 and a["bbox"][3] > 0 for a in document["annotations"])


def test_imagenet_image_fn(tmp_path):
    calls = []

    def image_fn(rng, label):
        calls.append(label)
        return np.full((20, 30, 3), 10 * label, np.uint8)

    info = demo_imagenet.write_raw(str(tmp_path), num_classes=2, train_per_class=2, val_images=3, oddities=False,
                                   image_fn=image_fn)
    assert info["train_images"] == 4 and len(calls) == 7
    from PIL import Image

    with tarfile.open(tmp_path / "ILSVRC2012_img_val.tar") as archive:
        member = archive.getmembers()[0]
        assert Image.open(io.BytesIO(archive.extractfile(member).read())).size == (30, 20)


@pytest.mark.parametrize("writer", ["wmt", "gnmt"])
def test_wmt_words_weights_and_lengths(tmp_path, writer):
    words = ["alpha", "beta", "gamma"]
    kwargs = dict(num_pairs=30, num_test=5, seed=2, words=words, word_weights=np.array([0.0, 0.0, 1.0]),
                  sentence_words=lambda rng: 7)
    if writer == "wmt":
        wmt.write_demo_raw(str(tmp_path), task="dictionary", **kwargs)
    else:
        wmt_gnmt.write_demo_raw(str(tmp_path), **kwargs)
    english = [os.path.join(d, f) for d, _, files in os.walk(tmp_path) for f in files
               if f.endswith(".en") and "newstest" not in f]
    lines = [line.split() for path in english for line in open(path, encoding="utf-8")]
    assert len(lines) == 30
    assert all(line[:6] == ["gamma"] * 6 and line[6].startswith("gamma") for line in lines)


def test_helper_photo_crops_and_sentence_lengths():
    pytest.importorskip("skimage")
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("real_format_data",
                                                  os.path.join(root, "benchmarks", "real_format_data.py"))
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    rng = np.random.default_rng(0)
    pictures = helper.photos()
    assert len(pictures) >= 5 and all(p.ndim == 3 and p.shape[2] == 3 for p in pictures)
    crop = helper.photo_crop(rng, pictures)
    assert crop.dtype == np.uint8 and max(crop.shape[:2]) == 500
    assert helper.photo_crop(rng, pictures, 64, 48).shape == (48, 64, 3)
    assert all(max(helper.coco_size(rng)) == 640 for _ in range(20))
    args = helper.text_args(0, vocabulary=2000)
    assert len(set(args["words"])) == 2000 and np.isclose(args["word_weights"].sum(), 1.0)
    lengths = [args["sentence_words"](rng) for _ in range(4000)]
    assert 19 < np.mean(lengths) < 23 and min(lengths) >= 1
