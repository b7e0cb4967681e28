"""Seed sweeps: N seeded runs into one folder, streamed, past failures, with an honest exit status."""
import glob
import os

import pytest

from mlperf_keras.sweep import SweepError, run_command, seed_list
from tests.conftest import ROOT, run_cli

FAKE_TRAIN_DIR = os.path.join(ROOT, "tests", "data", "report")


def sweep(*args):
    env = {"PYTHONPATH": os.pathsep.join([FAKE_TRAIN_DIR, ROOT, os.environ.get("PYTHONPATH", "")])}
    return run_cli("mlperf_keras.sweep", "--train_module=fake_train", *args, timeout=120, env=env)


def test_seed_lists():
    assert seed_list(seeds=["1", "2", "5"]) == [1, 2, 5]
    assert seed_list(num_runs=3, first_seed=10) == [10, 11, 12]
    for bad in (dict(seeds=["1", "1"]), dict(seeds=["x"]), dict(), dict(seeds=["1"], num_runs=2),
                dict(num_runs=0)):
        with pytest.raises(SweepError):
            seed_list(**bad)


def test_command_line_of_one_run():
    command = run_command("ssd", 4, "out", ["--max_epochs=2"], launcher="horovodrun -np 2 -H localhost:2",
                          python="python")
    assert command == ["horovodrun", "-np", "2", "-H", "localhost:2", "python", "-m", "mlperf_keras.train",
                       "--model=ssd", "--seed=4", "--output_dir=out", "--max_epochs=2"]


def test_sweep_runs_every_seed_into_one_folder_and_passes_extra_flags(tmp_path):
    out = tmp_path / "runs"
    done = sweep("--model=ncf", "--num_runs=3", "--first_seed=7", f"--output_dir={out}", "--", "--echo=HELLO")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("fake train: model ncf seed") == 3 and "HELLO" in done.stdout
    assert sorted(os.path.basename(p).split("_")[1] for p in glob.glob(str(out / "*.log"))) == \
        ["seed7", "seed8", "seed9"]
    assert "3 of 3 runs completed" in done.stdout and "success" in done.stdout


def test_sweep_continues_past_a_failed_run_and_names_it(tmp_path):
    out = tmp_path / "runs"
    done = sweep("--model=ncf", "--seeds=1,2,3", f"--output_dir={out}", "--", "--fail_seeds=2")
    assert done.returncode == 1
    assert "failed seeds: 2" in done.stdout and "2 of 3 runs completed" in done.stdout
    assert len(glob.glob(str(out / "*.log"))) == 2


def test_dry_run_prints_commands_with_launcher(tmp_path):
    done = sweep("--model=resnet", "--seeds=1,2", f"--output_dir={tmp_path}", "--dry_run",
                 "--launcher=horovodrun -np 2 -H localhost:2")
    assert done.returncode == 0
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("horovodrun -np 2 -H localhost:2 ") and "--seed=2" in lines[1]


def test_bad_arguments_exit_2(tmp_path):
    assert sweep("--model=ncf", "--seeds=1,1", f"--output_dir={tmp_path}").returncode == 2


def test_a_run_stopped_at_max_epochs_is_not_converged_not_failed(tmp_path):
    """Exit status 5 (train's EXIT_NOT_CONVERGED): listed as not converged, its log kept, the sweep exits 0."""
    out = tmp_path / "runs"
    done = sweep("--model=ncf", "--seeds=1,2,3", f"--output_dir={out}", "--", "--not_converged_seeds=2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 of 3 runs completed (1 did not reach the target by --max_epochs)" in done.stdout
    assert "not converged seeds: 2" in done.stdout and "failed seeds" not in done.stdout
    assert "seed 2 not converged (exit 5)" in done.stdout and "aborted" in done.stdout


def test_a_launcher_status_with_a_max_epochs_log_is_not_converged(tmp_path):
    """horovodrun reports its own non-zero status; the log (run_stop aborted, no reason) says what happened."""
    out = tmp_path / "runs"
    done = sweep("--model=ncf", "--seeds=1,2", f"--output_dir={out}", "--", "--not_converged_seeds=1",
                 "--exit_status=1", "--fail_seeds=2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not converged seeds: 1" in done.stdout and "failed seeds: 2" in done.stdout



def test_a_real_ncf_run_through_the_sweep(prepared_ncf, tmp_path):
    """The real mlperf_keras.train (not the fake): one seed, one epoch of a small NeuMF on the shared prepared
    MovieLens sample, which cannot reach HR@10 0.635; train exits 5, the sweep lists it as not converged, keeps its
    one log (run_stop aborted) and exits 0."""
    from tests.conftest import mllog_events
    from tests.test_train_ncf import SMALL

    out = tmp_path / "runs"
    done = run_cli("mlperf_keras.sweep", "--model=ncf", "--seeds=4", f"--output_dir={out}", "--",
                   f"--data_dir={prepared_ncf}", "--max_epochs=1", "--division=open",
                   f"--hparams={SMALL}", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 of 1 runs completed (1 did not reach the target by --max_epochs)" in done.stdout, done.stdout
    assert "seed 4 not converged (exit 5)" in done.stdout, done.stdout
    (log,) = glob.glob(str(out / "ncf_seed4_*.log"))
    events = mllog_events(log)
    assert [e["metadata"]["status"] for e in events if e["key"] == "run_stop"] == ["aborted"]
    assert [e["value"] for e in events if e["key"] == "seed"] == [4]
