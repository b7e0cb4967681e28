"""python -m data_prep.download --dataset=X --raw_dir=R: fetch a dataset's official raw files into R.

What each --dataset fetches, from where, and what is verified (then run the data_prep command it names on R):
  movielens  https://files.grouplens.org/datasets/movielens/ml-20m.zip. Verified: md5 against the one GroupLens
             publishes beside it (ml-20m.zip.md5: cd245b17a1ae2cc31bb14903e1204af3; the MLPerf reference checks the
             same value, mlcommons/training recommendation/pytorch/verify_dataset.sh at 72251ed9).
  coco2017   http://images.cocodataset.org/zips/train2017.zip, .../zips/val2017.zip and
             .../annotations/annotations_trainval2017.zip, extracted into R (annotations/, train2017/, val2017/).
             COCO publishes no checksums, so nothing is verified beyond the length the server announces.
  wmt17      the archives the MLPerf Transformer reference downloads (mlcommons/training
             translation/data_download.py at 3ba68748): training-parallel-nc-v12.tgz and dev.tgz from
             data.statmt.org/wmt17, training-parallel-commoncrawl.tgz and training-parallel-europarl-v7.tgz from
             www.statmt.org/wmt13. dev.tgz holds newstest2014 (the BLEU test set). data_prep.wmt reads them as they
             are, for the Transformer. statmt.org publishes no checksums: nothing is verified beyond the announced
             length.
  wmt16      the GNMT reference's own list (mlcommons/training rnn_translator/download_dataset.sh at 59578e4a):
             europarl v7 de-en.tgz, commoncrawl, training-parallel-nc-v11.tgz, WMT16 dev.tgz and test.tgz. No
             checksums published. python -m data_prep.wmt --workload=gnmt (data_prep.wmt_gnmt) reads them as they
             are (news-commentary v11, as the reference).
  imagenet   needs an account: prints where to get ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar and
             ILSVRC2012_devkit_t12.tar.gz and where to put them, and checks the md5 of those already in R against
             the values torchvision lists (pytorch/vision torchvision/datasets/imagenet.py, ARCHIVE_META).

Every file is downloaded to <name>.part and renamed to <name> only when complete and verified; a cut download
resumes from the .part file (HTTP Range) on the next run; a file whose checksum does not match is deleted and the
run fails. The sha256 of every downloaded file is appended to R/SHA256SUMS (`sha256sum -c SHA256SUMS` re-checks
them). A line per file reports progress every --progress_seconds. Errors are one line on stderr, exit status 2.
Exit status 1: --dataset=imagenet and some of its three files are not in R yet (the steps above say where to get
them); 0 when every file is there and verified; 130 on Ctrl-C (run it again to resume).
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import http.client
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

from absl import flags

from mlperf_keras import entry
from mlperf_keras.inputs.manifest import DataError


@dataclasses.dataclass(frozen=True)
class Source:
    url: str
    md5: str | None = None    # the checksum the publisher gives; None where it gives none
    extract: bool = False     # unzip into raw_dir once downloaded (data_prep reads the folders)

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[1]


_STATMT17 = "http://data.statmt.org/wmt17/translation-task/"
_STATMT16 = "http://data.statmt.org/wmt16/translation-task/"
DATASETS = {
    "movielens": [Source("https://files.grouplens.org/datasets/movielens/ml-20m.zip",
                         md5="cd245b17a1ae2cc31bb14903e1204af3")],
    "coco2017": [Source("http://images.cocodataset.org/annotations/annotations_trainval2017.zip", extract=True),
                 Source("http://images.cocodataset.org/zips/val2017.zip", extract=True),
                 Source("http://images.cocodataset.org/zips/train2017.zip", extract=True)],
    "wmt17": [Source(_STATMT17 + "training-parallel-nc-v12.tgz"),
              Source("http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"),
              Source("http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"),
              Source(_STATMT17 + "dev.tgz")],
    "wmt16": [Source("http://www.statmt.org/europarl/v7/de-en.tgz"),
              Source("http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"),
              Source(_STATMT16 + "training-parallel-nc-v11.tgz"),
              Source(_STATMT16 + "dev.tgz"),
              Source(_STATMT16 + "test.tgz")],
}
NEXT_STEP = {
    "movielens": "python -m data_prep.movielens --raw_dir={raw} --output_dir=D",
    "coco2017": "python -m data_prep.coco --raw_dir={raw} --output_dir=D",
    "wmt17": "python -m data_prep.wmt --raw_dir={raw} --output_dir=D",
    "wmt16": "python -m data_prep.wmt --workload=gnmt --raw_dir={raw} --output_dir=D",
    "imagenet": "python -m data_prep.imagenet --raw_dir={raw} --output_dir=D",
}
# md5 of the ILSVRC2012 files, as torchvision lists them (pytorch/vision torchvision/datasets/imagenet.py).
IMAGENET_FILES = {"ILSVRC2012_img_train.tar": ("138 GB", "1d675b47d978889d74fa0da5fadfb00e"),
                  "ILSVRC2012_img_val.tar": ("6.3 GB", "29b22e2961454d5413ddabcf34fc5622"),
                  "ILSVRC2012_devkit_t12.tar.gz": ("2.5 MB", "fa75699e90414af021442c21a62c3abf")}
SUMS_NAME = "SHA256SUMS"
_CHUNK = 1 << 20


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError


def _hash_file(path: str, digests, log, label: str, progress_seconds: float) -> None:
    """Feed an existing file into the digests (a resumed download, or a file already in place)."""
    total, done, last = os.path.getsize(path), 0, time.monotonic()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK * 4):
            for digest in digests:
                digest.update(block)
            done += len(block)
            if time.monotonic() - last >= progress_seconds:
                log(f"  {label}: checksumming {_size(done)} / {_size(total)}")
                last = time.monotonic()


def fetch(source: Source, raw_dir: str, log=print, progress_seconds: float = 10.0, timeout_s: float = 60.0) -> str:
    """Download source.url to raw_dir/<name> (resuming raw_dir/<name>.part); returns the file's sha256."""
    final = os.path.join(raw_dir, source.name)
    part = final + ".part"
    if os.path.exists(final):
        if source.md5 is None:
            log(f"{source.name}: already in {raw_dir} (nothing published to verify it against)")
            return ""
        md5 = hashlib.md5()
        _hash_file(final, [md5], log, source.name, progress_seconds)
        if md5.hexdigest() != source.md5:
            raise DataError(f"{final}: md5 {md5.hexdigest()}, but the publisher's is {source.md5}; delete the file "
                            f"and run again")
        log(f"{source.name}: already in {raw_dir}, md5 verified")
        return ""
    os.makedirs(raw_dir, exist_ok=True)
    with open(part, "ab") as out:
        try:
            fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"{part}: another process is downloading this file") from None
        sha256, md5 = hashlib.sha256(), hashlib.md5()
        offset = os.path.getsize(part)
        request = urllib.request.Request(source.url, headers={"User-Agent": "mlperf_keras data_prep.download"})
        if offset:
            request.add_header("Range", f"bytes={offset}-")
        response = unsatisfiable = None
        try:
            response = urllib.request.urlopen(request, timeout=timeout_s)
        except urllib.error.HTTPError as e:
            if e.code != 416 or not offset:
                raise DataError(f"{source.url}: HTTP {e.code} {e.reason}") from None
            unsatisfiable = e.headers.get("Content-Range")   # the .part is complete, or larger than the file
        except (urllib.error.URLError, OSError) as e:
            raise DataError(f"{source.url}: {getattr(e, 'reason', e)}") from None
        if response is None:
            total = _total_from_content_range(unsatisfiable)
            if total != offset:
                out.truncate(0)
                raise DataError(f"{part}: {_size(offset)} already, more than the server's file; the partial file "
                                f"was emptied, run again")
        else:
            with response:
                total = _expected_total(response, offset)
                if offset and response.status != 206:
                    log(f"{source.name}: the server does not resume downloads; starting again from 0")
                    out.truncate(0)
                    offset = 0
                elif offset:
                    log(f"{source.name}: resuming at {_size(offset)}")
                if offset:
                    _hash_file(part, [sha256, md5], log, source.name, progress_seconds)
                try:
                    _copy(response, out, [sha256, md5], offset, total, source.name, log, progress_seconds)
                except (OSError, http.client.HTTPException) as e:
                    out.flush()
                    raise DataError(f"{source.url}: connection lost at {_size(os.path.getsize(part))} "
                                    f"({type(e).__name__}); run again to resume") from None
        size = os.path.getsize(part)
        if total is not None and size != total:
            raise DataError(f"{source.url}: the connection ended at {_size(size)} of {_size(total)}; run again to "
                            f"resume")
        if response is None:   # 416 on a complete .part: nothing was streamed, hash what is there
            _hash_file(part, [sha256, md5], log, source.name, progress_seconds)
        if source.md5 is not None and md5.hexdigest() != source.md5:
            os.remove(part)
            raise DataError(f"{source.name}: md5 {md5.hexdigest()}, but the publisher's is {source.md5}; the "
                            f"download was deleted, run again")
        os.replace(part, final)
    verified = "md5 verified" if source.md5 else "no published checksum"
    log(f"{source.name}: done, {_size(size)}, {verified}, sha256 {sha256.hexdigest()}")
    with open(os.path.join(raw_dir, SUMS_NAME), "a") as sums:
        sums.write(f"{sha256.hexdigest()}  {source.name}\n")
    return sha256.hexdigest()


def _total_from_content_range(value: str | None) -> int | None:
    match = re.search(r"/(\d+)\s*$", value or "")
    return int(match.group(1)) if match else None


def _expected_total(response, offset: int) -> int | None:
    if response.status == 206:
        value = response.headers.get("Content-Range", "")
        match = re.match(r"bytes (\d+)-\d+/(\d+|\*)", value)
        if not match or int(match.group(1)) != offset:
            raise DataError(f"{response.url}: asked to resume at byte {offset}, got Content-Range {value!r}")
        return int(match.group(2)) if match.group(2) != "*" else None
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _copy(response, out, digests, offset: int, total: int | None, label: str, log, progress_seconds: float):
    start = last = time.monotonic()
    done = offset
    while block := response.read(_CHUNK):
        out.write(block)
        for digest in digests:
            digest.update(block)
        done += len(block)
        now = time.monotonic()
        if now - last >= progress_seconds:
            rate = (done - offset) / max(now - start, 1e-9)
            line = f"  {label}: {_size(done)}"
            if total:
                eta = (total - done) / rate if rate > 0 else float("inf")
                line += f" / {_size(total)} ({100 * done / total:.1f}%), {_size(rate)}/s, ETA {_clock(eta)}"
            else:
                line += f", {_size(rate)}/s"
            log(line)
            last = now
    out.flush()


def _clock(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def extract(zip_path: str, raw_dir: str, log=print) -> None:
    """Unzip into raw_dir through a temporary folder beside it, so a cut extraction leaves nothing half-written."""
    with zipfile.ZipFile(zip_path) as archive:
        tops = sorted({name.split("/", 1)[0] for name in archive.namelist() if name.strip("/")})
        if tops and all(os.path.exists(os.path.join(raw_dir, top)) for top in tops):
            log(f"{os.path.basename(zip_path)}: already extracted ({', '.join(tops)})")
            return
        log(f"{os.path.basename(zip_path)}: extracting {len(archive.namelist()):,} entries")
        staging = tempfile.mkdtemp(dir=raw_dir, prefix=".extract-")
        try:
            archive.extractall(staging)
            for top in tops:
                target = os.path.join(raw_dir, top)
                if os.path.exists(target):
                    raise DataError(f"{target}: exists but is not what {os.path.basename(zip_path)} holds in "
                                    f"full; move it away and run again")
                os.replace(os.path.join(staging, top), target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def imagenet_instructions(raw_dir: str) -> str:
    files = "\n".join(f"    {name}  ({size})" for name, (size, _) in IMAGENET_FILES.items())
    return (f"ImageNet (ILSVRC2012) cannot be downloaded without an account:\n"
            f"  1. at https://image-net.org/download.php create an account, log in and accept the terms of access\n"
            f"     (non-commercial research and education only)\n"
            f"  2. from the ILSVRC 2012 (ImageNet-1k) download page, download\n{files}\n"
            f"     (the last is the Development kit, Task 1 & 2)\n"
            f"  3. put the three files, as they are (not extracted), into {os.path.abspath(raw_dir)}\n"
            f"  4. python -m data_prep.download --dataset=imagenet --raw_dir={raw_dir}   (checks their md5)\n"
            f"  5. {NEXT_STEP['imagenet'].format(raw=raw_dir)}")


def check_imagenet(raw_dir: str, log=print, progress_seconds: float = 10.0) -> bool:
    """md5 of the ILSVRC2012 files present in raw_dir; True when all three are there and match."""
    complete = True
    for name, (_, expected) in IMAGENET_FILES.items():
        path = os.path.join(raw_dir, name)
        if not os.path.exists(path):
            log(f"{name}: not in {raw_dir} yet")
            complete = False
            continue
        md5 = hashlib.md5()
        _hash_file(path, [md5], log, name, progress_seconds)
        if md5.hexdigest() != expected:
            raise DataError(f"{path}: md5 {md5.hexdigest()}, expected {expected}; download it again")
        log(f"{name}: md5 verified")
    return complete


def download(dataset: str, raw_dir: str, log=print, progress_seconds: float = 10.0) -> bool:
    """Fetch (or, for ImageNet, explain and check) a dataset's raw files; True when everything is in raw_dir."""
    if dataset == "imagenet":
        log(imagenet_instructions(raw_dir))
        return os.path.isdir(raw_dir) and check_imagenet(raw_dir, log, progress_seconds)
    if dataset not in DATASETS:
        raise DataError(f"--dataset={dataset}: choose one of {', '.join([*DATASETS, 'imagenet'])}")
    for source in DATASETS[dataset]:
        fetch(source, raw_dir, log, progress_seconds)
        if source.extract:
            extract(os.path.join(raw_dir, source.name), raw_dir, log)
    log(f"all {dataset} files are in {raw_dir}; next: {NEXT_STEP[dataset].format(raw=raw_dir)}")
    return True


FLAGS = flags.FLAGS


def define_flags():
    """Defined here, in the module that runs, so that --help shows them."""
    flags.DEFINE_enum("dataset", None, [*DATASETS, "imagenet"], "What to fetch: movielens (ml-20m.zip, NCF), "
                      "coco2017 (SSD, Mask R-CNN), wmt17 (Transformer), wmt16 (GNMT: the GNMT reference's files), imagenet (prints how to get it: it needs an account).")
    flags.DEFINE_string("raw_dir", None, "Folder to download into (created if missing); then the data_prep "
                        "command's --raw_dir.")
    flags.DEFINE_float("progress_seconds", 10.0, "Seconds between progress lines.")
    flags.mark_flags_as_required(["dataset", "raw_dir"])


def main(argv):
    del argv
    try:
        complete = download(FLAGS.dataset, FLAGS.raw_dir, progress_seconds=FLAGS.progress_seconds)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume", file=sys.stderr)
        sys.exit(130)
    sys.exit(0 if complete else 1)


if __name__ == "__main__":
    define_flags()
    entry.run(main)
