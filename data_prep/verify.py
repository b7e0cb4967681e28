"""python -m data_prep.verify --data_dir=D [--workload=ncf]: check a prepared dataset against its manifest."""
from __future__ import annotations

import json
import os
import sys

from absl import flags

from mlperf_keras import entry
from mlperf_keras.inputs.manifest import MANIFEST_NAME, DataError, check_files, check_manifest, verify_files

flags.DEFINE_string("data_dir", None, "A folder written by a data_prep command.", required=True)
FLAGS = flags.FLAGS


def main(argv):
    del argv
    path = os.path.join(FLAGS.data_dir, MANIFEST_NAME)
    try:
        with open(path) as f:
            manifest = json.load(f)
        check_manifest(manifest, path)
        check_files(FLAGS.data_dir, manifest)
        verify_files(FLAGS.data_dir, manifest)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"ok: {manifest.get('dataset')} for --model={manifest.get('workload')}: {json.dumps(manifest['counts'])}")


if __name__ == "__main__":
    entry.run(main)
