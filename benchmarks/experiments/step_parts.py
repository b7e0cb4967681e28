"""Experiment: where a workload's JAX train step spends its time beyond the model's gradient (one GPU).

    KERAS_BACKEND=jax python benchmarks/experiments/step_parts.py [--steps=20] -- <python -m mlperf_keras.benchmark flags>

Builds the workload exactly as `python -m mlperf_keras.benchmark` does (same flags, model, optimizer, loss and one
synthetic batch on the device), then times, each as one jitted function called back to back (state threaded
through the calls where the function donates it, as the training loop does):
- forward_loss: the loss alone;
- gradient: value_and_grad of the loss (the gradients are outputs, so nothing is dropped);
- gradient_clip: the same plus clipping by the global norm (when the optimizer clips);
- optimizer_apply: the optimizer's stateless_apply on fixed gradients, alone;
- shipped_step: the train step the loop runs (steps._JaxTrainStep);
- gradient_tree_adam (Adam only): the gradient, the clip and Adam written as one jax.tree_util.tree_map over the
  parameters (Keras' update: m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2), p -= lr sqrt(1 - b2^t) / (1 - b1^t)
  m / (sqrt(v) + eps)), the ceiling a fused update gives.
Prints one JSON line: milliseconds per call of each, the model's parameter count and the optimizer's class.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

_BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCHMARKS), _BENCHMARKS]
import jax_timing  # noqa: E402


def threaded(fn, state, *args, steps: int, warmup: int = 3) -> float:
    """ms per call of state = fn(state, *args)[-1] over `steps` calls back to back (fn donates its state)."""
    import jax

    for _ in range(1 + warmup):
        state = fn(state, *args)[-1]
    jax.block_until_ready(state)
    start = time.perf_counter()
    for _ in range(steps):
        state = fn(state, *args)[-1]
    jax.block_until_ready(state)
    return 1e3 * (time.perf_counter() - start) / steps


def time_parts(step, loss_fn, batch, steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import keras

    model, optimizer = step.model, step.optimizer
    x, y = batch
    trainable, non_trainable, opt_vars = step._state

    def loss_of(tr, nt, x, y):
        pred, _ = model.stateless_call(tr, nt, x, training=True)
        return loss_fn(y, pred)

    grad = jax.value_and_grad(loss_of)
    clipnorm = getattr(optimizer, "global_clipnorm", None)

    def clip(grads):
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in grads))
        scale = jnp.minimum(1.0, clipnorm / jnp.maximum(norm, 1e-12))
        return [g * scale.astype(g.dtype) for g in grads]

    results = {"optimizer": type(optimizer).__name__, "global_clipnorm": clipnorm,
               "parameters": int(sum(v.size for v in trainable))}
    results["forward_loss_ms"] = jax_timing.timed(jax.jit(loss_of), trainable, non_trainable, x, y, steps=steps)[0]
    grad_jit = jax.jit(grad)
    results["gradient_ms"] = jax_timing.timed(grad_jit, trainable, non_trainable, x, y, steps=steps)[0]
    if clipnorm:
        results["gradient_clip_ms"] = jax_timing.timed(
            jax.jit(lambda tr, nt, x, y: clip(grad(tr, nt, x, y)[1])), trainable, non_trainable, x, y, steps=steps)[0]
    grads = grad_jit(trainable, non_trainable, x, y)[1]

    def apply(state, grads):
        tr, ov = state
        tr, ov = optimizer.stateless_apply(ov, grads, tr)
        return (tr, ov)

    apply_jit = jax.jit(lambda state, grads: (apply(state, grads),), donate_argnums=(0,))
    copies = lambda values: [jnp.copy(v) for v in values]  # noqa: E731
    results["optimizer_apply_ms"] = threaded(apply_jit, (copies(trainable), copies(opt_vars)), grads, steps=steps)
    shipped = lambda state, x, y: step._step(state, x, y)  # noqa: E731  (loss, state): state last
    results["shipped_step_ms"] = threaded(
        shipped, (copies(trainable), copies(non_trainable), copies(opt_vars)), x, y, steps=steps)

    if isinstance(optimizer, keras.optimizers.Adam):
        b1, b2, eps = optimizer.beta_1, optimizer.beta_2, optimizer.epsilon
        schedule = optimizer._learning_rate

        def adam_step(state, x, y):
            tr, m, v, t = state
            loss, g = grad(tr, non_trainable, x, y)
            if clipnorm:
                g = clip(g)
            t = t + 1
            lr = schedule(t - 1) if callable(schedule) else schedule
            alpha = lr * jnp.sqrt(1 - b2 ** t.astype(jnp.float32)) / (1 - b1 ** t.astype(jnp.float32))
            m = jax.tree_util.tree_map(lambda m, g: m + (g - m) * (1 - b1), m, g)
            v = jax.tree_util.tree_map(lambda v, g: v + (jnp.square(g) - v) * (1 - b2), v, g)
            tr = jax.tree_util.tree_map(lambda p, m, v: p - alpha * m / (jnp.sqrt(v) + eps), tr, m, v)
            return loss, (tr, m, v, t)

        zeros = [jnp.zeros_like(p) for p in trainable]
        results["gradient_tree_adam_ms"] = threaded(
            jax.jit(adam_step, donate_argnums=(0,)),
            (copies(trainable), zeros, [jnp.zeros_like(p) for p in trainable], jnp.zeros((), jnp.int32)), x, y,
            steps=steps)
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in results.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    args, benchmark_argv = parser.parse_known_args()
    benchmark_argv = [a for a in benchmark_argv if a != "--"]

    from mlperf_keras import benchmark, steps

    captured = {}
    make_train_step = steps.make_train_step

    def capture_make_train_step(model, optimizer, loss_fn, dist, jit_compile=True):
        captured["loss_fn"] = loss_fn
        return make_train_step(model, optimizer, loss_fn, dist, jit_compile)

    measure = benchmark.measure

    def measure_then_parts(step, batch, *a, **k):
        result = measure(step, batch, *a, **k)
        parts = time_parts(step, captured["loss_fn"], batch, args.steps)
        print(json.dumps({"part": "step_parts", "argv": benchmark_argv, **parts}), flush=True)
        return result

    steps.make_train_step = capture_make_train_step
    benchmark.measure = measure_then_parts
    sys.argv = [sys.argv[0], *benchmark_argv]
    benchmark.entry.run(benchmark.main)


if __name__ == "__main__":
    main()
