"""Worker program for BLEU's merge test: each worker scores its share of the sentences, BLEU is merged once.

    python bleu_shares.py OUT_DIR

Under horovodrun -np 2, rank r takes sentences r, r + 2, r + 4 of tests/test_bleu's hypotheses and references and
calls merged_bleu, whose statistics cross the workers in Horovod's allreduce. Writes OUT_DIR/rank{r}_of{w}.json with
the merged BLEU and the BLEU of its own share alone.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
out_dir = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from mlperf_keras import distribute  # noqa: E402
from mlperf_keras.metrics.bleu import corpus_bleu, merged_bleu  # noqa: E402
from tests.test_bleu import HYPOTHESES, REFERENCES  # noqa: E402

dist = distribute.create("tensorflow")
hypotheses, references = HYPOTHESES[dist.rank::dist.world_size], REFERENCES[dist.rank::dist.world_size]
result = {"merged": merged_bleu(hypotheses, references, dist), "own_share": corpus_bleu(hypotheses, references)}
with open(os.path.join(out_dir, f"rank{dist.rank}_of{dist.world_size}.json"), "w") as f:
    json.dump(result, f)
print(f"rank {dist.rank}/{dist.world_size}: BLEU {result['merged']:.6f}", flush=True)
