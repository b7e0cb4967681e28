"""Sums a py-spy raw profile (gpu_suite.sh PROFILE=gil|all) per thread and, within each thread, per place: the
innermost frame of our package with the innermost frame of all (where the thread was, and what of ours called it).

    python benchmarks/experiments/pyspy_threads.py resnet_realdata_fed.all.pyspy [--top=12] [--only=measure_fed]

--only keeps the main thread's stacks that pass through a function of that name (the other threads' stacks all
count: a pipeline's threads run only while it is read). Seconds are samples over the sampling rate (100/s).
"""
from __future__ import annotations

import argparse
import collections
import re


def summarize(lines, only: str | None = None):
    """{thread name: Counter({(our frame, innermost frame): samples})} of py-spy raw lines ("a;b;c count")."""
    threads: dict = collections.defaultdict(collections.Counter)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = re.sub(r"^thread \(\d+\):?", "", frames[0]).strip() or "(unnamed)"   # "thread (123): name"
        if only and thread == "MainThread" and not any(f.startswith(only + " ") for f in frames):
            continue
        ours = [f for f in frames[1:] if "mlperf_keras/" in f]
        threads[thread][(ours[-1] if ours else "-", frames[-1])] += int(count)
    return threads


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--only", help="the main thread's stacks through this function only")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's samples a second")
    args = parser.parse_args()
    with open(args.profile) as f:
        threads = summarize(f, args.only)
    for thread, places in sorted(threads.items(), key=lambda kv: -sum(kv[1].values())):
        print(f"{thread}: {sum(places.values()) / args.rate:.2f} s")
        for (ours, inner), samples in places.most_common(args.top):
            print(f"  {samples / args.rate:7.2f} s  {inner}  <- {ours}")


if __name__ == "__main__":
    main()
