"""Stands in for `python -m mlperf_keras.train` in sweep tests: writes one synthetic MLLOG file per run.

Accepts --model, --seed, --output_dir like the real entry point, plus --fail_seeds=2,5 (exit 3 without
a log for those seeds), --not_converged_seeds=4 (a complete log with run_stop aborted and exit 5, as a run stopped
by --max_epochs), --exit_status=N (the status such a run exits with, as a launcher may replace it) and --echo=TEXT
(printed, to check extra flags arrive).
"""
import argparse
import os
import sys

from mlperf_keras.reporting import example_logs

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--output_dir", required=True)
parser.add_argument("--fail_seeds", default="")
parser.add_argument("--not_converged_seeds", default="")
parser.add_argument("--exit_status", type=int, default=5)
parser.add_argument("--echo", default="")
args = parser.parse_args()

print(f"fake train: model {args.model} seed {args.seed} {args.echo}", flush=True)
if str(args.seed) in args.fail_seeds.split(","):
    print("fake train: failing on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
not_converged = str(args.seed) in args.not_converged_seeds.split(",")
run = example_logs.ExampleRun(benchmark=args.model, seed=args.seed, start_s=1.7e9 + args.seed * 1000,
                              status="aborted" if not_converged else "success")
example_logs.write_log(os.path.join(args.output_dir, example_logs.run_file_name(run)), run)
if not_converged:
    sys.exit(args.exit_status)
