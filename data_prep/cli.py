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
    flags.DEFINE_bool("allow_subset", False, "Accept raw data whose counts differ from the official dataset's "
                      "(recorded as subset: true in the manifest). Without it such data is refused: raw files are "
                      "missing or truncated.")
    flags.mark_flags_as_required(["raw_dir", "output_dir"])


def run_or_report(prepare, *args, **kwargs):
    """Run a preparation; a DataError becomes one line on stderr and exit status 2, never a traceback. Counts that
    differ from the official dataset's are refused unless --allow_subset; SIGTERM and SIGINT remove the staging
    folder (data_prep/staging.py) and exit with one line."""
    from data_prep import staging
    from mlperf_keras.inputs.manifest import require_official_counts

    start = time.time()
    token = require_official_counts.set(not FLAGS.allow_subset)
    try:
        with staging.exit_on_termination():
            manifest = prepare(*args, **kwargs)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (KeyboardInterrupt, SystemExit) as e:
        if isinstance(e, SystemExit) and not (isinstance(e.code, int) and e.code > 128):
            raise
        print(f"error: {staging.interrupted_message(e)}", file=sys.stderr)
        sys.exit(130 if isinstance(e, KeyboardInterrupt) else e.code)
    finally:
        require_official_counts.reset(token)
    print(f"done in {time.time() - start:.1f} s")
    return manifest
