"""The Transformer (big) of MLPerf's non-recurrent translation, in keras.layers / keras.ops (TensorFlow and JAX).

As the MLPerf reference (translation/tensorflow/transformer, the TF official model after tensor2tensor): an encoder
and a decoder of `num_layers` pre-norm residual blocks each (layers/attention.py EncoderLayer, DecoderLayer; 6 + 6,
d_model 1024, filter 4096, 16 heads in the reference's hyperparameters, workloads/transformer.py) with a final layer
norm on each stack, dropout on the embedded inputs, one shared embedding scaled by sqrt(d_model) that is also the
output projection (layers/attention.py SharedEmbedding), sinusoidal positions. Each part draws its initial weights
and dropout masks from its own seed derived from the run's (layers/seeds.py).

Inputs: {"source": [B, L], "target_input": [B, L]} token ids, 0 padding; output: logits [B, L, vocab_size].
encode / memory_kv / empty_cache / decode_step are the incremental decoding interface of mlperf_keras.decoding.
"""
from __future__ import annotations

import functools

import keras
from keras import ops

from mlperf_keras.inputs.text import PAD_ID
from mlperf_keras.layers import attention as att
from mlperf_keras.layers.dropout import Dropout
from mlperf_keras.layers.seeds import derive_seed


class TransformerModel(keras.Model):
    def __init__(self, vocab_size, d_model, num_layers, num_heads, filter_size, dropout, seed=None,
                 dropout_rng="keras", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model, self.num_heads = vocab_size, d_model, num_heads
        self.depth = d_model // num_heads
        s = functools.partial(derive_seed, seed)
        self.embedding = att.SharedEmbedding(vocab_size, d_model, pad_id=PAD_ID, seed=s(0), name="embedding")
        self.encoder_layers = [att.EncoderLayer(d_model, num_heads, filter_size, dropout, seed=s(1 + i),
                                                dropout_rng=dropout_rng, name=f"encoder_{i}")
                               for i in range(num_layers)]
        self.decoder_layers = [att.DecoderLayer(d_model, num_heads, filter_size, dropout,
                                                seed=s(1 + num_layers + i), dropout_rng=dropout_rng,
                                                name=f"decoder_{i}")
                               for i in range(num_layers)]
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        self.encoder_dropout = Dropout(dropout, seed=s(3 * num_layers + 1), generator=dropout_rng)
        self.decoder_dropout = Dropout(dropout, seed=s(3 * num_layers + 2), generator=dropout_rng)

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        self.embedding.build()
        for layer in [*self.encoder_layers, *self.decoder_layers, self.encoder_norm, self.decoder_norm]:
            layer.build(shape)
        self.built = True

    def _embed(self, ids, positions, training):
        x = self.embedding(ids)
        return x + ops.cast(att.positional_encoding(positions, self.d_model), x.dtype)

    def encode(self, source, training=False):
        mask = att.padding_mask(source, PAD_ID)
        length = ops.shape(source)[1]
        x = self.encoder_dropout(self._embed(source, ops.arange(length), training), training=training)
        for layer in self.encoder_layers:
            x = layer(x, mask, training=training)
        return self.encoder_norm(x), mask

    def decode(self, target_input, memory, memory_mask, training=False):
        length = ops.shape(target_input)[1]
        x = self.decoder_dropout(self._embed(target_input, ops.arange(length), training), training=training)
        self_mask = att.causal_mask(length)
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, memory_mask, training=training)
        return self.embedding.logits(self.decoder_norm(x))

    def call(self, inputs, training=False):
        memory, mask = self.encode(inputs["source"], training=training)
        return self.decode(inputs["target_input"], memory, mask, training=training)

    # Incremental decoding (mlperf_keras.decoding).
    def memory_kv(self, memory):
        return [layer.cross_attention.project_kv(memory) for layer in self.decoder_layers]

    def empty_cache(self, rows, max_length):
        shape = (rows, max_length, self.num_heads, self.depth)
        dtype = self.embedding.compute_dtype
        return {"k": [ops.zeros(shape, dtype) for _ in self.decoder_layers],
                "v": [ops.zeros(shape, dtype) for _ in self.decoder_layers]}

    def decode_step(self, ids, position, cache, memory_kv, memory_mask):
        x = self._embed(ops.expand_dims(ids, 1), ops.reshape(position, (1,)), False)
        keys, values = [], []
        for layer, k, v, (mk, mv) in zip(self.decoder_layers, cache["k"], cache["v"], memory_kv):
            x, k, v = layer.decode_step(x, k, v, mk, mv, memory_mask, position)
            keys.append(k)
            values.append(v)
        logits = self.embedding.logits(self.decoder_norm(x))
        return logits[:, 0, :], {"k": keys, "v": values}


__all__ = ["TransformerModel"]
