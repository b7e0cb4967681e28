"""Attention blocks for the translation models, in keras.layers / keras.ops only (TensorFlow and JAX backends).

As the MLPerf Transformer reference (the TF official model, after tensor2tensor): multi-head attention with
bias-free query/key/value/output projections and queries scaled by depth^-0.5; a ReLU feed-forward block; each
sub-layer wrapped as x + dropout(sublayer(layer_norm(x))) ("pre-norm"); sinusoidal positions; one embedding matrix
shared by source, target and the output projection, scaled by sqrt(d_model), with padding (id 0) embedded as zeros.

Masks are boolean (True = may attend), so Keras' mixed-precision autocast of layer inputs never touches them;
attention logits and softmax are computed in float32 and masked positions set to -1e9 there (no fp16 overflow).
Dropout is layers/dropout.py's, whose `generator` (dropout_rng) picks the random bits: Keras' stock generator by
default, jax.random's rbg, or (open division) a counter hash.
Decoding keeps a fixed-size key/value cache per layer (no growing shapes, so XLA compiles one loop).
"""
from __future__ import annotations

import functools
import math

import keras
from keras import ops

from mlperf_keras.layers.dropout import Dropout
from mlperf_keras.layers.seeds import derive_seed

NEG_INF = -1e9  # attention logit of masked positions (float32)


def positional_encoding(positions, d_model: int, min_timescale: float = 1.0, max_timescale: float = 1.0e4):
    """Sinusoidal position signal [len(positions), d_model]: sin over the first half, cos over the second
    (tensor2tensor's get_timing_signal, as the reference). `positions` is a float vector (may be a traced tensor)."""
    num_timescales = d_model // 2
    log_increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * ops.exp(ops.arange(num_timescales, dtype="float32") * -log_increment)
    scaled = ops.expand_dims(ops.cast(positions, "float32"), 1) * ops.expand_dims(inv_timescales, 0)
    return ops.concatenate([ops.sin(scaled), ops.cos(scaled)], axis=1)


def padding_mask(ids, pad_id: int = 0):
    """[B, 1, 1, S] bool: the keys that may be attended to (not padding)."""
    return ops.expand_dims(ops.expand_dims(ops.not_equal(ids, pad_id), 1), 1)


def causal_mask(length):
    """[1, 1, T, T] bool: a position attends to itself and earlier ones."""
    rows = ops.expand_dims(ops.arange(length), 1)
    cols = ops.expand_dims(ops.arange(length), 0)
    return ops.reshape(ops.less_equal(cols, rows), (1, 1, length, length))


class SharedEmbedding(keras.layers.Layer):
    """Token embedding whose transposed matrix is also the output projection (logits), as the reference.

    embed(ids) = E[ids] * sqrt(d_model), zero for the padding id; logits(x) = x E^T in float32. E stays float32
    when read (autocast=False): rows are gathered and then cast, so the lookup's gradient sums a frequent token's
    rows in float32, not bf16 (layers/embedding.py says why that matters); the projection casts E itself.
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int = 0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model, self.pad_id, self.seed = vocab_size, d_model, pad_id, seed

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5, seed=self.seed), autocast=False)
        self.built = True

    def call(self, ids):
        x = ops.cast(ops.take(self.embeddings, ids, axis=0), self.compute_dtype)
        mask = ops.cast(ops.not_equal(ids, self.pad_id), self.compute_dtype)
        return x * ops.expand_dims(mask, -1) * ops.cast(self.d_model ** 0.5, self.compute_dtype)

    def logits(self, x):
        w = ops.cast(self.embeddings, x.dtype)
        return ops.cast(ops.matmul(x, ops.transpose(w)), "float32")


def _dense(units, name, seed, use_bias=False):
    return keras.layers.Dense(units, use_bias=use_bias, name=name,
                              kernel_initializer=keras.initializers.GlorotUniform(seed=seed))


class MultiHeadAttention(keras.layers.Layer):
    """Multi-head dot-product attention with bias-free projections; the keys/values may come from a cache."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, seed=None, dropout_rng: str = "keras",
                 **kwargs):
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.d_model, self.num_heads, self.depth = d_model, num_heads, d_model // num_heads
        s = functools.partial(derive_seed, seed)
        self.query = _dense(d_model, "query", s(0))
        self.key = _dense(d_model, "key", s(1))
        self.value = _dense(d_model, "value", s(2))
        self.output_dense = _dense(d_model, "output", s(3))
        self.dropout = Dropout(dropout, seed=s(4), generator=dropout_rng)

    def build(self, query_shape, memory_shape=None):
        self.query.build(query_shape)
        for layer in (self.key, self.value, self.output_dense):
            layer.build(query_shape)
        self.built = True

    def _split(self, x):
        return ops.reshape(x, (ops.shape(x)[0], -1, self.num_heads, self.depth))

    def project_kv(self, memory):
        """Keys and values [B, S, H, depth] of a memory (source, or the decoder input so far)."""
        return self._split(self.key(memory)), self._split(self.value(memory))

    def attend(self, x, k, v, mask, training=False):
        """x [B, T, d] queries; k, v [B, S, H, depth]; mask (bool, True = attend) broadcastable to [B, H, T, S]."""
        q = self._split(self.query(x)) * ops.cast(self.depth ** -0.5, x.dtype)
        logits = ops.einsum("bthd,bshd->bhts", ops.cast(q, "float32"), ops.cast(k, "float32"))
        logits = ops.where(mask, logits, NEG_INF)
        weights = ops.cast(ops.softmax(logits, axis=-1), x.dtype)
        weights = self.dropout(weights, training=training)
        out = ops.einsum("bhts,bshd->bthd", weights, ops.cast(v, x.dtype))
        return self.output_dense(ops.reshape(out, (ops.shape(x)[0], -1, self.d_model)))

    def call(self, x, memory, mask, training=False):
        k, v = self.project_kv(memory)
        return self.attend(x, k, v, mask, training=training)

    def cached_self_attention(self, x, cache_k, cache_v, position):
        """One decoding step: x [B, 1, d] at `position` (scalar tensor). The step's key/value are written into the
        fixed-size caches [B, L, H, depth] at `position`; positions after it are masked. Returns (out, k, v)."""
        k_new, v_new = self.project_kv(x)
        length = ops.shape(cache_k)[1]
        here = ops.reshape(ops.equal(ops.arange(length), position), (1, length, 1, 1))
        cache_k = ops.where(here, ops.cast(k_new, cache_k.dtype), cache_k)
        cache_v = ops.where(here, ops.cast(v_new, cache_v.dtype), cache_v)
        written = ops.reshape(ops.less_equal(ops.arange(length), position), (1, 1, 1, length))
        out = self.attend(x, cache_k, cache_v, written)
        return out, cache_k, cache_v


class FeedForward(keras.layers.Layer):
    """relu(x W1 + b1) (dropout) W2 + b2."""

    def __init__(self, d_model: int, filter_size: int, dropout: float, seed=None, dropout_rng: str = "keras",
                 **kwargs):
        super().__init__(**kwargs)
        s = functools.partial(derive_seed, seed)
        self.filter = _dense(filter_size, "filter", s(0), use_bias=True)
        self.output_dense = _dense(d_model, "output", s(1), use_bias=True)
        self.dropout = Dropout(dropout, seed=s(2), generator=dropout_rng)
        self.filter_size = filter_size

    def build(self, input_shape):
        self.filter.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.filter_size,))
        self.built = True

    def call(self, x, training=False):
        h = ops.relu(self.filter(x))
        return self.output_dense(self.dropout(h, training=training))


def _norm(name):
    return keras.layers.LayerNormalization(epsilon=1e-6, name=name)


class EncoderLayer(keras.layers.Layer):
    def __init__(self, d_model, num_heads, filter_size, dropout, seed=None, dropout_rng="keras", **kwargs):
        super().__init__(**kwargs)
        s = functools.partial(derive_seed, seed)
        self.attention = MultiHeadAttention(d_model, num_heads, dropout, seed=s(0), dropout_rng=dropout_rng,
                                            name="self_attention")
        self.ffn = FeedForward(d_model, filter_size, dropout, seed=s(1), dropout_rng=dropout_rng, name="ffn")
        self.attention_norm, self.ffn_norm = _norm("self_attention_norm"), _norm("ffn_norm")
        self.drop1 = Dropout(dropout, seed=s(2), generator=dropout_rng)
        self.drop2 = Dropout(dropout, seed=s(3), generator=dropout_rng)

    def build(self, input_shape):
        for layer in (self.attention, self.ffn, self.attention_norm, self.ffn_norm):
            layer.build(input_shape)
        self.built = True

    def call(self, x, mask, training=False):
        y = self.attention_norm(x)
        x = x + self.drop1(self.attention(y, y, mask, training=training), training=training)
        return x + self.drop2(self.ffn(self.ffn_norm(x), training=training), training=training)


class DecoderLayer(keras.layers.Layer):
    def __init__(self, d_model, num_heads, filter_size, dropout, seed=None, dropout_rng="keras", **kwargs):
        super().__init__(**kwargs)
        s = functools.partial(derive_seed, seed)
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, seed=s(0), dropout_rng=dropout_rng,
                                                 name="self_attention")
        self.cross_attention = MultiHeadAttention(d_model, num_heads, dropout, seed=s(1), dropout_rng=dropout_rng,
                                                  name="cross_attention")
        self.ffn = FeedForward(d_model, filter_size, dropout, seed=s(2), dropout_rng=dropout_rng, name="ffn")
        self.self_norm, self.cross_norm, self.ffn_norm = (_norm("self_attention_norm"), _norm("cross_attention_norm"),
                                                          _norm("ffn_norm"))
        self.drops = [Dropout(dropout, seed=s(3 + i), generator=dropout_rng) for i in range(3)]

    def build(self, input_shape):
        for layer in (self.self_attention, self.cross_attention, self.ffn, self.self_norm, self.cross_norm,
                      self.ffn_norm):
            layer.build(input_shape)
        self.built = True

    def call(self, x, memory, self_mask, memory_mask, training=False):
        y = self.self_norm(x)
        x = x + self.drops[0](self.self_attention(y, y, self_mask, training=training), training=training)
        x = x + self.drops[1](self.cross_attention(self.cross_norm(x), memory, memory_mask, training=training),
                              training=training)
        return x + self.drops[2](self.ffn(self.ffn_norm(x), training=training), training=training)

    def decode_step(self, x, cache_k, cache_v, memory_k, memory_v, memory_mask, position):
        """Inference for one position: x [B, 1, d]; memory keys/values precomputed once per sentence."""
        y, cache_k, cache_v = self.self_attention.cached_self_attention(self.self_norm(x), cache_k, cache_v,
                                                                        position)
        x = x + y
        x = x + self.cross_attention.attend(self.cross_norm(x), memory_k, memory_v, memory_mask)
        return x + self.ffn(self.ffn_norm(x)), cache_k, cache_v


__all__ = ["NEG_INF", "positional_encoding", "padding_mask", "causal_mask", "SharedEmbedding", "MultiHeadAttention",
           "FeedForward", "EncoderLayer", "DecoderLayer"]


# ---------------------------------------------------------------------------------------------------------------------
# GNMT: normalized Bahdanau (additive) attention

class NormalizedBahdanauAttention(keras.layers.Layer):
    """Additive attention with weight normalization, as the MLPerf GNMT reference's BahdanauAttention(normalize=True)
    (mlcommons/training rnn_translator/pytorch/seq2seq/models/attention.py at 69dbe8b, the v0.6/v0.7 reference):

        score(q, k_j) = (g * v / ||v||) . tanh(W_q q + W_k k_j + b)      weights = softmax_j(score), masked
        context       = sum_j weights_j * keys_j                        (the encoder outputs, not W_k k_j)

    W_q, W_k bias-free [units] projections and v initialised U(-init, init); g (a scalar) = 1 / sqrt(units); b = 0.
    Padded source positions get the score -65504 (the reference's fill) before a float32 softmax.
    The projected keys W_k k are computed once per sentence (`project_keys`), so decoding steps reuse them.
    """

    def __init__(self, units: int, init_range: float = 0.1, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        init = keras.initializers.RandomUniform(-init_range, init_range, seed=seed)
        self.query_dense = keras.layers.Dense(units, use_bias=False, kernel_initializer=init, name="query")
        self.key_dense = keras.layers.Dense(units, use_bias=False, kernel_initializer=init, name="key")
        self._init = init

    def build(self, query_shape, key_shape=None):
        key_shape = query_shape if key_shape is None else key_shape
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.attention_vector = self.add_weight(shape=(self.units,), initializer=self._init, name="attention_vector")
        self.scale = self.add_weight(shape=(), initializer=keras.initializers.Constant(1.0 / math.sqrt(self.units)),
                                     name="scale")
        self.energy_bias = self.add_weight(shape=(self.units,), initializer="zeros", name="energy_bias")
        self.built = True

    def project_keys(self, keys):
        """W_k keys: [B, S, units]."""
        return self.key_dense(keys)

    def call(self, query, projected_keys, keys, mask):
        """query [B, T, dq]; projected_keys [B, S, units]; keys [B, S, dk]; mask [B, S] bool (True = a real token).
        Returns (context [B, T, dk], attention weights [B, T, S] float32)."""
        q = self.query_dense(query)
        energy = ops.tanh(ops.expand_dims(q, 2) + ops.expand_dims(projected_keys, 1)
                          + ops.cast(self.energy_bias, q.dtype))
        vector = self.attention_vector / ops.sqrt(ops.sum(ops.square(self.attention_vector))) * self.scale
        scores = ops.cast(ops.matmul(energy, ops.cast(vector, energy.dtype)), "float32")   # [B, T, S]
        scores = ops.where(ops.expand_dims(mask, 1), scores, -65504.0)
        weights = ops.softmax(scores, axis=-1)
        context = ops.matmul(ops.cast(weights, keys.dtype), keys)
        return context, weights


__all__ += ["NormalizedBahdanauAttention"]
