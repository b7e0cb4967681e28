"""Reporter end to end: tables, charts and submission from our logs and another producer's; no TensorFlow."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from mlperf_keras.reporting import example_logs as ex
from mlperf_keras.reporting.submission import SYSTEM_FIELDS
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Several seeds on 1 and 2 GPUs of two GPU types, CPU runs with 1 and 2 workers, and foreign logs."""
    root = tmp_path_factory.mktemp("logs")
    ex.write_example_study(str(root / "ours"), workloads={"resnet": (600.0, 36, (1, 2, 3, 4, 5), "0.7")},
                           systems=(("r740_t4", "NVIDIA T4", 15.0, (1, 2), 1.0),
                                    ("r740_v100", "NVIDIA V100-PCIE-32GB", 32.0, (1, 2), 2.6)))
    for workers in (1, 2):
        for seed in (1, 2, 3):
            run = ex.ExampleRun(benchmark="ncf", ruleset="0.5", seed=seed, platform="cpu", accelerator_model="cpu",
                                accelerator_count=0, accelerator_memory_gb=None, num_workers=workers,
                                epochs=5 + seed % 2, epoch_seconds=20.0 / workers ** 0.8,
                                start_s=1.71e9 + 1000 * seed + 10000 * workers)
            ex.write_log(str(root / "cpu" / f"w{workers}" / ex.run_file_name(run)), run)
    for seed in range(10):
        run = ex.ExampleRun(benchmark="gnmt", style="foreign", seed=None, platform="tpu-v3-32", epochs=3 + seed % 2,
                            start_s=1.72e9 + 1000 * seed)
        ex.write_log(str(root / "foreign" / "gnmt" / f"result_{seed}.txt"), run)
    return str(root)


@pytest.fixture(scope="module")
def report(logs, tmp_path_factory):
    """Run the CLI in a fresh interpreter, then list every TensorFlow/Keras/JAX module it had loaded."""
    out = str(tmp_path_factory.mktemp("report"))
    code = textwrap.dedent(f"""
        import runpy, sys
        sys.argv = ["mlperf_keras.report", "--logs", {logs!r}, "--out", {out!r}, "--baseline", "r740_t4"]
        try:
            runpy.run_module("mlperf_keras.report", run_name="__main__", alter_sys=True)
        except SystemExit as done:
            status = done.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "jax", "torch"))
        print("EXIT", status)
        print("HEAVY", heavy)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    return out, done


def test_report_never_imports_tensorflow_or_keras(report):
    _, done = report
    assert "HEAVY []" in done.stdout, done.stdout + done.stderr
    assert "EXIT 0" in done.stdout, done.stdout + done.stderr


def test_report_has_every_table_and_chart(report):
    out, _ = report
    text = open(os.path.join(out, "report.md")).read()
    for heading in ("MLPerf results", "Time to train (minutes)", "Speedup over r740_t4", "Scaling with GPU count",
                    "Throughput (samples/s)", "Epochs to converge per seed", "Compliance", "Submission layout"):
        assert f"## {heading}" in text
    for name in ("time_to_train", "throughput", "epochs_per_seed", "quality_curves"):
        png = os.path.join(out, "charts", f"{name}.png")
        assert os.path.getsize(png) > 10_000 and os.path.exists(png[:-3] + "svg")
        assert f"charts/{name}.png" in text
    for name in ("runs", "scores", "time_to_train", "speedup", "scaling", "throughput", "epochs_per_seed",
                 "epochs_summary", "problems"):
        assert os.path.exists(os.path.join(out, "tables", f"{name}.csv"))
    # The foreign logs: system from submission_platform, unknown count; scored (10 runs of gnmt).
    assert "| gnmt | tpu-v3-32 |" in text
    # CPU runs scale by workers; ncf is never 'pass'.
    assert "2xcpu" in text and "- **ncf**: 6 unsupported" in text


def test_speedup_and_scaling_numbers(report):
    import pandas as pd
    out, _ = report
    speedup = pd.read_csv(os.path.join(out, "tables", "speedup.csv"))
    resnet = speedup[(speedup["benchmark"] == "resnet") & (speedup["devices"] == 1)].iloc[0]
    assert resnet["speedup"] == pytest.approx(resnet["baseline_min"] / resnet["system_min"])
    assert 2.0 < resnet["speedup"] < 3.0     # the example V100 is 2.6x a T4
    scaling = pd.read_csv(os.path.join(out, "tables", "scaling.csv"))
    cpu = scaling[(scaling["family"] == "cpu") & (scaling["devices"] == 2)].iloc[0]
    assert 50 < cpu["throughput_efficiency_pct"] < 100


def test_system_files_are_filled_from_the_logs_and_list_the_rest(report):
    out, _ = report
    with open(os.path.join(out, "systems", "r740_t4_2xNVIDIA_T4.json")) as handle:
        system = json.load(handle)
    assert set(SYSTEM_FIELDS) <= set(system)
    assert system["accelerator_model_name"] == "NVIDIA T4" and system["accelerators_per_node"] == "2"
    assert system["accelerator_memory_capacity"] == "15 GB" and system["host_memory_capacity"] == "376 GB"
    assert system["framework"].startswith("keras") and system["status"] == "Available on-premise"
    text = open(os.path.join(out, "report.md")).read()
    assert "fill in the fields no log can know" in text and "`cooling`" in text
    assert len(os.listdir(os.path.join(out, "results", "r740_t4_1xNVIDIA_T4", "resnet"))) == 5


def test_user_edits_to_system_files_survive_a_second_report(logs, report):
    out, _ = report
    path = os.path.join(out, "systems", "r740_t4_1xNVIDIA_T4.json")
    with open(path) as handle:
        system = json.load(handle)
    system["cooling"] = "air"
    with open(path, "w") as handle:
        json.dump(system, handle)
    from mlperf_keras.reporting.build import build_report
    build_report([logs], out, check_compliance=False, draw_charts=False)
    with open(path) as handle:
        assert json.load(handle)["cooling"] == "air"
