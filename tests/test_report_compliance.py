"""Reporter: verdicts of the official compliance checker per log; ncf is never "pass"."""
import os

from mlperf_keras.reporting import compliance, example_logs as ex
from mlperf_keras.reporting.compliance import check_log


def write(tmp_path, **fields):
    return ex.write_log(os.path.join(str(tmp_path), "run.log"), ex.ExampleRun(**fields))


def test_compliant_log_passes_at_the_newest_ruleset_for_its_benchmark(tmp_path):
    verdict = check_log(write(tmp_path, benchmark="resnet", epochs=35, global_batch_size=3264), "resnet")
    assert (verdict.status, verdict.ruleset) == ("pass", "4.0.0")
    assert check_log(write(tmp_path, benchmark="gnmt", epochs=3), "gnmt").ruleset == "0.7.0"


def test_failure_names_the_failing_rule(tmp_path):
    # A demo target below MLPerf's: the checker's "eval_accuracy reaches the target" rule fails.
    verdict = check_log(write(tmp_path, benchmark="resnet", quality_target=0.5), "resnet")
    # The 4.0.0 rule in closed_resnet.yaml's own words, and no other failure.
    assert verdict.status == "fail"
    assert verdict.detail == "Failed checks for eval_accuracy : v['value'] >= 0.7590 and v['value'] < 1.0"
    hyper = dict(ex.COMPLIANT_HYPERPARAMETERS["transformer"])
    del hyper["opt_adam_epsilon"]
    verdict = check_log(write(tmp_path, benchmark="transformer", hyperparameters=hyper), "transformer")
    assert verdict.status == "fail" and "opt_adam_epsilon" in verdict.detail


def test_ncf_is_unsupported_never_pass_even_when_well_formed(tmp_path):
    verdict = check_log(write(tmp_path, benchmark="ncf"), "ncf")
    assert verdict.status == "unsupported" and verdict.ruleset is None
    assert "no official ruleset knows ncf" in verdict.detail and ": ok" in verdict.detail
    bad = check_log(write(tmp_path, benchmark="ncf", hyperparameters={"opt_name": "sgd"}), "ncf")
    assert bad.status == "unsupported" and "fail" in bad.detail


def test_a_checker_crash_is_unsupported_not_pass(tmp_path, monkeypatch):
    """A ruleset without the benchmark's config crashes the checker (FileNotFoundError): unsupported."""
    monkeypatch.setitem(compliance.rules.CHECKER_RULESET, "gnmt", "4.0.0")
    verdict = check_log(write(tmp_path, benchmark="gnmt"), "gnmt")
    assert verdict.status == "unsupported" and "crashed" in verdict.detail
    # The checker's module-level queue is left clean for the next log.
    monkeypatch.undo()
    assert check_log(write(tmp_path, benchmark="gnmt", epochs=3), "gnmt").status == "pass"
