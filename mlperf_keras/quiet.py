"""Keep TensorFlow's, absl's and JAX's start-up noise out of a run's output: entry points call apply() first.

What prints at start-up, and what hides it (TensorFlow 2.21, JAX 0.10, Linux):
- "oneDNN custom operations are on ..." (twice: two of TensorFlow's shared libraries print it as they load), each
  after "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR". absl's C++ logging
  writes these before TensorFlow configures it, so TF_CPP_MIN_LOG_LEVEL does not hide them (checked: 0 to 3). Only
  TF_ENABLE_ONEDNN_OPTS=0 stops the oneDNN line, by turning oneDNN's CPU kernels off (other speed, other rounding):
  not worth a log line. So the backend is imported with file descriptor 2 captured and these lines dropped
  (filtered_stderr); every other line is passed on.
- TensorFlow's later C++ INFO/WARNING lines ("This TensorFlow binary is optimized to use available CPU
  instructions ...", cpu_feature_guard): TF_CPP_MIN_LOG_LEVEL=2 (errors still print), set unless the user set it.
- "Unable to initialize backend 'tpu': ... Failed to open libtpu.so" (JAX probing for a TPU): an INFO record of the
  Python logger jax._src.xla_bridge, printed by absl's log handler; that logger is set to WARNING, so JAX's
  warnings (e.g. a GPU without a CUDA-enabled jaxlib) still show.
- tqdm progress bars of libraries a run calls (subword-nmt's learn_bpe draws one over its merges while the GNMT demo
  prepares its data; the run prints its own progress lines): TQDM_DISABLE=1, set unless the user set it. tqdm reads
  it when tqdm is first imported, so apply() sets it before anything imports tqdm.
TF_CPP_MIN_LOG_LEVEL=0 in the environment turns all of this off (everything prints, as without apply()).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile

NOISE = (re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"),
         re.compile(r"^I\d{4} [\d:. ]+\d+ port\.cc:\d+\] oneDNN custom operations are on\."))


@contextlib.contextmanager
def filtered_stderr(noise=NOISE):
    """Capture file descriptor 2 (C and C++ writes too) for the with-block; pass on every line but the noise.

    A crash of the process inside the block (not a Python exception) loses what was captured."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not any(pattern.search(line.rstrip("\n")) for pattern in noise)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def apply(import_tensorflow: bool | None = None) -> None:
    """Set the quiet logging defaults and import Keras (and so its backend) with the start-up noise filtered.

    Call it after KERAS_BACKEND is final and before anything imports keras, tensorflow or jax. import_tensorflow:
    also import TensorFlow under the filter (default: only when it is the backend; pass True for a JAX run that
    reads tf.data input, so that its later import stays quiet too)."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TQDM_DISABLE", "1")
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if import_tensorflow is None:
        import_tensorflow = backend == "tensorflow"
    with filtered_stderr():
        if import_tensorflow:
            try:
                import tensorflow  # noqa: F401
            except ImportError:
                pass   # the run reports what it misses where it needs it
        import keras  # noqa: F401  (imports the backend)
