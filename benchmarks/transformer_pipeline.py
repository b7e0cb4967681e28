"""Benchmark: the WMT training input pipeline (inputs/text.py) alone on the CPU, target tokens/s and per core.

    python benchmarks/transformer_pipeline.py [--data_dir=PREPARED] [--work_dir=/tmp/transformer_pipeline_bench]
                                              [--pairs=300000] [--cores=1,2] [--batch_tokens=4096,8192]
                                              [--batches=300] [--warmup=20]

Data: a dataset prepared by data_prep.wmt; without --data_dir, a parallel corpus in the WMT17 file layout is
generated into --work_dir and prepared there by data_prep.wmt (once; reused afterwards): --pairs sentence pairs
whose word counts are log-normal (median --median_words; a long tail, so a few pairs exceed 256 subwords and are
discarded as the reference does) over a Zipf-distributed vocabulary of --words made-up words, the German side a
fixed word-for-word dictionary of the English; a sentencepiece unigram vocabulary of --vocab_size pieces splits the
rarer words (about 2.5 pieces per word), so by default pairs come out near WMT En-De's median of about 27 subwords
(the script prints the median it got). The default size
generates and prepares in about 2.5 minutes on a busy 2-core machine.

What is timed: exactly what workloads/transformer.py train_data gives the training loop on the JAX backend (the GPU
runs), one worker: shard shuffle, interleaved TFRecord reads, parse, the 256-subword length filter, a 100,000-pair
shuffle buffer, bucketing by length into fixed-shape batches of --batch_tokens tokens per batch (tensor2tensor's
buckets: 8, then x1.1), NumPy batches. No model runs. Filling the shuffle buffer and the first --warmup batches are
start-up and are not timed. Each configuration (cores x batch_tokens) runs in a fresh process pinned to that many
cores (os.sched_setaffinity) with a private tf.data thread pool of as many threads.

Per configuration: one human line and one JSON line with real target tokens/s (non-padding target positions, EOS
included: the unit of the reference's tokens/s and of our GPU figures), per core, and CPU-ms per 1,000 target tokens
(process CPU time, which holds even on a shared machine); then how many cores that rate means for one H200, whose
Transformer-big step consumes 208,930 target tokens/s at 8,192 tokens per batch (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from child_process import ROOT, cores_for, run_child

sys.path.insert(0, ROOT)

H200_TOKENS_PER_S = 208_930  # our Transformer-big train step, 8,192 tokens per batch, one H200, JAX bf16 (RESULTS.md)


def write_corpus(raw_dir: str, pairs: int, words: int, median_words: float, seed: int) -> None:
    """The WMT17 layout from data_prep.wmt.write_demo_raw (folders, newstest2014 SGML), then each training corpus's
    .en/.de files rewritten with `pairs` generated sentence pairs in total (vectorised: seconds for 10^5 pairs)."""
    import numpy as np

    from data_prep import wmt

    wmt.write_demo_raw(raw_dir, num_pairs=len(wmt.REFERENCE_CORPORA), num_test=100, task="dictionary", seed=seed)
    rng = np.random.default_rng(seed)
    letters = np.array(list("abdefghiklmnoprstuvw"))
    vocab = set()
    while len(vocab) < 2 * words:
        vocab.update("".join(rng.choice(letters, size=int(rng.integers(2, 10)))) for _ in range(2 * words))
    vocab = np.array(sorted(vocab)[:2 * words])
    vocab = vocab[rng.permutation(len(vocab))]
    english, german = vocab[:words], vocab[words:]
    zipf = 1.0 / np.arange(1, words + 1)
    lengths = np.clip(np.round(rng.lognormal(np.log(median_words), 0.6, size=pairs)), 1, 400).astype(np.int64)
    ids = rng.choice(words, size=int(lengths.sum()), p=zipf / zipf.sum())
    cuts = np.concatenate([[0], np.cumsum(lengths)])
    stems = [wmt.CORPORA[c][0] for c in wmt.REFERENCE_CORPORA]
    found = {}
    for directory, _, files in os.walk(raw_dir):
        for name in files:
            found[name] = os.path.join(directory, name)
    for stem, rows in zip(stems, np.array_split(np.arange(pairs), len(stems))):
        for lang, table in (("en", english), ("de", german)):
            with open(found[f"{stem}.{lang}"], "w", encoding="utf-8") as f:
                f.write("".join(" ".join(table[ids[cuts[i]:cuts[i + 1]]]) + " .\n" for i in rows))


def ensure_data(work_dir: str, pairs: int, words: int, median_words: float, vocab_size: int) -> str:
    name = f"{pairs}_{words}_{median_words:g}"
    prepared = os.path.join(work_dir, f"prepared_{name}_{vocab_size}")
    if os.path.exists(os.path.join(prepared, "manifest.json")):
        return prepared
    from data_prep import wmt

    raw = os.path.join(work_dir, f"raw_{name}")
    start = time.time()
    write_corpus(raw, pairs, words, median_words, seed=1)
    generated = time.time() - start
    wmt.prepare(raw, prepared, vocab_kind="unigram", vocab_size=vocab_size, max_length=256, num_shards=16,
                vocab_sample=200_000, byte_fallback=False, overwrite=True, log=lambda _: None)
    print(f"generated {pairs:,} pairs in {generated:.0f} s, prepared them in {time.time() - start - generated:.0f} s "
          f"into {prepared}", flush=True)
    return prepared


def child(args):
    """One configuration, in this process: pin to the first args.cores cores, then import TensorFlow and time."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(args.cores)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from mlperf_keras.inputs.manifest import read_manifest
    from mlperf_keras.workloads.transformer import Transformer

    workload = Transformer()
    manifest = read_manifest(args.data_dir, "transformer")
    hparams = {**workload.reference_hparams("0.5"), **workload.dataset_hparams(manifest)}
    config = types.SimpleNamespace(hparams=hparams, seed=1, data_dir=args.data_dir, num_workers=1,
                                   global_batch_size=args.batch_tokens, per_worker_batch_size=args.batch_tokens,
                                   backend="jax")
    dist = types.SimpleNamespace(rank=0, world_size=1)
    data = workload.train_data(config, dist, manifest)
    options = tf.data.Options()
    options.threading.private_threadpool_size = args.cores
    # data.batches(0) is this dataset's as_numpy_iterator(); the options only give it a private pool of --cores.
    stream = data.source.dataset(0).with_options(options).as_numpy_iterator()
    tokens = positions = pairs = batches = 0
    start = cpu = None
    t0 = time.time()
    for i, (x, y) in enumerate(stream):
        if i == args.warmup:
            start, cpu, startup = time.time(), time.process_time(), time.time() - t0
        if i >= args.warmup:
            tokens += int(np.count_nonzero(y))
            positions += y.size
            pairs += int(np.count_nonzero(y[:, 0]))
            batches += 1
        if batches == args.batches:
            break
    if start is None or batches == 0:
        sys.exit(f"the epoch has only {i + 1} batches: prepare more pairs or lower --warmup")
    seconds, cpu_seconds = time.time() - start, time.process_time() - cpu
    consumed = hparams["shuffle_buffer"] + pairs * (args.warmup + batches) / batches
    print(json.dumps({"target_tokens": tokens, "target_positions": positions, "pairs": pairs, "batches": batches,
                      "seconds": seconds, "cpu_seconds": cpu_seconds, "startup_s": startup,
                      "steady_state": consumed <= manifest["counts"]["train_pairs"],
                      "steps_per_epoch": int(data.steps_per_epoch)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=None, help="a dataset prepared by data_prep.wmt (default: generate "
                        "--pairs pairs into --work_dir and prepare them)")
    parser.add_argument("--work_dir", default="/tmp/transformer_pipeline_bench")
    parser.add_argument("--pairs", type=int, default=300_000, help="generated sentence pairs (WMT17 En-De: 4.5 "
                        "million; more than the 100,000-pair shuffle buffer plus the timed batches keeps the "
                        "timing in the steady state)")
    parser.add_argument("--words", type=int, default=20_000, help="distinct generated words per language")
    parser.add_argument("--median_words", type=float, default=11.0,
                        help="median words per generated sentence (log-normal); the default gives pairs of a median "
                        "of about 27 subwords, as WMT En-De")
    parser.add_argument("--vocab_size", type=int, default=8_000, help="sentencepiece pieces to prepare with")
    parser.add_argument("--cores", default="1,2", help="comma-separated core counts, one fresh process each")
    parser.add_argument("--batch_tokens", default="4096,8192",
                        help="comma-separated tokens per batch (the reference: 4,096 per GPU)")
    parser.add_argument("--batches", type=int, default=300, help="timed batches per configuration")
    parser.add_argument("--warmup", type=int, default=20, help="untimed batches first (after the shuffle buffer)")
    parser.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        args.cores, args.batch_tokens = int(args.cores), int(args.batch_tokens)
        return child(args)

    data_dir = args.data_dir or ensure_data(args.work_dir, args.pairs, args.words, args.median_words, args.vocab_size)
    with open(os.path.join(data_dir, "manifest.json")) as f:
        manifest = json.load(f)
    counts = manifest["counts"]
    hist = [0] * (counts["max_length"] + 1)
    for entry in manifest["files"]:
        if entry.get("split") == "train":
            hist = [a + b for a, b in zip(hist, entry["lengths"])]
    median = next(n for n, c in enumerate(_cumsum(hist)) if c >= sum(hist) / 2)
    print(f"data: {data_dir}: {counts['train_pairs']:,} pairs (median pair length {median} subwords, "
          f"{counts['dropped_long']:,} longer than {counts['max_length']} discarded), vocabulary "
          f"{counts['vocab_size']:,}; {os.cpu_count()} cores here, load average {os.getloadavg()[0]:.1f} at start",
          flush=True)
    for cores in (int(c) for c in args.cores.split(",")):
        for batch_tokens in (int(b) for b in args.batch_tokens.split(",")):
            r = run_child(__file__, f"--data_dir={data_dir}", f"--cores={cores}", f"--batch_tokens={batch_tokens}",
                          f"--batches={args.batches}", f"--warmup={args.warmup}")
            rate = r["target_tokens"] / r["seconds"]
            per_core = rate / cores
            load = os.getloadavg()[0]
            needed, needed_cpu = cores_for(H200_TOKENS_PER_S, per_core, r["target_tokens"], r["cpu_seconds"])
            warning = "" if r["steady_state"] else (" [the timed batches ran past the data behind the shuffle "
                                                    "buffer: prepare more --pairs]")
            print(f"transformer train pipeline, {batch_tokens:,} tokens per batch: {rate:9,.0f} target tokens/s on "
                  f"{cores} core(s) = {per_core:9,.0f} per core; "
                  f"{1e6 * r['cpu_seconds'] / r['target_tokens']:.2f} CPU-ms per 1,000 target tokens; "
                  f"{r['target_tokens'] / r['batches']:,.0f} real target tokens per batch; one H200 (208,930 target "
                  f"tokens/s) needs {needed} such cores ({needed_cpu} at the CPU-second rate); load average "
                  f"{load:.1f}{warning}", flush=True)
            print(json.dumps({"workload": "transformer", "cores": cores, "batch_tokens": batch_tokens,
                              "batches": r["batches"], "target_tokens": r["target_tokens"], "pairs": r["pairs"],
                              "seconds": round(r["seconds"], 4), "cpu_seconds": round(r["cpu_seconds"], 4),
                              "target_tokens_per_s": round(rate), "target_tokens_per_s_per_core": round(per_core),
                              "target_tokens_per_cpu_s": round(r["target_tokens"] / r["cpu_seconds"]),
                              "target_padding": round(1 - r["target_tokens"] / r["target_positions"], 4),
                              "startup_s": round(r["startup_s"], 3), "steady_state": r["steady_state"],
                              "gpu_target_tokens_per_s": H200_TOKENS_PER_S, "cores_for_one_gpu": needed,
                              "cores_for_one_gpu_cpu": needed_cpu,
                              "load_average": round(load, 2), "cpu_count": os.cpu_count()}), flush=True)


def _cumsum(values):
    total = 0
    for v in values:
        total += v
        yield total


if __name__ == "__main__":
    main()
