"""What the pipeline benchmarks share: each configuration runs this script again in a fresh process (pinned cores,
a clean framework state) that prints its measurements as one JSON line last."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(script: str, *args: str) -> dict:
    """Run `python script --_child args...` from the repository root; its last stdout line as JSON, or exit with
    the command and the end of its stderr."""
    command = [sys.executable, os.path.abspath(script), "--_child", *args]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cores_for(gpu_rate: float, rate_per_core: float, units: float, cpu_seconds: float) -> tuple[int, int]:
    """Cores one GPU consuming gpu_rate needs: at the measured rate per core, and at the rate per CPU-second."""
    return math.ceil(gpu_rate / rate_per_core), math.ceil(gpu_rate * cpu_seconds / units)
