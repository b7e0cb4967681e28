"""What report.md and the charts say about CPU-only runs, big seeds and runs that did not converge."""
import os

import matplotlib
import pytest

from mlperf_keras.reporting import example_logs as ex
from mlperf_keras.reporting.build import build_report

BIG_SEED = 1629120000


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    """NCF on CPU with 1 and 2 workers; one run stopped at its epoch cap without the target; seeds up to 1.6e9."""
    root = tmp_path_factory.mktemp("cpu_logs")
    for workers in (1, 2):
        for index, seed in enumerate((1, 2, BIG_SEED)):
            run = ex.ExampleRun(benchmark="ncf", ruleset="0.5", seed=seed, platform="cpu", accelerator_model="cpu",
                                accelerator_count=0, accelerator_memory_gb=None, num_workers=workers,
                                epochs=5 + index, status="aborted" if (workers, seed) == (1, 2) else "success",
                                start_s=1.71e9 + 1000 * index + 10000 * workers)
            ex.write_log(str(root / f"w{workers}" / ex.run_file_name(run)), run)
    out = tmp_path_factory.mktemp("cpu_report")
    # Keep chart text as SVG text (not glyph paths) so the titles and labels can be read back.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        build_report([str(root)], str(out), overwrite=True, check_compliance=False)
    return str(out)


def read(out, *parts):
    return open(os.path.join(out, *parts)).read()


def test_seeds_and_counts_print_as_integers(cpu_report):
    text = read(cpu_report, "report.md")
    assert f"| {BIG_SEED} |" in text and "e+09" not in text       # was 1.62912e+09


def test_cpu_only_reports_count_workers_not_gpus(cpu_report):
    text = read(cpu_report, "report.md")
    assert "## Time to train (minutes) by benchmark, CPU type and worker count" in text
    assert "## Scaling with worker count (against the 1-worker run)" in text and "GPU count" not in text
    assert "CPU type and worker count" in read(cpu_report, "charts", "time_to_train.svg")
    throughput = read(cpu_report, "charts", "throughput.svg")
    assert "by worker count" in throughput and "GPU" not in throughput


def test_a_run_that_did_not_converge_is_drawn_apart_from_the_epoch_counts(cpu_report):
    chart = read(cpu_report, "charts", "epochs_per_seed.svg")
    assert ">n/c<" in chart and "not converged (n/c: no epoch count)" in chart
