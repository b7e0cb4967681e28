"""Every flag a data_prep command accepts acts, or is refused before any work with one line naming what it does not
apply to (issue 32: `data_prep.wmt --workload=gnmt` took --corpora, --vocab_size and --allow_subset and ignored
them).

One subprocess per command (flags of different commands clash in one process): it replaces the command's work
function with a recorder, then runs its main through the entry point once per flag. A flag acts when changing it
changes what the work function is called with; --allow_subset acts when the recorded official-count check flips
and the dataset has official counts to check. The table must name every flag the command defines, so a new flag
without a row fails here.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlperf_keras.inputs.manifest import OFFICIAL_COUNTS
from tests.conftest import ROOT

DRIVER = r'''
import contextlib, importlib, io, json, sys

from absl import flags

from mlperf_keras import entry
from mlperf_keras.inputs.manifest import require_official_counts

module_name, targets, cases = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
before = set(flags.FLAGS)
module = importlib.import_module(module_name)
if hasattr(module, "define_flags"):
    module.define_flags()
defined = sorted(set(flags.FLAGS) - before)
calls = []


def recorder(name):
    def record(*args, **kwargs):
        calls.append({"function": name, "args": [repr(a) for a in args],
                      "kwargs": {k: repr(v) for k, v in sorted(kwargs.items()) if k != "log"},
                      "official_counts": require_official_counts.get()})
        return 1   # a count, or download's "complete"
    return record


for target in targets:
    owner, _, attribute = target.rpartition(".")
    setattr(importlib.import_module(owner), attribute, recorder(target))
results = []
for argv in cases:
    calls.clear()
    flags.FLAGS.unparse_flags()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            entry.run(module.main, argv=["prog", *argv])
            status = 0
        except SystemExit as stop:
            status = stop.code or 0
    results.append({"status": status, "stderr": err.getvalue(), "calls": list(calls)})
print(json.dumps({"defined": defined, "results": results}))
'''

ACTS, REFUSED = "acts", "refused"
WMT_WORK = ["data_prep.wmt.prepare", "data_prep.wmt_gnmt.prepare"]
PREP = ["--raw_dir=/nonexistent/raw", "--output_dir=/nonexistent/out"]

# (command, the functions doing its work, base flags, dataset it prepares or None, {flag: (changed value, outcome)})
COMMANDS = {
    "wmt transformer subword": ("data_prep.wmt", WMT_WORK, PREP, "wmt17-en-de", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "corpora": ("europarl", ACTS), "vocab_kind": ("unigram", ACTS),
        "vocab_size": (1000, REFUSED), "subword_min_count": (3, ACTS), "vocab_file": ("/v.subwords", ACTS),
        "drop_empty": (True, ACTS), "max_length": (64, ACTS), "max_ratio": (1.5, ACTS), "num_shards": (4, ACTS),
        "seed": (5, ACTS), "vocab_sample": (100, REFUSED), "threads": (1, ACTS), "byte_fallback": (False, REFUSED),
        "workload": ("gnmt", ACTS)}),
    "wmt transformer unigram": ("data_prep.wmt", WMT_WORK, [*PREP, "--vocab_kind=unigram"],
                                "wmt17-en-de", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "corpora": ("europarl", ACTS), "vocab_kind": ("bpe", ACTS),
        "vocab_size": (1000, ACTS), "subword_min_count": (3, REFUSED), "vocab_file": ("/v.subwords", REFUSED),
        "drop_empty": (True, ACTS), "max_length": (64, ACTS), "max_ratio": (1.5, ACTS), "num_shards": (4, ACTS),
        "seed": (5, ACTS), "vocab_sample": (100, ACTS), "threads": (1, ACTS), "byte_fallback": (False, ACTS),
        "workload": ("gnmt", REFUSED)}),
    "wmt gnmt": ("data_prep.wmt", WMT_WORK,
                 [*PREP, "--workload=gnmt"], "wmt16-en-de", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "corpora": ("europarl", ACTS), "vocab_kind": ("unigram", REFUSED),
        "vocab_size": (1000, REFUSED), "subword_min_count": (3, REFUSED), "vocab_file": ("/v.subwords", REFUSED),
        "drop_empty": (True, REFUSED), "max_length": (64, ACTS), "max_ratio": (1.5, REFUSED),
        "num_shards": (4, ACTS), "seed": (5, ACTS), "vocab_sample": (100, REFUSED), "threads": (1, ACTS),
        "byte_fallback": (False, REFUSED), "workload": ("transformer", ACTS)}),
    "wmt_gnmt": ("data_prep.wmt_gnmt", ["data_prep.wmt_gnmt.prepare"], PREP, "wmt16-en-de", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "bpe_merges": (100, ACTS), "max_length": (64, ACTS), "num_shards": (4, ACTS),
        "seed": (5, ACTS), "threads": (1, ACTS)}),
    "coco": ("data_prep.coco", ["data_prep.coco.prepare"], PREP, "coco-2017", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "train_shards": (4, ACTS), "val_shards": (2, ACTS), "num_workers": (1, ACTS)}),
    "imagenet": ("data_prep.imagenet", ["data_prep.imagenet.prepare"], PREP, "imagenet-2012", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "train_shards": (4, ACTS), "val_shards": (2, ACTS),
        "on_corrupt": ("skip", ACTS), "num_workers": (1, ACTS), "val_labels": ("/labels.txt", ACTS)}),
    "movielens": ("data_prep.movielens", ["data_prep.movielens.prepare"], PREP, "movielens-20m", {
        "raw_dir": ("/other", ACTS), "output_dir": ("/other", ACTS), "overwrite": (True, ACTS),
        "allow_subset": (True, ACTS), "min_ratings": (5, ACTS), "num_shards": (4, ACTS)}),
    "download": ("data_prep.download", ["data_prep.download.download"], ["--dataset=movielens", "--raw_dir=/r"],
                 None, {"dataset": ("wmt16", ACTS), "raw_dir": ("/other", ACTS), "progress_seconds": (1.0, ACTS)}),
    "ssd_backbone": ("data_prep.ssd_backbone", ["data_prep.ssd_backbone.convert_file"],
                     ["--torchvision_checkpoint=/c.pth", "--output=/o.npz"], None,
                     {"torchvision_checkpoint": ("/d.pth", ACTS), "output": ("/p.npz", ACTS)}),
    "maskrcnn_backbone": ("data_prep.maskrcnn_backbone", ["data_prep.maskrcnn_backbone.convert_file"],
                          ["--detectron_pickle=/r.pkl", "--output=/o.npz"], None,
                          {"detectron_pickle": ("/s.pkl", ACTS), "output": ("/p.npz", ACTS)}),
    "verify": ("data_prep.verify", ["data_prep.verify.check_manifest", "data_prep.verify.check_files",
                                    "data_prep.verify.verify_files"], ["--data_dir=/d"], None,
               {"data_dir": ("/e", ACTS)}),
}


def flag_argument(name, value):
    if value is True:
        return f"--{name}"
    if value is False:
        return f"--no{name}"
    return f"--{name}={value}"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_acts_or_is_refused(command, tmp_path):
    module, targets, base, dataset, table = COMMANDS[command]
    if module == "data_prep.verify":   # verify reads the manifest before its recorded checks
        for folder in ("d", "e"):
            (tmp_path / folder).mkdir()
            (tmp_path / folder / "manifest.json").write_text('{"counts": {}}')
        base = [f"--data_dir={tmp_path}/d"]
        table = {"data_dir": (f"{tmp_path}/e", ACTS)}
    cases = [base] + [[*base, flag_argument(name, value)] for name, (value, _) in table.items()]
    proc = subprocess.run([sys.executable, "-c", DRIVER, module, json.dumps(targets), json.dumps(cases)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(table) == [name for name in report["defined"] if name not in ("helpshort",)], report["defined"]
    baseline, *results = report["results"]
    assert baseline["status"] == 0 and baseline["calls"], baseline
    outcomes = {}
    for (name, (value, expected)), result in zip(table.items(), results):
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        if result["status"] == 2 and len(lines) == 1 and f"--{name}" in lines[0] and not result["calls"]:
            outcomes[name] = REFUSED
        elif result["calls"] and result["calls"] != baseline["calls"]:
            changed_check = result["calls"][0]["official_counts"] != baseline["calls"][0]["official_counts"]
            silent_subset = name == "allow_subset" and not (changed_check and dataset in OFFICIAL_COUNTS)
            outcomes[name] = "ignored" if silent_subset else ACTS
        else:
            outcomes[name] = f"ignored (status {result['status']}: {result['stderr'][-300:]!r})"
    assert outcomes == {name: expected for name, (_, expected) in table.items()}
