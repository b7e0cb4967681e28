"""Worker program: batch-norm statistics averaged across workers before an evaluation (loop.py's step).

    python average_batch_norm.py OUT_DIR

Each rank sets a small model's moving mean to rank + 1 and moving variance to 2 x (rank + 1), and a frozen dense
kernel (non-trainable, not a statistic) to rank + 1; after dist.average_variables(loop._batch_norm_statistics(model)) the statistics
must be the mean over ranks and the other variable untouched. Writes OUT_DIR/rank{r}.json.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mlperf_keras import distribute, loop  # noqa: E402

dist = distribute.create("tensorflow")
inputs = keras.Input((3,))
model = keras.Model(inputs, keras.layers.BatchNormalization(name="bn")(keras.layers.Dense(3, name="dense")(inputs)))
model.get_layer("dense").trainable = False   # its kernel becomes a non-trainable variable that is not a statistic
other = model.get_layer("dense").kernel
bn = model.get_layer("bn")
bn.moving_mean.assign(np.full(3, dist.rank + 1.0, np.float32))
bn.moving_variance.assign(np.full(3, 2.0 * (dist.rank + 1), np.float32))
other.assign(np.full((3, 3), dist.rank + 1.0, np.float32))
statistics = loop._batch_norm_statistics(model)
dist.average_variables(statistics)
with open(os.path.join(sys.argv[1], f"rank{dist.rank}.json"), "w") as f:
    json.dump({"averaged": [v.path for v in statistics], "mean": np.asarray(bn.moving_mean).tolist(),
               "variance": np.asarray(bn.moving_variance).tolist(), "other": float(np.asarray(other).mean())}, f)
