"""What --hparams may change in the closed division, per workload and ruleset, and the check that refuses the rest.

Source: the hyperparameter tables of mlcommons/training_policies training_rules.adoc at each round's commit
(RULES_COMMITS): v0.5 and v0.6 list, per model, the few "model-specific exceptions" beside one scheme for every model
trained with SGD (a linear warm-up may be added; the schedule may be stretched in time by t = 1 + k/10; the LR
scaled by an integer factor; the batch is free); v0.7 lists every tunable hyperparameter with its constraint. Every
round's "Data Representation" lets a sequence model choose the training length N it truncates or drops at
(max_length). Where mlperf-logging's checker rules for the round (training_0.6.0/<benchmark>.yaml,
training_0.7.0/closed_<benchmark>.yaml) check a value, the value the run would log is run through those rules
(compliance.closed_rules) instead of a copy of them here.

Readings of our own, where the rules leave room (each stated at its entry): the v0.6 rules at 28c67ac still carry
the v0.5 table and name no LARS, which the v0.6 checker (opt_name sgd or lars) and the v0.6 submissions used, so
ResNet's LARS rows there are the v0.7 table's, the first to define them; "scaled in time" stretches every boundary
by one factor. Besides the rules' entries, every workload may change
- the batch (--batch_size, and the hparam of its default): every round lets it be chosen, and each workload already
  scales its learning rate with it (and checks the scaled value where the rules constrain it);
- IMPLEMENTATION_KEYS: how the same computation runs (eval batch, mask-pasting processes, where NCF's negatives are
  drawn, padded eval shapes, which stock dropout generator, Mask R-CNN's static bound on objects, where ResNet's,
  SSD's and Mask R-CNN's JPEGs are decoded and resized (input_pipeline) and in how many processes ResNet's and SSD's
  batches are planned (input_workers) or planned and decoded (decode_workers), which reader reads the
  translation records), not what it computes;
- a count that follows from the prepared data, set to the data's own value (config.check_hparams refuses any other).
An override equal to the reference's value is not a change. Everything else is refused under --division=closed.

Nothing here imports TensorFlow or Keras.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

RULES_COMMITS = {"0.5": "6e021638e80a1a82d151d4f4bf703d6704643fd7",   # 2018-11-08, the v0.5 submission rules
                 "0.6": "28c67ac36cb4ffe43ba4c350e62bc0d6c58ed291",   # 2019-07-04
                 "0.7": "e382b31d9be0e2f463e19ca770e9ace28911106a"}   # 2020-06-26
CHECKER_RULESETS = {"0.6": "0.6.0", "0.7": "0.7.0"}                   # mlperf-logging has no v0.5 rules
BATCH_KEYS = ("batch_size", "batch_tokens")
# max_gt, max_vertices: Mask R-CNN's static bounds on objects per image and polygon vertices per object, which stop
# a run rather than dropping objects or vertices.
IMPLEMENTATION_KEYS = ("eval_batch_size", "paste_processes", "epoch_build", "eval_boundary_scale", "dropout_rng",
                       "max_gt", "max_vertices", "input_pipeline", "input_workers", "decode_workers",
                       "input_reader")


@dataclasses.dataclass(frozen=True)
class Tunable:
    rule: str                 # the hyperparameter as the rules name it
    constraint: str           # the rules' constraint, in their words
    allows: Callable[[Any, Mapping[str, Any], Any], bool] | None = None   # (value, hparams, config); None: any
    mllog_key: str | None = None   # the logged key whose checker CHECK also applies ({optimizer} filled in)


def _any_of(*values):
    return lambda v, hp, config: any(math.isclose(v, x, rel_tol=1e-9) for x in values)


def _integer_multiple(reference: float):
    """The SGD scheme's "scaled by a constant factor r, where r is an integer"."""
    def allows(v, hp, config):
        r = v / reference
        return r >= 1 - 1e-9 and math.isclose(r, round(r), rel_tol=0, abs_tol=1e-6)
    return allows


def _stretched(reference: tuple):
    """Boundaries b x (1 + k/10) for one integer k >= 0, rounded down (v0.5: "multiplying the input epoch by a
    constant factor t and rounding down, where t is constrained to be (1 + tk/10)"; v0.7 writes the same form for
    SSD's and Mask R-CNN's boundaries)."""
    def allows(v, hp, config):
        v = tuple(v)
        return len(v) == len(reference) and any(v == tuple(b * (10 + k) // 10 for b in reference)
                                                for k in range(0, 1000))
    return allows


def _non_negative(v, hp, config):
    return v is None or v >= 0


def _positive_integer(v, hp, config):
    return float(v).is_integer() and v >= 1


ARBITRARY = "arbitrary constant"
_SGD_WARMUP = Tunable("linear warm-up of wb batches (the SGD scheme)", "may be added: any length", _non_negative)

# ResNet: learning_rate is per 256 images for SGD (0: the reference's), the base LR itself for LARS (0: the table).
_RESNET_V05_LR = Tunable("base learning rate", "0.1 or 0.128 (per 256 images)",
                         lambda v, hp, c: v == 0 or _any_of(0.1, 0.128)(v, hp, c))
_RESNET_STEP_DECAY = Tunable("schedule scaled in time by t (the SGD scheme)", "t = 1 + k/10, k an integer",
                             _stretched((30, 60, 80, 90)))
_RESNET_CLASSES = Tunable("classes (FAQ / Appendix: Benchmark Specific Rules)", "1000 or 1001", _any_of(1000, 1001))
_LABEL_SMOOTHING = Tunable("label smoothing", "0 or 0.1", _any_of(0.0, 0.1))
_RESNET_V07 = {
    "optimizer": Tunable("opt_name", '"lars" or "sgd"', mllog_key="opt_name"),
    "learning_rate": Tunable("lars_opt_base_learning_rate / sgd_opt_base_learning_rate",
                             "LARS: arbitrary constant; SGD: 0.001 x k, k an integer",
                             mllog_key="{optimizer}_opt_base_learning_rate"),
    "warmup_epochs": Tunable("lars_opt_learning_rate_warmup_epochs / opt_learning_rate_warmup_epochs",
                             "LARS: arbitrary constant; SGD: integer >= 0",
                             lambda v, hp, c: v is None or (v >= 0 and (hp["optimizer"] == "lars"
                                                                        or float(v).is_integer()))),
    "momentum": Tunable("lars_opt_momentum / sgd_opt_momentum",
                        "LARS: 0.9 for batch < 32k, otherwise arbitrary constant; SGD: 0.9",
                        lambda v, hp, c: math.isclose(v, 0.9) or (hp["optimizer"] == "lars"
                                                                  and c.global_batch_size >= 32768)),
    "weight_decay": Tunable("lars_opt_weight_decay / sgd_opt_weight_decay", "0.0001 x 2^N, N an integer",
                            mllog_key="{optimizer}_opt_weight_decay"),
    "train_epochs": Tunable("lars_opt_learning_rate_decay_steps / sgd_opt_learning_rate_decay_steps",
                            "unconstrained (num_epochs in the reference)", lambda v, hp, c: v >= 1),
    "label_smoothing": _LABEL_SMOOTHING,
    "num_classes": _RESNET_CLASSES,
}
_RESNET_V06 = {  # the v0.5 table (SGD, step schedule) + the v0.6 checker's opt_name + the v0.7 table's LARS rows
    "optimizer": Tunable("opt_name (the v0.6 checker)", '"sgd" or "lars"', mllog_key="opt_name"),
    "lr_schedule": Tunable("the optimizer's schedule", "step with SGD (the v0.5 reference's), poly with LARS",
                           lambda v, hp, c: v == ("poly" if hp["optimizer"] == "lars" else "step")),
    "learning_rate": Tunable("base learning rate", "SGD: 0.1 or 0.128 (per 256 images); LARS: arbitrary constant",
                             lambda v, hp, c: hp["optimizer"] == "lars" or _RESNET_V05_LR.allows(v, hp, c)),
    "warmup_epochs": Tunable("warm-up", "SGD: may be added, any length; LARS: arbitrary constant", _non_negative),
    "decay_epochs": _RESNET_STEP_DECAY,
    "momentum": _RESNET_V07["momentum"],
    "weight_decay": Tunable("LARS weight decay", "LARS: 0.0001 x 2^N, N an integer; SGD: the reference's",
                            lambda v, hp, c: (math.isclose(v, 1e-4) if hp["optimizer"] == "sgd" else
                                              math.isclose(math.log2(v / 1e-4), round(math.log2(v / 1e-4)),
                                                           abs_tol=1e-9) if v > 0 else False)),
    "train_epochs": _RESNET_V07["train_epochs"],
    "label_smoothing": Tunable("label smoothing", "LARS: 0 or 0.1; SGD: the reference's 0",
                               lambda v, hp, c: _LABEL_SMOOTHING.allows(v, hp, c) and (hp["optimizer"] == "lars"
                                                                                       or v == 0)),
    "num_classes": _RESNET_CLASSES,
}
_RESNET_V05 = {"learning_rate": _RESNET_V05_LR, "warmup_epochs": _SGD_WARMUP, "decay_epochs": _RESNET_STEP_DECAY,
               "num_classes": _RESNET_CLASSES}

# SSD: learning_rate per 32 images (the v0.5 reference's 1e-3, the v0.6 one's 2.5e-3).
_SSD_WEIGHT_DECAY = Tunable("lr2 weight decay / opt_weight_decay", ARBITRARY, lambda v, hp, c: v >= 0,
                            mllog_key="opt_weight_decay")
_SSD_V06 = {
    "weight_decay": _SSD_WEIGHT_DECAY,
    "max_samples": Tunable("maximum number of samples attempted when generating a training patch",
                           "arbitrary integer >= 1", _positive_integer, mllog_key="max_samples"),
    "learning_rate": Tunable("learning rate scaled by r (the SGD scheme)", "r an integer",
                             _integer_multiple(2.5e-3), mllog_key="opt_base_learning_rate"),
    "warmup_epochs": Tunable(_SGD_WARMUP.rule, _SGD_WARMUP.constraint, _non_negative,
                             mllog_key="opt_learning_rate_warmup_steps"),
    "decay_iterations": Tunable("schedule scaled in time by t (the SGD scheme)", "t = 1 + k/10, k an integer",
                                _stretched((160_000, 200_000))),
}
_SSD_V05 = {**_SSD_V06, "learning_rate": Tunable("learning rate scaled by r (the SGD scheme)", "r an integer",
                                                 _integer_multiple(1e-3))}
_SSD_V07 = {
    "weight_decay": _SSD_WEIGHT_DECAY,
    "max_samples": Tunable("max_samples", "1 or 50", mllog_key="max_samples"),
    "learning_rate": Tunable("opt_base_learning_rate", "unconstrained", mllog_key="opt_base_learning_rate"),
    "warmup_epochs": Tunable("opt_learning_rate_warmup_steps", "integer >= 1",
                             mllog_key="opt_learning_rate_warmup_steps"),
    "warmup_factor": Tunable("opt_learning_rate_warmup_factor", "integer >= 0",
                             lambda v, hp, c: float(v).is_integer() and v >= 0,
                             mllog_key="opt_learning_rate_warmup_factor"),
    "decay_epochs": Tunable("opt_learning_rate_decay_boundary_epochs", "[40, 50] x (1 + k/10), k an integer",
                            _stretched((40, 50)), mllog_key="opt_learning_rate_decay_boundary_epochs"),
}

# Mask R-CNN: learning_rate per 16 images; the workload's check refuses a scaled LR the checker fails
# (compliance.closed_rules.refuse_failing_batch: opt_base_learning_rate 0.02 x K), so the entry adds nothing.
_MASKRCNN_LR = Tunable("opt_base_learning_rate (v0.5/v0.6: the SGD scheme's integer r)", "0.02 x K, K an integer "
                       "(checked by the workload against the checker)")
_MASKRCNN_DECAY = Tunable("opt_learning_rate_decay_steps", "(60000, 80000) x (1 + K/10) x 16 / global batch, "
                          "K an integer", _stretched((60_000, 80_000)), mllog_key="opt_learning_rate_decay_steps")
_MASKRCNN_V06 = {
    "proposals_per_image": Tunable("number of image candidates", "2000 or 1000 x batch size: 1000 per image, or "
                                   "2000 over a worker's batch",
                                   lambda v, hp, c: v == 1000 or v * c.per_worker_batch_size == 2000,
                                   mllog_key="num_image_candidates"),
    "learning_rate": _MASKRCNN_LR,
    "warmup_steps": Tunable(_SGD_WARMUP.rule, _SGD_WARMUP.constraint, _non_negative,
                            mllog_key="opt_learning_rate_warmup_steps"),
    "decay_steps": _MASKRCNN_DECAY,
}
_MASKRCNN_V07 = {
    "proposals_per_image": Tunable("num_image_candidates", "1000 or 1000 x batches per chip",
                                   mllog_key="num_image_candidates"),
    "learning_rate": _MASKRCNN_LR,
    "warmup_steps": Tunable("opt_learning_rate_warmup_steps", "unconstrained",
                            mllog_key="opt_learning_rate_warmup_steps"),
    "warmup_factor": Tunable("opt_learning_rate_warmup_factor", "unconstrained",
                             mllog_key="opt_learning_rate_warmup_factor"),
    "decay_steps": _MASKRCNN_DECAY,
}

_SEQUENCE_LENGTH = Tunable("max_sequence_length (Data Representation: a length N to truncate or drop at)",
                           "any N, training set only", lambda v, hp, c: v >= 2, mllog_key="max_sequence_length")
_GNMT = {
    "learning_rate": Tunable("learning rate / opt_base_learning_rate", ARBITRARY, mllog_key="opt_base_learning_rate"),
    "warmup_steps": Tunable("learning_rate_warmup_steps / opt_learning_rate_warmup_steps", "arbitrary constant",
                            lambda v, hp, c: v >= 0, mllog_key="opt_learning_rate_warmup_steps"),
    "remain_fraction": Tunable("decay_start / opt_learning_rate_remain_steps", ARBITRARY,
                               lambda v, hp, c: 0 <= v <= 1, mllog_key="opt_learning_rate_remain_steps"),
    # The reference derives remain steps and the decay interval from its iterations (--epochs).
    "schedule_epochs": Tunable("decay_interval / opt_learning_rate_decay_interval", ARBITRARY,
                               lambda v, hp, c: v >= 1, mllog_key="opt_learning_rate_decay_interval"),
    "max_length": _SEQUENCE_LENGTH,
}
_TRANSFORMER_V05 = {
    "learning_rate": Tunable("lr hyperparam to learning rate function", ARBITRARY, lambda v, hp, c: v > 0),
    "warmup_steps": Tunable("learning_rate_warmup_steps hyperparam to lr function", ARBITRARY,
                            lambda v, hp, c: v >= 1),
    "max_length": _SEQUENCE_LENGTH,
}
_TRANSFORMER_V06 = {**_TRANSFORMER_V05,   # the v0.6 checker accepts these betas (the rules' table names none)
                    "beta_1": Tunable("opt_adam_beta_1 (the v0.6 checker)", "0.86 or 0.9", mllog_key="opt_adam_beta_1"),
                    "beta_2": Tunable("opt_adam_beta_2 (the v0.6 checker)", "0.92, 0.98 or 0.997",
                                      mllog_key="opt_adam_beta_2")}
_TRANSFORMER_V07 = {
    "learning_rate": Tunable("opt_base_learning_rate", ARBITRARY, mllog_key="opt_base_learning_rate"),
    "warmup_steps": Tunable("opt_learning_rate_warmup_steps", ARBITRARY, mllog_key="opt_learning_rate_warmup_steps"),
    "beta_1": Tunable("opt_adam_beta_1", ARBITRARY, mllog_key="opt_adam_beta_1"),
    "beta_2": Tunable("opt_adam_beta_2", ARBITRARY, mllog_key="opt_adam_beta_2"),
    "max_length": _SEQUENCE_LENGTH,
}
_NCF = {"learning_rate": Tunable("lr", ARBITRARY, lambda v, hp, c: v > 0),
        "beta_1": Tunable("beta1", ARBITRARY, lambda v, hp, c: 0 <= v < 1),
        "beta_2": Tunable("beta2", ARBITRARY, lambda v, hp, c: 0 <= v < 1)}

TUNABLE: Mapping[str, Mapping[str, Mapping[str, Tunable]]] = {
    "resnet": {"0.5": _RESNET_V05, "0.6": _RESNET_V06, "0.7": _RESNET_V07},
    "ssd": {"0.5": _SSD_V05, "0.6": _SSD_V06, "0.7": _SSD_V07},
    "maskrcnn": {"0.5": _MASKRCNN_V06, "0.6": _MASKRCNN_V06, "0.7": _MASKRCNN_V07},
    "gnmt": {"0.5": _GNMT, "0.6": _GNMT, "0.7": _GNMT},
    "transformer": {"0.5": _TRANSFORMER_V05, "0.6": _TRANSFORMER_V06, "0.7": _TRANSFORMER_V07},
    "ncf": {"0.5": _NCF},
}


def tunable_keys(model: str, ruleset: str, hparams: Mapping[str, Any]) -> list[str]:
    """Every hparam key --hparams may change under --division=closed for this workload and ruleset."""
    table = TUNABLE[model].get(ruleset, {})
    return sorted(k for k in hparams if k in table or k in BATCH_KEYS or k in IMPLEMENTATION_KEYS)


def describe(model: str, ruleset: str, key: str) -> str:
    """How --dry_run marks a key: its rule and constraint, "batch", "implementation", or "" (fixed)."""
    entry = TUNABLE[model].get(ruleset, {}).get(key)
    if entry is not None:
        return f"tunable: {entry.constraint} ({entry.rule}; training_rules.adoc @{RULES_COMMITS[ruleset][:7]})"
    if key in BATCH_KEYS:
        return "tunable: the batch"
    if key in IMPLEMENTATION_KEYS:
        return "tunable: how the same computation runs"
    return ""


def closed_refusal(workload, config, overrides: Mapping[str, Any], manifest: dict | None) -> str | None:
    """Why config, with these --hparams items, is not a closed-division configuration (one line), or None."""
    model, ruleset, hp = config.model, config.ruleset, config.hparams
    table = TUNABLE[model].get(ruleset, {})
    reference = workload.reference_hparams(ruleset)
    from_data = workload.dataset_hparams(manifest) if manifest is not None else {}
    keys = ", ".join(tunable_keys(model, ruleset, hp))
    where = f"{model} under the v{ruleset} rules (mlcommons/training_policies training_rules.adoc @" \
            f"{RULES_COMMITS[ruleset][:7]})"
    for key, value in overrides.items():
        if key in BATCH_KEYS or key in IMPLEMENTATION_KEYS or value == reference.get(key):
            continue
        if key in from_data and value == from_data[key]:
            continue
        entry = table.get(key)
        if entry is None:
            return (f"--hparams {key}={value!r}: the closed division does not let {where} change {key}; tunable "
                    f"there: {keys} (and --batch_size); pass --division=open to run it")
        failed = entry.allows is not None and not entry.allows(value, hp, config)
        if not failed and entry.mllog_key and ruleset in CHECKER_RULESETS:
            failed = _checker_fails(workload, config, entry.mllog_key.format(optimizer=hp.get("optimizer")))
        if failed:
            return (f"--hparams {key}={value!r}: the closed division allows {entry.rule} of {where} only as "
                    f"{entry.constraint}; tunable there: {keys} (and --batch_size); pass --division=open to run it")
    return None


def _checker_fails(workload, config, key: str) -> bool:
    """Does the round's checker CHECK of key fail on the value this run would log?"""
    from mlperf_keras.compliance import closed_rules

    checker = CHECKER_RULESETS[config.ruleset]
    benchmark = workload.name
    if benchmark == "resnet" and checker == "0.7.0" and key != "opt_name":
        benchmark = f"resnet_{config.hparams['optimizer']}"   # closed_resnet.yaml enqueues closed_resnet_<opt>.yaml
    try:
        if not closed_rules.rule_text(benchmark, checker, key):
            return False
    except FileNotFoundError:
        return False
    logged = {"global_batch_size": config.global_batch_size, **workload.mllog_hparams(config)}
    if key not in logged:
        return False
    return closed_rules.fails(benchmark, checker, [(key, logged[key])], key)
