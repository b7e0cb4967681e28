"""Flags -> one frozen RunConfig, and the ruleset tables (targets, eval cadence, epoch numbering).

Nothing here imports TensorFlow or Keras: the reporter and JAX-only benchmark machines use these tables too.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
from typing import Any, Mapping

RULESETS = ("0.5", "0.6", "0.7")
PRECISIONS = ("fp32", "fp16", "bf16")
MODEL_NAMES = ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "ncf")

# MLPerf quality targets per ruleset (the training rules of each round, mlcommons/training_policies). BLEU is kept as a score out of 100 here; the MLLOG value
# becomes a fraction from v0.7 on (see log_accuracy_value).
QUALITY_TARGETS: Mapping[str, Mapping[str, Any]] = types.MappingProxyType({
    "resnet": {"0.5": 0.749, "0.6": 0.759, "0.7": 0.759},
    "ssd": {"0.5": 0.212, "0.6": 0.23, "0.7": 0.23},
    # Several parts: every one must be reached (box AND mask mAP).
    "maskrcnn": {r: types.MappingProxyType({"bbox": 0.377, "segm": 0.339}) for r in ("0.5", "0.6", "0.7")},
    "gnmt": {"0.5": 21.8, "0.6": 24.0, "0.7": 24.0},
    "transformer": {"0.5": 25.0, "0.6": 25.0, "0.7": 25.0},
    "ncf": {"0.5": 0.635},
})

class ConfigError(ValueError):
    """A user-facing configuration problem; the entry points print it without a traceback."""


# python -m mlperf_keras.train's exit statuses (here, not in train.py, so the sweep can read them without defining
# train's flags): 0 the run reached its quality target (run_stop success); 2 it could not start (flags, hparams,
# data, output folder); 3 it ran and was aborted because the model diverged (non-finite loss or metric); 4 the MLPerf
# log could not be written (disk full); 5 it ran to --max_epochs without reaching the target (run_stop aborted: a
# complete log of a run that did not converge, which MLPerf counts as such; the chief's status, the other workers
# exit 0, so a launcher such as horovodrun reports its own non-zero status); 128 + N it was stopped by signal N
# (SIGTERM: 143; loop.RunStopped). Flag errors and --help: mlperf_keras/entry.py.
EXIT_BAD_START, EXIT_DIVERGED, EXIT_LOG_FAILED, EXIT_NOT_CONVERGED = 2, 3, 4, 5


def first_epoch_number(ruleset: str) -> int:
    """MLLOG epoch numbering: from 0 in v0.5/v0.6, from 1 from v0.7 on."""
    return 0 if ruleset in ("0.5", "0.6") else 1


def quality_target(model: str, ruleset: str):
    targets = QUALITY_TARGETS[model]
    if ruleset not in targets:
        raise ConfigError(f"--model={model} is not part of MLPerf ruleset {ruleset} "
                          f"(it exists in: {', '.join(sorted(targets))})")
    return targets[ruleset]


def counted(count: int, noun: str) -> str:
    """'1 worker', '2 workers', '1,000 shards': a count with its noun, plural by adding s."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_quality(value) -> str:
    """A metric or a multi-part metric (mapping of part -> value) for progress lines."""
    if isinstance(value, Mapping):
        return " ".join(f"{k} {format_quality(v)}" for k, v in value.items())
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def quality_reached(value, target) -> bool:
    """True when every part of the quality reaches its target; NaN never does (a diverged run is not a success)."""
    if isinstance(target, Mapping):
        if not isinstance(value, Mapping):
            raise TypeError(f"quality {value!r} has no parts {sorted(target)}")
        return all(quality_reached(value[k], t) for k, t in target.items())
    return value == value and value >= target  # NaN != NaN


def quality_finite(value) -> bool:
    """Every part of a quality (float or mapping part -> float) is a finite number: a NaN or infinite metric means
    the model diverged, and the run is aborted rather than evaluated further."""
    if isinstance(value, Mapping):
        return all(quality_finite(v) for v in value.values())
    return math.isfinite(value)


SEED_LIMIT = 2**31  # seeds are int32-sized: NumPy, TF and JAX generators all take [0, 2**31)


def check_run_flags(seed, max_epochs) -> None:
    """Flag ranges, checked before anything is read or logged. None means "the default"."""
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise ConfigError(f"--seed={seed}: a seed is an integer in [0, {SEED_LIMIT})")
    if max_epochs is not None and max_epochs < 1:
        raise ConfigError(f"--max_epochs={max_epochs}: at least 1 (leave it out for the workload's default)")


def check_hparams(hparams: Mapping[str, Any], from_data: Mapping[str, Any], own_checks=(),
                  defaults: Mapping[str, Any] | None = None) -> None:
    """Counts that come from the prepared data (users, items, classes, vocabulary...) cannot be overridden to other
    values (a smaller table trains on clamped lookups, a larger one samples ids that do not exist); learning rates
    are positive finite numbers; batch sizes are not negative. `own_checks`: counts the workload's check() compares
    itself because it allows more than one value (ResNet's num_classes: the classes, or one more for background).
    A learning rate of 0 passes where its default is 0: that workload reads 0 as "the reference's value for this
    batch" (ResNet's LARS table)."""
    for key, value in from_data.items():
        if key not in own_checks and hparams.get(key) != value:
            raise ConfigError(f"hyperparameter {key}={hparams.get(key)!r}: the prepared data has {key}={value!r}, "
                              f"and it cannot be overridden")
    for key, value in hparams.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        zero_means_reference = value == 0 and defaults is not None and defaults.get(key) == 0
        if "learning_rate" in key and not (math.isfinite(value) and value > 0) and not zero_means_reference:
            raise ConfigError(f"hyperparameter {key}={value!r}: a learning rate is a positive finite number")
        if key.endswith(("batch_size", "batch_tokens")) and value < 0:
            raise ConfigError(f"hyperparameter {key}={value!r}: cannot be negative")


def parse_hparams(text: str, defaults: Mapping[str, Any]) -> dict:
    """Parse 'key=value,key=value' against a workload's defaults: the defaults with the items replaced.

    Each value is converted to the type of its default (bool accepts true/false/1/0; a tuple default takes
    values separated by ':' or '-', e.g. mlp_layers=256-256-128-64). Unknown keys are an error listing the valid ones.
    """
    return {**defaults, **parse_hparam_overrides(text, defaults)}


def parse_hparam_overrides(text: str, defaults: Mapping[str, Any]) -> dict:
    """The items of 'key=value,key=value' alone (what the user changed), converted as parse_hparams does."""
    out = {}
    if not text:
        return out
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--hparams item {item!r} is not key=value")
        if key not in defaults:
            raise ConfigError(f"unknown hyperparameter {key!r}; valid keys: {', '.join(sorted(defaults))}")
        out[key] = _convert(key, raw.strip(), defaults[key])
    return out


def _convert(key: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() in ("true", "1", "yes"):
                return True
            if raw.lower() in ("false", "0", "no"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(float(raw)) if float(raw).is_integer() else int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, tuple):
            parts = raw.replace(":", "-").split("-")
            kind = type(default[0]) if default else int
            return tuple(kind(p) for p in parts if p)
        if default is None:
            return json.loads(raw) if raw[:1] in "[{0123456789-" else raw
        return type(default)(raw)
    except ValueError:
        raise ConfigError(f"hyperparameter {key}={raw!r}: expected a {type(default).__name__} like {default!r}") from None


@dataclasses.dataclass(frozen=True)
class SystemInfo:
    """What the run was measured on; logged for the reporter."""
    platform: str                   # submission_platform, e.g. r740_t4 (from the hardware preset)
    accelerator_model: str          # e.g. "NVIDIA T4", or "cpu"
    accelerators_per_worker: int    # 0 on CPU
    accelerator_memory_gb: float | None
    host_cpu: str
    host_memory_gb: float
    peak_tflops: float | None       # per accelerator at the run's precision, for "fraction of peak"
    host_processors: int | None = None   # sockets; the three counts are the whole host's (system.host_cpu_counts)
    host_cpu_cores: int | None = None    # physical cores
    host_vcpus: int | None = None        # hardware threads


@dataclasses.dataclass(frozen=True)
class RunConfig:
    model: str
    ruleset: str
    seed: int
    precision: str
    global_batch_size: int
    max_epochs: int
    hparams: Mapping[str, Any]
    quality_target: Any
    data_dir: str | None
    output_dir: str
    synthetic: bool
    demo: bool
    num_workers: int
    backend: str
    jit_compile: bool
    submission_org: str
    submission_division: str
    submission_status: str
    system: SystemInfo
    eval_offset: int = 0            # epochs to shift the eval cadence by (resnet allows 0-3)
    progress_seconds: float = 30.0  # in-epoch progress line interval
    backbone_weights: str | None = None  # an ImageNet-trained backbone to start from (ssd); "none": random weights
    checkpoint_dir: str | None = None   # model + optimizer state at epoch ends, and the final model (checkpoints.py)
    keep_checkpoints: int = 2           # epoch checkpoints kept in checkpoint_dir
    resume: bool = False                # continue from checkpoint_dir's latest checkpoint (never an MLPerf result)

    @property
    def per_worker_batch_size(self) -> int:
        return self.global_batch_size // self.num_workers

    @property
    def closed_division(self) -> bool:
        """Closed division (the default): the reference's graph, init, preprocessing, data order and stock random
        generators. Faster deviations are only allowed when this is False (--division=open)."""
        return self.submission_division == "closed"

    @property
    def logged_division(self) -> str:
        """submission_division as the log states it. A demo trains a reduced model (demo_hparams) on demo data, which
        no closed result may, so its log says open whatever --division chose (that still picks its code paths), and
        demo: true."""
        return "open" if self.demo else self.submission_division

    @property
    def first_epoch_num(self) -> int:
        return first_epoch_number(self.ruleset)

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["hparams"] = dict(self.hparams)
        if isinstance(self.quality_target, Mapping):
            data["quality_target"] = dict(self.quality_target)
        data["system"] = dataclasses.asdict(self.system)
        return json.dumps(data, indent=2, sort_keys=True, default=list)

    def __post_init__(self):
        # Freeze the hyperparameters too, so no component can change what the log says was run.
        object.__setattr__(self, "hparams", types.MappingProxyType(dict(self.hparams)))
        if self.global_batch_size % self.num_workers:
            raise ConfigError(f"global batch {self.global_batch_size} is not divisible by {self.num_workers} workers")
