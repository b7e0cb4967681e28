"""Uncased BLEU with sacrebleu, merged exactly across workers from sufficient statistics."""
from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

from mlperf_keras.metrics.bleu import bleu_from_statistics, corpus_bleu, corpus_statistics, merged_bleu
from tests.conftest import needs_horovod

REFERENCES = [
    "Gutach: Noch mehr Sicherheit für Fußgänger",
    "Sie stehen keine 100 Meter voneinander entfernt: Am Dienstag ist in Gutach die neue B 33-Fußgängerampel am "
    "Dorfparkplatz in Betrieb genommen worden - in Sichtweite der älteren Rathausampel.",
    "Zwei Anlagen so nah beieinander: Absicht oder Schildbürgerstreich?",
    "Diese Frage hat Gutachs Bürgermeister gestern klar beantwortet.",
    "\"Die Rathausampel ist damals installiert worden, weil diese den Schulweg sichert\", erläuterte Eckert gestern.",
    "Die Kluser-Ampel sichere sowohl Radfahrer als auch Busfahrgäste und die Bergle-Bewohner.",
]


class FakeWorkers:
    """k workers in one process: sum_across_workers adds what every worker contributed (like an allreduce)."""

    def __init__(self, shares):
        self.shares = shares

    def sum_across_workers(self, values):
        return np.sum([np.asarray(s, dtype=np.float64) for s in self.shares], axis=0)


def test_references_against_themselves_score_100():
    assert corpus_bleu(REFERENCES, REFERENCES) == pytest.approx(100.0)


HYPOTHESES = ["gutach : noch mehr sicherheit fuer fussgaenger",
              "Sie stehen keine 100 Meter entfernt: Am Dienstag ist in Gutach die neue Ampel in Betrieb genommen worden.",
              "Zwei Anlagen so nah: Absicht?", "Diese Frage hat der Bürgermeister beantwortet.",
              "Die Rathausampel sichert den Schulweg, sagte Eckert.", "Die Ampel sichert Radfahrer."]


def test_matches_sacrebleu_uncased_intl_and_ignores_case():
    hyps = HYPOTHESES
    expected = sacrebleu.corpus_bleu(hyps, [REFERENCES], lowercase=True, tokenize="intl").score
    assert 5 < expected < 95
    assert corpus_bleu(hyps, REFERENCES) == pytest.approx(expected, abs=1e-9)
    assert corpus_bleu([h.upper() for h in hyps], REFERENCES) == pytest.approx(expected, abs=1e-9)
    cased = sacrebleu.corpus_bleu([h.upper() for h in hyps], [REFERENCES], tokenize="intl").score
    assert cased < expected  # the same hypotheses scored cased are worse: lowercasing is really applied


@pytest.mark.parametrize("workers", [2, 3, 6])
def test_merged_statistics_equal_one_worker_scoring_everything(workers):
    rng = np.random.default_rng(workers)
    hyps = [" ".join(rng.permutation(r.split())[: max(1, len(r.split()) - 2)]) for r in REFERENCES]
    single = corpus_bleu(hyps, REFERENCES)
    shares = [corpus_statistics(hyps[w::workers], REFERENCES[w::workers]) for w in range(workers)]
    merged = merged_bleu(hyps[0::workers], REFERENCES[0::workers], FakeWorkers(shares))
    assert merged == pytest.approx(single, abs=1e-9)
    # ...which is not what averaging the per-worker BLEU scores would give
    averaged = np.mean([corpus_bleu(hyps[w::workers], REFERENCES[w::workers]) for w in range(workers)])
    assert abs(averaged - single) > 1e-3


def test_edge_cases():
    assert bleu_from_statistics(np.zeros(10)) == 0.0
    assert corpus_bleu([], []) == 0.0
    assert corpus_bleu(["", ""], REFERENCES[:2]) == 0.0
    with pytest.raises(ValueError):
        corpus_statistics(["a"], ["a", "b"])


@pytest.mark.multiprocess
@needs_horovod
def test_two_horovod_workers_give_the_bleu_of_one_worker_scoring_everything(tmp_path):
    """horovodrun -np 2 (tests/workers/bleu_shares.py): each worker scores half of the sentences, and both get
    sacrebleu's corpus BLEU of all six (uncased, intl), not the mean of their halves' scores."""
    import json
    import os

    from tests.test_distributed import horovodrun

    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "bleu_shares.py")
    proc = horovodrun(worker, str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks = [json.load(open(tmp_path / f"rank{r}_of2.json")) for r in (0, 1)]
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True, tokenize="intl").score
    assert ranks[0]["merged"] == ranks[1]["merged"] == pytest.approx(expected, abs=1e-9)
    assert abs(np.mean([r["own_share"] for r in ranks]) - expected) > 1e-3
