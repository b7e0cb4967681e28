"""Epochs to converge at a global batch, for the time-to-train estimate: from a table of runs' epochs (published
logs or a user's own, interpolated in batch as mlperf_logging's RCP checker interpolates its RCP means), from
mlperf-logging's reference convergence points, or scaled from the learning-rate schedule a log states (pure: no
TensorFlow, no flags)."""

import collections
import dataclasses
import math
import os
import statistics
from typing import List, Optional

from mlperf_keras.compliance import rules
from mlperf_keras.reporting.run_features import as_number, full_run

# The naive estimator's neighbourhood: other submissions at a global batch within this factor.
NAIVE_BATCH_FACTOR = 1.5
BAND = (0.10, 0.90)


class EstimateError(ValueError):
    """An input the estimate cannot use (one line for the user)."""


@dataclasses.dataclass
class EpochsEntry:
    """One submission's (result's) converged runs: its global batch and epochs to converge."""
    key: tuple                           # score.group_key: (benchmark, system, ruleset)
    benchmark: str
    ruleset: Optional[str]
    batch: float
    epochs: List[float]
    source: str = "published"


def quantile(values, q):
    """Linear-interpolation quantile (numpy's default) of a non-empty list."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    position = q * (len(ordered) - 1)
    low = int(math.floor(position))
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def candidates(table, benchmark, ruleset, exclude=None):
    """Table entries of this benchmark and round, without the excluded submission (leave-one-out)."""
    short = rules.short_ruleset(ruleset)
    return [e for e in table if e.benchmark == benchmark and rules.short_ruleset(e.ruleset) == short
            and e.key != exclude and e.epochs]


def naive_epochs(table, benchmark, ruleset, batch, exclude=None):
    """Median epochs of the other submissions' runs at a global batch within NAIVE_BATCH_FACTOR; None if none."""
    near = [e for e in candidates(table, benchmark, ruleset, exclude)
            if batch / NAIVE_BATCH_FACTOR <= e.batch <= batch * NAIVE_BATCH_FACTOR]
    if not near:
        return None
    return statistics.median(statistics.median(e.epochs) for e in near)


@dataclasses.dataclass
class EpochsEstimate:
    median: float
    low: float        # BAND[0] quantile
    high: float       # BAND[1] quantile
    spread: list      # relative per-run deviations (epochs / median) pooled from the neighbours
    source: str


def interpolated_epochs(entries, batch, source):
    """Epochs at `batch` from the entries just below and above it in global batch, linearly in batch
    (rcp_checker's _create_interp_rcp), each entry's median; outside the range, the nearest entry's.
    The band pools the neighbours' runs relative to their medians."""
    by_batch = collections.defaultdict(list)
    for entry in entries:
        by_batch[entry.batch].append(entry)
    batches = sorted(by_batch)
    if not batches:
        return None

    def at(b):
        return statistics.median(statistics.median(e.epochs) for e in by_batch[b])

    below = [b for b in batches if b <= batch]
    above = [b for b in batches if b >= batch]
    if below and above:
        low_b, high_b = below[-1], above[0]
        if low_b == high_b:
            median, used = at(low_b), [low_b]
        else:
            weight = (batch - low_b) / (high_b - low_b)
            median, used = at(low_b) + weight * (at(high_b) - at(low_b)), [low_b, high_b]
    else:
        nearest = below[-1] if below else above[0]
        median, used = at(nearest), [nearest]
    spread = [epochs / statistics.median(e.epochs) for b in used for e in by_batch[b] for epochs in e.epochs]
    return EpochsEstimate(median, median * quantile(spread, BAND[0]), median * quantile(spread, BAND[1]), spread,
                          f"{source}: global batch {', '.join(f'{b:g}' for b in used)}"
                          f" ({sum(len(by_batch[b]) for b in used)} submissions)")


def epochs_estimate(table, benchmark, ruleset, batch, exclude=None):
    entries = candidates(table, benchmark, ruleset, exclude)
    if not entries:
        return None
    return interpolated_epochs(entries, batch, "published runs" if entries[0].source == "published"
                               else entries[0].source)


def rcp_epochs(benchmark, batch, rcp_ruleset="1.0.0"):
    """EpochsEstimate from mlperf-logging's RCPs (training_<ruleset>/rcps_<benchmark>.json), None if none.

    Between two RCP batch sizes the mean is interpolated as rcp_checker.RCP_Checker._create_interp_rcp
    does (numpy.interp of the olympic RCP means); the band is the mean +- 1.28 of the interpolated stdev
    (10-90% of a normal).
    """
    name = {"maskrcnn": "maskrcnn", "resnet": "resnet", "ssd": "ssd"}.get(benchmark)
    if name is None:
        return None
    import mlperf_logging

    path = os.path.join(os.path.dirname(mlperf_logging.__file__), "rcp_checker", f"training_{rcp_ruleset}",
                        f"rcps_{name}.json")
    if not os.path.exists(path):
        return None
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    checker = RCP_Checker("training", rcp_ruleset, name, verbose=False)
    exact = checker._find_rcp(batch, "full_rcps")
    if exact is not None:
        mean, stdev, how = exact["RCP Mean"], exact["RCP Stdev"], f"RCP at global batch {batch:g}"
    else:
        low = checker._find_top_min_rcp(batch, "full_rcps")
        high = checker._find_bottom_max_rcp(batch, "full_rcps")
        if low is None or high is None:
            nearest = low or high
            mean, stdev = nearest["RCP Mean"], nearest["RCP Stdev"]
            how = f"nearest RCP (global batch {nearest['BS']:g}; {batch:g} is outside the RCPs)"
        else:
            _, record = checker._create_interp_rcp(batch, low, high)
            mean, stdev = record["RCP Mean"], record["RCP Stdev"]
            how = f"RCP interpolated between global batch {low['BS']:g} and {high['BS']:g}"
    z = 1.2815515655446004
    spread = [1 + z * stdev / mean * k for k in (-1, 1)]
    return EpochsEstimate(float(mean), float(mean - z * stdev), float(mean + z * stdev), spread,
                          f"mlperf-logging {rcp_ruleset} {how}")


# Above this, ResNet's logged decay_steps count optimizer steps (Google's, SIAT's logs: 1,133 to 22,530); at or below,
# epochs (NVIDIA's MXNet logs: 37 to 59). In training_results_v0.6/v0.7 the two groups do not overlap.
_DECAY_STEPS_ARE_STEPS = 200


def schedule_epochs(benchmark, hyperparameters, batch):
    """Epochs the learning-rate schedule a log states runs for (ResNet: warm-up + poly decay), None if not stated.

    Submitters tune ResNet's schedule to end where it converges, so this length predicts its epochs better than the
    global batch does (benchmarks/RESULTS.md). NVIDIA's decay_steps (epochs) include the warm-up; step counts
    (Google's) do not: epochs = warm-up + steps x batch / 1,281,167.
    """
    if benchmark != "resnet" or not batch:
        return None
    optimizer = str(hyperparameters.get("opt_name", "")).lower()
    prefix = "sgd_opt" if optimizer == "sgd" else "lars_opt"
    decay = as_number(hyperparameters.get(f"{prefix}_learning_rate_decay_steps"))
    warmup = as_number(hyperparameters.get(f"{prefix}_learning_rate_warmup_epochs",
                                         hyperparameters.get("opt_learning_rate_warmup_epochs")))
    if decay is None or decay <= 0:
        return None
    if decay <= _DECAY_STEPS_ARE_STEPS:
        return float(decay)
    return float(warmup or 0) + decay * batch / rules.TRAIN_SAMPLES["resnet"]


def schedule_scaled_epochs(entries, schedule, source):
    """Epochs at a run whose schedule is `schedule` epochs long: the median ratio (convergence point / schedule)
    of the entries that state a schedule; the band from their ratios' spread. None with fewer than two."""
    ratios = [statistics.median(e.epochs) / e.schedule for e in entries if getattr(e, "schedule", None)]
    if len(ratios) < 2:
        return None
    ratio = statistics.median(ratios)
    spread = [r / ratio for r in ratios]
    return EpochsEstimate(ratio * schedule, ratio * schedule * quantile(spread, BAND[0]),
                          ratio * schedule * quantile(spread, BAND[1]), spread,
                          f"{source}: {ratio:.3f} x the {schedule:.1f}-epoch learning-rate schedule "
                          f"({len(ratios)} submissions)")


# -- time --------------------------------------------------------------------------------------------------------


def table_from_logs(folders, benchmark, ruleset, source="published runs"):
    """[EpochsEntry] of the converged runs of `benchmark` at `ruleset` under the folders, one per result."""
    from mlperf_keras.reporting.logfiles import find_log_files, read_events
    from mlperf_keras.reporting.parse import parse_logs
    from mlperf_keras.reporting.score import group_key

    missing = [f for f in folders if not os.path.isdir(f)]
    if missing:
        raise EstimateError(f"not a folder: {missing[0]}")
    files, _, _ = find_log_files(folders)
    records, _ = parse_logs(files)
    groups = collections.defaultdict(list)
    for record in records:
        if record.benchmark != benchmark or not record.converged:
            continue
        if rules.short_ruleset(record.ruleset) != rules.short_ruleset(ruleset):
            continue
        # v0.5 logs state no division (the v0.5 results repository holds the closed submissions' logs).
        if source == "published runs" and str(record.division or "closed").lower() != "closed":
            continue
        events, _, _ = read_events(record.path)
        events.sort(key=lambda e: e.time_ms)
        batch = record.global_batch_size or _v05_ncf_batch(record, events)
        epochs = full_run(events, record.run_start_ms, record.run_stop_ms)["epochs"]
        if epochs and batch:
            groups[group_key(record)].append((batch, epochs))
    return [EpochsEntry(key, key[0], key[2], runs[0][0], [e for _, e in runs], source)
            for key, runs in sorted(groups.items(), key=lambda item: str(item[0]))]


def _v05_ncf_batch(record, events):
    """v0.5 logs name no global_batch_size; NCF's input_batch_size is taken as the global one: NVIDIA's v0.5 NCF
    (training_results_v0.5 @c71f2e7, v0.5.0/nvidia/submission/code/recommendation/pytorch/ncf.py, lines 312 and
    360) logs input_batch_size = args.batch_size and splits it over WORLD_SIZE workers; assumed for the other
    submitters. None for other benchmarks (their v0.5 batch keys differ between submitters)."""
    if record.log_format != "mlp_v0.5" or record.benchmark != "ncf":
        return None
    return as_number(next((e.value for e in events if e.key == "input_batch_size"), None))
