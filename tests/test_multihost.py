"""Beyond one server, as processes on this machine: two JAX processes joined by jax.distributed (Gloo between their
CPU devices), and Horovod with two hosts by name (localhost and 127.0.0.1, which horovodrun starts without ssh:
runner/gloo_run.py uses ssh only for a host whose address is not one of this machine's). What two real servers add
(the network, NCCL between GPUs) is not tested here."""
from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import ROOT, mllog_events
from tests.test_distributed import WORKER, _rank_pid, needs_horovod, weights
from tests.test_train_ncf import SMALL

pytestmark = pytest.mark.multiprocess
COLLECTIVES = os.path.join(ROOT, "tests", "workers", "jax_collectives.py")
JAX_ENV = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
TWO_HOSTS = ["horovodrun", "-np", "2", "-H", "localhost:1,127.0.0.1:1", "--gloo"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_jax_processes(argv_for, **popen_args) -> list[subprocess.Popen]:
    """Processes 0 and 1 of one jax.distributed job; argv_for(coordinator, process_id) -> the command line."""
    coordinator = f"127.0.0.1:{free_port()}"
    env = {**JAX_ENV, **popen_args.pop("env", {})}
    return [subprocess.Popen(argv_for(coordinator, i), cwd=ROOT, env=env, text=True, start_new_session=True,
                             **popen_args) for i in (0, 1)]


def finish(processes, timeout=420) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each process, once all have ended."""
    results = []
    try:
        for p in processes:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out or "", err or ""))
    finally:
        for p in processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    return results


def test_jax_collectives_across_two_processes_are_exact(tmp_path):
    """gather_rows with unequal row counts (3 and 1; and none at all) in rank order, int64 ids above 2**31 and a
    float64 sum float32 cannot hold, bit for bit (JAX without x64 would make both 32-bit); from_chief gives rank 0's
    value on both."""
    procs = start_jax_processes(lambda c, i: [sys.executable, COLLECTIVES, str(tmp_path), c, str(i)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for code, _, err in finish(procs, timeout=180):
        assert code == 0, err[-3000:]
    results = [json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1)]
    for rank, result in enumerate(results):
        assert result["ids"] == [2**40, 2**40 + 1, 2**40 + 2, 2**40 + 10] and result["ids_dtype"] == "int64"
        assert result["boxes"] == [[0.5, 0.5]] * 3 + [[1.5, 1.5]]
        assert result["empty_shape"] == [0, 7]
        assert result["sums"] == [2.0**40 + 1.5, 0.2] and result["sums_dtype"] == "float64"
        assert result["chief_seed"] == 1000 and result["is_chief"] == (rank == 0)
        assert result["describe"] == "jax DataParallel over 2 devices in 2 processes (jax.distributed)"


@pytest.mark.parametrize("model, global_batch, steps", [("ncf", 256, 5), ("resnet", 16, 2)])
def test_jax_two_processes_end_identical_and_equal_one_process_at_full_batch(tmp_path, model, global_batch, steps):
    """Each process initialises from its own seed (10 + rank) and trains on its half of every global batch: equal
    weights on both prove process 0's initial values reached process 1 and the gradients were averaged over all the
    devices; equality with one process at the full batch proves the average is the full-batch mean (the ResNet's
    batch norm included: its statistics are of the global batch, computed across the processes)."""
    env = {"WORKER_MODEL": model}
    args = [str(global_batch), str(steps), "jax"]
    procs = start_jax_processes(lambda c, i: [sys.executable, WORKER, str(tmp_path), *args, "0", c, "2", str(i)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    single = subprocess.run([sys.executable, WORKER, str(tmp_path), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=420, env={**JAX_ENV, **env})
    results = finish(procs)
    assert [code for code, _, _ in results] == [0, 0], "\n---\n".join(err[-3000:] for _, _, err in results)
    assert single.returncode == 0, single.stderr[-3000:]
    rank0, rank1 = weights(tmp_path / "rank0_of2.npz"), weights(tmp_path / "rank1_of2.npz")
    one = weights(tmp_path / "rank0_of1.npz")
    assert all(np.array_equal(a, b) for a, b in zip(rank0, rank1))
    for a, b in zip(rank0, one):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_jax_two_process_training_writes_one_log_with_global_values(prepared_ncf, tmp_path):
    out = tmp_path / "runs"
    procs = start_jax_processes(
        lambda c, i: [sys.executable, "-m", "mlperf_keras.train", f"--data_dir={prepared_ncf}", f"--output_dir={out}",
                      "--seed=4", "--max_epochs=2", "--division=open", f"--hparams={SMALL}",
                      f"--coordinator_address={c}", "--num_processes=2", f"--process_id={i}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    (chief_code, chief_out, chief_err), (other_code, other_out, other_err) = finish(procs)
    # 2 epochs do not reach the target: the chief exits 5 (config.EXIT_NOT_CONVERGED), the other process 0.
    assert chief_code == 5 and other_code == 0, (chief_err[-3000:], other_err[-3000:])
    assert "Traceback" not in chief_err + other_err
    (log,) = glob.glob(str(out / "*.log"))
    assert len(os.listdir(out)) == 2   # the log and its resolved config, written by process 0 only
    assert json.loads(chief_out.strip().splitlines()[-1])["log"] == log and '"status"' not in other_out
    events = mllog_events(log)
    values = {e["key"]: e["value"] for e in events}
    assert values["num_workers"] == 2 and values["global_batch_size"] == 4096
    assert values["distribution"] == "jax DataParallel over 2 devices in 2 processes (jax.distributed)"
    # The whole eval set (every user of the prepared data, conftest: 940 kept) is evaluated once, merged.
    manifest = json.load(open(os.path.join(prepared_ncf, "manifest.json")))
    assert values["eval_samples"] == manifest["counts"]["eval_users"]
    accuracies = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert len(accuracies) == 2 and accuracies[-1] > 0.05
    (stop,) = [e for e in events if e["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted" and "reason" not in stop["metadata"]


def _wait_for_training(out, processes, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        logs = glob.glob(str(out / "*.log"))
        if logs and "epoch_stop" in open(logs[0]).read():
            return logs[0]
        assert all(p.poll() is None for p in processes), "the job ended before training was under way"
        time.sleep(0.5)
    raise AssertionError("no epoch ended in time")


def test_jax_a_killed_process_ends_the_other_with_a_clear_error(prepared_ncf, tmp_path):
    """Process 1 is killed mid-training: process 0's next collective fails at once (Gloo: the peer's socket is
    closed), the loop logs run_stop aborted with that reason, and the process exits without waiting for the dead one
    in jax.distributed's shutdown (which would last its heartbeat timeout, 60 s, and end in an abort)."""
    out = tmp_path / "runs"
    procs = start_jax_processes(
        lambda c, i: [sys.executable, "-m", "mlperf_keras.train", f"--data_dir={prepared_ncf}", f"--output_dir={out}",
                      "--seed=6", "--max_epochs=200", "--division=open", "--hparams=" + SMALL.replace("4096", "1024"),
                      f"--coordinator_address={c}", "--num_processes=2", f"--process_id={i}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        log = _wait_for_training(out, procs)
        procs[1].kill()
        killed_at = time.time()
        _, chief_err = procs[0].communicate(timeout=120)
        detected_in = time.time() - killed_at
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    print(f"JAX: process 0 ended {detected_in:.1f} s after process 1 was killed")
    assert procs[0].returncode == 1 and detected_in < 30, (detected_in, chief_err[-3000:])
    assert "Gloo" in chief_err and "Terminating process" not in chief_err, chief_err[-3000:]
    (stop,) = [e for e in mllog_events(log) if e["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted" and "Gloo" in stop["metadata"]["reason"], stop


@needs_horovod
def test_horovod_two_hosts_by_name_end_identical_and_equal_one_worker(tmp_path):
    proc = subprocess.run([*TWO_HOSTS, sys.executable, WORKER, str(tmp_path), "256", "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=420, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("horovod, 2 workers, 2 hosts") == 2, proc.stdout   # one rank per host, not one host
    single = subprocess.run([sys.executable, WORKER, str(tmp_path), "256", "5"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-2000:]
    rank0, rank1 = weights(tmp_path / "rank0_of2.npz"), weights(tmp_path / "rank1_of2.npz")
    assert all(np.array_equal(a, b) for a, b in zip(rank0, rank1))
    for a, b in zip(rank0, weights(tmp_path / "rank0_of1.npz")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_horovod
def test_horovod_two_hosts_training_writes_one_log_and_a_killed_worker_ends_the_job(prepared_ncf, tmp_path):
    """Rank 1 (the second host) is killed after the first epoch: horovodrun ends rank 0 with SIGTERM, which train.py
    turns into an exit through the loop, so the one log ends in run_stop aborted."""
    out = tmp_path / "runs"
    job = subprocess.Popen([*TWO_HOSTS, sys.executable, "-m", "mlperf_keras.train", f"--data_dir={prepared_ncf}",
                            f"--output_dir={out}", "--seed=6", "--max_epochs=200",
                            "--division=open", "--hparams=" + SMALL.replace("4096", "1024")],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        log = _wait_for_training(out, [job])
        pid = _rank_pid(str(out), rank=1)
        assert pid is not None, "could not find rank 1"
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        assert job.wait(timeout=120) != 0
        detected_in = time.time() - killed_at
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    print(f"Horovod: the job ended {detected_in:.1f} s after rank 1 was killed")
    assert detected_in < 60
    assert len(glob.glob(str(out / "*.log"))) == 1
    events = mllog_events(log)
    values = {e["key"]: e["value"] for e in events}
    assert values["num_workers"] == 2 and values["distribution"] == "horovod, 2 workers"
    (stop,) = [e for e in events if e["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted", stop
