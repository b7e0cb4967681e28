"""NCF evaluation as the reference (mlcommons/training fe17e837, recommendation/pytorch/convert.py and ncf.py):
999 negatives per user drawn with replacement at run start from the items outside the user's training set,
repeats counted once, the test item last on ties, NaN never a hit."""
from __future__ import annotations

import types

import numpy as np
import pytest

from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.inputs.ncf import EvalSet, draw_eval_negatives, duplicate_mask
from mlperf_keras.metrics.ranking import hits_at_k


def half_rated(users=10, items=50, rated=30, seed=0):
    """Every user rated `rated` of `items` items; returns (positives, per-user set of unrated items)."""
    rng = np.random.default_rng(seed)
    chosen = [rng.choice(items, rated, replace=False) for _ in range(users)]
    positives = np.array([(u, i) for u in range(users) for i in chosen[u]], np.int32)
    unrated = [set(range(items)) - set(c.tolist()) for c in chosen]
    return positives, unrated


def test_negatives_are_drawn_with_replacement_from_the_unrated_items():
    """999 draws over 20 unrated items: never a training item, every unrated item drawn (the held-out test item is
    one of them), so repeats are everywhere; fewer unrated items than negatives is no error."""
    positives, unrated = half_rated()
    users = np.arange(10, dtype=np.int32)
    negatives = draw_eval_negatives(users, positives, 50, 999, seed=1)
    assert negatives.shape == (10, 999) and negatives.dtype == np.int32
    for u in range(10):
        assert set(negatives[u].tolist()) == unrated[u]


def test_repeats_occur_and_the_draw_is_uniform_in_a_large_catalogue():
    """3,000 items of which every user rated the first 500, 999 draws per user: with replacement about 180 repeats
    per user (without: none); counts over the 2,500 unrated items are uniform (chi-square, 2,499 degrees of
    freedom, p = 0.001 at about 2,720)."""
    positives = np.array([(u, i) for u in range(20) for i in range(500)], np.int32)
    negatives = draw_eval_negatives(np.arange(20, dtype=np.int32), positives, 3000, 999, seed=3)
    repeats = [999 - len(set(row.tolist())) for row in negatives]
    assert 120 < np.mean(repeats) < 240, np.mean(repeats)
    assert negatives.min() >= 500
    counts = np.bincount(negatives.ravel(), minlength=3000)[500:]
    expected = 20 * 999 / 2500
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 2720, chi2


def test_the_draw_depends_on_the_seed_only():
    positives, _ = half_rated(items=400, rated=30)
    users = np.arange(10, dtype=np.int32)
    a = draw_eval_negatives(users, positives, 400, 99, seed=5)
    b = draw_eval_negatives(users, positives, 400, 99, seed=5)
    c = draw_eval_negatives(users, positives, 400, 99, seed=6)
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.9


def test_a_user_who_rated_every_item_is_a_clear_error():
    positives = np.array([(0, i) for i in range(10)] + [(1, 3)], np.int32)
    with pytest.raises(DataError, match="user index 0 rated all 10 items"):
        draw_eval_negatives(np.array([0, 1], np.int32), positives, 10, 5, seed=0)


def test_a_user_with_one_unrated_item_gets_it_every_time():
    positives = np.array([(0, i) for i in range(40) if i != 17], np.int32)
    negatives = draw_eval_negatives(np.array([0], np.int32), positives, 40, 30, seed=0)
    assert set(negatives[0].tolist()) == {17}


def test_duplicates_and_the_test_items_first_column():
    # negatives 3, 5, 3, 7, 5 then the test item 7 (also drawn at column 3); second row: test item 9 not drawn
    eval_set = EvalSet.build(np.array([0, 1], np.int32), np.array([7, 9]),
                             np.array([[3, 5, 3, 7, 5], [1, 2, 3, 4, 5]], np.int32))
    np.testing.assert_array_equal(eval_set.items, [[3, 5, 3, 7, 5, 7], [1, 2, 3, 4, 5, 9]])
    np.testing.assert_array_equal(eval_set.duplicate, [[0, 0, 1, 0, 1, 1], [0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(eval_set.positive_column, [3, 5])
    np.testing.assert_array_equal(duplicate_mask(np.array([[4, 4, 4, 4]], np.int32)), [[0, 1, 1, 1]])


def test_reference_tie_and_duplicate_rule_by_hand():
    """The reference ranks dict(item -> score) by heapq.nlargest: each item once, at its first column; equal scores
    keep column order, so the test item (last) loses ties unless it was drawn earlier as a negative."""
    items = np.array([[3, 5, 3, 7, 5, 9],     # test item 9, not drawn: 3 distinct negatives tie with it
                      [3, 5, 3, 7, 5, 7],     # test item 7 drawn at column 3: 2 distinct items before it
                      [3, 3, 3, 3, 3, 9]])    # one distinct negative, repeated, scoring above the test item
    eval_set = EvalSet.build(np.arange(3, dtype=np.int32), items[:, -1], items[:, :-1])
    scores = np.array([[0.5] * 6, [0.5] * 6, [0.9] * 5 + [0.1]], np.float32)
    col, dup = eval_set.positive_column, eval_set.duplicate
    assert [hits_at_k(scores[i:i + 1], 3, col[i:i + 1], dup[i:i + 1]) for i in range(3)] == [0, 1, 1]
    assert [hits_at_k(scores[i:i + 1], 2, col[i:i + 1], dup[i:i + 1]) for i in range(3)] == [0, 0, 1]
    assert [hits_at_k(scores[i:i + 1], 1, col[i:i + 1], dup[i:i + 1]) for i in range(3)] == [0, 0, 0]
    # Without the duplicate mask the repeats of item 3 would each count: the third user would miss at k=2.
    assert hits_at_k(scores[2:], 2, col[2:]) == 0
    # A strictly higher test score wins whatever the columns.
    assert hits_at_k(np.array([[0.5] * 5 + [0.6]], np.float32), 1, np.array([5])) == 1


def test_nan_scores_are_misses():
    scores = np.full((4, 6), 0.5, np.float32)
    scores[:, -1] = np.nan                       # NaN test item: never a hit
    col = np.full(4, 5)
    assert hits_at_k(scores, 10, col) == 0
    assert hits_at_k(np.full((4, 6), np.nan, np.float32), 10, col) == 0
    assert hits_at_k(np.full((4, 6), np.nan, np.float32), 10) == 0              # positive-in-column-0 form too
    one_nan = np.array([[np.nan, 0.1, 0.1, 0.9]], np.float32)                  # NaN negative ranks above
    assert hits_at_k(one_nan, 1, np.array([3])) == 0 and hits_at_k(one_nan, 2, np.array([3])) == 1


def test_an_evaluator_of_a_nan_model_reports_hr_zero():
    from mlperf_keras.workloads.ncf import _HitRateEvaluator

    positives, _ = half_rated(users=8, items=60, rated=10)
    users = np.arange(8, dtype=np.int32)
    eval_set = EvalSet.build(users, np.full(8, 59, np.int32), draw_eval_negatives(users, positives, 60, 20, 1))
    dist = types.SimpleNamespace(sum_across_workers=lambda values: values)
    evaluator = _HitRateEvaluator(eval_set, 8, 10, 1000, dist)
    assert evaluator.evaluate(lambda x: np.full(len(x["user"]), np.nan, np.float32)) == 0.0
    # And a model that scores the test item highest hits every user.
    assert evaluator.evaluate(lambda x: (x["item"] == 59).astype(np.float32) * 5) == 1.0
