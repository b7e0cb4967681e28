"""Runs the official MLPerf compliance checker on one log, through its Python API.

Same checks as `python -m mlperf_logging.compliance_checker --usage training --ruleset R LOG`, without
a Python start-up per log. Each of our logs is checked at the newest ruleset that knows its benchmark
(rules.CHECKER_RULESET); a published log at its own round's ruleset (0.6.0, 0.7.0, ...), and a v0.5 log
is "unsupported: no ruleset for this round" (mlperf-logging has no v0.5 checker). No ruleset knows ncf: those logs are "unsupported", never "pass"; the
project's own NCF rules (mlperf_keras/compliance/ncf.yaml: the 0.7.0 common rules plus NCF's closed
settings and target) are still run on the official engine and their verdict is the detail. A checker
that crashes (as it does for a ruleset lacking the benchmark) also means "unsupported".
"""

import copy
import logging
import os

import yaml
from mlperf_logging.compliance_checker import mlp_compliance

from mlperf_keras.compliance import NCF_RULES, rules
from mlperf_keras.reporting.records import Compliance

# Rules files for benchmarks no official ruleset knows (written for the official checker engine).
PROJECT_RULES = {"ncf": NCF_RULES}


def check_record(record):
    """Compliance verdict for one parsed run: ours at the newest ruleset knowing its benchmark (as check_log),
    a published log at its own round's ruleset (rules.round_checker_ruleset), never at a later round."""
    if record.own_log:
        return check_log(record.path, record.benchmark, record.log_format)
    ruleset, why_none = rules.round_checker_ruleset(record.benchmark, record.ruleset)
    if ruleset is None:
        return Compliance("unsupported", None, why_none)
    return check_log(record.path, record.benchmark, record.log_format, ruleset=ruleset)


def check_log(path, benchmark, log_format="mllog", ruleset=None):
    """Compliance verdict for one log of a known benchmark (at `ruleset`, default rules.checker_ruleset)."""
    ruleset = ruleset or rules.checker_ruleset(benchmark, log_format)
    if ruleset is None:
        return _check_with_project_rules(path, benchmark)
    try:
        valid, messages = _run_checker(path, ruleset, f"training_{ruleset}/common.yaml")
    except Exception as error:  # noqa: BLE001 - the checker crashing is a verdict, not our failure
        return Compliance("unsupported", ruleset, f"checker crashed at {ruleset}: {type(error).__name__}: {error}")
    if valid:
        return Compliance("pass", ruleset, "")
    return Compliance("fail", ruleset, "; ".join(_summarize(m) for m in messages) or "checker said FAILED")


def _check_with_project_rules(path, benchmark):
    """Benchmarks no official ruleset knows: this project's rules file, on the official engine. Never "pass"."""
    base = f"no official ruleset knows {benchmark}"
    rules_file = PROJECT_RULES.get(benchmark)
    if rules_file is None:
        return Compliance("unsupported", None, base)
    name = f"mlperf_keras/compliance/{os.path.basename(rules_file)}, this project's reading, not official"
    try:
        # An absolute config path survives the checker's os.path.join(checker_dir, config).
        valid, messages = _run_checker(path, rules.PROJECT_RULES_ENGINE, rules_file)
    except Exception as error:  # noqa: BLE001
        return Compliance("unsupported", None, f"{base}; project rules ({name}) could not run: {error}")
    if valid:
        return Compliance("unsupported", None, f"{base}; project rules ({name}): ok")
    failed = "; ".join(_summarize(m) for m in messages)
    return Compliance("unsupported", None, f"{base}; project rules ({name}) fail: {failed}")


class _ParsedOnceYaml:
    """Stands in for the yaml module inside the checker: the same parse, done once per config file.

    The checker re-reads 2-4 YAML configs for every log, which is most of its run time; a report
    checks hundreds of logs. Results are deep-copied so no check can change another's config. If a
    future mlperf-logging stops calling `yaml.load` through its module, this just stops helping.
    """

    def __init__(self):
        self._parsed = {}

    def load(self, stream, Loader):  # noqa: N803 - yaml's own argument name
        name = getattr(stream, "name", None)
        if not isinstance(name, str):
            return yaml.load(stream, Loader=Loader)
        key = (os.path.realpath(name), Loader)
        if key not in self._parsed:
            self._parsed[key] = yaml.load(stream, Loader=Loader)
        return copy.deepcopy(self._parsed[key])

    def __getattr__(self, name):
        return getattr(yaml, name)


_PARSED_ONCE_YAML = _ParsedOnceYaml()


def _run_checker(path, ruleset, config):
    """(valid, [messages]); the checker's own logging is silenced, its messages are returned."""
    # The checker keeps a module-level queue of configs to run; a crash can leave entries behind.
    mlp_compliance.enqueued_configs.clear()
    checker = mlp_compliance.make_checker(usage="training", ruleset=ruleset, quiet=True, werror=False)
    previous_disable, previous_yaml = logging.root.manager.disable, mlp_compliance.yaml
    logging.disable(logging.CRITICAL)
    mlp_compliance.yaml = _PARSED_ONCE_YAML
    try:
        valid = checker.check_file(path, config)
    finally:
        mlp_compliance.yaml = previous_yaml
        logging.disable(previous_disable)
        mlp_compliance.enqueued_configs.clear()
    messages = [*checker.overwritable.values(), *checker.not_overwritable]
    return bool(valid), messages


def _summarize(message):
    """One line per failed rule: 'CHECK for 'x' failed in line 12 (failed test: ...)'."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0].rstrip(":")
    failed_test = next((line for line in lines if line.startswith("failed test:")), None)
    if failed_test and failed_test not in head:
        return f"{head} ({failed_test})"
    return head
