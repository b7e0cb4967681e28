"""One MLLOG file -> one RunRecord (or a Problem saying why not).

Reads the standard MLPerf keys plus the extra keys mlperf_keras logs before run_start
(accelerator_model, accelerator_count, ...). Logs from other producers lack the extra keys; then
the system falls back to submission_platform, the GPU count is unknown, throughput is derived from
train_samples and epoch timing where possible, and `missing` lists what was absent.
"""

import os
import statistics

from mlperf_keras.reporting import rules
from mlperf_keras.reporting.logfiles import read_events
from mlperf_keras.reporting.records import Problem, RunRecord
from mlperf_keras.reporting.systems import describe_system

# Keys whose first value describes the run; the extra keys are ours (see the log contract).
_STANDARD_KEYS = ("submission_org", "submission_platform", "submission_division", "submission_status",
                  "submission_benchmark", "seed", "global_batch_size", "train_samples")
_EXTRA_KEYS = ("accelerator_model", "accelerator_count", "accelerator_memory_gb", "num_workers",
               "host_cpu", "host_memory_gb", "framework", "keras_backend", "ruleset", "quality_target")
# Other producers (MLPerf v1.0+ logs) sometimes state the scale this way.
_SCALE_KEYS = ("number_of_nodes", "accelerators_per_node")
# Logged by mlperf_keras too, but optional: their absence is not worth listing as missing.
_OPTIONAL_KEYS = ("demo", "synthetic_data")


def parse_log(path):
    """(RunRecord or None, [Problem]) for one file."""
    events, bad_lines, log_format = read_events(path)
    problems = [Problem(path, f"line {number}: {reason}: {text!r}", skipped=False)
                for number, text, reason in bad_lines]
    truncated = any("cut off" in reason for _, _, reason in bad_lines)

    def skip(reason):
        if truncated:
            reason = f"truncated log ({reason})"
        return None, problems + [Problem(path, reason)]

    if log_format == "mlp_v0.5":
        return skip("MLPerf v0.5 ':::MLPv0.5.0' log format is not supported (only ':::MLLOG' and ':::MLL')")
    if not events:
        return skip("no parseable MLLOG lines")

    first = _first_values(events, _STANDARD_KEYS + _EXTRA_KEYS + _SCALE_KEYS + _OPTIONAL_KEYS)
    benchmark = first.get("submission_benchmark")
    if benchmark is None:
        return skip("no submission_benchmark: cannot tell which benchmark this is")
    if benchmark not in rules.KNOWN_BENCHMARKS:
        return skip(f"unknown benchmark {benchmark!r} (known: {', '.join(rules.KNOWN_BENCHMARKS)})")

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
        status=str(run_stop.metadata.get("status", "unknown")),
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
        framework=first.get("framework"),
        keras_backend=first.get("keras_backend"),
        ruleset=rules.short_ruleset(first.get("ruleset")),
        seed=_as_int(first.get("seed")),
        global_batch_size=_as_float(first.get("global_batch_size")),
        quality_target=_as_float(first.get("quality_target")),
    )
    record.log_format = log_format
    if log_format == "mll_v0.6" and record.ruleset is None:
        record.ruleset = "0.6"
    record.mlperf_target = rules.mlperf_target(benchmark, record.ruleset)
    record.missing = [key for key in _EXTRA_KEYS + ("submission_platform", "seed") if key not in first]
    if record.accelerator_count is None and "number_of_nodes" in first and "accelerators_per_node" in first:
        record.accelerator_count = _as_int(first["number_of_nodes"]) * max(_as_int(first["accelerators_per_node"]), 1)
        record.notes.append("GPU count from number_of_nodes x accelerators_per_node")

    record.system, record.gpu_type, record.device_count, record.family = describe_system(
        record.platform, record.accelerator_model, record.accelerator_count, record.num_workers)
    record.quality_curve = _quality_curve(events, run_stop)
    record.converged = _converged(record)
    record.epochs_to_converge = _epochs_to_converge(record, events)
    record.throughput, record.throughput_source = _throughput(events, first.get("train_samples"))
    if record.throughput is None:
        record.missing.append("throughput")
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


def parse_logs(paths):
    """Parse every file; never raises for a bad file. Returns (records, problems)."""
    records, problems = [], []
    for path in paths:
        try:
            record, file_problems = parse_log(path)
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


def _quality_curve(events, run_stop):
    curve = []
    for event in events:
        if event.key == "eval_accuracy" and event.time_ms <= run_stop.time_ms:
            curve.append((event.metadata.get("epoch_num"), event.value))
    return curve


def _below(target, official):
    """True if the run stopped at a target below MLPerf's (a demo target)."""
    if target is None or official is None or isinstance(official, dict):
        return False
    return target < official


def _reached(value, target):
    if target is None or value is None:
        return None
    if isinstance(target, dict):
        if not isinstance(value, dict):
            return None
        return all(value.get(name) is not None and value[name] >= goal for name, goal in target.items())
    if isinstance(value, dict):
        return None
    return value >= target


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


def _throughput(events, train_samples):
    """Samples per second: median of per-epoch values, so a slow first (compiling) epoch does not dominate."""
    logged = [e.value.get("throughput") for e in events
              if e.key == "tracked_stats" and isinstance(e.value, dict)]
    logged = [v for v in logged if isinstance(v, (int, float)) and v > 0]
    if logged:
        return float(statistics.median(logged)), "tracked_stats"
    samples = _as_float(train_samples)
    if not samples:
        return None, None
    # train_samples is one epoch; time each epoch (or block of epochs) between its start and stop.
    rates, open_epochs, open_blocks = [], {}, {}
    for event in events:
        if event.key == "epoch_start":
            open_epochs[event.metadata.get("epoch_num")] = event.time_ms
        elif event.key == "epoch_stop" and event.metadata.get("epoch_num") in open_epochs:
            seconds = (event.time_ms - open_epochs.pop(event.metadata.get("epoch_num"))) / 1000.0
            if seconds > 0:
                rates.append(samples / seconds)
        elif event.key == "block_start":
            open_blocks[event.metadata.get("first_epoch_num")] = (event.time_ms, event.metadata.get("epoch_count") or 1)
        elif event.key == "block_stop" and event.metadata.get("first_epoch_num") in open_blocks:
            start, count = open_blocks.pop(event.metadata.get("first_epoch_num"))
            seconds = (event.time_ms - start) / 1000.0
            if seconds > 0:
                rates.append(samples * count / seconds)
    if rates:
        return float(statistics.median(rates)), "train_samples / epoch time"
    return None, None


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
