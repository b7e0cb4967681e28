"""ResNet-50 v1.5: the model, the reference settings per ruleset, short CPU runs on data_prep output, the checker."""
from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
import yaml
from mlperf_logging.compliance_checker import mlp_compliance

from mlperf_keras import loop
from mlperf_keras.config import ConfigError
from mlperf_keras.inputs.manifest import read_manifest
from tests.conftest import (as_closed_division, assert_checker_fails_only_on_the_target, checker_messages,
                            mllog_events, prepare_imagenet, resolve_run, run_cli)

TINY = "image_size=32,eval_resize=36,width=8,block_sizes=1-1-1-1,shuffle_buffer=64"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare_imagenet(tmp_path_factory.mktemp("resnet_data"), train_shards=4, val_shards=2, num_classes=4,
                            train_per_class=12, val_images=10, seed=4)


# The official checker's training ruleset for these logs.
CHECKER_RULESET = "4.0.0"


def resolve(**flags):
    """resolve_run for ResNet; open division unless given, as the TINY model and the small data's counts are not
    the reference's (the closed division refuses them: compliance/tunable.py). No ResNet code depends on it."""
    return resolve_run("resnet", **{"division": "open", **flags})


def train(data_dir, output_dir, **flags):
    workload, manifest, config, dist = resolve(data_dir=data_dir, output_dir=str(output_dir), jit_compile=False,
                                               **flags)
    return config, loop.run(config, workload, dist, manifest)


def ruleset_keys(name):
    """The keys an official resnet rules file of CHECKER_RULESET demands."""
    path = os.path.join(os.path.dirname(mlp_compliance.__file__), f"training_{CHECKER_RULESET}", name)
    return {rule["KEY"]["NAME"] for rule in yaml.safe_load(open(path)) if "KEY" in rule}


# ---- the model ----

def test_dry_run_prints_the_reference_parameter_count():
    proc = run_cli("mlperf_keras.train", "--model=resnet", "--dry_run", "--ruleset=0.5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "parameters: 25557032" in proc.stdout
    assert "global batch: 256 images" in proc.stdout and "steps per epoch: 5005" in proc.stdout
    assert ("learning rate: sgd base 0.128 (0.128 per 256 images x 256 / 256), warmup 5 epochs (the reference's), "
            "step schedule to 1.28e-05") in proc.stdout, proc.stdout[-1500:]
    # ResNet's default round is 0.7 (the v0.5 step schedule fails the checker the reporter applies); its hparams'
    # learning_rate 0 / warmup_epochs null mean "the reference's": --dry_run says which values those are.
    proc = run_cli("mlperf_keras.train", "--model=resnet", "--dry_run")
    assert '"ruleset": "0.7"' in proc.stdout and '"optimizer": "lars"' in proc.stdout, proc.stdout[-1500:]
    proc = run_cli("mlperf_keras.train", "--model=resnet", "--dry_run", "--ruleset=0.7", "--batch_size=16384")
    assert ("learning rate: lars base 25 (the LARS reference's table at global batch 16384), warmup 5 epochs "
            "(the reference's), poly schedule to 0.0001") in proc.stdout, proc.stdout[-1500:]


@pytest.fixture(scope="module")
def resnet50():
    workload, _, config, _ = resolve(dry_run=True, hparams="num_classes=1001")
    return workload.build_model(config)


def test_resnet50_v1_5_structure(resnet50):
    count = sum(int(np.prod(w.shape)) for w in resnet50.trainable_weights)
    assert count == 25_557_032 + 2048 + 1  # the 1001-way head of the reference adds one class
    convs = [layer for layer in resnet50.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == 53 and not any(c.use_bias for c in convs)
    strides = {c.name: c.strides for c in convs}
    for stage in (2, 3, 4):  # v1.5: the stride sits on the 3x3 convolution of the first block
        assert strides[f"stage{stage}_block1_2_conv"] == (2, 2)
        assert strides[f"stage{stage}_block1_1_conv"] == (1, 1)
        assert strides[f"stage{stage}_block1_proj_conv"] == (2, 2)
    bns = [layer for layer in resnet50.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(bns) == 53 and {(b.momentum, b.epsilon) for b in bns} == {(0.9, 1e-5)}
    assert all(float(np.min(b.gamma.numpy())) == 1.0 for b in bns)  # the reference does not zero-init gammas
    assert resnet50.input.dtype == "uint8" and resnet50.output.shape == (None, 1001)


def test_zero_init_residual_and_tiny_config():
    workload, _, config, _ = resolve(dry_run=True, hparams=TINY + ",zero_init_residual=true,num_classes=10")
    model = workload.build_model(config)
    zeroed = {b.name for b in model.layers if isinstance(b, keras.layers.BatchNormalization)
              and not np.any(b.gamma.numpy())}
    assert zeroed == {f"stage{s}_block1_3_bn" for s in (1, 2, 3, 4)}
    assert model(np.zeros((2, 32, 32, 3), np.uint8)).shape == (2, 10)


@pytest.mark.parametrize("ruleset", ["0.5", "0.7"])
def test_weight_decay_applies_where_the_reference_applies_it(ruleset):
    """v0.5 SGD: L2 on everything but batch-norm gamma/beta (the dense bias too); LARS: kernels only."""
    workload, _, config, _ = resolve(dry_run=True, ruleset=ruleset, hparams=TINY)
    model = workload.build_model(config)
    optimizer = workload.build_optimizer(config, steps_per_epoch=10)
    optimizer.build(model.trainable_variables)
    bn = {id(w) for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)
          for w in layer.trainable_weights}
    flags = optimizer.decayed if ruleset == "0.5" else optimizer.adapted
    chosen = {v.path for v, f in zip(model.trainable_variables, flags) if f}
    if ruleset == "0.5":
        assert chosen == {v.path for v in model.trainable_variables if id(v) not in bn}
        assert "fc/bias" in chosen
    else:
        assert chosen == {v.path for v in model.trainable_variables if v.path.endswith("/kernel")}


@pytest.mark.parametrize("ruleset", ["0.5", "0.6"])
def test_classifier_initialisation_per_ruleset(ruleset):
    """v0.5: tf.layers.dense's default glorot-uniform kernel; from v0.6 (mlcommons/training 6cb3d426) N(0, 0.01).
    Bias zero in both."""
    workload, _, config, _ = resolve(dry_run=True, ruleset=ruleset, hparams=TINY + ",num_classes=1000")
    kernel = keras.ops.convert_to_numpy(workload.build_model(config).get_layer("fc").kernel)
    fan_in, fan_out = kernel.shape
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    if ruleset == "0.5":
        assert config.hparams["classifier_init"] == "glorot_uniform"
        assert 0.95 * limit < np.abs(kernel).max() <= limit * (1 + 1e-6)
        assert kernel.std() == pytest.approx(limit / np.sqrt(3), rel=0.05)
    else:
        assert config.hparams["classifier_init"] == "normal"
        assert kernel.std() == pytest.approx(0.01, rel=0.05) and kernel.std() < 0.5 * limit / np.sqrt(3)
    with pytest.raises(ConfigError, match="classifier_init='he'"):
        _, _, bad, _ = resolve(dry_run=True, ruleset=ruleset, hparams=TINY + ",classifier_init=he")
        workload.build_model(bad)


@pytest.mark.parametrize("batch, lr, warmup", [(1024, 10.0, 5.0), (16384, 25.0, 5.0), (32768, 31.2, 25.0),
                                               (65536, 31.2, 25.0)])
def test_lars_base_lr_and_warmup_follow_the_reference_table(batch, lr, warmup):
    workload, _, config, _ = resolve(dry_run=True, ruleset="0.7", batch_size=batch)
    spe = workload.steps_per_epoch(config, None)
    keys = workload.mllog_hparams(config)
    assert keys["lars_opt_base_learning_rate"] == lr and keys["lars_opt_learning_rate_warmup_epochs"] == warmup
    assert keys["lars_opt_learning_rate_decay_steps"] == int(41 * spe) - int(warmup * spe) + 1
    s = workload._schedule(config, spe)          # the same numbers build the optimizer's schedule
    assert s["warmup_steps"] == int(warmup * spe) and s["initial"] == lr
    _, _, given, _ = resolve(dry_run=True, ruleset="0.7", batch_size=batch, hparams="warmup_epochs=2")
    assert workload.mllog_hparams(given)["lars_opt_learning_rate_warmup_epochs"] == 2.0
    _, _, sgd, _ = resolve(dry_run=True, ruleset="0.5", batch_size=batch)
    assert workload.mllog_hparams(sgd)["opt_learning_rate_warmup_epochs"] == 5.0


def test_max_epochs_end_with_the_polynomial_schedule():
    workload, _, lars, _ = resolve(dry_run=True, ruleset="0.7")
    assert lars.max_epochs == 41
    workload.check(lars, None)
    _, _, longer, _ = resolve(dry_run=True, ruleset="0.7", hparams="train_epochs=44")
    assert longer.max_epochs == 44
    _, _, v05, _ = resolve(dry_run=True, ruleset="0.5")
    assert v05.max_epochs == 90
    _, _, past, _ = resolve(dry_run=True, ruleset="0.7", max_epochs=50)
    with pytest.raises(ConfigError, match="--max_epochs=50 runs past the polynomial schedule's train_epochs=41"):
        workload.check(past, None)


def test_loss_is_cross_entropy_with_label_smoothing():
    workload, _, config, _ = resolve(dry_run=True, ruleset="0.7", hparams=TINY)
    workload.build_model(config)  # takes label_smoothing 0.1 from the v0.7 hparams
    logits = np.random.default_rng(0).normal(size=(5, 1000)).astype(np.float32)
    labels = np.array([0, 3, 999, 7, 3], np.int32)
    expected = keras.losses.categorical_crossentropy(keras.ops.one_hot(labels, 1000), logits, from_logits=True,
                                                     label_smoothing=0.1)
    assert float(workload.loss(labels, logits)) == pytest.approx(float(np.mean(expected)), rel=1e-5)


# ---- reference settings, cadence, logged keys ----

@pytest.mark.parametrize("offset, evals", [(0, [3, 7, 9]), (1, [0, 4, 8, 9]), (3, [2, 6, 9])])
def test_eval_every_four_epochs_with_offset(offset, evals):
    workload, _, config, _ = resolve(dry_run=True, ruleset="0.5", eval_offset=offset, max_epochs=10)
    assert loop._eval_epochs(workload, config) == evals  # 0-based; the last epoch is always evaluated
    with pytest.raises(ConfigError, match="--eval_offset=4: must be 0..3"):
        _, _, bad, _ = resolve(dry_run=True, ruleset="0.5", eval_offset=4)
        workload.build_model(bad)


def test_logged_keys_cover_the_official_resnet_rules():
    lars_required = ruleset_keys("closed_resnet_lars.yaml")
    sgd_required = ruleset_keys("closed_resnet_sgd.yaml")
    workload, _, lars, _ = resolve(dry_run=True, ruleset="0.7", batch_size=1024)
    keys = workload.mllog_hparams(lars)
    assert lars_required <= set(keys) and keys["opt_name"] == "lars"
    assert keys["lars_opt_base_learning_rate"] == 10.0 and keys["lars_epsilon"] == 0.0
    assert keys["lars_opt_learning_rate_decay_steps"] == 41 * 1252 - 5 * 1252 + 1  # ceil(1281167/1024) = 1252
    workload, _, poly, _ = resolve(dry_run=True, ruleset="0.7", batch_size=1024,
                                   hparams="optimizer=sgd,lr_schedule=poly,weight_decay=1e-4")
    keys = workload.mllog_hparams(poly)
    assert sgd_required <= set(keys) and keys["sgd_opt_base_learning_rate"] == pytest.approx(0.512)
    workload, _, v05, _ = resolve(dry_run=True, ruleset="0.5")
    keys = workload.mllog_hparams(v05)
    assert keys["opt_name"] == "sgd" and keys["sgd_opt_base_learning_rate"] == pytest.approx(0.128)
    assert keys["opt_learning_rate_decay_boundary_epochs"] == [30, 60, 80, 90] and keys["model_bn_span"] == 256
    # The v0.5 step schedule has no polynomial decay: the 4.0.0 rules' poly keys are exactly what it lacks.
    assert sgd_required - set(keys) == {"sgd_opt_learning_rate_decay_poly_power", "sgd_opt_learning_rate_decay_steps"}


def test_top1_counts_every_validation_image(prepared):
    from mlperf_keras.inputs.image import CLASSIFICATION_FEATURES
    from mlperf_keras.inputs import records

    workload, manifest, config, dist = resolve(data_dir=prepared, hparams=TINY)
    evaluator = workload.evaluator(config, dist, manifest)
    paths = records.worker_files(prepared, manifest, "validation", 0, 1)
    labels = [int(records.parse(r, CLASSIFICATION_FEATURES)["image/class/label"])
              for r in records.record_dataset(paths)]
    for k in range(4):  # a predictor that always says class k scores the share of class k exactly
        constant = np.eye(4, dtype=np.float32)[k]
        top1 = evaluator.evaluate(lambda images: np.tile(constant, (len(images), 1)))
        assert top1 == labels.count(k) / 10


# ---- short runs on prepared data ----

def test_short_lars_run_passes_every_checker_rule_but_the_target(prepared, tmp_path):
    """v0.7 LARS, 2 epochs on 48 images: the official 4.0.0 checker must fail exactly one rule, the quality
    target (top-1 0.759), which a 2-epoch run on tiny generated data cannot reach; every other rule passes."""
    config, result = train(prepared, tmp_path, ruleset="0.7", max_epochs=2, eval_offset=1, batch_size=8,
                           hparams=TINY)
    assert result.status == "aborted" and result.epochs == 2 and 0 <= result.quality <= 1
    events = mllog_events(result.log_path)
    values = {e["key"]: e["value"] for e in events}
    assert values["opt_name"] == "lars" and values["train_samples"] == 48 and values["eval_samples"] == 10
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [1, 2]
    losses = [e["value"]["loss"] for e in events if e["key"] == "tracked_stats"]
    assert len(losses) == 2 and all(np.isfinite(losses))
    # Top-1 is logged as the fraction of the 10 validation images that are right, the evaluator's own value.
    logged = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert logged[-1] == result.quality and all(round(10 * v, 9) in range(11) for v in logged), logged
    # The reporter on this real log (its closed copy: the small model ran open, and the open rules do not check the
    # target): one record, not converged, its curve the logged values, the checker's verdict.
    from mlperf_keras.reporting.build import build_report

    closed_copy = tmp_path / "closed_copy"
    closed_copy.mkdir()
    closed_log = as_closed_division(result.log_path, closed_copy)
    report = build_report([str(closed_copy)], str(tmp_path / "report"), draw_charts=False)
    (record,) = report.records
    assert (record.benchmark, record.ruleset, record.seed, record.converged) == ("resnet", "0.7", 3, False)
    assert [value for _, value in record.quality_curve] == logged
    assert (record.compliance.status, record.compliance.ruleset) == ("fail", CHECKER_RULESET)
    assert record.compliance.detail == "Failed checks for eval_accuracy : v['value'] >= 0.7590 and v['value'] < 1.0"
    assert_checker_fails_only_on_the_target(
        closed_log, CHECKER_RULESET, "Failed checks for eval_accuracy : v['value'] >= 0.7590 and v['value'] < 1.0",
        logged[-1], 0.76, tmp_path)


def test_short_v05_sgd_run_with_fp16_loss_scaling(prepared, tmp_path):
    """v0.5 SGD + step schedule under mixed fp16 (LossScaleOptimizer). The 4.0.0 rules only know SGD with
    polynomial decay, so besides the target exactly the polynomial-decay rules fail for this (v0.5) schedule."""
    config, result = train(prepared, tmp_path, ruleset="0.5", max_epochs=1, batch_size=8, precision="fp16",
                           hparams=TINY)
    assert config.hparams["optimizer"] == "sgd" and result.epochs == 1
    events = mllog_events(result.log_path)
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [0]
    assert np.isfinite(next(e["value"]["loss"] for e in events if e["key"] == "tracked_stats"))
    valid, messages = checker_messages(as_closed_division(result.log_path, tmp_path), CHECKER_RULESET)
    text = " ".join(messages)
    assert not valid and len(messages) == 4, messages
    assert "Failed checks for eval_accuracy : v['value'] >= 0.7590 and v['value'] < 1.0" in messages, messages
    for expected in ("sgd_opt_end_learning_rate", "sgd_opt_learning_rate_decay_poly_power",
                     "sgd_opt_learning_rate_decay_steps"):
        assert expected in text, (expected, messages)


def test_labels_must_fit_the_head(prepared):
    workload, manifest, config, dist = resolve(data_dir=prepared, hparams=TINY + ",num_classes=7")
    with pytest.raises(ConfigError, match="num_classes=7: the prepared data has 4 classes"):
        workload.train_data(config, dist, manifest)
    workload, manifest, config, dist = resolve(data_dir=prepared, hparams=TINY + ",num_classes=5")
    assert workload.train_data(config, dist, manifest).label_offset == 1  # background class 0, as the reference


@pytest.mark.slow
def test_resnet_trains_on_jax_without_tensorflow(tmp_path):
    """keras.layers/keras.ops only: the same model, LARS and loss run on the JAX backend (bf16, synthetic data)."""
    from tests.conftest import run_on_jax_without_tensorflow

    pytest.importorskip("jax")
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--model=resnet", "--backend=jax", "--synthetic", f"--output_dir={tmp_path}", "--seed=2",
                  "--ruleset=0.7", "--max_epochs=1", "--batch_size=8", "--precision=bf16",
                  "--hparams=image_size=32,eval_resize=36,width=8,block_sizes=1-1-1-1,train_images=32,val_images=12",
                  "--division=open"],
        tmp_path)
    summary = json.loads(lines[-1])
    assert check == {"exit": 5, "tensorflow_imported": False}   # synthetic data never reaches the target
    events = mllog_events(summary["log"])
    values = {e["key"]: e["value"] for e in events}
    assert values["keras_backend"] == "jax" and values["precision"] == "bf16" and values["opt_name"] == "lars"
    assert np.isfinite(next(e["value"]["loss"] for e in events if e["key"] == "tracked_stats"))


@pytest.mark.slow
def test_demo_learns_the_generated_classes(tmp_path):
    """The built-in demo (10 generated classes in the official layout, a tiny ResNet): reaches its top-1 target."""
    proc = run_cli("mlperf_keras.train", "--model=resnet", f"--cache_dir={tmp_path / 'cache'}",
                   f"--output_dir={tmp_path / 'runs'}", "--seed=1", "--max_epochs=12", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "success", proc.stdout[-3000:]
    assert read_manifest(str(tmp_path / "cache" / "resnet" / "prepared"), "resnet")["counts"]["num_classes"] == 10
    # The default (v0.7) demo log passes the checker the reporter applies (4.0.0), at most but MLPerf's target
    # (the demo stops at its own; the v0.5 step schedule failed three SGD rules there).
    from mlperf_keras.reporting.compliance import check_log

    verdict = check_log(summary["log"], "resnet")
    assert verdict.ruleset == "4.0.0", verdict
    assert verdict.status == "pass" or (
        verdict.detail == "Failed checks for eval_accuracy : v['value'] >= 0.7590 and v['value'] < 1.0"), verdict
