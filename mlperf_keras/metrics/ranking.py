"""Hit rate at K for leave-one-out ranking (NCF's HR@10)."""
from __future__ import annotations

import numpy as np


def hits_at_k(scores: np.ndarray, k: int = 10, positive_column: np.ndarray | None = None,
              duplicate: np.ndarray | None = None) -> int:
    """Number of users whose positive ranks in the top k among its candidates.

    scores: (users, candidates). A NaN score never helps the positive: a NaN positive is a miss, a NaN candidate
    ranks above it.

    positive_column None: the positive is column 0 and every candidate scoring the same ranks above it, so a model
    that scores everything alike gets no hits.

    positive_column (users,) and duplicate (users, candidates) bool: the reference's rule (mlcommons/training
    fe17e837ed12974d15c86d5173fe8f2c188434d5, recommendation/pytorch/ncf.py eval_one: candidates are the negatives
    then the test item, put into a dict item -> score, ranked by heapq.nlargest, which keeps insertion order among
    equal scores). A repeated item counts once, at its first column (duplicate marks the later copies, which are
    skipped); positive_column is the test item's first column (it may have been drawn as a negative too); among
    equal scores the earlier column ranks higher, so with the test item last it loses every tie. NVIDIA's v0.5
    submission does the same with a duplicate mask and a stable top-k (training_results_v0.5
    v0.5.0/nvidia/submission/code/recommendation/pytorch/ncf.py val_epoch).
    """
    scores = np.asarray(scores, dtype=np.float32)
    if positive_column is None:
        positive = scores[:, :1]
        above = (scores[:, 1:] >= positive) | np.isnan(scores[:, 1:])
        rank = np.sum(above, axis=1)
        return int(np.sum((rank < k) & ~np.isnan(positive[:, 0])))
    positive_column = np.asarray(positive_column)
    rows = np.arange(len(scores))
    positive = scores[rows, positive_column][:, None]
    column = np.arange(scores.shape[1])[None, :]
    earlier = column < positive_column[:, None]
    above = (scores > positive) | ((scores == positive) & earlier) | np.isnan(scores)
    above &= column != positive_column[:, None]
    if duplicate is not None:
        above &= ~np.asarray(duplicate, dtype=bool)
    rank = np.sum(above, axis=1)
    return int(np.sum((rank < k) & ~np.isnan(positive[:, 0])))
