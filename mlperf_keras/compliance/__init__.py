"""The MLPerf rules, imported by the workloads and the reporter alike: rules.py (benchmarks, runs per result, targets,
checker rulesets), tunable.py (what the closed division lets --hparams change), closed_rules.py (the official
checker's closed rules run on values before a run logs them), and NCF_RULES below.

NCF_RULES: checker rules for the benchmark no official mlperf-logging ruleset knows (NCF), run on the official
checker engine. `python -m mlperf_logging.compliance_checker --usage training --ruleset 0.7.0 --config <abs path of
ncf.yaml> LOG` applies the common rules of training 0.7.0 (adapted: benchmark ncf, no closed_<benchmark>.yaml to
enqueue) plus NCF's closed-division settings and its quality target. This is this project's reading of the rules, not
an official ruleset, and reports must say so.
"""
import os

NCF_RULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncf.yaml")
