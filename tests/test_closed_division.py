"""The closed division's lock on --hparams (compliance/tunable.py) and submission_division as the log states it.

The expected constraints are the literals of mlcommons/training_policies training_rules.adoc:
- v0.5 at 6e021638e80a1a82d151d4f4bf703d6704643fd7 ("Hyperparameters and Optimizer": ResNet base learning rate "0.1
  or 0.128"; SSD "lr2 weight decay: Arbitrary constant", max samples "Arbitrary integer >= 1"; NCF "lr, beta1, beta2:
  Arbitrary constant"; GNMT learning rate, decay_start, decay_interval, learning_rate_warmup_steps; Transformer "lr
  hyperparam", "learning_rate_warmup_steps hyperparam"; the SGD scheme's t = 1 + tk/10), the FAQ's "1000 classes
  but the reference uses 1001 ... Both are allowed";
- v0.7 at e382b31d9be0e2f463e19ca770e9ace28911106a (the "Hyperparameters" table: ResNet label smoothing "0 or 0.1",
  lars_opt_weight_decay "(0.0001 * 2 ^ N)"; SSD max_samples "1 or 50", decay boundaries "[40, 50] * (1 + k/10)"; Mask
  R-CNN decay steps "(60000, 80000) * (1 + K / 10)", decay factor and image sizes "fixed to reference"; GNMT decay
  factor and decay steps "fixed to reference"; Transformer opt_adam_epsilon "fixed to reference").
"""
from __future__ import annotations

import pytest

from mlperf_keras import loop
from mlperf_keras.config import ConfigError
from tests.conftest import mllog_events, resolve_run, run_cli

# (model, ruleset, an override the rules do not let a closed submission make, one they do); the refused ones are
# issue 37's examples.
CASES = [
    ("resnet", "0.7", "image_size=128", "label_smoothing=0.0"),
    ("ssd", "0.5", "nms_iou=0.6", "weight_decay=0.0001"),
    ("maskrcnn", "0.7", "weight_decay=0.001", "warmup_steps=1000"),
    ("gnmt", "0.7", "beam_size=4", "warmup_steps=100"),
    ("transformer", "0.7", "label_smoothing=0.0", "warmup_steps=8000"),
    ("ncf", "0.5", "mf_dim=8", "learning_rate=0.001"),
]


def refusal(model, ruleset, hparams, division="closed"):
    """The ConfigError message of a dry-run resolve with these --hparams, or None when it resolves."""
    try:
        resolve_run(model, dry_run=True, ruleset=ruleset, hparams=hparams, division=division)
    except ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize("model,ruleset,refused,accepted", CASES, ids=[c[0] for c in CASES])
def test_closed_refuses_a_fixed_hparam_in_one_line_and_open_accepts_it(model, ruleset, refused, accepted):
    message = refusal(model, ruleset, refused)
    key = refused.split("=")[0]
    assert message is not None and "\n" not in message
    assert message.startswith(f"--hparams {key}="), message
    assert "tunable there: " in message and message.endswith("pass --division=open to run it"), message
    named = message.split("tunable there: ")[1].split(" (and --batch_size)")[0].split(", ")
    assert key not in named and accepted.split("=")[0] in named, named
    assert refusal(model, ruleset, refused, division="open") is None
    assert refusal(model, ruleset, accepted) is None


def test_a_non_tunable_override_exits_2_before_the_log_opens(tmp_path):
    """The real entry point: exit status 2, one line on stderr, no MLPerf log written."""
    runs = tmp_path / "runs"
    proc = run_cli("mlperf_keras.train", "--model=ncf", "--synthetic", f"--output_dir={runs}", "--seed=1",
                   "--hparams=mf_dim=8")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:") or "Traceback" in line]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert lines == [lines[0]] and lines[0].startswith("error: --hparams mf_dim=8: the closed division does not let "
                                                       "ncf under the v0.5 rules"), proc.stderr[-2000:]
    assert "beta_1, beta_2" in lines[0] and "--division=open" in lines[0]
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("model,ruleset,hparams,allowed", [
    # v0.5 ResNet: "base learning rate | 0.1 or 0.128"; classes: 1000 or 1001
    ("resnet", "0.5", "learning_rate=0.1", True), ("resnet", "0.5", "learning_rate=0.128", True),
    ("resnet", "0.5", "learning_rate=0.2", False), ("resnet", "0.5", "num_classes=1001", True),
    ("resnet", "0.5", "num_classes=1002", False), ("resnet", "0.5", "weight_decay=0.0002", False),
    # the SGD scheme: the schedule scaled in time by t = 1 + tk/10, rounded down (30, 60, 80, 90 x 1.1)
    ("resnet", "0.5", "decay_epochs=33-66-88-99", True), ("resnet", "0.5", "decay_epochs=33-60-80-90", False),
    # v0.7 ResNet: label smoothing "0 or 0.1"; weight decay 0.0001 x 2^N (closed_resnet_lars.yaml)
    ("resnet", "0.7", "label_smoothing=0.05", False), ("resnet", "0.7", "weight_decay=0.0004", True),
    ("resnet", "0.7", "weight_decay=0.00005", True), ("resnet", "0.7", "weight_decay=0.0003", False),
    ("resnet", "0.7", "optimizer=sgd,weight_decay=0.0001", True), ("resnet", "0.7", "optimizer=adam", False),
    # SSD v0.5: max samples "Arbitrary integer >= 1"; v0.7: "1 or 50", boundaries [40, 50] x (1 + k/10)
    ("ssd", "0.5", "max_samples=7", True), ("ssd", "0.7", "max_samples=50", True),
    ("ssd", "0.7", "max_samples=7", False), ("ssd", "0.7", "decay_epochs=44-55", True),
    ("ssd", "0.7", "decay_epochs=44-57", False), ("ssd", "0.7", "nms_iou=0.6", False),
    # Mask R-CNN v0.7: decay steps (60000, 80000) x (1 + K/10); decay factor, image sizes fixed
    ("maskrcnn", "0.7", "decay_steps=66000-88000", True), ("maskrcnn", "0.7", "decay_steps=66000-80000", False),
    ("maskrcnn", "0.7", "decay_factor=0.2", False), ("maskrcnn", "0.7", "min_size=640", False),
    ("maskrcnn", "0.7", "proposals_per_image=2000", True), ("maskrcnn", "0.7", "proposals_per_image=1500", False),
    # GNMT: decay factor and decay steps "fixed to reference"; max_sequence_length unconstrained
    ("gnmt", "0.7", "decay_factor=0.25", False), ("gnmt", "0.7", "decay_steps=3", False),
    ("gnmt", "0.7", "max_length=75", True), ("gnmt", "0.5", "learning_rate=0.002", True),
    # Transformer v0.7: epsilon fixed; betas arbitrary. v0.6 checker: beta_2 in [0.92, 0.98, 0.997]
    ("transformer", "0.7", "epsilon=1e-08", False), ("transformer", "0.7", "beta_2=0.98", True),
    ("transformer", "0.6", "beta_2=0.98", True), ("transformer", "0.6", "beta_2=0.99", False),
    ("transformer", "0.5", "beta_2=0.98", False),
    # NCF v0.5: lr, beta1, beta2 arbitrary; the model fixed
    ("ncf", "0.5", "beta_1=0.9,beta_2=0.999", True), ("ncf", "0.5", "mlp_layers=128-64", False),
])
def test_the_table_follows_the_rules_literals(model, ruleset, hparams, allowed):
    assert (refusal(model, ruleset, hparams) is None) == allowed, refusal(model, ruleset, hparams)


def test_dry_run_marks_the_tunable_hparams(capsys):
    """NCF v0.5: "lr | Arbitrary constant" is listed, the model's widths are not."""
    from mlperf_keras import train as train_cli

    workload, manifest, config, _ = resolve_run("ncf", dry_run=True)
    train_cli.dry_run(config, workload, manifest)
    out = capsys.readouterr().out
    assert "  learning_rate=0.0045  tunable: arbitrary constant (lr; training_rules.adoc @6e02163)\n" in out
    assert "  batch_size=1048576  tunable: the batch\n" in out
    assert "  mf_dim=" not in out and "  mlp_layers=" not in out


def test_a_short_run_logs_the_division_it_ran(prepared_ncf, tmp_path):
    """submission_division is what --division said: closed for tunable overrides only, open for a model the closed
    division refuses (mf_dim=8)."""
    logged = {}
    for division, hparams in (("closed", "batch_size=4096,learning_rate=0.003"),
                              ("open", "mf_dim=8,mlp_layers=32-32-16,batch_size=4096,learning_rate=0.003")):
        workload, manifest, config, dist = resolve_run("ncf", data_dir=prepared_ncf,
                                                       output_dir=str(tmp_path / division), max_epochs=1,
                                                       jit_compile=False, hparams=hparams, division=division)
        result = loop.run(config, workload, dist, manifest)
        (event,) = [e for e in mllog_events(result.log_path) if e["key"] == "submission_division"]
        logged[division] = event["value"]
    assert logged == {"closed": "closed", "open": "open"}


def test_a_closed_rule_check_leaves_the_checkers_queue_as_it_was():
    """closed_resnet.yaml's opt_name rule queues closed_resnet_<opt_name>.yaml in mlperf-logging's module-level queue,
    which only a whole-log check drains: left there, the next checker run in the process (the reporter, a test) read
    a rules file for another log (closed_resnet_adam.yaml, which does not exist, on a GNMT log)."""
    from mlperf_logging.compliance_checker import mlp_compliance

    from mlperf_keras.compliance import closed_rules

    before = list(mlp_compliance.enqueued_configs)
    assert not closed_rules.fails("resnet", "0.7.0", [("opt_name", "lars")], "opt_name")
    assert closed_rules.fails("resnet", "0.7.0", [("opt_name", "adam")], "opt_name")
    assert mlp_compliance.enqueued_configs == before


def test_input_workers_is_closed_and_must_be_a_count():
    """input_workers changes where batches are planned, not the batches: closed accepts it; a non-count is refused."""
    from mlperf_keras.inputs import jpeg_batches

    for model in ("resnet", "ssd"):
        assert refusal(model, "0.7", "input_workers=3") is None
    for count in (0, 3):
        jpeg_batches.check_input_workers(count)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="input_workers="):
            jpeg_batches.check_input_workers(bad)


def test_decode_workers_is_closed_and_needs_a_gpu_pipeline_on_jax():
    """decode_workers moves ResNet's and SSD's GPU decode into worker processes, the same batches: closed accepts
    it; a non-count, the TensorFlow backend and the host or tf.data pipelines are refused at start-up."""
    from mlperf_keras.inputs import jpeg_batches

    for model in ("resnet", "ssd"):
        assert refusal(model, "0.7", "decode_workers=2") is None
    for pipeline in ("auto", "gpu", "gpu_hardware"):
        jpeg_batches.check_decode_workers(2, pipeline, "jax")
    jpeg_batches.check_decode_workers(0, "tf.data", "tensorflow")
    with pytest.raises(ConfigError, match="decode_workers=-1"):
        jpeg_batches.check_decode_workers(-1, "auto", "jax")
    for pipeline, backend in (("auto", "tensorflow"), ("host", "jax"), ("tf.data", "jax")):
        with pytest.raises(ConfigError, match="needs the JAX backend and input_pipeline auto, gpu or gpu_hardware"):
            jpeg_batches.check_decode_workers(2, pipeline, backend)
