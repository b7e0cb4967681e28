"""Checkpoints and --resume: a run stopped after epoch 2 and resumed to epoch 3 ends with the weights and optimizer
state of an uninterrupted 3-epoch run (CPU, same seed), is logged as resumed, and keeps only the newest checkpoints."""
from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sys

import numpy as np
import pytest

from mlperf_keras import checkpoints, distribute, loop
from tests.conftest import ROOT, mllog_events, train_values

# A model smaller than the reference's, which the closed division refuses: the runs are open.
SMALL = "mf_dim=8,mlp_layers=32-32-16,batch_size=16384,learning_rate=0.003,beta_1=0.9,beta_2=0.999"


def run(data_dir, output_dir, checkpoint_dir, max_epochs, resume=False, backend="tensorflow", keep=2):
    from mlperf_keras import train as train_cli

    values = train_values(data_dir=data_dir, output_dir=str(output_dir), seed=11, hparams=SMALL,
                          max_epochs=max_epochs, checkpoint_dir=str(checkpoint_dir), resume=resume,
                          keep_checkpoints=keep, jit_compile=False, division="open")
    dist = distribute.create(backend)
    workload, manifest, config = train_cli.prepare(values, dist, say=lambda _: None)
    config = dataclasses.replace(config, quality_target=1.0)  # never reached: every run trains all its epochs
    return loop.run(config, workload, dist, manifest)


def resume_matches_uninterrupted(data_dir, tmp, backend="tensorflow"):
    """{"model": max |difference|, "optimizer": ...} between resumed and uninterrupted final states, and the logs."""
    whole = run(data_dir, tmp / "runs", tmp / "whole", 3, backend=backend)
    first = run(data_dir, tmp / "runs", tmp / "split", 2, backend=backend)
    second = run(data_dir, tmp / "runs", tmp / "split", 3, resume=True, backend=backend)
    differences = {}
    for prefix in ("model", "optimizer"):
        a = checkpoints.load_arrays(str(tmp / "whole" / checkpoints.FINAL_NAME), prefix)
        b = checkpoints.load_arrays(str(tmp / "split" / checkpoints.FINAL_NAME), prefix)
        assert [v.shape for _, v in a] == [v.shape for _, v in b]
        differences[prefix] = max(float(np.max(np.abs(x.astype(np.float64) - y))) for (_, x), (_, y) in zip(a, b))
    return differences, whole, first, second


def test_resumed_run_ends_with_the_uninterrupted_runs_weights(prepared_ncf, tmp_path):
    differences, whole, first, second = resume_matches_uninterrupted(prepared_ncf, tmp_path)
    assert differences == {"model": 0.0, "optimizer": 0.0}, differences
    assert (whole.epochs, first.epochs, second.epochs) == (3, 2, 3)
    # Written whole (no temporary file left), the newest --keep_checkpoints=2 kept, the final model beside them.
    assert sorted(os.listdir(tmp_path / "split")) == ["epoch-00001.npz", "epoch-00002.npz", checkpoints.FINAL_NAME]
    header = checkpoints.read_header(str(tmp_path / "split" / "epoch-00002.npz"))
    assert header["epoch"] == 2 and header["model"] == "ncf" and header["seed"] == 11
    assert second.resumed_from.endswith("epoch-00001.npz") and whole.resumed_from is None
    # The resumed run trains only epoch 2 and says in its log that it is resumed (the reporter refuses it).
    events = mllog_events(second.log_path, only_mllog=True)
    resumed = [e for e in events if e["key"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["value"] is True and resumed[0]["metadata"]["checkpoint_epoch"] == 1
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_start"] == [2]
    assert not any(e["key"] == "resumed" for e in mllog_events(whole.log_path, only_mllog=True))
    # The quality evaluated after epoch 3 is the same too.
    assert second.quality == whole.quality


def test_resume_refuses_another_runs_checkpoint(prepared_ncf, tmp_path, capsys):
    """A checkpoint of other hyperparameters would continue a different run: one line, no MLPerf log."""
    import types

    from mlperf_keras import train as train_cli
    from tests.test_faults import assert_one_line_error, main_in_process

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    values = train_values(data_dir=prepared_ncf, output_dir=str(tmp_path / "runs"), seed=11, hparams=SMALL,
                          division="open")
    _, _, config = train_cli.prepare(values, distribute.create("tensorflow"), say=lambda _: None)
    nothing = types.SimpleNamespace(variables=[])  # only the header matters here
    checkpoints.save_epoch(str(ckpt), config, 0, nothing, nothing, keep=2)
    runs = tmp_path / "other"
    common = [f"--data_dir={prepared_ncf}", f"--output_dir={runs}", f"--checkpoint_dir={ckpt}", "--resume",
              "--division=open"]
    status, _, err = main_in_process([*common, "--max_epochs=3", f"--hparams={SMALL.replace('mf_dim=8', 'mf_dim=4')}"],
                                     capsys)
    assert_one_line_error(status, err, 2, "other hyperparameters (mf_dim")
    status, _, err = main_in_process([*common, "--max_epochs=3", f"--hparams={SMALL}", "--seed=12"], capsys)
    assert_one_line_error(status, err, 2, "was written with seed=11, this run has 12")
    status, _, err = main_in_process([*common, "--max_epochs=1", f"--hparams={SMALL}"], capsys)
    assert_one_line_error(status, err, 2, "nothing is left to train")
    assert glob.glob(str(runs / "*.log")) == []


@pytest.mark.slow
def test_resume_on_jax(prepared_ncf, tmp_path):
    """The same on the JAX backend (the step keeps its state in jax arrays: restored through reload_from_model)."""
    code = ("import pathlib, sys; from tests.test_resume import resume_matches_uninterrupted as f; "
            f"print(repr(f({prepared_ncf!r}, pathlib.Path({str(tmp_path)!r}), 'jax')[0]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    differences = eval(proc.stdout.strip().splitlines()[-1])
    assert differences == {"model": 0.0, "optimizer": 0.0}, differences
