"""Writes synthetic MLLOG files: for the reporter's tests and for showing what a report looks like.

Nothing here is a measurement. Two styles:
- "mlperf_keras": what this package's training loop logs (the log contract: extra keys such as
  accelerator_model, tracked_stats throughput after each epoch).
- "foreign": what another producer's mllog-based code logs (standard keys only, block_start/stop,
  no throughput, optionally no seed), to exercise the fall-backs.
Logs are written with mlperf_logging.mllog.MLLogger, never hand-formatted.
"""

import dataclasses
import itertools
import logging
import os
import time
from typing import Optional

from mlperf_logging.mllog.mllog import MLLogger

# Hyperparameter keys that make a log pass the official checker's closed-division rules for the
# benchmark at rules.CHECKER_RULESET (resnet 4.0.0 with LARS, ssd 1.0.0, maskrcnn 3.1.0, gnmt and
# transformer 0.7.0) and, for ncf, the project's rules (mlperf_keras/compliance/ncf.yaml). Values follow the reference/RCP settings where the checker pins them.
COMPLIANT_HYPERPARAMETERS = {
    "resnet": {"opt_name": "lars", "lars_opt_base_learning_rate": 10.5, "lars_opt_end_learning_rate": 0.0001,
               "lars_opt_learning_rate_decay_poly_power": 2, "lars_opt_learning_rate_decay_steps": 14523,
               "lars_epsilon": 0.0, "lars_opt_learning_rate_warmup_epochs": 2, "lars_opt_momentum": 0.9,
               "lars_opt_weight_decay": 0.00005, "model_bn_span": 204},
    "ssd": {"model_bn_span": 32, "opt_learning_rate_warmup_factor": 0, "opt_learning_rate_warmup_steps": 200,
            "opt_weight_decay": 0.0005, "opt_base_learning_rate": 0.0025, "max_samples": 1,
            "opt_learning_rate_decay_boundary_epochs": [40, 50]},
    "maskrcnn": {"opt_base_learning_rate": 0.02, "opt_learning_rate_warmup_steps": 500,
                 "opt_learning_rate_warmup_factor": 0.333, "num_image_candidates": 2000,
                 "opt_learning_rate_decay_factor": 0.1, "opt_learning_rate_decay_steps": [60000, 80000],
                 "min_image_size": 800, "max_image_size": 1333},
    "gnmt": {"opt_base_learning_rate": 0.002, "opt_learning_rate_alt_decay_func": "True",
             "opt_learning_rate_decay_factor": 0.5, "opt_learning_rate_decay_interval": 809,
             "opt_learning_rate_decay_steps": 4, "opt_learning_rate_remain_steps": 6453,
             "opt_learning_rate_alt_warmup_func": "True", "opt_learning_rate_warmup_steps": 200},
    "transformer": {"opt_name": "adam", "opt_base_learning_rate": 2.0, "opt_learning_rate_warmup_steps": 1000,
                    "opt_adam_beta_1": 0.9, "opt_adam_beta_2": 0.997, "opt_adam_epsilon": 1e-09},
    "ncf": {"opt_name": "adam", "opt_base_learning_rate": 0.0045, "opt_adam_beta_1": 0.25,
            "opt_adam_beta_2": 0.5, "opt_adam_epsilon": 1e-8, "input_hp_num_neg": 4, "eval_hp_num_neg": 999,
            "preproc_hp_sample_eval_replacement": True},
}
# MLPerf v0.7 quality targets (BLEU as a fraction) and an eval value just above them.
_TARGETS = {"resnet": 0.759, "ssd": 0.23, "maskrcnn": {"BBOX": 0.377, "SEGM": 0.339},
            "gnmt": 0.24, "transformer": 0.25, "ncf": 0.635}
_TRAIN_SAMPLES = {"resnet": 1281167, "ssd": 117266, "maskrcnn": 117266, "gnmt": 3498161,
                  "transformer": 4590101, "ncf": 19861770}
_EVAL_SAMPLES = {"resnet": 50000, "ssd": 5000, "maskrcnn": 5000, "gnmt": 3003, "transformer": 3003,
                 "ncf": 138493}
_SEQUENCE_BENCHMARKS = ("gnmt", "transformer")


@dataclasses.dataclass
class ExampleRun:
    """One synthetic run. Times are in seconds from `start_s` (a Unix time)."""
    benchmark: str = "ncf"
    seed: Optional[int] = 1
    platform: str = "r740_t4"
    accelerator_model: str = "NVIDIA T4"
    accelerator_count: int = 1
    accelerator_memory_gb: Optional[float] = 15.0
    num_workers: int = 1
    ruleset: str = "0.7"
    org: str = "mlperf_keras"
    division: str = "closed"
    submission_status: str = "onprem"
    global_batch_size: int = 1024
    epochs: int = 3                      # epochs until the target is reached (or until aborted)
    epoch_seconds: float = 60.0
    eval_seconds: float = 5.0
    init_seconds: float = 10.0
    throughput: Optional[float] = None   # samples/s; default: train_samples / epoch_seconds
    status: str = "success"
    quality_target: Optional[float] = None  # default: the v0.7 MLPerf target
    start_s: float = 1_700_000_000.0
    style: str = "mlperf_keras"          # or "foreign"
    include_run_stop: bool = True
    hyperparameters: Optional[dict] = None  # default: COMPLIANT_HYPERPARAMETERS[benchmark]


def write_log(path, run):
    """Write one run's MLLOG file; returns the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    logger = logging.getLogger(f"mlperf_keras.example_logs.{id(run)}.{path}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="w")
    logger.addHandler(handler)
    try:
        _log_events(MLLogger(logger=logger), run)
    finally:
        handler.close()
        logger.removeHandler(handler)
    return path


def _log_events(mllogger, run):
    clock = itertools.count()
    now_ms = lambda seconds: int(run.start_s * 1000 + seconds * 1000) + next(clock)  # strictly increasing
    foreign = run.style == "foreign"
    zero_based = run.ruleset in ("0.5", "0.6")
    target = run.quality_target if run.quality_target is not None else _TARGETS[run.benchmark]
    samples = _TRAIN_SAMPLES[run.benchmark]
    t = 0.0

    def event(key, value=None, metadata=None):
        mllogger.event(key=key, value=value, metadata=metadata, time_ms=now_ms(t))

    event("cache_clear", True)
    mllogger.start(key="init_start", time_ms=now_ms(t))
    for key, value in (("submission_org", run.org), ("submission_platform", run.platform),
                       ("submission_division", run.division), ("submission_status", run.submission_status),
                       ("submission_benchmark", run.benchmark)):
        event(key, value)
    if not foreign:
        for key, value in (("accelerator_model", run.accelerator_model),
                           ("accelerator_count", run.accelerator_count),
                           ("accelerator_memory_gb", run.accelerator_memory_gb),
                           ("num_workers", run.num_workers), ("host_cpu", "Intel Xeon Gold 6148"),
                           ("host_memory_gb", 376.0), ("framework", "keras 3.15.1, tensorflow 2.21.0"),
                           ("keras_backend", "tensorflow"), ("ruleset", run.ruleset),
                           ("quality_target", target)):
            event(key, value)
    event("global_batch_size", run.global_batch_size)
    event("train_samples", samples)
    event("eval_samples", _EVAL_SAMPLES[run.benchmark])
    event("gradient_accumulation_steps", 1)
    if run.seed is not None:
        event("seed", run.seed)
    hyperparameters = COMPLIANT_HYPERPARAMETERS[run.benchmark] if run.hyperparameters is None else run.hyperparameters
    for key, value in hyperparameters.items():
        event(key, value)
    if run.benchmark in _SEQUENCE_BENCHMARKS:
        event("max_sequence_length", 75, {"method": "discard"})
    t += run.init_seconds
    mllogger.end(key="init_stop", time_ms=now_ms(t))
    mllogger.start(key="run_start", time_ms=now_ms(t))

    throughput = run.throughput or samples / run.epoch_seconds
    for index in range(run.epochs):
        number = index if zero_based else index + 1
        if foreign:
            mllogger.start(key="block_start", metadata={"first_epoch_num": number, "epoch_count": 1}, time_ms=now_ms(t))
        else:
            mllogger.start(key="epoch_start", metadata={"epoch_num": number}, time_ms=now_ms(t))
        t += run.epoch_seconds
        if not foreign:
            mllogger.end(key="epoch_stop", metadata={"epoch_num": number}, time_ms=now_ms(t))
            event("tracked_stats", {"throughput": throughput}, {"epoch_num": number})
        mllogger.start(key="eval_start", metadata={"epoch_num": number}, time_ms=now_ms(t))
        t += run.eval_seconds
        last = index == run.epochs - 1
        reached = last and run.status == "success"
        event("eval_accuracy", _quality(target, (index + 1) / run.epochs, reached), {"epoch_num": number})
        mllogger.end(key="eval_stop", metadata={"epoch_num": number}, time_ms=now_ms(t))
        if foreign:
            mllogger.end(key="block_stop", metadata={"first_epoch_num": number, "epoch_count": 1}, time_ms=now_ms(t))
    if run.include_run_stop:
        mllogger.end(key="run_stop", metadata={"status": run.status}, time_ms=now_ms(t))


def _quality(target, progress, reached):
    """A rising quality curve that crosses the target only when `reached`."""
    def one(goal):
        return round(goal * 1.004, 6) if reached else round(goal * (0.55 + 0.44 * progress), 6)
    if isinstance(target, dict):
        return {name: one(goal) for name, goal in target.items()}
    return one(target)


def run_file_name(run):
    """The name this package's training loop gives a log: <model>_seed<seed>_<YYYYmmdd-HHMMSS>.log."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(run.start_s))
    return f"{run.benchmark}_seed{run.seed}_{stamp}.log"


# Synthetic systems shaped like the seed study (R740 with T4s or V100-PCIe); speeds are invented.
_EXAMPLE_SYSTEMS = (("r740_t4", "NVIDIA T4", 15.0, (1, 2, 4), 1.0),
                    ("r740_v100", "NVIDIA V100-PCIE-32GB", 32.0, (1, 2, 3), 2.6))
# benchmark -> (seconds per epoch on one T4, typical epochs, seeds, ruleset)
_EXAMPLE_WORKLOADS = {"resnet": (5400.0, 37, (1, 2, 3, 4, 5), "0.7"),
                      "gnmt": (2900.0, 4, tuple(range(1, 11)), "0.7"),
                      "ncf": (95.0, 6, (1, 2, 3, 4, 5), "0.5")}


def write_example_study(folder, workloads=None, systems=None):
    """Write synthetic logs for a few workloads on T4 x1/x2/x4 and V100 x1/x2/x3; returns the paths.

    Epochs to converge vary with the seed and scaling is sub-linear, so every table and chart has
    something to show. Not measurements: for tests and for illustrating the report.
    """
    paths = []
    workloads = workloads or _EXAMPLE_WORKLOADS
    for platform, model, memory, counts, speed in systems or _EXAMPLE_SYSTEMS:
        for count in counts:
            for benchmark, (epoch_seconds, epochs, seeds, ruleset) in workloads.items():
                for index, seed in enumerate(seeds):
                    # Epochs vary by seed (up to +3 for resnet, +1 otherwise); efficiency drops with GPUs.
                    spread = 3 if benchmark == "resnet" else 1
                    run = ExampleRun(
                        benchmark=benchmark, seed=seed, platform=platform, accelerator_model=model,
                        accelerator_count=count, accelerator_memory_gb=memory, num_workers=count,
                        ruleset=ruleset, epochs=epochs + (seed * 7 + count) % (spread + 1),
                        epoch_seconds=epoch_seconds / (speed * count * (0.93 ** (count - 1))),
                        global_batch_size=256 * count if benchmark == "resnet" else 1024 * count,
                        start_s=1_700_000_000.0 + 86400.0 * len(paths))
                    name = f"{platform}_{count}gpu/{run_file_name(run)}"
                    paths.append(write_log(os.path.join(folder, name), run))
    return paths
