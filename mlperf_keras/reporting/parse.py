"""One MLPerf log file -> one RunRecord (or a Problem saying why not).

Reads the standard MLPerf keys plus the extra keys mlperf_keras logs before run_start
(accelerator_model, accelerator_count, ...), in every published format (logfiles.read_events).
Logs from other producers lack the extra keys; then the system is the submission-layout folder the
log sits in (`<org>/results/<system>/...`, with the systems JSON read: systems.py), else
submission_platform; throughput is derived from train_samples and whole-epoch timing only where the
sample count is consistent, and `missing` lists what was absent. The round a foreign log belongs to
comes from the format (v0.5, v0.6), else from a `vX.Y` folder in its path (training_results_v0.7),
else from the caller (`--round`).
"""

import os
import re
import statistics

from mlperf_keras.compliance import rules
from mlperf_keras.reporting.logfiles import read_events
from mlperf_keras.reporting.records import Problem, RunRecord
from mlperf_keras.reporting.systems import SystemRegistry, describe_system

# Keys whose first value describes the run; the extra keys are ours (see the log contract).
_STANDARD_KEYS = ("submission_org", "submission_platform", "submission_division", "submission_status",
                  "submission_benchmark", "seed", "global_batch_size", "train_samples")
_EXTRA_KEYS = ("accelerator_model", "accelerator_count", "accelerator_memory_gb", "num_workers",
               "host_cpu", "host_memory_gb", "framework", "keras_backend", "ruleset", "quality_target")
# Other producers (MLPerf v1.0+ logs) sometimes state the scale this way.
_SCALE_KEYS = ("number_of_nodes", "accelerators_per_node")
# Logged by mlperf_keras too, but optional: their absence is not worth listing as missing.
_OPTIONAL_KEYS = ("demo", "synthetic_data", "host_processors", "host_cpu_cores", "host_vcpus")


def parse_log(path, registry=None, default_round=None):
    """(RunRecord or None, [Problem]) for one file.

    registry: the SystemRegistry shared by one report (systems identified by folder); default_round:
    the round of foreign logs whose round neither the format nor the path tells ("0.7").
    """
    registry = registry if registry is not None else SystemRegistry()
    events, bad_lines, log_format = read_events(path)
    # One problem per file however many lines are bad (a published round has files with thousands).
    problems = []
    if bad_lines:
        number, text, reason = bad_lines[0]
        count = f"{len(bad_lines)} lines do not parse" if len(bad_lines) > 1 else "1 line does not parse"
        problems.append(Problem(path, f"{count} (first: line {number}: {reason}: {text!r})", skipped=False))
    truncated = any("cut off" in reason for _, _, reason in bad_lines)

    def skip(reason):
        if truncated:
            reason = f"truncated log ({reason})"
        elif bad_lines:
            reason = f"{reason}; {len(bad_lines)} lines did not parse"
        return None, [Problem(path, reason)]

    if not events:
        return skip("no parseable MLLOG lines")

    first = _first_values(events, _STANDARD_KEYS + _EXTRA_KEYS + _SCALE_KEYS + _OPTIONAL_KEYS
                          + ("eval_target", "resumed"))
    logged_benchmark = first.get("submission_benchmark")
    if logged_benchmark is None and log_format == "mlp_v0.5":
        logged_benchmark = events[0].metadata.get("benchmark")   # v0.5 names it on every line
    if logged_benchmark is None:
        return skip("no submission_benchmark: cannot tell which benchmark this is")
    benchmark = rules.BENCHMARK_ALIASES.get(str(logged_benchmark).lower(), str(logged_benchmark).lower())
    if benchmark not in rules.KNOWN_BENCHMARKS:
        return skip(f"unknown benchmark {logged_benchmark!r} (known: {', '.join(rules.KNOWN_BENCHMARKS)})")

    starts = [e for e in events if e.key == "run_start"]
    stops = [e for e in events if e.key == "run_stop"]
    if not starts:
        return skip("no run_start: the run never started timing")
    if len(starts) > 1:
        return skip(f"{len(starts)} run_start events: one file must hold one run")
    if not stops:
        return skip("no run_stop: the run did not finish (crashed, killed, or still running)")
    run_start, run_stop = starts[0], stops[0]

    record = RunRecord(
        path=path,
        benchmark=benchmark,
        run_start_ms=run_start.time_ms,
        run_stop_ms=run_stop.time_ms,
        status=_stop_status(run_stop),
        converged=False,
        org=first.get("submission_org"),
        division=first.get("submission_division"),
        submission_status=first.get("submission_status"),
        platform=first.get("submission_platform"),
        accelerator_model=first.get("accelerator_model"),
        accelerator_count=_as_int(first.get("accelerator_count")),
        accelerator_memory_gb=_as_float(first.get("accelerator_memory_gb")),
        num_workers=_as_int(first.get("num_workers")),
        host_cpu=first.get("host_cpu"),
        host_memory_gb=_as_float(first.get("host_memory_gb")),
        host_processors=_as_int(first.get("host_processors")),
        host_cpu_cores=_as_int(first.get("host_cpu_cores")),
        host_vcpus=_as_int(first.get("host_vcpus")),
        framework=first.get("framework"),
        keras_backend=first.get("keras_backend"),
        ruleset=rules.short_ruleset(first.get("ruleset")),
        seed=_as_int(first.get("seed")),
        global_batch_size=_as_float(first.get("global_batch_size")),
        quality_target=_as_float(first.get("quality_target")),
    )
    record.log_format = log_format
    record.logged_benchmark = str(logged_benchmark)
    record.own_log = "ruleset" in first   # mlperf_keras logs its ruleset; published logs never did
    if record.ruleset is None:
        record.ruleset, record.round_source = _round_of(path, log_format, default_round)
    else:
        record.round_source = "logged ruleset"
    record.mlperf_target = rules.mlperf_target(benchmark, record.ruleset)
    if record.quality_target is None and log_format == "mlp_v0.5":
        record.quality_target = _as_float(first.get("eval_target"))
    record.resumed = first.get("resumed") is True
    if record.resumed:
        problems.append(Problem(path, "resumed from a checkpoint (MLLOG 'resumed'): never a valid MLPerf run, "
                                      "listed but not scored", skipped=False))
    record.missing = [key for key in _EXTRA_KEYS + ("submission_platform", "seed") if key not in first]
    if record.accelerator_count is None and "number_of_nodes" in first and "accelerators_per_node" in first:
        record.accelerator_count = _as_int(first["number_of_nodes"]) * max(_as_int(first["accelerators_per_node"]), 1)
        record.notes.append("GPU count from number_of_nodes x accelerators_per_node")

    layout = registry.identify(path)
    if layout is not None and not record.own_log:
        record.system, record.family = layout.system, layout.family
        record.gpu_type = layout.accelerator_model or record.accelerator_model or "unknown"
        record.device_count = layout.accelerator_count
        record.org = record.org or layout.submitter
        record.framework = record.framework or layout.framework
        record.accelerator_model = record.accelerator_model or layout.accelerator_model
        record.accelerator_count = record.accelerator_count if record.accelerator_count is not None \
            else layout.accelerator_count
        record.identified_by = layout.identified_by
        record.system_folder = layout.folder
    else:
        record.system, record.gpu_type, record.device_count, record.family = describe_system(
            record.platform, record.accelerator_model, record.accelerator_count, record.num_workers)
        record.identified_by = "submission_platform + accelerator + count logged in the run"
    record.quality_curve = _quality_curve(events, run_stop)
    if log_format == "mlp_v0.5" and record.status == "unknown":
        record.status = _v05_status_from_target(record)
    record.converged = _converged(record)
    record.epochs_to_converge = _epochs_to_converge(record, events)
    record.throughput, record.throughput_source = _throughput(
        events, first.get("train_samples"), benchmark, run_stop.time_ms - run_start.time_ms)
    if record.throughput is None:
        record.missing.append("throughput")
        if record.throughput_source:
            record.notes.append(f"throughput {record.throughput_source}")
    record.demo = bool(first.get("demo")) or _below(record.quality_target, record.mlperf_target)
    if first.get("demo"):
        record.notes.append("demo run (built-in demo data and target)")
    if first.get("synthetic_data"):
        record.notes.append("synthetic data: throughput only, quality meaningless")
    if record.status != "success" and record.status != "aborted":
        record.notes.append(f"run_stop status {record.status!r}")
    if truncated:
        record.notes.append("log ends mid-line")
    return record, problems


def parse_logs(paths, default_round=None):
    """Parse every file; never raises for a bad file. Returns (records, problems)."""
    records, problems = [], []
    registry = SystemRegistry()
    for path in paths:
        try:
            record, file_problems = parse_log(path, registry, default_round)
        except OSError as error:
            record, file_problems = None, [Problem(path, f"cannot read: {error}")]
        except Exception as error:  # noqa: BLE001 - one odd file must not stop the report
            record, file_problems = None, [Problem(path, f"cannot interpret: {type(error).__name__}: {error}")]
        problems.extend(file_problems)
        if record is not None:
            records.append(record)
    return records, problems


def _first_values(events, keys):
    wanted, found = set(keys), {}
    for event in events:
        if event.key in wanted and event.key not in found:
            found[event.key] = event.value
    return found


_ROUND_IN_PATH = re.compile(r"(?:^|[_-])v(\d+)\.(\d+)(?:\.\d+)?$")


def _round_of(path, log_format, default_round):
    """(round "0.5"/"0.6"/"0.7"/.. or None, how it was found) for a log that logged no ruleset."""
    if log_format == "mlp_v0.5":
        return "0.5", "v0.5 log format"
    if log_format == "mll_v0.6":
        return "0.6", "v0.6 log format"
    for part in reversed(os.path.abspath(path).split(os.sep)[:-1]):
        match = _ROUND_IN_PATH.search(part)
        if match:
            return f"{int(match.group(1))}.{int(match.group(2))}", f"folder {part!r}"
    if default_round:
        return rules.short_ruleset(default_round), "--round"
    return None, "unknown (no ruleset logged, no vX.Y folder, no --round)"


def _stop_status(run_stop):
    """run_stop's status: v0.6+ metadata {"status": ..}; v0.5 value {"success": bool} (or nothing)."""
    if "status" in run_stop.metadata:
        return str(run_stop.metadata["status"])
    success = run_stop.value.get("success") if isinstance(run_stop.value, dict) else None
    if success is None:
        success = run_stop.metadata.get("success")
    if isinstance(success, bool):
        return "success" if success else "aborted"
    return "unknown"


def _v05_status_from_target(record):
    """Some v0.5 logs end with a bare run_stop: success when the last eval reached the logged eval_target."""
    target = record.quality_target if record.quality_target is not None else record.mlperf_target
    if record.quality_curve and _reached(record.quality_curve[-1][1], target):
        record.notes.append("bare v0.5 run_stop: success because the last eval reached eval_target")
        return "success"
    return "unknown"


def _quality_curve(events, run_stop):
    curve = []
    for event in events:
        if event.key == "eval_accuracy" and event.time_ms <= run_stop.time_ms:
            curve.append((event.metadata.get("epoch_num"), normalize_accuracy(event.value)))
    return curve


def normalize_accuracy(value):
    """A logged accuracy as a float or {"BBOX": .., "SEGM": ..}; whatever it was logged as.

    Published forms: a number; {"BBOX": .., "SEGM": ..} (v0.7); {"accuracy": {"BBOX": .., "SEGM": ..}}
    (NVIDIA v0.6 Mask R-CNN); [bbox, segm] (Google v0.6 Mask R-CNN). Anything else stays as it was.
    """
    if isinstance(value, dict) and set(value) == {"accuracy"}:
        value = value["accuracy"]
    if isinstance(value, dict):
        parts = {str(k).upper(): v for k, v in value.items()}
        return {k: float(v) if isinstance(v, (int, float)) else v for k, v in parts.items()}
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return {"BBOX": float(value[0]), "SEGM": float(value[1])}
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def _below(target, official):
    """True if the run stopped at a target below MLPerf's (a demo target)."""
    if target is None or official is None or isinstance(official, dict):
        return False
    return target < official


# Logged values are often float32 printed as float64: NVIDIA's v0.5 GNMT logs a reached BLEU 21.8 as
# 21.799999237060547 (with run_stop success). Within this relative distance a value counts as the target.
_FLOAT32_TOLERANCE = 1e-6


def _at_least(value, goal):
    """value >= goal up to float32 rounding; NaN never is."""
    return isinstance(value, (int, float)) and value >= goal - _FLOAT32_TOLERANCE * abs(goal)


def _reached(value, target):
    if target is None or value is None:
        return None
    if isinstance(target, dict):
        if not isinstance(value, dict):
            return None
        value = {str(k).upper(): v for k, v in value.items()}
        return all(_at_least(value.get(str(name).upper()), goal) for name, goal in target.items())
    if isinstance(value, dict) or not isinstance(value, (int, float)):
        return None
    return _at_least(value, target)


def _converged(record):
    if record.status != "success":
        return False
    # run_stop says success; believe it unless the logged stop target was never reached.
    if record.quality_target is not None and record.quality_curve:
        if not any(_reached(value, record.quality_target) for _, value in record.quality_curve):
            record.notes.append(f"run_stop says success but no eval reached quality_target {record.quality_target}")
            return False
    return True


def _epochs_to_converge(record, events):
    """Epochs trained when the target was reached: the last eval's epoch, counted from 1."""
    if not record.converged or not record.quality_curve:
        return None
    last_epoch = record.quality_curve[-1][0]
    if last_epoch is None:
        return None
    return float(last_epoch) + (1.0 if _zero_based(record, events) else 0.0)


def _zero_based(record, events):
    # Trust the data first: a log whose first epoch is 0 counts from 0, whatever it claims.
    numbers = [e.metadata.get("epoch_num") for e in events if e.key in ("epoch_start", "eval_accuracy")]
    numbers += [e.metadata.get("first_epoch_num") for e in events if e.key == "block_start"]
    numbers = [n for n in numbers if isinstance(n, (int, float))]
    if numbers:
        return min(numbers) == 0
    return bool(rules.epochs_zero_based(record.ruleset))


def _throughput(events, train_samples, benchmark=None, run_ms=None):
    """(samples per second, source) or (None, why unknown).

    Ours: the median of the logged per-epoch tracked_stats throughput, so a slow first (compiling)
    epoch does not dominate. Other producers: train_samples (one epoch) over the epoch or block
    timings, only when the sample count is consistent: it must be the benchmark's training-set size
    where that is known (rules.TRAIN_SAMPLES; some logs give an iteration count), and the timed
    epochs or blocks must cover at least half of the run (some logs time only a part of each epoch,
    which made the rate up to 10x too high).
    """
    logged = [e.value.get("throughput") for e in events
              if e.key == "tracked_stats" and isinstance(e.value, dict)]
    logged = [v for v in logged if isinstance(v, (int, float)) and v > 0]
    if logged:
        return float(statistics.median(logged)), "tracked_stats"
    samples = _as_float(train_samples)
    if not samples:
        return None, None
    known = rules.TRAIN_SAMPLES.get(benchmark)
    if known and abs(samples / known - 1.0) > rules.TRAIN_SAMPLES_TOLERANCE:
        return None, f"unknown: train_samples {samples:g} is not {benchmark}'s training-set size ({known:,})"
    # train_samples is one epoch; time each epoch (or block of epochs) between its start and stop.
    rates, timed_ms, open_epochs, open_blocks = [], 0.0, {}, {}
    for event in events:
        if event.key == "epoch_start":
            open_epochs[event.metadata.get("epoch_num")] = event.time_ms
        elif event.key == "epoch_stop" and event.metadata.get("epoch_num") in open_epochs:
            elapsed = event.time_ms - open_epochs.pop(event.metadata.get("epoch_num"))
            if elapsed > 0:
                rates.append(samples / (elapsed / 1000.0))
                timed_ms += elapsed
        elif event.key == "block_start":
            open_blocks[event.metadata.get("first_epoch_num")] = (event.time_ms, event.metadata.get("epoch_count") or 1)
        elif event.key == "block_stop" and event.metadata.get("first_epoch_num") in open_blocks:
            start, count = open_blocks.pop(event.metadata.get("first_epoch_num"))
            elapsed = event.time_ms - start
            if elapsed > 0:
                rates.append(samples * count / (elapsed / 1000.0))
                timed_ms += elapsed
    if not rates:
        return None, None
    if run_ms and timed_ms < rules.MIN_TIMED_FRACTION * run_ms:
        return None, (f"unknown: epoch/block events time only {100 * timed_ms / run_ms:.0f}% of the run "
                      "(not whole epochs)")
    return float(statistics.median(rates)), "train_samples / epoch time"


def _as_int(value):
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _as_float(value):
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def display_path(path, roots):
    """The path relative to the log folder it came from, for tables (full paths are long)."""
    for root in roots:
        try:
            relative = os.path.relpath(path, root)
        except ValueError:
            continue
        if not relative.startswith(".."):
            return relative
    return path
