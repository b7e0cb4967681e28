"""The one training loop for all six workloads.

Timing and MLLOG events, epochs, evaluation at the ruleset's cadence over the whole eval set, stop at the target,
throughput and progress lines. A workload supplies model, data, loss and evaluator (workloads/base.py); it never
replaces this loop.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import math
import re
import signal
import time

from mlperf_keras import mlperf_log
from mlperf_keras.mlperf_log import C
from mlperf_keras.config import RunConfig, counted, format_quality, quality_finite
from mlperf_keras.interfaces import RepeatedBatch


@dataclasses.dataclass
class RunResult:
    status: str                 # "success" | "aborted"
    epochs: int                 # epochs trained
    quality: float | None       # last evaluated metric
    log_path: str | None
    seconds: float              # run_start -> run_stop
    samples_per_second: float   # global training throughput, mean over epochs
    reason: str | None = None   # why an aborted run ended early (a non-finite loss or metric); None: max_epochs
    resumed_from: str | None = None  # the checkpoint a resumed run started from (never an MLPerf result)


class RunStopped(Exception):
    """The run was stopped from outside (SIGTERM from the user or a launcher, Ctrl-C) after its log opened: the log
    ends with run_stop aborted and the run_stop line was printed; result says how far it got, exit_status is what
    the process exits with (128 + the signal)."""

    def __init__(self, result: RunResult, exit_status: int):
        super().__init__(result.reason)
        self.result, self.exit_status = result, exit_status


def _stop_signal(error: BaseException) -> int | None:
    """The signal number behind a stop from outside: Ctrl-C, or the SystemExit(128 + signal) that the entry points'
    SIGTERM handlers raise; None for any other error."""
    if isinstance(error, KeyboardInterrupt):
        return signal.SIGINT
    if isinstance(error, SystemExit) and isinstance(error.code, int) and 128 < error.code < 128 + signal.NSIG:
        return error.code - 128
    return None


def _framework_versions(backend: str) -> str:
    names = ["keras", "tensorflow" if backend == "tensorflow" else "jax"]
    parts = []
    for name in names:
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            try:
                parts.append(f"{name} {importlib.metadata.version(name + '-cpu')}")
            except importlib.metadata.PackageNotFoundError:
                parts.append(f"{name} ?")
    return ", ".join(parts)


def _hms(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(max(0, seconds))))


class _Progress:
    """Human progress lines on the chief's stdout (the MLLOG file is the machine-readable record)."""

    def __init__(self, config: RunConfig, enabled: bool):
        self.config, self.enabled = config, enabled
        # How far the run got, for the run_stop line of a run stopped from outside mid-epoch.
        self.epochs_done, self.quality = 0, None

    def say(self, message: str):
        if self.enabled:
            print(f"[{self.config.model}] {message}", flush=True)


def _eval_epochs(workload, config: RunConfig) -> list[int]:
    """0-based epochs after which to evaluate: the ruleset cadence, plus the last epoch so every run has a result."""
    due = [e for e in range(config.max_epochs) if workload.eval_due(e, config)]
    if not due or due[-1] != config.max_epochs - 1:
        due.append(config.max_epochs - 1)
    return due


def build_on_the_clock(config: RunConfig) -> bool:
    """v0.5 times everything from model construction on (run_start before the model is built); from v0.6 the clock
    starts after it, when training data is first touched."""
    return config.ruleset == "0.5"


def _log_run_info(log, config: RunConfig, workload, dist):
    system = config.system
    log.event(C.SUBMISSION_ORG, config.submission_org)
    log.event(C.SUBMISSION_PLATFORM, system.platform)
    log.event(C.SUBMISSION_DIVISION, config.logged_division)
    log.event(C.SUBMISSION_STATUS, config.submission_status)
    log.event(C.SUBMISSION_BENCHMARK, workload.name)
    # What the reporter needs to compare systems; not MLPerf keys, which the checker allows.
    log.event("accelerator_model", system.accelerator_model)
    log.event("accelerator_count", system.accelerators_per_worker * dist.world_size)
    log.event("accelerator_memory_gb", system.accelerator_memory_gb)
    log.event("num_workers", dist.world_size)
    log.event("host_cpu", system.host_cpu)
    log.event("host_memory_gb", system.host_memory_gb)
    for key in ("host_processors", "host_cpu_cores", "host_vcpus"):
        log.event(key, getattr(system, key))
    log.event("framework", _framework_versions(config.backend))
    log.event("keras_backend", config.backend)
    log.event("distribution", dist.describe())
    log.event("precision", config.precision)
    log.event("ruleset", config.ruleset)
    log.event("quality_target", dict(config.quality_target) if hasattr(config.quality_target, "keys")
              else config.quality_target)
    log.event("demo", config.demo)
    log.event("synthetic_data", config.synthetic)
    log.event(C.SEED, config.seed)
    log.event(C.GLOBAL_BATCH_SIZE, config.global_batch_size)
    log.event(C.GRADIENT_ACCUMULATION_STEPS, 1)
    metadata = workload.mllog_hparam_metadata(config)
    for key, value in workload.mllog_hparams(config).items():
        log.event(key, value, metadata=metadata.get(key))


def run(config: RunConfig, workload, dist, manifest: dict | None) -> RunResult:
    """Train config.model until the quality target or config.max_epochs; returns how it ended.

    Everything a user can get wrong is checked before this opens the log (train.prepare). A non-finite loss or metric
    ends the run as aborted with the reason in run_stop's metadata; a log that cannot be written raises
    mlperf_log.LogWriteError (the run cannot be recorded, so it does not go on).
    """
    from mlperf_keras import checkpoints

    resume_from = checkpoints.latest(config.checkpoint_dir) if config.resume else None
    if config.resume and resume_from is None:
        from mlperf_keras.config import ConfigError

        raise ConfigError(f"--resume: no checkpoint in --checkpoint_dir={config.checkpoint_dir}")
    log_path = mlperf_log.new_log_path(config.output_dir, config.model, config.seed) if dist.is_chief else None
    log = mlperf_log.MLPerfLog(log_path)
    progress = _Progress(config, dist.is_chief)
    if log_path:
        with open(log_path[:-len(".log")] + ".config.json", "w") as f:
            f.write(config.to_json())
        progress.say(f"MLLOG: {log_path}")
    run_started = False
    try:
        log.event(C.CACHE_CLEAR, True)
        log.start(C.INIT_START)
        _log_run_info(log, config, workload, dist)
        start_epoch = 0
        if resume_from:
            start_epoch = checkpoints.read_header(resume_from)["epoch"] + 1
            # The reporter refuses to score a log with this event: the rules time one uninterrupted run.
            log.event("resumed", True, metadata={"checkpoint_epoch": start_epoch - 1 + config.first_epoch_num,
                                                 "checkpoint": resume_from})
            progress.say(f"RESUMED from {resume_from} (after epoch {start_epoch - 1 + config.first_epoch_num}): "
                         f"this run is NOT a valid MLPerf result (the rules time one uninterrupted run)")
        if build_on_the_clock(config):
            log.end(C.INIT_STOP)
            log.start(C.RUN_START)
            run_started, clock_start = True, time.time()
        _, step = build(config, workload, dist, manifest)
        if resume_from:
            checkpoints.restore(resume_from, step.model, step.optimizer)
            step.reload_from_model()
        precompiled = compile_ahead(step, workload, config, dist, manifest, progress.say)
        if not run_started:
            # v0.6+: init is off the clock; the clock starts when training data is first touched.
            log.end(C.INIT_STOP)
            log.start(C.RUN_START)
            run_started, clock_start = True, time.time()
        result = _train(config, workload, dist, manifest, log, progress, step, clock_start, start_epoch,
                        precompiled=precompiled)
        log.end(C.RUN_STOP, metadata={"status": result.status, **({"reason": result.reason} if result.reason else {})})
        result.log_path, result.resumed_from = log_path, resume_from
        if config.checkpoint_dir and not result.reason:  # a diverged model is not worth keeping (its last epoch is)
            step.sync_to_model()
            if dist.is_chief:
                path = checkpoints.save(config.checkpoint_dir, checkpoints.FINAL_NAME, config, result.epochs - 1,
                                        step.model, step.optimizer)
                progress.say(f"final model and optimizer state: {path}")
        return result
    except BaseException as error:
        if not run_started or isinstance(error, mlperf_log.LogWriteError):
            raise
        signum = _stop_signal(error)
        if signum is None:
            reason = _error_reason(error)
        else:
            reason = f"stopped by {signal.Signals(signum).name}"
        try:
            log.end(C.RUN_STOP, metadata={"status": "aborted", "reason": reason})
        except mlperf_log.LogWriteError:
            pass  # the original error is what the user needs to see
        if signum is None:
            raise
        seconds = time.time() - clock_start
        progress.say(f"run_stop: aborted ({reason}) after {counted(progress.epochs_done, 'epoch')}, {_hms(seconds)}"
                     + (f"; {workload.metric_name} {format_quality(progress.quality)}"
                        if progress.quality is not None else ""))
        result = RunResult("aborted", progress.epochs_done, progress.quality, log_path, seconds, 0.0, reason=reason,
                           resumed_from=resume_from)
        raise RunStopped(result, 128 + signum) from error
    finally:
        log.close()


def _error_reason(error: BaseException, limit: int = 300) -> str:
    """The run_stop reason of a run that ended in an error: its first line, with a phrase that repeats back to back
    said once (XLA's runtime errors nest "Error dispatching computation: " once per level, which would fill the
    limit before the cause, such as a dead peer's Gloo connection), cut at limit characters."""
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return re.sub(r"([^:]{3,120}: )\1+", r"\1", text)[:limit]


def build(config, workload, dist, manifest):
    """Model and compiled train step, ready for the first batch (all workers start from rank 0's weights)."""
    from mlperf_keras import precision, steps

    precision.set_policy(config.precision)
    steps.set_random_seed(config.seed)
    model = workload.build_model(config)
    steps_per_epoch = workload.steps_per_epoch(config, manifest)
    optimizer = precision.wrap_optimizer(workload.build_optimizer(config, steps_per_epoch), config.precision)
    dist.broadcast_variables(model.variables)
    step = steps.make_train_step(model, optimizer, workload.loss, dist, jit_compile=config.jit_compile)
    return model, step


def compile_ahead(step, workload, config, dist, manifest, say) -> bool:
    """Compile the train step for every batch shape the workload declares (Workload.batch_shapes), concurrently,
    before the first batch: from v0.6 in the init phase with the model's construction, before run_start (the shapes
    come from config and manifest, not from the training data); in v0.5 on the clock, as the construction is, but
    concurrently rather than one shape at a time through the first epoch. Only where the step can (JAX; TensorFlow
    compiles at each shape's first call) and with prepared data (a synthetic run repeats one batch). True if
    something was compiled."""
    if manifest is None or not hasattr(step, "precompile"):
        return False
    batches = workload.batch_shapes(config, dist, manifest)
    if not batches:
        return False
    return step.precompile(batches, say=say)["compiled"] > 0


def run_epoch(step, batches, steps: int, samples_per_step: int, progress_seconds: float, say,
              stop_on_non_finite: bool = True, first: bool = False) -> float:
    """Run one epoch's batches through the train step; returns the last loss (reading it waits for the device).

    Divergence is checked on the losses read anyway (the last one, and each progress line's), not per step: a
    per-step read would wait for the device every step. A non-finite loss gives non-finite gradients, which the
    update writes into the weights, so every later loss is non-finite too and the epoch's last loss catches it; a
    progress line that reads one ends the epoch at once (stop_on_non_finite; only for one worker: workers print at
    different moments, and one leaving the epoch early would leave the others waiting in a collective).
    first: the run's first epoch, whose first step traces and compiles the step (minutes for a detector on a few CPU
    cores, with nothing else to show): say so before it and how long it took after.
    """
    start = last_report = time.time()
    loss = None
    for i, (x, y) in enumerate(batches):
        if first and i == 0:
            say("compiling the train step (its first call)...")
            compile_start = time.time()
            loss = step(x, y)
            float(loss)   # waits for the step, so that the time is the compilation's and the first step's
            say(f"train step compiled and run once in {time.time() - compile_start:.1f} s")
        else:
            loss = step(x, y)
        now = time.time()
        if now - last_report >= progress_seconds:
            last_report = now
            value = float(loss)
            say(f"step {i + 1}/{steps}  loss {value:.4f}  {(i + 1) * samples_per_step / (now - start):,.0f} samples/s")
            if stop_on_non_finite and not math.isfinite(value):
                return value
    return float(loss) if loss is not None else float("nan")


def eta_seconds(epoch_ends: list, epochs_left: int) -> float | None:
    """Seconds for epochs_left more epochs at the mean pace of this run's epochs after its first (epoch_ends: the
    time at the end of each). The first epoch also compiles the steps (the NCF demo's first ETA said 1:08:28 for a
    1-minute run), so after one epoch there is no estimate: None."""
    if len(epoch_ends) < 2:
        return None
    return epochs_left * (epoch_ends[-1] - epoch_ends[0]) / (len(epoch_ends) - 1)


def _batch_norm_statistics(model) -> list:
    """The moving means and variances of every batch-norm layer (Keras names them so)."""
    return [v for v in model.non_trainable_variables if v.path.endswith(("/moving_mean", "/moving_variance"))]


def _train(config, workload, dist, manifest, log, progress, step, clock_start, start_epoch=0,
           precompiled: bool = False) -> RunResult:
    from mlperf_keras import checkpoints
    from mlperf_keras.inputs.manifest import TRAINING_CHECKSUM_LIMIT_BYTES, verify_files

    if manifest is not None:
        verify_files(config.data_dir, manifest, progress=progress.say if dist.is_chief else None,
                     checksum_limit_bytes=TRAINING_CHECKSUM_LIMIT_BYTES, rank=dist.rank, world_size=dist.world_size)
        train = workload.train_data(config, dist, manifest)
    else:
        # Synthetic data lives on the device: one batch of the real shapes, repeated, measures model and loop only.
        synthetic_steps = workload.steps_per_epoch(config, None)
        train = RepeatedBatch(step.to_device(next(iter(workload.synthetic_train_data(config, dist).batches(0)))),
                              synthetic_steps, samples_per_epoch=synthetic_steps * config.global_batch_size)
    evaluator = workload.evaluator(config, dist, manifest)
    log.event(C.TRAIN_SAMPLES, train.samples_per_epoch)
    log.event(C.EVAL_SAMPLES, evaluator.num_samples)

    eval_epochs = _eval_epochs(workload, config)
    base = config.first_epoch_num
    samples_per_step = config.global_batch_size
    status, quality, throughputs, reason = "aborted", None, [], None
    progress.say(f"{train.steps_per_epoch} steps/epoch of global batch {config.global_batch_size}; target "
                 f"{workload.metric_name} {config.quality_target}; evaluating after epochs "
                 f"{[e + base for e in eval_epochs][:8]}{'...' if len(eval_epochs) > 8 else ''}")
    epoch, block_first = start_epoch - 1, start_epoch
    epoch_ends = []   # time.time() at the end of each epoch of this run (with its evaluation)
    for epoch in range(start_epoch, config.max_epochs):
        if epoch == block_first:
            block_end = next(e for e in eval_epochs if e >= epoch)
            log.start(C.BLOCK_START, metadata={"first_epoch_num": epoch + base, "epoch_count": block_end - epoch + 1})
        log.start(C.EPOCH_START, metadata={"epoch_num": epoch + base})
        epoch_start = time.time()
        epoch_loss = run_epoch(step, train.batches(epoch), train.steps_per_epoch, samples_per_step,
                               config.progress_seconds, lambda msg: progress.say(f"  epoch {epoch + base} {msg}"),
                               stop_on_non_finite=dist.world_size == 1,
                               first=epoch == start_epoch and not precompiled)
        epoch_seconds = time.time() - epoch_start
        # A TrainData that counts its epoch's samples (GNMT's real tokens) gives them; else steps x global batch.
        counted_samples = train.epoch_samples() if hasattr(train, "epoch_samples") else None
        throughput = ((counted_samples if counted_samples is not None else train.steps_per_epoch * samples_per_step)
                      / epoch_seconds)
        throughputs.append(throughput)
        log.end(C.EPOCH_STOP, metadata={"epoch_num": epoch + base})
        # Decided together: a worker whose own last loss is finite must stop too, or it would wait in the evaluation.
        if dist.sum_across_workers([0.0 if math.isfinite(epoch_loss) else 1.0])[0] > 0:
            reason = f"non-finite training loss ({epoch_loss}) in epoch {epoch + base}: the model diverged"
            break
        log.event("tracked_stats", {"throughput": throughput, "loss": epoch_loss}, metadata={"epoch_num": epoch + base})

        line = f"epoch {epoch + base} ({epoch + 1}/{config.max_epochs})  loss {epoch_loss:.4f}  {throughput:,.0f} samples/s"
        if epoch == block_end:
            step.sync_to_model()
            # Each worker's batch-norm statistics saw only its own batches: evaluate one model, their mean, as the
            # SSD reference does (all-reduce of running_mean/running_var before each evaluation).
            dist.average_variables(_batch_norm_statistics(step.model))
            log.start(C.EVAL_START, metadata={"epoch_num": epoch + base})
            eval_start = time.time()
            quality = evaluator.evaluate(step.predict)
            if not quality_finite(quality):
                reason = (f"non-finite {workload.metric_name} ({format_quality(quality)}) after epoch {epoch + base}: "
                          f"the model diverged")
                break
            log.event(C.EVAL_ACCURACY, workload.mllog_accuracy(quality, config), metadata={"epoch_num": epoch + base})
            log.end(C.EVAL_STOP, metadata={"epoch_num": epoch + base})
            log.end(C.BLOCK_STOP, metadata={"first_epoch_num": block_first + base})
            block_first = epoch + 1
            line += (f"  {workload.metric_name} {format_quality(quality)} (target {format_quality(config.quality_target)})"
                     f"  eval {time.time() - eval_start:.1f} s")
            if workload.target_reached(quality, config):
                status = "success"
        epoch_ends.append(time.time())
        progress.epochs_done, progress.quality = epoch + 1, quality
        elapsed = epoch_ends[-1] - clock_start
        line += f"  elapsed {_hms(elapsed)}"
        remaining = eta_seconds(epoch_ends, config.max_epochs - epoch - 1)
        if status != "success" and remaining is not None and epoch + 1 < config.max_epochs:
            line += f"  ETA <= {_hms(remaining)} (max_epochs)"
        progress.say(line)
        if config.checkpoint_dir:
            step.sync_to_model()
            if dist.is_chief:
                checkpoints.save_epoch(config.checkpoint_dir, config, epoch, step.model, step.optimizer,
                                       config.keep_checkpoints)
        if status == "success":
            break
    seconds = time.time() - clock_start
    if reason:
        progress.say(f"run_stop: aborted after {counted(epoch + 1, 'epoch')}: {reason}")
        return RunResult("aborted", epoch + 1, None, None, seconds, sum(throughputs) / max(1, len(throughputs)),
                         reason=reason)
    verdict = "reached the target" if status == "success" else f"stopped at max_epochs={config.max_epochs}"
    progress.say(f"run_stop: {status} ({verdict}) after {counted(epoch + 1, 'epoch')}, {_hms(seconds)}; "
                 f"{workload.metric_name} {format_quality(quality)}" if quality is not None else f"run_stop: {status}")
    return RunResult(status, epoch + 1, quality, None, seconds, sum(throughputs) / max(1, len(throughputs)))


__all__ = ["RunResult", "RunStopped", "run"]
