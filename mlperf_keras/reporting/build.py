"""Builds the whole report from log folders: parse, check, score, tables, charts, submission layout.

Library entry point of `python -m mlperf_keras.report`; takes plain arguments, never reads flags.
Output under out_dir:
  report.md                      everything below in one readable page
  tables/*.csv                   the same tables, long form
  charts/*.png, charts/*.svg     the charts
  systems/<system>.json          MLPerf system descriptions (fields to fill are listed in report.md)
  results/<system>/<benchmark>/result_<i>.txt   MLPerf result files (copies of the logs)
  by_ruleset/<R>/{systems,results}              the same, split by the official ruleset that knows each
                                                benchmark (what result_summarizer can read whole)
"""

import dataclasses
import os
from typing import List, Optional

import pandas as pd

from mlperf_keras.config import counted
from mlperf_keras.reporting import charts, compliance, tables
from mlperf_keras.reporting.logfiles import find_log_files
from mlperf_keras.reporting.parse import display_path, parse_logs
from mlperf_keras.reporting.records import Problem
from mlperf_keras.reporting.render import render_report
from mlperf_keras.reporting.score import drop_duplicate_seeds, score_all
from mlperf_keras.reporting.submission import (prepare_output, system_description, write_results,
                                               write_ruleset_views, write_system_file)
from mlperf_keras.reporting.systems import identity_notes


class NothingToReport(Exception):
    """No MLPerf log under any of the folders: nothing is written (an empty report would look like a result)."""


@dataclasses.dataclass
class Report:
    records: list
    results: list
    problems: List[Problem]
    frames: dict                       # table name -> DataFrame
    chart_paths: list
    system_files: dict                 # system -> (path, [fields still empty], [notes])
    submission_notes: list             # e.g. a ruleset's runs not written because a newer one was
    speedup_notes: list                # e.g. --baseline matched nothing
    ruleset_views: dict                # checker ruleset -> folder with only the benchmarks it knows
    identity_notes: list = dataclasses.field(default_factory=list)   # shared platform strings, spelling variants
    roots: list = dataclasses.field(default_factory=list)            # the log folders, for display paths
    report_path: Optional[str] = None

    @property
    def skipped(self):
        return [p for p in self.problems if p.skipped]


def build_report(log_dirs, out_dir, baseline=None, overwrite=False, check_compliance=True, draw_charts=True,
                 default_round=None):
    """Write the report; returns a Report. Bad inputs become Problems, never exceptions.

    default_round: the round ("0.7") of published logs whose round neither their format nor a vX.Y folder
    in their path tells; it picks their scoring rules and compliance ruleset.
    """
    problems = [Problem(d, "not a folder") for d in log_dirs if not os.path.isdir(d)]
    folders = [d for d in log_dirs if os.path.isdir(d)]
    paths, empty, file_problems = find_log_files(folders, exclude=[out_dir])
    if not paths:
        unread = problems + file_problems
        example = f" ({counted(len(unread), 'input')} not read, e.g. {unread[0].path}: {unread[0].reason})" \
            if unread else ""
        raise NothingToReport(f"no MLPerf log under {', '.join(log_dirs)}{example}")
    prepare_output(out_dir, overwrite=overwrite)
    problems += file_problems
    problems += [Problem(folder, "no MLLOG log files in this folder") for folder in empty]

    records, parse_problems = parse_logs(paths, default_round=default_round)
    problems += parse_problems
    records, duplicate_problems = drop_duplicate_seeds(records)
    problems += duplicate_problems
    if check_compliance:
        for record in records:
            record.compliance = compliance.check_record(record)
    results = score_all(records)

    ttt = tables.time_to_train_table(results)
    throughput = tables.throughput_table(records)
    per_seed = tables.epochs_per_seed_table(records, folders)
    frames = {
        "runs": tables.runs_table(records, folders),
        "scores": tables.scores_table(results),
        "time_to_train": ttt,
        "throughput": throughput,
        "scaling": tables.scaling_table(ttt, throughput),
        "epochs_per_seed": per_seed,
        "epochs_summary": tables.epochs_summary_table(per_seed),
        "problems": _problems_frame(problems, folders),
    }
    speedup_notes = []
    if baseline:
        frames["speedup"], speedup_notes = tables.speedup_table(ttt, baseline)

    table_dir = os.path.join(out_dir, "tables")
    os.makedirs(table_dir, exist_ok=True)
    for name, frame in frames.items():
        frame.to_csv(os.path.join(table_dir, f"{name}.csv"), index=False)

    chart_paths = []
    if draw_charts:
        chart_dir = os.path.join(out_dir, "charts")
        chart_paths = (charts.time_to_train_chart(ttt, chart_dir) + charts.throughput_chart(throughput, chart_dir)
                       + charts.epochs_per_seed_chart(per_seed, chart_dir)
                       + charts.quality_curves_chart(records, chart_dir))

    system_files = {}
    by_system = {}
    for record in records:
        if record.own_log:   # published systems have their own systems JSON already
            by_system.setdefault(record.system, []).append(record)
    for system, runs in sorted(by_system.items()):
        fields, notes = system_description(runs)
        path, still_empty = write_system_file(out_dir, fields)
        system_files[system] = (path, still_empty, notes)
    chosen, submission_notes = write_results(out_dir, results)
    ruleset_views = write_ruleset_views(out_dir, chosen)

    report = Report(records, results, problems, frames, chart_paths, system_files,
                    submission_notes, speedup_notes, ruleset_views, identity_notes(records), folders)
    report.report_path = os.path.join(out_dir, "report.md")
    with open(report.report_path, "w") as handle:
        handle.write(render_report(report, log_dirs, out_dir, baseline))
    return report


def _problems_frame(problems, roots):
    return pd.DataFrame([{"file": display_path(p.path, roots), "skipped": p.skipped, "reason": p.reason}
                         for p in problems], columns=["file", "skipped", "reason"])


def summarize_problems(problems):
    """Lines for stderr: one per kind of problem, 'skipped|warning (N files): reason (e.g. path)'."""
    from mlperf_keras.reporting.render import problem_kind

    groups = {}
    for problem in problems:
        groups.setdefault((problem.skipped, problem_kind(problem.reason)), []).append(problem)
    lines = []
    for (skipped, _), group in sorted(groups.items(), key=lambda item: -len(item[1])):
        label = "skipped" if skipped else "warning"
        first = group[0]
        if len(group) == 1:
            lines.append(f"{label}: {first.path}: {first.reason}")
        else:
            lines.append(f"{label} ({len(group)} files): {first.reason} (e.g. {first.path})")
    return lines
