"""Worker program for the data-parallel tests: a few NeuMF train steps on fixed data, then save the weights.

    python weights_after_steps.py OUT_DIR GLOBAL_BATCH STEPS [BACKEND [SEED_OFFSET]]

Every worker sees the same global batches and trains on its 1/W slice of each; rank r initialises with seed 10+r,
so identical final weights prove both the initial broadcast and the gradient averaging, and equality with
one worker at the full batch proves the average is the full-batch mean.
"""
import os
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
out_dir, global_batch, num_steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.environ["KERAS_BACKEND"] = sys.argv[4] if len(sys.argv) > 4 else "tensorflow"
seed_offset = int(sys.argv[5]) if len(sys.argv) > 5 else 0
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mlperf_keras import distribute, steps  # noqa: E402
from mlperf_keras.workloads.ncf import NCF  # noqa: E402

dist = distribute.create(os.environ["KERAS_BACKEND"])
seed = 10 + dist.rank + seed_offset
steps.set_random_seed(seed)
workload = NCF()
hparams = {**workload.reference_hparams("0.5"), "num_users": 300, "num_items": 200, "mf_dim": 8,
           "mlp_layers": (16, 16, 8), "learning_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999}
config = types.SimpleNamespace(hparams=hparams, seed=seed)
model = workload.build_model(config)
# Plain SGD: Adam's m/sqrt(v) turns rounding-level gradient differences into full-size steps, which would hide
# whether the averaging itself is right.
import keras  # noqa: E402

optimizer = keras.optimizers.SGD(learning_rate=0.5)
dist.broadcast_variables(model.variables)
step = steps.make_train_step(model, optimizer, workload.loss, dist)

rng = np.random.default_rng(0)
local = global_batch // dist.world_size
for _ in range(num_steps):
    users = rng.integers(0, 300, global_batch).astype(np.int32)
    items = rng.integers(0, 200, global_batch).astype(np.int32)
    labels = (rng.random(global_batch) < 0.3).astype(np.float32)
    part = slice(dist.rank * local, (dist.rank + 1) * local)
    step({"user": users[part], "item": items[part]}, labels[part])
step.sync_to_model()
np.savez(os.path.join(out_dir, f"rank{dist.rank}_of{dist.world_size}.npz"),
         *[np.asarray(w.numpy() if hasattr(w, "numpy") else w) for w in model.weights])
print(f"rank {dist.rank}/{dist.world_size}: {dist.describe()}", flush=True)
