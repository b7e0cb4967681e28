"""One-time dataset preparation: official raw files -> prepared, sharded files + manifest.

Each dataset is a module run as `python -m data_prep.<dataset> --raw_dir=R --output_dir=D`; `--help` explains the
raw layout it expects. Preparation is never on the MLPerf clock.
"""
