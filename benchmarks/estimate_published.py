"""Validate mlperf_keras.estimate against the published MLPerf results (closed division, v0.6 and v0.7).

    python benchmarks/estimate_published.py --results /tmp/training_results_v0.7 /tmp/training_results_v0.6

For every closed-division result with its logs: each run's time is predicted from that log's own events up to
its first eval_accuracy (what a short run shows) and the epochs-to-converge table built from the *other*
submissions of the round (leave-one-out: none of this result's runs); the predicted run times are aggregated as
the official summarizer does (olympic mean) and compared with the official score (the reporter's, which follows
mlperf_logging.result_summarizer). Prints, per round and workload, the median and 90th percentile of
|predicted / actual - 1| and the share of official scores inside the predicted 10-90% band, for our estimator
beside the naive one (time per epoch up to the first evaluation x the median epochs of the other submissions at a
global batch within 1.5x).

The result folders are git checkouts (or extracts) of mlcommons/training_results_v0.6 / _v0.7; only
<org>/results/<system>/<benchmark>/result_*.txt and <org>/systems/*.json are read.
"""

import argparse
import dataclasses
import os
import pickle
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlperf_keras.reporting import estimate  # noqa: E402
from mlperf_keras.reporting import run_features  # noqa: E402
from mlperf_keras.reporting import convergence  # noqa: E402
from mlperf_keras.reporting.logfiles import find_log_files, read_events  # noqa: E402
from mlperf_keras.reporting.parse import parse_logs  # noqa: E402
from mlperf_keras.reporting.score import group_key, score_all  # noqa: E402

WORKLOADS = ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "ncf")
_FOLDERS = ("resnet", "ssd", "maskrcnn", "mask", "gnmt", "transformer", "ncf")


def _log_files(results_dir):
    files, _, _ = find_log_files([results_dir])
    return [f for f in files if os.path.basename(os.path.dirname(f)) in _FOLDERS]


def load(results_dirs, cache=None):
    """[(record, features)] of every closed-division run of the six workloads; features from read_events."""
    if cache and os.path.exists(cache):
        with open(cache, "rb") as handle:
            return pickle.load(handle)
    paths = [p for d in results_dirs for p in _log_files(d)]
    records, _ = parse_logs(paths)
    runs = []
    for record in records:
        if record.benchmark not in WORKLOADS or str(record.division or "").lower() != "closed":
            continue
        events, _, _ = read_events(record.path)
        events.sort(key=lambda e: e.time_ms)
        short = run_features.short_run(events, record.run_start_ms)
        until = record.run_start_ms + 1000 * short.first_eval_s if short else record.run_start_ms
        features = {"short": short, "hyperparameters": run_features.logged_hyperparameters(events, until),
                    **run_features.full_run(events, record.run_start_ms, record.run_stop_ms)}
        runs.append((record, features))
    if cache:
        with open(cache, "wb") as handle:
            pickle.dump(runs, handle)
    return runs


def _org(result):
    return result.used[0].org or result.system.split("_")[0]


class Submissions:
    """The scored closed-division results of the rounds, with what each says about the others."""

    def __init__(self, runs):
        records = []
        for record, features in runs:
            record.features = features
            records.append(record)
        self.results = [r for r in score_all(records)
                        if r.score_min is not None and r.used[0].global_batch_size]
        self.stats, self.table = {}, []
        for result in self.results:
            key = group_key(result.used[0])
            warmups, periods, pairs = [], [], []
            for record in result.used:
                short, steady = record.features["short"], record.features["steady_epoch_s"]
                if short and steady:
                    warmups.append(estimate.warmup_s(short, steady))
                    pairs.append((short.train_end_s / short.first_eval_epochs, steady))
                period = estimate.eval_period(record.features["schedule"])
                if period:
                    periods.append(period)
            period = statistics.median(periods) if periods else 1.0
            self.stats[key] = {"org": _org(result), "warmup": statistics.median(warmups) if warmups else None,
                               "period": period, "first_epochs": result.used[0].features["short"].first_eval_epochs
                               if result.used[0].features["short"] else 1.0,
                               "pair": tuple(statistics.median(p) for p in zip(*pairs)) if pairs else None}
            converged = [r.features["epochs"] for r in result.used if r.converged and r.features["epochs"]]
            if converged:
                batch = result.used[0].global_batch_size
                # The epochs the run reported are an evaluation at or after the convergence point: take the
                # middle of the last evaluation interval, so that submissions with different cadences agree.
                self.table.append(convergence.EpochsEntry(key, result.benchmark, result.ruleset, batch, converged))
                self.table[-1].points = [e - period / 2 for e in converged]
                self.table[-1].schedule = self.schedule(result)

    @staticmethod
    def schedule(result):
        return convergence.schedule_epochs(result.benchmark, result.used[0].features["hyperparameters"],
                                        result.used[0].global_batch_size)

    def _others(self, result, name, same_org, exclude=()):
        key = group_key(result.used[0])
        values = [v[name] for k, v in self.stats.items()
                  if k != key and k not in exclude and k[0] == result.benchmark and k[2] == result.ruleset
                  and v[name] is not None and (not same_org or v["org"] == _org(result))]
        return statistics.median(values) if values else None

    def same_org(self, result, name, exclude=()):
        """{key: `name`} of the same submitter's other results of the round and workload."""
        key = group_key(result.used[0])
        return {k: v[name] for k, v in self.stats.items() if k != key and k not in exclude
                and k[0] == result.benchmark and k[2] == result.ruleset and v[name] is not None
                and v["org"] == _org(result)}

    def leave_one_out(self, result, name, exclude=()):
        """The median of `name` over the other submissions of the same org (its software), else of all."""
        value = self._others(result, name, True, exclude)
        return value if value is not None else self._others(result, name, False, exclude)

    def naive(self, result):
        key = group_key(result.used[0])
        epochs = convergence.naive_epochs(self.table, result.benchmark, result.ruleset,
                                       result.used[0].global_batch_size, exclude=key)
        if epochs is None:
            return None
        times = [estimate.naive_time(r.features["short"], epochs) / 60 for r in result.used if r.features["short"]]
        return estimate.olympic(times) if len(times) >= 3 else None

    def ours(self, result, oracle=None):
        """Our prediction (minutes); oracle="epochs" / "rate" puts in each run's own epochs (its last evaluation) /
        own steady epoch time (from its whole log) instead, to show what the error is made of."""
        key = group_key(result.used[0])
        points = [dataclass_copy(e, e.points) for e in self.table]
        epochs, schedule = None, self.schedule(result)
        if schedule:
            # The same submitter's recipe first (its schedules end at the same point of convergence), else all.
            others = convergence.candidates(points, result.benchmark, result.ruleset, key)
            own = [e for e in others if self.stats[e.key]["org"] == _org(result)]
            epochs = (convergence.schedule_scaled_epochs(own, schedule, "the submitter's other runs")
                      or convergence.schedule_scaled_epochs(others, schedule, "published runs"))
        if epochs is None:
            batch = result.used[0].global_batch_size
            others = convergence.candidates(points, result.benchmark, result.ruleset, key)
            own = [e for e in others if self.stats[e.key]["org"] == _org(result)
                   and batch / convergence.NAIVE_BATCH_FACTOR <= e.batch <= batch * convergence.NAIVE_BATCH_FACTOR]
            epochs = convergence.interpolated_epochs(own or others, batch,
                                                  "the submitter's other runs" if own else "published runs")
        if epochs is None:
            return None
        warmup, period = self.leave_one_out(result, "warmup"), self.leave_one_out(result, "period") or 1.0
        runs = [r for r in result.used if r.features["short"]]
        shorts = [r.features["short"] for r in runs]
        if oracle == "rate":
            shorts = [dataclasses.replace(r.features["short"], steady_epoch_s=r.features["steady_epoch_s"]
                                          or r.features["short"].steady_epoch_s) for r in runs]
        steady_model = None
        if shorts and shorts[0].eval_overlaps:
            steady_model = estimate.SteadyModel.fit(list(self.same_org(result, "pair").values()))
        if len(shorts) < 3:
            return None
        stop_points = [epochs.median] * len(shorts)
        if oracle == "epochs":
            # Just below the last evaluation, so that quantize() stops there.
            stop_points = [r.features["epochs"] - 1e-6 if r.features["epochs"] else c
                           for r, c in zip(runs, stop_points)]
        times = [estimate.predict_run(short, point, warmup, period, steady_model).seconds / 60
                 for short, point in zip(shorts, stop_points)]
        return estimate.olympic(times)


def dataclass_copy(entry, epochs):
    copy = convergence.EpochsEntry(entry.key, entry.benchmark, entry.ruleset, entry.batch, epochs, entry.source)
    copy.schedule = getattr(entry, "schedule", None)
    return copy


def evaluate(submissions):
    """[(result, naive error, ours error, band (low, high) of ours)]; error = predicted / official - 1."""
    rows = []
    for result in submissions.results:
        naive, ours = submissions.naive(result), submissions.ours(result)
        rows.append([result, naive and naive / result.score_min - 1, ours and ours / result.score_min - 1, ours])
    # The band: the prediction divided by the 10th and 90th percentile of the other submissions' signed errors
    # (same round and workload), so its width is what the estimator actually missed by elsewhere.
    for row in rows:
        result = row[0]
        others = [r[2] for r in rows if r[2] is not None and r[0] is not result
                  and r[0].benchmark == result.benchmark and r[0].ruleset == result.ruleset]
        band = estimate.error_band(others) if row[3] is not None else None
        row.append(band and (row[3] * band[0], row[3] * band[1]))
    return rows


def _summary(errors):
    magnitudes = [abs(e) for e in errors]
    return (f"{100 * statistics.median(magnitudes):5.1f}% {100 * convergence.quantile(magnitudes, 0.9):6.1f}%"
            if magnitudes else "     -        -")


def table(rows):
    lines = ["| round | workload | submissions | naive median / p90 | ours median / p90 | ours band holds |",
             "|---|---|---:|---|---|---:|"]
    for round_ in sorted({r[0].ruleset for r in rows}):
        in_round = [r for r in rows if r[0].ruleset == round_]
        for workload in [w for w in WORKLOADS if any(r[0].benchmark == w for r in in_round)] + ["all"]:
            chosen = [r for r in in_round if workload in ("all", r[0].benchmark)]
            both = [r for r in chosen if r[1] is not None and r[2] is not None]
            banded = [r for r in chosen if r[4] is not None]
            held = sum(b[0] <= r[0].score_min <= b[1] for r in banded for b in [r[4]])
            share = f"{held}/{len(banded)} ({100 * held / len(banded):.0f}%)" if banded else "-"
            name = f"**{workload}**" if workload == "all" else workload
            lines.append(f"| v{round_} | {name} | {len(both)} of {len(chosen)} | {_summary([r[1] for r in both])} | "
                         f"{_summary([r[2] for r in both])} | {share} |")
    return "\n".join(lines)


def decompose(submissions):
    """Per round and workload: our median |error|, with each run's own epochs, with its own steady rate."""
    lines = ["| round | workload | ours | own epochs | own steady rate |", "|---|---|---:|---:|---:|"]
    for round_ in sorted({r.ruleset for r in submissions.results}):
        for workload in WORKLOADS:
            # The results the main table's medians are over (both estimators had a neighbour).
            chosen = [r for r in submissions.results if r.ruleset == round_ and r.benchmark == workload
                      and submissions.naive(r) is not None]
            if not chosen:
                continue
            cells = []
            for oracle in (None, "epochs", "rate"):
                errors = [abs(p / r.score_min - 1) for r in chosen for p in [submissions.ours(r, oracle)] if p]
                cells.append(f"{100 * statistics.median(errors):.1f}%" if errors else "-")
            lines.append(f"| v{round_} | {workload} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", nargs="+", required=True, help="training_results_v0.X folders")
    parser.add_argument("--cache", help="pickle of the parsed runs (speeds up re-runs)")
    parser.add_argument("--per_submission", action="store_true", help="also print every submission's errors")
    parser.add_argument("--decompose", action="store_true", help="also print our median error with each run's own "
                        "epochs, and with its own steady epoch time, in place of the predicted ones")
    args = parser.parse_args(argv)
    submissions = Submissions(load(args.results, args.cache))
    rows = evaluate(submissions)
    if args.per_submission:
        for result, naive, ours, predicted, band in sorted(rows, key=lambda r: (r[0].ruleset, r[0].benchmark)):
            fmt = lambda e: "-" if e is None else f"{100 * e:+.1f}%"  # noqa: E731
            print(f"v{result.ruleset} {result.benchmark:11s} {result.system:42s} official {result.score_min:8.2f} min"
                  f"  naive {fmt(naive):>8s}  ours {fmt(ours):>8s}"
                  + (f"  band {band[0]:.2f}-{band[1]:.2f}" if band else ""))
    print(table(rows))
    if args.decompose:
        print(decompose(submissions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
