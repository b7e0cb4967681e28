"""Time-to-train from a short run: the estimator's maths (pure: no TensorFlow, no flags). What a log shows is read
by reporting/run_features.py, the epochs to converge come from reporting/convergence.py; this module predicts the
run from them and assembles the estimate the command prints.

A prediction is made of parts, each measured or assumed (and said so):
  time = first training + (epochs - first epochs) x steady epoch + evaluations x evaluation cost
- the *short run*: what a log shows up to its first eval_accuracy (or what a benchmark measured): the training
  up to the first evaluation (start-up, compilation and warm-up inside it), its evaluation's cost (or latency,
  when evaluation runs beside training), the steady epoch time where an epoch after the first one is timed;
  otherwise the steady time comes from the first training less a warm-up seen on other runs of the same
  software (or by a SteadyModel fitted on them);
- the *epochs to converge*: from a table of other runs' epochs (published logs read by the reporter, or a
  user's own runs), interpolated in global batch between the nearest runs below and above (as mlperf_logging's
  RCP checker interpolates its RCP means, linearly in batch size: rcp_checker.RCP_Checker._create_interp_rcp);
  from mlperf-logging's reference convergence points (RCPs); or, for ResNet, scaled from the length of the
  learning-rate schedule the log states; the run stops at the first of its own evaluations after that point.

From a benchmark instead: warm-up + stopping epochs x epoch size / training rate + evaluations x evaluation cost;
the rate is the benchmark's fed one where it timed the input pipeline, and a demo benchmark (mlperf_keras.benchmark
--demo) also gives the epoch size, the evaluation cost, the warm-up and the evaluation schedule it measured.

The naive estimator (for comparison) is time per epoch up to the first evaluation times the median epochs of
the other submissions at a global batch within 1.5x.

This module is over 400 lines on purpose: both paths of the command's estimate (a benchmark, a short run)
and its printing stay beside the maths they share.
"""

import dataclasses
import json
import math
import os
import statistics

from mlperf_keras.compliance import rules
from mlperf_keras.reporting.convergence import BAND, EstimateError, interpolated_epochs, quantile, rcp_epochs
from mlperf_keras.reporting.run_features import as_number, logged_hyperparameters, short_run
from mlperf_keras.reporting.score import olympic_mean

def naive_time(short, epochs):
    """Naive seconds: time per epoch up to the first evaluation x epochs."""
    return short.first_eval_s / short.first_eval_epochs * epochs


def eval_period(schedule):
    """Median epochs between a run's evaluations; None with fewer than two."""
    steps = [b - a for a, b in zip(schedule, schedule[1:]) if b > a]
    return statistics.median(steps) if steps else None


def warmup_s(short, steady_epoch_s):
    """Seconds of the first evaluation's training not explained by steady training: start-up inside run_start,
    compilation, warm-up."""
    return short.train_end_s - short.first_eval_epochs * steady_epoch_s


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
    eval_s: float
    steady_source: str


def predict_run(short, epochs, warmup, period, steady_model=None):
    """Seconds for a run whose short run is `short` to converge at `epochs` (a continuous convergence point).

    Training-only seconds per epoch: measured where the short run timed two or more epochs; else from the first
    evaluation's training (train_end_s / its epochs) by `steady_model` (a SteadyModel fitted on other runs of the
    same software) where given, else that time less `warmup` seconds (from elsewhere: other runs, or a benchmark's
    warm-up steps). The run stops at the first of its evaluations (every `period` epochs after the first) at or
    after `epochs`; every synchronous evaluation costs what the first one did, asynchronous ones only the last
    one's latency.
    """
    first_per_epoch = short.train_end_s / short.first_eval_epochs
    if short.steady_epoch_s:
        steady, source = short.steady_epoch_s, "measured: epochs timed after the first"
    elif steady_model is not None:
        steady, source = steady_model.steady(first_per_epoch), f"first training by {steady_model}"
    else:
        steady = (short.train_end_s - min(warmup or 0.0, 0.9 * short.train_end_s)) / short.first_eval_epochs
        source = "first training less warm-up"
    stop = quantize(epochs, short.first_eval_epochs, period)
    later = stop - short.first_eval_epochs
    if short.eval_overlaps:
        evaluating = short.eval_s
    else:
        further = later / period if period else 0
        evaluating = short.eval_s + further * (short.later_eval_s if short.later_eval_s is not None else short.eval_s)
    seconds = short.train_end_s + later * steady + evaluating
    return Prediction(seconds, stop, steady, warmup_s(short, steady), short.eval_s, source)


@dataclasses.dataclass
class SteadyModel:
    """steady seconds per epoch = slope x first-training seconds per epoch - offset, fitted on other runs.

    The offset is the warm-up (compilation, start-up) spread over the first epochs; a slope above 1 is what an
    asynchronous evaluation takes from the training it overlaps (absent from the first epoch, which no evaluation
    overlaps). Fitted by least squares on relative residuals, so that small systems (a second per epoch) weigh as
    much as large ones."""
    slope: float
    offset: float
    points: int

    def steady(self, first_per_epoch):
        # Never below a tenth of the first epoch: a fit cannot make a run faster than that.
        return max(self.slope * first_per_epoch - self.offset, 0.1 * first_per_epoch)

    def __str__(self):
        return f"{self.slope:.3f} x first - {self.offset:.3g} s ({self.points} submissions)"

    @classmethod
    def fit(cls, pairs):
        """pairs: [(first-training seconds per epoch, steady seconds per epoch)]; None under two distinct ones."""
        pairs = [(x, y) for x, y in pairs if x > 0 and y > 0]
        if len({round(x, 6) for x, _ in pairs}) < 2:
            return None
        # Minimise sum(((slope x - offset - y) / y)^2): linear in (slope, offset).
        a11 = sum((x / y) ** 2 for x, y in pairs)
        a12 = -sum(x / y ** 2 for x, y in pairs)
        a22 = sum(1 / y ** 2 for x, y in pairs)
        b1 = sum(x / y for x, y in pairs)
        b2 = -sum(1 / y for x, y in pairs)
        det = a11 * a22 - a12 * a12
        if abs(det) < 1e-12 * max(a11 * a22, 1e-300):
            return None
        return cls((b1 * a22 - a12 * b2) / det, (a11 * b2 - a12 * b1) / det, len(pairs))


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


# -- the command's estimate -------------------------------------------------------------------------------------

# Samples in one epoch, in the benchmark's unit: ImageNet-2012's and COCO-2017's training images (rules.TRAIN_SAMPLES);
# NCF: MovieLens-20M's 19,861,770 training positives (20,000,263 ratings less one held out for each of 138,493
# users) with 4 negatives each, the reference's (mlcommons/training recommendation/pytorch/ncf.py, --negative_samples
# 4). GNMT and Transformer count tokens, whose number per epoch depends on the prepared dataset: --epoch_samples.
EPOCH_SAMPLES = {**rules.TRAIN_SAMPLES, "ncf": 19861770 * (1 + 4)}
# Epochs between evaluations (MLPerf's cadence: ResNet every 4, the others every epoch) for the evaluation count.
EVAL_PERIOD = {"resnet": 4}
# The 1.0.0 RCPs were made at the v1.0 targets, which for resnet (75.9% top-1), ssd (23.0 mAP) and maskrcnn
# (0.377/0.339) are v0.7's: a round whose target equals v0.7's may use them.
RCP_ROUND = "0.7"


def read_benchmark(path, model):
    """The last result for `model` in a JSON or JSON-lines file of mlperf_keras.benchmark (--json_out)."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as error:
        raise EstimateError(f"--from_benchmark {path}: {error.strerror or error}") from None
    results = []
    try:
        results = [json.loads(text)]
    except ValueError:
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    results.append(json.loads(line))
                except ValueError:
                    raise EstimateError(f"--from_benchmark {path}: line {number} is not JSON") from None
    ours = [r for r in results if isinstance(r, dict) and r.get("model") == model and r.get("loop_samples_per_s")]
    if not ours:
        raise EstimateError(f"--from_benchmark {path}: no mlperf_keras.benchmark result for {model} "
                            f"(a result has 'model' and 'loop_samples_per_s')")
    return ours[-1]


def read_short_run(path, benchmark):
    """(ShortRun, logged global batch or None) of a short run's MLLOG file; EstimateError says why not."""
    from mlperf_keras.reporting.logfiles import read_events

    try:
        events, _, _ = read_events(path)
    except OSError as error:
        raise EstimateError(f"--from_log {path}: {error.strerror or error}") from None
    events = sorted(events, key=lambda e: e.time_ms)
    found = logged_hyperparameters(events, float("inf"))
    logged = str(found.get("submission_benchmark", "")).lower()
    logged = rules.BENCHMARK_ALIASES.get(logged, logged)
    if logged and logged != benchmark:
        raise EstimateError(f"--from_log {path} is a {logged} run, not {benchmark}")
    starts = [e for e in events if e.key == "run_start"]
    if not starts:
        raise EstimateError(f"--from_log {path}: no run_start (not an MLPerf log, or the run never started)")
    short = short_run(events, starts[0].time_ms, whole=True)
    if short is None:
        raise EstimateError(f"--from_log {path}: no evaluation after run_start: run until the first evaluation")
    return short, as_number(found.get("global_batch_size"))


def _part(value, source, unit=""):
    return {"value": value, "source": source, "unit": unit}


def estimate(model, ruleset, batch, gpus, benchmark, own=(), published=(), scaling_efficiency=None,
             eval_seconds=None, warmup_seconds=None, epoch_samples=None, short=None, short_source=None):
    """The estimate as a dict: prediction (minutes: median, low, high) or unknown (with why), and its parts.

    benchmark: a mlperf_keras.benchmark result (the training rate); or short: the ShortRun of a short training
    run's log (short_source names it), which gives the first training, the steady epoch and the evaluation cost.
    """
    result = {"model": model, "ruleset": ruleset, "global_batch_size": batch, "gpus": gpus, "estimate": True,
              "parts": {}, "unknown": []}
    parts = result["parts"]
    epochs = None
    if rules.mlperf_target(model, ruleset) is None:
        result["unknown"].append(f"{model} is not part of MLPerf v{ruleset} (no quality target)")
    elif own:
        epochs = interpolated_epochs(list(own), batch, "your runs")
    if epochs is None and rules.mlperf_target(model, ruleset) == rules.mlperf_target(model, RCP_ROUND):
        epochs = rcp_epochs(model, batch)
    if epochs is None and published:
        epochs = interpolated_epochs(list(published), batch, f"published v{ruleset} closed-division runs")
    if epochs is None:
        has_rcp = model in ("resnet", "ssd", "maskrcnn")
        why = (f"no RCP for {model} at the v{ruleset} target" if has_rcp else f"mlperf-logging has no RCP for {model}")
        result["unknown"].append(f"epochs to converge: {why}, and no runs of {model} at v{ruleset} were given "
                                 f"(--runs, or --published with a training_results_v{ruleset} folder)")
    else:
        parts["epochs"] = _part([epochs.median, epochs.low, epochs.high], epochs.source, "epochs (median, 10%, 90%)")

    if short is not None:
        return _estimate_from_short_run(result, epochs, short, short_source, warmup_seconds)
    demo = (benchmark or {}).get("demo")
    samples = epoch_samples or (demo or {}).get("epoch_samples") or EPOCH_SAMPLES.get(model)
    if samples is None:
        result["unknown"].append(f"epoch size: {model} counts tokens and an epoch's tokens depend on the prepared "
                                 f"dataset (give --epoch_samples)")
    else:
        parts["epoch_samples"] = _part(samples, "--epoch_samples" if epoch_samples else
                                       f"the demo's data: {demo['steps_per_epoch']} steps of the benchmark's batch"
                                       if demo else "training-set size")

    rate = None
    if benchmark is None:
        result["unknown"].append("training rate: no benchmark or short run (--from_benchmark, --run_benchmark "
                                 "or --from_log)")
    else:
        bench_batch = benchmark.get("global_batch_size")
        if gpus and (not benchmark.get("accelerators") or str(benchmark.get("accelerator")).lower() == "cpu"):
            result["unknown"].append(f"training rate: the benchmark ran on {benchmark.get('accelerator') or 'a CPU'}"
                                     f" without accelerators; {gpus} GPUs need a benchmark on one")
        if bench_batch and gpus and benchmark.get("accelerators"):
            per_gpu_then = bench_batch / max(1, benchmark["accelerators"])
            if abs(per_gpu_then * gpus - batch) > 1e-6:
                result["unknown"].append(f"training rate: the benchmark ran {per_gpu_then:g} per GPU, the "
                                         f"estimate needs {batch / gpus:g} (benchmark at that batch)")
        bench_gpus = max(1, benchmark.get("accelerators") or 1)
        wanted = gpus or bench_gpus
        efficiency = 1.0 if scaling_efficiency is None else scaling_efficiency
        measured = _training_rate(benchmark)
        rate = measured * wanted / bench_gpus * (efficiency if wanted != bench_gpus else 1.0)
        data = ("fed from the demo's data" if demo else "fed from prepared data" if "fed_samples_per_s" in benchmark
                else "synthetic data")
        parts["rate"] = _part(measured, f"measured: mlperf_keras.benchmark on {bench_gpus} x "
                              f"{benchmark.get('accelerator')}, {benchmark.get('backend')} {benchmark.get('precision')}"
                              f", {data}", f"{benchmark.get('unit', 'samples')}/s")
        if wanted != bench_gpus:
            parts["scaling_efficiency"] = _part(efficiency, "measured (--scaling_efficiency)"
                                                if scaling_efficiency is not None else "assumed")
        parts["rate_at_gpus"] = _part(rate, f"rate x {wanted}/{bench_gpus} GPUs x efficiency", parts["rate"]["unit"])
    eval_source = "measured (--eval_seconds)" if eval_seconds is not None else "assumed (not measured)"
    warmup_source = "measured (--warmup_seconds)" if warmup_seconds is not None else "assumed (not measured)"
    if demo and eval_seconds is None:
        eval_seconds, eval_source = demo["eval_s"], (f"measured: the benchmark's second evaluation pass over the "
                                                     f"demo's {demo['eval_samples']:,} eval samples")
    if demo and warmup_seconds is None and benchmark is not None:
        warmup_seconds, warmup_source = demo_warmup(benchmark)
    parts["eval_seconds"] = _part(eval_seconds or 0.0, eval_source, "s per evaluation")
    parts["warmup_seconds"] = _part(warmup_seconds or 0.0, warmup_source, "s")
    parts["init"] = _part(0.0, "outside time-to-train (MLPerf times run_start..run_stop; init precedes it)", "s")
    if result["unknown"]:
        result["minutes"] = None
        return result

    period = EVAL_PERIOD.get(model, 1)
    schedule = (demo or {}).get("eval_epochs")

    def stop_and_evaluations(epoch_count):
        if not schedule:
            return epoch_count, math.ceil(epoch_count / period)
        # The run stops at the first of its evaluations at or after the convergence point (the last: max_epochs).
        stop = next((e for e in schedule if e >= epoch_count - 1e-9), schedule[-1])
        return stop, sum(1 for e in schedule if e <= stop)

    def minutes(epoch_count):
        stop, evaluations = stop_and_evaluations(epoch_count)
        return ((warmup_seconds or 0.0) + stop * samples / rate + evaluations * (eval_seconds or 0.0)) / 60

    result["minutes"] = {"median": minutes(epochs.median), "low": minutes(epochs.low),
                         "high": minutes(epochs.high)}
    if schedule:
        parts["stop_epochs"] = _part([stop_and_evaluations(e)[0] for e in (epochs.median, epochs.low, epochs.high)],
                                     "the first of the demo's evaluations at or after the epochs",
                                     "epochs (median, 10%, 90%)")
    result["band_covers"] = "run-to-run spread of epochs to converge only (rate, eval and warm-up as given)"
    return result


def _training_rate(benchmark):
    """The rate training runs at: fed by the input pipeline where the benchmark timed that (--data_dir, --demo),
    else the step on one resident batch (synthetic data)."""
    return benchmark.get("fed_samples_per_s") or benchmark["loop_samples_per_s"]


def demo_warmup(benchmark):
    """(seconds, source) a demo benchmark measured inside run_start..run_stop besides steady steps and evaluations:
    the start-up on the clock, the first step's excess over a steady one (compilation), the first evaluation's
    excess over the second."""
    demo = benchmark["demo"]
    step_s = benchmark["samples_per_step"] / _training_rate(benchmark)
    compiling = max(0.0, benchmark["first_step_s"] - step_s)
    first_eval = max(0.0, demo["first_eval_s"] - demo["eval_s"])
    return (demo["startup_on_clock_s"] + compiling + first_eval,
            f"measured: start-up on the clock {demo['startup_on_clock_s']:.2f} s "
            f"({', '.join(demo['startup_on_clock'])}), first step's compilation {compiling:.2f} s, first evaluation's {first_eval:.2f} s")


def _estimate_from_short_run(result, epochs, short, source, warmup_seconds):
    """The estimate from a short run's log: predict_run at the epochs' median and band."""
    parts = result["parts"]
    # The short run's own cadence where it evaluated twice or more (the ResNet demo evaluates every epoch), else
    # MLPerf's.
    period = short.eval_period or EVAL_PERIOD.get(result["model"], 1)
    parts["first_training"] = _part(short.train_end_s, f"measured: {source} up to its first evaluation "
                                    f"({short.first_eval_epochs:g} epochs)", "s")
    if short.steady_epoch_s is None:
        parts["warmup_seconds"] = _part(warmup_seconds or 0.0, "measured (--warmup_seconds)"
                                        if warmup_seconds is not None else "assumed (not measured: the short run "
                                        "timed no epoch after the first)", "s")
    parts["eval_seconds"] = _part(short.eval_s, f"measured: {source}'s first evaluation"
                                  + (" (beside training: only the last one's latency counts)"
                                     if short.eval_overlaps else ""), "s")
    if short.later_eval_s is not None:
        parts["later_eval_seconds"] = _part(short.later_eval_s, f"measured: {source}'s later evaluations (median)",
                                            "s per evaluation")
    parts["init"] = _part(0.0, "outside time-to-train (MLPerf times run_start..run_stop; init precedes it)", "s")
    if epochs is None:
        result["minutes"] = None
        return result
    predictions = [predict_run(short, e, warmup_seconds or 0.0, period) for e in (epochs.median, epochs.low,
                                                                                   epochs.high)]
    parts["steady_epoch"] = _part(predictions[0].steady_epoch_s, predictions[0].steady_source, "s")
    parts["stop_epochs"] = _part([p.epochs for p in predictions], f"the first evaluation at or after the epochs "
                                 f"(every {period:g} epochs after the first)", "epochs (median, 10%, 90%)")
    result["minutes"] = dict(zip(("median", "low", "high"), (p.seconds / 60 for p in predictions)))
    result["band_covers"] = "run-to-run spread of epochs to converge only"
    return result


def describe(estimate_):
    """Lines for the terminal."""
    name = f"{estimate_['model']} v{estimate_['ruleset']}, global batch {estimate_['global_batch_size']:g}"
    if estimate_.get("gpus"):
        name += f", {estimate_['gpus']} GPUs"
    lines = []
    if estimate_["minutes"] is None:
        lines.append(f"{name}: time-to-train unknown")
        lines += [f"  unknown: {why}" for why in estimate_["unknown"]]
    else:
        m = estimate_["minutes"]
        places = 1 if m["median"] >= 10 else 2   # a demo's half minute is not "0.4 min (0.4-0.4)"
        lines.append(f"{name}: estimated time-to-train {m['median']:.{places}f} min (10-90%: {m['low']:.{places}f}-"
                     f"{m['high']:.{places}f}; the band is the {estimate_['band_covers']})")
    for key, part in estimate_["parts"].items():
        value = part["value"]
        text = ", ".join(f"{v:.3g}" for v in value) if isinstance(value, list) else _number_text(value)
        lines.append(f"  {key.replace('_', ' ')} {text} {part['unit']}".rstrip() + f", {part['source']}")
    return "\n".join(lines)


def _number_text(value):
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def markdown_line(estimate_):
    """One line of report.md."""
    m = estimate_["minutes"]
    when = f"{m['median']:.1f} min (10-90%: {m['low']:.1f}-{m['high']:.1f})" if m else \
        "unknown: " + "; ".join(estimate_["unknown"])
    rate = estimate_["parts"].get("rate_at_gpus")
    rate_text = f", {rate['value']:,.0f} {rate['unit']}" if rate else ""
    epochs = estimate_["parts"].get("epochs")
    epochs_text = f", {epochs['value'][0]:.1f} epochs ({epochs['source']})" if epochs else ""
    return (f"- ESTIMATE {estimate_['model']} v{estimate_['ruleset']} batch {estimate_['global_batch_size']:g} on "
            f"{estimate_.get('gpus') or '?'} GPUs: {when}{rate_text}{epochs_text}")


def read_estimates(paths):
    """The estimates in the JSON files (as the command wrote them); EstimateError names a file that is not one."""
    found = []
    for path in paths:
        try:
            with open(path) as handle:
                data = json.load(handle)
        except (OSError, ValueError) as error:
            raise EstimateError(f"--estimate {path}: not an estimate JSON ({error})") from None
        if not isinstance(data, dict) or not data.get("estimate") or "model" not in data:
            raise EstimateError(f"--estimate {path}: not written by python -m mlperf_keras.estimate")
        data["path"] = path
        found.append(data)
    return found


def estimates_markdown(estimates, results=()):
    """A report.md section: each estimate beside the measured/published scores of the same benchmark."""
    lines = ["", "## Estimates (predicted, not measured)", "",
             "| benchmark | round | GPUs | global batch | time-to-train | kind | source |",
             "|---|---|---:|---:|---|---|---|"]
    rows = []
    for e in estimates:
        m = e.get("minutes")
        text = f"{m['median']:.2f} min ({m['low']:.2f}-{m['high']:.2f})" if m else "unknown"
        rows.append((e["model"], str(e["ruleset"]), str(e.get("gpus") or "?"), f"{e['global_batch_size']:g}", text,
                     "**estimate**", os.path.basename(e["path"])))
        for result in results:
            if result.benchmark == e["model"] and result.score_min is not None:
                batch = result.used[0].global_batch_size if result.used else None
                rows.append((result.benchmark, str(result.ruleset), str(result.used[0].device_count or "?"),
                             f"{batch:g}" if batch else "?", f"{result.score_min:.2f} min", "measured",
                             result.system))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
