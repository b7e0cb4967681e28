"""What an MLPerf log shows for the time-to-train estimate: the short run (up to the first evaluation), the whole
run's epochs and steady epoch time, and the hyperparameters logged before a point (pure: no TensorFlow, no flags)."""

import dataclasses
import statistics
from typing import Optional


@dataclasses.dataclass
class ShortRun:
    """What a run shows up to its first evaluation; times in seconds from run_start."""
    first_eval_s: float                  # run_start .. first eval_accuracy
    first_eval_epochs: float             # epochs trained when the first evaluation ran (counted from 1)
    overhead_s: float = 0.0              # run_start .. first training event
    train_end_s: Optional[float] = None  # run_start .. the end of that training (eval_start; else eval_accuracy)
    eval_s: float = 0.0                  # train end .. eval_accuracy: one evaluation's cost (its latency if async)
    eval_overlaps: bool = False          # the next epoch trained while the evaluation ran (asynchronous)
    steady_epoch_s: Optional[float] = None   # median training-only epoch time after the first, where timed
    later_eval_s: Optional[float] = None     # median cost of the evaluations after the first (a whole short log)
    eval_period: Optional[float] = None      # median epochs between its evaluations (a whole short log, 2 or more)

    def __post_init__(self):
        if self.train_end_s is None:
            self.train_end_s = self.first_eval_s


def as_number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _epoch_base(events):
    """0 or 1: the number of a log's first epoch (min over the numbers it logs)."""
    numbers = [as_number(e.metadata.get("epoch_num")) for e in events if e.key in ("epoch_start", "eval_accuracy")]
    numbers += [as_number(e.metadata.get("first_epoch_num")) for e in events if e.key == "block_start"]
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
    epoch = as_number(events[index].metadata.get("epoch_num"))
    if epoch is None:
        return None
    for event in reversed(events[:index]):
        if event.key == "block_start":
            first = as_number(event.metadata.get("first_epoch_num"))
            count = as_number(event.metadata.get("epoch_count")) or 1
            if first is not None and abs(epoch - (first + count)) < 1e-6:
                return float(epoch - base)
            break
    return float(epoch - base + 1)


def _evaluations(events, run_start_ms, run_stop_ms=None):
    """[(index of the eval_accuracy, end of the training before it in ms, asynchronous)] in run order.

    The training before an evaluation ends at its eval_start (logs without eval_start: at the eval_accuracy, the
    evaluation's cost then counted as training), or earlier where a later epoch's training had already started
    (Google's v0.6 TPU Transformer starts block 2, then evaluates epoch 1). An evaluation during which training
    went on ran asynchronously (NVIDIA's Mask R-CNN): its cost is not added to the run, only the last one's latency.
    """
    base = _epoch_base(events)
    found, eval_start, trained, later_starts = [], None, False, []
    for index, event in enumerate(events):
        if event.time_ms < run_start_ms:
            continue
        if run_stop_ms is not None and event.time_ms > run_stop_ms:
            break
        if event.key == "eval_start":
            eval_start, trained = event.time_ms, False
        elif event.key in ("block_start", "epoch_start"):
            number = as_number(event.metadata.get("first_epoch_num" if event.key == "block_start" else "epoch_num"))
            if number is not None:
                later_starts.append((event.time_ms, number - base + 1))
            if eval_start is not None:
                trained = True
        elif event.key == "eval_accuracy":
            end = eval_start if eval_start is not None else event.time_ms
            epochs = epochs_at_eval(events, index, base)
            moved_on = [t for t, first in later_starts if epochs is not None and first > epochs and t < end]
            if moved_on and (not found or min(moved_on) > found[-1][1]):
                end, trained = min(moved_on), True
            found.append((index, end, trained))
            eval_start, later_starts = None, []
    return found


def short_run(events, run_start_ms, whole=False):
    """The ShortRun of one log (its events up to the first eval_accuracy); None if it never evaluated.

    whole: the log is itself a short run (stopped after a few epochs): time the steady epochs over all of it."""
    evaluations = _evaluations(events, run_start_ms)
    if not evaluations:
        return None
    index, train_end_ms, overlaps = evaluations[0]
    epochs = epochs_at_eval(events, index, _epoch_base(events))
    if not epochs or epochs <= 0:
        return None
    seen = [e for e in events[:index + 1] if e.time_ms >= run_start_ms]
    eval_ms = events[index].time_ms
    starts = [e.time_ms for e in seen if e.key in ("block_start", "epoch_start")]
    first_train = min(starts) if starts else run_start_ms
    result = ShortRun(first_eval_s=(eval_ms - run_start_ms) / 1000.0, first_eval_epochs=epochs,
                      overhead_s=(first_train - run_start_ms) / 1000.0,
                      train_end_s=(train_end_ms - run_start_ms) / 1000.0, eval_s=(eval_ms - train_end_ms) / 1000.0,
                      eval_overlaps=overlaps)
    # Epochs timed after the first, before the evaluation: the steady rate without the first epoch's warm-up.
    open_epochs, durations = {}, []
    timed_until = float("inf") if whole else train_end_ms
    for event in (events if whole else seen):
        number = event.metadata.get("epoch_num")
        if event.time_ms < run_start_ms:
            continue
        if event.key == "epoch_start":
            open_epochs[number] = event.time_ms
        elif event.key == "epoch_stop" and number in open_epochs and event.time_ms <= timed_until:
            durations.append((event.time_ms - open_epochs.pop(number)) / 1000.0)
    if len(durations) >= 2:
        result.steady_epoch_s = statistics.median(durations[1:])
    if whole:
        # The first evaluation compiles; the later ones are what each further evaluation costs.
        later = [(events[i].time_ms - end) / 1000.0 for i, end, overlaps in evaluations[1:] if not overlaps]
        if later:
            result.later_eval_s = statistics.median(later)
        schedule = [epochs_at_eval(events, i) for i, _, _ in evaluations]
        steps = [b - a for a, b in zip(schedule, schedule[1:]) if a is not None and b is not None and b > a]
        if steps:
            result.eval_period = statistics.median(steps)
    return result


def full_run(events, run_start_ms, run_stop_ms):
    """What a whole run shows: {"epochs": at its last evaluation, "schedule": epochs at each evaluation,
    "steady_epoch_s": training-only seconds per epoch from the first evaluation to the last (None under 2)}."""
    evaluations = _evaluations(events, run_start_ms, run_stop_ms)
    base = _epoch_base(events)
    schedule = [epochs_at_eval(events, index, base) for index, _, _ in evaluations]
    result = {"epochs": schedule[-1] if schedule else None, "schedule": schedule, "steady_epoch_s": None}
    if len(evaluations) >= 2 and None not in schedule and schedule[-1] > schedule[0]:
        evaluating_s = sum((events[index].time_ms - end) / 1000.0 for index, end, overlaps in evaluations[:-1]
                           if not overlaps)
        training_s = (evaluations[-1][1] - evaluations[0][1]) / 1000.0 - evaluating_s
        result["steady_epoch_s"] = training_s / (schedule[-1] - schedule[0])
    return result


# -- epochs to converge ----------------------------------------------------------------------------------------


def logged_hyperparameters(events, until_ms):
    """{key: first value} of the events logged up to until_ms (hyperparameters come before run_start)."""
    found = {}
    for event in events:
        if event.time_ms > until_ms:
            break
        found.setdefault(event.key, event.value)
    return found
