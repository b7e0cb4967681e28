"""Mask R-CNN: the workload's reference settings (schedule, optimizer groups, logged keys), the closed division's LR
rule, the dry run, a short CPU run on data_prep.coco output against the official 3.1.0 checker, a two-worker Horovod
run, the JAX-only synthetic benchmark and an overfitting run (--backbone_weights: tests/test_backbone_weights.py)."""
from __future__ import annotations

import bisect
import json
import shutil

import numpy as np
import pytest
import yaml
from mlperf_keras import loop
from mlperf_keras.config import ConfigError
from tests.conftest import (as_closed_division, checker_messages, mllog_events, not_converged_horovod_events,
                            prepare_coco_same_val, resolve_run, run_cli)

# A small model and image size for CPU runs (hparams of the workload; the demo's model, smaller images). The closed
# division refuses it (compliance/tunable.py): runs of it are open.
SMALL = ("block_sizes=1-1-1-1,width=8,fpn_channels=16,representation_size=64,mask_conv_layers=16-16,"
         "frozen_batch_norm=false,frozen_stages=0,pre_nms_train=32,pre_nms_test=32,roi_batch=16,max_gt=6,"
         "detections_per_image=10,min_size=64,max_size=96,shuffle_buffer=16")


@pytest.fixture(scope="module")
def prepared(prepared_coco):
    """The small COCO sample of tests/conftest.py (the --backbone_weights tests read it too)."""
    return prepared_coco


def resolve(**flags):
    return resolve_run("maskrcnn", **flags)


def reference_lr(base, iteration, milestones, warmup_iters=500, warmup_factor=1 / 3, gamma=0.1):
    """WarmupMultiStepLR.get_lr (solver/lr_scheduler.py, mlcommons/training 0badcd17) at last_epoch = iteration,
    linear warmup."""
    factor = 1.0
    if iteration < warmup_iters:
        alpha = iteration / warmup_iters
        factor = warmup_factor * (1 - alpha) + alpha
    return base * factor * gamma ** bisect.bisect_right(milestones, iteration)


# ---- settings ----

@pytest.mark.slow
def test_dry_run_prints_parameters_and_how_they_map():
    """Slow (about 45 s on 2 cores): the full-size model is built twice, for the count and for the mapping line."""
    proc = run_cli("mlperf_keras.train", "--model=maskrcnn", "--dry_run", "--seed=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "parameters: 44125173" in proc.stdout    # trainable (tests/test_maskrcnn_model.py derives it)
    assert "weights: 44400693 = 44347573 convolution/dense weights and biases" in proc.stdout
    assert "53120 frozen batch-norm affines" in proc.stdout
    assert "steps per epoch: 7330" in proc.stdout    # 117,266 // 16 + 1 (data/build.py, 0badcd17)
    assert "(800, 1344) landscape, (1344, 800) portrait" in proc.stdout


@pytest.mark.parametrize("batch", [16, 32, 8])
def test_schedule_is_the_references_warmup_multistep(batch):
    """The 0-based update u runs at the reference scheduler's last_epoch u + 1 (do_train steps it first)."""
    workload, _, config, _ = resolve(dry_run=True, batch_size=batch)
    optimizer = workload.build_optimizer(config, 100)
    schedule = optimizer.learning_rate if callable(optimizer.learning_rate) else optimizer._learning_rate
    milestones = [60_000 * 16 // batch, 80_000 * 16 // batch]
    base = 0.02 * batch / 16
    for u in (0, 1, 250, 498, 499, 500, milestones[0] - 2, milestones[0] - 1, milestones[1] - 1, milestones[1] + 5):
        assert float(schedule(u)) == pytest.approx(reference_lr(base, u + 1, milestones), rel=1e-5), u
    logged = workload.mllog_hparams(config)
    assert logged["opt_base_learning_rate"] == pytest.approx(base)
    assert logged["opt_learning_rate_decay_steps"] == milestones
    assert logged["opt_learning_rate_warmup_steps"] == 500
    assert logged["opt_learning_rate_warmup_factor"] == pytest.approx(1 / 3)
    assert logged["num_image_candidates"] == 1000
    assert (logged["min_image_size"], logged["max_image_size"]) == (800, 1333)


def test_optimizer_groups_are_torch_sgd_with_biases_at_2x_lr_and_no_decay():
    """torch.optim.SGD per group: v = m v + (g + wd w); w -= lr_group v, with the biases' lr doubled and wd 0."""
    import keras

    workload, _, config, _ = resolve(dry_run=True, batch_size=16)
    optimizer = workload.build_optimizer(config, 100)
    kernel = keras.Variable(np.ones((2, 2), np.float32), name="kernel")
    bias = keras.Variable(np.ones(2, np.float32), name="bias")
    optimizer.build([kernel, bias])
    g_k, g_b = np.full((2, 2), 0.5, np.float32), np.full(2, 0.25, np.float32)
    w_k, w_b, v_k, v_b = np.ones((2, 2)), np.ones(2), np.zeros((2, 2)), np.zeros(2)
    for u in range(3):
        lr = reference_lr(0.02, u + 1, [60_000, 80_000])
        optimizer.apply([g_k, g_b], [kernel, bias])
        v_k = 0.9 * v_k + (g_k + 1e-4 * w_k)
        v_b = 0.9 * v_b + g_b
        w_k, w_b = w_k - lr * v_k, w_b - 2 * lr * v_b
    np.testing.assert_allclose(np.asarray(kernel), w_k, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(bias), w_b, rtol=1e-5)


def test_logged_keys_cover_the_official_maskrcnn_rules():
    import os

    import mlperf_logging

    root = os.path.join(os.path.dirname(mlperf_logging.__file__), "compliance_checker", "training_3.1.0")
    with open(os.path.join(root, "closed_maskrcnn.yaml")) as f:
        rules = [entry["KEY"]["NAME"] for entry in yaml.safe_load(f) if "KEY" in entry]
    workload, _, config, _ = resolve(dry_run=True)
    logged = set(workload.mllog_hparams(config)) | {"global_batch_size", "eval_accuracy"}
    assert set(rules) <= logged, set(rules) - logged
    assert workload.mllog_accuracy({"bbox": 0.3, "segm": 0.2}, config) == {"BBOX": 0.3, "SEGM": 0.2}


@pytest.mark.parametrize("hparams,message", [("warmup_factor=0", "warmup_factor"),
                                             ("decay_steps=80000-60000", "decay_steps"),
                                             ("min_size=1400", "min_size")])
def test_bad_hyperparameters_are_refused(hparams, message):
    """The workload's own ranges (open: the closed division refuses these keys before the workload sees them)."""
    workload, manifest, config, _ = resolve(dry_run=True, hparams=hparams, division="open")
    with pytest.raises(ConfigError, match=message):
        workload.check(config, manifest)


@pytest.mark.parametrize("batch,ruleset,passing", [(6, "0.5", "4 or 8"), (24, "0.5", "16 or 32"), (12, "0.7", "16"),
                                                  (8, "0.7", "16")])
def test_closed_division_refuses_a_batch_whose_lr_fails_the_checker(batch, ruleset, passing):
    """The LR scales as 0.02 x batch / 16; the 3.1.0 checker (and 0.7.0's for --ruleset=0.7) accepts only multiples
    of 0.02, or at batches under 16 an LR that divides 0.02: 6 logs 0.0075 and 24 logs 0.03. The refusal quotes the
    rule from the checker's own file and names the nearest batches that pass; --division=open runs it."""
    workload, manifest, config, _ = resolve(dry_run=True, batch_size=batch, ruleset=ruleset)
    with pytest.raises(ConfigError) as refused:
        workload.check(config, manifest)
    message = str(refused.value)
    assert f"global batch {batch} would log opt_base_learning_rate {0.02 * batch / 16:g}" in message, message
    rule_file = "training_0.7.0" if batch == 8 else "training_3.1.0"
    assert f"mlperf_logging/compliance_checker/{rule_file}/closed_maskrcnn.yaml demands is_integer(" in message
    assert f"pass (--batch_size): {passing};" in message and "--division=open" in message, message
    workload, manifest, config, _ = resolve(dry_run=True, batch_size=batch, ruleset=ruleset, division="open")
    workload.check(config, manifest)


@pytest.mark.parametrize("batch,ruleset", [(16, "0.5"), (8, "0.5"), (2, "0.5"), (48, "0.5"), (16, "0.7"), (32, "0.7")])
def test_closed_division_accepts_a_batch_whose_lr_passes_the_checker(batch, ruleset):
    """The checker's own rule passes on the LR the run would log (0.02 x batch / 16), and check() lets it run."""
    from mlperf_keras.compliance import closed_rules

    workload, manifest, config, _ = resolve(dry_run=True, batch_size=batch, ruleset=ruleset)
    lr = 0.02 * batch / 16
    assert workload.mllog_hparams(config)["opt_base_learning_rate"] == pytest.approx(lr)
    for checker in closed_rules.judging_rulesets("maskrcnn", ruleset):
        lines = [("global_batch_size", batch), ("opt_base_learning_rate", lr)]
        assert not closed_rules.fails("maskrcnn", checker, lines, "opt_base_learning_rate"), (checker, lr)
    assert workload.check(config, manifest) is None


def test_iterations_per_evaluation_are_the_references():
    """tools/train_mlperf.py (mlcommons/training 0badcd17) evaluates when (iteration + 1) % iters_per_epoch == 0,
    iters_per_epoch = epoch_size // images_per_batch + 1 (data/build.py:176): 117,266 // 16 + 1 = 7,330 at batch 16
    (ceil(N / B) + 1 would be 7,331)."""
    for batch, want in ((16, 7_330), (32, 3_665), (8, 14_659), (64, 1_833)):
        workload, manifest, config, _ = resolve(dry_run=True, batch_size=batch)
        assert workload.steps_per_epoch(config, manifest) == want, batch


@pytest.mark.parametrize("batch,epochs", [(16, 12), (32, 12), (64, 12), (8, 12)])
def test_run_length_is_capped_at_the_references_max_iter(batch, epochs):
    """SOLVER.MAX_ITER: 90000 at IMS_PER_BATCH 16 (object_detection/pytorch/configs/e2e_mask_rcnn_R_50_FPN_1x.yaml,
    mlcommons/training 0badcd17), scaled by 16 / batch like the decay steps; the reference does not evaluate at
    MAX_ITER, so its last evaluation at batch 16 is the 12th, at iteration 12 x 7,330 = 87,960. The default
    --max_epochs is that count, and the closed division refuses one more."""
    import dataclasses

    max_iter = 90_000 * 16 // batch
    workload, manifest, config, _ = resolve(dry_run=True, batch_size=batch)
    per_epoch = 117_266 // batch + 1
    assert config.max_epochs == epochs == max_iter // per_epoch
    assert config.max_epochs * per_epoch <= max_iter < (config.max_epochs + 1) * per_epoch
    if batch == 16:
        assert config.max_epochs * per_epoch == 87_960
    workload.check(config, manifest)
    with pytest.raises(ConfigError, match=rf"--max_epochs={epochs + 1}: the reference stops at MAX_ITER {max_iter} "):
        workload.check(dataclasses.replace(config, max_epochs=epochs + 1), manifest)
    _, _, opened, _ = resolve(dry_run=True, batch_size=batch, division="open", max_epochs=epochs + 1)
    workload.check(opened, manifest)


# ---- the stop rule: box AND mask ----

def test_target_needs_box_and_mask_and_nan_never_reaches_it():
    """tools/train_mlperf.py (0badcd17): success when bbox_map >= min_bbox_map and segm_map >= min_segm_map; the
    v0.7 targets 0.377 and 0.339 (closed_maskrcnn.yaml)."""
    from mlperf_keras.config import quality_finite

    workload, _, config, _ = resolve(dry_run=True, ruleset="0.7")
    assert dict(config.quality_target) == {"bbox": 0.377, "segm": 0.339}
    reached = lambda bbox, segm: workload.target_reached({"bbox": bbox, "segm": segm}, config)  # noqa: E731
    assert reached(0.377, 0.339) and reached(0.40, 0.35)
    assert not reached(0.40, 0.338) and not reached(0.376, 0.35) and not reached(0.1, 0.1)
    nan = float("nan")
    assert not reached(nan, 0.35) and not reached(0.40, nan) and not reached(nan, nan)
    assert quality_finite({"bbox": 0.4, "segm": 0.35})
    for quality in ({"bbox": nan, "segm": 0.35}, {"bbox": 0.4, "segm": nan}, {"bbox": 0.4, "segm": float("inf")}):
        assert not quality_finite(quality), quality


class _CountingStep:
    """A train step that only counts its calls (the loop's cadence, without a model)."""

    def __init__(self):
        import keras

        self.calls = 0
        self.model = keras.Sequential()

    def __call__(self, x, y):
        self.calls += 1
        return 1.0

    def sync_to_model(self):
        pass

    def predict(self, inputs):
        raise AssertionError("the counting evaluator never predicts")


class _ScriptedEvaluator:
    def __init__(self, step, qualities):
        self.step, self.qualities, self.at, self.num_samples = step, list(qualities), [], 4

    def evaluate(self, predict):
        self.at.append(self.step.calls)
        return self.qualities.pop(0)


def _scripted_run(prepared, tmp_path, monkeypatch, qualities, batch, max_epochs):
    step = _CountingStep()
    workload, manifest, config, dist = resolve(data_dir=prepared, output_dir=str(tmp_path), ruleset="0.7",
                                               max_epochs=max_epochs, batch_size=batch, jit_compile=False,
                                               backbone_weights="none", division="open", hparams=SMALL)
    evaluator = _ScriptedEvaluator(step, qualities)
    monkeypatch.setattr(loop, "build", lambda *args: (step.model, step))
    monkeypatch.setattr(workload, "evaluator", lambda *args: evaluator)
    return loop.run(config, workload, dist, manifest), evaluator, manifest


def test_loop_evaluates_every_n_over_b_plus_one_iterations_and_stops_on_box_and_mask(prepared, tmp_path,
                                                                                     monkeypatch, capsys):
    """The real training data (7 annotated images) at batch 2: 7 // 2 + 1 = 4 iterations between evaluations (the
    old ceil(7 / 2) + 1 was 5); a box-only or mask-only pass goes on, both parts stop the run. The first step's
    compilation is announced and timed, once."""
    qualities = [{"bbox": 0.5, "segm": 0.1}, {"bbox": 0.1, "segm": 0.5}, {"bbox": 0.377, "segm": 0.339},
                 {"bbox": 0.9, "segm": 0.9}]
    result, evaluator, manifest = _scripted_run(prepared, tmp_path, monkeypatch, qualities, batch=2, max_epochs=4)
    assert manifest["counts"]["train_images_annotated"] == 7
    assert evaluator.at == [4, 8, 12]
    assert result.status == "success" and result.epochs == 3
    events = mllog_events(result.log_path)
    assert [e["value"] for e in events if e["key"] == "eval_accuracy"] == [
        {"BBOX": 0.5, "SEGM": 0.1}, {"BBOX": 0.1, "SEGM": 0.5}, {"BBOX": 0.377, "SEGM": 0.339}]
    assert [e for e in events if e["key"] == "run_stop"][0]["metadata"]["status"] == "success"
    out = capsys.readouterr().out
    assert out.count("compiling the train step") == 1 and out.count("train step compiled and run once in ") == 1
    assert out.index("compiling the train step") < out.index("train step compiled and run once in ")


@pytest.mark.parametrize("nan_part", ["bbox", "segm"])
def test_loop_aborts_on_a_nan_part_of_the_metric(prepared, tmp_path, monkeypatch, nan_part):
    quality = {"bbox": 0.9, "segm": 0.9, nan_part: float("nan")}
    result, evaluator, _ = _scripted_run(prepared, tmp_path, monkeypatch, [quality, quality], batch=2, max_epochs=2)
    assert result.status == "aborted" and result.epochs == 1 and "non-finite" in result.reason, result
    assert evaluator.at == [4]


def test_closed_refusal_names_a_batch_the_workers_can_split():
    """r740_v100_pcie's 2 images per GPU on 3 GPUs: 6. The nearest passing batches (4, 8) do not split over 3
    workers; the message adds the nearest that does."""
    import dataclasses

    workload, manifest, config, _ = resolve(dry_run=True, batch_size=6)
    with pytest.raises(ConfigError, match=r"4 or 8; on these 3 workers: 48 \(16 per worker\)"):
        workload.check(dataclasses.replace(config, num_workers=3), manifest)


# ---- runs ----

@pytest.mark.slow
def test_short_run_passes_every_checker_rule_but_the_target(prepared, tmp_path):
    """v0.7, 1 epoch of the small model on the generated sample (TensorFlow without XLA), evaluated with box and
    mask AP: the official 3.1.0 checker fails exactly one rule, the quality target. Slow: tracing the detector's
    train and predict steps takes about a minute on 2 cores."""
    workload, manifest, config, dist = resolve(data_dir=prepared, output_dir=str(tmp_path), ruleset="0.7",
                                               max_epochs=1, batch_size=2, jit_compile=False,
                                               backbone_weights="none", hparams=SMALL + ",proposals_per_image=1000",
                                               division="open")
    result = loop.run(config, workload, dist, manifest)
    assert result.status == "aborted" and result.epochs == 1
    assert 0 <= result.quality["bbox"] <= 1 and 0 <= result.quality["segm"] <= 1
    events = mllog_events(result.log_path)
    values = {e["key"]: e["value"] for e in events}
    assert values["train_samples"] == manifest["counts"]["train_images_annotated"]
    assert values["eval_samples"] == manifest["counts"]["val_images"]
    assert set(values["eval_accuracy"]) == {"BBOX", "SEGM"}
    valid, messages = checker_messages(as_closed_division(result.log_path, tmp_path), "3.1.0")
    assert not valid and len(messages) == 1, messages
    assert "eval_accuracy" in messages[0], messages


@pytest.fixture(scope="module")
def prepared_same_val(tmp_path_factory):
    """6 generated training images, and a val2017 that is the same images: the eval measures train-set AP."""
    return prepare_coco_same_val(tmp_path_factory.mktemp("maskrcnn_overfit"), num_train=6, shards=1, size=(128, 96),
                                 seed=12)


@pytest.mark.slow
def test_overfits_a_few_images(prepared_same_val, tmp_path):
    """Two steps per epoch (6 // 4 + 1) on the same 6 images (a model like the demo's, trained batch norms, the
    reference's LR per 16 images): box and mask AP on them rise clearly from the first evaluation to the best of the
    last ten. One step sees 4 images, so learning is slow and noisy: runs of this setup were at box/mask AP
    0.16/0.16 after 25 epochs (rising); at 4x the LR, 0.29/0.33 at best by epoch 29 (both at 3 steps per epoch,
    ceil(6 / 4) + 1: 60 epochs of 2 steps keep the 120 steps of those 40 epochs). Slow: about 6 minutes on 2
    shared cores."""
    workload, manifest, config, dist = resolve(
        data_dir=prepared_same_val, output_dir=str(tmp_path), ruleset="0.7", max_epochs=60, batch_size=4,
        jit_compile=False, backbone_weights="none",
        hparams=SMALL.replace("min_size=64,max_size=96", "min_size=96,max_size=128")
        + ",warmup_steps=10,decay_steps=400-480", division="open")
    result = loop.run(config, workload, dist, manifest)
    events = mllog_events(result.log_path)
    aps = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert len(aps) >= 10
    for part in ("BBOX", "SEGM"):
        first, best = aps[0][part], max(a[part] for a in aps[-10:])
        assert best > first + 0.15 and best > 0.2, (part, aps)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(shutil.which("horovodrun") is None, reason="Horovod not installed (bash scripts/install_horovod.sh)")
def test_two_horovod_workers_train_and_evaluate_every_image(prepared, tmp_path):
    """horovodrun -np 2 --model=maskrcnn (Gloo, TensorFlow without XLA) with the small model, 2 epochs of a few steps
    and an evaluation after each: one log (the chief's) with global values, box and mask AP logged once per
    evaluation. Each worker predicts its own val shard; the gathered ids must be every val image exactly once, or the
    evaluation raises (metrics.coco.score_gathered) and a worker's traceback shows. The last evaluation equals one
    process's evaluation of the final weights (final.npz) over the whole val set (after 4 steps both are 0 here, so
    this only catches a gathered value that is not the chief's metric). Slow: both workers trace the detector on 2
    shared cores, and the test process traces its predict step."""
    from mlperf_keras import checkpoints
    from tests.test_distributed import horovodrun

    out = tmp_path / "runs"
    proc = horovodrun("-m", "mlperf_keras.train", "--model=maskrcnn", f"--data_dir={prepared}", f"--output_dir={out}",
                      "--seed=4", "--max_epochs=2", "--batch_size=4", "--nojit_compile", "--backbone_weights=none",
                      f"--hparams={SMALL}", f"--checkpoint_dir={tmp_path / 'checkpoints'}", "--division=open")
    events = not_converged_horovod_events(proc, out)   # short of the target: exit 5, one aborted log
    values = {e["key"]: e["value"] for e in events}
    assert values["num_workers"] == 2 and values["global_batch_size"] == 4
    assert values["distribution"] == "horovod, 2 workers"
    assert values["eval_samples"] == 4 and values["train_samples"] == 7   # all val images; the annotated train ones
    accuracies = [e for e in events if e["key"] == "eval_accuracy"]
    assert [e["metadata"]["epoch_num"] for e in accuracies] == [0, 1], accuracies
    for accuracy in accuracies:
        assert set(accuracy["value"]) == {"BBOX", "SEGM"}
    workload, manifest, config, dist = resolve(data_dir=prepared, output_dir=str(tmp_path / "one"), seed=4,
                                               max_epochs=2, batch_size=4, jit_compile=False,
                                               backbone_weights="none", hparams=SMALL, division="open")
    _, step = loop.build(config, workload, dist, manifest)
    checkpoints.restore(str(tmp_path / "checkpoints" / checkpoints.FINAL_NAME), step.model, step.optimizer)
    step.reload_from_model()
    single = workload.evaluator(config, dist, manifest).evaluate(step.predict)
    assert accuracies[-1]["value"] == pytest.approx(workload.mllog_accuracy(single, config), abs=1e-6), single


@pytest.mark.slow
def test_maskrcnn_benchmark_runs_on_jax_without_tensorflow(tmp_path):
    """--synthetic Mask R-CNN (model, losses, optimizer, synthetic batch) on a JAX-only path: TensorFlow never
    imported. Slow: jax.jit of the detector on CPU."""
    from tests.conftest import run_on_jax_without_tensorflow

    pytest.importorskip("jax")
    _, check = run_on_jax_without_tensorflow(
        "benchmark", ["--model=maskrcnn", "--backend=jax", "--batch_size=1", "--steps=1", "--warmup_steps=1",
                      f"--hparams={SMALL}", f"--json_out={tmp_path / 'r.json'}"], tmp_path)
    assert check == {"exit": 0, "tensorflow_imported": False}
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["model"] == "maskrcnn" and result["unit"] == "images"
    assert result["bare_samples_per_s"] > 0
