"""Worker program for the COCO evaluator's merge test: each worker evaluates its share of the test images.

    python coco_eval_shares.py ANNOTATION_JSON OUT_DIR

Under horovodrun -np 2, rank 0 feeds images 10 and 30 (plus a padding row), rank 1 feeds 20 and 40 (40 has no
objects, so no rows); alone, the one worker feeds all four. The outputs are those of a perfect detector with half of
the persons missing (tests/test_coco_metric.model_outputs), so the AP is 253/303 only if every worker's rows arrive.
Also checks gather_rows' rank order and a rank with zero rows. Writes OUT_DIR/rank{r}_of{w}.json.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
annotation_file, out_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mlperf_keras import distribute  # noqa: E402
from mlperf_keras.metrics import coco  # noqa: E402
from tests.test_coco_metric import DROPPED_PERSONS, MANIFEST_CATEGORIES, model_outputs  # noqa: E402

dist = distribute.create("tensorflow")
shares = {1: [[10, 20, 30, 40]], 2: [[10, 30], [20, 40]]}[dist.world_size][dist.rank]
metric = coco.CocoDetectionMetric(annotation_file, MANIFEST_CATEGORIES, dist, expected_images=4)
ids, heights, widths, loc, logits = model_outputs(shares, skip=DROPPED_PERSONS)
if dist.rank == 0:  # a padded last batch: the padding repeats a real image's outputs under id -1
    ids, heights, widths, loc, logits = (np.concatenate([a, a[:1]]) for a in (ids, heights, widths, loc, logits))
    ids[-1] = -1
metric.add_batch(ids, heights, widths, loc, logits)
ap = metric.result()

# rank r contributes r + 2 rows [r, i]; then only rank 0 contributes (2 rows), rank 1 none.
gathered = dist.gather_rows(np.asarray([[dist.rank, i] for i in range(dist.rank + 2)], np.float64))
empty_on_1 = dist.gather_rows(np.asarray([[0, 0], [0, 1]] if dist.rank == 0 else np.zeros((0, 2)), np.int64))
with open(os.path.join(out_dir, f"rank{dist.rank}_of{dist.world_size}.json"), "w") as f:
    json.dump({"ap": ap, "stats": metric.stats.tolist(), "rows": metric.rows_evaluated,
               "gathered": gathered.tolist(), "gathered_empty_rank1": empty_on_1.tolist()}, f)
print(f"rank {dist.rank}/{dist.world_size}: AP {ap:.6f}", flush=True)
