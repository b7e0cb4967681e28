"""GNMT: parameter count derived against the reference's, shapes, masking, gradients to every layer, init, and the
cached decode step against the full forward, on TensorFlow and (in a subprocess) JAX."""
from __future__ import annotations

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from mlperf_keras.layers import gnmt
from tests.conftest import ROOT

SMALL = gnmt.GNMTOptions(vocab_size=40, hidden=16, num_layers=4, dropout=0.2)


def count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


def small_batch():
    source = np.array([[2, 5, 6, 7, 3, 0], [2, 8, 3, 0, 0, 0]], np.int32)
    target_input = np.array([[2, 5, 6, 7], [2, 9, 0, 0]], np.int32)
    return {"source": source, "target_input": target_input}


@pytest.fixture(scope="module")
def small_model():
    model = gnmt.GNMT(SMALL, seed=1)
    model.build()
    return model


def test_parameter_count_is_the_references():
    """160,671,297 parameters at vocabulary 32,320: the reference model's (mlcommons/training rnn_translator/pytorch
    at 69dbe8b, seq2seq/models/{encoder,decoder,attention}.py: nn.LSTM(bias=True) has bias_ih and bias_hh per
    direction), the count NVIDIA apex's distributed-optimizer test states ("MLPerf GNMT has 160671297 parameters"). By
    hand: an LSTM direction with I inputs has
    4H(I + H) weights and 2 x 4H biases (H = 1024, V = 32,320):
      embedding (shared)                     V*H             = 33,095,680
      encoder 0, bidirectional, I = H         2 x 8,396,800   = 16,793,600
      encoder 1, I = 2H                                       = 12,591,104
      encoder 2-3, I = H                      2 x 8,396,800   = 16,793,600
      decoder 0, I = H                                        =  8,396,800
      attention: W_q, W_k 2H^2, v H, g 1, b H                 =  2,099,201
      decoder 1-3, I = 2H                     3 x 12,591,104  = 37,773,312
      classifier H*V + V                                      = 33,128,000
      total                                                   = 160,671,297"""
    assert gnmt.parameter_count(gnmt.GNMTOptions()) == 160_671_297


@pytest.mark.parametrize("layers", [2, 4])
def test_parameter_count_formula_equals_the_built_model(layers):
    options = gnmt.GNMTOptions(vocab_size=40, hidden=16, num_layers=layers)
    model = gnmt.GNMT(options, seed=0)
    model.build()
    assert count(model.trainable_variables) == gnmt.parameter_count(options)
    # The only other variables are random-generator states (the build's seed generator, dropout, LSTM cells).
    assert all("seed_generator" in v.path for v in model.non_trainable_variables)


def test_init_is_uniform_and_every_layer_draws_its_own_values(small_model):
    values = {v.path: np.asarray(v) for v in small_model.trainable_variables}
    for path, value in values.items():
        if path.endswith("bias_hh"):
            continue  # zeros (below)
        if path.endswith("scale"):
            assert value == pytest.approx(1 / np.sqrt(SMALL.hidden))
        elif path.endswith("energy_bias"):
            assert not value.any()
        else:
            assert np.abs(value).max() <= 0.1 and value.std() > 0.04, path  # U(-0.1, 0.1): std 0.0577
    items = [(p, v) for p, v in values.items() if not p.endswith("bias_hh")]
    for i, (a, va) in enumerate(items):
        for b, vb in items[:i]:
            if va.shape == vb.shape and va.size > 1:
                assert not np.allclose(va, vb), (a, b)
    # init_lstm_ (mlcommons/training rnn_translator/pytorch/seq2seq/utils.py at 69dbe8b): bias_ih U(-0.1, 0.1),
    # bias_hh zeros, on each of the 9 LSTM directions; no forget-gate bias of 1.
    bias_ih = [v for p, v in values.items() if p.endswith("/bias_ih")]
    bias_hh = [v for p, v in values.items() if p.endswith("/bias_hh")]
    assert len(bias_ih) == len(bias_hh) == 9
    assert all(np.abs(b).max() <= 0.1 and b.std() > 0.04 for b in bias_ih)
    assert all(not b.any() for b in bias_hh)


def test_shapes_and_padding_does_not_change_real_outputs(small_model):
    batch = small_batch()
    logits = np.asarray(small_model(batch))
    assert logits.shape == (2, 4, SMALL.vocab_size)
    # Extra padding on the source (bidirectional layer masked, attention masked) changes nothing.
    longer = dict(batch, source=np.pad(batch["source"], ((0, 0), (0, 3))))
    np.testing.assert_allclose(np.asarray(small_model(longer)), logits, atol=1e-5)
    memory, mask = small_model.encode(batch["source"])
    assert memory.shape == (2, 6, SMALL.hidden) and np.asarray(mask).sum() == 8


def test_dropout_only_in_training(small_model):
    batch = small_batch()
    a, b = (np.asarray(small_model(batch, training=False)) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    c = np.asarray(small_model(batch, training=True))
    assert np.abs(c - a).max() > 1e-4
    assert len(small_model.encoder_dropouts) == len(small_model.decoder_dropouts) == 4
    assert all(d.rate == 0.2 for d in small_model.encoder_dropouts + small_model.decoder_dropouts)


def test_gradients_reach_every_layer(small_model):
    import tensorflow as tf

    batch = small_batch()
    target = np.array([[5, 6, 7, 3], [9, 3, 0, 0]], np.int32)
    with tf.GradientTape() as tape:
        logits = small_model(batch, training=True)
        loss = keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)
        loss = tf.reduce_sum(loss)
    grads = tape.gradient(loss, small_model.trainable_variables)
    for var, grad in zip(small_model.trainable_variables, grads):
        assert grad is not None and float(tf.reduce_max(tf.abs(tf.convert_to_tensor(grad)))) > 0, var.path


def test_decode_step_equals_the_full_forward(small_model):
    batch = small_batch()
    full = np.asarray(small_model(batch))
    step, state = small_model.beam_decoder(batch["source"], 2)
    inputs = np.repeat(batch["target_input"], 2, axis=0)
    for i in range(inputs.shape[1]):
        logits, weights, state = step(inputs[:, i], i, state)
        np.testing.assert_allclose(np.asarray(logits)[::2], full[:, i], atol=1e-5)
        weights = np.asarray(weights)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        assert not weights[2:, 3:].any()  # sentence 2 has 3 real source tokens


_JAX = """
import json, numpy as np
from mlperf_keras.layers import gnmt
m = gnmt.GNMT(gnmt.GNMTOptions(vocab_size=40, hidden=8), seed=1)
m.build()
x = {"source": np.array([[2, 5, 3, 0]], np.int32), "target_input": np.array([[2, 5]], np.int32)}
import jax
fixed = [v.value for v in m.non_trainable_variables]
def loss(trainable):
    out, _ = m.stateless_call(trainable, fixed, x, training=True)
    return jax.numpy.sum(out ** 2)
grads = jax.grad(loss)([v.value for v in m.trainable_variables])
print(json.dumps({"shape": list(m(x).shape), "nonzero": [bool(abs(g).max() > 0) for g in grads]}))
"""


@pytest.mark.slow  # Keras' JAX LSTM (lax.scan) compiles for about a minute on a loaded 2-core machine
def test_runs_and_trains_on_jax():
    out = subprocess.run([sys.executable, "-c", _JAX], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "KERAS_BACKEND": "jax"})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["shape"] == [1, 2, 40]
    # 9 LSTMs x 4 (kernel, recurrent kernel, bias_ih, bias_hh), embedding, classifier 2, attention 5
    assert all(result["nonzero"]) and len(result["nonzero"]) == 44


_JAX_SCAN = """
import json, keras, numpy as np, jax
from mlperf_keras.layers import gnmt
options = gnmt.GNMTOptions(vocab_size=40, hidden=8, dropout=0.0)
x = {"source": np.array([[2, 5, 6, 7, 3, 0], [2, 8, 3, 0, 0, 0]], np.int32),
     "target_input": np.array([[2, 5, 6, 7], [2, 9, 0, 0]], np.int32)}
def grads(m):
    fixed = [v.value for v in m.non_trainable_variables]
    def loss(trainable):
        out, _ = m.stateless_call(trainable, fixed, x, training=True)
        return jax.numpy.sum(out ** 2)
    return [np.asarray(g) for g in jax.grad(loss)([v.value for v in m.trainable_variables])]
result = {}
models = {}
for path in ("keras", "scan"):
    models[path] = gnmt.GNMT(options, seed=1, lstm_path=path)
    models[path].build()
models["scan"].set_weights(models["keras"].get_weights())
out = {p: np.asarray(m(x)) for p, m in models.items()}
result["max_output_difference"] = float(np.abs(out["keras"] - out["scan"]).max())
g = {p: grads(m) for p, m in models.items()}
# Relative to the largest gradient: the attention's gradients here are ~1e-10 and differ by rounding alone.
result["max_relative_gradient_difference"] = (max(float(np.abs(a - b).max()) for a, b in zip(g["keras"], g["scan"]))
                                              / max(float(np.abs(a).max()) for a in g["keras"]))
step, state = models["scan"].beam_decoder(x["source"], 1)
steps = []
for i in range(x["target_input"].shape[1]):
    logits, _, state = step(x["target_input"][:, i], i, state)
    steps.append(np.asarray(logits))
result["max_decode_step_difference"] = float(np.abs(np.stack(steps, 1) - out["scan"]).max())
keras.mixed_precision.set_global_policy("mixed_bfloat16")
half = gnmt.GNMT(options, seed=1)
half.build()
half.set_weights(models["keras"].get_weights())
result["bf16_default_path"] = half.lstm_path
result["bf16_lstm_dtype"] = half.encoder_forward.compute_dtype
result["bf16_max_output_difference"] = float(np.abs(np.asarray(half(x), np.float32) - out["keras"]).max())
result["logit_scale"] = float(np.abs(out["keras"]).max())
print(json.dumps(result))
"""


@pytest.mark.slow  # a JAX subprocess tracing two models and their gradients: about a minute on 2 loaded cores
def test_scan_lstm_path_equals_keras_lstm_on_jax():
    # The JAX default (lstm_path="scan": input projection for all steps at once, lax.scan over h @ W_hh) is the same
    # function as Keras' LSTM: masked bidirectional layer, outputs, gradients and the cached decode step, in float32.
    out = subprocess.run([sys.executable, "-c", _JAX_SCAN], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "KERAS_BACKEND": "jax"})
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["max_output_difference"] < 1e-5
    assert r["max_relative_gradient_difference"] < 1e-5
    assert r["max_decode_step_difference"] < 1e-5
    # Under mixed bf16 the scan path runs the LSTMs in bf16 (Keras' JAX LSTM had to stay float32): close, not equal.
    assert r["bf16_default_path"] == "scan" and r["bf16_lstm_dtype"] == "bfloat16"
    assert 0 < r["bf16_max_output_difference"] < 0.05 * r["logit_scale"] + 0.02


def test_scan_lstm_path_is_refused_off_jax():
    if keras.backend.backend() == "jax":
        pytest.skip("the TensorFlow backend's refusal")
    with pytest.raises(ValueError, match="JAX backend only"):
        gnmt.GNMT(SMALL, seed=1, lstm_path="scan")


@pytest.mark.slow  # about a minute on 2 loaded CPU cores (TensorFlow, no XLA): ~400 steps of a width-64 GNMT
def test_learns_to_reverse_sequences_to_high_bleu():
    # The whole GNMT (4 + 4 layers, attention) at width 64 learns to reverse random token sequences, trained with the
    # workload's label-smoothed loss and Adam, and decodes them with the evaluation's beam search (beam 5, GNMT's
    # length normalisation and coverage penalty): reversal needs the attention to walk the source backwards.
    from mlperf_keras import distribute, steps
    from mlperf_keras.decoding import Translator, strip_eos
    from mlperf_keras.metrics.bleu import corpus_bleu
    from mlperf_keras.workloads.gnmt import smoothed_loss

    rng = np.random.default_rng(0)
    vocab, length = 24, 9  # 2-7 tokens between <s> and </s>

    def pairs(n):
        sizes = rng.integers(2, length - 1, n)
        source = np.zeros((n, length), np.int32)
        target = np.zeros((n, length + 1), np.int32)
        for i, k in enumerate(sizes):
            words = rng.integers(4, vocab, k)
            source[i, :k + 2] = [gnmt.BOS_ID, *words, gnmt.EOS_ID]
            target[i, :k + 2] = [gnmt.BOS_ID, *words[::-1], gnmt.EOS_ID]
        return source, target

    keras.utils.set_random_seed(1)
    model = gnmt.GNMT(gnmt.GNMTOptions(vocab_size=vocab, hidden=64, dropout=0.0), seed=1)
    model.build()
    optimizer = keras.optimizers.Adam(1e-2, global_clipnorm=5.0)
    step = steps.make_train_step(model, optimizer, lambda y, p: smoothed_loss(y, p, 0.1),
                                 distribute.create(keras.backend.backend()), jit_compile=False)
    for _ in range(400):
        source, target = pairs(64)
        loss = step({"source": source, "target_input": target[:, :-1]}, target[:, 1:])
    step.sync_to_model()
    assert float(loss) < 5.0  # per sentence: ~13 at step 100, ~3 (near label smoothing's floor) from step 400

    source, target = pairs(100)
    translator = Translator(model, beam_size=5, alpha=0.6, extra_length=0, eos_id=gnmt.EOS_ID, jit_compile=False,
                            max_length=length + 1, coverage_penalty=0.1, length_offset=1, start_id=gnmt.BOS_ID)
    decoded = translator(source)

    def words(ids):
        return " ".join(str(t) for t in strip_eos(ids, gnmt.EOS_ID))

    hypotheses = [words(ids) for ids in decoded]
    references = [words(t[1:]) for t in target]
    assert corpus_bleu(hypotheses, references) > 90
