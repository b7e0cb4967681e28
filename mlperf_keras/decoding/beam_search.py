"""Batched beam search in keras.ops (one compiled while-loop on TensorFlow or JAX).

The algorithm is the reference's (tensor2tensor's beam search as used by the MLPerf Transformer): each step grows
every alive beam by every token, keeps the 2K best extensions, of which the best K that do not end in EOS stay alive
and those that do end in EOS compete with the already finished hypotheses for K finished slots, scored by
log-probability / ((5 + length) / 6) ** alpha. The search stops at the maximum length, or when no alive beam can
still beat the worst finished one of its sentence (for every sentence of the batch). A sentence without a finished
hypothesis returns its alive beams.

Every array has a fixed shape (sequences are preallocated to max_decode_length + 1; the decoder's key/value caches
are fixed-size), so XLA compiles one loop per (batch, source length) shape.
"""
from __future__ import annotations

import keras
from keras import ops

INF = 1.0e7  # as the reference: finite, so -INF * 0 never makes a NaN


def length_penalty(alpha: float, length):
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _flat_index(beam_indices, batch_size: int, beams_in: int):
    """Rows of a [B * beams_in, ...] array for beams [B, N] of each sentence: b * beams_in + beam."""
    offsets = ops.expand_dims(ops.arange(batch_size, dtype="int32") * beams_in, 1)
    return ops.reshape(offsets + ops.cast(beam_indices, "int32"), (-1,))


def gather_nested(tensor, beam_indices, batch_size: int, beams_in: int):
    """tensor [B, beams_in, ...] -> [B, N, ...] with the beams named by beam_indices [B, N]."""
    n = beam_indices.shape[1]
    shape = tuple(tensor.shape[2:])
    flat = ops.reshape(tensor, (batch_size * beams_in,) + shape)
    picked = ops.take(flat, _flat_index(beam_indices, batch_size, beams_in), axis=0)
    return ops.reshape(picked, (batch_size, n) + shape)


def beam_search(step_fn, cache, batch_size: int, beam_size: int, alpha: float, max_decode_length: int,
                eos_id: int, start_id: int = 0):
    """Returns (sequences [B, K, max_decode_length + 1] int32 with start_id first, scores [B, K]), best first.

    step_fn(ids [B*K] int32, position (scalar int32), cache) -> (logits [B*K, V], cache): the model's next-token
    logits for the token `ids` at `position`. Every cache leaf has leading dimension B*K (beam k of sentence b at
    row b*K + k); the search reorders the rows as beams are re-ranked.
    """
    B, K, L = batch_size, beam_size, max_decode_length
    positions = ops.arange(L + 1, dtype="int32")

    alive_seq = ops.full((B, K, L + 1), start_id, dtype="int32")
    alive_log_probs = ops.tile(ops.expand_dims(ops.convert_to_tensor([0.0] + [-INF] * (K - 1), "float32"), 0),
                               (B, 1))
    finished_seq = ops.zeros((B, K, L + 1), dtype="int32")
    finished_scores = ops.full((B, K), -INF, dtype="float32")
    finished_flags = ops.zeros((B, K), dtype="bool")
    max_penalty = length_penalty(alpha, L)

    def cond(i, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, cache):
        best_alive = alive_log_probs[:, 0] / max_penalty
        lowest_finished = ops.min(finished_scores * ops.cast(finished_flags, "float32"), axis=1)
        any_finished = ops.cast(ops.any(finished_flags, axis=1), "float32")
        lowest_finished = lowest_finished + (1.0 - any_finished) * -INF
        done = ops.all(ops.greater(lowest_finished, best_alive))
        return ops.logical_and(ops.less(i, L), ops.logical_not(done))

    def body(i, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, cache):
        ids = ops.reshape(ops.take(alive_seq, i, axis=2), (B * K,))
        logits, cache = step_fn(ids, i, cache)
        vocab = logits.shape[-1]
        log_probs = ops.reshape(ops.log_softmax(ops.cast(logits, "float32"), axis=-1), (B, K, vocab))
        log_probs = log_probs + ops.expand_dims(alive_log_probs, 2)
        top_log_probs, top_index = ops.top_k(ops.reshape(log_probs, (B, K * vocab)), k=2 * K)
        top_index = ops.cast(top_index, "int32")
        top_beams = ops.floor_divide(top_index, vocab)
        top_ids = ops.mod(top_index, vocab)
        top_seq = gather_nested(alive_seq, top_beams, B, K)
        write = ops.reshape(ops.equal(positions, i + 1), (1, 1, L + 1))
        top_seq = ops.where(write, ops.expand_dims(top_ids, 2), top_seq)
        ends = ops.equal(top_ids, eos_id)
        ends_f = ops.cast(ends, "float32")

        # The best K extensions that do not end the sentence stay alive (with their rows of the cache).
        alive_log_probs, alive_pick = ops.top_k(top_log_probs + ends_f * -INF, k=K)
        alive_seq = gather_nested(top_seq, alive_pick, B, 2 * K)
        source_beams = ops.take_along_axis(top_beams, ops.cast(alive_pick, "int32"), axis=1)
        rows = _flat_index(source_beams, B, K)
        cache = keras.tree.map_structure(lambda t: ops.take(t, rows, axis=0), cache)

        # Extensions that end with EOS join the finished set; keep the K best by length-normalised score.
        scores = top_log_probs / length_penalty(alpha, i + 1) + (1.0 - ends_f) * -INF
        all_seq = ops.concatenate([finished_seq, top_seq], axis=1)
        all_scores = ops.concatenate([finished_scores, scores], axis=1)
        all_flags = ops.concatenate([ops.cast(finished_flags, "int32"), ops.cast(ends, "int32")], axis=1)
        finished_scores, finished_pick = ops.top_k(all_scores, k=K)
        finished_seq = gather_nested(all_seq, finished_pick, B, 3 * K)
        finished_flags = ops.cast(ops.take_along_axis(all_flags, ops.cast(finished_pick, "int32"), axis=1), "bool")
        return i + 1, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, cache

    state = (ops.convert_to_tensor(0, "int32"), alive_seq, alive_log_probs, finished_seq, finished_scores,
             finished_flags, cache)
    _, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, _ = ops.while_loop(
        cond, body, state)
    any_finished = ops.any(finished_flags, axis=1)
    sequences = ops.where(ops.reshape(any_finished, (B, 1, 1)), finished_seq, alive_seq)
    scores = ops.where(ops.reshape(any_finished, (B, 1)), finished_scores, alive_log_probs)
    return sequences, scores


__all__ = ["INF", "length_penalty", "beam_search"]
