"""report.md: the tables and charts of one report, on one page, in the order a reader wants them."""

import collections
import os
import re

import pandas as pd

from mlperf_keras.compliance import rules
from mlperf_keras.reporting.markdown import table
from mlperf_keras.reporting.parse import display_path
from mlperf_keras.reporting.systems import device_words
from mlperf_keras.reporting.tables import pivot_for_display

# Above these sizes a table goes to its CSV only, so report.md stays readable for a whole published round.
MAX_MARKDOWN_ROWS = 60
MAX_PIVOT_COLUMNS = 12
MAX_COMPLIANCE_ROWS = 30

_MINUTES = "{:.2f}"
_RATE = "{:,.0f}"
_PCT = "{:.0f}%"
_TIMES = "{:.2f}x"
_COUNT = "{:.0f}"   # counts, seeds and batch sizes: integers ("{:g}" printed seed 1629120000 as 1.62912e+09)


def render_report(report, log_dirs, out_dir, baseline):
    frames = report.frames
    kind, counted = device_words(frames["runs"]["gpu_type"]) if "gpu_type" in frames["runs"] else ("GPU", "GPU")
    parts = [_header(report, log_dirs), _identity_section(report)]
    parts.append(_section("MLPerf results", table(
        frames["scores"], {"score_min": _MINUTES, "runs_used": _COUNT, "runs_required": _COUNT,
                           "non_converged": _COUNT, "devices": _COUNT},
        ["benchmark", "system", "ruleset", "devices", "runs_used", "runs_required", "non_converged", "score_min",
         "status", "submittable", "notes"]) + _rules_used(frames["scores"]),
        "Score: `run_stop - run_start` in minutes; of the first N runs (N = 5 or 10 by benchmark; NCF v0.5: the "
        "first 50 converged of at most 100) the fastest and the slowest are dropped and the rest averaged, as "
        "`mlperf_logging.result_summarizer` does. One non-converged run may stand in for the slowest; more make "
        "the result invalid. *submittable* also needs every run to pass the official compliance checker."))
    parts.append(_section(f"Time to train (minutes) by benchmark, {kind} type and {counted} count",
                          _pivot_or_pointer(frames["time_to_train"]),
                          "`*`: not a valid MLPerf score (too few runs or too many non-converged): the mean of the "
                          "converged runs, shown so configurations can still be compared. `n/c`: no run converged.",
                          _image(report, "time_to_train")))
    parts.append(_speedup_section(frames, baseline, report.speedup_notes))
    parts.append(_section(f"Scaling with {counted} count (against the 1-{counted} run)", table(
        frames["scaling"], {"devices": _COUNT, "time_to_train_min": _MINUTES, "ttt_speedup": _TIMES, "ttt_efficiency_pct": _PCT,
                            "throughput_samples_per_s": _RATE, "throughput_speedup": _TIMES,
                            "throughput_efficiency_pct": _PCT}),
        f"Efficiency = speedup / {counted} count. Time-to-train scaling includes seed-to-seed variation in epochs to "
        "converge; throughput scaling does not. CPU runs scale by worker count."))
    parts.append(_section("Throughput (samples/s)", table(
        frames["throughput"], {"devices": _COUNT, "throughput_samples_per_s": _RATE, "std_samples_per_s": _RATE,
                               "per_device_samples_per_s": _RATE},
        ["benchmark", "system", "gpu_type", "devices", "throughput_samples_per_s", "std_samples_per_s",
         "per_device_samples_per_s", "runs", "source"]),
        "Median of per-epoch throughput in each run, averaged over runs.", _image(report, "throughput")))
    parts.append(_section("Epochs to converge per seed", _capped(
        "epochs_summary", frames["epochs_summary"], {"runs": _COUNT, "converged": _COUNT, "mean": "{:.2f}", "std": "{:.2f}", "min": "{:g}", "median": "{:g}",
                                   "max": "{:g}", "global_batch_size": _COUNT}),
        "`seed:epochs` lists every run; `n/c`: did not converge. Statistics are over converged runs.",
        _image(report, "epochs_per_seed")))
    parts.append(_section("Quality curves", "", "", _image(report, "quality_curves")))
    parts.append(_section("Runs", _capped(
        "runs", frames["runs"], {"workers": _COUNT, "seed": _COUNT, "time_to_train_min": _MINUTES, "throughput_samples_per_s": _RATE,
                         "epochs_to_converge": "{:g}", "quality_target": "{:g}"},
        ["file", "benchmark", "system", "workers", "seed", "ruleset", "status", "time_to_train_min",
         "epochs_to_converge", "final_quality", "quality_target", "throughput_samples_per_s", "compliance",
         "missing"])))
    parts.append(_compliance_section(report))
    parts.append(_section("Problems", _problems_summary(report.problems, log_dirs)))
    parts.append(_submission_section(report, out_dir))
    return "\n".join(p for p in parts if p)


def _header(report, log_dirs):
    benchmarks = sorted({r.benchmark for r in report.records})
    systems = sorted({r.system for r in report.records})
    lines = ["# MLPerf Training report", "",
             f"Generated by `python -m mlperf_keras.report` from {', '.join(f'`{d}`' for d in log_dirs)}: "
             f"{len(report.records)} runs of {len(benchmarks)} benchmarks ({', '.join(benchmarks) or 'none'}) "
             f"on {len(systems)} systems."]
    skipped = report.skipped
    if skipped:
        kinds = collections.Counter(problem_kind(p.reason) for p in skipped)
        example = {}
        for problem in skipped:
            example.setdefault(problem_kind(problem.reason), problem.reason)
        shown = [f"{example[kind]} ({count})" for kind, count in kinds.most_common(5)]
        lines += ["", f"**{len(skipped)} inputs were skipped** (see Problems): " + "; ".join(shown)
                      + (f"; and {len(kinds) - 5} more kinds" if len(kinds) > 5 else "")]
    demo = [r for r in report.records if r.demo]
    if demo:
        lines += ["", f"**{len(demo)} of the runs are demo runs** (built-in demo data, or a quality target below "
                      "MLPerf's): their times are not comparable with MLPerf results."]
    return "\n".join(lines) + "\n"


def _capped(name, frame, formats=None, columns=None):
    """The table in markdown, or a pointer to its CSV when it is too long to read on one page."""
    if len(frame) > MAX_MARKDOWN_ROWS:
        return f"{len(frame)} rows: see `tables/{name}.csv`.\n"
    return table(frame, formats, columns)


def _pivot_or_pointer(ttt):
    pivot = pivot_for_display(ttt)
    if len(pivot.columns) - 1 > MAX_PIVOT_COLUMNS:
        return (f"{len(pivot.columns) - 1} systems: too many columns for one table; see `tables/time_to_train.csv` "
                "and the MLPerf results above.\n")
    return table(pivot)


def _rules_used(scores):
    if scores.empty:
        return ""
    lines = ["", "Scoring rules used:"]
    for rule, count in scores["rule"].value_counts().sort_index().items():
        lines.append(f"- {rule} ({count} results)")
    return "\n".join(lines) + "\n"


def _identity_section(report):
    """How systems were identified, and what the logs' platform strings show (nothing is merged)."""
    if not report.records:
        return ""
    methods = collections.Counter()
    for record in report.records:
        methods[re.sub(r"^folder .*?(, | \()", r"folder\1", record.identified_by).split(",")[0].split(" (")[0]] += 1
    systems = len({r.system for r in report.records})
    lines = ["## Systems", "",
             f"{systems} systems. A run in a submission layout (`<org>/results/<system>/...`) belongs to its folder, "
             "with the accelerator model and count (accelerators_per_node x number_of_nodes) from "
             "`<org>/systems/<system>.json` (v0.5: `results/<system>/entry.json`); runs of different folders are "
             "never pooled. Other runs are identified by submission_platform + accelerator + count. Per system: "
             "`tables/scores.csv` column `identified_by`.", ""]
    lines += [f"- {count} runs identified by {method}" for method, count in sorted(methods.items())]
    for note in report.identity_notes[:20]:
        lines.append(f"- {note}")
    if len(report.identity_notes) > 20:
        lines.append(f"- ... {len(report.identity_notes) - 20} more such notes")
    return "\n".join(lines) + "\n"


def problem_kind(reason):
    """A problem's reason without its particulars (quoted lines, numbers, file names): what aggregates."""
    kind = re.split(r" \(|: '|: \"|; ", reason)[0]
    kind = re.sub(r"\b[\w.-]+\.(txt|log|json)\b", "FILE", kind)
    kind = re.sub(r"\d+(\.\d+)?", "N", kind)
    return kind[:160]


def _problems_summary(problems, roots):
    """One line per kind of problem with its count and one example file; every problem is in problems.csv."""
    if not problems:
        return "None.\n"
    kinds = collections.OrderedDict()
    for problem in problems:
        key = (problem.skipped, problem_kind(problem.reason))
        kinds.setdefault(key, []).append(problem)
    frame = pd.DataFrame([{"count": len(group), "skipped": skipped, "kind": group[0].reason[:200],
                           "example": display_path(group[0].path, roots)}
                          for (skipped, _), group in sorted(kinds.items(), key=lambda item: -len(item[1]))])
    return (f"{len(problems)} problems of {len(kinds)} kinds (every one in `tables/problems.csv`). "
            "*skipped*: the file was not used; otherwise the run is used and the problem noted. "
            "*kind* quotes the example's reason.\n\n" + table(frame, {"count": _COUNT}))


def _section(title, body, note="", image=""):
    text = f"## {title}\n\n"
    if body:
        text += body + "\n"
    if note:
        text += note + "\n\n"
    if image:
        text += image + "\n"
    return text


def _image(report, name):
    png = [p for p in report.chart_paths if os.path.basename(p) == f"{name}.png"]
    return f"![{name}](charts/{name}.png)\n" if png else ""


def _speedup_section(frames, baseline, notes):
    if not baseline:
        families = sorted(set(frames["time_to_train"]["family"])) if len(frames["time_to_train"]) else []
        shown = ", ".join(f"`{f}`" for f in families[:15]) + (f" ... ({len(families)} in all)" if len(families) > 15
                                                                else "")
        hint = ("Pass `--baseline SYSTEM` for the speedup of each system over another"
                + (f" (one of: {shown})." if families else "."))
        return _section("Speedup", "", hint)
    speedup = frames.get("speedup")
    note = ("Speedup = baseline time-to-train / system time-to-train (same benchmark, any GPU count); "
            "per_device_speedup divides it by (system GPUs / baseline GPUs), the counts from the logs or the "
            "systems JSON.")
    if notes:
        note += " " + " ".join(notes)
    return _section(f"Speedup over {baseline}", _capped("speedup", speedup, {
        "devices": _COUNT, "baseline_devices": _COUNT, "baseline_min": _MINUTES, "system_min": _MINUTES,
        "speedup": _TIMES, "per_device_speedup": _TIMES}), note)


def _compliance_section(report):
    counts = collections.Counter((r.benchmark, r.compliance.status if r.compliance else "not checked")
                                 for r in report.records)
    lines = ["## Compliance (official checker)", ""]
    if not report.records:
        return "\n".join(lines + ["No runs.", ""])
    lines.append("Published logs are checked with `mlperf_logging.compliance_checker` at their own round's "
                 "ruleset (0.6.0, 0.7.0, ...), never a later one; mlperf-logging has no v0.5 ruleset, so v0.5 logs are "
                 "*unsupported* (no ruleset for this round). Logs written by mlperf_keras are checked at the newest "
                 "ruleset that knows their benchmark (" + ", ".join(f"{b} {r}" for b, r in rules.CHECKER_RULESET.items() if r)
                 + "). No official ruleset knows ncf, so ncf is *unsupported*, never *pass*; its logs are still run "
                 "through this project's NCF rules (`mlperf_keras/compliance/ncf.yaml`, not an official ruleset) "
                 "and that verdict is shown as the detail. The checker also requires the MLPerf quality target to "
                 "be reached, so demo runs fail that rule by design.")
    lines.append("")
    for benchmark in sorted({b for b, _ in counts}):
        summary = ", ".join(f"{n} {status}" for (b, status), n in sorted(counts.items()) if b == benchmark)
        lines.append(f"- **{benchmark}**: {summary}")
    # Every failing log, and unsupported ones whose project rules did not come out ok.
    details = [r for r in report.records if r.compliance and r.compliance.status != "pass"
               and not (r.compliance.status == "unsupported" and r.compliance.detail.endswith(": ok"))]
    if details:
        lines += ["", "| file | benchmark | system | verdict | ruleset | detail |", "|---|---|---|---|---|---|"]
        for record in details[:MAX_COMPLIANCE_ROWS]:
            detail = record.compliance.detail.replace("|", "\\|")
            lines.append(f"| {display_path(record.path, report.roots)} | {record.benchmark} | {record.system} "
                         f"| {record.compliance.status} | {record.compliance.ruleset or ''} | {detail[:300]} |")
        if len(details) > MAX_COMPLIANCE_ROWS:
            lines.append(f"\n{len(details) - MAX_COMPLIANCE_ROWS} more not passing: see `tables/runs.csv` "
                         "(columns compliance, compliance_detail).")
    return "\n".join(lines) + "\n"


def _submission_section(report, out_dir):
    lines = ["## Submission layout", "",
             f"Written under `{out_dir}`: `systems/<system>.json` and `results/<system>/<benchmark>/result_<i>.txt` "
             "(copies of the logs, first runs first)."]
    files = sorted(report.system_files.items())
    common = set.intersection(*(set(empty) for _, (_, empty, _) in files)) if files else set()
    if common:
        lines.append("- In every system file, fill in the fields no log can know: "
                     + ", ".join(f"`{f}`" for f in sorted(common)) + ".")
    if files:
        lines.append("- `number_of_nodes` was assumed to be 1, and `host_processors_per_node` too where the logs do "
                     "not give the host's sockets: check them.")
    for system, (path, still_empty, notes) in files:
        extra = [f for f in still_empty if f not in common]
        if extra or notes:
            lines.append(f"- `{os.path.relpath(path, out_dir)}`: "
                         + (("also fill in " + ", ".join(f"`{f}`" for f in extra) + ". ") if extra else "")
                         + " ".join(notes))
    for note in report.submission_notes:
        lines.append(f"- {note}")
    if report.ruleset_views:
        lines += ["", "No single official ruleset knows all six benchmarks, and `result_summarizer` stops at a "
                      "benchmark its ruleset lacks, so `by_ruleset/<R>/` holds the part of the submission each "
                      "ruleset knows (ncf is in none). Check and score each with the official tools:", "", "```"]
        for ruleset, folder in sorted(report.ruleset_views.items()):
            lines.append(f"python -m mlperf_logging.package_checker {folder} training {ruleset}")
            lines.append(f"python -m mlperf_logging.result_summarizer {folder} training {ruleset} "
                         f"--csv {os.path.join(folder, 'summary.csv')}")
        lines.append("```")
    return "\n".join(lines) + "\n"
