"""The comparison tables, as pandas DataFrames in long form (one row per fact; CSV-ready).

Time-to-train per result is the MLPerf score when the result is valid, otherwise the mean of its
converged runs; the `basis` column always says which, so a provisional number is never mistaken
for a score.
"""

import numpy as np
import pandas as pd

from mlperf_keras.reporting.parse import display_path
from mlperf_keras.reporting.systems import bar_label, safe_name

MLPERF_SCORE = "MLPerf score"


def runs_table(records, roots=()):
    rows = []
    for r in sorted(records, key=lambda r: (r.benchmark, r.system, r.run_start_ms)):
        rows.append({
            "file": display_path(r.path, roots),
            "benchmark": r.benchmark,
            "system": r.system,
            "identified_by": r.identified_by,
            "round_from": r.round_source,
            "resumed": r.resumed,
            "gpu_type": r.gpu_type,
            "devices": r.device_count,
            "workers": r.num_workers,
            "seed": r.seed,
            "ruleset": r.ruleset,
            "status": r.status,
            "converged": r.converged,
            "time_to_train_min": r.time_to_train_min,
            "epochs_to_converge": r.epochs_to_converge,
            "final_quality": _format_quality(r.quality_curve[-1][1]) if r.quality_curve else None,
            "quality_target": r.quality_target,
            "throughput_samples_per_s": r.throughput,
            "compliance": r.compliance.status if r.compliance else None,
            "compliance_ruleset": r.compliance.ruleset if r.compliance else None,
            "compliance_detail": r.compliance.detail if r.compliance else None,
            "missing": ", ".join(r.missing),
            "notes": "; ".join(r.notes),
        })
    return pd.DataFrame(rows, columns=_RUN_COLUMNS)


_RUN_COLUMNS = ["file", "benchmark", "system", "identified_by", "round_from", "resumed", "gpu_type", "devices", "workers", "seed", "ruleset", "status",
                "converged", "time_to_train_min", "epochs_to_converge", "final_quality", "quality_target",
                "throughput_samples_per_s", "compliance", "compliance_ruleset", "compliance_detail",
                "missing", "notes"]


def _format_quality(value):
    if isinstance(value, dict):
        return ", ".join(f"{k} {v:.4g}" for k, v in value.items())
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def scores_table(results):
    rows = []
    for res in results:
        rows.append({
            "benchmark": res.benchmark,
            "system": res.system,
            "ruleset": res.ruleset,
            "runs_found": len(res.runs),
            "runs_used": len(res.used),
            "runs_required": res.required,
            "non_converged": res.non_converged,
            "score_min": res.score_min,
            "status": res.status,
            "submittable": res.submittable,
            "gpu_type": res.runs[0].gpu_type,
            "devices": res.runs[0].device_count,
            "identified_by": res.runs[0].identified_by,
            "rule": res.rule,
            "notes": "; ".join(res.notes),
        })
    return pd.DataFrame(rows, columns=["benchmark", "system", "ruleset", "runs_found", "runs_used", "runs_required",
                                       "non_converged", "score_min", "status", "submittable", "gpu_type", "devices",
                                       "identified_by", "rule", "notes"])


def time_to_train_table(results):
    """One row per result: benchmark x GPU type x GPU count with its time-to-train and basis."""
    rows = []
    for res in results:
        first = res.runs[0]
        converged = [r.time_to_train_min for r in res.used if r.converged]
        if res.score_min is not None:
            value, basis = res.score_min, MLPERF_SCORE
        elif converged:
            value, basis = float(np.mean(converged)), f"mean of {len(converged)} converged runs ({res.status})"
        else:
            value, basis = np.nan, f"no converged run ({res.status})"
        rows.append({
            "benchmark": res.benchmark, "ruleset": res.ruleset, "gpu_type": first.gpu_type,
            "family": first.family, "devices": first.device_count, "system": res.system,
            "time_to_train_min": value,
            "min_run_min": min(converged) if converged else np.nan,
            "max_run_min": max(converged) if converged else np.nan,
            "converged_runs": len(converged), "basis": basis,
        })
    return pd.DataFrame(rows, columns=["benchmark", "ruleset", "gpu_type", "family", "devices", "system",
                                       "time_to_train_min", "min_run_min", "max_run_min", "converged_runs",
                                       "basis"])


def matches_baseline(baseline, family, system, gpu_type, platform_part):
    wanted = baseline.strip().lower()
    candidates = {str(x).lower() for x in (family, system, gpu_type, platform_part, safe_name(family)) if x}
    return wanted in candidates or safe_name(wanted).lower() in candidates


def speedup_table(ttt, baseline):
    """Speedup of every other system over `baseline`, per benchmark, at any GPU count.

    speedup = baseline time / system time; per_device_speedup divides by the ratio of device counts
    (system devices / baseline devices), so an 8-GPU published system and a 1-GPU run of ours compare
    per GPU too. Both counts come from the logs or the systems JSON; unknown counts leave it empty.
    Results of different rounds are compared but the row says so (targets may differ).
    """
    columns = ["benchmark", "baseline", "baseline_devices", "baseline_ruleset", "system", "devices", "ruleset",
               "baseline_min", "system_min", "speedup", "per_device_speedup", "note"]
    if ttt.empty:
        return pd.DataFrame(columns=columns), []
    is_base = ttt.apply(lambda row: matches_baseline(baseline, row["family"], row["system"], row["gpu_type"],
                                                      str(row["family"]).split(" (")[0]), axis=1)
    base_rows = ttt[is_base]
    if base_rows.empty:
        known = sorted(set(ttt["family"]))
        shown = ", ".join(map(str, known[:20])) + (f" ... ({len(known)} in all)" if len(known) > 20 else "")
        return pd.DataFrame(columns=columns), [f"--baseline {baseline!r} matches no system; known: {shown}"]
    rows = []
    for _, b in base_rows.iterrows():
        others = ttt[(ttt["benchmark"] == b["benchmark"]) & (ttt["system"] != b["system"])
                     & (ttt["family"] != b["family"])]
        for _, o in others.iterrows():
            speedup = b["time_to_train_min"] / o["time_to_train_min"] if o["time_to_train_min"] else np.nan
            per_device = np.nan
            if _known(b["devices"]) and _known(o["devices"]) and b["devices"] and o["devices"]:
                per_device = speedup * float(b["devices"]) / float(o["devices"])
            note = "" if str(b["ruleset"]) == str(o["ruleset"]) else \
                f"different rounds ({b['ruleset']} vs {o['ruleset']}): targets may differ"
            rows.append({"benchmark": b["benchmark"], "baseline": b["system"], "baseline_devices": b["devices"],
                         "baseline_ruleset": b["ruleset"], "system": o["system"], "devices": o["devices"],
                         "ruleset": o["ruleset"], "baseline_min": b["time_to_train_min"],
                         "system_min": o["time_to_train_min"], "speedup": speedup,
                         "per_device_speedup": per_device, "note": note})
    notes = [] if rows else [f"no benchmark has both {baseline!r} and another system"]
    return pd.DataFrame(rows, columns=columns), notes


def _known(value):
    return value is not None and not pd.isna(value)


def scaling_table(ttt, throughput):
    """Speedup and efficiency of n devices against 1, from time-to-train and from throughput."""
    rows = []
    for (benchmark, family, ruleset), group in ttt.groupby(["benchmark", "family", "ruleset"], dropna=False):
        one = group[group["devices"] == 1]
        if one.empty:
            continue
        base_ttt = one["time_to_train_min"].iloc[0]
        tp_group = throughput[(throughput["benchmark"] == benchmark) & (throughput["family"] == family)]
        tp_one = tp_group[tp_group["devices"] == 1]["throughput_samples_per_s"]
        base_tp = tp_one.iloc[0] if len(tp_one) else np.nan
        for _, row in group.sort_values("devices").iterrows():
            n = row["devices"]
            if n is None or pd.isna(n):
                continue
            tp = tp_group[tp_group["devices"] == n]["throughput_samples_per_s"]
            tp = tp.iloc[0] if len(tp) else np.nan
            ttt_speedup = base_ttt / row["time_to_train_min"] if row["time_to_train_min"] else np.nan
            tp_speedup = tp / base_tp if base_tp else np.nan
            rows.append({"benchmark": benchmark, "family": family, "devices": int(n),
                         "time_to_train_min": row["time_to_train_min"], "ttt_speedup": ttt_speedup,
                         "ttt_efficiency_pct": 100.0 * ttt_speedup / n,
                         "throughput_samples_per_s": tp, "throughput_speedup": tp_speedup,
                         "throughput_efficiency_pct": 100.0 * tp_speedup / n})
    return pd.DataFrame(rows, columns=["benchmark", "family", "devices", "time_to_train_min", "ttt_speedup",
                                       "ttt_efficiency_pct", "throughput_samples_per_s", "throughput_speedup",
                                       "throughput_efficiency_pct"])


def throughput_table(records):
    rows = []
    for r in records:
        if r.throughput is not None:
            rows.append({"benchmark": r.benchmark, "family": r.family, "gpu_type": r.gpu_type,
                         "devices": r.device_count, "system": r.system, "throughput": r.throughput,
                         "source": r.throughput_source})
    columns = ["benchmark", "family", "gpu_type", "devices", "system", "throughput_samples_per_s",
               "std_samples_per_s", "per_device_samples_per_s", "runs", "source"]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows)
    frame["devices_key"] = frame["devices"].fillna(-1)
    out = []
    for keys, group in frame.groupby(["benchmark", "family", "gpu_type", "devices_key", "system"]):
        benchmark, family, gpu_type, devices_key, system = keys
        devices = None if devices_key == -1 else int(devices_key)
        mean = group["throughput"].mean()
        out.append({"benchmark": benchmark, "family": family, "gpu_type": gpu_type, "devices": devices,
                    "system": system, "throughput_samples_per_s": mean,
                    "std_samples_per_s": group["throughput"].std(ddof=1) if len(group) > 1 else np.nan,
                    "per_device_samples_per_s": mean / devices if devices else np.nan,
                    "runs": len(group), "source": ", ".join(sorted(set(group["source"])))})
    return pd.DataFrame(out, columns=columns)


def epochs_per_seed_table(records, roots=()):
    rows = [{"benchmark": r.benchmark, "system": r.system, "family": r.family, "devices": r.device_count,
             "global_batch_size": r.global_batch_size, "seed": r.seed, "converged": r.converged,
             "epochs_to_converge": r.epochs_to_converge, "file": display_path(r.path, roots)}
            for r in sorted(records, key=lambda r: (r.benchmark, r.system, r.seed if r.seed is not None else -1))]
    return pd.DataFrame(rows, columns=["benchmark", "system", "family", "devices", "global_batch_size", "seed",
                                       "converged", "epochs_to_converge", "file"])


def epochs_summary_table(per_seed):
    """Mean, std, min, median, max of epochs-to-converge per benchmark x system x batch size."""
    rows = []
    if per_seed.empty:
        return pd.DataFrame(columns=_EPOCH_SUMMARY_COLUMNS)
    keyed = per_seed.assign(batch_key=per_seed["global_batch_size"].fillna(-1))
    for (benchmark, system, batch), group in keyed.groupby(["benchmark", "system", "batch_key"]):
        epochs = group.loc[group["converged"], "epochs_to_converge"].dropna()
        seeds = ", ".join(f"{_seed_label(s)}:{_epoch_label(e)}" for s, e in
                          zip(group["seed"], group["epochs_to_converge"]))
        rows.append({"benchmark": benchmark, "system": system,
                     "global_batch_size": None if batch == -1 else batch,
                     "runs": len(group), "converged": len(epochs),
                     "mean": epochs.mean() if len(epochs) else np.nan,
                     "std": epochs.std(ddof=1) if len(epochs) > 1 else np.nan,
                     "min": epochs.min() if len(epochs) else np.nan,
                     "median": epochs.median() if len(epochs) else np.nan,
                     "max": epochs.max() if len(epochs) else np.nan,
                     "seed:epochs": seeds})
    return pd.DataFrame(rows, columns=_EPOCH_SUMMARY_COLUMNS)


_EPOCH_SUMMARY_COLUMNS = ["benchmark", "system", "global_batch_size", "runs", "converged", "mean", "std", "min",
                          "median", "max", "seed:epochs"]


def _seed_label(seed):
    return "?" if seed is None or pd.isna(seed) else str(int(seed))


def _epoch_label(epochs):
    if epochs is None or pd.isna(epochs):
        return "n/c"   # did not converge
    return f"{epochs:g}"


def pivot_for_display(ttt):
    """Benchmark rows x 'family xN' columns of time-to-train; '*' marks values that are not MLPerf scores."""
    if ttt.empty:
        return pd.DataFrame()
    frame = ttt.copy()
    several_rulesets = frame.groupby("benchmark")["ruleset"].nunique(dropna=False) > 1
    frame["row"] = [f"{b} ({r})" if several_rulesets.get(b, False) else b
                    for b, r in zip(frame["benchmark"], frame["ruleset"])]
    frame["column"] = [bar_label(f, None if pd.isna(d) else int(d)) for f, d in zip(frame["family"], frame["devices"])]
    frame["cell"] = [_ttt_cell(v, basis) for v, basis in zip(frame["time_to_train_min"], frame["basis"])]
    order = frame.sort_values(["family", "devices"])["column"].drop_duplicates().tolist()
    table = frame.pivot_table(index="row", columns="column", values="cell", aggfunc="first")
    table = table.reindex(columns=order).fillna("")
    table.index.name = "benchmark"
    table.columns.name = None
    return table.reset_index()


def _ttt_cell(value, basis):
    if value is None or pd.isna(value):
        return "n/c"
    return f"{value:.2f}" + ("" if basis == MLPERF_SCORE else "*")
