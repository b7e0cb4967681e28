"""quiet.apply(): the start-up noise of TensorFlow, absl and JAX is dropped, everything else on stderr still shows."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Verbatim from `python -c "import tensorflow"` (TensorFlow 2.21 on Linux): what a run must no longer show.
ONEDNN = ("I0000 00:00:1796178775.805149   19710 port.cc:153] oneDNN custom operations are on. You may see slightly "
          "different numerical results due to floating-point round-off errors from different computation orders. To "
          "turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.")
ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _python(code, **env):
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**environment, **env})


def test_c_level_noise_is_dropped_and_other_lines_pass_through():
    code = f"""
import os, sys
from mlperf_keras.quiet import filtered_stderr
with filtered_stderr():
    os.write(2, {(ABSL + chr(10) + ONEDNN + chr(10)).encode()!r})   # as a shared library writes it, past Python
    os.write(2, b"E0000 00:00:1.0 1 some.cc:1] a real error\\n")
    print("from python", file=sys.stderr)
    os.write(2, {(ABSL + chr(10) + ONEDNN + chr(10)).encode()!r})
print("after", file=sys.stderr)
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["E0000 00:00:1.0 1 some.cc:1] a real error", "from python", "after"]


def test_an_exception_inside_still_shows_what_was_written():
    code = """
import os
from mlperf_keras.quiet import filtered_stderr
with filtered_stderr():
    os.write(2, b"written before the failure\\n")
    raise RuntimeError("boom")
"""
    proc = _python(code)
    assert proc.returncode == 1
    assert "written before the failure" in proc.stderr and "RuntimeError: boom" in proc.stderr


_JAX_RUN = """
from absl import app
def main(argv):
    if {quiet}:
        from mlperf_keras import quiet
        quiet.apply()
    import jax
    print(jax.devices())
app.run(main)
"""


def test_jax_tpu_probe_line_is_hidden():
    pytest.importorskip("jax")
    proc = _python(_JAX_RUN.format(quiet=True), KERAS_BACKEND="jax", JAX_PLATFORMS="")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "libtpu" not in proc.stderr and "Unable to initialize backend" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_importing_tensorflow_through_apply_prints_none_of_its_start_up_lines():
    proc = _python("from mlperf_keras import quiet; quiet.apply(); import tensorflow as tf; print(tf.__version__)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "oneDNN custom operations" not in proc.stderr, proc.stderr
    assert "absl::InitializeLog" not in proc.stderr and "cpu_feature_guard" not in proc.stderr, proc.stderr


def test_library_progress_bars_are_off_after_apply():
    """subword-nmt's learn_bpe (the GNMT demo's data preparation) draws a tqdm bar over its merges (issue 32)."""
    code = """
import io
from mlperf_keras import quiet
quiet.apply()
from subword_nmt.learn_bpe import learn_bpe
learn_bpe(iter(["lower lowest newer newest wider widest\\n"] * 20), io.StringIO(), 5, min_frequency=2)
"""
    proc = _python(code, KERAS_BACKEND="numpy")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "it/s]" not in proc.stderr and "%|" not in proc.stderr, proc.stderr[-2000:]
