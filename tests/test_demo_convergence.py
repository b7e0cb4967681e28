"""The built-in demos reach their demo target on seeds other than the README's (issue 32: "for any seed").

Each runs as the README runs it (`python -m mlperf_keras.train --model=X`, data generated and prepared in a fresh
cache) on a seed no other test uses. The README's demo table gives each demo's wall time and the seeds tried.
"""
from __future__ import annotations

import json

import pytest

from mlperf_keras import registry
from mlperf_keras.config import quality_reached
from tests.conftest import mllog_events, run_cli


@pytest.mark.slow
@pytest.mark.parametrize("model, seed", [("ncf", 7), ("resnet", 8), ("transformer", 3), ("ssd", 5)])
def test_demo_reaches_its_target_on_another_seed(model, seed, tmp_path):
    proc = run_cli("mlperf_keras.train", f"--model={model}", f"--seed={seed}", f"--cache_dir={tmp_path / 'cache'}",
                   f"--output_dir={tmp_path / 'runs'}", timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "success", summary
    assert quality_reached(summary["quality"], registry.get(model).demo_target), summary
    stop = mllog_events(summary["log"])[-1]
    assert stop["key"] == "run_stop" and stop["metadata"]["status"] == "success"

