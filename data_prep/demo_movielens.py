"""Generate MovieLens-format ratings.csv files whose users have learnable tastes (demo, tests, benchmarks).

Items belong to genres and have Zipf popularity inside their genre; each user prefers one genre and takes most
ratings from it. A personalised model can learn that; a popularity ranking cannot, which is what the demo and the
tests check. The file is in the official format (header userId,movieId,rating,timestamp; sparse movie ids).
"""
from __future__ import annotations

import os
import tempfile

import numpy as np


def write_ratings_csv(path: str, num_users: int, num_items: int, num_genres: int = 20, min_per_user: int = 20,
                      mean_extra_per_user: float = 20.0, taste_strength: float = 0.85, seed: int = 0,
                      chunk_rows: int = 2_000_000) -> int:
    """Write ratings.csv at path (atomically); returns the number of ratings written."""
    rng = np.random.default_rng(seed)
    per_user = min_per_user + rng.geometric(1.0 / (1.0 + mean_extra_per_user), size=num_users) - 1
    per_user = np.minimum(per_user, num_items // 2)
    users = np.repeat(np.arange(num_users, dtype=np.int64), per_user)
    favourite = rng.integers(0, num_genres, size=num_users)
    genre_of_rating = np.where(rng.random(len(users)) < taste_strength, favourite[users],
                               rng.integers(0, num_genres, size=len(users)))
    genre_size = num_items // num_genres
    zipf = 1.0 / np.arange(1, genre_size + 1) ** 0.8
    cdf = np.cumsum(zipf / zipf.sum())
    rank_in_genre = np.minimum(np.searchsorted(cdf, rng.random(len(users))), genre_size - 1)
    items = genre_of_rating * genre_size + rank_in_genre
    items = rng.permutation(num_items)[items]  # so item index says nothing about genre or popularity
    keys = np.unique(users * num_items + items)  # one rating per (user, item), as in MovieLens
    users, items = keys // num_items, keys % num_items
    timestamps = 1_000_000_000 + rng.integers(0, 10**8, size=len(users))
    ratings = rng.integers(1, 11, size=len(users)) / 2.0
    user_ids = rng.permutation(num_users) + 1           # official ids start at 1
    movie_ids = np.sort(rng.choice(num_items * 5, size=num_items, replace=False)) + 1  # sparse, like MovieLens
    order = rng.permutation(len(users))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # A name of its own in the same folder: concurrent writers never share a temp file, and os.replace is atomic.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=os.path.basename(path) + ".",
                               suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write("userId,movieId,rating,timestamp\n")
        for lo in range(0, len(order), chunk_rows):
            rows = order[lo:lo + chunk_rows]
            block = np.stack([user_ids[users[rows]], movie_ids[items[rows]], (ratings[rows] * 10).astype(np.int64),
                              timestamps[rows]], axis=1)
            lines = [f"{u},{m},{r // 10}.{r % 10},{t}" for u, m, r, t in block.tolist()]
            f.write("\n".join(lines))
            f.write("\n")
    os.replace(tmp, path)
    return int(len(users))
