"""The manifest that data_prep writes beside every prepared dataset, and that training verifies.

A manifest names the workload it was prepared for (and, for a dataset several workloads share, all of them under
"workloads"), the counts a model needs (users, items, classes...), and every data file with its size and sha256.
Writing is atomic: files go to a staging folder and are renamed into place, the manifest last, so a folder with a
manifest is always complete.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import shutil
import tempfile

from mlperf_keras.config import counted

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
# A dataset's record layout, versioned on its own so that a change to one dataset's records refuses only that
# dataset's old folders. coco-2017 2: each object's polygon vertices (image/object/polygon/*, Mask R-CNN's targets).
RECORD_VERSIONS = {"coco-2017": 2}
PREPARE_COMMANDS = {"coco-2017": "python -m data_prep.coco"}


class DataError(Exception):
    """Bad or missing input data; the message names the file (and line where it applies)."""


def sha256_of(path: str, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(data_dir: str, workload: str) -> dict:
    """The manifest of a prepared dataset, checked to belong to `workload` (no data file is read)."""
    path = os.path.join(data_dir, MANIFEST_NAME)
    if not os.path.isdir(data_dir):
        raise DataError(f"{data_dir}: no such folder (pass the folder a data_prep command wrote as --data_dir)")
    if not os.path.exists(path):
        raise DataError(f"{path}: missing; {data_dir} is not a prepared dataset "
                        f"(prepare one with python -m data_prep.<dataset> --raw_dir=... --output_dir={data_dir})")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: unreadable manifest ({e})") from None
    if not isinstance(manifest, dict):
        raise DataError(f"{path}: malformed manifest (a JSON object expected, found {type(manifest).__name__})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{path}: format_version {manifest.get('format_version')!r}, this package reads "
                        f"{FORMAT_VERSION}; prepare the data again")
    dataset = manifest.get("dataset")
    if dataset in RECORD_VERSIONS and manifest.get("record_version") != RECORD_VERSIONS[dataset]:
        raise DataError(f"{path}: {dataset} records of version {manifest.get('record_version', 1)!r}, this package "
                        f"reads version {RECORD_VERSIONS[dataset]}; prepare the data again "
                        f"({PREPARE_COMMANDS[dataset]} --raw_dir=... --output_dir={data_dir} --overwrite)")
    # A dataset shared by several workloads (COCO: ssd and maskrcnn) lists them all under "workloads".
    accepted = manifest.get("workloads") or [manifest.get("workload")]
    if workload not in accepted:
        prepared_for = " or ".join(f"--model={name}" for name in accepted)
        raise DataError(f"{path}: this folder was prepared for {prepared_for}, not --model={workload}")
    check_manifest(manifest, path)
    return manifest


def check_manifest(manifest, path: str) -> None:
    """The manifest's structure: counts a mapping of numbers, files a list of {name, bytes, sha256[, rows]} with
    plain file names. A hand-edited or damaged manifest fails here with one line instead of a KeyError later."""
    def bad(what):
        raise DataError(f"{path}: malformed manifest ({what}); prepare the data again")

    if not isinstance(manifest, dict):
        bad(f"a JSON object expected, found {type(manifest).__name__}")
    counts, files = manifest.get("counts"), manifest.get("files")
    if not isinstance(counts, dict):
        bad("no 'counts' object")
    if not isinstance(files, list) or not files:
        bad("no 'files' list")
    names = set()
    for i, entry in enumerate(files):
        if not isinstance(entry, dict):
            bad(f"files[{i}] is not an object")
        name = entry.get("name")
        if not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", ".."):
            bad(f"files[{i}].name {name!r} is not a plain file name")
        if name in names:
            bad(f"{name} listed twice")
        names.add(name)
        for key, kind in (("bytes", int), ("sha256", str)):
            if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
                bad(f"{name}: '{key}' missing or not a {kind.__name__}")
        rows = entry.get("rows")
        if rows is not None and (not isinstance(rows, int) or isinstance(rows, bool) or rows < 0):
            bad(f"{name}: 'rows' {rows!r} is not a count")


# Manifest counts that must equal the rows of one split's files: (count key, split). A manifest edited or damaged so
# that they disagree (a shard entry removed, a count scaled) would make a run log sizes it does not read.
SPLIT_ROW_COUNTS = (("train_positives", "train"), ("eval_users", "eval"),                   # MovieLens (ncf)
                    ("train_images", "train"), ("val_images", "validation"),                # ImageNet, COCO
                    ("train_pairs", "train"), ("eval_sentences", "eval"))                   # WMT


def check_files(data_dir: str, manifest: dict) -> None:
    """The cheap part of the data check, for before the MLPerf log opens: every file the manifest lists exists with
    its size; a .npy file's header holds the rows the manifest says; each split's rows add up to the manifest's
    counts. No data is read (verify_files hashes it, on the clock)."""
    import numpy as np

    for entry in manifest["files"]:
        path = os.path.join(data_dir, entry["name"])
        if not os.path.isfile(path):
            raise DataError(f"{path}: listed in the manifest but missing")
        size = os.path.getsize(path)
        if size != entry["bytes"]:
            raise DataError(f"{path}: {size} bytes, the manifest says {entry['bytes']} (truncated or replaced?)")
        if path.endswith(".npy") and entry.get("rows") is not None:
            try:
                shape = np.load(path, mmap_mode="r", allow_pickle=False).shape  # reads the header only
            except (OSError, ValueError, EOFError) as e:
                raise DataError(f"{path}: not a readable .npy file ({e})") from None
            if not shape or shape[0] != entry["rows"]:
                raise DataError(f"{path}: holds {shape[0] if shape else 0} rows, the manifest says {entry['rows']}")
    counts = manifest["counts"]
    for key, split in SPLIT_ROW_COUNTS:
        files = [f for f in manifest["files"] if f.get("split") == split]
        if key not in counts or not files or any(f.get("rows") is None for f in files):
            continue
        rows = sum(f["rows"] for f in files)
        if rows != counts[key]:
            raise DataError(f"{os.path.join(data_dir, MANIFEST_NAME)}: counts.{key} is {counts[key]} but its "
                            f"{len(files)} {split} files hold {rows} rows (a file removed from the list, or the "
                            f"counts edited?); prepare the data again")


# Training hashes a dataset only up to this size: its check is on the MLPerf clock, and hashing ImageNet's 140 GB
# at every run would dominate a fast run. Larger datasets get the size check; data_prep.verify does the full one.
TRAINING_CHECKSUM_LIMIT_BYTES = 4 << 30


def verify_files(data_dir: str, manifest: dict, progress=print, checksum_limit_bytes: int | None = None,
                 rank: int = 0, world_size: int = 1) -> None:
    """Check the files the manifest lists: present, same size, and same sha256 unless the dataset is larger than
    checksum_limit_bytes (None: always hash). Worker `rank` checks every world_size-th file, so together the workers
    check each file once instead of each reading the whole dataset."""
    total = sum(entry["bytes"] for entry in manifest["files"])
    hash_files = checksum_limit_bytes is None or total <= checksum_limit_bytes
    for entry in manifest["files"][rank::world_size]:
        path = os.path.join(data_dir, entry["name"])
        if not os.path.exists(path):
            raise DataError(f"{path}: listed in the manifest but missing")
        size = os.path.getsize(path)
        if size != entry["bytes"]:
            raise DataError(f"{path}: {size} bytes, the manifest says {entry['bytes']} (truncated or replaced?)")
        if hash_files and sha256_of(path) != entry["sha256"]:
            raise DataError(f"{path}: checksum does not match the manifest (corrupted or replaced?)")
    if progress:
        what = "sizes and checksums" if hash_files else (
            f"sizes only ({total / 2**30:.0f} GiB is too large to hash on the clock; "
            f"python -m data_prep.verify --data_dir={data_dir} checks the checksums)")
        checked = len(manifest["files"][rank::world_size])
        progress(f"verified {checked} of {len(manifest['files'])} files of {data_dir} against its manifest "
                 f"(the other workers check the rest): {what}" if world_size > 1 else
                 f"verified {counted(checked, 'file')} of {data_dir} against its manifest: {what}")


def split_shards(manifest: dict, split: str) -> list[dict]:
    """The manifest entries of one split, in manifest (= shard) order."""
    files = [f for f in manifest["files"] if f.get("split") == split]
    if not files:
        raise DataError(f"the prepared dataset has no {split!r} files (manifest lists "
                        f"{sorted({str(f.get('split')) for f in manifest['files']})})")
    return files


def worker_shards(manifest: dict, split: str, rank: int, world_size: int) -> list[dict]:
    """One worker's shards of a split: every world_size-th from rank, chosen before any shuffling."""
    files = split_shards(manifest, split)
    if len(files) < world_size:
        raise DataError(f"{len(files)} {split} files cannot be shared by {world_size} workers "
                        f"(prepare the data with at least {world_size} {split} shards)")
    return files[rank::world_size]


def worker_files(data_dir: str, manifest: dict, split: str, rank: int, world_size: int) -> list[str]:
    """Paths of one worker's record files (worker_shards)."""
    return [os.path.join(data_dir, f["name"]) for f in worker_shards(manifest, split, rank, world_size)]


def worker_rows(manifest: dict, split: str, rank: int, world_size: int) -> int:
    """How many records worker rank reads from split (the manifest counts rows per file)."""
    return sum(int(f["rows"]) for f in worker_shards(manifest, split, rank, world_size))


def check_epoch_fits(num_images: int, batch_size: int, num_batches: int) -> None:
    """A worker's epoch (num_batches x batch_size samples) must hold each of its num_images training images."""
    if num_images > num_batches * batch_size:
        raise DataError(f"this worker's record files hold {num_images} training images, more than its "
                        f"{num_batches} x {batch_size} samples per epoch: the train shards are unbalanced over the "
                        f"workers (prepare the data with a number of train shards that is a multiple of the worker "
                        f"count, or use fewer workers)")


# The official datasets' sizes: (what, function of the manifest counts, official value). A prepared dataset that
# differs is a subset (or damaged raw data: a tar cut at a member boundary, a truncated CSV); the data_prep commands
# refuse it unless --allow_subset, and every manifest records whether it is the full dataset.
OFFICIAL_COUNTS = {
    "imagenet-2012": (("train images", lambda c: c["train_images"], 1_281_167),
                      ("validation images", lambda c: c["val_images"], 50_000)),
    "coco-2017": (("train2017 images", lambda c: c["train_images"], 118_287),
                  ("val2017 images", lambda c: c["val_images"], 5_000)),
    # ml-20m: every rating lands in train or (one per user) in eval; every ml-20m user has >= 20 ratings.
    "movielens-20m": (("ratings", lambda c: c["train_positives"] + c["eval_users"], 20_000_263),),
    # newstest2014 En-De; the training pair count after the reference's cleaning is not pinned here.
    "wmt17-en-de": (("newstest2014 sentences", lambda c: c["eval_sentences"], 3_003),),
    # GNMT evaluates on the same newstest2014 En-De (data_prep/wmt_gnmt.py).
    "wmt16-en-de": (("newstest2014 sentences", lambda c: c["eval_sentences"], 3_003),),
}

# Whether StagedOutput.commit refuses counts that differ from OFFICIAL_COUNTS: the data_prep commands turn it on
# (unless --allow_subset, data_prep/cli.py); library callers (the demos, tests, benchmarks) prepare small data.
require_official_counts: contextvars.ContextVar[bool] = contextvars.ContextVar("require_official_counts",
                                                                              default=False)


def official_count_mismatches(dataset: str, counts: dict) -> list[str]:
    """'what: N, the official dataset has M' for every official size these counts differ from."""
    out = []
    for what, value_of, official in OFFICIAL_COUNTS.get(dataset, ()):
        try:
            value = value_of(counts)
        except KeyError:
            continue
        if value != official:
            out.append(f"{what}: {value:,}, the official dataset has {official:,}")
    return out


_STAGING_PREFIX = ".staging-"


def _remove_abandoned_staging(output_dir: str) -> None:
    """Staging folders of preparations that were killed (SIGKILL leaves no chance to clean up): their pid is gone."""
    for name in os.listdir(output_dir):
        if not name.startswith(_STAGING_PREFIX):
            continue
        pid = name[len(_STAGING_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
                continue  # still running: another preparation's folder
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)


class StagedOutput:
    """Write a dataset's files into a staging folder; commit() moves them into output_dir, the manifest last.

    On an exception inside the `with` block (SystemExit from SIGTERM included, data_prep/cli.py) the staging folder
    is removed and output_dir is left as it was. Staging folders of killed preparations are removed at the next
    start. With overwrite, files of the old dataset that the new one does not list are removed after the commit.
    """

    def __init__(self, output_dir: str, overwrite: bool = False):
        self.output_dir = output_dir
        if os.path.exists(output_dir) and not os.path.isdir(output_dir):
            raise DataError(f"--output_dir={output_dir} is a file, not a folder")
        if os.path.exists(os.path.join(output_dir, MANIFEST_NAME)) and not overwrite:
            raise DataError(f"{output_dir}: already holds a prepared dataset (pass --overwrite to replace it)")
        try:
            os.makedirs(output_dir, exist_ok=True)
            _remove_abandoned_staging(output_dir)
            self.staging = tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}-", dir=output_dir)
        except OSError as e:
            raise DataError(f"--output_dir={output_dir} is not writable ({e.strerror or e})") from None
        self.files: list[dict] = []

    def path(self, name: str) -> str:
        return os.path.join(self.staging, name)

    def add(self, name: str, rows: int | None = None, **extra) -> dict:
        """Record a file written at self.path(name)."""
        path = self.path(name)
        entry = {"name": name, "bytes": os.path.getsize(path), "sha256": sha256_of(path), **extra}
        if rows is not None:
            entry["rows"] = int(rows)
        self.files.append(entry)
        return entry

    def commit(self, workload: str, dataset: str, counts: dict, **extra) -> dict:
        mismatches = official_count_mismatches(dataset, counts)
        if mismatches and require_official_counts.get():
            raise DataError(f"not the full {dataset} ({'; '.join(mismatches)}): raw files missing or truncated? "
                            f"Pass --allow_subset to prepare a subset on purpose")
        manifest = {"format_version": FORMAT_VERSION, "workload": workload, "dataset": dataset,
                    "counts": counts, "files": self.files, **extra}
        if dataset in OFFICIAL_COUNTS:
            manifest["subset"] = bool(mismatches)
        if dataset in RECORD_VERSIONS:
            manifest["record_version"] = RECORD_VERSIONS[dataset]
        old_manifest = os.path.join(self.output_dir, MANIFEST_NAME)
        old_files = set()
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            with open(old_manifest) as f:
                old_files = {entry["name"] for entry in json.load(f)["files"]}
        with contextlib.suppress(FileNotFoundError):
            os.remove(old_manifest)  # the folder is invalid until the new manifest lands
        for entry in self.files:
            os.replace(self.path(entry["name"]), os.path.join(self.output_dir, entry["name"]))
        tmp = self.path(MANIFEST_NAME)
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
        os.replace(tmp, old_manifest)
        shutil.rmtree(self.staging, ignore_errors=True)
        # --overwrite with fewer shards: the old dataset's other files would sit beside the new one.
        for name in old_files - {entry["name"] for entry in self.files}:
            if os.path.basename(name) == name and name != MANIFEST_NAME:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.output_dir, name))
        return manifest

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        shutil.rmtree(self.staging, ignore_errors=True)
        return False
