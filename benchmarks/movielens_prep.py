"""Benchmark: data_prep.movielens at ml-20m size (time and peak memory), on a generated ratings.csv.

    python benchmarks/movielens_prep.py [--work_dir=/tmp/ml20m_bench] [--users=138493] [--items=26744]

Generates a MovieLens-format file of about 20 million ratings (138,493 users, 26,744 items, as ml-20m), then runs
`python -m data_prep.movielens` on it in a child process and prints wall time and the child's peak resident memory.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from data_prep.demo_movielens import write_ratings_csv  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="/tmp/ml20m_bench")
    parser.add_argument("--users", type=int, default=138_493)
    parser.add_argument("--items", type=int, default=26_744)
    parser.add_argument("--mean_ratings", type=float, default=205.0, help="draws per user before duplicates are dropped (205 gives about 20M ratings, as ml-20m)")
    args = parser.parse_args()

    raw = os.path.join(args.work_dir, "raw")
    csv = os.path.join(raw, "ml-20m", "ratings.csv")
    if not os.path.exists(csv):
        start = time.time()
        n = write_ratings_csv(csv, args.users, args.items, mean_extra_per_user=args.mean_ratings - 20, seed=1)
        print(f"generated {n:,} ratings ({os.path.getsize(csv) / 2**20:,.0f} MiB) in {time.time() - start:.0f} s")
    out = os.path.join(args.work_dir, "prepared")
    start = time.time()
    subprocess.run([sys.executable, "-m", "data_prep.movielens", f"--raw_dir={raw}", f"--output_dir={out}",
                    "--overwrite", "--allow_subset"], cwd=ROOT, check=True)
    seconds = time.time() - start
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(f"data_prep.movielens: {seconds:.1f} s wall, peak RSS {peak_gib:.2f} GiB, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
