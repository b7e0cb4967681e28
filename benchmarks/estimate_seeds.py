"""Predict each run of a seed sweep from its own first epochs (or a benchmark) and the other seeds' epochs, against
what it took.

    python -m mlperf_keras.sweep --model=ncf --seeds=1,2,3,4,5 --output_dir=/tmp/ncf_cpu
    python benchmarks/estimate_seeds.py --logs /tmp/ncf_cpu --short_epochs 3
    python -m mlperf_keras.benchmark --model=ncf --demo --steps=30 --json_out=/tmp/ncf_bench.json
    python benchmarks/estimate_seeds.py --logs /tmp/ncf_cpu --from_benchmark /tmp/ncf_bench.json

For each log the other logs of the folder are `--runs` (leave-one-out: the epochs to converge), and the time comes
from a copy of the log cut after its `--short_epochs`-th evaluation (a short run: what
`python -m mlperf_keras.estimate --from_log` reads), or with --from_benchmark from a benchmark result (what
`--from_benchmark` reads; of the demo: `mlperf_keras.benchmark --demo`). The prediction (python -m
mlperf_keras.estimate's maths) is printed beside the run's measured time-to-train and epochs; with --from_benchmark
also its parts beside what the log shows of each (warm-up, steady epoch, evaluation).
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlperf_keras.reporting import estimate  # noqa: E402
from mlperf_keras.reporting import convergence  # noqa: E402
from mlperf_keras.reporting.logfiles import MLLOG_TOKEN, find_log_files, read_events  # noqa: E402
from mlperf_keras.reporting.parse import parse_logs  # noqa: E402
from mlperf_keras.reporting.run_features import short_run  # noqa: E402


def cut_after_evaluations(path, count, out_path):
    """Copy the log up to and including its count-th eval_accuracy line."""
    seen = 0
    with open(path) as source, open(out_path, "w") as out:
        for line in source:
            out.write(line)
            if MLLOG_TOKEN in line and '"key": "eval_accuracy"' in line:
                seen += 1
                if seen == count:
                    break


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", required=True, help="a sweep's output folder (one MLLOG file per seed)")
    parser.add_argument("--short_epochs", type=int, default=3, help="evaluations the short run keeps")
    parser.add_argument("--from_benchmark", help="a mlperf_keras.benchmark result (JSON): the time from it instead "
                        "of a short run")
    args = parser.parse_args(argv)
    files, _, _ = find_log_files([args.logs])
    records, _ = parse_logs(files)
    records = [r for r in records if r.converged]
    if len(records) < 3:
        print(f"error: {len(records)} converged runs under {args.logs}; need 3 or more", file=sys.stderr)
        return 2
    errors, parts = [], []
    print("| seed | measured min | predicted min (10-90%) | error | epochs measured | predicted |")
    print("|---:|---:|---|---:|---:|---:|")
    for record in sorted(records, key=lambda r: r.seed or 0):
        others = [r for r in records if r is not record]
        table = [convergence.EpochsEntry(("others",), record.benchmark, record.ruleset, record.global_batch_size,
                                         [r.epochs_to_converge for r in others], "the other seeds")]
        if args.from_benchmark:
            bench = estimate.read_benchmark(args.from_benchmark, record.benchmark)
            result = estimate.estimate(record.benchmark, record.ruleset, record.global_batch_size, None, bench,
                                       own=table)
            if result["minutes"] is None:
                print(f"error: seed {record.seed}: unknown: {'; '.join(result['unknown'])}", file=sys.stderr)
                return 2
            parts.append((record, result))
        else:
            with tempfile.TemporaryDirectory() as folder:
                short_path = os.path.join(folder, "short.log")
                cut_after_evaluations(record.path, args.short_epochs, short_path)
                short, _ = estimate.read_short_run(short_path, record.benchmark)
                result = estimate.estimate(record.benchmark, record.ruleset, record.global_batch_size, None, None,
                                           own=table, short=short, short_source="the short run")
        minutes = result["minutes"]
        error = minutes["median"] / record.time_to_train_min - 1
        errors.append(abs(error))
        print(f"| {record.seed} | {record.time_to_train_min:.2f} | {minutes['median']:.2f} "
              f"({minutes['low']:.2f}-{minutes['high']:.2f}) | {100 * error:+.1f}% | {record.epochs_to_converge:g} | "
              f"{result['parts']['stop_epochs']['value'][0]:g} |")
    print(f"\nmedian |error| {100 * statistics.median(errors):.1f}% over {len(errors)} runs")
    if parts:
        print_parts(parts)
    return 0


def print_parts(parts):
    """The benchmark's parts of each prediction beside what the run's log shows of each: the warm-up (run_start to
    the first evaluation's training, less its epochs at the steady rate, plus the first evaluation's excess over the
    later ones), the steady epoch (median of the epochs after the first) and a later evaluation (median); then the
    prediction's error in seconds split into these parts: warm-up, epoch time x predicted epochs, evaluation cost x
    predicted evaluations, the epoch count (epochs and evaluations predicted less those run, at the log's times),
    and the rest (what the medians leave out)."""
    rows = []
    for record, result in parts:
        events, _, _ = read_events(record.path)
        events.sort(key=lambda e: e.time_ms)
        seen = short_run(events, record.run_start_ms, whole=True)
        later = seen.later_eval_s if seen.later_eval_s is not None else seen.eval_s
        warmup = estimate.warmup_s(seen, seen.steady_epoch_s) + seen.eval_s - later
        p = result["parts"]
        epoch = p["epoch_samples"]["value"] / p["rate_at_gpus"]["value"]
        epochs, evaluation, predicted_warmup = p["stop_epochs"]["value"][0], p["eval_seconds"]["value"], \
            p["warmup_seconds"]["value"]
        predicted = 60 * result["minutes"]["median"]
        evaluations = (predicted - predicted_warmup - epochs * epoch) / evaluation if evaluation else 0.0
        evaluations_run = sum(1 for e in events if e.key == "eval_accuracy")
        split = [predicted_warmup - warmup, epochs * (epoch - seen.steady_epoch_s), evaluations * (evaluation - later),
                 (epochs - record.epochs_to_converge) * seen.steady_epoch_s + (evaluations - evaluations_run) * later]
        split.append(predicted - 60 * record.time_to_train_min - sum(split))
        rows.append((record, epoch, seen, warmup, later, predicted_warmup, evaluation, split))
    print("\n| seed | warm-up s: predicted / log | epoch s: predicted / log | evaluation s: predicted / log |")
    print("|---:|---|---|---|")
    for record, epoch, seen, warmup, later, predicted_warmup, evaluation, _ in rows:
        print(f"| {record.seed} | {predicted_warmup:.1f} / {warmup:.1f} | {epoch:.2f} / {seen.steady_epoch_s:.2f} | "
              f"{evaluation:.2f} / {later:.2f} |")
    print("\n| seed | error s | from warm-up | epoch time | evaluation cost | epoch count | rest |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for record, *_, split in rows:
        print(f"| {record.seed} | {sum(split):+.1f} | " + " | ".join(f"{v:+.1f}" for v in split) + " |")


if __name__ == "__main__":
    sys.exit(main())
