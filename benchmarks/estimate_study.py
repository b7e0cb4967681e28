"""The R740 study's figure as estimates: time-to-train of the six workloads on 1-4 NVIDIA T4 and 1-3 V100-PCIe.

    python benchmarks/estimate_study.py --benchmarks t4.jsonl v100.jsonl \
        --published /tmp/training_results_v0.5 /tmp/training_results_v0.6 [--ruleset 0.6] [--out study]

Per workload and GPU count it prints mlperf_keras.estimate's median and 10-90% band (minutes) for the presets
flags/r740_t4.flags and flags/r740_v100_pcie.flags (their per-GPU batch and precision), the V100/T4 speedup at
equal GPU count, and beside them every published result in the --published folders whose accelerator is a T4 or a
V100 PCIe card (by the accelerator name the submission's system description gives).

Where each number comes from, printed per row:
- the training rate: a result in --benchmarks (python -m mlperf_keras.benchmark --flagfile=flags/r740_t4.flags
  --model=X --json_out=t4.jsonl, on one GPU of that kind) that ran on that accelerator at the preset's per-GPU
  batch is "measured". Without one the rate is **assumed**: the result of another accelerator for the same
  workload, scaled by the ratio of peak TFLOP/s (the preset's --peak_tflops over that result's); peak ratios do
  not predict real step rates well (memory bandwidth, batch size and kernels differ), so an assumed row is a guess.
- more than one GPU: the one-GPU rate times the GPU count (scaling efficiency 1.0, assumed, unless
  --scaling_efficiency is given);
- epochs to converge: as python -m mlperf_keras.estimate takes them (RCPs where the round's target is theirs,
  else the published runs of --published at --ruleset); evaluation and warm-up time are not included (0, assumed).
Writes <out>/study.json and <out>/study.md.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlperf_keras.reporting import estimate as maths  # noqa: E402
from mlperf_keras.reporting import convergence  # noqa: E402
from mlperf_keras.compliance import rules  # noqa: E402

WORKLOADS = ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "ncf")
FLAGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flags")
# (flagfile, label, GPU counts of the study, how a submission's accelerator name is recognised as this card)
PRESETS = (("r740_t4", "T4", (1, 2, 3, 4), re.compile(r"\bT4\b", re.I)),
           ("r740_v100_pcie", "V100-PCIe", (1, 2, 3), re.compile(r"V100S?[- ]?PCIE", re.I)))


def read_preset(name):
    """{peak_tflops, precision, batch_per_accelerator: {model: n}} of flags/<name>.flags."""
    values = {"batch_per_accelerator": {}}
    with open(os.path.join(FLAGS_DIR, f"{name}.flags")) as handle:
        for line in handle:
            key, _, value = line.strip().partition("=")
            if key == "--peak_tflops":
                values["peak_tflops"] = float(value)
            elif key == "--precision":
                values["precision"] = value
            elif key == "--batch_per_accelerator":
                values["batch_per_accelerator"] = {m: int(n) for m, _, n in
                                                   (item.partition("=") for item in value.split(","))}
    return values


def read_results(paths):
    """Every mlperf_keras.benchmark result (with a rate) in the JSON / JSON-lines files."""
    results = []
    for path in paths:
        with open(path) as handle:
            text = handle.read()
        try:
            found = [json.loads(text)]
        except ValueError:
            found = [json.loads(line) for line in text.splitlines() if line.strip()]
        results += [r for r in found if isinstance(r, dict) and r.get("model") and r.get("loop_samples_per_s")]
    return results


def per_gpu_batch(result):
    return result["global_batch_size"] / max(1, result.get("accelerators") or 1)


def peak_of(result):
    """The peak TFLOP/s the benchmark assumed (it logs achieved TFLOP/s and their fraction of the peak), else the
    accelerator's from mlperf_keras.system's table (Mask R-CNN's benchmark counts no FLOPs)."""
    if result.get("train_tflops_per_s") and result.get("fraction_of_peak"):
        return result["train_tflops_per_s"] / result["fraction_of_peak"]
    from mlperf_keras import system

    try:
        return system.peak_tflops(str(result.get("accelerator")), str(result.get("precision")))
    except KeyError:   # a precision the table has no peak for
        return None


def training_rate(model, preset, results):
    """(a one-GPU benchmark-like dict for maths.estimate, 'measured'/'assumed ...') or (None, why)."""
    flagfile, label, _, card = preset
    settings = read_preset(flagfile)
    wanted = settings["batch_per_accelerator"].get(model)
    mine = [r for r in results if r["model"] == model and card.search(str(r.get("accelerator")))
            and (wanted is None or abs(per_gpu_batch(r) - wanted) < 1e-6)]
    if mine:
        chosen = dict(mine[-1])
        rate = chosen["loop_samples_per_s"] / max(1, chosen.get("accelerators") or 1)
        return {**chosen, "loop_samples_per_s": rate, "accelerators": 1, "global_batch_size": per_gpu_batch(chosen),
                "accelerator": label}, f"measured on {chosen.get('accelerator')}"
    others = [r for r in results if r["model"] == model and peak_of(r) and str(r.get("accelerator")).lower() != "cpu"]
    if not others:
        return None, f"no benchmark of {model} in --benchmarks to measure or scale"
    source = others[-1]
    ratio = settings["peak_tflops"] / peak_of(source)
    rate = source["loop_samples_per_s"] / max(1, source.get("accelerators") or 1) * ratio
    batch = wanted if wanted is not None else per_gpu_batch(source)
    return ({**source, "loop_samples_per_s": rate, "accelerators": 1, "global_batch_size": batch,
             "accelerator": label},
            f"assumed: {source.get('accelerator')}'s rate x {settings['peak_tflops']:g}/{peak_of(source):g} peak "
            f"TFLOP/s (its batch {per_gpu_batch(source):g}/GPU)")


def global_batch(model, preset, gpus, benchmark):
    """The preset's per-GPU batch x GPUs; NCF (no preset entry) keeps the benchmark's global batch."""
    per_gpu = read_preset(preset[0])["batch_per_accelerator"].get(model)
    return per_gpu * gpus if per_gpu is not None else benchmark["global_batch_size"]


def published_rows(folders):
    """[(benchmark, round, system, accelerator, GPUs, minutes)] of scored published results on a study card."""
    if not folders:
        return []
    from mlperf_keras.reporting.logfiles import find_log_files
    from mlperf_keras.reporting.parse import parse_logs
    from mlperf_keras.reporting.score import score_all

    files, _, _ = find_log_files(folders)
    records, _ = parse_logs(files)
    rows = []
    for result in score_all(r for r in records if r.benchmark in WORKLOADS):
        accelerator = str(result.used[0].accelerator_model or "")
        if result.score_min is None or not any(p[3].search(accelerator) for p in PRESETS):
            continue
        rows.append((result.benchmark, result.ruleset, result.system, accelerator,
                     result.used[0].accelerator_count, result.score_min))
    return rows


ROUNDS = ("0.5", "0.6", "0.7")


def round_for(model, ruleset):
    """ruleset, or the latest earlier round with a target for model (NCF ran only in v0.5)."""
    earlier = [r for r in ROUNDS if float(r) <= float(ruleset) and rules.mlperf_target(model, r) is not None]
    return ruleset if rules.mlperf_target(model, ruleset) is not None or not earlier else earlier[-1]


def estimate_row(model, model_round, preset, gpus, benchmark, rate_source, table, scaling_efficiency, epoch_samples):
    row = {"model": model, "ruleset": model_round, "card": preset[1], "gpus": gpus, "rate_source": rate_source}
    if benchmark is None:
        row.update(minutes=None, unknown=[rate_source])
        return row
    batch = global_batch(model, preset, gpus, benchmark)
    scaled = {**benchmark, "global_batch_size": batch / gpus}
    found = maths.estimate(model, model_round, batch, gpus, scaled, published=table,
                           scaling_efficiency=scaling_efficiency, epoch_samples=(epoch_samples or {}).get(model))
    row.update(global_batch_size=batch, minutes=found["minutes"], unknown=found["unknown"],
               epochs_source=found["parts"].get("epochs", {}).get("source"))
    return row


def study(results, folders, ruleset, scaling_efficiency=None, epoch_samples=None):
    """{"rows": [...], "published": [...]}: one row per (workload, card, GPUs); each published result on a study
    card with our estimate for that card at its GPU count (at the preset's per-GPU batch, not the submission's)."""
    rows, published = [], []
    found_published = published_rows(folders)
    tables = {}

    def table_of(model, round_):
        if (model, round_) not in tables:
            tables[model, round_] = convergence.table_from_logs(folders, model, round_) if folders else []
        return tables[model, round_]

    for model in WORKLOADS:
        model_round = round_for(model, ruleset)
        table = table_of(model, model_round)
        for preset in PRESETS:
            benchmark, rate_source = training_rate(model, preset, results)
            for gpus in preset[2]:
                rows.append(estimate_row(model, model_round, preset, gpus, benchmark, rate_source, table,
                                         scaling_efficiency, epoch_samples))
            for benchmark_name, result_round, system, accelerator, count, minutes in found_published:
                if benchmark_name == model and preset[3].search(accelerator):
                    their_round = round_for(model, result_round)
                    ours = estimate_row(model, their_round, preset, int(count or 1), benchmark, rate_source,
                                        table_of(model, their_round), scaling_efficiency, epoch_samples)
                    published.append({"model": model, "ruleset": result_round, "system": system,
                                      "accelerator": accelerator, "gpus": count, "minutes": minutes,
                                      "estimate": ours["minutes"], "estimate_round": their_round})
    by_key = {(r["model"], r["card"], r["gpus"]): r for r in rows}
    for row in rows:
        if row["card"] == "V100-PCIe":
            t4 = by_key.get((row["model"], "T4", row["gpus"]))
            if t4 and t4["minutes"] and row["minutes"]:
                row["speedup_over_t4"] = t4["minutes"]["median"] / row["minutes"]["median"]
    return {"ruleset": ruleset, "rows": rows, "published": published}


def _minutes(value):
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def markdown(found):
    lines = ["| workload (round) | GPUs | card | time-to-train, min (10-90%) | V100/T4 | training rate | epochs |",
             "|---|---|---|---|---|---|---|"]
    for row in found["rows"]:
        minutes = row["minutes"]
        when = ("unknown: " + "; ".join(row["unknown"]) if not minutes else
                f"{_minutes(minutes['median'])} ({_minutes(minutes['low'])}-{_minutes(minutes['high'])})")
        speedup = f"{row['speedup_over_t4']:.2f}x" if row.get("speedup_over_t4") else ""
        lines.append(f"| {row['model']} (v{row['ruleset']}) | {row['gpus']} | {row['card']} | {when} | {speedup} | {row['rate_source']} "
                     f"| {row.get('epochs_source') or ''} |")
    lines += ["", f"Published results on these cards in the given folders: {len(found['published'])}"]
    for p in found["published"]:
        ours = (f"estimate for {p['gpus']} of this card type (v{p['estimate_round']}): {_minutes(p['estimate']['median'])}"
                f" min" if p["estimate"] else "no estimate")
        lines.append(f"- {p['model']} v{p['ruleset']} {p['system']}: {p['gpus']} x {p['accelerator']}, "
                     f"{p['minutes']:.1f} min; {ours}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", nargs="+", required=True, help="mlperf_keras.benchmark --json_out files")
    parser.add_argument("--published", nargs="*", default=[], help="training_results_v0.X folders")
    parser.add_argument("--ruleset", default="0.6", help="the round whose targets and published epochs to use "
                        "(a workload not in that round: its latest earlier one, e.g. NCF v0.5)")
    parser.add_argument("--scaling_efficiency", type=float, default=None)
    parser.add_argument("--epoch_samples", nargs="*", default=[], metavar="MODEL=N",
                        help="samples per epoch for the token-counted workloads, e.g. gnmt=... transformer=...")
    parser.add_argument("--out", default="study")
    args = parser.parse_args(argv)
    try:
        results = read_results(args.benchmarks)
        epoch_samples = {m: float(n) for m, _, n in (item.partition("=") for item in args.epoch_samples)}
        found = study(results, args.published, args.ruleset, args.scaling_efficiency, epoch_samples)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = markdown(found)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "study.json"), "w") as handle:
        json.dump(found, handle, indent=2, default=str)
    with open(os.path.join(args.out, "study.md"), "w") as handle:
        handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
