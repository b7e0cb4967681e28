"""Several workers starting the built-in demo on an empty cache at the same moment all get the same prepared data."""
from __future__ import annotations

import glob
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import ROOT, needs_horovod


def _prepare_ncf_demo(cache_dir, log_path, barrier):
    """One worker: wait for the other, then prepare the NCF demo; every log line goes to log_path."""
    from data_prep import demos

    with open(log_path, "w") as log_file:
        barrier.wait(timeout=60)
        prepared = demos.prepare("ncf", cache_dir, log=lambda msg: print(msg, file=log_file, flush=True))
        print(f"RESULT {prepared}", file=log_file, flush=True)


def test_two_processes_on_an_empty_cache_prepare_the_demo_once_and_both_read_it(tmp_path):
    from mlperf_keras.inputs.manifest import read_manifest

    cache = tmp_path / "cache"
    context = multiprocessing.get_context("spawn")   # fresh interpreters, as horovodrun starts them
    barrier = context.Barrier(2)
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    workers = [context.Process(target=_prepare_ncf_demo, args=(str(cache), str(log), barrier)) for log in logs]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=240)
    assert [worker.exitcode for worker in workers] == [0, 0], [log.read_text() for log in logs if log.exists()]
    texts = [log.read_text() for log in logs]
    results = [line.split(" ", 1)[1] for text in texts for line in text.splitlines() if line.startswith("RESULT ")]
    assert results == [str(cache / "ncf" / "prepared")] * 2
    generated = [text for text in texts if "generating a small MovieLens-format ratings.csv" in text]
    assert len(generated) == 1, texts                      # prepared once, by whichever process got the lock
    waited = texts[1 - texts.index(generated[0])]
    assert "waiting for another process to prepare the ncf demo data" in waited, waited
    assert read_manifest(results[0], "ncf")["dataset"]
    leftovers = [path for path in glob.glob(str(cache / "**" / "*"), recursive=True) if path.endswith(".tmp")]
    assert leftovers == []


def test_a_waiting_worker_gives_up_after_its_timeout_with_one_line(tmp_path):
    import fcntl

    from data_prep.demos import exclusive_lock
    from mlperf_keras.inputs.manifest import DataError

    lock_path = str(tmp_path / ".prepare.lock")
    lines = []
    with open(lock_path, "a") as held:     # another holder: flock locks of separate opens exclude each other
        fcntl.flock(held, fcntl.LOCK_EX)
        start = time.monotonic()
        with pytest.raises(DataError, match="waited 1 s for another process to prepare the x demo data"):
            with exclusive_lock(lock_path, timeout_s=0.6, log=lines.append, what="the x demo data", poll_s=0.05):
                pytest.fail("entered the block while another holder had the lock")
        assert 0.6 <= time.monotonic() - start < 5
    assert lines and lines[0].startswith("waiting for another process to prepare the x demo data")
    entered = []
    with exclusive_lock(lock_path, timeout_s=0.5, log=lines.append, what="the x demo data"):   # released: free
        entered.append(True)
    assert entered == [True]


def test_a_lock_is_freed_when_its_holder_dies(tmp_path):
    """A crashed preparation must not block the next run: the kernel drops a flock with its process."""
    from data_prep.demos import exclusive_lock

    lock_path = str(tmp_path / ".prepare.lock")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", lock_path],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        killer = threading.Timer(0.5, holder.kill)
        killer.start()
        lines = []
        with exclusive_lock(lock_path, timeout_s=30, log=lines.append, what="the x demo data", poll_s=0.05):
            assert holder.poll() is not None                # we got it only once the holder was gone
        assert lines, "the holder had the lock at first, so this process must have waited"
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
@pytest.mark.multiprocess
@needs_horovod
def test_horovodrun_two_workers_on_an_empty_cache_both_train(tmp_path):
    """The README's multi-worker demo without --data_dir: both ranks start on an empty cache and train."""
    out = tmp_path / "runs"
    proc = subprocess.run(["horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m",
                           "mlperf_keras.train", f"--cache_dir={tmp_path / 'cache'}", f"--output_dir={out}",
                           "--seed=1", "--max_epochs=1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    logs = glob.glob(str(out / "*.log"))
    assert len(logs) == 1, output                          # rank 0 writes the one MLLOG file
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in open(logs[0]) if ":::MLLOG " in line]
    assert {e["key"]: e["value"] for e in events}["num_workers"] == 2
    # Every epoch needs both ranks (gradients are averaged in each step): one epoch means both prepared and trained.
    assert len([e for e in events if e["key"] == "epoch_stop"]) == 1, output
    (status,) = [e["metadata"]["status"] for e in events if e["key"] == "run_stop"]
    # Stopped by --max_epochs (aborted: rank 0 exits 5, which horovodrun reports as a RuntimeError naming "Exit
    # code: 5") or at the demo target (0); no worker raised.
    assert (status == "aborted" and "Exit code: 5" in proc.stdout + proc.stderr) or \
        (status == "success" and proc.returncode == 0), output
    assert "<stderr>:Traceback" not in proc.stdout + proc.stderr, output
    assert os.path.isfile(tmp_path / "cache" / "ncf" / "prepared" / "manifest.json")
