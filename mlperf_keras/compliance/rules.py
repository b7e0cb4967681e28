"""MLPerf Training rules the reporter and the workloads apply: benchmarks, runs per result, targets, checker rulesets.

Sources: the MLPerf training rules of each round (mlcommons/training_policies), the published results
(mlcommons/training_results_v0.5 ... v0.7) and the installed mlperf-logging package
(`benchmark_meta._ALL_RESULT_FILE_COUNTS`, the compliance checker's `training_<ruleset>` folders).
Kept as plain tables so a reader can check each number against its source.
"""

from mlperf_keras.config import MODEL_NAMES, QUALITY_TARGETS, first_epoch_number

KNOWN_BENCHMARKS = MODEL_NAMES

# Names published logs use for our benchmarks (Google's v0.6 Mask R-CNN logs say "mask").
BENCHMARK_ALIASES = {"mask": "maskrcnn", "mask_rcnn": "maskrcnn", "resnet50": "resnet", "resnet-50": "resnet",
                     "ssd-resnet34": "ssd", "ssd_resnet34": "ssd"}

# Training-set sizes (samples per epoch) a consistent train_samples must match, within 5%: ImageNet-2012's
# 1,281,167 training images; COCO 2017's 117,266 training images with annotations (118,287 with all images).
# In training_results_v0.7 @0a8a85a209c8e45b661596c382cc20f4e32fd2fe the result_0 logs say 1,281,167 or 1,277,952
# for resnet, 117,266 or 118,287 for ssd, and 118,287 but also 40,000 / 42,000 / 80,000 for maskrcnn (not
# epoch sizes). Translation sizes differ with each submitter's preprocessing and are not checked.
TRAIN_SAMPLES = {"resnet": 1281167, "ssd": 117266, "maskrcnn": 117266}
TRAIN_SAMPLES_TOLERANCE = 0.05
# Epoch/block timings must cover at least this fraction of run_start..run_stop to give a throughput.
MIN_TIMED_FRACTION = 0.5

# Runs that make one result. NCF differs by round: in v0.5 a submitter ran up to 100 runs and the
# first 50 that converged made the result (training_policies training_rules.adoc @6e02163, see V05_RULE below);
# mlperf-logging's table says 10, which is what its package checker expects for any later ruleset.
_RUNS_PER_RESULT = {"resnet": 5, "ssd": 5, "maskrcnn": 5, "gnmt": 10, "transformer": 10, "ncf": 10}
_NCF_V05_CONVERGED_RUNS = 50
_NCF_V05_MAX_ATTEMPTS = 100

# Olympic scoring drops the fastest and the slowest run. From v0.7 one non-converged run may stand
# in for the slowest; two invalidate the result (result_summarizer's max_dropped_scores=1).
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
    """The compliance-checker ruleset for one of our logs of this benchmark and format; None if none knows it."""
    if log_format == "mll_v0.6" and CHECKER_RULESET.get(benchmark):
        return _V06_CHECKER_RULESET
    return CHECKER_RULESET.get(benchmark)


def round_checker_ruleset(benchmark, round_):
    """(ruleset or None, why none) to check a published log of `round_` ("0.6") at its own round.

    mlperf-logging ships a training_<round>.0 checker for 0.6.0 and later, none for v0.5; a log is never
    checked against a later round's rules (their keys did not exist yet).
    """
    import os

    from mlperf_logging import compliance_checker

    if round_ is None:
        return None, "round unknown (no ruleset logged, no vX.Y folder in the path; pass --round)"
    ruleset = f"{short_ruleset(round_)}.0"
    folder = os.path.join(os.path.dirname(compliance_checker.__file__), f"training_{ruleset}")
    if not os.path.isdir(folder):
        return None, f"no ruleset for this round: mlperf-logging has no training_{ruleset} checker"
    names = os.listdir(folder)
    if f"{benchmark}.yaml" not in names and f"closed_{benchmark}.yaml" not in names:
        return None, f"the {ruleset} checker has no rules for {benchmark}"
    return ruleset, ""


# How each round turns runs into a score (shown in the report next to each result).
# v0.5: mlcommons/training_policies training_rules.adoc at 6e021638e80a1a82d151d4f4bf703d6704643fd7 (2018-11-08,
# the rules of the v0.5 submission), section "Benchmark Results": 5 runs for image classification and object
# detection, 10 for translation, "Run 100, use first 50 that converge" for recommendation; "dropping the fastest
# and slowest runs, then taking the mean of the remaining times". That text names no count of allowed
# non-converged runs (its "Submission" section mentions "allowed non-convergence"): one is allowed here, standing
# in for the slowest, as from v0.6 on.
V05_RULE = ("v0.5 rules (training_policies training_rules.adoc @6e02163, 'Benchmark Results'): "
            "drop the fastest and slowest of {n} runs, mean of the rest")
V05_NCF_RULE = ("v0.5 NCF rule (training_policies @6e02163): run 100, use the first 50 that converge; "
                "drop the fastest and slowest, mean of the rest")
SUMMARIZER_RULE = ("mlperf_logging.result_summarizer ({round_} rules): olympic mean of {n} runs, one non-converged "
                   "run may stand in for the slowest")


def scoring_rule(benchmark, ruleset):
    """One line naming the rule a result of this benchmark and round is scored by."""
    n = runs_per_result(benchmark, ruleset)
    if is_ncf_v05(benchmark, ruleset):
        return V05_NCF_RULE
    if short_ruleset(ruleset) == "0.5":
        return V05_RULE.format(n=n)
    return SUMMARIZER_RULE.format(round_=short_ruleset(ruleset) or "round unknown", n=n)


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
        if hasattr(target, "items"):   # config: {"bbox": .., "segm": ..}; logs say BBOX/SEGM
            return {str(k).upper(): v for k, v in target.items()}
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
