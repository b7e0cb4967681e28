"""HR@10 on hand-computed scores, --hparams parsing, the workload registry."""
from __future__ import annotations

import numpy as np
import pytest

from mlperf_keras import registry
from mlperf_keras.config import ConfigError, parse_hparams
from mlperf_keras.metrics.ranking import hits_at_k


def test_hits_at_k_hand_computed():
    scores = np.array([
        [0.9] + [0.1] * 20,                 # positive first -> hit
        [0.5] + [0.6] * 9 + [0.1] * 11,     # 9 above -> rank 9 -> hit at k=10
        [0.5] + [0.6] * 10 + [0.1] * 10,    # 10 above -> rank 10 -> miss
        [0.0] + [0.1] * 20,                 # last -> miss
    ])
    assert hits_at_k(scores, k=10) == 2
    assert hits_at_k(scores, k=1) == 1
    assert hits_at_k(scores, k=11) == 3


def test_ties_never_count_as_hits():
    assert hits_at_k(np.full((5, 1000), 0.3), k=10) == 0
    tied = np.array([[0.5] + [0.5] * 9 + [0.0] * 5])  # 9 tied negatives: ranked above, still within top 10
    assert hits_at_k(tied, k=10) == 1


def test_parse_hparams_types_and_errors():
    defaults = {"lr": 0.1, "layers": (256, 128), "negatives": 4, "flag": False, "name": "adam"}
    out = parse_hparams("lr=0.5,layers=64-32-16,negatives=8,flag=true,name=sgd", defaults)
    assert out == {"lr": 0.5, "layers": (64, 32, 16), "negatives": 8, "flag": True, "name": "sgd"}
    assert parse_hparams("", defaults) == defaults
    with pytest.raises(ConfigError, match="unknown hyperparameter 'lrr'; valid keys: flag, layers, lr, name"):
        parse_hparams("lrr=1", defaults)
    with pytest.raises(ConfigError, match="negatives='four': expected a int"):
        parse_hparams("negatives=four", defaults)
    with pytest.raises(ConfigError, match="not key=value"):
        parse_hparams("lr", defaults)


def test_registry_builds_all_six_and_names_unknown_models_clearly():
    from mlperf_keras.config import MODEL_NAMES

    assert registry.available() == sorted(MODEL_NAMES)
    assert registry.get("ncf").name == "ncf" and registry.get("maskrcnn").name == "maskrcnn"
    with pytest.raises(ConfigError, match="unknown --model='bert'"):
        registry.get("bert")
