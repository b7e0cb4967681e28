"""Where an NCF training step's time goes on the JAX backend (run on a GPU):

    KERAS_BACKEND=jax python benchmarks/experiments/ncf_step_breakdown.py [--batch_size=1048576] [--precision=bf16]

Times, back to back with one wait at the end: the forward pass, forward+backward (gradients only), and the full
step with Adam and with plain SGD, each jitted on its own. The gaps say whether the embedding-gradient scatter or
the optimizer update dominates.
"""
from __future__ import annotations

import argparse
import os
import sys
import types


_BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCHMARKS), _BENCHMARKS]
import jax_timing  # noqa: E402


def timed(fn, args) -> float:
    """Milliseconds per call over 50 calls, after 5 untimed ones (the first compiles)."""
    return jax_timing.timed(fn, *args, steps=50, warmup=4)[0]


def _embedding_variants(x, y):
    """Forward+backward of the same NeuMF written in plain JAX, with the embedding lookups done three ways."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(1)
    users, items = x["user"], x["item"]
    dims = [(256, 256), (256, 128), (128, 64)]
    dense = [(jax.random.normal(key, (a, b)) * 0.05, jnp.zeros(b)) for a, b in dims]
    final = (jax.random.normal(key, (128, 1)) * 0.05, jnp.zeros(1))

    def head(mf, mlp, dense, final):
        for w, b in dense:
            mlp = jax.nn.relu(mlp @ w.astype(jnp.bfloat16) + b.astype(jnp.bfloat16))
        logit = (jnp.concatenate([mf, mlp], 1) @ final[0].astype(jnp.bfloat16)).astype(jnp.float32)[:, 0] + final[1][0]
        return jnp.mean(jnp.maximum(logit, 0) - logit * y + jnp.log1p(jnp.exp(-jnp.abs(logit))))

    separate = [jax.random.normal(key, (n, d)) * 0.01 for n, d in
                ((138_493, 64), (26_744, 64), (138_493, 128), (26_744, 128))]

    def loss_separate(tables, dense, final, mode=None):
        mu, mi, pu, pi = [jnp.take(t, idx, axis=0, mode=mode).astype(jnp.bfloat16)
                          for t, idx in zip(tables, (users, items, users, items))]
        return head(mu * mi, jnp.concatenate([pu, pi], 1), dense, final)

    fused = [jax.random.normal(key, (138_493, 192)) * 0.01, jax.random.normal(key, (26_744, 192)) * 0.01]

    def loss_fused(tables, dense, final, mode=None):
        u = jnp.take(tables[0], users, axis=0, mode=mode).astype(jnp.bfloat16)
        i = jnp.take(tables[1], items, axis=0, mode=mode).astype(jnp.bfloat16)
        return head(u[:, :64] * i[:, :64], jnp.concatenate([u[:, 64:], i[:, 64:]], 1), dense, final)

    out = {}
    for name, fn, tables, mode in (("jax: 4 tables", loss_separate, separate, None),
                                   ("jax: 4 tables, clip", loss_separate, separate, "clip"),
                                   ("jax: 2 fused tables", loss_fused, fused, None),
                                   ("jax: 2 fused, clip", loss_fused, fused, "clip")):
        grad = jax.jit(jax.grad(lambda t, d, f, fn=fn, mode=mode: fn(t, d, f, mode), argnums=(0, 1, 2)))
        out[name + " fwd+bwd"] = timed(grad, (tables, dense, final))
    return out


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
    rows.update(_embedding_variants(x, y))
    for name, ms in rows.items():
        print(f"{name:20s} {ms:7.2f} ms  {args.batch_size / ms / 1e3:8.1f} M samples/s")


if __name__ == "__main__":
    main()
