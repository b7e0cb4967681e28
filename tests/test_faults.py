"""The fault matrix (issue: no false success, checks before the clock, faults that end cleanly).

Every case asserts what a user sees: one `error:` line on stderr and no traceback, a non-zero exit status, no
success in any log, and nothing half-written (a start that fails validation writes no MLPerf log at all; a log that
cannot be written ends at its last whole line). Most cases call train.main in this process (a TensorFlow subprocess
costs ~10 s each); the ones about signals and process limits need a subprocess.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mlperf_keras import distribute, loop, mlperf_log
from tests.conftest import ROOT, mllog_events, train_values

# A model smaller than the reference's: the closed division refuses it (compliance/tunable.py), so runs are open.
NCF_SMALL = "mf_dim=8,mlp_layers=32-32-16,batch_size=4096,learning_rate=0.003,beta_1=0.9,beta_2=0.999"


def main_in_process(argv, capsys):
    """mlperf_keras.train's main on these flags, in this process: (exit status, stdout, stderr)."""
    from absl import flags

    from mlperf_keras import train as train_cli

    flag_values = flags.FLAGS
    flag_values.unparse_flags()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        flag_values(["train", *argv])
        status = train_cli.main(["train"])
    finally:
        flag_values.unparse_flags()
        signal.signal(signal.SIGTERM, previous)
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status, err, expected_status, *fragments):
    lines = [line for line in err.splitlines() if line.strip()]
    error_lines = [line for line in lines if line.startswith("error:")]
    assert status == expected_status, (status, err[-2000:])
    assert len(error_lines) == 1 and "Traceback" not in err, err[-2000:]
    for fragment in fragments:
        assert fragment in error_lines[0], (fragment, error_lines[0])


def assert_aborted_log(path, reason_fragment):
    events = mllog_events(path, only_mllog=True)
    assert events[-1]["key"] == "run_stop", events[-1]
    assert events[-1]["metadata"]["status"] == "aborted"
    assert reason_fragment in events[-1]["metadata"]["reason"], events[-1]["metadata"]
    assert not any(e["key"] == "run_stop" and e["metadata"].get("status") == "success" for e in events)
    return events


# ---- divergence: a non-finite loss or metric ends the run as aborted ----

def test_ncf_divergence_exits_non_zero_with_aborted_log(prepared_ncf, tmp_path, capsys):
    """The issue's case: learning_rate=1e30 made the loss NaN, HR@10 1.0 and run_stop success."""
    runs = tmp_path / "runs"
    status, out, err = main_in_process(
        [f"--data_dir={prepared_ncf}", f"--output_dir={runs}", "--seed=1", "--max_epochs=3", "--nojit_compile",
         "--division=open",
         f"--hparams={NCF_SMALL.replace('learning_rate=0.003', 'learning_rate=1e30')}"], capsys)
    assert_one_line_error(status, err, 3, "run aborted: non-finite training loss", "diverged")
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "aborted" and summary["epochs"] == 1 and summary["quality"] is None
    (log,) = glob.glob(str(runs / "*.log"))
    events = assert_aborted_log(log, "non-finite training loss")
    assert not any(e["key"] == "eval_accuracy" for e in events)  # a diverged model is not evaluated
    assert log.endswith(".log") and open(log).read().endswith("\n")


@pytest.mark.parametrize("model, hparams, batch", [
    ("resnet", "image_size=32,eval_resize=36,width=8,block_sizes=1-1-1-1,train_images=128,val_images=32,"
               "num_classes=10,learning_rate=1e30", 32),
    pytest.param("ssd", "width=8,train_images=8,val_images=4,learning_rate=1e30", 4, marks=pytest.mark.slow),
    pytest.param("transformer", "d_model=16,num_layers=1,num_heads=2,filter_size=32,vocab_size=64,train_pairs=64,"
                                "eval_sentences=4,max_length=16,learning_rate=1e30,warmup_steps=1", 256,
                 marks=pytest.mark.slow),
])
def test_divergence_aborts_every_workload_family(model, hparams, batch, tmp_path):
    """Tiny synthetic configs of the image, detection and translation families with a learning rate of 1e30."""
    values = train_values(model=model, synthetic=True, hparams=hparams, batch_size=batch, max_epochs=2, seed=1,
                          output_dir=str(tmp_path), jit_compile=False, division="open")
    from mlperf_keras import train as train_cli

    dist = distribute.create("tensorflow")
    workload, manifest, config = train_cli.prepare(values, dist, say=lambda _: None)
    result = loop.run(config, workload, dist, manifest)
    assert result.status == "aborted" and "non-finite training loss" in result.reason, result
    assert_aborted_log(result.log_path, "non-finite training loss")


def test_non_finite_metric_aborts(prepared_ncf, tmp_path, monkeypatch):
    """A metric that comes out NaN never counts as reached, and ends the run (the loss alone may look fine)."""
    from mlperf_keras import train as train_cli
    from mlperf_keras.workloads import ncf

    monkeypatch.setattr(ncf._HitRateEvaluator, "evaluate", lambda self, predict: float("nan"))
    values = train_values(data_dir=prepared_ncf, output_dir=str(tmp_path), seed=2, hparams=NCF_SMALL, max_epochs=3,
                          division="open")
    dist = distribute.create("tensorflow")
    workload, manifest, config = train_cli.prepare(values, dist, say=lambda _: None)
    result = loop.run(dataclasses.replace(config, quality_target=0.0), workload, dist, manifest)
    assert result.status == "aborted" and result.epochs == 1 and "non-finite HR@10" in result.reason
    events = assert_aborted_log(result.log_path, "non-finite HR@10")
    assert not any(e["key"] == "eval_accuracy" for e in events)


def test_progress_read_of_a_non_finite_loss_ends_the_epoch():
    """run_epoch stops at the first progress line that reads a non-finite loss, not at the epoch's end."""
    calls = []

    def step(x, y):
        calls.append(x)
        return float("nan") if len(calls) >= 3 else 1.0

    batches = ((i, i) for i in range(100))
    loss = loop.run_epoch(step, batches, 100, 1, progress_seconds=0.0, say=lambda _: None)
    assert np.isnan(loss) and len(calls) == 3


# ---- validation before the log opens: a bad start writes no MLPerf log ----

def _copy(prepared_ncf, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(prepared_ncf, copy)
    return copy


def _edit_manifest(data_dir, edit):
    path = os.path.join(data_dir, "manifest.json")
    manifest = json.load(open(path))
    edit(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


def _drop_first_eval_entry(manifest):
    evals = [f for f in manifest["files"] if f["split"] == "eval"]
    manifest["files"].remove(evals[0])


def _remove_train_shard(data_dir):
    os.remove(sorted(glob.glob(os.path.join(data_dir, "train-*.npy")))[-1])


def _scale_counts(manifest):
    manifest["counts"]["train_positives"] *= 10
    manifest["counts"]["eval_users"] *= 10


def _scale_rows(manifest):
    for entry in manifest["files"]:
        entry["rows"] = entry["rows"] * 10


BAD_STARTS = [
    # (flags, data edit, message fragment)
    (["--seed=-1"], None, "--seed=-1: a seed is an integer in [0, 2147483648)"),
    ([f"--seed={2**31}"], None, "a seed is an integer"),
    (["--max_epochs=0"], None, "--max_epochs=0: at least 1"),
    (["--max_epochs=-1"], None, "--max_epochs=-1: at least 1"),
    (["--hparams=num_items=5"], None, "num_items=5: the prepared data has num_items=1500"),
    (["--hparams=num_items=1000"], None, "cannot be overridden"),
    (["--hparams=num_users=99999"], None, "the prepared data has num_users="),
    (["--hparams=learning_rate=-0.1"], None, "a learning rate is a positive finite number"),
    (["--hparams=learning_rate=0"], None, "a learning rate is a positive finite number"),
    (["--hparams=learning_rate=nan"], None, "a learning rate is a positive finite number"),
    (["--progress_seconds=0"], None, "--progress_seconds=0.0: must be positive"),
    (["--hparams=mlp_layers=33-16"], None, "mlp_layers=33-16: positive widths, the first even"),
    (["--hparams=negatives=0"], None, "negatives=0: both at least 1"),
    (["--hparams=top_k=0"], None, "top_k=0: between 1 and the"),
    (["--resume"], None, "--resume needs --checkpoint_dir"),
    (["--resume", "--checkpoint_dir={tmp}/empty"], None, "--resume: no checkpoint in"),
    (["--keep_checkpoints=0", "--checkpoint_dir={tmp}/ck"], None, "--keep_checkpoints=0: at least 1"),
    ([], _remove_train_shard, "listed in the manifest but missing"),
    ([], lambda d: os.remove(sorted(glob.glob(os.path.join(d, "eval-*.npy")))[0]), "listed in the manifest but missing"),
    ([], lambda d: _edit_manifest(d, _drop_first_eval_entry), "counts.eval_users is"),
    ([], lambda d: _edit_manifest(d, _scale_counts), "counts.train_positives is"),
    ([], lambda d: _edit_manifest(d, _scale_rows), "rows, the manifest says"),
    ([], lambda d: _edit_manifest(d, lambda m: m.update(files={"a": 1})), "malformed manifest (no 'files' list)"),
    ([], lambda d: _edit_manifest(d, lambda m: m["files"][0].update(name="../x.npy")), "is not a plain file name"),
    ([], lambda d: _edit_manifest(d, lambda m: m["files"][0].pop("bytes")), "'bytes' missing"),
    ([], lambda d: open(os.path.join(d, "manifest.json"), "w").write("{not json"), "unreadable manifest"),
    ([], lambda d: open(sorted(glob.glob(os.path.join(d, "train-*.npy")))[0], "ab").write(b"\0"),
     "bytes, the manifest says"),
]


@pytest.mark.parametrize("flag_args, data_edit, message", BAD_STARTS,
                         ids=[f"case{i}" for i in range(len(BAD_STARTS))])
def test_bad_start_is_one_line_and_writes_no_log(prepared_ncf, tmp_path, capsys, flag_args, data_edit, message):
    data_dir = prepared_ncf
    if data_edit is not None:
        data_dir = str(_copy(prepared_ncf, tmp_path))
        data_edit(data_dir)
    runs = tmp_path / "runs"
    argv = [f"--data_dir={data_dir}", f"--output_dir={runs}", f"--hparams={NCF_SMALL}", "--seed=5", "--division=open",
            *(a.format(tmp=tmp_path) for a in flag_args)]
    if any(a.startswith("--hparams") for a in flag_args):  # the case's own hparams (only the overridden key)
        argv.remove(f"--hparams={NCF_SMALL}")
    if any(a.startswith("--seed") for a in flag_args):
        argv.remove("--seed=5")
    status, out, err = main_in_process(argv, capsys)
    assert_one_line_error(status, err, 2, message)
    assert not runs.exists()   # --output_dir is created only when the log opens (issue 32)


@pytest.mark.parametrize("make_bad, message", [
    (lambda tmp: (tmp / "a_file").write_text("x") and str(tmp / "a_file"), "is a file, not a folder"),
    (lambda tmp: "/proc/mlperf_keras_runs", "is not writable"),
])
def test_output_dir_a_file_or_unwritable_fails_before_any_data_is_read(tmp_path, capsys, monkeypatch, make_bad,
                                                                       message):
    from mlperf_keras.inputs import manifest

    def must_not_read(*args, **kwargs):
        raise AssertionError("data was read before the output folder was checked")

    monkeypatch.setattr(manifest, "read_manifest", must_not_read)
    bad = make_bad(tmp_path)
    status, out, err = main_in_process([f"--data_dir={tmp_path}", f"--output_dir={bad}", "--seed=1"], capsys)
    assert_one_line_error(status, err, 2, f"--output_dir={bad}", message)


def test_corrupt_checksum_is_found_on_the_clock_and_logged_aborted(prepared_ncf, tmp_path, capsys):
    """Same size, other bytes: only the sha256 (read on the clock, as the rules want) can tell."""
    data_dir = _copy(prepared_ncf, tmp_path)
    victim = sorted(glob.glob(str(data_dir / "eval-*.npy")))[0]
    with open(victim, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 1]))
    runs = tmp_path / "runs"
    status, out, err = main_in_process([f"--data_dir={data_dir}", f"--output_dir={runs}", "--seed=1",
                                        f"--hparams={NCF_SMALL}", "--division=open"], capsys)
    assert_one_line_error(status, err, 2, os.path.basename(victim), "checksum")
    (log,) = glob.glob(str(runs / "*.log"))
    assert_aborted_log(log, "checksum")


# ---- the MLPerf log cannot be written (disk full) ----

def test_log_write_failure_is_cut_back_to_the_last_whole_line(tmp_path):
    """A real file size limit (RLIMIT_FSIZE, as a full disk): the failing line is removed whole, the run is told."""
    path = mlperf_log.new_log_path(str(tmp_path), "ncf", 1)
    log = mlperf_log.MLPerfLog(path)
    log.event("submission_org", "x")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 700, hard))
    try:
        with pytest.raises(mlperf_log.LogWriteError, match="cannot write the MLPerf log"):
            for i in range(100):
                log.event("tracked_stats", {"loss": 0.5, "padding": "x" * 50}, metadata={"epoch_num": i})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        log.close()
    text = open(path).read()
    assert text.endswith("\n") and 1 < len(text.splitlines()) < 100
    assert [e["key"] for e in mllog_events(path, only_mllog=True)][0] == "submission_org"  # every line parses


def test_disk_full_ends_the_run_with_a_clear_error(prepared_ncf, tmp_path, capsys):
    """The whole program under a file size limit that the log reaches during training: exit 4, one error line,
    training stops, the log ends at a whole line."""
    runs = tmp_path / "runs"
    limit = 14000
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        status, out, err = main_in_process([f"--data_dir={prepared_ncf}", f"--output_dir={runs}", "--seed=1",
                                            "--max_epochs=30", f"--hparams={NCF_SMALL}", "--nojit_compile",
                                            "--division=open"], capsys)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert_one_line_error(status, err, 4, "cannot write the MLPerf log")
    assert '"status"' not in out and "epoch 29" not in out  # no end-of-run summary: the run did not go on
    (log,) = glob.glob(str(runs / "*.log"))
    text = open(log).read()
    assert text.endswith("\n") and len(text) <= limit
    events = mllog_events(log, only_mllog=True)
    assert any(e["key"] == "run_start" for e in events)  # it failed during training, not before
    assert not any(e["key"] == "run_stop" and e["metadata"]["status"] == "success" for e in events)


# ---- sweep: signals reach the running training, the interrupted seed is reported ----

FAKE_TRAIN = '''
import os, signal, sys, time
seed = [a for a in sys.argv if a.startswith("--seed=")][0][7:]
out = [a for a in sys.argv if a.startswith("--output_dir=")][0][13:]
def stop(signum, frame):
    open(os.path.join(out, f"child{seed}.got{signum}"), "w").close()
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open(os.path.join(out, f"child{seed}.started"), "w").close()
time.sleep(60)
'''


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sweep_forwards_signals_and_reports_the_interrupted_seed(tmp_path, signum):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "fake_train.py").write_text(FAKE_TRAIN)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "mlperf_keras.sweep", "--model=ncf", "--seeds=7,8",
                             f"--output_dir={runs}", "--train_module=fake_train"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": f"{package}:{ROOT}"})
    try:
        deadline = time.time() + 60
        while not (runs / "child7.started").exists():
            assert time.time() < deadline and proc.poll() is None, "the first run did not start"
            time.sleep(0.1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (runs / f"child7.got{int(signum)}").exists()  # the training got the signal, not orphaned
    assert not (runs / "child8.started").exists()         # and the sweep stopped
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    assert "interrupted during seed 7" in err, err


# ---- data_prep: staging never leaks, --overwrite leaves nothing stale, subsets and truncated raw data refused ----

def _tiny_movielens_raw(root, users=60, items=400):
    from data_prep import demo_movielens

    demo_movielens.write_ratings_csv(str(root / "raw" / "ml-20m" / "ratings.csv"), num_users=users, num_items=items,
                                     seed=3)
    return root / "raw"


PREP_STOPPED_MIDWAY = '''
import sys, time
from mlperf_keras.inputs import manifest
add = manifest.StagedOutput.add
def add_then_wait(self, name, *args, **kwargs):  # the first shard is in the staging folder: stop here
    entry = add(self, name, *args, **kwargs)
    print("staged", flush=True)
    time.sleep(60)
    return entry
manifest.StagedOutput.add = add_then_wait
sys.argv = ["movielens", "--raw_dir=%s", "--output_dir=%s", "--allow_subset"]
from absl import app
from data_prep import movielens
movielens.define_flags()
app.run(movielens.main)
'''


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_data_prep_removes_its_staging_folder(tmp_path, signum):
    raw = _tiny_movielens_raw(tmp_path)
    out = tmp_path / "out"
    # A shell's background job (CI started with `&`) inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the child the default disposition a terminal's Ctrl-C meets.
    proc = subprocess.Popen([sys.executable, "-c", PREP_STOPPED_MIDWAY % (raw, out)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:  # its progress lines, then ours
            if line.strip() == "staged":
                break
        else:
            raise AssertionError(proc.stderr.read()[-2000:])
        assert any(name.startswith(".staging-") for name in os.listdir(out))
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_one_line_error(proc.returncode, err, 130 if signum == signal.SIGINT else 128 + signum,
                          "staging folder was removed")
    assert os.listdir(out) == []


def test_killed_data_prep_staging_is_removed_by_the_next_run(tmp_path):
    """SIGKILL leaves no chance to clean up: the next preparation into the folder removes the dead one's staging."""
    from mlperf_keras.inputs.manifest import StagedOutput

    out = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / f".staging-{dead.pid}-abc").mkdir(parents=True)
    (out / f".staging-{dead.pid}-abc" / "train-00000.npy").write_bytes(b"x" * 100)
    (out / f".staging-{os.getppid()}-live").mkdir()  # a running process's: left alone
    with StagedOutput(str(out)) as staged:
        names = sorted(os.listdir(out))
    assert names == sorted([os.path.basename(staged.staging), f".staging-{os.getppid()}-live"])


def test_overwrite_with_fewer_shards_leaves_no_stale_files(tmp_path):
    from data_prep import movielens

    raw = _tiny_movielens_raw(tmp_path)
    out = tmp_path / "out"
    movielens.prepare(str(raw), str(out), num_shards=4, log=lambda _: None)
    assert len(glob.glob(str(out / "train-*.npy"))) == 4
    manifest = movielens.prepare(str(raw), str(out), num_shards=2, overwrite=True,
                                 log=lambda _: None)
    assert sorted(os.listdir(out)) == sorted([f["name"] for f in manifest["files"]] + ["manifest.json"])


def test_subset_of_the_official_counts_is_refused_without_allow_subset(tmp_path):
    """The command line compares the counts with the official dataset's (a tar cut at a member boundary, a truncated
    CSV with whole lines): one line, exit 2, nothing written; --allow_subset accepts it and says so in the manifest."""
    raw = _tiny_movielens_raw(tmp_path)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "data_prep.movielens", f"--raw_dir={raw}", f"--output_dir={out}"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert_one_line_error(proc.returncode, proc.stderr, 2, "not the full movielens-20m (ratings:",
                          "the official dataset has 20,000,263", "--allow_subset")
    assert os.listdir(out) == []
    proc = subprocess.run(args + ["--allow_subset"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.load(open(out / "manifest.json"))["subset"] is True


@pytest.mark.parametrize("dataset, counts, message", [
    ("imagenet-2012", {"train_images": 1_281_167, "val_images": 49_999}, "validation images: 49,999"),
    ("coco-2017", {"train_images": 118_287, "val_images": 4_000}, "val2017 images: 4,000"),
    ("wmt17-en-de", {"eval_sentences": 3_002}, "newstest2014 sentences: 3,002"),
    ("wmt16-en-de", {"eval_sentences": 2_999}, "newstest2014 sentences: 2,999"),
])
def test_official_counts_of_every_dataset(tmp_path, dataset, counts, message):
    from mlperf_keras.inputs.manifest import DataError, StagedOutput, require_official_counts

    token = require_official_counts.set(True)
    try:
        with pytest.raises(DataError, match=message):
            with StagedOutput(str(tmp_path / "out")) as staged:
                (tmp_path / "out").joinpath(os.path.basename(staged.staging), "a.npy").write_bytes(b"1")
                staged.add("a.npy")
                staged.commit("x", dataset, counts)
    finally:
        require_official_counts.reset(token)
    assert os.listdir(tmp_path / "out") == []


def test_truncated_or_corrupt_raw_files_fail_with_one_line(tmp_path):
    import zipfile

    from data_prep import movielens, wmt_common
    from mlperf_keras.inputs.manifest import DataError

    raw = _tiny_movielens_raw(tmp_path)
    csv = raw / "ml-20m" / "ratings.csv"
    data = csv.read_bytes()
    cut = tmp_path / "cut" / "ml-20m"
    cut.mkdir(parents=True)
    (cut / "ratings.csv").write_bytes(data[:-3])  # inside the last timestamp: still parses as numbers
    with pytest.raises(DataError, match="does not end with a newline"):
        movielens.prepare(str(tmp_path / "cut"), str(tmp_path / "o1"), log=lambda _: None)
    zipped = tmp_path / "zip"
    zipped.mkdir()
    with zipfile.ZipFile(zipped / "ml-20m.zip", "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("ml-20m/ratings.csv", data)
    blob = bytearray((zipped / "ml-20m.zip").read_bytes())
    blob[len(blob) // 2] ^= 0x01  # inside the stored member: its CRC no longer matches
    (zipped / "ml-20m.zip").write_bytes(bytes(blob))
    with pytest.raises(DataError, match="unreadable .*CRC"):
        movielens.prepare(str(zipped), str(tmp_path / "o2"), log=lambda _: None)
    (tmp_path / "c.en").write_bytes(b"")
    (tmp_path / "c.de").write_bytes(b"")
    with pytest.raises(DataError, match="c.en: empty corpus"):
        wmt_common.read_parallel(str(tmp_path / "c.en"), str(tmp_path / "c.de"))
    for out in ("o1", "o2"):
        assert not (tmp_path / out).exists() or os.listdir(tmp_path / out) == []


def test_data_prep_output_dir_a_file_is_one_line(tmp_path):
    from data_prep import movielens
    from mlperf_keras.inputs.manifest import DataError

    raw = _tiny_movielens_raw(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="is a file, not a folder"):
        movielens.prepare(str(raw), str(tmp_path / "file"), log=lambda _: None)


@pytest.mark.parametrize("content, message", [
    ("{not json", "error: "),
    ('{"format_version": 1, "files": "x", "counts": {}}', "malformed manifest (no 'files' list)"),
    ('[1, 2]', "malformed manifest"),
])
def test_verify_malformed_manifest_is_one_line(tmp_path, content, message):
    (tmp_path / "manifest.json").write_text(content)
    proc = subprocess.run([sys.executable, "-m", "data_prep.verify", f"--data_dir={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert_one_line_error(proc.returncode, proc.stderr, 2, message)


def test_corrupt_tfrecord_is_named(tmp_path):
    """A DataLossError from a tf.data pipeline names no file: the failure path finds and names it."""
    import tensorflow as tf

    from mlperf_keras.inputs import records

    names = []
    for k in range(3):
        name = f"train-{k:05d}-of-00003"
        with records.writer(str(tmp_path / name)) as w:
            for i in range(20):
                w.write(records.example({"x": records.int64_feature(i)}))
        names.append(name)
    blob = bytearray((tmp_path / names[1]).read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (tmp_path / names[1]).write_bytes(bytes(blob))
    manifest = {"files": [{"name": n, "split": "train"} for n in names] + [{"name": "synsets.txt", "split": "meta"}]}
    with pytest.raises(tf.errors.DataLossError) as caught:
        for _ in records.record_dataset([str(tmp_path / n) for n in names]):
            pass
    message = records.data_loss_message(caught.value, str(tmp_path), manifest)
    assert message.startswith(str(tmp_path / names[1]) + ": corrupt TFRecord") and "\n" not in message


def test_run_stop_reason_says_a_nested_runtime_error_once_and_keeps_its_cause():
    """XLA nests 'Error dispatching computation: ' once per level; 300 characters of that would hide the cause (a
    dead peer's Gloo connection in a multi-process JAX run)."""
    from mlperf_keras.loop import _error_reason

    error = RuntimeError("INTERNAL: " + "Error dispatching computation: " * 20 + "Gloo all-reduce failed: "
                         "Connection reset by peer\nsecond line")
    assert _error_reason(error) == ("RuntimeError: INTERNAL: Error dispatching computation: Gloo all-reduce failed: "
                                    "Connection reset by peer")
    assert _error_reason(ValueError("x" * 400)) == "ValueError: " + "x" * 288


def test_a_batch_the_training_data_cannot_fill_is_refused_before_the_log_opens(tmp_path):
    """GNMT cuts each length bucket into full global batches (the reference's sampler): 64 synthetic pairs at batch
    32 over 5 buckets make no batch. That is a bad start (one line), not a StopIteration from inside the loop."""
    from mlperf_keras import train as train_cli
    from mlperf_keras.config import ConfigError

    values = train_values(model="gnmt", synthetic=True, seed=1, output_dir=str(tmp_path / "runs"), division="open",
                          hparams="hidden=16,num_layers=2,vocab_size=64,train_pairs=64,max_length=12,batch_size=32")
    with pytest.raises(ConfigError, match="0 steps per epoch at global batch 32"):
        train_cli.prepare(values, distribute.create("tensorflow"), say=lambda _: None)
    assert not (tmp_path / "runs").exists()
