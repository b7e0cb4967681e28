"""python -m data_prep.movielens --raw_dir=R --output_dir=D: MovieLens-20M -> the MLPerf NCF dataset.

Reads the official `ml-20m/ratings.csv` (header `userId,movieId,rating,timestamp`); R may be the folder holding
`ml-20m/`, `ml-20m/` itself, or a folder holding the distributed `ml-20m.zip`. As the MLPerf reference does:
every rating is an implicit positive; users with fewer than 20 ratings are dropped; users and items are re-indexed
densely (sorted original ids); each user's latest rating (ties: the earlier line in the file) is the test positive;
999 eval negatives per user are drawn with a fixed seed, without replacement, from items that user never rated;
everything else is a training positive. Output: `train-*.npy` (int32 rows user,item) and `eval-*.npy` (int32 rows
user, test item, 999 negatives), sharded by contiguous user ranges, and `manifest.json` with counts and checksums.
"""
from __future__ import annotations

import io
import os
import time
import zipfile

import numpy as np
from absl import app, flags

from data_prep import cli
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
    """Boolean mask of each user's test rating: the latest; among equal timestamps the earliest line in the file.

    This is pandas' rank(method='first', ascending=False) == 1 per user, as in the reference's convert.py.
    """
    rows = np.arange(len(users))
    order = np.lexsort((rows, -timestamps, users))
    first_of_user = np.ones(len(order), dtype=bool)
    first_of_user[1:] = users[order][1:] != users[order][:-1]
    mask = np.zeros(len(users), dtype=bool)
    mask[order[first_of_user]] = True
    return mask


def sample_eval_negatives(users: np.ndarray, items: np.ndarray, num_users: int, num_items: int,
                          num_negatives: int, seed: int, chunk: int = 4096) -> np.ndarray:
    """(num_users, num_negatives) int32: per user, items drawn uniformly without replacement from those never rated.

    Vectorised over chunks of users: draw extra candidates, drop rated items (a dense rated-mask per chunk) and
    repeats (keeping draw order, so the sample stays uniform), take the first num_negatives; the rare user who
    rated most items falls back to an exact draw from their complement.
    """
    rated_keys = np.unique(users.astype(np.int64) * num_items + items)
    rated_count = np.bincount(users, minlength=num_users)
    too_many = np.flatnonzero(num_items - rated_count < num_negatives)
    if too_many.size:
        u = int(too_many[0])
        raise DataError(f"user index {u} rated {rated_count[u]} of {num_items} items, leaving fewer than "
                        f"{num_negatives} to draw eval negatives from (use a smaller --eval_negatives)")
    rng = np.random.default_rng(seed)
    out = np.empty((num_users, num_negatives), dtype=np.int32)
    draws = int(num_negatives * 1.25) + 32
    for lo in range(0, num_users, chunk):
        hi = min(lo + chunk, num_users)
        start, stop = np.searchsorted(rated_keys, [lo * num_items, hi * num_items])
        rated = np.zeros((hi - lo, num_items), dtype=bool)
        chunk_keys = rated_keys[start:stop] - lo * num_items
        rated[chunk_keys // num_items, chunk_keys % num_items] = True
        cand = rng.integers(0, num_items, size=(hi - lo, draws), dtype=np.int32)
        valid = ~np.take_along_axis(rated, cand, axis=1)
        order = np.argsort(cand, axis=1, kind="stable")
        sorted_cand = np.take_along_axis(cand, order, axis=1)
        repeat = np.zeros_like(valid)
        np.put_along_axis(repeat, order[:, 1:], sorted_cand[:, 1:] == sorted_cand[:, :-1], axis=1)
        valid &= ~repeat
        taken = np.cumsum(valid, axis=1)
        short = taken[:, -1] < num_negatives
        keep = valid & (taken <= num_negatives)
        full_rows = np.flatnonzero(~short)
        out[lo + full_rows] = cand[full_rows][keep[full_rows]].reshape(len(full_rows), num_negatives)
        for row in np.flatnonzero(short):  # users with very many ratings: exact draw from the complement
            out[lo + row] = rng.choice(np.flatnonzero(~rated[row]), size=num_negatives, replace=False)
    return out


def _shard_bounds(user_of_row: np.ndarray, num_users: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous user ranges with about equal numbers of rows."""
    counts = np.bincount(user_of_row, minlength=num_users)
    cumulative = np.cumsum(counts)
    targets = cumulative[-1] * np.arange(1, num_shards) / num_shards
    cuts = np.unique(np.concatenate([[0], np.searchsorted(cumulative, targets, side="right"), [num_users]]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def prepare(raw_dir: str, output_dir: str, min_ratings: int = 20, eval_negatives: int = 999, seed: int = 0,
            num_shards: int = 16, overwrite: bool = False, log=print) -> dict:
    t0 = time.time()
    source = find_ratings(raw_dir)
    log(f"reading {source}")
    users_raw, items_raw, timestamps = read_ratings(source)
    log(f"  {len(users_raw):,} ratings read in {time.time() - t0:.1f} s")

    user_ids, user_idx, user_counts = np.unique(users_raw, return_inverse=True, return_counts=True)
    keep = user_counts[user_idx] >= min_ratings
    if not keep.any():
        raise DataError(f"{source}: no user has {min_ratings} or more ratings")
    del users_raw
    user_ids, users = np.unique(user_ids[user_idx[keep]], return_inverse=True)
    item_ids, items = np.unique(items_raw[keep], return_inverse=True)
    timestamps = timestamps[keep]
    num_users, num_items = len(user_ids), len(item_ids)
    users, items = users.astype(np.int32), items.astype(np.int32)
    log(f"  {num_users:,} users with >= {min_ratings} ratings, {num_items:,} items, {len(users):,} ratings")

    test = leave_one_out(users, timestamps)
    test_item = np.empty(num_users, dtype=np.int32)
    test_item[users[test]] = items[test]
    log(f"drawing {eval_negatives} eval negatives per user (seed {seed})")
    t1 = time.time()
    negatives = sample_eval_negatives(users, items, num_users, num_items, eval_negatives, seed)
    log(f"  drawn in {time.time() - t1:.1f} s")

    train_order = np.argsort(users[~test], kind="stable")
    train = np.stack([users[~test][train_order], items[~test][train_order]], axis=1).astype(np.int32)
    del users, items, timestamps, test
    eval_rows = np.concatenate([np.arange(num_users, dtype=np.int32)[:, None], test_item[:, None], negatives], axis=1)
    del negatives

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
                  "eval_users": num_users, "eval_negatives": eval_negatives}
        manifest = out.commit("ncf", "movielens-20m", counts,
                              options={"min_ratings": min_ratings, "seed": seed, "num_shards": len(bounds)},
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
    flags.DEFINE_integer("eval_negatives", 999, "Eval negatives per user (MLPerf: 999).")
    flags.DEFINE_integer("seed", 0, "Seed of the eval-negative draw (fixed, so every run evaluates the same set).")
    flags.DEFINE_integer("num_shards", 16, "Number of train/eval shard pairs (contiguous user ranges).")


def main(argv):
    del argv
    cli.run_or_report(prepare, FLAGS.raw_dir, FLAGS.output_dir, min_ratings=FLAGS.min_ratings,
                      eval_negatives=FLAGS.eval_negatives, seed=FLAGS.seed, num_shards=FLAGS.num_shards,
                      overwrite=FLAGS.overwrite)


if __name__ == "__main__":
    define_flags()
    app.run(main)
