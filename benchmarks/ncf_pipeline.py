"""Benchmark: the NCF training input stream (inputs/ncf.py) alone on the CPU, samples/s and samples/s per core.

    python benchmarks/ncf_pipeline.py [--data_dir=PREPARED] [--work_dir=/tmp/ncf_pipeline_bench]
                                      [--users=20000] [--items=26744] [--mean_ratings=100]
                                      [--cores=1,2] [--batch=1048576] [--epochs=2] [--warmup_epochs=1]
                                      [--epoch_build=host|device] [--random=stock,hash]

Data: a dataset prepared by data_prep.movielens; without --data_dir, a MovieLens-format ratings.csv is generated
(data_prep.demo_movielens) into --work_dir and prepared there (once; reused afterwards). The default size prepares in
well under a minute; for ml-20m size use --users=138493 --items=26744 --mean_ratings=205 (about 20 million ratings,
as benchmarks/movielens_prep.py; or point --data_dir at what that script prepared). The stream's cost grows with
the dataset (its arrays stop fitting in the CPU caches), so only an ml-20m-sized run says what a GPU needs.

What is timed: exactly what workloads/ncf.py train_data gives the training loop, one worker (rank 0 of 1): per
epoch, 4 negatives per positive drawn uniformly and redrawn while they hit one of the user's training positives
(vectorised), the epoch shuffled, then fixed-size batches gathered from it (the last one filled from the start with
padding the loss ignores). No model runs. Loading the
shards and indexing the rated (user, item) pairs is start-up and is not timed, nor are --warmup_epochs. Each
configuration runs in a fresh process pinned to --cores cores (os.sched_setaffinity); the epoch build runs its fixed
chunks (negatives, bucketed shuffle, gathers) on as many threads as the process has cores (inputs/ncf.py).
With --epoch_build=device the epoch is built on the accelerator of the active Keras backend (inputs/ncf_device.py;
KERAS_BACKEND=jax on a JAX-only GPU machine) and the batches are device slices; the timing waits for the device at
the end of every epoch, and --cores only pins the host thread that drives it. --random picks the device build's
random numbers, one fresh process each: stock (the framework's generators, jax.random / TensorFlow's stateless
ops: what the closed division runs) and/or hash (the counter hash, --division=open only); the host build always
uses NumPy's PCG64 and ignores it.

Per configuration: one human line and one JSON line with samples/s (positives + negatives served in batches),
samples/s per core, samples per CPU-second (process CPU time, which holds even on a shared machine), the time to
build one epoch (negatives + shuffle: the time to the first batch); then how many cores that rate means for one
H200, which consumes 194.7 million samples/s at this batch (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types

import numpy as np

from child_process import ROOT, cores_for, run_child

sys.path.insert(0, ROOT)

H200_SAMPLES_PER_S = 194.7e6  # our NCF train step, batch 1,048,576, one H200, JAX bf16 (benchmarks/RESULTS.md)


def ensure_data(work_dir: str, users: int, items: int, mean_ratings: float) -> str:
    prepared = os.path.join(work_dir, f"prepared_{users}x{items}x{mean_ratings:g}")
    if os.path.exists(os.path.join(prepared, "manifest.json")):
        return prepared
    from data_prep import demo_movielens, movielens

    raw = os.path.join(work_dir, f"raw_{users}x{items}x{mean_ratings:g}")
    start = time.time()
    n = demo_movielens.write_ratings_csv(os.path.join(raw, "ml-20m", "ratings.csv"), users, items,
                                         mean_extra_per_user=max(0.0, mean_ratings - 20), seed=1)
    movielens.prepare(raw, prepared, overwrite=True, log=lambda _: None)
    print(f"generated and prepared {n:,} ratings in {time.time() - start:.0f} s into {prepared}", flush=True)
    return prepared


def child(args):
    """One configuration, in this process: pin to the first args.cores cores, build the stream, time epochs."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    from mlperf_keras.inputs.manifest import read_manifest
    from mlperf_keras.workloads.ncf import NCF

    workload = NCF()
    manifest = read_manifest(args.data_dir, "ncf")
    hparams = {**workload.reference_hparams("0.5"), **workload.dataset_hparams(manifest),
               "epoch_build": args.epoch_build}
    config = types.SimpleNamespace(hparams=hparams, seed=1, data_dir=args.data_dir, num_workers=1,
                                   global_batch_size=args.batch, per_worker_batch_size=args.batch,
                                   backend=os.environ.get("KERAS_BACKEND", "tensorflow"),
                                   closed_division=args.random == "stock")
    dist = types.SimpleNamespace(rank=0, world_size=1)
    start = time.time()
    data = workload.train_data(config, dist, manifest)  # start-up: load shards, index rated pairs
    setup = time.time() - start

    samples = batches = 0
    seconds = cpu_seconds = build = build_cpu = 0.0
    for epoch in range(args.warmup_epochs + args.epochs):
        t0, c0 = time.time(), time.process_time()
        stream = data.batches(epoch)
        x, y = next(stream)  # the epoch's negatives and shuffle happen here
        t_first, c_first = time.time() - t0, time.process_time() - c0
        n, count = len(y), 1
        for x, y in stream:
            n += len(y)
            count += 1
        np.asarray(y)  # device batches are sliced asynchronously: wait for the last one
        if epoch >= args.warmup_epochs:
            seconds += time.time() - t0
            cpu_seconds += time.process_time() - c0
            build += t_first
            build_cpu += c_first
            samples += n
            batches += count

    m = data.sampler.samples_per_epoch
    print(json.dumps({"samples": samples, "batches": batches, "seconds": seconds, "cpu_seconds": cpu_seconds,
                      "epoch_build_s": build / args.epochs,
                      "epoch_build_cpu_s": build_cpu / args.epochs,
                      "setup_s": setup,
                      "positives": int(m // (1 + hparams["negatives"])), "samples_per_epoch": int(m),
                      "steps_per_epoch": int(data.steps_per_epoch)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=None, help="a dataset prepared by data_prep.movielens (default: "
                        "generate one of --users x --items into --work_dir)")
    parser.add_argument("--work_dir", default="/tmp/ncf_pipeline_bench")
    parser.add_argument("--users", type=int, default=20_000, help="generated users (ml-20m: 138493)")
    parser.add_argument("--items", type=int, default=26_744, help="generated items (ml-20m: 26744)")
    parser.add_argument("--mean_ratings", type=float, default=100.0,
                        help="ratings per user on average (ml-20m: 205 gives about 20 million ratings)")
    parser.add_argument("--cores", default="1,2", help="comma-separated core counts, one fresh process each")
    parser.add_argument("--batch", type=int, default=1_048_576, help="samples per batch (NVIDIA's v0.5: 1,048,576)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per configuration")
    parser.add_argument("--warmup_epochs", type=int, default=1, help="untimed epochs first")
    parser.add_argument("--epoch_build", choices=("host", "device"), default="host",
                        help="host: NumPy on --cores cores (inputs/ncf.py); device: on the accelerator of the active "
                        "Keras backend (inputs/ncf_device.py)")
    parser.add_argument("--random", default="stock", help="device build's random numbers, comma-separated: stock "
                        "(closed division: jax.random / TF stateless ops), hash (counter hash, open division only)")
    parser.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        args.cores = int(args.cores)
        return child(args)

    data_dir = args.data_dir or ensure_data(args.work_dir, args.users, args.items, args.mean_ratings)
    with open(os.path.join(data_dir, "manifest.json")) as f:
        counts = json.load(f)["counts"]
    print(f"data: {data_dir}: {counts['num_users']:,} users, {counts['num_items']:,} items, "
          f"{counts['train_positives']:,} training positives; batch {args.batch:,}; {os.cpu_count()} cores here, "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    randoms = args.random.split(",") if args.epoch_build == "device" else ["stock"]
    if set(randoms) - {"stock", "hash"}:
        parser.error(f"--random={args.random}: choose stock and/or hash")
    for cores, random in ((int(c), r) for c in args.cores.split(",") for r in randoms):
        r = run_child(__file__, f"--data_dir={data_dir}", f"--cores={cores}", f"--batch={args.batch}",
                      f"--epochs={args.epochs}", f"--warmup_epochs={args.warmup_epochs}",
                      f"--epoch_build={args.epoch_build}", f"--random={random}")
        rate = r["samples"] / r["seconds"]
        per_core = rate / cores
        load = os.getloadavg()[0]
        needed, needed_cpu = cores_for(H200_SAMPLES_PER_S, per_core, r["samples"], r["cpu_seconds"])
        label = f"{args.epoch_build} ({random} random numbers)" if args.epoch_build == "device" else "host"
        print(f"ncf train stream, epoch built on the {label}, batch {args.batch:,}: "
              f"{rate / 1e6:6.2f} M samples/s on {cores} core(s) = "
              f"{per_core / 1e6:6.2f} M samples/s per core ({r['samples'] / r['cpu_seconds'] / 1e6:.2f} M per "
              f"CPU-second); one epoch ({r['samples_per_epoch']:,} samples, {r['steps_per_epoch']} batches) builds "
              f"in {r['epoch_build_s']:.2f} s, {r['epoch_build_cpu_s']:.2f} CPU-s; one H200 "
              f"({H200_SAMPLES_PER_S / 1e6:.1f} M samples/s) "
              f"needs {needed} such cores ({needed_cpu} at the CPU-second rate); load average {load:.1f}",
              flush=True)
        print(json.dumps({"workload": "ncf", "epoch_build": args.epoch_build,
                          "random": random if args.epoch_build == "device" else "numpy_pcg64",
                          "cores": cores, "batch": args.batch,
                          "samples": r["samples"],
                          "batches": r["batches"], "seconds": round(r["seconds"], 4),
                          "cpu_seconds": round(r["cpu_seconds"], 4), "samples_per_s": round(rate),
                          "samples_per_s_per_core": round(per_core),
                          "samples_per_cpu_s": round(r["samples"] / r["cpu_seconds"]),
                          "epoch_build_s": round(r["epoch_build_s"], 4),
                          "epoch_build_cpu_s": round(r["epoch_build_cpu_s"], 4),
                          "setup_s": round(r["setup_s"], 3), "samples_per_epoch": r["samples_per_epoch"],
                          "train_positives": r["positives"], "gpu_samples_per_s": H200_SAMPLES_PER_S,
                          "cores_for_one_gpu": needed, "cores_for_one_gpu_cpu": needed_cpu,
                          "load_average": round(load, 2),
                          "cpu_count": os.cpu_count()}), flush=True)


if __name__ == "__main__":
    main()
