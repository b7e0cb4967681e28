"""Experiment: where does GNMT's step time go on JAX, and which LSTM path is fastest? (mixed bf16, one GPU)

    KERAS_BACKEND=jax python benchmarks/experiments/gnmt_lstm_paths.py layers [--batch=256 --length=32]
    KERAS_BACKEND=jax python benchmarks/experiments/gnmt_lstm_paths.py split --lstm_path=keras|scan \
        [--batch_file=B.npz]
    KERAS_BACKEND=jax python benchmarks/experiments/gnmt_lstm_paths.py benchmark --lstm_path=keras|scan \
        -- <python -m mlperf_keras.benchmark flags>

- layers: one LSTM of 1024 (inputs 1024 or 2048) forward + backward (gradients of sum(outputs * r) with respect to
  its inputs and weights) on each path: Keras' LSTM in float32 (cuDNN through jax.experimental.rnn, what the model
  ran), the same masked (Keras' generic loop: the encoder's bidirectional layer), and layers/gnmt.lstm_sequence
  (input projection for all steps at once, lax.scan over h @ W_hh) in float32 and bf16, unrolled 1..8 steps.
- split: gradients of the model's three parts, each timed on its own on one batch: the encoder (embedding + 4
  LSTM layers), the decoder with attention (decoder embedding, 4 LSTM layers, attention; memory as an input), the
  classifier with the label-smoothed loss (decoder output as an input); and the whole model's gradient.
- benchmark: python -m mlperf_keras.benchmark with the model's LSTM path forced (the full train step with Adam).
Each timing is the median over --repeats of --steps back-to-back calls (after a warm-up), printed as one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

_BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCHMARKS), _BENCHMARKS]
import jax_timing  # noqa: E402


def functional(fn, variables):
    """fn(*args) -> f(values, *args), with the Keras variables bound to `values` (jax-differentiable)."""
    import keras

    def f(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return fn(*args)
    return f


def grad_time(fn, variables, inputs, steps, extra_grad_args=()):
    """ms per call of the gradient of sum(fn(*inputs) * r) w.r.t. the variables (and inputs in extra_grad_args)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    f = functional(fn, variables)
    values = [v.value for v in variables]
    probe = jax.eval_shape(lambda vs, *a: f(vs, *a), values, *inputs)
    if probe.shape == ():
        def scalar(vs, *a):
            return f(vs, *a).astype(jnp.float32)
    else:
        r = jnp.asarray(np.random.default_rng(0).standard_normal(probe.shape), jnp.float32)

        def scalar(vs, *a):
            return jnp.sum(f(vs, *a).astype(jnp.float32) * r)
    argnums = (0,) + tuple(1 + i for i in extra_grad_args)
    step = jax.jit(jax.grad(scalar, argnums=argnums))
    return jax_timing.timed(step, values, *inputs, steps=steps, warmup=0, repeats=3)[0]


def run_layers(args):
    import jax.numpy as jnp
    import keras
    import numpy as np

    from mlperf_keras.layers.gnmt import lstm_sequence

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    rng = np.random.default_rng(0)
    lengths = rng.integers(args.length // 2, args.length + 1, args.batch)
    mask = jnp.asarray(np.arange(args.length)[None, :] < lengths[:, None])
    init = keras.initializers.RandomUniform(-0.1, 0.1, seed=1)
    for inputs in [int(i) for i in args.inputs.split(",")]:
        x = jnp.asarray(rng.standard_normal((args.batch, args.length, inputs)) * 0.5, jnp.bfloat16)
        variants = [("keras_cudnn_f32", "float32", None), ("keras_masked_f32", "float32", "mask")]
        variants += [("scan_float32_unroll1", "float32", 1)]
        variants += [(f"scan_bfloat16_unroll{u}", "bfloat16", u) for u in (1, 2, 4, 8)]
        variants += [("scan_bfloat16_unroll4_masked_reverse", "bfloat16", "mask_reverse")]
        for name, dtype, mode in variants:
            layer = keras.layers.LSTM(1024, return_sequences=True, kernel_initializer=init,
                                      recurrent_initializer=init, bias_initializer=init, unit_forget_bias=False,
                                      dtype=dtype if name.startswith("keras") else
                                      ("mixed_bfloat16" if dtype == "bfloat16" else "float32"))
            layer.build((None, None, inputs))
            if name == "keras_cudnn_f32":
                fn = lambda x: layer(x)  # noqa: E731
            elif name == "keras_masked_f32":
                fn = lambda x: layer(x, mask=mask)  # noqa: E731
            elif mode == "mask_reverse":
                fn = lambda x: lstm_sequence(layer, x, mask, reverse=True, unroll=4)  # noqa: E731
            else:
                fn = (lambda u: lambda x: lstm_sequence(layer, x, unroll=u))(mode)
            try:
                ms = grad_time(fn, layer.trainable_variables, (x,), args.steps, extra_grad_args=(0,))
                print(json.dumps({"part": "layer", "variant": name, "inputs": inputs, "batch": args.batch,
                                  "length": args.length, "fwd_bwd_ms": round(ms, 3)}), flush=True)
            except Exception as e:  # a variant that does not run is a result too
                print(json.dumps({"part": "layer", "variant": name, "inputs": inputs,
                                  "error": f"{type(e).__name__}: {str(e)[:200]}"}), flush=True)


def load_batch(args):
    import numpy as np

    if args.batch_file:
        data = np.load(args.batch_file)
        return data["source"].astype("int32"), data["target_input"].astype("int32"), data["labels"].astype("int32")
    rng = np.random.default_rng(0)
    shape = (args.batch, args.length)
    lengths = rng.integers(args.length // 2, args.length + 1, args.batch)
    real = np.arange(args.length)[None, :] < lengths[:, None]
    source = np.where(real, rng.integers(4, args.vocab, shape), 0).astype("int32")
    target = np.where(real, rng.integers(4, args.vocab, shape), 0).astype("int32")
    return source, target, np.roll(target, -1, axis=1)


def run_split(args):
    import jax.numpy as jnp
    import keras
    import numpy as np

    from mlperf_keras.layers import gnmt
    from mlperf_keras.workloads.gnmt import smoothed_loss

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    gnmt.SCAN_UNROLL = args.unroll
    model = gnmt.GNMT(gnmt.GNMTOptions(vocab_size=args.vocab, hidden=args.hidden), seed=1, lstm_path=args.lstm_path)
    model.build()
    source, target_input, labels = (jnp.asarray(a) for a in load_batch(args))
    tokens = int(np.count_nonzero(np.asarray(source)) + np.count_nonzero(np.asarray(labels)))
    v = model.trainable_variables
    memory, mask = model.encode(source)
    hidden = model.decode_hidden(target_input, memory, mask)
    enc_vars = [model.embedding.embeddings] + [w for layer in [model.encoder_forward, model.encoder_backward,
                                                                *model.encoder_layers]
                                               for w in layer.trainable_variables]
    dec_vars = [model.embedding.embeddings] + [w for layer in [*model.decoder_layers, model.attention]
                                               for w in layer.trainable_variables]
    parts = {
        "encoder": grad_time(lambda s: model.encode(s, training=True)[0], enc_vars, (source,), args.steps),
        "decoder_attention": grad_time(lambda t, m, k: model.decode_hidden(t, m, k, training=True), dec_vars,
                                       (target_input, memory, mask), args.steps, extra_grad_args=(1,)),
        "classifier_loss": grad_time(lambda h, y: smoothed_loss(y, model.classifier(h), 0.1),
                                     model.classifier.trainable_variables, (hidden, labels), args.steps,
                                     extra_grad_args=(0,)),
        "whole_model": grad_time(lambda s, t, y: smoothed_loss(y, model({"source": s, "target_input": t},
                                                                          training=True), 0.1),
                                 v, (source, target_input, labels), args.steps),
    }
    print(json.dumps({"part": "split", "lstm_path": args.lstm_path, "unroll": args.unroll, "batch_shape": list(source.shape),
                      "target_shape": list(target_input.shape), "tokens": tokens,
                      **{f"{k}_ms": round(ms, 3) for k, ms in parts.items()},
                      "sum_of_parts_ms": round(sum(ms for k, ms in parts.items() if k != "whole_model"), 3)}),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("layers", "split", "benchmark"))
    parser.add_argument("--lstm_path", choices=("keras", "scan"), default="scan")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--batch_file")
    parser.add_argument("--unroll", type=int, default=1, help="benchmark, split: the scan path's unroll")
    parser.add_argument("--inputs", default="1024,2048", help="layers: input widths")
    parser.add_argument("--hidden", type=int, default=1024, help="split: the model's width (a small one to try it)")
    parser.add_argument("--vocab", type=int, default=32_320, help="split: vocabulary (without --batch_file)")
    parser.add_argument("--steps", type=int, default=20)
    args, rest = parser.parse_known_args()
    if args.part == "layers":
        return run_layers(args)
    if args.part == "split":
        return run_split(args)
    from absl import app

    from mlperf_keras import benchmark
    from mlperf_keras.layers import gnmt

    gnmt.default_lstm_path = lambda: args.lstm_path
    gnmt.SCAN_UNROLL = args.unroll
    print(f"variant: lstm_path={args.lstm_path} unroll={args.unroll}", flush=True)
    app.run(benchmark.main, argv=[sys.argv[0]] + [a for a in rest if a != "--"])


if __name__ == "__main__":
    main()
