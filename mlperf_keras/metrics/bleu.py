"""Corpus BLEU with sacrebleu, as sufficient statistics that merge exactly across workers.

MLPerf scores the translation workloads with uncased BLEU over the whole newstest2014 set. The Transformer reference
(compute_bleu.py, after tensor2tensor) lowercases and splits punctuation with its Unicode-aware "international"
tokenizer; sacrebleu's `tokenize="intl", lowercase=True` is the maintained equivalent and what this module uses.

Corpus BLEU is not an average of per-worker BLEU scores: each worker extracts sacrebleu's sufficient statistics of
its sentences ([hyp_len, ref_len, matches x 4, totals x 4], all integer counts), the statistics are summed across
workers (dist.sum_across_workers, exact in float64 far beyond newstest sizes) and the score is computed once from
the sum, which is exactly what a single worker scoring the whole set would get.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

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


def bleu_from_statistics(stats) -> float:
    """BLEU (0..100) from summed statistics, sacrebleu's corpus formula (no smoothing, brevity penalty)."""
    from sacrebleu.metrics import BLEU

    stats = [int(round(float(s))) for s in np.asarray(stats).reshape(-1)]
    if len(stats) != NUM_STATS:
        raise ValueError(f"expected {NUM_STATS} BLEU statistics, got {len(stats)}")
    if stats[0] == 0:
        return 0.0
    return float(BLEU.compute_bleu(correct=stats[2:6], total=stats[6:10], sys_len=stats[0], ref_len=stats[1]).score)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Uncased corpus BLEU (0..100) on one worker; identical to sacrebleu's corpus_score with the same settings."""
    return bleu_from_statistics(corpus_statistics(hypotheses, references))


def merged_bleu(hypotheses: Sequence[str], references: Sequence[str], dist) -> float:
    """Corpus BLEU over the union of every worker's sentences (each worker passes its own share)."""
    return bleu_from_statistics(dist.sum_across_workers(corpus_statistics(hypotheses, references)))


__all__ = ["NUM_STATS", "corpus_statistics", "bleu_from_statistics", "corpus_bleu", "merged_bleu"]
