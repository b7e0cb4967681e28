"""Experiment: where does the Transformer's step time go on JAX? The same benchmark with one part swapped.

    KERAS_BACKEND=jax python benchmarks/transformer_variants.py [--dropout=keras|hash|rbg|off] \
        [--attention=shipped|bf16_logits|cudnn] [--fused_projections] -- <python -m mlperf_keras.benchmark flags>

- --dropout: `keras` is Keras' dropout as shipped (jax.random.bernoulli, threefry bits); `hash` draws the keep mask
  from a counter hash of each element's index and the layer's seed, elementwise integer ops that XLA fuses into the
  consumer; `rbg` draws it with jax.random's "rbg" generator (XLA's RngBitGenerator, Philox on GPU); `off` skips every dropout (the ceiling of a free generator, not a valid training run).
- --attention: `shipped` computes the logits from float32 copies of q and k; `bf16_logits` multiplies in the compute
  dtype and casts the product; `cudnn` calls jax.nn.dot_product_attention(implementation="cudnn") and so has no
  dropout on the attention weights (the ceiling of a fused kernel, not a valid training run).
- --fused_projections: one matmul for q, k and v (self-attention) or k and v (cross-attention), with the kernels
  concatenated at call time.
Everything after `--` goes to python -m mlperf_keras.benchmark. Results: benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _lowbias32(h):
    import jax.numpy as jnp

    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x7FEB352D)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(0x846CA68B)
    return h ^ (h >> 16)


def hash_dropout(inputs, rate, noise_shape=None, seed=None):
    import jax
    import jax.numpy as jnp
    from keras.src.backend.jax.random import jax_draw_seed

    if rate == 0.0:
        return inputs
    key = jax_draw_seed(seed).astype(jnp.uint32)
    shape = inputs.shape
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
        stride *= shape[axis]
    bits = _lowbias32(_lowbias32(index ^ key[0]) + key[1])
    keep = bits >= jnp.uint32(min(int(rate * 2.0 ** 32), 2 ** 32 - 1))
    return jnp.where(keep, inputs * jnp.asarray(1.0 / (1.0 - rate), inputs.dtype), jnp.zeros_like(inputs))


def rbg_dropout(inputs, rate, noise_shape=None, seed=None):
    import jax
    import jax.numpy as jnp
    from keras.src.backend.jax.random import jax_draw_seed

    if rate == 0.0:
        return inputs
    seed = jax_draw_seed(seed).astype(jnp.uint32)
    key = jax.random.wrap_key_data(jnp.concatenate([seed, seed ^ jnp.uint32(0x9E3779B9)]), impl="rbg")
    keep = jax.random.bernoulli(key, 1.0 - rate, inputs.shape)
    return jnp.where(keep, inputs * jnp.asarray(1.0 / (1.0 - rate), inputs.dtype), jnp.zeros_like(inputs))


def patch_attention(mode: str, fused: bool):
    from keras import ops

    from mlperf_keras.layers import attention as att

    MHA = att.MultiHeadAttention

    def attend(self, x, k, v, mask, training=False, q=None):
        if q is None:
            q = self._split(self.query(x))
        q = q * ops.cast(self.depth ** -0.5, x.dtype)
        if mode == "cudnn":
            import jax

            out = jax.nn.dot_product_attention(q, ops.cast(k, x.dtype), ops.cast(v, x.dtype), mask=mask, scale=1.0,
                                               implementation="cudnn")
        else:
            if mode == "bf16_logits":
                logits = ops.cast(ops.einsum("bthd,bshd->bhts", q, ops.cast(k, q.dtype)), "float32")
            else:
                logits = ops.einsum("bthd,bshd->bhts", ops.cast(q, "float32"), ops.cast(k, "float32"))
            logits = ops.where(mask, logits, att.NEG_INF)
            weights = self.dropout(ops.cast(ops.softmax(logits, axis=-1), x.dtype), training=training)
            out = ops.einsum("bhts,bshd->bthd", weights, ops.cast(v, x.dtype))
        return self.output_dense(ops.reshape(out, (ops.shape(x)[0], -1, self.d_model)))

    def call(self, x, memory, mask, training=False):
        if not fused:
            k, v = self.project_kv(memory)
            return attend(self, x, k, v, mask, training=training)
        if x is memory:
            w = ops.concatenate([self.query.kernel, self.key.kernel, self.value.kernel], axis=1)
            q, k, v = ops.split(ops.matmul(x, ops.cast(w, x.dtype)), 3, axis=-1)
            return attend(self, x, self._split(k), self._split(v), mask, training=training, q=self._split(q))
        w = ops.concatenate([self.key.kernel, self.value.kernel], axis=1)
        k, v = ops.split(ops.matmul(memory, ops.cast(w, memory.dtype)), 2, axis=-1)
        return attend(self, x, self._split(k), self._split(v), mask, training=training)

    MHA.attend = attend
    MHA.call = call


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dropout", choices=("keras", "hash", "rbg", "off"), default="keras")
    parser.add_argument("--attention", choices=("shipped", "bf16_logits", "cudnn"), default="shipped")
    parser.add_argument("--fused_projections", action="store_true")
    args, rest = parser.parse_known_args()
    import keras  # noqa: F401
    from keras.src.backend.jax import random as jax_random

    if args.dropout == "hash":
        jax_random.dropout = hash_dropout
    elif args.dropout == "rbg":
        jax_random.dropout = rbg_dropout
    elif args.dropout == "off":
        jax_random.dropout = lambda inputs, rate, noise_shape=None, seed=None: inputs
    if args.attention != "shipped" or args.fused_projections:
        patch_attention(args.attention, args.fused_projections)
    print(f"variant: dropout={args.dropout} attention={args.attention} fused_projections={args.fused_projections}")
    from absl import app

    from mlperf_keras import benchmark

    app.run(benchmark.main, argv=[sys.argv[0]] + [a for a in rest if a != "--"])


if __name__ == "__main__":
    main()
