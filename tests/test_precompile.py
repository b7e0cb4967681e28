"""steps._JaxTrainStep.precompile: the step's batch shapes compiled ahead, concurrently, and those executables the
ones later calls run (no compile after it), with the same losses as a step compiled at its first call per shape.
On one CPU device (SingleProcess) and on two (JaxDataParallel: batches sharded); on JAX, in a fresh interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, %(root)r)
import jax, keras, numpy as np
from jax import monitoring
from mlperf_keras import distribute, steps

compiles = []
monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **_: compiles.append(1) if event == "/jax/core/compile/backend_compile_duration" else None)
dist = distribute.create("jax")

def make_step():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    return steps.make_train_step(model, keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError(), dist)

rng = np.random.default_rng(0)
batches = [(rng.normal(size=(rows, 5)).astype(np.float32), rng.normal(size=(rows, 1)).astype(np.float32))
           for rows in (4, 8, 4, 16, 8, 12)]
lazy = make_step()
expected = [float(lazy(x, y)) for x, y in batches]
step = make_step()
before = len(compiles)
said = []
steps.PROGRESS_SECONDS = 0.0   # every shape's completion said
result = step.precompile(iter(batches), threads=3, say=said.append)
after_precompile = len(compiles)
losses = [float(step(x, y)) for x, y in batches]
again = step.precompile(batches)
print(json.dumps({"result": result, "again": again, "precompile_compiles": after_precompile - before,
                  "call_compiles": len(compiles) - after_precompile, "losses": losses, "expected": expected, "said": said,
                  "distribution": dist.describe()}))
"""


@pytest.mark.parametrize("devices", [1, 2])
def test_after_precompile_no_shape_compiles_again(devices):
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM % {"root": ROOT}], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["result"]["shapes"] == out["result"]["compiled"] == 4 and out["result"]["threads"] == 3
    assert out["precompile_compiles"] >= 4       # the step's four shapes (and whatever small copies go with them)
    assert out["call_compiles"] == 0              # each precompiled shape ran without compiling again
    assert out["again"]["compiled"] == 0          # a shape compiled before is not compiled twice
    said = out["said"]                            # progress: start, each shape but the last as done, the end
    assert said[0] == "compiling 4 batch shapes on 3 threads..." and said[-1].startswith("compiled 4 batch shapes in")
    assert [line.split(" batch")[0].strip() for line in said[1:-1]] == ["1/4", "2/4", "3/4"]
    assert out["losses"] == out["expected"]       # the same computation as compiling at the first call
    assert out["distribution"] == ("single process" if devices == 1 else "jax DataParallel over 2 devices")
