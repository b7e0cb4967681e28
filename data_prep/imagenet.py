"""python -m data_prep.imagenet --raw_dir=R --output_dir=D: ImageNet-2012 (ILSVRC2012) -> sharded TFRecords + manifest.

R holds the official files as distributed:
  ILSVRC2012_img_train.tar   a tar of per-class tars <wnid>.tar (n01440764.tar ...) holding <wnid>_<n>.JPEG
  ILSVRC2012_img_val.tar     flat: ILSVRC2012_val_00000001.JPEG ... ILSVRC2012_val_00050000.JPEG
  validation labels, one of (or --val_labels=FILE):
    ILSVRC2012_devkit_t12.tar.gz (or the extracted ILSVRC2012_devkit_t12/): the devkit's
      data/ILSVRC2012_validation_ground_truth.txt (ILSVRC2012 class ids, mapped to wnids by data/meta.mat);
    a text file of one wnid per line in image order (ILSVRC2012_validation_labels.txt, validation_labels.txt or
      val_labels.txt); without any, the list tensorflow-datasets ships is used when that package is installed.

Labels are indices into the sorted list of the train set's wnids (0..999), written with the wnid. Images are copied
byte for byte, except what the reference's conversion re-encodes: the PNG and the CMYK JPEGs hidden under .JPEG
names (and anything else that is not an RGB or grayscale JPEG) become RGB JPEGs at quality 100. Every image is
decoded once to find corrupt files; a corrupt image is reported by name and either fails the run (default) or, with
--on_corrupt=skip, is left out and listed in the manifest with the reason. Training images are shuffled with a fixed
seed (so every shard mixes classes) and split into --train_shards files; validation images keep their order in
--val_shards files (train-00000-of-01024 ..., validation-00000-of-00128 ..., as the reference names them).

The tars are read in place (never extracted, never loaded whole): the main process indexes member offsets, worker
processes (--num_workers, default: every core) read and check images by offset, the main process writes records in
a fixed order. Output goes to a staging folder and is moved into place with the manifest last.
"""
from __future__ import annotations

import collections
import io
import multiprocessing
import os
import random
import re
import tarfile
import time

import numpy as np
from absl import flags

from data_prep import cli, sharded
from mlperf_keras import entry
from mlperf_keras.config import counted
from mlperf_keras.inputs.manifest import DataError, StagedOutput

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12"
GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
WNID_LISTS = ("ILSVRC2012_validation_labels.txt", "validation_labels.txt", "val_labels.txt")
SHUFFLE_SEED = 12345  # the reference conversion (build_imagenet_data.py) shuffles with random.seed(12345)
JPEG_QUALITY = 100    # what the reference saves re-encoded images at
WNID_RE = re.compile(r"^n\d{8}$")
VAL_RE = re.compile(r"^ILSVRC2012_val_(\d{8})\.JPEG$")

# One image to convert: (file name, byte offset in its tar, size, label).
Item = collections.namedtuple("Item", "name offset size label")


# ---- reading the official layout ----

def _open_tar(path: str, what: str) -> tarfile.TarFile:
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing ({what}); see python -m data_prep.imagenet --help for the raw layout")
    try:
        return tarfile.open(path, "r:")
    except (tarfile.TarError, OSError) as e:
        raise DataError(f"{path}: not a readable (uncompressed) tar archive ({e})") from None


def index_train(path: str) -> tuple[list[str], list[Item]]:
    """Sorted wnids and every training image (name, offset, size, label), reading only tar headers."""
    items_by_wnid = {}
    with _open_tar(path, "the training images") as outer:
        try:
            for member in outer:
                if member.isdir():
                    continue
                wnid, ext = os.path.splitext(os.path.basename(member.name))
                if not member.isfile() or ext != ".tar" or not WNID_RE.match(wnid):
                    raise DataError(f"{path}: member {member.name!r} is not a per-class tar <wnid>.tar; the official "
                                    f"{TRAIN_TAR} holds one tar per class (n01440764.tar ...)")
                if wnid in items_by_wnid:
                    raise DataError(f"{path}: class tar {member.name!r} appears twice")
                found = []
                try:
                    with tarfile.open(fileobj=outer.extractfile(member), mode="r:") as inner:
                        for image in inner:
                            if image.isdir():
                                continue
                            name = os.path.basename(image.name)
                            if not image.isfile() or not name.upper().endswith(".JPEG"):
                                raise DataError(f"{path}: {member.name}: member {image.name!r} is not a "
                                                f"<wnid>_<n>.JPEG image")
                            found.append((name, member.offset_data + image.offset_data, image.size))
                except tarfile.TarError as e:
                    raise DataError(f"{path}: {member.name}: not a readable tar ({e})") from None
                items_by_wnid[wnid] = found
        except tarfile.TarError as e:
            raise DataError(f"{path}: damaged tar archive ({e})") from None
    if not items_by_wnid:
        raise DataError(f"{path}: holds no per-class tars")
    wnids = sorted(items_by_wnid)
    items = [Item(name, offset, size, label) for label, wnid in enumerate(wnids)
             for name, offset, size in sorted(items_by_wnid[wnid])]
    if not items:
        raise DataError(f"{path}: the class tars hold no images")
    return wnids, items


def index_val(path: str) -> list[tuple[int, str, int, int]]:
    """(image number, name, offset, size) of every validation image, by number."""
    found = []
    with _open_tar(path, "the validation images") as archive:
        try:
            for member in archive:
                if member.isdir():
                    continue
                name = os.path.basename(member.name)
                match = VAL_RE.match(name)
                if not member.isfile() or not match:
                    raise DataError(f"{path}: member {member.name!r} is not a validation image "
                                    f"ILSVRC2012_val_<8 digits>.JPEG (the official {VAL_TAR} is flat)")
                found.append((int(match.group(1)), name, member.offset_data, member.size))
        except tarfile.TarError as e:
            raise DataError(f"{path}: damaged tar archive ({e})") from None
    if not found:
        raise DataError(f"{path}: holds no validation images")
    found.sort()
    return found


def _tfds_file(name: str) -> str | None:
    """A data file shipped inside the tensorflow-datasets wheel, found without importing the package."""
    import importlib.util

    spec = importlib.util.find_spec("tensorflow_datasets")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "datasets", "imagenet2012", name)
    return path if os.path.isfile(path) else None


def known_reencoded_files() -> tuple[set, set] | None:
    """(PNG names, CMYK names) of the official train set, from tensorflow-datasets' ImageNet builder, if installed."""
    import ast

    path = _tfds_file("imagenet2012_dataset_builder.py")
    if path is None:
        return None
    lists = {}
    with open(path) as f:
        for node in ast.parse(f.read()).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id in ("PNG_IMAGES", "CMYK_IMAGES"):
                lists[node.targets[0].id] = set(ast.literal_eval(node.value))
    if len(lists) != 2:
        return None
    return lists["PNG_IMAGES"], lists["CMYK_IMAGES"]


def _parse_meta_mat(data: bytes, source: str) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid for the 1000 leaf classes of the devkit's meta.mat."""
    try:
        from scipy.io import loadmat
    except ImportError:
        raise DataError(f"{source}: reading the devkit's meta.mat needs scipy (pip install scipy), or pass "
                        f"--val_labels with a file of one wnid per line") from None
    try:
        synsets = loadmat(io.BytesIO(data), squeeze_me=True)["synsets"]
        ids = [int(i) for i in np.atleast_1d(synsets["ILSVRC2012_ID"])]
        wnids = [str(w) for w in np.atleast_1d(synsets["WNID"])]
        children = [int(c) for c in np.atleast_1d(synsets["num_children"])]
    except Exception as e:  # noqa: BLE001 - any malformed .mat is the same user-facing problem
        raise DataError(f"{source}: not the devkit's meta.mat (a 'synsets' struct with ILSVRC2012_ID, WNID, "
                        f"num_children): {e}") from None
    return {i: w for i, w, c in zip(ids, wnids, children) if c == 0}


def _labels_from_text(text: str, source: str, meta: bytes | None, meta_source: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise DataError(f"{source}: empty label file")
    if WNID_RE.match(lines[0]):
        for n, line in enumerate(lines, 1):
            if not WNID_RE.match(line):
                raise DataError(f"{source}:{n}: {line!r} is not a wnid like n01440764")
        return lines
    if lines[0].isdigit():
        if meta is None:
            raise DataError(f"{source}: holds ILSVRC2012 class ids, which need the devkit's data/meta.mat beside it "
                            f"to become wnids (their order is not the sorted wnid order); not found")
        id_to_wnid = _parse_meta_mat(meta, meta_source)
        labels = []
        for n, line in enumerate(lines, 1):
            if not line.isdigit() or int(line) not in id_to_wnid:
                raise DataError(f"{source}:{n}: {line!r} is not an ILSVRC2012 class id of {meta_source}")
            labels.append(id_to_wnid[int(line)])
        return labels
    raise DataError(f"{source}:1: {lines[0]!r} is neither a wnid (n01440764) nor an ILSVRC2012 class id (1-1000)")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _labels_from_file(path: str) -> list[str]:
    meta = None
    for candidate in (os.path.join(os.path.dirname(path), "meta.mat"),):
        if os.path.isfile(candidate):
            meta = (_read(candidate), candidate)
    try:
        text = _read(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable label file ({e})") from None
    return _labels_from_text(text, path, *(meta or (None, "")))


def _labels_from_devkit_tar(path: str) -> list[str]:
    try:
        with tarfile.open(path, "r:*") as devkit:
            members = {os.path.basename(m.name): m for m in devkit if m.isfile()}
            if GROUND_TRUTH not in members or "meta.mat" not in members:
                raise DataError(f"{path}: no data/{GROUND_TRUTH} and data/meta.mat inside (not the ILSVRC2012 devkit)")
            text = devkit.extractfile(members[GROUND_TRUTH]).read().decode("utf-8")
            meta = devkit.extractfile(members["meta.mat"]).read()
    except (tarfile.TarError, OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable devkit archive ({e})") from None
    return _labels_from_text(text, f"{path}:{GROUND_TRUTH}", meta, f"{path}:meta.mat")


def load_val_labels(raw_dir: str, path: str | None = None) -> tuple[list[str], str]:
    """The validation wnids in image order, and where they came from."""
    if path:
        if not os.path.isfile(path):
            raise DataError(f"{path}: no such validation label file")
        if path.endswith((".tar", ".tar.gz", ".tgz")):
            return _labels_from_devkit_tar(path), path
        return _labels_from_file(path), path
    for candidate in (os.path.join(raw_dir, GROUND_TRUTH), os.path.join(raw_dir, DEVKIT, "data", GROUND_TRUTH)):
        if os.path.isfile(candidate):
            return _labels_from_file(candidate), candidate
    for name in (f"{DEVKIT}.tar.gz", f"{DEVKIT}.tar"):
        candidate = os.path.join(raw_dir, name)
        if os.path.isfile(candidate):
            return _labels_from_devkit_tar(candidate), candidate
    for name in WNID_LISTS:
        candidate = os.path.join(raw_dir, name)
        if os.path.isfile(candidate):
            return _labels_from_file(candidate), candidate
    shipped = _tfds_file("validation_labels.txt")
    if shipped:
        return _labels_from_file(shipped), f"{shipped} (tensorflow-datasets)"
    raise DataError(f"{raw_dir}: no validation labels: expected {DEVKIT}.tar.gz, {GROUND_TRUTH} (+ meta.mat), "
                    f"or one of {', '.join(WNID_LISTS)} (or pass --val_labels=FILE, or install tensorflow-datasets)")


# ---- checking and converting images (worker processes) ----

class BadImage(Exception):
    pass


def check_image(data: bytes) -> tuple[bytes, int, int, str | None]:
    """(JPEG bytes, height, width, what was converted or None) of one image; BadImage if it cannot be decoded.

    RGB and grayscale JPEGs are kept byte for byte (TensorFlow decodes both to RGB); anything else (the PNG, CMYK
    JPEGs) is decoded and saved as an RGB JPEG at quality 100. Kept JPEGs are decoded at 1/8 scale (libjpeg's DCT
    scaling still reads every entropy-coded segment, so truncated or damaged data is still found).
    """
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt, mode = image.format, image.mode
            width, height = image.size
            if fmt == "JPEG" and mode in ("RGB", "L"):
                image.draft(mode, (max(1, width // 8), max(1, height // 8)))
                image.load()
                return data, height, width, None
            image.load()
            rgb = image.convert("RGB")
    except Exception as e:  # noqa: BLE001 - PIL raises many types for damaged files; all mean "corrupt"
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadImage(reason) from None
    out = io.BytesIO()
    rgb.save(out, "JPEG", quality=JPEG_QUALITY)
    kind = "png" if fmt == "PNG" else "cmyk" if mode == "CMYK" else f"{fmt}/{mode}".lower()
    return out.getvalue(), height, width, kind


_open_files: dict[str, int] = {}


def process_chunk(tar_path: str, items: list) -> list:
    """Read and check images by offset: ("ok", item, jpeg, height, width, kind) or ("bad", item, reason)."""
    fd = _open_files.get(tar_path)
    if fd is None:
        fd = _open_files[tar_path] = os.open(tar_path, os.O_RDONLY)
    results = []
    for item in items:
        data = os.pread(fd, item.size, item.offset)
        if len(data) != item.size:
            results.append(("bad", item, f"tar ends inside the image ({len(data)} of {item.size} bytes)"))
            continue
        try:
            jpeg, height, width, kind = check_image(data)
        except BadImage as e:
            results.append(("bad", item, str(e)))
            continue
        results.append(("ok", item, jpeg, height, width, kind))
    return results


# ---- writing ----

class _Split(sharded.ShardWriter):
    """Writes one split's records in order into its shards and keeps the counts."""

    def __init__(self, out: StagedOutput, split: str, prefix: str, tar_path: str, num_shards: int, wnids,
                 on_corrupt: str, log):
        super().__init__(out, split, num_shards)
        self.prefix, self.tar_path = prefix, tar_path
        self.wnids, self.on_corrupt, self.log = wnids, on_corrupt, log
        self.skipped, self.reencoded = [], []

    def where(self, item) -> str:
        inner = f"{self.wnids[item.label]}.tar/" if self.split == "train" else ""
        return f"{self.tar_path}: {inner}{item.name}"

    def shard_name(self, shard: int) -> str:
        return f"{self.prefix}-{shard:05d}-of-{self.num_shards:05d}"

    def add(self, shard: int, results: list):
        for result in results:
            if result[0] == "bad":
                _, item, reason = result
                if self.on_corrupt == "fail":
                    raise DataError(f"{self.where(item)}: corrupt image ({reason}); pass --on_corrupt=skip to leave "
                                    f"it out (it is then listed in the manifest)")
                self.log(f"  skipped corrupt image {self.where(item)}: {reason}")
                self.skipped.append({"split": self.split, "name": item.name, "reason": reason})
                continue
            _, item, jpeg, height, width, kind = result
            if kind:
                self.reencoded.append({"split": self.split, "name": item.name, "kind": kind})
            wnid = self.wnids[item.label]
            r = self.records
            self.write(shard, r.example({
                "image/encoded": r.bytes_feature(jpeg),
                "image/format": r.bytes_feature(b"JPEG"),
                "image/filename": r.bytes_feature(item.name.encode()),
                "image/class/label": r.int64_feature(item.label),
                "image/class/synset": r.bytes_feature(wnid.encode()),
                "image/height": r.int64_feature(height),
                "image/width": r.int64_feature(width),
            }))


def prepare(raw_dir: str, output_dir: str, train_shards: int = 1024, val_shards: int = 128,
            on_corrupt: str = "fail", num_workers: int | None = None, val_labels: str | None = None,
            overwrite: bool = False, chunk: int = 64, log=print) -> dict:
    if on_corrupt not in ("fail", "skip"):
        raise DataError(f"--on_corrupt must be fail or skip, not {on_corrupt!r}")
    if train_shards < 1 or val_shards < 1:
        raise DataError(f"--train_shards ({train_shards}) and --val_shards ({val_shards}) must be at least 1")
    if not os.path.isdir(raw_dir):
        raise DataError(f"{raw_dir}: no such folder")
    train_tar, val_tar = os.path.join(raw_dir, TRAIN_TAR), os.path.join(raw_dir, VAL_TAR)
    num_workers = os.cpu_count() if num_workers is None else num_workers
    t0 = time.time()

    log(f"indexing {train_tar}")
    wnids, train_items = index_train(train_tar)
    log(f"  {len(train_items):,} training images in {len(wnids)} classes ({time.time() - t0:.1f} s)")
    val_found = index_val(val_tar)
    labels, labels_source = load_val_labels(raw_dir, val_labels)
    log(f"  {len(val_found):,} validation images; labels from {labels_source}")
    label_of = {wnid: i for i, wnid in enumerate(wnids)}
    val_items = []
    for number, name, offset, size in val_found:
        if number > len(labels) or number < 1:
            raise DataError(f"{labels_source}: has {len(labels)} labels, no line for {val_tar}: {name}")
        wnid = labels[number - 1]
        if wnid not in label_of:
            raise DataError(f"{labels_source}:{number}: wnid {wnid} of {name} is not a class of {train_tar}")
        val_items.append(Item(name, offset, size, label_of[wnid]))
    if len(val_items) != len(labels):
        log(f"  note: {len(labels):,} validation labels for {len(val_items):,} validation images in {val_tar}")

    random.Random(SHUFFLE_SEED).shuffle(train_items)
    shards = {"train": min(train_shards, len(train_items)), "validation": min(val_shards, len(val_items))}
    if shards["train"] < train_shards or shards["validation"] < val_shards:
        log(f"  fewer images than shards: writing {shards['train']} train and {shards['validation']} val shards")

    # TensorFlow (the record writer) loads only once the input is known to be good, and before conversion is timed.
    import mlperf_keras.inputs.records  # noqa: F401
    context = multiprocessing.get_context("spawn")  # workers never inherit TensorFlow's threads
    pool = context.Pool(num_workers) if num_workers > 0 else None
    converted, t_convert = 0, time.time()
    try:
        with StagedOutput(output_dir, overwrite=overwrite) as out:
            splits = []
            for split, prefix, tar_path, items in (("train", "train", train_tar, train_items),
                                                   ("validation", "validation", val_tar, val_items)):
                t = time.time()
                writer = _Split(out, split, prefix, tar_path, shards[split], wnids, on_corrupt, log)
                sharded.convert(pool, process_chunk, tar_path, items, writer, chunk, log,
                                in_flight=max(2, 2 * num_workers))
                seconds = time.time() - t
                log(f"  {split}: wrote {writer.written:,} images in {counted(shards[split], 'shard')}, {seconds:.1f} s "
                    f"({writer.written / max(seconds, 1e-9):,.0f} images/s with "
                    f"{counted(max(1, num_workers), 'worker')})")
                splits.append(writer)
                converted += len(items)
            log(f"converted {converted:,} images in {time.time() - t_convert:.1f} s "
                f"({converted / max(time.time() - t_convert, 1e-9):,.0f} images/s, "
                f"{counted(max(1, num_workers), 'worker')})")
            train, val = splits
            with open(out.path("synsets.txt"), "w") as f:
                f.write("".join(f"{wnid}\n" for wnid in wnids))
            out.add("synsets.txt", rows=len(wnids), split="meta")
            reencoded = train.reencoded + val.reencoded
            skipped = train.skipped + val.skipped
            counts = {"num_classes": len(wnids), "train_images": train.written, "val_images": val.written,
                      "train_skipped": len(train.skipped), "val_skipped": len(val.skipped),
                      "reencoded": len(reencoded)}
            manifest = out.commit(
                "resnet", "imagenet-2012", counts, skipped=skipped, reencoded=reencoded,
                reencoded_check=_check_reencoded(reencoded, len(wnids), len(train_items)),
                options={"train_shards": shards["train"], "val_shards": shards["validation"],
                         "shuffle_seed": SHUFFLE_SEED, "on_corrupt": on_corrupt, "jpeg_quality": JPEG_QUALITY},
                source={"train": os.path.abspath(train_tar), "val": os.path.abspath(val_tar),
                        "val_labels": labels_source})
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    log(f"re-encoded {len(reencoded)} images ({manifest['reencoded_check']}); skipped {len(skipped)} corrupt")
    log(f"prepared {output_dir}: {counts} in {time.time() - t0:.1f} s")
    return manifest


def _check_reencoded(reencoded: list, num_classes: int, num_train: int) -> str:
    """Compare what was re-encoded with the known PNG/CMYK lists (only meaningful on the full train set)."""
    known = known_reencoded_files()
    if known is None:
        return "known PNG/CMYK lists unavailable (tensorflow-datasets not installed)"
    if num_classes != 1000 or num_train < 1_281_167:
        return "not the full train set: not compared with the known PNG/CMYK lists"
    expected = known[0] | known[1]
    found = {r["name"] for r in reencoded if r["split"] == "train"}
    if found == expected:
        return f"as the known lists: {len(known[0])} PNG, {len(known[1])} CMYK"
    return (f"differs from the known lists: missing {sorted(expected - found)}, "
            f"unexpected {sorted(found - expected)}")


FLAGS = flags.FLAGS


def define_flags():
    cli.define_common_flags(f"Folder holding {TRAIN_TAR}, {VAL_TAR} and the validation labels ({DEVKIT}.tar.gz, "
                            f"or a one-wnid-per-line file such as {WNID_LISTS[0]}).")
    # absl's --help lists only the main module's own flags: show --raw_dir/--output_dir too.
    flags.adopt_module_key_flags(cli)
    flags.DEFINE_integer("train_shards", 1024, "Training record files (the reference: 1024).")
    flags.DEFINE_integer("val_shards", 128, "Validation record files (the reference: 128).")
    flags.DEFINE_enum("on_corrupt", "fail", ["fail", "skip"], "A corrupt image fails the run, or is left out and "
                      "listed in the manifest.")
    flags.DEFINE_integer("num_workers", None, "Worker processes reading and checking images (default: every core; "
                         "0: all in this process).")
    flags.DEFINE_string("val_labels", None, "Validation labels: a file of one wnid per line in image order, the "
                        "devkit's ground-truth file (with meta.mat beside it), or the devkit tar. Default: found "
                        "in --raw_dir.")


def main(argv):
    del argv
    cli.run_or_report(prepare, FLAGS.raw_dir, FLAGS.output_dir, train_shards=FLAGS.train_shards,
                      val_shards=FLAGS.val_shards, on_corrupt=FLAGS.on_corrupt, num_workers=FLAGS.num_workers,
                      val_labels=FLAGS.val_labels, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
    define_flags()
    entry.run(main)
