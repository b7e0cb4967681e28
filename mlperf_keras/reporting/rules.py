"""MLPerf Training rules the reporter applies: benchmarks, runs per result, targets, checker rulesets.

Sources: /work/shared/MLPERF.md (rounds v0.5-v0.7) and the installed mlperf-logging package
(`benchmark_meta._ALL_RESULT_FILE_COUNTS`, the compliance checker's `training_<ruleset>` folders).
Kept as plain tables so a reader can check each number against its source.
"""

from mlperf_keras.config import MODEL_NAMES, QUALITY_TARGETS, first_epoch_number

KNOWN_BENCHMARKS = MODEL_NAMES

# Runs that make one result. NCF differs by round: in v0.5 a submitter ran up to 100 runs and the
# first 50 that converged made the result (MLPERF.md section 2); mlperf-logging's table says 10,
# which is what its package checker expects for any later ruleset.
_RUNS_PER_RESULT = {"resnet": 5, "ssd": 5, "maskrcnn": 5, "gnmt": 10, "transformer": 10, "ncf": 10}
_NCF_V05_CONVERGED_RUNS = 50
_NCF_V05_MAX_ATTEMPTS = 100

# Olympic scoring drops the fastest and the slowest run. From v0.7 one non-converged run may stand
# in for the slowest; two invalidate the result (MLPERF.md; result_summarizer's max_dropped_scores=1).
MAX_NON_CONVERGED = 1

# The newest compliance-checker ruleset whose config knows each benchmark *as this project trains it*
# ("ssd" in 2.0+ is RetinaNet, so SSD-ResNet34 stops at 1.0.0). None: no ruleset knows it.
CHECKER_RULESET = {
    "resnet": "4.0.0",
    "ssd": "1.0.0",
    "maskrcnn": "3.1.0",
    "gnmt": "0.7.0",
    "transformer": "0.7.0",
    "ncf": None,
}
# v0.6 logs (':::MLL <seconds> key: json') only parse with the 0.6.0 checker, which knows all but ncf.
_V06_CHECKER_RULESET = "0.6.0"


def checker_ruleset(benchmark, log_format="mllog"):
    """The compliance-checker ruleset for a log of this benchmark and format; None if none knows it."""
    if log_format == "mll_v0.6" and CHECKER_RULESET.get(benchmark):
        return _V06_CHECKER_RULESET
    return CHECKER_RULESET.get(benchmark)


# For benchmarks no ruleset knows, the project's own rules file is run on the checker engine of this
# ruleset (its log parser and rule semantics); the verdict stays "unsupported".
PROJECT_RULES_ENGINE = "0.7.0"

def short_ruleset(ruleset):
    """'0.7.0' / '0.7' / 0.7 -> '0.7'; None stays None."""
    if ruleset is None:
        return None
    parts = str(ruleset).strip().split(".")
    return ".".join(parts[:2])


def is_ncf_v05(benchmark, ruleset):
    # NCF logs without a ruleset are v0.5 logs: NCF was not run in v0.6 and was removed in v0.7.
    return benchmark == "ncf" and short_ruleset(ruleset) in (None, "0.5")


def runs_per_result(benchmark, ruleset):
    """How many (converged, for NCF v0.5) runs one MLPerf result needs."""
    if is_ncf_v05(benchmark, ruleset):
        return _NCF_V05_CONVERGED_RUNS
    return _RUNS_PER_RESULT[benchmark]


def max_attempts(benchmark, ruleset):
    """How many runs may be looked at to build one result (the first ones, in time order)."""
    if is_ncf_v05(benchmark, ruleset):
        return _NCF_V05_MAX_ATTEMPTS
    return _RUNS_PER_RESULT[benchmark]


def max_non_converged(benchmark, ruleset):
    if is_ncf_v05(benchmark, ruleset):
        return _NCF_V05_MAX_ATTEMPTS - _NCF_V05_CONVERGED_RUNS
    return MAX_NON_CONVERGED


def mlperf_target(benchmark, ruleset):
    """The MLPerf quality target as the round's logs state it (float, or dict for maskrcnn); None if unknown.

    The targets live in config.QUALITY_TARGETS (in training units); from v0.7 BLEU is logged as a fraction and
    Mask R-CNN accuracy as {"BBOX": .., "SEGM": ..}.
    """
    short = short_ruleset(ruleset)
    target = QUALITY_TARGETS.get(benchmark, {}).get(short)
    if target is None:
        return None
    if benchmark == "maskrcnn":
        return {"BBOX": target[0], "SEGM": target[1]}
    if benchmark in ("gnmt", "transformer") and first_epoch_number(short) == 1:
        return target / 100
    return target


def epochs_zero_based(ruleset):
    """Epochs are numbered from 0 in v0.5/v0.6 and from 1 from v0.7 on; None if unknown."""
    short = short_ruleset(ruleset)
    if short is None:
        return None
    return first_epoch_number(short) == 0
