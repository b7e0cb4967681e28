"""What every entry point does at its edges (issue 32): exit statuses of flag errors and help, a backend that is not
installed, a run stopped by SIGTERM.

The README's exit statuses: 2 "could not start" with one `error:` line on stderr, 0 for asked-for help. absl alone
exits 1 for both (mlperf_keras/entry.py). A flag-only start costs well under a second per subprocess (no
TensorFlow is imported before the flags parse), so every entry point is run as a user runs it.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import ROOT, mllog_events

ENTRY_POINTS = ["mlperf_keras.train", "mlperf_keras.benchmark", "mlperf_keras.report", "mlperf_keras.sweep",
                "data_prep.coco", "data_prep.download", "data_prep.imagenet", "data_prep.maskrcnn_backbone",
                "data_prep.movielens", "data_prep.ssd_backbone", "data_prep.verify", "data_prep.wmt",
                "data_prep.wmt_gnmt"]


def run_module(module, *args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})


def assert_could_not_start(proc, *fragments):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_flag_errors_exit_2_with_one_line_and_help_exits_0(module, tmp_path):
    assert_could_not_start(run_module(module, "--no_such_flag=1"), "no_such_flag")
    assert_could_not_start(run_module(module, f"--flagfile={tmp_path}/missing.flags"), "missing.flags")
    for help_flag in ("--help", "--helpfull"):
        proc = run_module(module, help_flag)
        assert proc.returncode == 0 and "flags:" in proc.stdout, (help_flag, proc.returncode, proc.stderr[-2000:])


@pytest.mark.parametrize("args, fragment", [
    (["--precision=fp8"], "--precision=fp8"),
    (["--backend=nosuch"], "--backend=nosuch"),
    (["--model=nosuch"], "--model=nosuch"),
    (["--seed=x"], "--seed=x"),
    (["--dry_run", "stray_argument"], "unexpected arguments: stray_argument"),
])
def test_train_bad_values_and_arguments_exit_2(args, fragment):
    assert_could_not_start(run_module("mlperf_keras.train", *args), fragment)


@pytest.mark.parametrize("module, required", [
    ("mlperf_keras.benchmark", []),
    ("data_prep.coco", ["--raw_dir=/r", "--output_dir=/o"]),
    ("data_prep.verify", ["--data_dir=/d"]),
    ("data_prep.download", ["--dataset=movielens", "--raw_dir=/r"]),
])
def test_stray_positional_arguments_are_refused_before_any_work(module, required):
    """A positional argument no command reads (a flag without its --, a path after a space) was silently dropped
    by the data_prep commands; the reporter and the sweep read theirs (log folders, flags after --)."""
    assert_could_not_start(run_module(module, *required, "stray_argument"), "unexpected arguments: stray_argument")


# A meta-path finder that makes `import jax` fail as if JAX were not installed (sitecustomize runs at start-up).
HIDE_JAX = '''
import sys

class HideJax:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HideJax())
'''


def test_jax_backend_without_jax_names_the_extra(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(HIDE_JAX)
    proc = run_module("mlperf_keras.train", "--backend=jax", "--dry_run", f"--output_dir={tmp_path}/runs",
                      env={"PYTHONPATH": str(tmp_path)})
    assert_could_not_start(proc, "no module 'jax'", "pip install '.[jax]'")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sigterm_prints_the_run_stop_line_and_the_summary(prepared_ncf, tmp_path):
    """A real NCF run, SIGTERM'd after its first epoch: the console shows run_stop and the JSON summary, as at any
    other end, the log ends run_stop aborted, the exit status is 128 + SIGTERM."""
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "mlperf_keras.train", f"--data_dir={prepared_ncf}",
                             f"--output_dir={runs}", "--seed=4", "--max_epochs=200", "--nojit_compile",
                             "--division=open", "--hparams=mf_dim=8,mlp_layers=32-32-16,batch_size=4096"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    killer = threading.Timer(300, proc.kill)
    killer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[ncf] epoch 0 (1/200)"):
                time.sleep(0.5)   # into the second epoch
                proc.send_signal(signal.SIGTERM)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        killer.cancel()
    lines += out.splitlines(keepends=True)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err[-3000:])
    stop_lines = [line for line in lines if line.startswith("[ncf] run_stop: aborted (stopped by SIGTERM) after ")]
    assert len(stop_lines) == 1, "".join(lines)[-3000:]
    summary = json.loads(lines[-1])
    assert summary["status"] == "aborted" and summary["reason"] == "stopped by SIGTERM", summary
    assert summary["epochs"] >= 1 and summary["log"], summary
    assert "Traceback" not in err and "error: run aborted: stopped by SIGTERM" in err, err[-3000:]
    (log,) = glob.glob(str(runs / "*.log"))
    stop = mllog_events(log)[-1]
    assert stop["key"] == "run_stop", stop
    assert (stop["metadata"]["status"], stop["metadata"]["reason"]) == ("aborted", "stopped by SIGTERM"), stop
