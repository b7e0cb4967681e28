"""What one training step under each --precision does to the weights, on the backend this process runs.

Run as `python -m tests.precision_probe` (prints JSON) so that each backend gets a fresh interpreter: Keras picks its
backend once, at import. tests/test_precision.py compares the precisions with fp32's step.
"""
from __future__ import annotations

import json

import numpy as np

PRECISIONS = ("fp32", "fp16", "bf16")


def _dense_model(keras):
    # Fixed initializers, so every precision starts from the same float32 weights.
    init = keras.initializers.RandomNormal(stddev=0.1, seed=1)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu", kernel_initializer=init),
                             keras.layers.Dense(1, kernel_initializer=init)])


def _train(precision_name, build_model, loss_fn, build_optimizer, batch, steps):
    """(weights before, weights after, losses) of `steps` train steps on one batch."""
    import keras

    from mlperf_keras import distribute, precision, steps as train_steps

    precision.set_policy(precision_name)
    model = build_model()
    before = [np.array(w, dtype=np.float32) for w in model.get_weights()]
    optimizer = precision.wrap_optimizer(build_optimizer(), precision_name)
    dist = distribute.create(keras.backend.backend())
    step = train_steps.make_train_step(model, optimizer, loss_fn, dist, jit_compile=True)
    x, y = step.to_device(batch)
    losses = [float(np.asarray(step(x, y))) for _ in range(steps)]
    step.sync_to_model()
    after = [np.array(w, dtype=np.float32) for w in model.get_weights()]
    precision.set_policy("fp32")
    return before, after, losses


def dense_probe(steps: int) -> dict:
    """A 2-layer Dense model and plain SGD: per precision, the norm of each weight's change and the losses."""
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    # Small targets: a loss below 0.1, so the first steps' fp16 gradients at the initial loss scale (2^15) stay
    # finite and no step is skipped (a skipped step is loss scaling working, but not what this compares).
    y = (0.1 * (x @ rng.normal(size=(8, 1))) + 0.05).astype(np.float32)
    out = {}
    for name in PRECISIONS:
        before, after, losses = _train(name, lambda: _dense_model(keras), keras.losses.MeanSquaredError(),
                                       lambda: keras.optimizers.SGD(learning_rate=0.05), (x, y), steps)
        out[name] = {"update_norms": [float(np.linalg.norm(a - b)) for a, b in zip(after, before)],
                     "losses": losses}
    return out


def ncf_probe() -> dict:
    """One step of the NCF demo's NeuMF with its own optimizer and loss, per precision: each weight's change norm."""
    from mlperf_keras import registry
    from mlperf_keras.config import RunConfig, SystemInfo

    workload = registry.get("ncf")
    hparams = {**workload.reference_hparams("0.5"), **workload.demo_hparams, "num_users": 64, "num_items": 96}
    out = {}
    for name in PRECISIONS:
        config = RunConfig(model="ncf", ruleset="0.5", seed=5, precision=name, global_batch_size=256, max_epochs=1,
                           hparams=hparams, quality_target=0.4, data_dir=None, output_dir="/tmp", synthetic=True,
                           demo=False, num_workers=1, backend="", jit_compile=True, submission_org="probe",
                           submission_division="closed", submission_status="research",
                           system=SystemInfo("cpu", "cpu", 0, None, "cpu", 1.0, None))
        from mlperf_keras import distribute

        batch = next(iter(workload.synthetic_train_data(config, distribute.SingleProcess()).batches(0)))
        from mlperf_keras import steps as train_steps

        def build():
            train_steps.set_random_seed(5)
            return workload.build_model(config)

        before, after, _ = _train(name, build, workload.loss, lambda: workload.build_optimizer(config, 10),
                                  batch, 1)
        out[name] = {"update_norms": [float(np.linalg.norm(a - b)) for a, b in zip(after, before)]}
    return out


if __name__ == "__main__":
    print(json.dumps({"dense_one_step": dense_probe(1), "dense_30_steps": dense_probe(30), "ncf": ncf_probe()}))
