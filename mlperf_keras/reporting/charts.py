"""The report's charts (PNG and SVG), drawn with matplotlib's Agg backend (no display needed).

- time_to_train.png: grouped bars, x = benchmark, one bar per system x GPU count (the study's Figure 1).
- throughput.png: one panel per benchmark, bars per GPU count and system, dashed = linear scaling
  from the 1-GPU run (the study's Figure 2: throughput where time-to-train is seed-dominated).
- epochs_per_seed.png: one panel per benchmark, each seed's epochs-to-converge per system.
- quality_curves.png: eval quality per epoch for every run, target dashed.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from mlperf_keras.reporting.systems import bar_label, device_words, is_cpu_family  # noqa: E402
from mlperf_keras.reporting.tables import MLPERF_SCORE  # noqa: E402



def _save(figure, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for extension in ("png", "svg"):
        path = os.path.join(out_dir, f"{name}.{extension}")
        figure.savefig(path, dpi=130 if extension == "png" else None, bbox_inches="tight")
        paths.append(path)
    plt.close(figure)
    return paths


def distinct_colors(count):
    """`count` colours no two alike: tab10, then tab20, then evenly spaced hues at three lightness levels.

    tab10 alone repeats from the eleventh system on, which made different systems look the same.
    """
    if count <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(count)]
    if count <= 20:
        return [plt.get_cmap("tab20")(i) for i in range(count)]
    from matplotlib.colors import hsv_to_rgb

    levels = ((0.85, 0.85), (0.55, 0.95), (0.95, 0.55))   # (saturation, value)
    hues = int(np.ceil(count / len(levels)))
    colors = []
    for i in range(count):
        saturation, value = levels[i % len(levels)]
        hue = ((i // len(levels)) + (i % len(levels)) / len(levels)) / hues
        colors.append(tuple(hsv_to_rgb((hue % 1.0, saturation, value))) + (1.0,))
    return colors


def _series_colors(series):
    """series: [(family, devices)] -> color per series; one distinct colour per family, darker with more devices."""
    families = list(dict.fromkeys(family for family, _ in series))
    colors = {}
    for family, base in zip(families, distinct_colors(len(families))):
        counts = [d for f, d in series if f == family]
        for position, count in enumerate(counts):
            # Lighter for fewer devices: mix with white, from 45% (fewest) to 0% (most).
            mix = 0.45 * (1 - (position + 1) / len(counts)) if len(counts) > 1 else 0.0
            colors[(family, count)] = tuple(c + (1 - c) * mix for c in base[:3]) + (1.0,)
    return colors


def _series_key(devices):
    return -1 if devices is None or pd.isna(devices) else int(devices)


def _use_log_scale(values):
    values = [v for v in values if v and not pd.isna(v) and v > 0]
    return len(values) > 1 and max(values) / min(values) > 30


def time_to_train_chart(ttt, out_dir):
    """Grouped bars of time-to-train; hatched bars are not valid MLPerf scores (means of converged runs)."""
    data = ttt.dropna(subset=["time_to_train_min"])
    if data.empty:
        return []
    data = data.assign(devices_key=data["devices"].map(_series_key))
    benchmarks = sorted(data["benchmark"].unique())
    series = list(data.sort_values(["family", "devices_key"])[["family", "devices_key"]]
                  .drop_duplicates().itertuples(index=False, name=None))
    colors = _series_colors(series)
    present = {b: [sr for sr in series if not data[(data["benchmark"] == b) & (data["family"] == sr[0])
                                                   & (data["devices_key"] == sr[1])].empty] for b in benchmarks}
    width = min(0.8 / max(len(p) for p in present.values()), 0.3)
    figure, axis = plt.subplots(figsize=(max(6.0, 2.5 + sum(0.5 + 0.35 * len(p) for p in present.values())), 4.6))
    any_hatched = False
    for b_index, benchmark in enumerate(benchmarks):
        # Only the systems that ran this benchmark share its slot, centred on the tick.
        for s_index, (family, devices) in enumerate(present[benchmark]):
            row = data[(data["benchmark"] == benchmark) & (data["family"] == family)
                       & (data["devices_key"] == devices)].iloc[0]
            x = b_index + width * (s_index - (len(present[benchmark]) - 1) / 2)
            value = row["time_to_train_min"]
            hatched = row["basis"] != MLPERF_SCORE
            any_hatched |= hatched
            low, high = value - row["min_run_min"], row["max_run_min"] - value
            axis.bar(x, value, width * 0.92, color=colors[(family, devices)], edgecolor="black", linewidth=0.5,
                     hatch="//" if hatched else None,
                     yerr=[[max(low, 0)], [max(high, 0)]] if row["converged_runs"] > 1 else None,
                     capsize=2, error_kw={"linewidth": 0.8})
            top = max(value, row["max_run_min"]) if row["converged_runs"] > 1 else value
            axis.annotate(_minutes_label(value), (x, top), xytext=(0, 2), textcoords="offset points",
                          ha="center", va="bottom", fontsize=7, rotation=90 if len(series) > 3 else 0)
    axis.set_xticks(range(len(benchmarks)))
    axis.set_xticklabels(benchmarks)
    axis.set_xlim(-0.6, len(benchmarks) - 0.4)
    axis.set_xlabel("Benchmark")
    axis.set_ylabel("Time to train (minutes)")
    highest = np.nanmax(np.maximum(data["time_to_train_min"], data["max_run_min"].fillna(0)))
    if _use_log_scale(data["time_to_train_min"]):
        axis.set_yscale("log")
        axis.set_ylabel("Time to train (minutes, log scale)")
        axis.set_ylim(top=highest * 4)
    else:
        axis.set_ylim(0, highest * 1.2)
    kind, counted = device_words(data["family"])
    axis.set_title(f"Time to train by benchmark, {kind} type and {counted} count (lower is better)")
    handles = [Patch(facecolor=colors[s], edgecolor="black", label=bar_label(s[0], None if s[1] == -1 else s[1]))
               for s in series]
    if any_hatched:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//",
                             label="not a valid MLPerf score\n(mean of converged runs)"))
    handles.append(Line2D([], [], color="black", marker="_", markersize=8, linewidth=0.8,
                          label="fastest to slowest\nconverged run"))
    axis.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axis.grid(axis="y", alpha=0.3)
    axis.set_axisbelow(True)
    return _save(figure, out_dir, "time_to_train")


def _minutes_label(value):
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}" if value >= 10 else f"{value:.2f}"


def _panels(count, width_each=4.2, height=3.6):
    columns = min(count, 3)
    rows = int(np.ceil(count / columns))
    # A single panel still gets room for the figure title and legend.
    figure, axes = plt.subplots(rows, columns, figsize=(max(6.5, width_each * columns), height * rows), squeeze=False)
    for axis in axes.flat[count:]:
        axis.set_visible(False)
    return figure, list(axes.flat[:count])


def throughput_chart(throughput, out_dir, name="throughput",
                     title="Training throughput by {counted} count (higher is better; error bars: std over runs)",
                     unit="samples/s"):
    """title: {counted} becomes "GPU", or "worker" when every run is a CPU run."""
    data = throughput.dropna(subset=["throughput_samples_per_s"])
    if data.empty:
        return []
    title = title.format(counted=device_words(data["family"])[1])
    data = data.assign(devices_key=data["devices"].map(_series_key))
    benchmarks = sorted(data["benchmark"].unique())
    families = sorted(data["family"].unique())
    family_colors = dict(zip(families, distinct_colors(len(families))))
    figure, axes = _panels(len(benchmarks))
    for axis, benchmark in zip(axes, benchmarks):
        subset = data[data["benchmark"] == benchmark]
        counts = sorted(subset["devices_key"].unique())
        present = [f for f in families if f in set(subset["family"])]
        width = min(0.8 / len(present), 0.35)
        drew_ideal = False
        peak = (subset["throughput_samples_per_s"] + subset["std_samples_per_s"].fillna(0)).max()
        for f_index, family in enumerate(present):
            rows = subset[subset["family"] == family].set_index("devices_key")
            offset = width * (f_index - (len(present) - 1) / 2)
            xs = [c_index + offset for c_index, c in enumerate(counts) if c in rows.index]
            values = [rows.loc[c, "throughput_samples_per_s"] for c in counts if c in rows.index]
            errors = [np.nan_to_num(rows.loc[c, "std_samples_per_s"]) for c in counts if c in rows.index]
            axis.bar(xs, values, width * 0.92, yerr=errors, capsize=2, color=family_colors[family],
                     edgecolor="black", linewidth=0.5, label=family)
            for x, v, e in zip(xs, values, errors):
                axis.annotate(_short_number(v), (x, v + e), xytext=(0, 3), textcoords="offset points",
                              ha="center", va="bottom", fontsize=7)
            if 1 in rows.index and len(rows.index) > 1:
                # Linear scaling from the 1-device throughput: how far each bar falls short of it.
                base = rows.loc[1, "throughput_samples_per_s"]
                ideal = [(c_index + offset, base * c) for c_index, c in enumerate(counts) if c > 0 and c in rows.index]
                drew_ideal = True
                peak = max(peak, max(p[1] for p in ideal))
                axis.plot([p[0] for p in ideal], [p[1] for p in ideal], linestyle="--", marker="_",
                          color=family_colors[family], linewidth=1, label="_nolegend_")
        axis.set_xticks(range(len(counts)))
        axis.set_xticklabels(["unknown" if c == -1 else str(c) for c in counts])
        axis.set_xlim(-0.6, len(counts) - 0.4)
        # Headroom above the tallest bar or ideal point for value labels and the legend.
        axis.set_ylim(0, peak * (1.15 + 0.1 * len(present)))
        is_cpu = [is_cpu_family(f) for f in present]
        axis.set_xlabel("CPU workers" if all(is_cpu) else "GPUs (CPU runs: workers)" if any(is_cpu) else "GPUs")
        axis.set_ylabel(f"Throughput ({subset['unit'].iloc[0] if 'unit' in subset else unit})")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _short_number(value)))
        axis.set_title(benchmark)
        axis.grid(axis="y", alpha=0.3)
        axis.set_axisbelow(True)
        handles, labels = axis.get_legend_handles_labels()
        if drew_ideal:
            handles.append(Line2D([], [], linestyle="--", color="grey", label="linear scaling from 1"))
        axis.legend(handles=handles, fontsize=7, frameon=False, loc="upper left")
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    return _save(figure, out_dir, name)


def _short_number(value):
    if value == 0:
        return "0"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def epochs_per_seed_chart(per_seed, out_dir):
    """Each run's epochs-to-converge per system: dots (seed-labelled when few), mean bar, min-max line.

    A run that did not converge has no epochs-to-converge: it is drawn as a hollow red marker in a band above a
    dashed line whose tick says "n/c", never at an epoch count of the axis."""
    if per_seed.empty:
        return []
    benchmarks = sorted(per_seed["benchmark"].unique())
    figure, axes = _panels(len(benchmarks), width_each=4.8, height=4.0)
    for axis, benchmark in zip(axes, benchmarks):
        subset = per_seed[per_seed["benchmark"] == benchmark]
        order = subset.assign(devices_key=subset["devices"].map(_series_key)).sort_values(["family", "devices_key"])
        systems = order["system"].drop_duplicates().tolist()
        done_all = subset.loc[subset["converged"], "epochs_to_converge"].dropna()
        low = done_all.min() if len(done_all) else 0
        high = done_all.max() if len(done_all) else 1
        fail_y = high + max(1.5, 0.2 * (high - low))   # the "n/c" band, above every epoch count
        any_failed = False
        for index, system in enumerate(systems):
            runs = subset[subset["system"] == system].reset_index(drop=True)
            offsets = np.linspace(-0.25, 0.25, len(runs)) if len(runs) > 1 else [0.0]
            done = runs[runs["converged"] & runs["epochs_to_converge"].notna()]
            if len(done):
                epochs = done["epochs_to_converge"]
                axis.vlines(index, epochs.min(), epochs.max(), color="grey", linewidth=0.8, zorder=1)
                axis.hlines(epochs.mean(), index - 0.32, index + 0.32, color="black", linewidth=2, zorder=3)
            label_seeds = len(runs) <= 5
            for offset, (_, run) in zip(offsets, runs.iterrows()):
                seed = "?" if pd.isna(run["seed"]) else str(int(run["seed"]))
                converged = run["converged"] and not pd.isna(run["epochs_to_converge"])
                y = run["epochs_to_converge"] if converged else fail_y
                any_failed |= not converged
                if converged:
                    axis.plot(index + offset, y, "o", color="tab:blue", markersize=5, alpha=0.75, zorder=2)
                else:
                    axis.plot(index + offset, y, "o", markerfacecolor="none", markeredgecolor="tab:red",
                              markersize=6, zorder=2)
                if label_seeds or not converged:
                    axis.annotate(seed, (index + offset, y), xytext=(2, 3), textcoords="offset points", fontsize=6,
                                  color="dimgray" if converged else "tab:red")
        axis.set_xticks(range(len(systems)))
        axis.set_xticklabels(systems, rotation=25, ha="right", fontsize=7)
        axis.set_ylabel("Epochs to converge")
        axis.set_title(benchmark)
        axis.set_xlim(-0.6, len(systems) - 0.4)
        bottom = max(0, low - 1.5)
        if any_failed:
            separator = (high + fail_y) / 2
            axis.axhline(separator, color="tab:red", linestyle="--", linewidth=0.8, zorder=1)
            ticks = [t for t in MaxNLocator(integer=True).tick_values(bottom, separator) if bottom <= t < separator]
            axis.set_yticks(ticks + [fail_y])
            axis.set_yticklabels([f"{t:g}" for t in ticks] + ["n/c"])
            axis.set_ylim(bottom, fail_y + 0.5 * (fail_y - separator))
        else:
            axis.yaxis.set_major_locator(MaxNLocator(integer=True))
            axis.set_ylim(bottom, high + 1.0)
        axis.grid(axis="y", alpha=0.3)
        axis.set_axisbelow(True)
    handles = [Line2D([], [], marker="o", linestyle="", color="tab:blue", label="one run (seed)"),
               Line2D([], [], color="black", linewidth=2, label="mean"),
               Line2D([], [], color="grey", linewidth=0.8, label="min-max")]
    if not per_seed["converged"].all() or per_seed["epochs_to_converge"].isna().any():
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="tab:red",
                              label="not converged (n/c: no epoch count)"))
    figure.suptitle("Epochs to converge per seed", fontsize=11)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.legend(handles=handles, loc="lower center", fontsize=8, frameon=False, ncol=4)
    return _save(figure, out_dir, "epochs_per_seed")


def quality_curves_chart(records, out_dir):
    records = [r for r in records if r.quality_curve]
    if not records:
        return []
    benchmarks = sorted({r.benchmark for r in records})
    figure, axes = _panels(len(benchmarks))
    for axis, benchmark in zip(axes, benchmarks):
        runs = [r for r in records if r.benchmark == benchmark]
        systems = sorted({r.system for r in runs})
        colors = dict(zip(systems, distinct_colors(len(systems))))
        for run in runs:
            points = [(e, _scalar_quality(v)) for e, v in run.quality_curve if e is not None]
            points = [(e, v) for e, v in points if v is not None]
            if points:
                axis.plot(*zip(*points), marker=".", linewidth=0.8, alpha=0.7, color=colors[run.system])
        targets = {r.quality_target for r in runs if r.quality_target is not None}
        for target in sorted(targets):
            axis.axhline(target, linestyle="--", color="black", linewidth=0.8)
        axis.set_title(benchmark + (" (min of box/mask mAP)" if benchmark == "maskrcnn" else ""))
        axis.set_xlabel("Epoch")
        axis.set_ylabel("Eval quality (benchmark metric)")
        axis.legend(handles=[Patch(color=colors[s], label=s) for s in systems], fontsize=6, frameon=False,
                    ncol=max(1, len(systems) // 25))
        axis.grid(alpha=0.3)
    figure.suptitle("Quality per epoch, every run (dashed: the target the runs stopped at)", fontsize=11)
    figure.tight_layout()
    return _save(figure, out_dir, "quality_curves")


def _scalar_quality(value):
    if isinstance(value, dict):
        numbers = [v for v in value.values() if isinstance(v, (int, float))]
        return min(numbers) if numbers else None
    return value if isinstance(value, (int, float)) else None
