"""Batched beam search in keras.ops (one compiled while-loop on TensorFlow or JAX).

The search of the reference (tensor2tensor's, used by the MLPerf Transformer): each step extends every alive beam
by every token and keeps the 2K best extensions; the best K of them that do not end with EOS stay alive; scores are
log-probability / ((5 + length) / 6) ** alpha; a sentence stops when no alive beam can still beat its worst finished
hypothesis; the search stops at the maximum length or when every sentence has stopped; a sentence without a finished
hypothesis returns its alive beams.

One difference, as fairseq (which NVIDIA's MLPerf Transformer submissions decode with) and Marian: an extension
ending with EOS is finished only when it ranks among the K best extensions of its sentence (tensor2tensor accepts
any of the 2K), and a sentence also stops once it has K finished hypotheses; a stopped sentence accepts no more.
So beam size 1 is exactly greedy decoding (for any alpha), and no sentence's result depends on the others in its
batch. With K large enough to keep every extension the search is exhaustive (tests/test_beam_search.py).

GNMT's scoring (Wu et al. 2016, section 7) in this search, an open-division option for GNMT (`beam_search=
per_hypothesis`): `length_offset` = 1 counts the start token in the length, as the MLPerf GNMT reference (its lengths
start at 1 for BOS, so a hypothesis of n tokens with EOS is normalised by ((5 + n + 1) / 6) ** alpha);
`coverage_penalty` = beta > 0 makes step_fn also return the attention weights [B*K, S] of the step, which the search
sums per hypothesis (the sums follow their hypotheses when beams are re-ranked) and a finished hypothesis scores
    log-probability / length penalty + beta * sum_j log(min(attention sum_j, 1))   over source positions with a
positive sum (the reference maps log 0 to 0). The penalty is never positive, so the stopping bound (best alive
log-probability / the longest length penalty) still holds.

`reference_gnmt_beam_search` is the GNMT reference's own search (mlcommons/training rnn_translator/pytorch/seq2seq/
inference/beam_search.py at 69dbe8b, SequenceGenerator.beam_search), GNMT's closed-division default: K slots per
sentence that hold finished hypotheses too (a finished slot proposes itself once, unchanged), the K best of the K x K
extensions (each slot's top K tokens) kept; length normalisation and the coverage penalty only when all K slots of a
sentence have ended, and never for a sentence still running at the maximum length (its raw log-probabilities
decide); the attention sums stay with their slot when hypotheses are re-ranked (accu_attn_scores is not reordered).

Every array has a fixed shape (sequences are preallocated to max_decode_length + 1; the decoder's key/value caches
are fixed-size), so XLA compiles one loop per (batch, source length) shape.
"""
from __future__ import annotations

import keras
from keras import ops

INF = 1.0e7  # as tensor2tensor's search: finite, so -INF * 0 never makes a NaN (GNMT's reference search uses -inf)


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


def coverage_score(attention_sums, beta: float):
    """beta * sum_j log(min(a_j, 1)) over positions with a_j > 0 (GNMT's coverage penalty, as the reference)."""
    a = ops.cast(attention_sums, "float32")
    positive = ops.greater(a, 0.0)
    logs = ops.log(ops.where(positive, ops.minimum(a, 1.0), 1.0))
    return beta * ops.sum(logs, axis=-1)


def beam_search(step_fn, cache, batch_size: int, beam_size: int, alpha: float, max_decode_length: int,
                eos_id: int, start_id: int = 0, coverage_penalty: float = 0.0, source_length: int | None = None,
                length_offset: int = 0):
    """Returns (sequences [B, K, max_decode_length + 1] int32 with start_id first, scores [B, K]), best first.

    step_fn(ids [B*K] int32, position (scalar int32), cache) -> (logits [B*K, V], cache): the model's next-token
    logits for the token `ids` at `position`. Every cache leaf has leading dimension B*K (beam k of sentence b at
    row b*K + k); the search reorders the rows as beams are re-ranked. With source_length given, step_fn returns
    (logits, attention weights [B*K, source_length], cache) and finished hypotheses get coverage_penalty x their
    coverage score (GNMT); length_offset is added to the number of generated tokens in the length penalty.
    """
    B, K, L = batch_size, beam_size, max_decode_length
    with_attention = source_length is not None
    positions = ops.arange(L + 1, dtype="int32")

    alive_seq = ops.full((B, K, L + 1), start_id, dtype="int32")
    alive_log_probs = ops.tile(ops.expand_dims(ops.convert_to_tensor([0.0] + [-INF] * (K - 1), "float32"), 0),
                               (B, 1))
    finished_seq = ops.zeros((B, K, L + 1), dtype="int32")
    finished_scores = ops.full((B, K), -INF, dtype="float32")
    finished_flags = ops.zeros((B, K), dtype="bool")
    done = ops.zeros((B,), dtype="bool")
    max_penalty = length_penalty(alpha, L + length_offset)
    coverage = ops.zeros((B * K, source_length if with_attention else 1), dtype="float32")
    rank = ops.expand_dims(ops.arange(2 * K, dtype="int32"), 0)

    def sentences_done(alive_log_probs, finished_scores, finished_flags):
        """K finished hypotheses, or none of the alive ones can still beat the worst finished one."""
        flags = ops.cast(finished_flags, "float32")
        full = ops.greater_equal(ops.sum(flags, axis=1), float(K))
        lowest_finished = ops.min(finished_scores * flags, axis=1)
        lowest_finished = lowest_finished + (1.0 - ops.max(flags, axis=1)) * -INF
        hopeless = ops.greater(lowest_finished, alive_log_probs[:, 0] / max_penalty)
        return ops.logical_or(full, hopeless)

    def cond(i, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, done, cache, coverage):
        return ops.logical_and(ops.less(i, L), ops.logical_not(ops.all(done)))

    def body(i, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, done, cache, coverage):
        ids = ops.reshape(ops.take(alive_seq, i, axis=2), (B * K,))
        if with_attention:
            logits, attention, cache = step_fn(ids, i, cache)
            coverage = coverage + ops.cast(attention, "float32")
        else:
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

        # The best K extensions that do not end the sentence stay alive (with their rows of the cache).
        alive_log_probs, alive_pick = ops.top_k(top_log_probs + ops.cast(ends, "float32") * -INF, k=K)
        alive_seq = gather_nested(top_seq, alive_pick, B, 2 * K)
        source_beams = ops.take_along_axis(top_beams, ops.cast(alive_pick, "int32"), axis=1)
        rows = _flat_index(source_beams, B, K)
        cache = keras.tree.map_structure(lambda t: ops.take(t, rows, axis=0), cache)
        top_coverage = None
        if with_attention:
            top_coverage = ops.take(coverage, _flat_index(top_beams, B, K), axis=0)   # [B*2K, S]
            coverage = ops.take(coverage, rows, axis=0)

        # An extension ending with EOS is finished when it ranks among the K best extensions of a sentence that is
        # not done yet; the K best finished hypotheses by length-normalised score are kept.
        # Extensions of the -INF placeholder beams (the first step has one real beam) are never accepted: with K
        # larger than the real extensions they would fill the K finished slots and stop the search early.
        real = ops.greater(top_log_probs, -INF / 2)
        accept = ops.logical_and(ops.logical_and(ops.logical_and(ends, real), ops.less(rank, K)),
                                 ops.expand_dims(ops.logical_not(done), 1))
        scores = top_log_probs / length_penalty(alpha, i + 1 + length_offset)
        if with_attention and coverage_penalty:
            scores = scores + ops.reshape(coverage_score(top_coverage, coverage_penalty), (B, 2 * K))
        scores = ops.where(accept, scores, -INF)
        all_seq = ops.concatenate([finished_seq, top_seq], axis=1)
        all_scores = ops.concatenate([finished_scores, scores], axis=1)
        all_flags = ops.concatenate([ops.cast(finished_flags, "int32"), ops.cast(accept, "int32")], axis=1)
        finished_scores, finished_pick = ops.top_k(all_scores, k=K)
        finished_seq = gather_nested(all_seq, finished_pick, B, 3 * K)
        finished_flags = ops.cast(ops.take_along_axis(all_flags, ops.cast(finished_pick, "int32"), axis=1), "bool")
        done = ops.logical_or(done, sentences_done(alive_log_probs, finished_scores, finished_flags))
        return i + 1, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, done, cache, coverage

    state = (ops.convert_to_tensor(0, "int32"), alive_seq, alive_log_probs, finished_seq, finished_scores,
             finished_flags, done, cache, coverage)
    _, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, _, _, _ = ops.while_loop(
        cond, body, state)
    any_finished = ops.any(finished_flags, axis=1)
    sequences = ops.where(ops.reshape(any_finished, (B, 1, 1)), finished_seq, alive_seq)
    scores = ops.where(ops.reshape(any_finished, (B, 1)), finished_scores, alive_log_probs)
    return sequences, scores


def reference_gnmt_beam_search(step_fn, cache, batch_size: int, beam_size: int, alpha: float, max_decode_length: int,
                               eos_id: int, start_id: int, coverage_penalty: float, source_length: int):
    """The GNMT reference's SequenceGenerator.beam_search (module docstring), in fixed shapes.

    step_fn(ids [B*K] int32, position, cache) -> (logits [B*K, V], attention weights [B*K, source_length], cache);
    row b*K + k is slot k of sentence b. Lengths count BOS, as the reference's (they start at 1), and grow by one
    for every step a slot's last token is not EOS. Returns (sequences [B, K, max_decode_length + 1] int32 with
    start_id first and EOS repeated after a slot's end, scores [B, K]), slots ordered by score, best first: the
    reference returns the slot with the highest score, normalised only for sentences whose K slots all ended before
    the last step."""
    B, K, L = batch_size, beam_size, max_decode_length
    rows_total = B * K
    neg_inf = float("-inf")
    positions = ops.arange(L + 1, dtype="int32")
    seq = ops.where(ops.equal(positions, 0), start_id, 0) * ops.ones((rows_total, 1), "int32")
    lengths = ops.ones((rows_total,), "int32")
    scores = ops.zeros((rows_total,), "float32")
    words = ops.full((rows_total,), start_id, dtype="int32")
    active = ops.ones((B,), dtype="bool")
    accumulated = ops.zeros((rows_total, source_length), "float32")
    eos_fill = ops.convert_to_tensor([0.0] + [neg_inf] * (K - 1), "float32")          # the reference's eos_beam_fill
    not_first_slot = ops.reshape(ops.greater(ops.arange(K), 0), (1, K, 1))

    def cond(i, seq, lengths, scores, words, active, accumulated, cache):
        return ops.logical_and(ops.less(i, L), ops.any(active))

    def body(i, seq, lengths, scores, words, active, accumulated, cache):
        active_rows = ops.repeat(active, K, axis=0)
        eos = ops.equal(words, eos_id)
        terminating = ops.logical_and(ops.all(ops.reshape(eos, (B, K)), axis=1), active)
        lengths = lengths + ops.cast(ops.logical_and(active_rows, ops.logical_not(eos)), "int32")
        logits, attention, cache = step_fn(words, i, cache)
        attention = ops.where(ops.expand_dims(eos, 1), 0.0, ops.cast(attention, "float32"))
        accumulated = accumulated + ops.where(ops.expand_dims(active_rows, 1), attention, 0.0)

        top_log_probs, top_words = ops.top_k(ops.log_softmax(ops.cast(logits, "float32"), axis=-1), k=K)
        top_words = ops.where(ops.expand_dims(eos, 1), eos_id, ops.cast(top_words, "int32"))
        top_log_probs = ops.where(ops.expand_dims(eos, 1), ops.expand_dims(eos_fill, 0), top_log_probs)
        candidates = ops.reshape(ops.expand_dims(scores, 1) + top_log_probs, (B, K, K))
        candidates = ops.where(ops.logical_and(not_first_slot, ops.equal(i, 0)), neg_inf, candidates)
        best, index = ops.top_k(ops.reshape(candidates, (B, K * K)), k=K)
        index = ops.cast(index, "int32")
        rows = _flat_index(ops.floor_divide(index, K), B, K)
        new_words = ops.reshape(ops.take_along_axis(ops.reshape(top_words, (B, K * K)), index, axis=1), (-1,))
        new_seq = ops.take(seq, rows, axis=0)
        new_seq = ops.where(ops.equal(positions, i + 1), ops.expand_dims(new_words, 1), new_seq)
        new_lengths = ops.take(lengths, rows, axis=0)
        cache = keras.tree.map_structure(lambda t: ops.take(t, rows, axis=0), cache)

        keep = ops.expand_dims(active_rows, 1)
        seq = ops.where(keep, new_seq, seq)
        lengths = ops.where(active_rows, new_lengths, lengths)
        scores = ops.where(active_rows, ops.reshape(best, (-1,)), scores)
        words = ops.where(active_rows, new_words, words)

        # Sentences whose K slots had all ended: normalise with the (re-ranked) lengths and each slot's own attention
        # sums, then stop them.
        ending = ops.repeat(terminating, K, axis=0)
        normalised = scores / length_penalty(alpha, lengths) + coverage_score(accumulated, coverage_penalty)
        scores = ops.where(ending, normalised, scores)
        active = ops.logical_and(active, ops.logical_not(terminating))
        return i + 1, seq, lengths, scores, words, active, accumulated, cache

    state = (ops.convert_to_tensor(0, "int32"), seq, lengths, scores, words, active, accumulated, cache)
    _, seq, _, scores, _, _, _, _ = ops.while_loop(cond, body, state)
    scores, order = ops.top_k(ops.reshape(scores, (B, K)), k=K)
    sequences = gather_nested(ops.reshape(seq, (B, K, L + 1)), order, B, K)
    return sequences, scores


__all__ = ["INF", "length_penalty", "coverage_score", "beam_search", "reference_gnmt_beam_search"]
