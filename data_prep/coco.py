"""python -m data_prep.coco --raw_dir=R --output_dir=D: COCO 2017 detection -> sharded TFRecords + manifest.

R holds the official files as distributed (annotations_trainval2017.zip, train2017.zip, val2017.zip, extracted):
  annotations/instances_train2017.json   annotations/instances_val2017.json
  train2017/<12-digit id>.jpg            val2017/<12-digit id>.jpg

One tf.train.Example per image of the annotation files (images without annotations included: Mask R-CNN trains on
them; the SSD input pipeline drops records with no objects, as the reference drops such images):
  image/encoded (the file's JPEG bytes), image/filename, image/id (COCO image id), image/height, image/width (from
  the JSON, checked against the file), image/object/bbox/{xmin,ymin,xmax,ymax} (the COCO [x, y, w, h] pixel box as
  left/top/right/bottom divided by the image width/height, clipped to [0, 1]), image/object/class/label (contiguous
  1..80), image/object/is_crowd, image/object/area (COCO area), image/object/segmentation (the COCO segmentation,
  polygons or RLE, as compact JSON); Mask R-CNN's targets in numbers the input graph reads: image/object/polygon/
  parts (polygons per object: 0 for a crowd object), image/object/polygon/vertices (vertices per polygon, objects
  in order), image/object/polygon/xy (x, y pixel pairs of the original image, polygons in order). Polygons with
  fewer than 3 vertices are left out of these (pycocotools' frPyObjects would read a 2-vertex list as a box); a
  non-crowd object with an RLE segmentation stops the run (the reference's Polygons class cannot read one). The
  manifest's counts give max_object_vertices (the most vertices of one object, over both splits).
Labels: the COCO category ids (1..90 with gaps) in sorted order become 1..80, 0 being background; the manifest's
"categories" lists {"id", "name", "label"} to map back (the evaluator reports COCO ids).

As the reference (mlcommons/training single_stage_detector/ssd/utils.py, COCODetection) with these differences:
- the reference numbers categories in the order the JSON lists them; here in sorted id order (the official files
  list them sorted, so the labels are the same), so a reordered file cannot change the labels;
- boxes are clipped to the image and a box with zero (or negative) width or height after clipping (and after
  rounding to float32) is dropped and counted in the manifest: the reference keeps it, and the SSD box encoding
  then takes log(0) of its width or height (an infinite regression target). The evaluator uses the copied,
  unchanged instances_val2017.json, so the ground truth it scores against is the official one;
- crowd objects (iscrowd=1, RLE) are written with is_crowd=1; the reference trains on them like any object, and the
  SSD pipeline decides (records carry the flag);
- images are written byte for byte, except those TensorFlow cannot decode as a 3-channel JPEG (CMYK JPEGs, PNG
  content under a .jpg name), which become RGB JPEGs at quality 100 and are listed in the manifest (the reference
  decodes every file with PIL's convert("RGB") at each step, which handles them). Grayscale JPEGs are kept:
  tf.io.decode_jpeg(channels=3) gives 3 channels. Every image is decoded once (at 1/8 scale, which still reads all
  of its data) to find corrupt files, and its size is checked against the JSON's width and height.
Training images are shuffled with a fixed seed (so every shard mixes images); validation images keep their order
in the annotation file. Output is deterministic: the same raw files give byte-identical shards.

Bad input stops the run with one line naming the file (exit status 2) and leaves --output_dir as it was: a missing
or malformed annotation file, one without "images"/"annotations"/"categories", an annotation naming an unknown image
or category, a missing, corrupt or wrongly sized image. All annotation checks and the presence of every image file
run before any image is converted. Worker processes (--num_workers, default: every core) read and check images; the
main process writes records in a fixed order, into a staging folder moved into place with the manifest last.
"""
from __future__ import annotations

import collections
import importlib
import json
import math
import multiprocessing
import os
import random
import shutil
import time

import numpy as np
from absl import flags

from data_prep import cli, sharded
from data_prep.imagenet import JPEG_QUALITY, BadImage, check_image
from mlperf_keras import entry
from mlperf_keras.config import counted
from mlperf_keras.inputs.manifest import DataError, StagedOutput

SPLITS = (("train", "train2017", "instances_train2017.json"), ("validation", "val2017", "instances_val2017.json"))
VAL_ANNOTATIONS = "instances_val2017.json"
SHUFFLE_SEED = 12345  # as data_prep.imagenet; the reference reads images in JSON order through a shuffling loader
WORKLOADS = ["ssd", "maskrcnn"]  # COCO 2017 serves both

# One image to convert: where it is, what the JSON says of it.
Item = collections.namedtuple("Item", "file_name image_id width height")
# One image's objects, as the record stores them (lists of equal length).
Objects = collections.namedtuple("Objects", "xmin ymin xmax ymax label is_crowd area segmentation polygons")


# ---- categories ----

def label_map(categories: list[dict]) -> dict[int, int]:
    """COCO category id -> contiguous label 1..N, in sorted id order (0 is background)."""
    return {cid: label for label, cid in enumerate(sorted(c["id"] for c in categories), 1)}


# ---- reading the annotation files ----

def load_annotations(path: str) -> dict:
    """The parsed instances JSON, checked to hold the three lists a COCO instances file has."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing (the COCO 2017 annotations, from annotations_trainval2017.zip; see "
                        f"python -m data_prep.coco --help for the raw layout)")
    try:
        with open(path, "rb") as f:
            document = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable ({e})") from None
    if not isinstance(document, dict):
        raise DataError(f"{path}: a JSON {type(document).__name__}, not a COCO instances object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(document.get(key), list):
            raise DataError(f"{path}: no {key!r} list (not a COCO instances file)")
    return document


def _fields(entry, keys: tuple, path: str, what: str):
    if not isinstance(entry, dict) or any(k not in entry for k in keys):
        missing = [k for k in keys if not isinstance(entry, dict) or k not in entry]
        raise DataError(f"{path}: {what} {str(entry)[:80]} lacks {', '.join(missing)}")
    return [entry[k] for k in keys]


def check_categories(document: dict, path: str) -> list[dict]:
    """[{"id", "name"}] sorted by id; DataError on duplicates or malformed entries."""
    found = {}
    for entry in document["categories"]:
        cid, name = _fields(entry, ("id", "name"), path, "category")
        if not isinstance(cid, int) or isinstance(cid, bool) or cid < 1:
            raise DataError(f"{path}: category id {cid!r} ({name}) is not a positive integer")
        if cid in found:
            raise DataError(f"{path}: category id {cid} appears twice")
        found[cid] = str(name)
    if not found:
        raise DataError(f"{path}: empty 'categories' list")
    return [{"id": cid, "name": found[cid]} for cid in sorted(found)]


def index_images(document: dict, path: str) -> dict[int, Item]:
    """image id -> Item, in annotation-file order."""
    items = {}
    for entry in document["images"]:
        image_id, file_name, width, height = _fields(entry, ("id", "file_name", "width", "height"), path, "image")
        if not isinstance(image_id, int) or isinstance(image_id, bool):
            raise DataError(f"{path}: image id {image_id!r} ({file_name}) is not an integer")
        if image_id in items:
            raise DataError(f"{path}: image id {image_id} appears twice")
        if not all(isinstance(v, int) and v > 0 for v in (width, height)):
            raise DataError(f"{path}: image {image_id} ({file_name}): width/height {width!r}x{height!r} are not "
                            f"positive integers")
        items[image_id] = Item(str(file_name), int(image_id), width, height)
    return items


def _segmentation_json(segmentation) -> bytes:
    return json.dumps(segmentation, separators=(",", ":")).encode()


def polygon_parts(entry: dict, path: str, image_id) -> list[list[float]]:
    """A non-crowd object's polygons as flat [x, y, ...] float lists of at least 3 vertices; [] for a crowd."""
    if entry.get("iscrowd", 0):
        return []
    segmentation = entry.get("segmentation", [])
    if not isinstance(segmentation, list):
        raise DataError(f"{path}: annotation {entry.get('id', '?')} (image {image_id}) is not a crowd but its "
                        f"segmentation is not a list of polygons (Mask R-CNN's reference reads polygons only)")
    parts = []
    for polygon in segmentation:
        if not (isinstance(polygon, list) and all(isinstance(v, (int, float)) and math.isfinite(v)
                                                  for v in polygon)):
            raise DataError(f"{path}: annotation {entry.get('id', '?')} (image {image_id}): polygon "
                            f"{str(polygon)[:60]} is not a list of numbers")
        if len(polygon) >= 6:
            parts.append([float(v) for v in polygon[:len(polygon) // 2 * 2]])
    return parts


def collect_objects(document: dict, path: str, items: dict, labels: dict) -> tuple[dict, int]:
    """image id -> Objects (images without annotations absent), and how many degenerate boxes were dropped.

    A box is [x, y, w, h] in pixels; it becomes (x/W, y/H, (x+w)/W, (y+h)/H) clipped to [0, 1] in float32. One with
    zero or negative width or height after that is dropped: its SSD encoding would be log(0).
    """
    kept_entries, image_ids, pixel_boxes, sizes = [], [], [], []
    for entry in document["annotations"]:
        image_id, category_id, bbox = _fields(entry, ("image_id", "category_id", "bbox"), path, "annotation")
        ann = entry.get("id", "?")
        item = items.get(image_id)
        if item is None:
            raise DataError(f"{path}: annotation {ann} names image_id {image_id!r}, which is not in 'images'")
        if category_id not in labels:
            raise DataError(f"{path}: annotation {ann} (image {image_id}) names category_id {category_id!r}, which "
                            f"is not in 'categories'")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) and
                                                                  math.isfinite(v) for v in bbox)):
            raise DataError(f"{path}: annotation {ann} (image {image_id}): bbox {bbox!r} is not [x, y, w, h]")
        if not isinstance(entry.get("area", 0), (int, float)):
            raise DataError(f"{path}: annotation {ann} (image {image_id}): area {entry['area']!r} is not a number")
        kept_entries.append(entry)
        image_ids.append(image_id)
        pixel_boxes.append(bbox)
        sizes.append((item.width, item.height))
    # All boxes at once (COCO train has 860,001): normalise, clip, round to the float32 the record stores.
    xywh = np.asarray(pixel_boxes, np.float64).reshape(-1, 4)
    wh = np.asarray(sizes, np.float64).reshape(-1, 2)
    ltrb = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1) / np.tile(wh, 2)
    boxes = np.clip(ltrb, 0.0, 1.0).astype(np.float32)
    keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    per_image: dict[int, list] = collections.defaultdict(list)
    for n in np.flatnonzero(keep).tolist():
        entry = kept_entries[n]
        x, y, w, h = pixel_boxes[n]
        area = entry.get("area", w * h)  # COCO gives the mask area; files without it fall back to the box
        per_image[image_ids[n]].append((*boxes[n].tolist(), labels[entry["category_id"]],
                                        int(bool(entry.get("iscrowd", 0))), float(area),
                                        _segmentation_json(entry.get("segmentation", [])),
                                        polygon_parts(entry, path, image_ids[n])))
    dropped = int(len(keep) - keep.sum())
    return {image_id: Objects(*map(list, zip(*objs))) for image_id, objs in per_image.items()}, dropped


def _list_images(image_dir: str, items: list[Item], json_path: str):
    """Every image the JSON lists must be a file in image_dir (checked before any conversion starts)."""
    if not os.path.isdir(image_dir):
        raise DataError(f"{image_dir}: missing (the images of {os.path.basename(json_path)}; see "
                        f"python -m data_prep.coco --help for the raw layout)")
    present = set(os.listdir(image_dir))
    for item in items:
        if item.file_name not in present:
            raise DataError(f"{os.path.join(image_dir, item.file_name)}: missing (image {item.image_id} of "
                            f"{json_path})")


# ---- checking images (worker processes) ----

def process_chunk(image_dir: str, items: list) -> list:
    """("ok", item, jpeg, kind), ("bad", item, reason) or ("size", item, (width, height)) per item."""
    results = []
    for item in items:
        try:
            with open(os.path.join(image_dir, item.file_name), "rb") as f:
                data = f.read()
        except OSError as e:
            results.append(("bad", item, f"unreadable: {e.strerror or e}"))
            continue
        try:
            jpeg, height, width, kind = check_image(data)
        except BadImage as e:
            results.append(("bad", item, str(e)))
            continue
        if (width, height) != (item.width, item.height):
            results.append(("size", item, (width, height)))
            continue
        results.append(("ok", item, jpeg, kind))
    return results


# ---- writing ----

class _Split(sharded.ShardWriter):
    """Writes one split's records in order into its shards and keeps the counts."""

    def __init__(self, out: StagedOutput, split: str, image_dir: str, json_path: str, num_shards: int,
                 objects: dict):
        super().__init__(out, split, num_shards)
        self.image_dir, self.json_path, self.objects = image_dir, json_path, objects
        self.annotated, self.num_objects, self.reencoded = 0, 0, []

    def shard_name(self, shard: int) -> str:
        return f"{self.split}-{shard:05d}-of-{self.num_shards:05d}.tfrecord"

    def add(self, shard: int, results: list):
        r = self.records
        for result in results:
            item = result[1]
            where = os.path.join(self.image_dir, item.file_name)
            if result[0] == "bad":
                raise DataError(f"{where}: corrupt image ({result[2]})")
            if result[0] == "size":
                width, height = result[2]
                raise DataError(f"{where}: {width}x{height} pixels, but {self.json_path} says "
                                f"{item.width}x{item.height} (width x height) for image {item.image_id}")
            _, _, jpeg, kind = result
            if kind:
                self.reencoded.append({"split": self.split, "name": item.file_name, "kind": kind})
            objs = self.objects.get(item.image_id) or Objects(*([] for _ in Objects._fields))
            self.write(shard, r.example({
                "image/encoded": r.bytes_feature(jpeg),
                "image/filename": r.bytes_feature(item.file_name.encode()),
                "image/id": r.int64_feature(item.image_id),
                "image/height": r.int64_feature(item.height),
                "image/width": r.int64_feature(item.width),
                "image/object/bbox/xmin": r.float_feature(objs.xmin),
                "image/object/bbox/ymin": r.float_feature(objs.ymin),
                "image/object/bbox/xmax": r.float_feature(objs.xmax),
                "image/object/bbox/ymax": r.float_feature(objs.ymax),
                "image/object/class/label": r.int64_list_feature(objs.label),
                "image/object/is_crowd": r.int64_list_feature(objs.is_crowd),
                "image/object/area": r.float_feature(objs.area),
                "image/object/segmentation": r.bytes_list_feature(objs.segmentation),
                "image/object/polygon/parts": r.int64_list_feature([len(parts) for parts in objs.polygons]),
                "image/object/polygon/vertices": r.int64_list_feature([len(p) // 2 for parts in objs.polygons
                                                                       for p in parts]),
                "image/object/polygon/xy": r.float_feature([v for parts in objs.polygons for p in parts
                                                            for v in p]),
            }))
            self.annotated += bool(objs.label)
            self.num_objects += len(objs.label)


def _read_split(raw_dir: str, image_folder: str, json_name: str, log):
    """Checked (items in conversion order, objects per image, categories, dropped boxes, json path, image dir)."""
    json_path = os.path.join(raw_dir, "annotations", json_name)
    t = time.time()
    document = load_annotations(json_path)
    categories = check_categories(document, json_path)
    items = index_images(document, json_path)
    objects, dropped = collect_objects(document, json_path, items, label_map(categories))
    image_dir = os.path.join(raw_dir, image_folder)
    ordered = list(items.values())
    _list_images(image_dir, ordered, json_path)
    log(f"  {json_path}: {len(ordered):,} images, {len(objects):,} with objects, "
        f"{sum(len(o.label) for o in objects.values()):,} objects, {dropped} degenerate boxes dropped "
        f"({time.time() - t:.1f} s)")
    return ordered, objects, categories, dropped, json_path, image_dir


def max_object_vertices(objects: dict) -> int:
    return max((sum(len(p) // 2 for p in parts) for objs in objects.values() for parts in objs.polygons), default=0)


def prepare(raw_dir: str, output_dir: str, train_shards: int = 256, val_shards: int = 32,
            num_workers: int | None = None, overwrite: bool = False, chunk: int = 32, log=print) -> dict:
    """Convert raw_dir (the official layout) into output_dir; returns the manifest."""
    if train_shards < 1 or val_shards < 1:
        raise DataError(f"--train_shards ({train_shards}) and --val_shards ({val_shards}) must be at least 1")
    if not os.path.isdir(raw_dir):
        raise DataError(f"{raw_dir}: no such folder")
    num_workers = os.cpu_count() if num_workers is None else num_workers
    t0 = time.time()

    log(f"reading the annotations in {os.path.join(raw_dir, 'annotations')}")
    splits = {}
    for split, image_folder, json_name in SPLITS:
        splits[split] = _read_split(raw_dir, image_folder, json_name, log)
    categories = splits["train"][2]
    val_json = splits["validation"][4]
    if splits["validation"][2] != categories:
        raise DataError(f"{val_json}: its categories differ from those of {splits['train'][4]} (the labels would "
                        f"not match)")
    labels = label_map(categories)
    train_items = sorted(splits["train"][0], key=lambda item: item.image_id)
    random.Random(SHUFFLE_SEED).shuffle(train_items)  # sorted first: the order does not depend on the JSON's order
    order = {"train": train_items, "validation": splits["validation"][0]}
    if not train_items or not order["validation"]:
        empty = splits["train" if not train_items else "validation"][4]
        raise DataError(f"{empty}: lists no images")
    shards = {"train": min(train_shards, len(train_items)), "validation": min(val_shards, len(order["validation"]))}
    if shards["train"] < train_shards or shards["validation"] < val_shards:
        log(f"  fewer images than shards: writing {shards['train']} train and {shards['validation']} val shards")

    # TensorFlow (the record writer) loads only once the input is known to be good, and before conversion is timed.
    importlib.import_module("mlperf_keras.inputs.records")
    context = multiprocessing.get_context("spawn")  # workers never inherit TensorFlow's threads
    pool = context.Pool(num_workers) if num_workers > 0 else None
    t_convert, converted = time.time(), 0
    try:
        with StagedOutput(output_dir, overwrite=overwrite) as out:
            writers = {}
            for split in ("train", "validation"):
                items, objects, _, _, json_path, image_dir = splits[split]
                t = time.time()
                writer = _Split(out, split, image_dir, json_path, shards[split], objects)
                sharded.convert(pool, process_chunk, writer.image_dir, order[split], writer, chunk, log,
                                in_flight=max(2, 2 * num_workers))
                seconds = time.time() - t
                log(f"  {split}: wrote {writer.written:,} images ({writer.annotated:,} with objects, "
                    f"{writer.num_objects:,} objects) in {counted(shards[split], 'shard')}, {seconds:.1f} s "
                    f"({writer.written / max(seconds, 1e-9):,.0f} images/s with "
                    f"{counted(max(1, num_workers), 'worker')})")
                writers[split] = writer
                converted += writer.written
            seconds = time.time() - t_convert
            log(f"converted {converted:,} images in {seconds:.1f} s ({converted / max(seconds, 1e-9):,.0f} "
                f"images/s, {counted(max(1, num_workers), 'worker')})")
            shutil.copyfile(val_json, out.path(VAL_ANNOTATIONS))
            out.add(VAL_ANNOTATIONS, split="annotations")
            train, val = writers["train"], writers["validation"]
            reencoded = train.reencoded + val.reencoded
            counts = {"num_classes": len(categories), "train_images": train.written, "val_images": val.written,
                      "train_images_annotated": train.annotated, "val_images_annotated": val.annotated,
                      "train_objects": train.num_objects, "val_objects": val.num_objects,
                      "train_boxes_dropped": splits["train"][3], "val_boxes_dropped": splits["validation"][3],
                      "reencoded": len(reencoded),
                      "max_object_vertices": max(max_object_vertices(splits[split][1]) for split in splits)}
            manifest = out.commit(
                "ssd", "coco-2017", counts, workloads=WORKLOADS, reencoded=reencoded,
                categories=[{"id": c["id"], "name": c["name"], "label": labels[c["id"]]} for c in categories],
                options={"train_shards": shards["train"], "val_shards": shards["validation"],
                         "shuffle_seed": SHUFFLE_SEED, "jpeg_quality": JPEG_QUALITY},
                source={"train": os.path.abspath(splits["train"][4]), "val": os.path.abspath(val_json)})
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    log(f"re-encoded {len(reencoded)} images; dropped {counts['train_boxes_dropped']} train and "
        f"{counts['val_boxes_dropped']} val boxes of zero width or height")
    log(f"prepared {output_dir}: {counts} in {time.time() - t0:.1f} s")
    return manifest


FLAGS = flags.FLAGS


def define_flags():
    cli.define_common_flags("Folder holding the extracted official COCO 2017 files: annotations/"
                            "instances_train2017.json, annotations/instances_val2017.json, train2017/*.jpg, "
                            "val2017/*.jpg.")
    # absl's --help lists only the main module's own flags: show --raw_dir/--output_dir too.
    flags.adopt_module_key_flags(cli)
    flags.DEFINE_integer("train_shards", 256, "Training record files.")
    flags.DEFINE_integer("val_shards", 32, "Validation record files.")
    flags.DEFINE_integer("num_workers", None, "Worker processes reading and checking images (default: every core; "
                         "0: all in this process).")


def main(argv):
    del argv
    cli.run_or_report(prepare, FLAGS.raw_dir, FLAGS.output_dir, train_shards=FLAGS.train_shards,
                      val_shards=FLAGS.val_shards, num_workers=FLAGS.num_workers, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
    # TensorFlow (loaded for the record writer) prints start-up lines on stderr that would bury the one-line error;
    # this command runs no oneDNN kernel and needs none of those notices. A user's own settings win.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags()
    entry.run(main)
