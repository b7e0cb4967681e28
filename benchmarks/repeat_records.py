"""Benchmark helper: a prepared dataset whose training split is the original's files N times over (symbolic links),
so that an epoch holds many batches.

    python benchmarks/repeat_records.py --data_dir=.cache/realdata/imagenet --copies=30 --output_dir=/tmp/imagenet_x30

Why: the small real-format datasets of benchmarks/real_format_data.py (what the device tool can carry) give ResNet
and SSD one or two batches an epoch at benchmarks/gpu_suite.sh's batch sizes, so a benchmark's 25 batches cross an
epoch boundary every batch or two. At each boundary the input pipeline starts over (its shuffle buffer fills, its
first batch is planned and decoded) while the GPU waits: a cost a real ImageNet epoch (5,004 batches of 256) pays
once. Repeating the training files measures the pipeline inside an epoch; the records, their JPEGs and the work per
image are the originals'. On an H100 (benchmarks/RESULTS.md, 2026-12-07) ResNet-50 fed at 0.671 of its resident step
inside epochs of 35 batches against 0.712-0.717 on the 2-batch epochs: the boundaries were not what held it back.

The output folder holds links to every file of the original (the validation split and metadata unchanged) plus
links named as further training shards, and a manifest listing them with the original's sizes and checksums, the
counts whose names start with "train_" multiplied by N, and "repeated": {"copies": N, "from": data_dir}. The
training order is the closed path's (each record N times an epoch). Not a dataset to train on or to report a
result from.
"""
from __future__ import annotations

import json
import os
import re
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlperf_keras.inputs import manifest as manifests  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "A prepared dataset (a folder a data_prep command wrote).")
flags.DEFINE_integer("copies", 10, "How many times the training files are listed (>= 1).")
flags.DEFINE_string("output_dir", None, "Where to write the links and the manifest (created; must not exist).")
flags.mark_flags_as_required(["data_dir", "output_dir"])

_SHARD = re.compile(r"^(?P<stem>.*-)(?P<index>\d+)-of-\d+(?P<suffix>.*)$")


def repeated_manifest(manifest: dict, copies: int, source: str) -> tuple[dict, list[tuple[str, str]]]:
    """The manifest of the repeated dataset and its (link name, original name) pairs."""
    train = [f for f in manifest["files"] if f.get("split") == "train"]
    if not train:
        raise manifests.DataError(f"{source}: the manifest lists no training files")
    shards = [_SHARD.match(entry["name"]) for entry in train]
    for entry, match in zip(train, shards):
        if match is None:
            raise manifests.DataError(f"{source}: training file {entry['name']!r} is not named as a shard "
                                      f"(name-NNNNN-of-NNNNN)")
    total = len(train) * copies
    links = [(entry["name"], entry["name"]) for entry in manifest["files"] if entry.get("split") != "train"]
    files = [dict(entry) for entry in manifest["files"] if entry.get("split") != "train"]
    for copy in range(copies):
        for index, (entry, match) in enumerate(zip(train, shards)):
            width = len(match["index"])
            name = f"{match['stem']}{copy * len(train) + index:0{width}d}-of-{total:0{width}d}{match['suffix']}"
            links.append((name, entry["name"]))
            files.append({**entry, "name": name})
    counts = {k: v * copies if k.startswith("train_") and isinstance(v, int) else v
              for k, v in manifest["counts"].items()}
    return {**manifest, "files": files, "counts": counts,
            "repeated": {"copies": copies, "from": os.path.abspath(source)}}, links


def main(argv):
    del argv
    if FLAGS.copies < 1:
        raise app.UsageError("--copies must be at least 1")
    manifest_path = os.path.join(FLAGS.data_dir, manifests.MANIFEST_NAME)
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        manifests.check_manifest(manifest, manifest_path)
        out, links = repeated_manifest(manifest, FLAGS.copies, FLAGS.data_dir)
    except (OSError, json.JSONDecodeError, manifests.DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if os.path.exists(FLAGS.output_dir):
        print(f"error: {FLAGS.output_dir} exists (give a new folder)", file=sys.stderr)
        return 2
    os.makedirs(FLAGS.output_dir)
    source = os.path.abspath(FLAGS.data_dir)
    for name, original in links:
        os.symlink(os.path.join(source, original), os.path.join(FLAGS.output_dir, name))
    with open(os.path.join(FLAGS.output_dir, manifests.MANIFEST_NAME), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    train = sum(1 for f in out["files"] if f.get("split") == "train")
    rows = sum(int(f.get("rows") or 0) for f in out["files"] if f.get("split") == "train")
    print(f"{FLAGS.output_dir}: {train} training files ({FLAGS.copies} x the {train // FLAGS.copies} of "
          f"{FLAGS.data_dir}), {rows:,} training records, as links")
    return 0


if __name__ == "__main__":
    app.run(main)
