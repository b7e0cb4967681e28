"""Decoding for the translation workloads: beam search over a model's cached decoder, compiled for the backend.

A decodable model provides
  encode(source, training) -> (memory [B, S, d], memory_mask [B, 1, 1, S] bool, True = a real source token)
  memory_kv(memory) -> per decoder layer (keys, values) of the encoder output, computed once per sentence
  empty_cache(rows, max_length) -> the decoder's fixed-size self-attention cache
  decode_step(ids [rows], position, cache, memory_kv, memory_mask) -> (logits [rows, V], cache)
(layers/transformer.py), or (a recurrent decoder, layers/gnmt.py)
  beam_decoder(source, beam_size) -> (step, state) with step(ids, position, state) -> (logits, attention weights
  [rows, S], state): the encoder runs once inside it; the attention weights feed the coverage penalty.
`Translator` compiles one decode function for the active backend: tf.function (+ XLA)
reading the model's variables as they are; on JAX a jax.jit function that takes the variables' current values as an
argument (keras.StatelessScope), so it is compiled once and always decodes with the latest weights.
"""
from __future__ import annotations

import keras
import numpy as np
from keras import ops

from mlperf_keras.decoding.beam_search import beam_search, coverage_score, length_penalty, reference_gnmt_beam_search

SEARCHES = ("reference", "per_hypothesis")  # a recurrent decoder's: the GNMT reference's search, or beam_search


def translate_fn(model, beam_size: int, alpha: float, extra_length: int, eos_id: int, max_length: int | None = None,
                 coverage_penalty: float = 0.0, length_offset: int = 0, start_id: int = 0,
                 search: str = "per_hypothesis"):
    """source [B, S] int32 -> best hypothesis [B, S + extra_length] int32 (EOS then zeros once finished), or
    [B, max_length] when max_length is given (a fixed decode length, as GNMT's). A model with beam_decoder (GNMT)
    is searched by `search`: "reference", the GNMT reference's search (reference_gnmt_beam_search: its lengths
    count the start token, length_offset does not apply), or "per_hypothesis" (beam_search)."""
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, not {search!r}")

    def translate(source):
        batch, source_length = int(source.shape[0]), int(source.shape[1])
        if hasattr(model, "beam_decoder"):
            length = max_length or source_length + extra_length
            step, state = model.beam_decoder(source, beam_size)
            if search == "reference":
                sequences, _ = reference_gnmt_beam_search(step, state, batch, beam_size, alpha, length, eos_id,
                                                          start_id, coverage_penalty, source_length)
                return sequences[:, 0, 1:]
            sequences, _ = beam_search(step, state, batch, beam_size, alpha, length, eos_id, start_id=start_id,
                                       coverage_penalty=coverage_penalty, source_length=source_length,
                                       length_offset=length_offset)
            return sequences[:, 0, 1:]
        max_length_ = max_length or source_length + extra_length
        memory, memory_mask = model.encode(source, training=False)
        tiled = [(ops.repeat(k, beam_size, axis=0), ops.repeat(v, beam_size, axis=0))
                 for k, v in model.memory_kv(memory)]
        mask = ops.repeat(memory_mask, beam_size, axis=0)

        def step(ids, position, cache):
            return model.decode_step(ids, position, cache, tiled, mask)

        sequences, _ = beam_search(step, model.empty_cache(batch * beam_size, max_length_), batch, beam_size, alpha,
                                   max_length_, eos_id)
        return sequences[:, 0, 1:]

    return translate


class Translator:
    """Compiled batched beam search for one model: `translator(source_ids) -> numpy ids` (one compile per shape)."""

    def __init__(self, model, beam_size: int, alpha: float, extra_length: int, eos_id: int,
                 jit_compile: bool = True, **options):
        """options: translate_fn's max_length, coverage_penalty, length_offset, start_id, search."""
        self.model = model
        fn = translate_fn(model, beam_size, alpha, extra_length, eos_id, **options)
        self.backend = keras.backend.backend()
        if self.backend == "tensorflow":
            import tensorflow as tf

            self._fn = tf.function(fn, jit_compile=jit_compile)
        elif self.backend == "jax":
            import jax

            variables = list(model.variables)

            def stateless(values, source):
                with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                    return fn(source)

            self._variables = variables
            self._fn = jax.jit(stateless) if jit_compile else stateless
        else:
            raise RuntimeError(f"Keras backend {self.backend!r} is not supported; use tensorflow or jax")

    def __call__(self, source) -> np.ndarray:
        source = np.asarray(source, dtype=np.int32)
        if self.backend == "tensorflow":
            return np.asarray(self._fn(source))
        return np.asarray(self._fn([v.value for v in self._variables], source))


def strip_eos(ids, eos_id: int) -> list[int]:
    """The tokens of one decoded row before its first EOS (or padding id 0)."""
    out = []
    for token in np.asarray(ids).tolist():
        if token == eos_id or token == 0:
            break
        out.append(token)
    return out


__all__ = ["SEARCHES", "Translator", "translate_fn", "beam_search", "reference_gnmt_beam_search", "coverage_score",
           "length_penalty", "strip_eos"]
