"""Experiment: where does the Transformer's step time go on JAX? The same benchmark with one part swapped.

    KERAS_BACKEND=jax python benchmarks/experiments/transformer_variants.py [--dropout=shipped|keras|rbg|hash|off] \
        [--attention=shipped|bf16_logits|f32_accumulate|cudnn] [--fused_projections] [--loss=shipped|logsumexp] \
        -- <python -m mlperf_keras.benchmark flags>

- --dropout: the generator of every layers/dropout.py layer, whatever the hparams say: `shipped` keeps the hparam
  dropout_rng (default keras); `keras` is Keras' stock dropout (jax.random.bernoulli, threefry bits; closed);
  `rbg` is jax.random's "rbg" generator (XLA's RngBitGenerator, Philox on GPU; closed; "unsafe_rbg" draws the same
  bits); `hash` is the counter-hash masks (open division only); `off` skips every dropout (the ceiling of a free
  generator, not a valid run). The same as --hparams=dropout_rng=keras|rbg|hash on a training run.
- --attention: `shipped` computes the logits from float32 copies of q and k; `bf16_logits` multiplies in the compute
  dtype and casts the bf16 product; `f32_accumulate` multiplies bf16 operands into a float32 product
  (jnp.einsum(preferred_element_type=float32), as cuBLAS accumulates); `cudnn` calls
  jax.nn.dot_product_attention(implementation="cudnn") and so has no dropout on the attention weights (the ceiling
  of a fused kernel, not a valid training run).
- --fused_projections: one matmul for q, k and v (self-attention) or k and v (cross-attention), with the kernels
  concatenated at call time.
- --loss: `logsumexp` computes the same label-smoothed cross entropy as lse(z) - c z_t - l (sum(z) - z_t), two
  reductions over the logits instead of a materialised log-softmax.
Everything after `--` goes to python -m mlperf_keras.benchmark. Results: benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def force_generator(generator: str):
    """Every layers.dropout.Dropout built from now on draws from `generator`."""
    from mlperf_keras.layers import dropout

    init = dropout.Dropout.__init__

    def forced(self, rate, seed=None, **kwargs):
        kwargs.pop("generator", None)
        init(self, rate, seed=seed, generator=generator, **kwargs)

    dropout.Dropout.__init__ = forced


def logsumexp_loss(targets, logits, smoothing, vocab_size):
    import numpy as np
    from keras import ops

    from mlperf_keras.workloads.transformer import PAD_ID

    confidence, low = 1.0 - smoothing, smoothing / (vocab_size - 1)
    z = ops.cast(logits, "float32")
    targets = ops.cast(targets, "int32")
    z_true = ops.squeeze(ops.take_along_axis(z, ops.expand_dims(targets, -1), axis=-1), -1)
    xent = ops.logsumexp(z, axis=-1) - confidence * z_true - low * (ops.sum(z, axis=-1) - z_true)
    normaliser = -(confidence * np.log(confidence) + (vocab_size - 1) * low * np.log(low + 1e-20))
    weights = ops.cast(ops.not_equal(targets, PAD_ID), "float32")
    return ops.sum((xent - normaliser) * weights) / ops.maximum(ops.sum(weights), 1.0)


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
            if mode == "f32_accumulate":
                import jax.numpy as jnp

                logits = jnp.einsum("bthd,bshd->bhts", q, k.astype(q.dtype), preferred_element_type=jnp.float32)
            elif mode == "bf16_logits":
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
    parser.add_argument("--dropout", choices=("shipped", "keras", "rbg", "hash", "off"), default="shipped")
    parser.add_argument("--attention", choices=("shipped", "bf16_logits", "f32_accumulate", "cudnn"),
                        default="shipped")
    parser.add_argument("--fused_projections", action="store_true")
    parser.add_argument("--loss", choices=("shipped", "logsumexp"), default="shipped")
    args, rest = parser.parse_known_args()
    from mlperf_keras.layers import dropout
    from mlperf_keras.workloads import transformer

    if args.dropout in dropout.GENERATORS:
        force_generator(args.dropout)
    elif args.dropout == "off":
        dropout.Dropout.call = lambda self, inputs, training=False: inputs
    if args.attention != "shipped" or args.fused_projections:
        patch_attention(args.attention, args.fused_projections)
    if args.loss == "logsumexp":
        transformer.smoothed_cross_entropy = logsumexp_loss
    print(f"variant: dropout={args.dropout} attention={args.attention} fused_projections={args.fused_projections} "
          f"loss={args.loss}")
    from absl import app

    from mlperf_keras import benchmark

    app.run(benchmark.main, argv=[sys.argv[0]] + [a for a in rest if a != "--"])


if __name__ == "__main__":
    main()
