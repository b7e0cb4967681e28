"""The built-in demos' data, by workload name: small raw data generated in the official raw format, then prepared by
that dataset's own data_prep command, once per cache folder. train.py calls prepare() when no --data_dir is given.

Here rather than in the workloads, so that the package (mlperf_keras) never imports the data_prep commands."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Demo:
    what: str                                   # what write_raw generates, for its log line
    write_raw: Callable[[str], None]            # raw_dir
    prepare_raw: Callable[[str, str, Callable], None]   # raw_dir, prepared_dir, log
    version: int = 1                            # raised when the generated data changes, so old caches are not reused


def demo_root(name: str, cache_dir: str) -> str:
    """Where workload `name`'s demo data lives in cache_dir: <name> for the first version of its data, <name>-v<N>
    after it changed (a cache prepared by an older release keeps its folder and is left alone)."""
    version = DEMOS[name].version
    return os.path.join(cache_dir, name if version == 1 else f"{name}-v{version}")


def _write_ncf(raw_dir):
    from data_prep import demo_movielens

    demo_movielens.write_ratings_csv(os.path.join(raw_dir, "ml-20m", "ratings.csv"),
                                     num_users=2000, num_items=2000, seed=2020)


def _prepare_ncf(raw_dir, prepared_dir, log):
    from data_prep import movielens

    movielens.prepare(raw_dir, prepared_dir, overwrite=True, log=log)


def _write_resnet(raw_dir):
    from data_prep import demo_imagenet

    demo_imagenet.write_raw(raw_dir, num_classes=10, train_per_class=64, val_images=200, size=(40, 32), seed=2020)


def _prepare_resnet(raw_dir, prepared_dir, log):
    from data_prep import imagenet

    imagenet.prepare(raw_dir, prepared_dir, train_shards=8, val_shards=2, num_workers=0, overwrite=True, log=log)


def _write_ssd(raw_dir):
    from data_prep import demo_coco

    # Larger objects of only the 5 drawn classes: the SSD demo's head and loss shrink to 6 outputs (workloads/ssd.py
    # demo settings give the measurements).
    demo_coco.write_raw(raw_dir, num_train=128, num_val=32, seed=2020, object_size=(0.2, 0.7), all_categories=False)


def _prepare_ssd(raw_dir, prepared_dir, log):
    from data_prep import coco

    coco.prepare(raw_dir, prepared_dir, train_shards=4, val_shards=2, num_workers=0, overwrite=True, log=log)


def _write_maskrcnn(raw_dir):
    from data_prep import demo_coco

    # Both orientations, so the demo trains both padded shapes as the real data does.
    demo_coco.write_raw(raw_dir, num_train=64, num_val=16, size=((160, 320), (160, 320)), seed=2021)


def _prepare_maskrcnn(raw_dir, prepared_dir, log):
    from data_prep import coco

    coco.prepare(raw_dir, prepared_dir, train_shards=2, val_shards=1, num_workers=0, overwrite=True, log=log)


def _write_gnmt(raw_dir):
    from data_prep import wmt_gnmt

    wmt_gnmt.write_demo_raw(raw_dir, num_pairs=6_000, num_test=200, seed=2016)


def _prepare_gnmt(raw_dir, prepared_dir, log):
    from data_prep import wmt_gnmt

    wmt_gnmt.prepare(raw_dir, prepared_dir, merges=500, max_length=20, num_shards=4, threads=1, overwrite=True,
                     log=log)


def _write_transformer(raw_dir):
    from data_prep import wmt

    wmt.write_demo_raw(raw_dir, num_pairs=10_000, num_test=200, task="copy", seed=2017, archives=True)


def _prepare_transformer(raw_dir, prepared_dir, log):
    from data_prep import wmt

    wmt.prepare(raw_dir, prepared_dir, vocab_size=48, max_length=32, num_shards=4, byte_fallback=False,
                overwrite=True, log=log)


DEMOS = {
    "ncf": Demo("a small MovieLens-format ratings.csv", _write_ncf, _prepare_ncf),
    "resnet": Demo("small ImageNet-format tars (10 classes)", _write_resnet, _prepare_resnet),
    # v2: only the 5 drawn classes, objects of 20-70% of the side (v1 listed COCO's 80 and drew smaller objects).
    "ssd": Demo("a small COCO-format dataset", _write_ssd, _prepare_ssd, version=2),
    "maskrcnn": Demo("a small COCO-format dataset with masks", _write_maskrcnn, _prepare_maskrcnn),
    "gnmt": Demo("a small WMT16-format corpus (German = English words translated word by word)", _write_gnmt,
                 _prepare_gnmt),
    "transformer": Demo("a small WMT-format corpus (the German side copies the English)", _write_transformer,
                        _prepare_transformer),
}


def prepare(name: str, cache_dir: str, log=print, wait_timeout_s: float = 1800.0) -> str:
    """The prepared demo dataset of workload `name` under cache_dir, generated (official raw format) and prepared
    once.

    Safe when several workers start on an empty cache at once (horovodrun -np N without --data_dir): the
    process holding an exclusive lock on demo_root(name, cache_dir)/.prepare.lock generates and prepares, the others wait
    for it (a line every 30 s; a DataError after wait_timeout_s) and then read what it prepared."""
    from mlperf_keras.inputs.manifest import DataError, read_manifest

    demo = DEMOS[name]
    root = demo_root(name, cache_dir)
    prepared = os.path.join(root, "prepared")

    def ready() -> bool:
        try:
            read_manifest(prepared, name)
            return True
        except DataError:
            return False

    if ready():
        return prepared
    os.makedirs(root, exist_ok=True)
    with exclusive_lock(os.path.join(root, ".prepare.lock"), wait_timeout_s, log, what=f"the {name} demo data"):
        if not ready():  # whoever held the lock before may have prepared it
            raw = os.path.join(root, "raw")
            log(f"demo: generating {demo.what} under {raw}")
            demo.write_raw(raw)
            demo.prepare_raw(raw, prepared, lambda msg: log(f"demo: {msg}"))
    return prepared


@contextlib.contextmanager
def exclusive_lock(path: str, timeout_s: float, log, what: str, report_every_s: float = 30.0, poll_s: float = 0.2):
    """Hold an exclusive flock on path (created if missing) for the with-block; wait at most timeout_s for it.

    The kernel releases a flock when its holder exits, even by a crash, so a lock file left behind is never stale.
    flock works between processes of one machine; on a network file system shared by several hosts it may not."""
    import fcntl
    import time

    from mlperf_keras.inputs.manifest import DataError

    with open(path, "a") as lock:
        start, last_report = time.monotonic(), None
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            now = time.monotonic()
            if now - start >= timeout_s:
                raise DataError(f"waited {now - start:.0f} s for another process to prepare {what} (it holds the "
                                f"lock {path}); stop that process if it hangs, then run again")
            if last_report is None or now - last_report >= report_every_s:
                log(f"waiting for another process to prepare {what} ({now - start:.0f} s)")
                last_report = now
            time.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
