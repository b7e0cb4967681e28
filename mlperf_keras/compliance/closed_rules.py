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
