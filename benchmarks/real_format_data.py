"""Benchmark helper: small datasets in the official raw formats, made from real photos and WMT-like text, prepared
by the project's own data_prep commands, for `python -m mlperf_keras.benchmark --data_dir=...` on a machine without
TensorFlow (the prepared records are read there without it; preparing needs TensorFlow, so it runs here).

    python benchmarks/real_format_data.py [--out=.cache/realdata] [--only=imagenet,coco,wmt17,wmt16,movielens]
                                          [--raw_dir=/tmp/real_format_raw] [--keep_raw]

Writes <out>/<dataset> for each dataset (the raw files go to --raw_dir and are removed afterwards unless
--keep_raw), printing progress, what each holds and the size of each prepared folder and of all of them (also in
<out>/summary.json). With the defaults (sizes as measured when this was written):
- imagenet (ResNet), 300 train images in 100 classes + 16 validation, 19.9 MiB: data_prep.demo_imagenet's official
  tar layout (per-class tars inside ILSVRC2012_img_train.tar, flat ILSVRC2012_img_val.tar, a one-wnid-per-line
  label file) holding JPEGs of ImageNet's kind: random crops (70-100% of each side, flipped half the time) of the
  colour photos scikit-image ships (skimage.data: astronaut, coffee, chelsea, rocket, the stereo motorcycle pair,
  immunohistochemistry, the Hubble deep field, retina) resized to a long side of 500 (bicubic), with a faint grey
  grain (sigma 4 of 255, as a camera's) that brings the files nearer ImageNet's (mean 66 KB here; ImageNet's
  train set averages about 110 KB), quality 90; then `python -m data_prep.imagenet`;
- coco (SSD, Mask R-CNN), 136 train images (135 with objects) + 8 validation, 12.5 MiB: data_prep.demo_coco's COCO
  2017 layout (train2017/, val2017/, instances JSON listing the 80 categories) with photos instead of drawn
  shapes: crops of the same photos at COCO's sizes (long side 640, short side 480 or 360-479, three in four
  landscape), same grain and quality (mean 88 KB; COCO's about 160 KB); 1-16 objects an image (6.9 on average;
  COCO's 7.3), each 5-45% of each side, not overlapping, annotated with polygons (rectangles, 24-point ellipses)
  and boxes, plus a crowd RLE region, an image without objects and a grayscale one in each split, as demo_coco
  writes them; then `python -m data_prep.coco`;
- wmt17 (Transformer), 12,000 pairs, 2.0 MiB: data_prep.wmt.write_demo_raw's WMT17 archives (europarl,
  commoncrawl, news commentary .tgz; newstest2014 SGML in dev.tgz) of sentences of WMT's lengths: log-normal word
  counts (median 18, mean 21 words), words drawn by a Zipf law (exponent 1) from 40,000 made-up English words
  (frequent words short), German the same sentence through a fixed dictionary; then `python -m data_prep.wmt`
  (the reference's subword vocabulary at min_count 6: about 25,600 entries; 29 tokens a side with EOS);
- wmt16 (GNMT), the same kind of text, 2.0 MiB: data_prep.wmt_gnmt.write_demo_raw's WMT16 layout; then
  `python -m data_prep.wmt --workload=gnmt` (Moses tokenisation, joint BPE of 32,000 merges, pairs over 50 tokens
  dropped as the reference drops them: about 10,900 pairs left, 25 tokens a side with <s> and </s>, about 24,200
  vocabulary entries);
- movielens (NCF), 4.2 MiB: data_prep.demo_movielens's ml-20m/ratings.csv (users with genre tastes, Zipf item
  popularity) of 5,000 users with about 110 ratings each (ml-20m: 144) over ml-20m's 26,744 items, 552,952
  ratings; then `python -m data_prep.movielens` (547,381 training positives).
Each data_prep command runs in its own process with --allow_subset (the counts are not the official ones).

The sizes keep all five under 45 MiB (what the device tool carries beside the working tree) and give every workload
at least two batches an epoch at benchmarks/gpu_suite.sh's batch: steps per epoch NCF 3 (1,048,576), ResNet 2
(256), SSD 2 (128), Mask R-CNN 17 (8), the Transformer 69 (8,192 tokens), GNMT 40 (256). benchmark.py chains
epochs (_stream), so --steps may exceed an epoch; but an epoch of a few batches restarts its pipeline (file order,
shuffle buffer, NCF's epoch build) more often per batch than the full dataset does, which the fed figures include.
The models take their sizes from the manifests (ResNet's 100 classes, NCF's 4,967 users, the vocabularies above):
near the real ones, not equal.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DATASETS = ("imagenet", "coco", "wmt17", "wmt16", "movielens")
GRAIN = 4.0          # grey noise sigma (of 255) over every photo crop: file sizes like camera photos
JPEG_QUALITY = 90    # both writers encode at 90 (demo_imagenet._encode, demo_coco.JPEG_QUALITY)
MiB = 1 << 20


# ---- photos ----

def photos() -> list[np.ndarray]:
    """The colour photographs scikit-image ships (uint8 HxWx3)."""
    from skimage import data

    out = [np.asarray(getattr(data, name)())[..., :3] for name in
           ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina")]
    left, right, _ = data.stereo_motorcycle()
    return [np.ascontiguousarray(p, dtype=np.uint8) for p in out + [left, right]]


def photo_crop(rng, pictures, width: int | None = None, height: int | None = None, long_side: int = 500,
               min_fraction: float = 0.7) -> np.ndarray:
    """A random crop of a random photo (flipped half the time), resized (bicubic) to width x height, or without
    them to a long side of long_side at the crop's own aspect ratio; GRAIN grey noise on top."""
    from PIL import Image

    photo = pictures[int(rng.integers(len(pictures)))]
    h, w = photo.shape[:2]
    if width is None:
        ch, cw = int(h * rng.uniform(min_fraction, 1.0)), int(w * rng.uniform(min_fraction, 1.0))
        scale = long_side / max(ch, cw)
        width, height = max(1, round(cw * scale)), max(1, round(ch * scale))
    else:   # the target's aspect ratio: the largest such window, then min_fraction..1 of it
        fit = min(h / height, w / width) * rng.uniform(min_fraction, 1.0)
        ch, cw = max(1, int(height * fit)), max(1, int(width * fit))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    crop = Image.fromarray(photo[y:y + ch, x:x + cw]).resize((width, height), Image.BICUBIC)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    pixels = np.asarray(crop, np.float32) + rng.normal(0, GRAIN, (height, width, 1)).astype(np.float32)
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def coco_size(rng) -> tuple[int, int]:
    """(width, height) as COCO's: long side 640, short side 480 (half the images) or 360-479; 3 in 4 landscape."""
    short = 480 if rng.random() < 0.5 else int(rng.integers(360, 480))
    return (640, short) if rng.random() < 0.75 else (short, 640)


# ---- text ----

def made_up_words(rng, count: int) -> list[str]:
    """count distinct words of 1-4 syllables, shorter ones first (the most frequent under a Zipf law)."""
    onsets = ["", "b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "st", "tr", "sch"]
    vowels = ["a", "e", "i", "o", "u", "ei", "au"]
    codas = ["", "", "", "n", "r", "s", "t", "l"]
    words, seen = [], set()
    while len(words) < count:
        syllables = 1 + min(3, int(rng.geometric(0.45)) - 1 + len(words) * 3 // count)
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def text_args(seed: int, vocabulary: int = 40_000) -> dict:
    """The WMT writers' words, their Zipf weights and WMT-like sentence lengths."""
    rng = np.random.default_rng(seed)
    words = made_up_words(rng, vocabulary)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    return {"words": words, "word_weights": weights / weights.sum(),
            "sentence_words": lambda r: int(np.clip(np.rint(r.lognormal(np.log(18.0), 0.55)), 1, 150))}


# ---- datasets ----

def run(command: list[str]) -> None:
    print("  $", " ".join(command), flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TQDM_DISABLE="1")   # no progress bar for learn_bpe's merges
    subprocess.run([sys.executable, "-m", *command], cwd=ROOT, env=env, check=True)


def make_imagenet(raw: str, out: str, pictures, classes: int, per_class: int, val: int):
    from data_prep import demo_imagenet

    demo_imagenet.write_raw(raw, num_classes=classes, train_per_class=per_class, val_images=val, seed=2012,
                            oddities=False, image_fn=lambda rng, label: photo_crop(rng, pictures))
    with tarfile.open(os.path.join(raw, "ILSVRC2012_img_train.tar")) as outer:
        sizes = []
        for member in outer.getmembers():
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                sizes += [m.size for m in inner.getmembers()]
    print(f"  raw: {len(sizes)} train JPEGs in {classes} classes, mean {np.mean(sizes) / 1e3:.1f} KB "
          f"(min {min(sizes) / 1e3:.0f}, max {max(sizes) / 1e3:.0f}), {val} validation", flush=True)
    run(["data_prep.imagenet", f"--raw_dir={raw}", f"--output_dir={out}", "--train_shards=8", "--val_shards=1",
         "--allow_subset", "--overwrite"])
    return {"train_images": len(sizes), "classes": classes, "val_images": val,
            "mean_jpeg_bytes": float(np.mean(sizes))}


def make_coco(raw: str, out: str, pictures, train: int, val: int, max_objects: int):
    from data_prep import demo_coco

    demo_coco.write_raw(raw, num_train=train, num_val=val, size=coco_size, seed=2017, max_objects=max_objects,
                        object_size=(0.05, 0.45), photos=lambda rng, w, h: photo_crop(rng, pictures, w, h))
    with open(os.path.join(raw, "annotations", "instances_train2017.json")) as f:
        document = json.load(f)
    sizes = [os.path.getsize(os.path.join(raw, "train2017", image["file_name"])) for image in document["images"]]
    objects = len(document["annotations"])
    print(f"  raw: {train} train images, mean {np.mean(sizes) / 1e3:.1f} KB, {objects} objects "
          f"({objects / train:.1f} per image), {val} validation", flush=True)
    run(["data_prep.coco", f"--raw_dir={raw}", f"--output_dir={out}", "--train_shards=4", "--val_shards=1",
         "--allow_subset", "--overwrite"])
    return {"train_images": train, "val_images": val, "mean_jpeg_bytes": float(np.mean(sizes)),
            "objects_per_image": objects / train}


def _raw_words(raw: str, suffix: str) -> list[int]:
    counts = []
    for folder, _, files in os.walk(raw):
        for name in files:
            if name.endswith(suffix) and "newstest" not in name:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    counts += [len(line.split()) for line in f]
    return counts


def _token_stats(out: str) -> dict:
    """Mean tokens per side over the prepared training records (read without TensorFlow), and pair counts."""
    from mlperf_keras.inputs import record_reader

    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    lengths = {"inputs": [], "targets": []}
    for entry in manifest["files"]:
        if entry.get("split") != "train":
            continue
        for record in record_reader.iter_records(os.path.join(out, entry["name"])):
            example = record_reader.parse_example(record)
            for key in lengths:
                lengths[key].append(len(example[key]))
    counts = manifest["counts"]
    return {"train_pairs": len(lengths["inputs"]), "vocab_size": counts.get("vocab_size"),
            "mean_source_tokens": float(np.mean(lengths["inputs"])),
            "mean_target_tokens": float(np.mean(lengths["targets"]))}


def make_wmt17(raw: str, out: str, pairs: int, test: int):
    from data_prep import wmt

    wmt.write_demo_raw(raw, num_pairs=pairs, num_test=test, task="dictionary", seed=2017, archives=True,
                       **text_args(17))
    run(["data_prep.wmt", f"--raw_dir={raw}", f"--output_dir={out}", "--num_shards=4", "--allow_subset",
         "--overwrite"])
    return {"raw_pairs": pairs, "test_sentences": test, **_token_stats(out)}


def make_wmt16(raw: str, out: str, pairs: int, test: int):
    from data_prep import wmt_gnmt

    wmt_gnmt.write_demo_raw(raw, num_pairs=pairs, num_test=test, seed=2016, **text_args(16))
    words = _raw_words(raw, ".en")
    print(f"  raw: {len(words)} pairs, English {np.mean(words):.1f} words a sentence", flush=True)
    run(["data_prep.wmt", "--workload=gnmt", f"--raw_dir={raw}", f"--output_dir={out}", "--num_shards=4",
         "--allow_subset", "--overwrite"])
    return {"raw_pairs": pairs, "raw_mean_english_words": float(np.mean(words)), "test_sentences": test,
            **_token_stats(out)}


def make_movielens(raw: str, out: str, users: int, items: int, extra: float):
    from data_prep import demo_movielens

    ratings = demo_movielens.write_ratings_csv(os.path.join(raw, "ml-20m", "ratings.csv"), num_users=users,
                                               num_items=items, mean_extra_per_user=extra, seed=2015)
    print(f"  raw: {ratings:,} ratings of {users:,} users over {items:,} items", flush=True)
    run(["data_prep.movielens", f"--raw_dir={raw}", f"--output_dir={out}", "--num_shards=4", "--allow_subset",
         "--overwrite"])
    with open(os.path.join(out, "manifest.json")) as f:
        counts = json.load(f)["counts"]
    return {"ratings": ratings, **{k: counts[k] for k in ("num_users", "num_items", "train_positives")},
            "steps_per_epoch_at_1048576": -(-counts["train_positives"] * 5 // 1_048_576)}


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, ".cache", "realdata"))
    parser.add_argument("--only", default=",".join(DATASETS), help="comma-separated, of: " + ", ".join(DATASETS))
    parser.add_argument("--raw_dir", default="/tmp/real_format_raw")
    parser.add_argument("--keep_raw", action="store_true")
    parser.add_argument("--imagenet_classes", type=int, default=100)
    parser.add_argument("--imagenet_per_class", type=int, default=3)
    parser.add_argument("--coco_train", type=int, default=136, help="train images (one has no objects)")
    parser.add_argument("--coco_max_objects", type=int, default=16)
    parser.add_argument("--wmt_pairs", type=int, default=12_000)
    parser.add_argument("--ml_users", type=int, default=5_000)
    parser.add_argument("--ml_mean_extra", type=float, default=120.0, help="ratings per user beyond the 20 needed")
    args = parser.parse_args()
    chosen = [d for d in args.only.split(",") if d]
    unknown = set(chosen) - set(DATASETS)
    if unknown:
        parser.error(f"unknown datasets {sorted(unknown)}; choose from {', '.join(DATASETS)}")

    pictures = photos() if {"imagenet", "coco"} & set(chosen) else None
    makers = {
        "imagenet": lambda raw, out: make_imagenet(raw, out, pictures, args.imagenet_classes, args.imagenet_per_class,
                                                   val=16),
        "coco": lambda raw, out: make_coco(raw, out, pictures, args.coco_train, val=8,
                                           max_objects=args.coco_max_objects),
        "wmt17": lambda raw, out: make_wmt17(raw, out, args.wmt_pairs, test=100),
        "wmt16": lambda raw, out: make_wmt16(raw, out, args.wmt_pairs, test=100),
        "movielens": lambda raw, out: make_movielens(raw, out, args.ml_users, 26_744, args.ml_mean_extra),
    }
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    for name in chosen:
        start = time.time()
        raw, out = os.path.join(args.raw_dir, name), os.path.join(args.out, name)
        shutil.rmtree(raw, ignore_errors=True)
        print(f"{name}: writing raw data into {raw}", flush=True)
        info = makers[name](raw, out)
        info["prepared_bytes"] = folder_bytes(out)
        summary[name] = info
        print(f"{name}: {info['prepared_bytes'] / MiB:.2f} MiB in {out} ({time.time() - start:.0f} s): "
              f"{json.dumps(info)}", flush=True)
        if not args.keep_raw:
            shutil.rmtree(raw, ignore_errors=True)
    path = os.path.join(args.out, "summary.json")   # what each dataset holds, kept across --only runs
    if os.path.exists(path):
        with open(path) as f:
            summary = {**json.load(f), **summary}
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
    parts = ", ".join(f"{d} {folder_bytes(os.path.join(args.out, d)) / MiB:.2f}" for d in sorted(os.listdir(args.out))
                      if os.path.isdir(os.path.join(args.out, d)))
    print(f"all of {args.out}: {folder_bytes(args.out) / MiB:.2f} MiB ({parts})")


if __name__ == "__main__":
    main()
