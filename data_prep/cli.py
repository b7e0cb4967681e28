"""What every data_prep command shares: the --raw_dir/--output_dir flags and clean error reporting."""
from __future__ import annotations

import sys
import time

from absl import flags

from mlperf_keras.inputs.manifest import DataError

FLAGS = flags.FLAGS


def define_common_flags(raw_help: str) -> None:
    flags.DEFINE_string("raw_dir", None, raw_help)
    flags.DEFINE_string("output_dir", None, "Folder to write the prepared dataset into (training's --data_dir).")
    flags.DEFINE_bool("overwrite", False, "Replace a dataset already prepared in --output_dir.")
    flags.mark_flags_as_required(["raw_dir", "output_dir"])


def run_or_report(prepare, *args, **kwargs):
    """Run a preparation; a DataError becomes one line on stderr and exit status 2, never a traceback."""
    start = time.time()
    try:
        manifest = prepare(*args, **kwargs)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"done in {time.time() - start:.1f} s")
    return manifest
