"""NCF training negatives: never a rated item, reproducible per (seed, epoch, rank), fixed-shape batches."""
from __future__ import annotations

import numpy as np

from mlperf_keras.inputs.ncf import PAD_LABEL, TrainSampler, steps_per_epoch


def make_positives(seed=0, users=50, per_user=30, items=200):
    rng = np.random.default_rng(seed)
    rows = [(u, i) for u in range(users) for i in rng.choice(items, per_user, replace=False)]
    return np.array(rows, dtype=np.int32)


def test_negatives_are_never_rated_and_labels_match():
    positives = make_positives()
    sampler = TrainSampler(positives, num_items=200, negatives=4, seed=1)
    users, items, labels = sampler.epoch(0)
    assert len(users) == len(positives) * 5 and labels.sum() == len(positives)
    rated = {(u, i) for u, i in positives.tolist()}
    neg = labels == 0
    assert not any((u, i) in rated for u, i in zip(users[neg].tolist(), items[neg].tolist()))
    assert all((u, i) in rated for u, i in zip(users[~neg].tolist(), items[~neg].tolist()))
    # Each user gets 4 negatives per positive.
    np.testing.assert_array_equal(np.bincount(users[neg], minlength=50), 4 * np.bincount(positives[:, 0]))


def test_same_seed_same_epoch_same_draw_and_epochs_differ():
    positives = make_positives()
    a = TrainSampler(positives, 200, 4, seed=5).epoch(3)
    b = TrainSampler(positives, 200, 4, seed=5).epoch(3)
    c = TrainSampler(positives, 200, 4, seed=5).epoch(4)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], c[1])


def test_batches_have_fixed_shape_and_cover_the_epoch():
    positives = make_positives(users=7, per_user=10)
    sampler = TrainSampler(positives, 200, 4, seed=0)
    steps = steps_per_epoch([len(positives)], 4, per_worker_batch=64)
    batches = list(sampler.batches(0, 64, steps))
    assert steps == 6 and len(batches) == 6  # 350 samples -> 6 batches of 64 (the last one wraps around)
    assert all(len(y) == 64 and len(x[0]) == 64 for x, y in batches)
    users = np.concatenate([x[0] for x, _ in batches])
    items = np.concatenate([x[1] for x, _ in batches])
    labels = np.concatenate([y for _, y in batches])
    # The 34 wrapped samples are padding (label PAD_LABEL, no weight in the loss): every real sample once.
    assert np.all(labels[350:] == PAD_LABEL) and set(np.unique(labels[:350]).tolist()) == {0.0, 1.0}
    real_positives = sorted(zip(users[:350][labels[:350] == 1].tolist(), items[:350][labels[:350] == 1].tolist()))
    assert real_positives == sorted(map(tuple, positives.tolist()))


def test_padding_samples_weigh_nothing_in_the_loss():
    """The last batch's padding changes neither the loss nor (so) the gradient: the mean over the real samples,
    as the reference's smaller last batch."""
    from keras import ops

    from mlperf_keras.workloads.ncf import NCF

    logits = np.array([2.0, -1.0, 0.5, 3.0, -4.0], np.float32)
    labels = np.array([1, 0, 1, PAD_LABEL, PAD_LABEL], np.float32)
    padded = float(NCF().loss(ops.convert_to_tensor(labels), ops.convert_to_tensor(logits)))
    real = float(NCF().loss(ops.convert_to_tensor(labels[:3]), ops.convert_to_tensor(logits[:3])))
    expected = np.mean([np.log1p(np.exp(-2.0)), np.log1p(np.exp(-1.0)), np.log1p(np.exp(-0.5))])
    assert abs(padded - real) < 1e-6 and abs(real - expected) < 1e-5, (padded, real, expected)


def test_steps_follow_the_largest_worker():
    assert steps_per_epoch([100, 120], 4, 100) == 6


def test_the_epoch_does_not_depend_on_the_thread_count():
    """The epoch is split into fixed chunks with their own streams: 1 or 4 threads give the same arrays."""
    positives = make_positives(users=60, per_user=40, items=300)
    one = TrainSampler(positives, 300, 4, seed=9, threads=1).epoch(2)
    four = TrainSampler(positives, 300, 4, seed=9, threads=4).epoch(2)
    for x, y in zip(one, four):
        np.testing.assert_array_equal(x, y)


def test_the_parallel_shuffle_is_a_uniform_permutation():
    """Bucketed shuffle: every sample appears once, and where a given sample lands is uniform over the epoch
    (chi-square over 10 position bins, 400 epochs), and positives and negatives are mixed evenly."""
    positives = make_positives(users=10, per_user=10, items=200)   # 100 positives, 500 samples per epoch
    sampler = TrainSampler(positives, 200, 4, seed=3, threads=2)
    first_positive_bins = np.zeros(10)
    index_of = {pair: k for k, pair in enumerate(map(tuple, positives.tolist()))}
    ascending = []
    for epoch in range(400):
        users, items, labels = sampler.epoch(epoch)
        assert labels.sum() == 100 and len(users) == 500
        pairs = sorted(zip(users[labels == 1].tolist(), items[labels == 1].tolist()))
        assert pairs == sorted(map(tuple, positives.tolist()))       # each positive exactly once
        target = np.flatnonzero((users == positives[0, 0]) & (items == positives[0, 1]) & (labels == 1))
        first_positive_bins[target[0] * 10 // 500] += 1
        assert abs(labels[:250].sum() - 50) < 25                      # not positives first
        # Consecutive positives come in ascending input order half the time (a missed shuffle inside a bucket
        # would keep its members in input order).
        order = np.array([index_of[p] for p in zip(users[labels == 1].tolist(), items[labels == 1].tolist())])
        ascending.append(np.mean(np.diff(order) > 0))
    assert abs(np.mean(ascending) - 0.5) < 0.02, np.mean(ascending)
    chi2 = ((first_positive_bins - 40) ** 2 / 40).sum()
    assert chi2 < 27.9, first_positive_bins                           # p = 0.001 at 9 degrees of freedom
