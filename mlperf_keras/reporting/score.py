"""MLPerf scoring: runs grouped into results, olympic mean, and an honest status for each result.

A result is one benchmark on one system under one ruleset. Its score follows
mlperf_logging.result_summarizer exactly (so the two agree to the digit): take the first N runs in
time order (N = rules.runs_per_result), sort the converged runs' times, drop the fastest, drop the
slowest unless a non-converged run already stands in for it, and average the rest. Too few runs, or
more non-converged runs than the rules allow, gives no score and says why.
"""

import collections
import dataclasses
from typing import List, Optional

from mlperf_keras.compliance import rules
from mlperf_keras.reporting.records import Problem


@dataclasses.dataclass
class Result:
    benchmark: str
    system: str
    ruleset: Optional[str]
    runs: list                      # every run of the group, in time order
    used: list                      # the runs the score is built from (what results/ holds)
    required: int
    non_converged: int
    score_min: Optional[float]      # MLPerf score in minutes, None if the result is not valid
    status: str                     # "scored" or why not
    notes: List[str] = dataclasses.field(default_factory=list)
    rule: str = ""                  # the round's scoring rule the score follows (rules.scoring_rule)

    @property
    def submittable(self):
        """Scored, every used run passes the official checker, and none is a demo run."""
        return (self.score_min is not None and not any(r.demo for r in self.used)
                and all(r.compliance is not None and r.compliance.status == "pass" for r in self.used))


def group_key(record):
    return (record.benchmark, record.system, record.ruleset)


def drop_duplicate_seeds(records):
    """MLPerf requires a different seed per run: keep the first run with each seed in a group.

    Returns (kept, problems). Runs that logged no seed are kept (noted as missing elsewhere).
    """
    seen, kept, problems = {}, [], []
    for record in sorted(records, key=lambda r: (r.run_start_ms, r.path)):
        if record.seed is None:
            kept.append(record)
            continue
        key = group_key(record) + (record.seed,)
        if key in seen:
            problems.append(Problem(record.path, f"seed {record.seed} already used by {seen[key].file_name} "
                                                 f"({record.benchmark} on {record.system}); every run needs its own seed"))
            continue
        seen[key] = record
        kept.append(record)
    return kept, problems


def olympic_mean(times, non_converged, max_dropped=rules.MAX_NON_CONVERGED):
    """result_summarizer's _compute_olympic_average: drop fastest, and slowest unless already dropped."""
    ordered = sorted(times)
    countable = ordered[max_dropped:len(ordered) - (max_dropped - non_converged)]
    if not countable:
        return None
    return sum(countable) / len(countable)


def score_group(runs, benchmark, ruleset):
    runs = sorted(runs, key=lambda r: (r.run_start_ms, r.path))
    system = runs[0].system
    required = rules.runs_per_result(benchmark, ruleset)
    attempts = runs[:rules.max_attempts(benchmark, ruleset)]
    notes = []
    if len(runs) > len(attempts):
        notes.append(f"used the first {len(attempts)} of {len(runs)} runs (by run_start time)")

    if rules.is_ncf_v05(benchmark, ruleset):
        result = _score_ncf_v05(runs, attempts, benchmark, system, ruleset, required, notes)
    else:
        result = _score_olympic(runs, attempts, benchmark, system, ruleset, required, notes)
    result.rule = rules.scoring_rule(benchmark, ruleset)
    resumed = [r for r in result.used if r.resumed]
    if resumed:
        # The clock may not be paused (training rules, "Run Results"): a run continued from a checkpoint never counts.
        result.score_min = None
        result.status = (f"not a valid MLPerf result: {len(resumed)} run(s) resumed from a checkpoint "
                         f"({', '.join(r.file_name for r in resumed[:3])})")
    return result


def _score_olympic(runs, attempts, benchmark, system, ruleset, required, notes):
    non_converged = sum(not r.converged for r in attempts)
    allowed = rules.max_non_converged(benchmark, ruleset)
    result = Result(benchmark, system, ruleset, runs, attempts, required, non_converged, None, "", notes)
    if len(attempts) < required:
        result.status = f"too few runs: {len(attempts)} of {required}"
    elif non_converged > allowed:
        result.status = f"too many non-converged runs: {non_converged} (at most {allowed} allowed)"
    else:
        times = [r.time_to_train_min for r in attempts if r.converged]
        result.score_min = olympic_mean(times, non_converged)
        result.status = "scored" if result.score_min is not None else "no countable runs"
    return result


def _score_ncf_v05(runs, attempts, benchmark, system, ruleset, required, notes):
    # v0.5 NCF: the first `required` converged runs among the first 100 make the result.
    used, converged = [], 0
    for run in attempts:
        if converged == required:
            break
        used.append(run)
        converged += run.converged
    non_converged = len(used) - converged
    result = Result(benchmark, system, ruleset, runs, used, required, non_converged, None, "", notes)
    if converged < required:
        result.status = f"too few converged runs: {converged} of {required}"
        return result
    times = [r.time_to_train_min for r in used if r.converged]
    result.score_min = olympic_mean(times, 0)
    result.status = "scored"
    return result


def score_all(records):
    """One Result per (benchmark, system, ruleset), sorted for stable tables."""
    groups = collections.defaultdict(list)
    for record in records:
        groups[group_key(record)].append(record)
    results = [score_group(runs, key[0], key[2]) for key, runs in groups.items()]
    for result in results:
        failing = [r for r in result.used if r.compliance is not None and r.compliance.status == "fail"]
        if failing:
            result.notes.append(f"{len(failing)} of {len(result.used)} runs fail the compliance checker")
        demo = [r for r in result.used if r.demo]
        if demo:
            result.notes.append(f"{len(demo)} demo runs (demo data or a target below MLPerf's)")
    return sorted(results, key=lambda r: (r.benchmark, r.system, str(r.ruleset)))
