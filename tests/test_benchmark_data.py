"""`python -m mlperf_keras.benchmark --data_dir` (the step fed by the real input pipeline beside the same batches
resident on the device) and `--input_only` (the pipeline alone), for all six workloads on their demo data."""
from __future__ import annotations

import json

import pytest

from tests.conftest import resolve_run, run_cli

# Small models (the closed division refuses them: the runs are open) and batches, for a 2-core CPU.
SMALL = {
    "ncf": ("mf_dim=8", 1024),
    "resnet": ("image_size=32,eval_resize=36,width=8,block_sizes=1-1-1-1,shuffle_buffer=64", 16),
    "ssd": ("width=8,shuffle_buffer=64", 4),
    "maskrcnn": ("block_sizes=1-1-1-1,width=8,fpn_channels=16,representation_size=64,mask_conv_layers=16-16,"
                 "frozen_batch_norm=false,frozen_stages=0,pre_nms_train=32,pre_nms_test=32,roi_batch=16,max_gt=8,"
                 "detections_per_image=10,min_size=64,max_size=96,shuffle_buffer=16", 2),
    "gnmt": ("hidden=32,num_layers=2,max_length=20,shuffle_buffer=256", 16),
    "transformer": ("d_model=32,num_layers=1,num_heads=2,filter_size=64,max_length=32,shuffle_buffer=256", 512),
}
# Workloads whose real batches take one of several shapes, so the first real batch's need not be the synthetic one's:
# the translation workloads' length buckets; Mask R-CNN's two padded shapes (aspect-ratio groups) and polygon
# capacity (the prepared data's most vertices, from the manifest; synthetic data: COCO's).
SHAPES_VARY = ("gnmt", "maskrcnn", "transformer")


@pytest.fixture(scope="module")
def demo_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("demo_cache"))


def _benchmark(model, data_dir, out, *extra):
    hparams, batch = SMALL[model]
    proc = run_cli("mlperf_keras.benchmark", f"--model={model}", f"--data_dir={data_dir}", f"--batch_size={batch}",
                   f"--hparams={hparams}", "--steps=2", "--warmup_steps=1", f"--json_out={out}", *extra, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out) as f:
        return json.load(f), proc.stdout


def _synthetic_shapes(model):
    hparams, batch = SMALL[model]
    workload, _, config, dist = resolve_run(model, synthetic=True, batch_size=batch, hparams=hparams, division="open")
    x = next(iter(workload.synthetic_train_data(config, dist).batches(0)))[0]
    return {k: list(v.shape) for k, v in (x.items() if isinstance(x, dict) else [("x", x)])}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(SMALL))
def test_fed_and_input_only_on_the_demo_data(model, demo_cache, tmp_path):
    from data_prep import demos

    data_dir = demos.prepare(model, demo_cache, log=lambda _: None)
    fed, stdout = _benchmark(model, data_dir, tmp_path / "fed.json")
    assert fed["fed_samples_per_s"] > 0 and fed["resident_samples_per_s"] > 0 and fed["fed_batches"] == 2
    assert fed["fed_host_cpu_ms_per_sample"] > 0 and "fed " in stdout
    synthetic = _synthetic_shapes(model)
    if model in SHAPES_VARY:   # the same inputs of the same rank
        assert {k: len(v) for k, v in fed["batch_shapes"].items()} == {k: len(v) for k, v in synthetic.items()}
    else:
        assert fed["batch_shapes"] == synthetic
    alone, _ = _benchmark(model, data_dir, tmp_path / "input.json", "--input_only")
    assert alone["input_samples_per_s"] > 0 and alone["input_batches"] == 2 and alone["input_samples"] > 0
    assert alone["batch_shapes"].keys() == synthetic.keys()
    assert "bare_samples_per_s" not in alone   # no model was built or stepped


def test_input_only_needs_prepared_records():
    proc = run_cli("mlperf_keras.benchmark", "--model=ncf", "--input_only")
    assert proc.returncode == 2 and "--input_only times the input pipeline of prepared records" in proc.stderr


def test_repeat_records_lists_the_training_files_n_times(demo_cache, tmp_path):
    """benchmarks/repeat_records.py: a dataset the readers accept (manifest and file checks), whose training records
    are the original's 3 times over, the other splits unchanged; training files not named as shards are refused."""
    import collections
    import os
    import subprocess
    import sys

    from data_prep import demos
    from mlperf_keras.inputs import manifest, record_reader
    from tests.conftest import ROOT

    data_dir = demos.prepare("resnet", demo_cache, log=lambda _: None)
    out = tmp_path / "x3"
    script = os.path.join(ROOT, "benchmarks", "repeat_records.py")
    proc = subprocess.run([sys.executable, script, f"--data_dir={data_dir}", "--copies=3", f"--output_dir={out}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    original, repeated = manifest.read_manifest(data_dir, "resnet"), manifest.read_manifest(str(out), "resnet")
    manifest.check_files(str(out), repeated)
    assert repeated["counts"]["train_images"] == 3 * original["counts"]["train_images"]
    assert repeated["counts"]["val_images"] == original["counts"]["val_images"]

    def records(folder, man, split):
        return collections.Counter(r for path in manifest.worker_files(folder, man, split, 0, 1)
                                   for r in record_reader.iter_records(path))

    once = records(data_dir, original, "train")
    assert records(str(out), repeated, "train") == collections.Counter({r: 3 * n for r, n in once.items()})
    assert records(str(out), repeated, "validation") == records(data_dir, original, "validation")

    first, *rest = original["files"]
    assert first["split"] == "train"
    bad = dict(original, files=[dict(first, name="train.tfrecord")] + rest)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text(json.dumps(bad))
    proc = subprocess.run([sys.executable, script, f"--data_dir={tmp_path / 'bad'}", "--copies=2",
                           f"--output_dir={tmp_path / 'bad_x2'}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is not named as a shard" in proc.stderr
    assert not (tmp_path / "bad_x2").exists()
