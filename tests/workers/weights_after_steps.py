"""Worker program for the data-parallel tests: a few NeuMF train steps on fixed data, then save the weights.

    python weights_after_steps.py OUT_DIR GLOBAL_BATCH STEPS [BACKEND [SEED_OFFSET [COORDINATOR NUM_PROCESSES
        PROCESS_ID]]]

(the last three start jax.distributed: one process of a multi-process JAX job.) WORKER_MODEL=resnet in the
environment trains the ResNet-50 workload's model at its demo size (32x32 images, one block per stage; batch norm
included) on random images instead of NeuMF.

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
jax_processes = (sys.argv[6], int(sys.argv[7]), int(sys.argv[8])) if len(sys.argv) > 8 else (None, None, None)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mlperf_keras import distribute, steps  # noqa: E402
from mlperf_keras.workloads.ncf import NCF  # noqa: E402

dist = distribute.create(os.environ["KERAS_BACKEND"], *jax_processes)
seed = 10 + dist.rank + seed_offset
steps.set_random_seed(seed)
import keras  # noqa: E402

rng = np.random.default_rng(0)
if os.environ.get("WORKER_MODEL", "ncf") == "resnet":
    from mlperf_keras.workloads.resnet import ResNet50

    workload = ResNet50()
    hparams = {**workload.reference_hparams("0.7"), **workload.demo_hparams, "num_classes": 10}
    config = types.SimpleNamespace(hparams=hparams, seed=seed, max_epochs=1, eval_offset=0,
                                   backend=os.environ["KERAS_BACKEND"])

    def global_batches():
        for _ in range(num_steps):
            yield (rng.integers(0, 256, (global_batch, 32, 32, 3), dtype=np.uint8),
                   rng.integers(0, 10, global_batch).astype(np.int32))
    learning_rate = 0.1
else:
    workload = NCF()
    hparams = {**workload.reference_hparams("0.5"), "num_users": 300, "num_items": 200, "mf_dim": 8,
               "mlp_layers": (16, 16, 8), "learning_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999}
    config = types.SimpleNamespace(hparams=hparams, seed=seed)

    def global_batches():
        for _ in range(num_steps):
            users = rng.integers(0, 300, global_batch).astype(np.int32)
            items = rng.integers(0, 200, global_batch).astype(np.int32)
            labels = (rng.random(global_batch) < 0.3).astype(np.float32)
            yield {"user": users, "item": items}, labels
    learning_rate = 0.5
model = workload.build_model(config)
# Plain SGD: Adam's m/sqrt(v) turns rounding-level gradient differences into full-size steps, which would hide
# whether the averaging itself is right.
optimizer = keras.optimizers.SGD(learning_rate=learning_rate)
dist.broadcast_variables(model.variables)
step = steps.make_train_step(model, optimizer, workload.loss, dist)

local = global_batch // dist.world_size
part = slice(dist.rank * local, (dist.rank + 1) * local)
for x, y in global_batches():
    step({k: v[part] for k, v in x.items()} if isinstance(x, dict) else x[part], y[part])
step.sync_to_model()
np.savez(os.path.join(out_dir, f"rank{dist.rank}_of{dist.world_size}.npz"),
         *[np.asarray(w.numpy() if hasattr(w, "numpy") else w) for w in model.weights])
hosts = ""
if dist.name == "horovod":   # how many hosts Horovod counted (its cross communicator: one rank per host)
    import horovod.tensorflow as hvd

    hosts = f", {hvd.cross_size()} hosts"
print(f"rank {dist.rank}/{dist.world_size}: {dist.describe()}{hosts}", flush=True)
