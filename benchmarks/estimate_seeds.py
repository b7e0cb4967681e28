"""Predict each run of a seed sweep from its own first epochs and the other seeds' epochs, against what it took.

    python -m mlperf_keras.sweep --model=ncf --seeds=1,2,3,4,5 --output_dir=/tmp/ncf_cpu
    python benchmarks/estimate_seeds.py --logs /tmp/ncf_cpu --short_epochs 3

For each log: a copy cut after its `--short_epochs`-th evaluation stands for a short run (what
`python -m mlperf_keras.estimate --from_log` reads), the other logs of the folder are `--runs` (leave-one-out), and
the prediction (python -m mlperf_keras.estimate's maths) is printed beside the run's measured time-to-train and
epochs.
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlperf_keras.reporting import estimate  # noqa: E402
from mlperf_keras.reporting import convergence  # noqa: E402
from mlperf_keras.reporting.logfiles import MLLOG_TOKEN, find_log_files  # noqa: E402
from mlperf_keras.reporting.parse import parse_logs  # noqa: E402


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
    args = parser.parse_args(argv)
    files, _, _ = find_log_files([args.logs])
    records, _ = parse_logs(files)
    records = [r for r in records if r.converged]
    if len(records) < 3:
        print(f"error: {len(records)} converged runs under {args.logs}; need 3 or more", file=sys.stderr)
        return 2
    errors = []
    print("| seed | measured min | predicted min (10-90%) | error | epochs measured | predicted |")
    print("|---:|---:|---|---:|---:|---:|")
    for record in sorted(records, key=lambda r: r.seed or 0):
        with tempfile.TemporaryDirectory() as folder:
            short_path = os.path.join(folder, "short.log")
            cut_after_evaluations(record.path, args.short_epochs, short_path)
            short, _ = estimate.read_short_run(short_path, record.benchmark)
            others = [r for r in records if r is not record]
            table = [convergence.EpochsEntry(("others",), record.benchmark, record.ruleset, record.global_batch_size,
                                          [r.epochs_to_converge for r in others], "the other seeds")]
            result = estimate.estimate(record.benchmark, record.ruleset, record.global_batch_size, None, None,
                                       own=table, short=short, short_source="the short run")
        minutes = result["minutes"]
        error = minutes["median"] / record.time_to_train_min - 1
        errors.append(abs(error))
        print(f"| {record.seed} | {record.time_to_train_min:.2f} | {minutes['median']:.2f} "
              f"({minutes['low']:.2f}-{minutes['high']:.2f}) | {100 * error:+.1f}% | {record.epochs_to_converge:g} | "
              f"{result['parts']['stop_epochs']['value'][0]:g} |")
    print(f"\nmedian |error| {100 * statistics.median(errors):.1f}% over {len(errors)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
