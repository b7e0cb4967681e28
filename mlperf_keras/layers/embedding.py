"""An embedding whose table is read in float32 under mixed precision: the rows are gathered, then cast.

Keras' Embedding (3.15, inside a functional model on JAX) reads its table through autocasting, so under bf16 the
table is cast before the gather and the gradient's scatter-add runs in bf16: one row looked up 65,536 times in a
batch gets a gradient of 256 instead of 65,536 (a bf16 sum stops growing once it is 256 times the increment),
whatever the layer's `autocast` argument says. NCF looks popular items up thousands of times per 1,048,576-sample
batch. PyTorch autocast, which the references use, leaves embeddings in float32 (tests/test_embedding.py).
Here the weight itself is created with autocast=False, so every read is float32 and the gradient sums in float32.
It is also faster: NCF's step on one H200 went from 135 to 195 M samples/s (benchmarks/RESULTS.md), since the bf16
scatter-add was the slowest part of the step.
"""
from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="mlperf_keras")
class Embedding(keras.layers.Layer):
    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer="uniform", **kwargs):
        super().__init__(**kwargs)
        self.input_dim, self.output_dim = input_dim, output_dim
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(name="embeddings", shape=(self.input_dim, self.output_dim),
                                          initializer=self.embeddings_initializer, autocast=False)
        self.built = True

    def call(self, ids):
        return ops.cast(ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.output_dim)

    def get_config(self):
        return {**super().get_config(), "input_dim": self.input_dim, "output_dim": self.output_dim,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer)}
