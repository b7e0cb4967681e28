"""python -m data_prep.movielens --raw_dir=R --output_dir=D: MovieLens-20M -> the MLPerf NCF dataset.

Reads the official `ml-20m/ratings.csv` (header `userId,movieId,rating,timestamp`); R may be the folder holding
`ml-20m/`, `ml-20m/` itself, or a folder holding the distributed `ml-20m.zip`. As the reference's convert.py
(mlcommons/training fe17e837ed12974d15c86d5173fe8f2c188434d5, recommendation/pytorch/convert.py): every rating is
an implicit positive; users with fewer than 20 ratings are dropped; users and items get dense ids in order of first
appearance in the file; each user's latest rating is the test positive (ties: leave_one_out); everything else is a
training positive. The 999 eval negatives per user are not drawn here: the reference draws them after run_start,
so training draws them at run start (mlperf_keras/inputs/ncf.py draw_eval_negatives). Output: `train-*.npy` (int32
rows user, item) and `eval-*.npy` (int32 rows user, test item), sharded by contiguous user ranges, and
`manifest.json` with counts and checksums.
"""
from __future__ import annotations

import io
import os
import time
import zipfile

import numpy as np
from absl import flags

from data_prep import cli
from mlperf_keras import entry
from mlperf_keras.inputs.manifest import DataError, StagedOutput

HEADER = "userId,movieId,rating,timestamp"
COLUMNS = HEADER.split(",")


def find_ratings(raw_dir: str) -> str:
    """The ratings.csv (or ml-20m.zip) inside raw_dir, accepting the layouts the help text names."""
    candidates = [os.path.join(raw_dir, "ml-20m", "ratings.csv"), os.path.join(raw_dir, "ratings.csv"),
                  os.path.join(raw_dir, "ml-20m.zip")]
    for path in candidates:
        if os.path.isfile(path):
            return path
    if not os.path.isdir(raw_dir):
        raise DataError(f"{raw_dir}: no such folder")
    raise DataError(f"{raw_dir}: no ml-20m/ratings.csv, ratings.csv or ml-20m.zip in it")


def _open_text(path: str):
    if path.endswith(".zip"):
        archive = zipfile.ZipFile(path)
        names = [n for n in archive.namelist() if n.endswith("ratings.csv")]
        if not names:
            raise DataError(f"{path}: holds no ratings.csv")
        return io.TextIOWrapper(archive.open(names[0]), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def read_ratings(path: str):
    """(user ids, item ids, timestamps) as int64 arrays, in file order. Errors name the file and line."""
    import pandas as pd

    try:
        with _open_text(path) as f:
            header = f.readline().strip().lstrip("\ufeff")
    except (OSError, UnicodeDecodeError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: unreadable ({e})") from None
    if not header:
        raise DataError(f"{path}: empty file (expected the header line {HEADER!r})")
    if header != HEADER:
        raise DataError(f"{path}:1: header is {header!r}, expected {HEADER!r}")
    dtypes = {"userId": np.int64, "movieId": np.int64, "rating": np.float32, "timestamp": np.int64}
    if not path.endswith(".zip"):
        # A copy cut short can end inside the last number, which still parses: the official file ends with "\n".
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                raise DataError(f"{path}: does not end with a newline (the file is cut short; copy it again)")
    try:
        with _open_text(path) as f:
            frame = pd.read_csv(f, dtype=dtypes, engine="c")
    except (ValueError, pd.errors.ParserError) as e:
        raise DataError(_locate_bad_line(path) or f"{path}: {e}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:  # a zip member with a bad CRC fails while it is read
        raise DataError(f"{path}: unreadable ({e}); download it again") from None
    if frame.isna().any().any():
        raise DataError(_locate_bad_line(path) or f"{path}: missing values")
    if len(frame) == 0:
        raise DataError(f"{path}: no ratings after the header")
    return (frame["userId"].to_numpy(), frame["movieId"].to_numpy(), frame["timestamp"].to_numpy())


def _locate_bad_line(path: str) -> str | None:
    """Slow path, only after a parse failure: find the first line whose fields are not all numbers."""
    with _open_text(path) as f:
        f.readline()
        for lineno, line in enumerate(f, start=2):
            fields = line.rstrip("\r\n").split(",")
            if len(fields) != len(COLUMNS):
                return f"{path}:{lineno}: expected {len(COLUMNS)} fields ({HEADER}), found {len(fields)}: {line.strip()!r}"
            for name, value in zip(COLUMNS, fields):
                try:
                    float(value) if name == "rating" else int(value)
                except ValueError:
                    return f"{path}:{lineno}: {name} is not a number: {value!r}"
    return None


def leave_one_out(users: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
    """Boolean mask of each user's test rating: the latest one, ties broken as the reference's sort breaks them.

    The reference (mlcommons/training fe17e837ed12974d15c86d5173fe8f2c188434d5, recommendation/pytorch/convert.py)
    sorts the filtered ratings, in file order, with df.sort_values(by='timestamp') on the datetime64 column that
    load.py makes, then pops the last item of each user's list; NVIDIA's v0.5 convert.py does the same sort and
    keeps tail(1). pandas' default sort is NumPy's quicksort, which is not stable: among a user's ratings with equal
    timestamps, the test rating is whichever that quicksort leaves last. This does the same: np.argsort(kind=
    "quicksort") over datetime64 values (NumPy's generic introsort; for int64 keys NumPy >= 1.25 dispatches to SIMD
    sorts that order ties differently, which datetime64 avoids), then the last of each user's rows in that order.
    Google's v0.5 submission replays this sort for the same reason (data_preprocessing.py, match_mlperf). Caveat:
    NumPy >= 1.17 added a heapsort fallback to that quicksort for pathologically deep partitions; we have not run
    the reference's 2018 stack (NumPy 1.13) to compare the held-out items one by one.
    users: dense user ids; timestamps: seconds; both in file order after the min-ratings filter.
    """
    order = np.argsort(np.asarray(timestamps, np.int64).astype("datetime64[s]"), kind="quicksort")
    by_user = order[np.argsort(users[order], kind="stable")]   # per user, rows in the quicksort's order
    last_of_user = np.ones(len(by_user), dtype=bool)
    last_of_user[:-1] = users[by_user][1:] != users[by_user][:-1]
    mask = np.zeros(len(users), dtype=bool)
    mask[by_user[last_of_user]] = True
    return mask


def _shard_bounds(user_of_row: np.ndarray, num_users: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous user ranges with about equal numbers of rows."""
    counts = np.bincount(user_of_row, minlength=num_users)
    cumulative = np.cumsum(counts)
    targets = cumulative[-1] * np.arange(1, num_shards) / num_shards
    cuts = np.unique(np.concatenate([[0], np.searchsorted(cumulative, targets, side="right"), [num_users]]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def first_appearance_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense id of every value, the original values by dense id): ids in order of first appearance, as the
    reference's `df[column].unique()` + enumerate map (NVIDIA's pd.factorize gives the same)."""
    originals, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first)
    dense = np.empty(len(originals), np.int64)
    dense[by_appearance] = np.arange(len(originals))
    return dense[inverse], originals[by_appearance]


def prepare(raw_dir: str, output_dir: str, min_ratings: int = 20, num_shards: int = 16, overwrite: bool = False,
            log=print) -> dict:
    t0 = time.time()
    source = find_ratings(raw_dir)
    log(f"reading {source}")
    users_raw, items_raw, timestamps = read_ratings(source)
    log(f"  {len(users_raw):,} ratings read in {time.time() - t0:.1f} s")

    _, user_idx, user_counts = np.unique(users_raw, return_inverse=True, return_counts=True)
    keep = user_counts[user_idx] >= min_ratings
    if not keep.any():
        raise DataError(f"{source}: no user has {min_ratings} or more ratings")
    users, user_ids = first_appearance_ids(users_raw[keep])
    items, item_ids = first_appearance_ids(items_raw[keep])
    del users_raw, items_raw
    timestamps = timestamps[keep]
    num_users, num_items = len(user_ids), len(item_ids)
    users, items = users.astype(np.int32), items.astype(np.int32)
    log(f"  {num_users:,} users with >= {min_ratings} ratings, {num_items:,} items, {len(users):,} ratings")

    test = leave_one_out(users, timestamps)
    test_item = np.empty(num_users, dtype=np.int32)
    test_item[users[test]] = items[test]

    train_order = np.argsort(users[~test], kind="stable")
    train = np.stack([users[~test][train_order], items[~test][train_order]], axis=1).astype(np.int32)
    del users, items, timestamps, test
    eval_rows = np.stack([np.arange(num_users, dtype=np.int32), test_item], axis=1)

    with StagedOutput(output_dir, overwrite=overwrite) as out:
        bounds = _shard_bounds(train[:, 0], num_users, num_shards)
        row_cuts = np.searchsorted(train[:, 0], [lo for lo, _ in bounds] + [num_users])
        for k, (lo, hi) in enumerate(bounds):
            name = f"train-{k:05d}-of-{len(bounds):05d}.npy"
            np.save(out.path(name), train[row_cuts[k]:row_cuts[k + 1]])
            out.add(name, rows=row_cuts[k + 1] - row_cuts[k], split="train", users=[lo, hi])
            name = f"eval-{k:05d}-of-{len(bounds):05d}.npy"
            np.save(out.path(name), eval_rows[lo:hi])
            out.add(name, rows=hi - lo, split="eval", users=[lo, hi])
            log(f"  wrote shard {k + 1}/{len(bounds)}")
        counts = {"num_users": num_users, "num_items": num_items, "train_positives": int(len(train)),
                  "eval_users": num_users}
        manifest = out.commit("ncf", "movielens-20m", counts,
                              options={"min_ratings": min_ratings, "num_shards": len(bounds)},
                              source={"file": os.path.abspath(source), "bytes": os.path.getsize(source)})
    log(f"prepared {output_dir}: {counts}")
    return manifest


FLAGS = flags.FLAGS


def define_flags():
    """Flags exist only when this module is the program (training imports prepare() for the demo)."""
    cli.define_common_flags("Folder holding ml-20m/ratings.csv (or ml-20m/ itself, or ml-20m.zip).")
    # absl's --help lists only the main module's own flags: show --raw_dir/--output_dir too.
    flags.adopt_module_key_flags(cli)
    flags.DEFINE_integer("min_ratings", 20, "Drop users with fewer ratings (MLPerf: 20).")
    flags.DEFINE_integer("num_shards", 16, "Number of train/eval shard pairs (contiguous user ranges).")


def main(argv):
    del argv
    cli.run_or_report(prepare, FLAGS.raw_dir, FLAGS.output_dir, min_ratings=FLAGS.min_ratings,
                      num_shards=FLAGS.num_shards, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
    define_flags()
    entry.run(main)
