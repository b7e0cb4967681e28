"""--backbone_weights of the workloads whose references start from an ImageNet-trained backbone (SSD's ResNet-34,
Mask R-CNN's ResNet-50): refused on real data unless given (or an explicit none) before any log is written, loaded
into the backbone, named in the log by file and sha256; refused by a workload that trains from scratch."""
from __future__ import annotations

import hashlib
import importlib

import numpy as np
import pytest

from mlperf_keras.layers import backbone_weights
from tests.conftest import resolve_run, run_cli

# Small models for CPU runs (each workload's hparams); the backbone's variable names do not depend on its size.
# The closed division refuses them (compliance/tunable.py): they resolve open.
SMALL = {"ssd": "width=8",
         "maskrcnn": "block_sizes=1-1-1-1,width=8,fpn_channels=16,representation_size=64,mask_conv_layers=16-16,"
                     "frozen_batch_norm=false,frozen_stages=0,max_gt=6,min_size=64,max_size=96"}
MODELS = sorted(SMALL)


def test_flag_errors(tmp_path):
    proc = run_cli("mlperf_keras.train", "--model=ncf", "--dry_run", f"--backbone_weights={tmp_path}/x.npz")
    assert proc.returncode == 2 and "--model=ncf trains from scratch" in proc.stderr
    proc = run_cli("mlperf_keras.train", "--model=ssd", "--dry_run", f"--backbone_weights={tmp_path}/missing.npz")
    assert proc.returncode == 2 and "missing.npz: no such file" in proc.stderr


@pytest.mark.parametrize("model", MODELS)
def test_real_data_without_backbone_weights_is_refused(model, prepared_coco, tmp_path):
    """The references always start from ImageNet weights: real data needs --backbone_weights (or an explicit none),
    refused in one line before any log is written."""
    proc = run_cli("mlperf_keras.train", f"--model={model}", f"--data_dir={prepared_coco}", f"--output_dir={tmp_path}",
                   "--max_epochs=1")
    assert proc.returncode == 2 and "needs --backbone_weights" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.log"))
    workload, manifest, config, _ = resolve_run(model, data_dir=prepared_coco, backbone_weights="none", dry_run=True)
    workload.check(config, manifest)
    assert workload.mllog_hparams(config)["backbone_weights"] == "none"
    workload, _, config, _ = resolve_run(model, dry_run=True)      # no data: nothing to refuse
    workload.check(config, None)


@pytest.mark.parametrize("model", MODELS)
def test_backbone_saved_from_one_model_starts_another_and_is_logged(model, prepared_coco, tmp_path):
    layers = importlib.import_module(f"mlperf_keras.layers.{model}")
    workload, _, config, _ = resolve_run(model, dry_run=True, hparams=SMALL[model], division="open")
    source = layers.backbone_variables(workload.build_model(config))
    path = tmp_path / "backbone.npz"
    written = backbone_weights.write_npz(str(path), {key: np.asarray(v) for key, v in source.items()})
    workload, manifest, config, _ = resolve_run(model, data_dir=prepared_coco, backbone_weights=str(path), dry_run=True,
                                                hparams=SMALL[model], seed=9, division="open")
    workload.check(config, manifest)
    target = layers.backbone_variables(workload.build_model(config))
    assert written == len(target) > 0
    for key, variable in target.items():
        np.testing.assert_array_equal(np.asarray(variable), np.asarray(source[key]))
    assert workload.mllog_hparams(config)["backbone_weights"] == (
        f"backbone.npz sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}")
