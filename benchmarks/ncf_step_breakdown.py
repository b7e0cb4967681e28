"""Where an NCF training step's time goes on the JAX backend (run on a GPU):

    KERAS_BACKEND=jax python benchmarks/ncf_step_breakdown.py [--batch_size=1048576] [--precision=bf16]

Times, back to back with one wait at the end: the forward pass, forward+backward (gradients only), and the full
step with Adam and with plain SGD, each jitted on its own. The gaps say whether the embedding-gradient scatter or
the optimizer update dominates.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(fn, args, steps=50, warmup=5):
    import jax

    for _ in range(warmup):
        out = fn(*args)
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(steps):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / steps * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=1_048_576)
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp
    import keras

    from mlperf_keras import precision
    from mlperf_keras.workloads.ncf import NCF

    precision.set_policy(args.precision)
    workload = NCF()
    config = types.SimpleNamespace(hparams=workload.reference_hparams("0.5"), seed=1)
    model = workload.build_model(config)
    key = jax.random.PRNGKey(0)
    x = {"user": jax.random.randint(key, (args.batch_size,), 0, 138_493, dtype=jnp.int32),
         "item": jax.random.randint(key, (args.batch_size,), 0, 26_744, dtype=jnp.int32)}
    y = (jax.random.uniform(key, (args.batch_size,)) < 0.2).astype(jnp.float32)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss_fn(tv, x, y):
        pred, _ = model.stateless_call(tv, non_trainable, x, training=True)
        return workload.loss(y, pred)

    forward = jax.jit(loss_fn)
    grads = jax.jit(jax.grad(loss_fn))
    rows = {"forward": timed(forward, (trainable, x, y)), "forward+backward": timed(grads, (trainable, x, y))}
    for name, opt in (("full step, Adam", keras.optimizers.Adam(0.0045, 0.25, 0.5, 1e-8)),
                      ("full step, SGD", keras.optimizers.SGD(0.01))):
        opt.build(model.trainable_variables)
        opt_vars = [v.value for v in opt.variables]

        def step(tv, ov, x, y, opt=opt):
            g = jax.grad(loss_fn)(tv, x, y)
            return opt.stateless_apply(ov, g, tv)
        rows[name] = timed(jax.jit(step), (trainable, opt_vars, x, y))
    for name, ms in rows.items():
        print(f"{name:20s} {ms:7.2f} ms  {args.batch_size / ms / 1e3:8.1f} M samples/s")


if __name__ == "__main__":
    main()
