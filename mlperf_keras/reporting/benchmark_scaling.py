"""Scaling from `python -m mlperf_keras.benchmark` results (JSON lines, e.g. benchmarks/gpu_suite.sh's results.jsonl).

Benchmarks measure throughput at fixed per-GPU batch (weak scaling), not time-to-train, so they get their own table
and chart beside the MLLOG-based ones: samples/s by workload and GPU count, and efficiency against 1 GPU.
"""
from __future__ import annotations

import json
import os

import pandas as pd

from mlperf_keras.reporting import charts


def read_results(paths) -> pd.DataFrame:
    rows = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                result = json.loads(line)
                if "loop_samples_per_s" not in result:  # a PyTorch peer line, not ours
                    continue
                rows.append({"benchmark": result["model"], "family": result["accelerator"],
                             "devices": int(result["accelerators"]), "unit": f"{result['unit']}/s",
                             "precision": result["precision"], "global_batch_size": result["global_batch_size"],
                             "throughput_samples_per_s": result["loop_samples_per_s"]})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame = frame.groupby(["benchmark", "family", "devices", "unit", "precision"], as_index=False).agg(
        global_batch_size=("global_batch_size", "first"), throughput_samples_per_s=("throughput_samples_per_s", "mean"),
        std_samples_per_s=("throughput_samples_per_s", lambda v: v.std(ddof=1) if len(v) > 1 else float("nan")))
    one = frame[frame["devices"] == 1].set_index(["benchmark", "family", "precision"])["throughput_samples_per_s"]
    keys = list(zip(frame["benchmark"], frame["family"], frame["precision"]))
    base = [one.get(key) for key in keys]
    frame["efficiency_pct"] = [100 * t / (d * b) if b else float("nan")
                               for t, d, b in zip(frame["throughput_samples_per_s"], frame["devices"], base)]
    return frame.sort_values(["benchmark", "family", "devices"]).reset_index(drop=True)


def write(paths, out_dir, draw_chart=True) -> pd.DataFrame:
    frame = read_results(paths)
    os.makedirs(os.path.join(out_dir, "tables"), exist_ok=True)
    frame.to_csv(os.path.join(out_dir, "tables", "benchmark_scaling.csv"), index=False)
    if draw_chart and not frame.empty:
        charts.throughput_chart(frame, os.path.join(out_dir, "charts"), name="benchmark_scaling",
                                title="Training throughput by GPU count, fixed per-GPU batch (mlperf_keras.benchmark)")
    return frame
