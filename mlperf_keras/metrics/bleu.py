"""Corpus BLEU with sacrebleu, as sufficient statistics that merge exactly across workers.

MLPerf scores the translation workloads with uncased BLEU over the whole newstest2014 set. The Transformer reference
(compute_bleu.py, after tensor2tensor) lowercases and splits punctuation with its Unicode-aware "international"
tokenizer; sacrebleu's `tokenize="intl", lowercase=True` is the maintained equivalent and what this module uses.

Corpus BLEU is not an average of per-worker BLEU scores: each worker extracts sacrebleu's sufficient statistics of
its sentences ([hyp_len, ref_len, matches x 4, totals x 4], all integer counts), the statistics are summed across
workers (dist.sum_across_workers, exact in float64 far beyond newstest sizes) and the score is computed once from
the sum, which is exactly what a single worker scoring the whole set would get.

GNMT scores as its reference does (mlcommons/training rnn_translator/pytorch/seq2seq/inference/inference.py at
69dbe8b, run_sacrebleu): the sacrebleu 1.2.10 command line, `--score-only -lc --tokenize intl`, whose defaults
smooth with 'exp' (a zero n-gram match count counts as 1 / 2^k of its total) and print the score with 2 decimals
('{:.2f}'), the number the reference compares with its target: BleuEvaluator(smooth_method="exp", decimals=2).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mlperf_keras.interfaces import Evaluator

NUM_STATS = 10  # hyp length, ref length, 4 n-gram match counts, 4 n-gram totals


def _scorer():
    from sacrebleu.metrics import BLEU

    return BLEU(lowercase=True, tokenize="intl", force=True)


def corpus_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Summed sufficient statistics (int64, length 10) of aligned hypothesis/reference sentences."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not hypotheses:
        return np.zeros(NUM_STATS, dtype=np.int64)
    stats = _scorer()._extract_corpus_statistics(list(hypotheses), [list(references)])
    return np.asarray(stats, dtype=np.int64).sum(axis=0)


def bleu_from_statistics(stats, smooth_method: str = "none") -> float:
    """BLEU (0..100) from summed statistics, sacrebleu's corpus formula (brevity penalty; smoothing smooth_method:
    "none", or "exp" as sacrebleu's command line)."""
    from sacrebleu.metrics import BLEU

    stats = [int(round(float(s))) for s in np.asarray(stats).reshape(-1)]
    if len(stats) != NUM_STATS:
        raise ValueError(f"expected {NUM_STATS} BLEU statistics, got {len(stats)}")
    if stats[0] == 0:
        return 0.0
    return float(BLEU.compute_bleu(correct=stats[2:6], total=stats[6:10], sys_len=stats[0], ref_len=stats[1],
                                   smooth_method=smooth_method).score)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Uncased corpus BLEU (0..100) on one worker; identical to sacrebleu's corpus_score with the same settings."""
    return bleu_from_statistics(corpus_statistics(hypotheses, references))


def merged_bleu(hypotheses: Sequence[str], references: Sequence[str], dist, smooth_method: str = "none") -> float:
    """Corpus BLEU over the union of every worker's sentences (each worker passes its own share)."""
    return bleu_from_statistics(dist.sum_across_workers(corpus_statistics(hypotheses, references)), smooth_method)


class BleuEvaluator(Evaluator):
    """Beam-search this worker's share of the test set, detokenise, and merge sacrebleu statistics exactly (the
    Transformer's and GNMT's evaluation; they differ only in the translator settings).

    sources, references: the whole test set (indices: each sentence's test-set index, default its position); this
    worker decodes the sentences whose index % world_size == rank. Batches of batch_size sentences of similar
    length are padded to min_boundary x boundary_scale^k tokens (few compiled shapes). translator_options go to
    decoding.Translator (beam_size, alpha, extra_length, and GNMT's max_length, coverage_penalty, length_offset,
    start_id, search). smooth_method and decimals (round the score, None: not) decide the score (GNMT: "exp", 2,
    module docstring)."""

    def __init__(self, model, dist, sources, references, detokenize, total: int, *, batch_size: int,
                 min_boundary: int, boundary_scale: float, eos_id: int, jit_compile: bool = True, indices=None,
                 smooth_method: str = "none", decimals: int | None = None, **translator_options):
        from mlperf_keras.inputs import text

        indices = np.arange(len(sources)) if indices is None else np.asarray(indices)
        mine = indices % dist.world_size == dist.rank
        self.model, self.dist, self.detokenize, self.eos_id = model, dist, detokenize, eos_id
        self.smooth_method, self.decimals = smooth_method, decimals
        self.sources = [s for s, m in zip(sources, mine) if m]
        self.references = [r for r, m in zip(references, mine) if m]
        self.num_samples = total
        self.batches = text.eval_batches([len(s) for s in self.sources], batch_size, min_boundary, boundary_scale)
        self.settings = dict(eos_id=eos_id, jit_compile=jit_compile, **translator_options)
        self._translator = None
        self.last_hypotheses: list[str] = []
        self.last_seconds = 0.0

    def translate(self) -> list[str]:
        """Detokenised hypotheses of this worker's sentences, in its order."""
        from mlperf_keras.decoding import Translator, strip_eos
        from mlperf_keras.inputs import text

        if self._translator is None:
            self._translator = Translator(self.model, **self.settings)
        hypotheses = [""] * len(self.sources)
        for rows, length in self.batches:
            batch = text.pad_eval_batch([self.sources[r] for r in rows if r >= 0], len(rows), length)
            decoded = self._translator(batch)
            for row, ids in zip(rows, decoded):
                if row >= 0:
                    hypotheses[row] = self.detokenize(strip_eos(ids, self.eos_id))
        return hypotheses

    def evaluate(self, predict):
        import time

        del predict  # BLEU needs beam search, which this evaluator compiles from the model itself
        start = time.time()
        self.last_hypotheses = self.translate()
        self.last_seconds = time.time() - start
        score = merged_bleu(self.last_hypotheses, self.references, self.dist, self.smooth_method)
        return score if self.decimals is None else round(score, self.decimals)


__all__ = ["NUM_STATS", "corpus_statistics", "bleu_from_statistics", "corpus_bleu", "merged_bleu", "BleuEvaluator"]
