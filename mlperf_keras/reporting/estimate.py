"""Time-to-train from a short run: the estimator's maths (pure: no TensorFlow, no flags).

A prediction is made of parts, each measured or assumed (and said so):
  time = overhead + first segment + (epochs - first epochs) x steady epoch time + evaluations x eval cost
- the *short run*: what a log shows up to its first eval_accuracy (or what a benchmark measured): the
  time from run_start to the first training event (overhead), the first segment (training up to the
  first evaluation, with warm-up and compilation in it), the steady epoch time where an epoch after the
  first one is timed, the cost of one evaluation;
- the *epochs to converge* at the run's global batch: from a table of other runs' epochs (published
  logs read by the reporter, or a user's own runs), interpolated in batch size between the nearest
  submissions below and above (as mlperf_logging's RCP checker interpolates its RCP means, linearly in
  batch size: rcp_checker.RCP_Checker._create_interp_rcp), with a 10-90% band from those runs' spread;
  or from mlperf-logging's reference convergence points (RCPs) where the round's table has no run.

The naive estimator (for comparison) is time per epoch up to the first evaluation times the median
epochs of the other submissions at a global batch within 1.5x.
"""

import collections
import dataclasses
import math
import os
import statistics
from typing import List, Optional

from mlperf_keras.reporting import rules
from mlperf_keras.reporting.score import olympic_mean

# The naive estimator's neighbourhood: other submissions at a global batch within this factor.
NAIVE_BATCH_FACTOR = 1.5
BAND = (0.10, 0.90)


@dataclasses.dataclass
class ShortRun:
    """What a run shows up to its first evaluation; times in seconds from run_start."""
    first_eval_s: float                  # run_start .. first eval_accuracy
    first_eval_epochs: float             # epochs trained when the first evaluation ran (counted from 1)
    overhead_s: float = 0.0              # run_start .. first training event
    first_segment_s: Optional[float] = None   # first training event .. first eval_start (or eval_accuracy)
    steady_epoch_s: Optional[float] = None    # median epoch time after the first epoch, where timed
    eval_s: Optional[float] = None       # one evaluation's eval_start .. eval_stop (synchronous evaluations)
    eval_overlaps: bool = False          # the first evaluation ran while the next epoch trained
    eval_period_epochs: Optional[float] = None   # epochs between evaluations, where the log tells before eval 1


@dataclasses.dataclass
class EpochsEntry:
    """One submission's (result's) converged runs: its global batch and epochs to converge."""
    key: tuple                           # score.group_key: (benchmark, system, ruleset)
    benchmark: str
    ruleset: Optional[str]
    batch: float
    epochs: List[float]
    source: str = "published"


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _epoch_base(events):
    """0 or 1: the number of a log's first epoch (min over the numbers it logs)."""
    numbers = [_number(e.metadata.get("epoch_num")) for e in events if e.key in ("epoch_start", "eval_accuracy")]
    numbers += [_number(e.metadata.get("first_epoch_num")) for e in events if e.key == "block_start"]
    numbers = [n for n in numbers if n is not None]
    return 0 if numbers and min(numbers) < 1 else 1


def epochs_at_eval(events, index, base=None):
    """Epochs trained when events[index] (an eval_accuracy) ran, counted from 1.

    Logs label an evaluation either by the epoch it follows (NVIDIA: 'epoch_num 1' after the first
    epoch) or, inside a block of epochs, by the block's end (Google's TPU logs: block 0..4, eval
    'epoch_num 4.0'); an evaluation reported while the next block trains (asynchronous, NVIDIA's Mask
    R-CNN) keeps its own epoch number.
    """
    base = _epoch_base(events) if base is None else base
    epoch = _number(events[index].metadata.get("epoch_num"))
    if epoch is None:
        return None
    for event in reversed(events[:index]):
        if event.key == "block_start":
            first = _number(event.metadata.get("first_epoch_num"))
            count = _number(event.metadata.get("epoch_count")) or 1
            if first is not None and abs(epoch - (first + count)) < 1e-6:
                return float(epoch - base)
            break
    return float(epoch - base + 1)


def short_run(events, run_start_ms):
    """The ShortRun of one log (its events up to the first eval_accuracy); None if it never evaluated."""
    first_eval = next((i for i, e in enumerate(events) if e.key == "eval_accuracy" and e.time_ms >= run_start_ms),
                      None)
    if first_eval is None:
        return None
    base = _epoch_base(events)
    epochs = epochs_at_eval(events, first_eval, base)
    if not epochs or epochs <= 0:
        return None
    seen = [e for e in events[:first_eval + 1] if e.time_ms >= run_start_ms]
    t_eval = events[first_eval].time_ms
    to_s = lambda ms: (ms - run_start_ms) / 1000.0  # noqa: E731
    train_starts = [e.time_ms for e in seen if e.key in ("block_start", "epoch_start")]
    first_train = min(train_starts) if train_starts else run_start_ms
    eval_starts = [e for e in seen if e.key == "eval_start"]
    eval_stops = [e for e in seen if e.key == "eval_stop"]
    segment_end = eval_starts[0].time_ms if eval_starts else t_eval
    result = ShortRun(first_eval_s=to_s(t_eval), first_eval_epochs=epochs, overhead_s=to_s(first_train),
                      first_segment_s=(segment_end - first_train) / 1000.0)
    # Epochs timed after the first: the steady rate, without the first epoch's warm-up.
    open_epochs, durations = {}, []
    for event in seen:
        number = event.metadata.get("epoch_num")
        if event.key == "epoch_start":
            open_epochs[number] = event.time_ms
        elif event.key == "epoch_stop" and number in open_epochs:
            durations.append((event.time_ms - open_epochs.pop(number)) / 1000.0)
    if len(durations) >= 2:
        result.steady_epoch_s = statistics.median(durations[1:])
    if eval_starts and eval_stops:
        result.eval_s = max(0.0, (eval_stops[0].time_ms - eval_starts[0].time_ms) / 1000.0)
    # Asynchronous evaluation: the next epoch or block began before the evaluation's result came.
    if eval_starts and any(e.key in ("block_start", "epoch_start") and e.time_ms > eval_starts[0].time_ms
                           for e in seen):
        result.eval_overlaps = True
        result.eval_s = 0.0
    return result


def full_run_epochs(events, run_start_ms, run_stop_ms):
    """Epochs trained at the last evaluation before run_stop (what a converged run took), counted from 1."""
    base = _epoch_base(events)
    last = None
    for index, event in enumerate(events):
        if event.key == "eval_accuracy" and run_start_ms <= event.time_ms <= run_stop_ms:
            last = index
    return None if last is None else epochs_at_eval(events, last, base)


def eval_schedule(events, run_start_ms, run_stop_ms):
    """[epochs at each evaluation] of a whole run (counted from 1)."""
    base = _epoch_base(events)
    return [epochs_at_eval(events, i, base) for i, e in enumerate(events)
            if e.key == "eval_accuracy" and run_start_ms <= e.time_ms <= run_stop_ms]


def steady_epoch_from_full(events, run_start_ms, run_stop_ms):
    """(first segment s / first epochs, steady s per epoch from evaluation 2 to the last) of a whole run."""
    base = _epoch_base(events)
    evals = [(i, e) for i, e in enumerate(events)
             if e.key == "eval_accuracy" and run_start_ms <= e.time_ms <= run_stop_ms]
    if len(evals) < 3:
        return None
    first_epochs = epochs_at_eval(events, evals[0][0], base)
    last_epochs = epochs_at_eval(events, evals[-1][0], base)
    n_evals = len(evals) - 1
    span_s = (evals[-1][1].time_ms - evals[0][1].time_ms) / 1000.0
    if not first_epochs or last_epochs <= first_epochs:
        return None
    per_epoch_with_eval = span_s / (last_epochs - first_epochs)
    first = (evals[0][1].time_ms - run_start_ms) / 1000.0 / first_epochs
    return first, per_epoch_with_eval, n_evals


# -- epochs to converge ----------------------------------------------------------------------------------------

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


# -- time --------------------------------------------------------------------------------------------------------

def naive_time(short, epochs):
    """Naive seconds: time per epoch up to the first evaluation x epochs."""
    return short.first_eval_s / short.first_eval_epochs * epochs


def eval_period(schedule):
    """Median epochs between a run's evaluations; None with fewer than two."""
    steps = [b - a for a, b in zip(schedule, schedule[1:]) if b > a]
    return statistics.median(steps) if steps else None


def warmup_s(short, steady_epoch_s):
    """Seconds of a run's first evaluation not explained by steady training: init inside run_start, compilation,
    warm-up, the first evaluation's own compilation."""
    return short.first_eval_s - short.first_eval_epochs * steady_epoch_s


def quantize(epochs, first_epochs, period):
    """The first evaluation of the run's schedule (first_epochs, + period, ...) at or after `epochs`."""
    if not period or epochs <= first_epochs:
        return first_epochs
    return first_epochs + math.ceil((epochs - first_epochs) / period - 1e-9) * period


@dataclasses.dataclass
class Prediction:
    """Seconds to train, with what it is made of."""
    seconds: float
    epochs: float
    steady_epoch_s: float
    warmup_s: float
    first_eval_s: float
    steady_source: str


def predict_run(short, epochs, warmup, period):
    """Seconds for a run whose short run is `short` to converge in `epochs` (a continuous convergence point).

    Steady seconds per epoch (evaluations included): measured where the short run timed two or more epochs,
    else (first evaluation - warmup) / first epochs, warmup (seconds) from elsewhere (other runs of the same
    software, or a benchmark's warm-up steps). The run stops at the first of its evaluations after `epochs`.
    """
    if short.steady_epoch_s:
        eval_share = (short.eval_s or 0.0) / period if period else 0.0
        steady, source = short.steady_epoch_s + eval_share, "measured: epochs timed after the first"
        warmup = warmup_s(short, steady)
    else:
        warmup = min(warmup or 0.0, 0.9 * short.first_eval_s)
        steady, source = (short.first_eval_s - warmup) / short.first_eval_epochs, "first evaluation less warm-up"
    stop = quantize(epochs, short.first_eval_epochs, period)
    seconds = short.first_eval_s + (stop - short.first_eval_epochs) * steady
    return Prediction(seconds, stop, steady, warmup, short.first_eval_s, source)


def run_epochs(estimate, runs):
    """Convergence points for `runs` runs: the epochs estimate's median scaled by evenly spaced quantiles of the
    neighbours' run-to-run spread, so that an olympic mean over them has the spread's skew (a few slow seeds)."""
    return [estimate.median * quantile(estimate.spread, (j + 0.5) / runs) for j in range(runs)]


def olympic(values):
    """Olympic mean of run times (drop the fastest and the slowest)."""
    return olympic_mean(values, 0)


def error_band(errors):
    """(low, high) multipliers of a prediction that held the middle 80% of official scores elsewhere: from
    signed errors e = predicted / actual - 1, actual = predicted / (1 + e)."""
    if len(errors) < 3:
        return None
    # Split-conformal quantiles: with n errors the (n + 1)/n-widened levels hold the stated share of a new one.
    n = len(errors)
    high = min(1.0, BAND[1] * (n + 1) / n)
    low = max(0.0, 1.0 - (1.0 - BAND[0]) * (n + 1) / n)
    return 1.0 / (1.0 + quantile(errors, high)), 1.0 / (1.0 + quantile(errors, low))
