"""data_prep.movielens on hand-made ratings.csv files: leave-one-out and dense ids as the reference's convert.py,
errors. (The eval negatives are drawn at run start: tests/test_ncf_input.py.)"""
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
    """3 users x 4 ratings over 30 items; user 10's latest rating is a tie (t=500) between two lines."""
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


def prepare_tiny(tmp_path, rows=None):
    raw = tmp_path / "raw"
    write_csv(str(raw / "ml-20m" / "ratings.csv"), rows or tiny_rows())
    out = tmp_path / "out"
    movielens.prepare(str(raw), str(out), min_ratings=4, num_shards=2, log=lambda _: None)
    return str(out)


def load(data_dir, split):
    manifest = read_manifest(data_dir, "ncf")
    parts = [np.load(os.path.join(data_dir, f["name"])) for f in manifest["files"] if f["split"] == split]
    return manifest, np.concatenate(parts)


def reference_test_items(rows):
    """The reference's convert.py split, replayed with pandas (mlcommons/training fe17e837, recommendation/pytorch/
    convert.py + load.py): filter in file order, ids by first appearance, sort_values by the datetime timestamp,
    pop each user's last item. {original user: original movie}."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=["user_id", "item_id", "rating", "timestamp"])
    df["timestamp"] = pd.to_datetime(df["timestamp"], unit="s")
    df = df.groupby("user_id").filter(lambda x: len(x) >= 4)
    df = df.sort_values(by="timestamp")
    last = {}
    for user, item in zip(df["user_id"], df["item_id"]):
        last[user] = item
    return last


def test_leave_one_out_takes_latest_and_breaks_ties_as_the_reference_sort(tmp_path):
    data_dir = prepare_tiny(tmp_path)
    manifest, eval_rows = load(data_dir, "eval")
    _, train = load(data_dir, "train")
    assert eval_rows.shape == (4, 2)      # (user, test item): no negatives in the prepared data
    # Dense ids in order of first appearance in the file, as the reference's unique() + enumerate.
    users = list(dict.fromkeys(r[0] for r in tiny_rows()))
    movies = list(dict.fromkeys(r[1] for r in tiny_rows()))
    test_movie = {users[user]: movies[item] for user, item in eval_rows}
    assert test_movie == reference_test_items(tiny_rows())
    assert test_movie[20] == 70 and test_movie[30] == 39 and test_movie[10] in (50, 60)
    assert manifest["counts"]["num_users"] == 4 and manifest["counts"]["num_items"] == len(movies)
    assert manifest["counts"]["train_positives"] == len(tiny_rows()) - 4 == len(train)
    train_pairs = {(users[u], movies[i]) for u, i in train}
    assert {(10, 50), (10, 60)} - train_pairs == {(10, test_movie[10])}


def test_ties_follow_the_reference_quicksort_on_many_ties():
    """2,000 users x 25 ratings with timestamps from 5 values: most users' latest rating is a tie. The held-out
    rows equal the pandas replay of the reference's sort (not file order, not a stable sort)."""
    rng = np.random.default_rng(0)
    rows = [(u, m, 3.0, int(t)) for u in rng.permutation(2000) for m, t in
            zip(rng.choice(400, 25, replace=False), rng.integers(0, 5, 25))]
    users = np.array([r[0] for r in rows])
    timestamps = np.array([r[3] for r in rows])
    dense, _ = movielens.first_appearance_ids(users)
    mask = movielens.leave_one_out(dense, timestamps)
    ours = {rows[i][0]: rows[i][1] for i in np.flatnonzero(mask)}
    assert ours == reference_test_items(rows)
    # A stable sort (file order among ties) picks other rows for many users: the tie rule is really exercised.
    stable = {}
    for i in np.argsort(timestamps, kind="stable"):
        stable[rows[i][0]] = rows[i][1]
    assert sum(stable[u] != ours[u] for u in ours) > 100


def test_users_below_min_ratings_are_dropped(tmp_path):
    rows = tiny_rows() + [(77, 5, 4.0, 1), (77, 7, 4.0, 2)]  # user 77 has 2 ratings
    manifest, eval_rows = load(prepare_tiny(tmp_path, rows=rows), "eval")
    assert manifest["counts"]["num_users"] == 4


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
    proc = run_cli("data_prep.movielens", f"--raw_dir={raw}", f"--output_dir={data_dir}", "--min_ratings=4")
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
