"""Beam search: exact against brute force on a toy model, beam 1 = greedy, batching, and the Transformer's cache."""
from __future__ import annotations

import itertools
import types

import keras
import numpy as np
import pytest
from keras import ops

from mlperf_keras.decoding import Translator, beam_search, strip_eos

EOS = 1


def toy_log_probs(vocab, length, seed):
    """A fixed next-token table: log P(token | previous token, position) for a toy 'model'."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(length, vocab, vocab)).astype(np.float32) * 2.0
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def toy_step(table):
    """step_fn over the table; the cache carries a step counter per row to check that rows are reordered with it."""
    t = ops.convert_to_tensor(table)

    def step(ids, position, cache):
        rows = ops.take(t, position, axis=0)               # [V, V] for this position
        logits = ops.take(rows, ids, axis=0)                # [rows, V]
        return logits, {"steps": cache["steps"] + 1}

    return step


def run_search(table, batch, beam, alpha, length):
    cache = {"steps": ops.zeros((batch * beam,), "int32")}
    seqs, scores = beam_search(toy_step(table), cache, batch, beam, alpha, length, EOS)
    return np.asarray(seqs), np.asarray(scores)


def penalty(alpha, n):
    return ((5.0 + n) / 6.0) ** alpha


def brute_force(table, alpha, length, vocab):
    """Best finished hypothesis (ends with EOS within `length` tokens) by length-normalised log probability."""
    best, best_score = None, -np.inf
    others = [t for t in range(vocab) if t != EOS]
    for n in range(1, length + 1):
        for prefix in itertools.product(others, repeat=n - 1):
            seq, prev, lp = list(prefix) + [EOS], 0, 0.0
            for i, tok in enumerate(seq):
                lp += table[i, prev, tok]
                prev = tok
            if lp / penalty(alpha, n) > best_score:
                best, best_score = seq, lp / penalty(alpha, n)
    return best, best_score


@pytest.mark.parametrize("alpha, seed", [(0.0, 0), (0.6, 1), (0.6, 2), (1.0, 3)])
def test_wide_beam_finds_the_best_hypothesis_of_brute_force(alpha, seed):
    vocab, length = 4, 4
    table = toy_log_probs(vocab, length, seed)
    seqs, scores = run_search(table, batch=1, beam=128, alpha=alpha, length=length)  # K >= every extension
    expected, expected_score = brute_force(table, alpha, length, vocab)
    assert list(seqs[0, 0, 1:1 + len(expected)]) == expected
    assert scores[0, 0] == pytest.approx(expected_score, abs=1e-4)


def greedy(table, length):
    seq, prev = [], 0
    for i in range(length):
        prev = int(np.argmax(table[i, prev]))
        seq.append(prev)
        if prev == EOS:
            break
    return seq


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_one_equals_greedy_on_toy_tables(alpha):
    vocab, length = 7, 12
    checked = 0
    for seed in range(12):
        table = toy_log_probs(vocab, length, seed)
        table[:, :, EOS] += np.linspace(-3, 3, length)[:, None]  # EOS grows likelier, so greedy paths end
        want = greedy(table, length)
        if want[-1] != EOS:
            continue
        seqs, _ = run_search(table, batch=1, beam=1, alpha=alpha, length=length)
        assert list(seqs[0, 0, 1:1 + len(want)]) == want, seed
        checked += 1
    assert checked >= 6


def test_batch_rows_are_independent():
    vocab, length = 6, 6
    table = toy_log_probs(vocab, length, 5)
    batched, _ = run_search(table, batch=3, beam=3, alpha=0.6, length=length)
    single, _ = run_search(table, batch=1, beam=3, alpha=0.6, length=length)
    for row in range(3):  # same table for every sentence: every row must equal the single-sentence search
        np.testing.assert_array_equal(batched[row], single[0])


def second_order_step(table):
    """step_fn of a model whose next token depends on the last two tokens: the one before `ids` comes only from the
    cache, so a cache row that did not follow its beam when beams are re-ranked gives the wrong log-probabilities."""
    t = ops.convert_to_tensor(table)   # [length, V (token before), V (token), V (next)]

    def step(ids, position, cache):
        rows = ops.take(t, position, axis=0)
        logits = ops.take_along_axis(ops.take(rows, cache["previous"], axis=0),
                                     ops.reshape(ids, (-1, 1, 1)), axis=1)[:, 0]
        return logits, {"previous": ids}

    return step


@pytest.mark.parametrize("seed", [1, 11])  # tables whose best hypothesis is not the top beam at every step
def test_cache_rows_follow_their_beams(seed):
    vocab, length, beam = 4, 4, 128
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(length, vocab, vocab, vocab)).astype(np.float32) * 2.0
    # EOS unlikely early: long hypotheses, whose later log-probabilities are read through a cache row that must have
    # followed its beam through the re-rankings (with the cache left in place these two seeds end elsewhere).
    logits[:, :, :, EOS] += np.array([-4.0, -2.0, 0.0, 2.0])[:, None, None]
    table = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    cache = {"previous": ops.zeros((2 * beam,), "int32")}
    seqs, scores = beam_search(second_order_step(table), cache, 2, beam, 0.6, length, EOS)
    best, best_score = None, -np.inf
    others = [t for t in range(vocab) if t != EOS]
    for n in range(1, length + 1):
        for prefix in itertools.product(others, repeat=n - 1):
            seq, before, prev, lp = list(prefix) + [EOS], 0, 0, 0.0
            for i, tok in enumerate(seq):
                lp += table[i, before, prev, tok]
                before, prev = prev, tok
            if lp / penalty(0.6, n) > best_score:
                best, best_score = seq, lp / penalty(0.6, n)
    assert len(best) >= 3
    for row in range(2):
        assert list(np.asarray(seqs)[row, 0, 1:1 + len(best)]) == best
        assert float(np.asarray(scores)[row, 0]) == pytest.approx(best_score, abs=1e-4)


# -- The Transformer's incremental decoder ----------------------------------------------------------------------------

def tiny_transformer(vocab=16, seed=3):
    from mlperf_keras.workloads.transformer import Transformer

    workload = Transformer()
    hp = workload.reference_hparams("0.7")
    hp.update(vocab_size=vocab, d_model=32, num_layers=2, num_heads=4, filter_size=64, dropout=0.0)
    return workload, workload.build_model(types.SimpleNamespace(hparams=hp, seed=seed))


def test_cached_decode_step_equals_full_forward():
    _, model = tiny_transformer()
    rng = np.random.default_rng(0)
    source = rng.integers(2, 16, size=(3, 7)).astype(np.int32)
    source[:, 5:] = 0
    source[:, 4] = EOS
    target_input = rng.integers(2, 16, size=(3, 6)).astype(np.int32)
    target_input[:, 0] = 0
    full = np.asarray(model({"source": source, "target_input": target_input}, training=False))
    memory, mask = model.encode(source)
    kv = model.memory_kv(memory)
    cache = model.empty_cache(3, 6)
    for i in range(6):
        logits, cache = model.decode_step(ops.convert_to_tensor(target_input[:, i]), ops.convert_to_tensor(i, "int32"),
                                          cache, kv, mask)
        np.testing.assert_allclose(np.asarray(logits), full[:, i], atol=1e-4)


def copy_batch(rng, rows, length, vocab):
    lengths = rng.integers(2, length, size=rows)
    src = np.zeros((rows, length), np.int32)
    for r, n in enumerate(lengths):
        src[r, :n - 1] = rng.integers(2, vocab, size=n - 1)
        src[r, n - 1] = EOS
    return src


def trained_copy_model(steps=250):
    """A tiny Transformer trained briefly to copy, so that greedy decoding ends with EOS."""
    from mlperf_keras import distribute, steps as steps_mod
    from mlperf_keras.inputs.text import to_model_inputs

    workload, model = tiny_transformer(vocab=12, seed=4)
    optimizer = keras.optimizers.Adam(3e-3)
    step = steps_mod.make_train_step(model, optimizer, workload.loss, distribute.SingleProcess(), jit_compile=False)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        src = copy_batch(rng, 32, 8, 12)
        step(*to_model_inputs(src, src))
    step.sync_to_model()
    return model


def greedy_full_forward(model, source, max_length):
    """Greedy decoding with the full (uncached) model: argmax each position until EOS."""
    out = np.zeros((source.shape[0], max_length + 1), np.int32)
    done = np.zeros(source.shape[0], bool)
    for i in range(max_length):
        logits = np.asarray(model({"source": source, "target_input": out[:, :i + 1]}, training=False))[:, i]
        token = np.where(done, 0, logits.argmax(-1))
        out[:, i + 1] = token
        done |= token == EOS
    return out[:, 1:], done


@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")  # greedy's first, 1-long step
def test_transformer_beam_one_equals_greedy_and_beam_four_copies():
    model = trained_copy_model()
    source = copy_batch(np.random.default_rng(9), 16, 8, 12)
    extra = 4
    want, finished = greedy_full_forward(model, source, 8 + extra)
    assert finished.sum() >= 12, finished  # the copy model ends its sentences
    got = Translator(model, beam_size=1, alpha=0.6, extra_length=extra, eos_id=EOS, jit_compile=False)(source)
    for row in np.flatnonzero(finished):
        assert strip_eos(got[row], EOS) == strip_eos(want[row], EOS), row
    beam4 = Translator(model, beam_size=4, alpha=0.6, extra_length=extra, eos_id=EOS, jit_compile=False)(source)
    copied = [strip_eos(beam4[r], EOS) == strip_eos(source[r], EOS) for r in range(16)]
    assert np.mean(copied) >= 0.5, copied


# -- GNMT's scoring: length normalisation counting the start token, coverage penalty from attention -------------------

def toy_attention(vocab, length, source_length, seed):
    """A fixed attention table: weights over the source [S] given position and previous token (rows sum to 1)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(length, vocab, source_length)).astype(np.float32) * 2.0
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def toy_step_with_attention(table, attention):
    t, a = ops.convert_to_tensor(table), ops.convert_to_tensor(attention)

    def step(ids, position, cache):
        logits = ops.take(ops.take(t, position, axis=0), ids, axis=0)
        weights = ops.take(ops.take(a, position, axis=0), ids, axis=0)
        return logits, weights, {"steps": cache["steps"] + 1}

    return step


def gnmt_score_numpy(table, attention, seq, alpha, beta, offset):
    """The reference's formula: logp / ((5 + len) / 6) ** alpha + beta * sum_j log(min(sum_t a_tj, 1)), a_tj > 0,
    len = generated tokens + offset (the reference counts BOS)."""
    prev, lp, coverage = 0, 0.0, np.zeros(attention.shape[-1])
    for i, tok in enumerate(seq):
        lp += table[i, prev, tok]
        coverage += attention[i, prev]
        prev = tok
    penalty = np.log(np.minimum(coverage[coverage > 0], 1.0)).sum()
    return lp / penalty_len(alpha, len(seq) + offset) + beta * penalty


def penalty_len(alpha, n):
    return ((5.0 + n) / 6.0) ** alpha


def test_coverage_score_matches_numpy():
    from mlperf_keras.decoding import coverage_score

    sums = np.array([[0.0, 0.3, 1.7, 0.9], [1.0, 0.05, 0.0, 0.0]], np.float32)
    want = 0.1 * np.array([np.log(0.3) + np.log(0.9), np.log(0.05)])
    np.testing.assert_allclose(np.asarray(coverage_score(sums, 0.1)), want, rtol=1e-6)


@pytest.mark.parametrize("beta, offset, seed", [(0.1, 1, 0), (0.5, 1, 1), (0.1, 0, 2), (1.0, 1, 3)])
def test_wide_beam_with_coverage_finds_the_numpy_best(beta, offset, seed):
    vocab, length, source_length = 4, 4, 3
    table = toy_log_probs(vocab, length, seed)
    attention = toy_attention(vocab, length, source_length, seed + 10)
    cache = {"steps": ops.zeros((128,), "int32")}
    seqs, scores = beam_search(toy_step_with_attention(table, attention), cache, 1, 128, 0.6, length, EOS,
                               coverage_penalty=beta, source_length=source_length, length_offset=offset)
    best, best_score = None, -np.inf
    others = [t for t in range(vocab) if t != EOS]
    for n in range(1, length + 1):
        for prefix in itertools.product(others, repeat=n - 1):
            seq = list(prefix) + [EOS]
            score = gnmt_score_numpy(table, attention, seq, 0.6, beta, offset)
            if score > best_score:
                best, best_score = seq, score
    assert list(np.asarray(seqs)[0, 0, 1:1 + len(best)]) == best
    assert float(np.asarray(scores)[0, 0]) == pytest.approx(best_score, abs=1e-4)
    if seed == 1:  # here the penalties change the winner: the plain search ends at once ([EOS])
        plain, _ = run_search(table, batch=1, beam=128, alpha=0.6, length=length)
        assert plain[0, 0, 1] == EOS and best != [EOS]


def test_beam_one_with_coverage_equals_greedy():
    vocab, length = 7, 10
    table = toy_log_probs(vocab, length, 4)
    table[:, :, EOS] += np.linspace(-3, 3, length)[:, None]
    want = greedy(table, length)
    assert want[-1] == EOS
    attention = toy_attention(vocab, length, 5, 4)
    seqs, _ = beam_search(toy_step_with_attention(table, attention), {"steps": ops.zeros((1,), "int32")}, 1, 1, 0.6,
                          length, EOS, coverage_penalty=0.1, source_length=5, length_offset=1)
    assert list(np.asarray(seqs)[0, 0, 1:1 + len(want)]) == want


# -- The GNMT reference's own search (decoding.reference_gnmt_beam_search) -------------------------------------------
# Hand-traced against SequenceGenerator.beam_search (mlcommons/training rnn_translator/pytorch/seq2seq/inference/
# beam_search.py at 69dbe8b): a bigram "model" with known probabilities, ids 2 <s>, 3 </s> as the reference's.

BOS_ID, EOS_ID = 2, 3


def bigram_step(probabilities, attention, vocab=8, source_length=2):
    """step_fn over P(next | token): the named probabilities of each row, the rest of the mass spread evenly; the
    attention weights depend on the input token (uniform where not named)."""
    table = np.zeros((vocab, vocab), np.float64)
    weights = np.full((vocab, source_length), 1.0 / source_length, np.float32)
    for token, row in probabilities.items():
        rest = [t for t in range(vocab) if t not in row]
        table[token, rest] = (1.0 - sum(row.values())) / len(rest)
        for nxt, p in row.items():
            table[token, nxt] = p
    for token, w in attention.items():
        weights[token] = w
    logits = ops.convert_to_tensor(np.log(np.maximum(table, 1e-12)).astype(np.float32))
    weights = ops.convert_to_tensor(weights)

    def step(ids, position, cache):
        return ops.take(logits, ids, axis=0), ops.take(weights, ids, axis=0), cache

    return step


def reference_search(step, beam, alpha, beta, length, source_length=2):
    from mlperf_keras.decoding import reference_gnmt_beam_search

    seqs, scores = reference_gnmt_beam_search(step, {"unused": ops.zeros((beam,), "int32")}, 1, beam, alpha, length,
                                              EOS_ID, BOS_ID, beta, source_length)
    return strip_eos(np.asarray(seqs)[0, 0, 1:], EOS_ID), float(np.asarray(scores)[0, 0])


A, B, C = 4, 5, 6
FIRST_SLOTS = {BOS_ID: {EOS_ID: 0.40, A: 0.35, B: 0.24}, A: {A: 0.70, EOS_ID: 0.29}, B: {C: 0.99}, C: {EOS_ID: 0.99}}


def test_reference_search_keeps_finished_slots_and_normalises_only_when_all_have_ended():
    """K = 2, alpha = 2, 3 steps. The reference: step 1 keeps slots [</s>] (log .40) and [a] (log .35): a finished
    hypothesis holds a slot, so [b] (log .24) is gone. Step 2: the </s> slot proposes itself (eos_beam_fill),
    [a a] log .35 + log .70 beats [a </s>]. Step 3: [a a a]. The loop ends with one slot still running, so nothing
    is normalised and the raw log-probabilities decide: [</s>], score log .40 = -0.916.
    A search of K live + K finished hypotheses scored as they finish finds [b c </s>] instead:
    (log .24 + 2 log .99) / ((5 + 4) / 6)^2 = -0.643 beats [</s>]'s log .40 / ((5 + 2) / 6)^2 = -0.673."""
    step = bigram_step(FIRST_SLOTS, {})
    tokens, score = reference_search(step, beam=2, alpha=2.0, beta=0.0, length=3)
    assert tokens == [] and score == pytest.approx(np.log(0.40), abs=1e-5)
    ours, _ = beam_search(step, {"unused": ops.zeros((2,), "int32")}, 1, 2, 2.0, 3, EOS_ID, start_id=BOS_ID,
                          coverage_penalty=0.0, source_length=2, length_offset=1)
    assert strip_eos(np.asarray(ours)[0, 0, 1:], EOS_ID) == [B, C]


X, Y, W = 4, 5, 7


def test_reference_search_does_not_reorder_its_attention_sums():
    """K = 2, alpha = 0, beta = 1. Step 1 (input <s>, attention [.5, .5] in both slots): slots [x] log .40, [y] log
    .35. Step 2 (inputs x: attention [.5, .5]; y: [1, 0]): slot sums [1, 1] and [1.5, .5]; [y </s>] (log .35 +
    log .90 = -1.155) beats [x </s>] (log .40 + log .60 = -1.427) and moves to slot 0, whose sums stay [1, 1].
    Step 3: both slots ended, so both are normalised: [y </s>] -1.155 + 1 x (log 1 + log 1) = -1.155, [x </s>]
    -1.427 + log .5 = -2.120; the reference returns [y]. With each hypothesis carrying its own sums [y </s>] would
    score -1.155 + log .5 = -1.848 and lose to [x </s>] (-1.427)."""
    step = bigram_step({BOS_ID: {X: 0.40, Y: 0.35}, X: {EOS_ID: 0.60, W: 0.39}, Y: {EOS_ID: 0.90}},
                       {BOS_ID: [0.5, 0.5], X: [0.5, 0.5], Y: [1.0, 0.0]})
    tokens, score = reference_search(step, beam=2, alpha=0.0, beta=1.0, length=4)
    assert tokens == [Y] and score == pytest.approx(np.log(0.35) + np.log(0.90), abs=1e-5)
    ours, _ = beam_search(step, {"unused": ops.zeros((2,), "int32")}, 1, 2, 0.0, 4, EOS_ID, start_id=BOS_ID,
                          coverage_penalty=1.0, source_length=2, length_offset=1)
    assert strip_eos(np.asarray(ours)[0, 0, 1:], EOS_ID) == [X]


def test_reference_search_normalises_by_lengths_that_count_the_start_token():
    """K = 2, alpha = 1: slots [x </s>] and [y </s>] both end at step 2 and are normalised at step 3 by
    (5 + 3) / 6 (3 = <s>, the token, </s>): (log .40 + log .60) / (8 / 6) and (log .35 + log .90) / (8 / 6)."""
    step = bigram_step({BOS_ID: {X: 0.40, Y: 0.35}, X: {EOS_ID: 0.60, W: 0.39}, Y: {EOS_ID: 0.90}}, {})
    tokens, score = reference_search(step, beam=2, alpha=1.0, beta=0.0, length=4)
    assert tokens == [Y] and score == pytest.approx((np.log(0.35) + np.log(0.90)) / (8 / 6), abs=1e-5)
