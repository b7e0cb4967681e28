"""data_prep.movielens on hand-made ratings.csv files: leave-one-out, negatives, determinism, errors."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from data_prep import movielens
from mlperf_keras.inputs.manifest import DataError, read_manifest, verify_files
from tests.conftest import run_cli


def write_csv(path, rows, header="userId,movieId,rating,timestamp"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(header + "\n")
        for row in rows:
            f.write(",".join(str(v) for v in row) + "\n")


def tiny_rows():
    """3 users x 4 ratings over 30 items; user 10's latest rating is a tie (t=500) won by the earlier line."""
    rows = []
    for user, base in ((10, 100), (20, 200), (30, 300)):
        for j, movie in enumerate((5, 7, 9)):
            rows.append((user, movie + user, 4.0, base + j))
    rows.append((10, 50, 3.5, 500))   # earliest line among user 10's ties -> test item
    rows.append((10, 60, 3.5, 500))   # same timestamp, later line -> train
    rows.append((20, 70, 5.0, 900))   # user 20's latest
    rows.append((30, 80, 1.0, 50))    # old rating; user 30's latest is (30, 39, t=302)
    for movie in range(100, 122):     # more items so 5 negatives always exist
        rows.append((99, movie, 3.0, 1))
    return rows


def prepare_tiny(tmp_path, seed=0, rows=None):
    raw = tmp_path / "raw"
    write_csv(str(raw / "ml-20m" / "ratings.csv"), rows or tiny_rows())
    out = tmp_path / f"out{seed}"
    movielens.prepare(str(raw), str(out), min_ratings=4, eval_negatives=5, seed=seed, num_shards=2,
                      log=lambda _: None)
    return str(out)


def load(data_dir, split):
    manifest = read_manifest(data_dir, "ncf")
    parts = [np.load(os.path.join(data_dir, f["name"])) for f in manifest["files"] if f["split"] == split]
    return manifest, np.concatenate(parts)


def test_leave_one_out_takes_latest_and_breaks_ties_by_file_order(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    manifest, eval_rows = load(data_dir, "eval")
    _, train = load(data_dir, "train")
    # Dense ids follow sorted original ids: users 10,20,30,99 -> 0..3; movies sorted.
    movies = sorted({r[1] for r in tiny_rows()})
    test_movie = {user: movies[item] for user, item in eval_rows[:, :2]}
    assert test_movie == {0: 50, 1: 70, 2: 39, 3: 100}
    assert manifest["counts"]["num_users"] == 4 and manifest["counts"]["num_items"] == len(movies)
    assert manifest["counts"]["train_positives"] == len(tiny_rows()) - 4 == len(train)
    train_pairs = {(u, movies[i]) for u, i in train}
    assert (0, 60) in train_pairs and (0, 50) not in train_pairs


def test_eval_negatives_never_rated_unique_and_seeded(tmp_path):
    data_dir = prepare_tiny(tmp_path, seed=0)
    _, eval_rows = load(data_dir, "eval")
    _, train = load(data_dir, "train")
    rated = {(u, i) for u, i in train} | {(u, i) for u, i in eval_rows[:, :2]}
    for row in eval_rows:
        negatives = row[2:]
        assert len(set(negatives.tolist())) == len(negatives) == 5
        assert not any((row[0], n) in rated for n in negatives)
    again = load(prepare_tiny(tmp_path / "again", seed=0), "eval")[1]
    np.testing.assert_array_equal(eval_rows, again)
    other = load(prepare_tiny(tmp_path / "other", seed=1), "eval")[1]
    assert not np.array_equal(eval_rows, other)


def test_users_below_min_ratings_are_dropped(tmp_path):
    rows = tiny_rows() + [(77, 5, 4.0, 1), (77, 7, 4.0, 2)]  # user 77 has 2 ratings
    manifest, eval_rows = load(prepare_tiny(tmp_path, rows=rows), "eval")
    assert manifest["counts"]["num_users"] == 4


def test_sampler_is_uniform_over_unrated_items():
    """Many users rating the same half of the items: every unrated item is drawn about equally often."""
    users = np.repeat(np.arange(2000), 50)
    items = np.tile(np.arange(50), 2000)
    neg = movielens.sample_eval_negatives(users, items, 2000, 100, 20, seed=3)
    assert neg.min() >= 50
    counts = np.bincount(neg.ravel(), minlength=100)[50:]
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()


def test_manifest_checksums_catch_corruption(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    manifest = read_manifest(data_dir, "ncf")
    verify_files(data_dir, manifest, progress=None)
    victim = os.path.join(data_dir, manifest["files"][0]["name"])
    with open(victim, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(DataError, match="checksum"):
        verify_files(data_dir, manifest, progress=None)


def test_wrong_workload_is_refused(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    with pytest.raises(DataError, match="prepared for --model=ncf"):
        read_manifest(data_dir, "resnet")


@pytest.mark.parametrize("content, expected", [
    ("", "empty file"),
    ("user,movie,rating,time\n1,2,3.0,4\n", "header is"),
    ("userId,movieId,rating,timestamp\n1,2,3.0,4\n1,x,3.0,5\n", "ratings.csv:3: movieId is not a number: 'x'"),
    ("userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,3.0\n", "ratings.csv:3: expected 4 fields"),
    ("userId,movieId,rating,timestamp\n", "no ratings"),
])
def test_cli_rejects_bad_csv_and_leaves_nothing(tmp_path, content, expected):
    raw = tmp_path / "raw" / "ml-20m"
    raw.mkdir(parents=True)
    (raw / "ratings.csv").write_text(content)
    out = tmp_path / "out"
    proc = run_cli("data_prep.movielens", f"--raw_dir={tmp_path / 'raw'}", f"--output_dir={out}")
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() or os.listdir(out) == []


def test_cli_missing_raw_dir_names_it(tmp_path):
    proc = run_cli("data_prep.movielens", f"--raw_dir={tmp_path / 'nowhere'}", f"--output_dir={tmp_path / 'o'}")
    assert proc.returncode == 2 and "nowhere: no such folder" in proc.stderr


def test_cli_refuses_to_overwrite_and_verify_command(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    raw = tmp_path / "raw"
    proc = run_cli("data_prep.movielens", f"--raw_dir={raw}", f"--output_dir={data_dir}", "--eval_negatives=5",
                   "--min_ratings=4")
    assert proc.returncode == 2 and "already holds a prepared dataset" in proc.stderr
    ok = run_cli("data_prep.verify", f"--data_dir={data_dir}")
    assert ok.returncode == 0 and "ok: movielens-20m" in ok.stdout
    os.remove(os.path.join(data_dir, json.load(open(os.path.join(data_dir, "manifest.json")))["files"][1]["name"]))
    bad = run_cli("data_prep.verify", f"--data_dir={data_dir}")
    assert bad.returncode == 2 and "listed in the manifest but missing" in bad.stderr


def test_large_datasets_get_a_size_check_only(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    manifest = read_manifest(data_dir, "ncf")
    victim = os.path.join(data_dir, manifest["files"][0]["name"])
    with open(victim, "r+b") as f:  # same size, different content
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    said = []
    verify_files(data_dir, manifest, progress=said.append, checksum_limit_bytes=10)
    assert "sizes only" in said[0] and "data_prep.verify" in said[0]
    with pytest.raises(DataError, match="checksum"):
        verify_files(data_dir, manifest, progress=None, checksum_limit_bytes=1 << 30)


def test_workers_share_the_verification(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    manifest = read_manifest(data_dir, "ncf")
    os.remove(os.path.join(data_dir, manifest["files"][1]["name"]))
    verify_files(data_dir, manifest, progress=None, rank=0, world_size=2)  # files 0, 2, ...: all present
    with pytest.raises(DataError, match="listed in the manifest but missing"):
        verify_files(data_dir, manifest, progress=None, rank=1, world_size=2)
