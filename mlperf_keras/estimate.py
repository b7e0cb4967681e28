"""python -m mlperf_keras.estimate --model=X [--flagfile=flags/h200.flags] [--gpus=N] [--batch_size=B]
    [--ruleset=R] [--from_benchmark=results.json | --run_benchmark [--demo] | --from_log=short_run.log]
    [--published=DIR ...] [--runs=DIR]

Predicts MLPerf time-to-train (median and a 10-90% band) from a short benchmark, without training:
  epochs to converge at the global batch  x  epoch size / training rate  +  evaluations x eval time  +  warm-up
Each part is printed with where it came from (measured, from a table, or assumed). Epochs come from your own
completed runs (--runs), else mlperf-logging's reference convergence points (resnet, ssd, maskrcnn, for rounds
whose target is the RCPs'), else the published result logs of the round (--published: a
training_results_v0.X folder), else the estimate is "unknown" with the reason. Writes --out/estimate_<model>_<N>.json
and appends one line to --out/report.md. Pure Python unless --run_benchmark (which runs mlperf_keras.benchmark,
with the other flags given here). The built-in demo (train without --data_dir): --run_benchmark --demo, or a
--from_benchmark result of mlperf_keras.benchmark --demo, which also gives the demo's epoch size, evaluation cost,
warm-up and evaluation schedule (epochs: --runs, a folder of the demo's completed runs).
How well this predicts published results: benchmarks/estimate_published.py and benchmarks/RESULTS.md.
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

from mlperf_keras import benchmark as benchmark_cli  # noqa: F401 - the benchmark's flags, passed on by --run_benchmark
from mlperf_keras import train as train_cli  # noqa: F401 - defines the shared training flags (--flagfile presets)
from mlperf_keras.config import ConfigError
from mlperf_keras.reporting import estimate as maths
from mlperf_keras.reporting import convergence

flags.DEFINE_integer("gpus", None, "Accelerators to estimate for. Default: the benchmark's.")
flags.DEFINE_string("from_benchmark", None, "JSON (or JSON lines) written by python -m mlperf_keras.benchmark "
                    "--json_out: the last result of --model gives the training rate.")
flags.DEFINE_bool("run_benchmark", False, "Run python -m mlperf_keras.benchmark (--benchmark_steps steps, the "
                  "same flags) for the training rate.")
flags.DEFINE_string("from_log", None, "The MLLOG file of a short training run of --model (e.g. --max_epochs=3): "
                    "its first training, steady epochs and evaluation cost give the time, instead of a benchmark.")
flags.DEFINE_integer("benchmark_steps", 30, "Timed steps of --run_benchmark.")
flags.DEFINE_multi_string("published", [], "Published results folder(s) (training_results_v0.X): epochs to "
                          "converge of the round's closed-division runs.")
flags.DEFINE_string("runs", None, "A folder of your own completed runs' MLLOG files: their epochs take precedence.")
flags.DEFINE_float("scaling_efficiency", None, "Measured rate on --gpus over (benchmark rate x --gpus / benchmark "
                   "GPUs). Default: 1.0, assumed.")
flags.DEFINE_float("eval_seconds", None, "Seconds one evaluation takes (measured elsewhere). Default: 0, assumed.")
flags.DEFINE_float("warmup_seconds", None, "Seconds of compilation and warm-up inside run_start..run_stop. "
                   "Default: 0, assumed.")
flags.DEFINE_float("epoch_samples", None, "Samples (in the benchmark's unit) in one epoch. Default: the training "
                   "set's size where it is known (images for resnet/ssd/maskrcnn, samples for ncf).")
flags.DEFINE_string("out", "estimates", "Folder for the JSON and report.md.")
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        estimate = build(FLAGS)
    except (ConfigError, convergence.EstimateError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(maths.describe(estimate))
    os.makedirs(FLAGS.out, exist_ok=True)
    path = os.path.join(FLAGS.out, f"estimate_{estimate['model']}_{estimate['gpus'] or 'n'}.json")
    with open(path, "w") as handle:
        json.dump(estimate, handle, indent=2)
    with open(os.path.join(FLAGS.out, "report.md"), "a") as handle:
        handle.write(maths.markdown_line(estimate) + "\n")
    print(f"wrote {path} and a line of {os.path.join(FLAGS.out, 'report.md')}")
    return 0


def build(values):
    """The estimate (a dict) from the flags; EstimateError/ConfigError for inputs that cannot work."""
    ruleset = values.ruleset or ("0.7" if values.model == "resnet" else "0.5")
    if sum(bool(v) for v in (values.from_benchmark, values.run_benchmark, values.from_log)) > 1:
        raise ConfigError("give one of --from_benchmark, --run_benchmark and --from_log")
    if getattr(values, "demo", False) and not values.run_benchmark:
        raise ConfigError("--demo is the benchmark's (with --run_benchmark); a --from_benchmark result of "
                          "mlperf_keras.benchmark --demo carries what the demo needs")
    benchmark, short = None, None
    if values.from_log:
        short, logged_batch = maths.read_short_run(values.from_log, values.model)
        if values.batch_size is None and logged_batch:
            values.batch_size = int(logged_batch)
    elif values.from_benchmark:
        benchmark = maths.read_benchmark(values.from_benchmark, values.model)
    elif values.run_benchmark:
        benchmark = _run_benchmark(values)
    batch = values.batch_size
    on_cpu = str((benchmark or {}).get("accelerator")).lower() == "cpu"
    gpus = values.gpus or (None if on_cpu else (benchmark or {}).get("accelerators"))
    if batch is None:
        preset = train_cli._preset_batch(values.model, values.batch_per_accelerator)
        if preset and gpus:
            batch = preset * gpus
        elif benchmark and benchmark.get("global_batch_size"):
            bench_gpus = max(1, benchmark.get("accelerators") or 1)
            batch = benchmark["global_batch_size"] * (gpus or bench_gpus) // bench_gpus
    if batch is None:
        raise ConfigError("no global batch: give --batch_size, or --gpus with a flagfile that sets "
                          "--batch_per_accelerator, or a benchmark result")
    table = []
    if values.runs:
        table += convergence.table_from_logs([values.runs], values.model, ruleset, source="your runs")
    published = convergence.table_from_logs(values.published, values.model, ruleset) if values.published else []
    return maths.estimate(values.model, ruleset, batch, gpus, benchmark, own=table, published=published,
                          scaling_efficiency=values.scaling_efficiency, eval_seconds=values.eval_seconds,
                          warmup_seconds=values.warmup_seconds, epoch_samples=values.epoch_samples,
                          short=short, short_source=values.from_log and os.path.basename(values.from_log))


def _run_benchmark(values):
    """Runs the benchmark with this command's flags; its JSON result."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "benchmark.json")
        passed = [a for a in sys.argv[1:] if not a.startswith(tuple(f"--{n}" for n in _OWN_FLAGS))]
        command = [sys.executable, "-m", "mlperf_keras.benchmark", *passed, f"--steps={values.benchmark_steps}",
                   f"--json_out={out}"]
        print("running: " + " ".join(command), file=sys.stderr)
        if subprocess.run(command).returncode != 0 or not os.path.exists(out):
            raise ConfigError("the benchmark failed (its error is above): no training rate")
        return maths.read_benchmark(out, values.model)


_OWN_FLAGS = ("gpus", "from_benchmark", "from_log", "run_benchmark", "benchmark_steps", "published", "runs",
              "scaling_efficiency", "eval_seconds", "warmup_seconds", "epoch_samples", "out")


def run():
    """Console-script entry point."""
    app.run(main)


if __name__ == "__main__":
    run()
