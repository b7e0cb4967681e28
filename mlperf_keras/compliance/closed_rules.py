"""The official checker's closed-division rules applied to values before a run logs them: a run whose log could not
be a valid result is refused at its start instead of failing the checker after hours of training.

The rules are the installed mlperf-logging's training_<ruleset>/closed_<benchmark>.yaml (<benchmark>.yaml in a
ruleset without division files, as 0.6.0), run by the checker's own engine (ComplianceChecker.configured_checks) on
log lines made of the values: the same expressions, helpers (is_integer) and cross-line state (s) as on a log file.
"""
from __future__ import annotations

import functools
import os
import types
from typing import Callable

import yaml


def rules_file(benchmark: str, ruleset: str) -> str:
    """The checker's closed rules for benchmark at ruleset ("3.1.0"); FileNotFoundError if it has none."""
    from mlperf_logging import compliance_checker

    folder = os.path.join(os.path.dirname(compliance_checker.__file__), f"training_{ruleset}")
    for name in (f"closed_{benchmark}.yaml", f"{benchmark}.yaml"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f"mlperf-logging has no training_{ruleset} rules for {benchmark} (looked in {folder})")


@functools.lru_cache(maxsize=None)
def rule_text(benchmark: str, ruleset: str, key: str) -> str:
    """The CHECK expression(s) of key in the rules file, as written there ("" when the key has no CHECK)."""
    with open(rules_file(benchmark, ruleset)) as f:
        checks = yaml.load(f, Loader=yaml.BaseLoader) or []
    for entry in checks:
        if "KEY" in entry and entry["KEY"]["NAME"] == key:
            check = entry["KEY"].get("CHECK", "")
            return " and ".join(c.strip() for c in check) if isinstance(check, list) else check.strip()
    return ""


def fails(benchmark: str, ruleset: str, lines: list[tuple[str, object]], key: str) -> bool:
    """Does the rules file's CHECK of `key` fail on these (key, value) log lines, taken in this order?

    Only key's own CHECK (or its PRE/POST code) counts: the lines are not a whole log, so the occurrence counts and
    the END checks of other keys are the checker's business on the real log."""
    from mlperf_logging.compliance_checker import mlp_compliance

    checker = mlp_compliance.ComplianceChecker("training", ruleset, quiet=True, werror=False)
    loglines = [types.SimpleNamespace(key=name, value={"value": value, "metadata": {}}, lineno=number + 1,
                                      timestamp=0.0, full_string=f"{name}: {value!r}")
                for number, (name, value) in enumerate(lines)]
    # A rule's POST code may queue a further rules file in the checker module's global queue (closed_resnet.yaml
    # queues closed_resnet_<opt_name>.yaml), which only a whole-log check drains: left there, it would be read by
    # the next checker run in this process, on another log. Put the queue back as it was.
    queued = list(mlp_compliance.enqueued_configs)
    try:
        checker.configured_checks(loglines, rules_file(benchmark, ruleset))
    finally:
        mlp_compliance.enqueued_configs[:] = queued
    return key in checker.overwritable


def judging_rulesets(benchmark: str, ruleset: str) -> list[str]:
    """The checker rulesets that judge a closed run's logged values: the one the reporter checks this project's logs
    at (rules.CHECKER_RULESET), and the run's own round's where mlperf-logging has one (0.7.0 for --ruleset=0.7: a
    v0.7 submission meets that checker)."""
    from mlperf_keras.compliance import rules

    own_round, _ = rules.round_checker_ruleset(benchmark, ruleset)
    return [r for r in dict.fromkeys([rules.checker_ruleset(benchmark), own_round]) if r]


def refuse_failing_batch(config, benchmark: str, key: str, logged_at: Callable[[int], float],
                         explain: Callable[[int], str], search: int = 64) -> None:
    """Refuse (ConfigError) a global batch at which the value the run would log for key, logged_at(global batch),
    fails the closed checker's rule of key (judging_rulesets; the checker's own expression, run by fails), naming the
    nearest global batches that pass (within `search` of this one) and --division=open. explain(batch) says how the
    value follows from the batch, for the message."""
    from importlib import metadata

    from mlperf_keras.config import ConfigError

    batch = config.global_batch_size
    rulesets = judging_rulesets(benchmark, config.ruleset)

    def failing(b):
        lines = [("global_batch_size", b), (key, logged_at(b))]
        return [r for r in rulesets if fails(benchmark, r, lines, key)]

    failed = failing(batch)
    if not failed:
        return
    below = next((b for b in range(batch - 1, max(0, batch - search), -1) if not failing(b)), None)
    above = next((b for b in range(batch + 1, batch + search) if not failing(b)), None)
    near = " or ".join(str(b) for b in (below, above) if b is not None) or f"none within {search} of {batch}"
    workers = config.num_workers
    if workers > 1 and any(b is not None and b % workers for b in (below, above)):
        # A global batch must split evenly over the workers: name the nearest one these workers can run.
        splittable = sorted(range(workers, batch + search * workers, workers), key=lambda b: (abs(b - batch), b))
        multiple = next((b for b in splittable if not failing(b)), None)
        if multiple is not None:
            near += f"; on these {workers} workers: {multiple} ({multiple // workers} per worker)"
    demands = "; ".join(f"{os.path.relpath(rules_file(benchmark, r), _checker_root())} demands "
                        f"{rule_text(benchmark, r, key)}" for r in failed)
    raise ConfigError(
        f"global batch {batch} would log {key} {logged_at(batch):g} ({explain(batch)}), which fails the "
        f"closed-division checker (mlperf-logging {metadata.version('mlperf-logging')}, {demands}), so the log would "
        f"not be a valid result; the nearest global batches that pass (--batch_size): {near}; or pass "
        f"--division=open to run it anyway")


def _checker_root() -> str:
    """The folder holding the mlperf_logging package, so that messages name its files as mlperf_logging/..."""
    import mlperf_logging

    return os.path.dirname(os.path.dirname(mlperf_logging.__file__))
