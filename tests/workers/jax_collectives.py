"""Worker program for the multi-process JAX test of distribute's collectives: one process of a two-process job.

    python jax_collectives.py OUT_DIR COORDINATOR PROCESS_ID

Rank 0 gives 3 rows, rank 1 one row, of int64 ids above 2**31 and float64 values that float32 cannot hold; writes
what gather_rows, sum_across_workers and from_chief returned to OUT_DIR/rankR.json.
"""
import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
out_dir, coordinator, process_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mlperf_keras import distribute  # noqa: E402

dist = distribute.create("jax", coordinator, 2, process_id)
rows = 3 if dist.rank == 0 else 1
ids = 2**40 + 10 * dist.rank + np.arange(rows, dtype=np.int64)
gathered_ids = dist.gather_rows(ids)
boxes = dist.gather_rows(np.full((rows, 2), dist.rank + 0.5, np.float32))
empty = dist.gather_rows(np.zeros((0, 7), np.float64))
sums = dist.sum_across_workers([2.0**40 + 0.5 if dist.rank == 0 else 1.0, 0.1])
chief_seed = dist.from_chief(1000 + dist.rank)
json.dump({"ids": [int(i) for i in gathered_ids], "ids_dtype": str(gathered_ids.dtype), "boxes": boxes.tolist(),
           "empty_shape": list(empty.shape), "sums": [float(s) for s in sums], "sums_dtype": str(sums.dtype),
           "chief_seed": chief_seed, "is_chief": dist.is_chief, "describe": dist.describe()},
          open(os.path.join(out_dir, f"rank{dist.rank}.json"), "w"))
