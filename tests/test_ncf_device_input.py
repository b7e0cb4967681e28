"""NCF's epoch built on the device (inputs/ncf_device.py): the same distribution as the host sampler with either
random source (stock: the framework's generators, closed division; hash: counter hash, open division), the same
bits on TensorFlow and JAX for the hash, and clear failure where no negative exists. Runs on the CPU backends."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.inputs.ncf import PAD_LABEL, steps_per_epoch
from mlperf_keras.inputs.ncf_device import DeviceTrainSampler
from tests.conftest import ROOT
from tests.test_ncf_input import make_positives


def flat_epoch(sampler, epoch, batch=None, steps=None):
    n = sampler.samples_per_epoch
    batch = batch or n
    steps = steps or steps_per_epoch([sampler.num_positives], sampler.negatives, batch)
    users, items, labels, rounds = sampler.epoch_batches(epoch, batch, steps)
    return tuple(np.asarray(a).reshape(-1) for a in (users, items, labels)) + (rounds,)


RANDOM = pytest.mark.parametrize("random", ["stock", "hash"])


@RANDOM
def test_each_positive_once_and_negatives_never_rated(random):
    positives = make_positives()
    sampler = DeviceTrainSampler(positives, num_items=200, negatives=4, seed=1, random=random)
    users, items, labels, rounds = flat_epoch(sampler, 0)
    assert len(users) == 5 * len(positives) and labels.sum() == len(positives) and rounds >= 1
    rated = set(map(tuple, positives.tolist()))
    neg = labels == 0
    assert not rated & set(zip(users[neg].tolist(), items[neg].tolist()))
    assert sorted(zip(users[~neg].tolist(), items[~neg].tolist())) == sorted(rated)
    np.testing.assert_array_equal(np.bincount(users[neg], minlength=50), 4 * np.bincount(positives[:, 0]))
    assert abs(labels[: len(labels) // 2].sum() - len(positives) / 2) < len(positives) / 5   # shuffled, not sorted


@RANDOM
def test_reproducible_per_seed_epoch_and_rank(random):
    sampler = DeviceTrainSampler(make_positives(), 200, 4, seed=5, random=random)
    a, b = flat_epoch(sampler, 3), flat_epoch(sampler, 3)
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], flat_epoch(sampler, 4)[1])
    # The seed and rank enter through the per-epoch key only: the compiled epoch function is reused.
    sampler.rank = 1
    assert not np.array_equal(a[1], flat_epoch(sampler, 3)[1])
    sampler.rank, sampler.seed = 0, 6
    assert not np.array_equal(a[1], flat_epoch(sampler, 3)[1])
    sampler.seed = 5
    np.testing.assert_array_equal(a[1], flat_epoch(sampler, 3)[1])


def test_batches_have_fixed_shape_and_wrap_around():
    positives = make_positives(users=7, per_user=10)
    sampler = DeviceTrainSampler(positives, 200, 4, seed=0)
    batches = list(sampler.batches(0, 64, 6))     # 350 samples -> 6 batches of 64, the last wraps to the start
    assert len(batches) == 6 and all(np.asarray(y).shape == (64,) and np.asarray(x[0]).shape == (64,)
                                     for x, y in batches)
    users = np.concatenate([np.asarray(x[0]) for x, _ in batches])
    items = np.concatenate([np.asarray(x[1]) for x, _ in batches])
    labels = np.concatenate([np.asarray(y) for _, y in batches])
    np.testing.assert_array_equal(users[350:], users[:34])
    np.testing.assert_array_equal(items[350:], items[:34])
    # The 34 repeats are padding the loss ignores: every real sample once, each positive once.
    assert np.all(labels[350:] == PAD_LABEL) and set(np.unique(labels[:350]).tolist()) == {0.0, 1.0}
    assert sorted(zip(users[:350][labels[:350] == 1].tolist(), items[:350][labels[:350] == 1].tolist())) == \
        sorted(map(tuple, positives.tolist()))


@RANDOM
def test_negatives_are_uniform_over_the_unrated_items(random):
    """5 users who rated 50 of 100 items each: 50 epochs x 200 negatives per user spread evenly over their 50
    unrated items (chi-square, 49 degrees of freedom, p = 0.001)."""
    rng = np.random.default_rng(0)
    positives = np.array([(u, i) for u in range(5) for i in rng.choice(100, 50, replace=False)], np.int32)
    sampler = DeviceTrainSampler(positives, 100, 4, seed=2, random=random)
    counts = np.zeros((5, 100))
    for epoch in range(50):
        users, items, labels, _ = flat_epoch(sampler, epoch)
        np.add.at(counts, (users[labels == 0], items[labels == 0]), 1)
    for user in range(5):
        unrated = np.setdiff1d(np.arange(100), positives[positives[:, 0] == user, 1])
        assert counts[user, np.setdiff1d(np.arange(100), unrated)].sum() == 0
        observed = counts[user, unrated]
        chi2 = ((observed - observed.mean()) ** 2 / observed.mean()).sum()
        assert chi2 < 85.4, (user, observed)


@RANDOM
def test_the_shuffle_is_a_uniform_permutation(random):
    """Where one given sample lands is uniform over the epoch (chi-square over 10 bins, 400 epochs), and
    consecutive positives keep their input order only half the time."""
    positives = make_positives(users=10, per_user=10, items=200)   # 100 positives, 500 samples per epoch
    sampler = DeviceTrainSampler(positives, 200, 4, seed=3, random=random)
    index_of = {pair: k for k, pair in enumerate(sorted(map(tuple, positives.tolist())))}
    bins, ascending = np.zeros(10), []
    for epoch in range(400):
        users, items, labels, _ = flat_epoch(sampler, epoch)
        first = np.flatnonzero((users == positives[0, 0]) & (items == positives[0, 1]) & (labels == 1))
        bins[first[0] * 10 // 500] += 1
        order = np.array([index_of[p] for p in zip(users[labels == 1].tolist(), items[labels == 1].tolist())])
        ascending.append(np.mean(np.diff(order) > 0))
    assert abs(np.mean(ascending) - 0.5) < 0.02, np.mean(ascending)
    assert ((bins - 40) ** 2 / 40).sum() < 27.9, bins


@RANDOM
def test_a_user_who_rated_almost_everything_still_gets_unrated_negatives(random):
    heavy = np.array([(0, i) for i in range(97)] + [(1, 5)], np.int32)   # user 0 left 3 of 100 items unrated
    sampler = DeviceTrainSampler(heavy, 100, 4, seed=4, random=random)
    users, items, labels, rounds = flat_epoch(sampler, 0)
    assert rounds > 3
    assert set(items[(labels == 0) & (users == 0)].tolist()) == {97, 98, 99}
    assert 5 not in items[(labels == 0) & (users == 1)]


def test_a_user_who_rated_every_item_is_a_clear_error():
    sampler = DeviceTrainSampler(np.array([(0, i) for i in range(10)], np.int32), 10, 4, seed=0)
    with pytest.raises(DataError, match="rated .*all 10 items"):
        flat_epoch(sampler, 0)


JAX_EPOCH = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from mlperf_keras.inputs.ncf_device import DeviceTrainSampler
from tests.test_ncf_input import make_positives
users, items, labels, rounds = DeviceTrainSampler(make_positives(), 200, 4, seed=7, rank=2,
                                                  random="hash").epoch_batches(1, 500, 15)
np.savez({out!r}, users=np.asarray(users), items=np.asarray(items), labels=np.asarray(labels), rounds=rounds)
"""


def test_tensorflow_and_jax_build_the_same_epoch_from_the_hash(tmp_path):
    out = str(tmp_path / "jax_epoch.npz")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", JAX_EPOCH.format(root=ROOT, out=out)], check=True, env=env, cwd=ROOT)
    jax_epoch = np.load(out)
    sampler = DeviceTrainSampler(make_positives(), 200, 4, seed=7, rank=2, random="hash")
    users, items, labels, rounds = sampler.epoch_batches(1, 500, 15)
    np.testing.assert_array_equal(np.asarray(users), jax_epoch["users"])
    np.testing.assert_array_equal(np.asarray(items), jax_epoch["items"])
    np.testing.assert_array_equal(np.asarray(labels), jax_epoch["labels"])
    assert rounds == int(jax_epoch["rounds"])


JAX_STOCK_EPOCH = """
import json, sys, numpy as np
sys.path.insert(0, {root!r})
from tests.test_ncf_device_input import flat_epoch
from tests.test_ncf_input import make_positives
from mlperf_keras.inputs.ncf_device import DeviceTrainSampler
positives = make_positives()
users, items, labels, rounds = flat_epoch(DeviceTrainSampler(positives, 200, 4, seed=1, random="stock"), 0)
rated = set(map(tuple, positives.tolist()))
neg = labels == 0
print(json.dumps({{"negatives_rated": len(rated & set(zip(users[neg].tolist(), items[neg].tolist()))),
                  "positives_once": sorted(zip(users[~neg].tolist(), items[~neg].tolist())) == sorted(rated),
                  "samples": len(users), "rounds": rounds}}))
"""


def test_stock_epoch_on_jax_has_each_positive_once_and_no_rated_negative():
    """The closed division's device build on JAX (jax.random): the same invariants as on TensorFlow above."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", JAX_STOCK_EPOCH.format(root=ROOT)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"negatives_rated": 0, "positives_once": True, "samples": 7500, "rounds": report["rounds"]}
    assert report["rounds"] >= 1


def test_the_workload_uses_stock_random_numbers_unless_open():
    import types

    from mlperf_keras.workloads.ncf import device_random

    assert device_random(types.SimpleNamespace(closed_division=True)) == "stock"
    assert device_random(types.SimpleNamespace(closed_division=False)) == "hash"


def _batches_digest(sampler, epochs=3, batch=512, steps=15) -> str:
    """sha256 (16 hex digits) of every batch batches() hands out for epochs 0..epochs-1, read in order."""
    import hashlib

    digest = hashlib.sha256()
    for epoch in range(epochs):
        for (users, items), labels in sampler.batches(epoch, batch, steps):
            for a in (users, items, labels):
                digest.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return digest.hexdigest()[:16]


# The batches of make_positives(), seed 7, rank 1, epochs 0-2, batch 512 x 15 steps, as inputs/ncf_device.py gave them
# at commit 540f436, before batches() could overlap (not wait for the device, build the next epoch ahead): the closed
# division's streams must not change with how the epoch is handed out. A new JAX or TensorFlow whose stock generators
# give other bits changes them too; then check that the change is theirs before updating these.
PINNED_BATCHES = {("tensorflow", "stock"): "3af2b92b989586c7", ("jax", "stock"): "fd0cf5fbddf244d0",
                  ("jax", "hash"): "a465841fbed76793"}


def test_batches_are_the_same_with_and_without_overlap_and_as_before():
    import keras

    def sampler(overlap):
        return DeviceTrainSampler(make_positives(), 200, 4, seed=7, rank=1, overlap=overlap)

    ahead = sampler(True)
    digest = _batches_digest(ahead)
    assert digest == _batches_digest(sampler(False))
    assert ahead._ahead is not None and ahead._ahead[0] == (3, 512, 15)   # epoch 3 was dispatched during epoch 2
    expected = PINNED_BATCHES.get((keras.backend.backend(), "stock"))
    if expected:
        assert digest == expected
    # epoch_batches (which waits) and batches() give the same epoch, in or out of order.
    users, items, labels, _ = ahead.epoch_batches(1, 512, 15)
    handed = list(ahead.batches(1, 512, 15))
    np.testing.assert_array_equal(np.asarray(users), np.stack([np.asarray(x[0]) for x, _ in handed]))
    np.testing.assert_array_equal(np.asarray(items), np.stack([np.asarray(x[1]) for x, _ in handed]))
    np.testing.assert_array_equal(np.asarray(labels), np.stack([np.asarray(y) for _, y in handed]))


def test_batches_raise_when_a_user_rated_every_item():
    for overlap in (True, False):
        sampler = DeviceTrainSampler(np.array([(0, i) for i in range(10)], np.int32), 10, 4, seed=0, overlap=overlap)
        with pytest.raises(DataError, match="rated .*all 10 items"):
            list(sampler.batches(0, 16, 4))


JAX_BATCHES = """
import json, sys
sys.path.insert(0, {root!r})
from mlperf_keras.inputs.ncf_device import DeviceTrainSampler
from tests.test_ncf_device_input import _batches_digest
from tests.test_ncf_input import make_positives
print(json.dumps({{f"{{random}}/{{overlap}}": _batches_digest(DeviceTrainSampler(
    make_positives(), 200, 4, seed=7, rank=1, random=random, overlap=overlap))
    for random in ("stock", "hash") for overlap in (True, False)}}))
"""


def test_jax_batches_are_the_same_with_and_without_overlap_and_as_before():
    """JAX, where batches() never waits: the same batches as before the change, with and without the overlap."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", JAX_BATCHES.format(root=ROOT)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digests = json.loads(proc.stdout.strip().splitlines()[-1])
    assert digests == {f"{random}/{overlap}": PINNED_BATCHES[("jax", random)]
                       for random in ("stock", "hash") for overlap in (True, False)}
