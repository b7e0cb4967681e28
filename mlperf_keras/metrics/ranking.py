"""Hit rate at K for leave-one-out ranking (NCF's HR@10)."""
from __future__ import annotations

import numpy as np


def hits_at_k(scores: np.ndarray, k: int = 10) -> int:
    """Number of users whose positive ranks in the top k among its candidates.

    scores: (users, 1 + negatives), the positive's score in column 0. A negative scoring the same as the positive
    counts as ranked above it, so a model that scores everything alike gets no hits (ties never help).
    """
    scores = np.asarray(scores, dtype=np.float32)
    positive = scores[:, :1]
    rank = np.sum(scores[:, 1:] >= positive, axis=1)
    return int(np.sum(rank < k))
