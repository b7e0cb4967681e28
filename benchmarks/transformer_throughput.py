"""Transformer measurements: training tokens/s (tiny config), padding of the length bucketing, decode sentences/s.

  python benchmarks/transformer_throughput.py [--workdir=/tmp/transformer_bench] [--jit_compile] [--epochs=2]

1. Padding: the bucketed pipeline at the reference settings (4,096 tokens, max_length 256, buckets 8 x1.1) over
   200,000 pairs with WMT-like lengths (log-normal source lengths, median 27 subwords; target/source ratio log-normal
   around 1.1), written as TFRecords and read by the real pipeline; compared with the reference's per-batch padding
   (each side padded to its own longest sequence in the batch) on the same batches.
2. Training: the demo corpus (WMT file layout, German copies English) prepared by data_prep.wmt, the demo's reduced
   Transformer (2+2 layers, d_model 64), token batches of 1,024; the first epoch compiles every bucket shape and is
   not timed; tokens/s counts real (non-padding) source + target tokens and target tokens alone.
3. Decoding: beam 4, alpha 0.6, batches of 64 sentences, over the 200 test sentences (second pass: compiled).
Keras backend: $KERAS_BACKEND (tensorflow by default; the data pipeline is tf.data either way).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def wmt_like_pairs(count, seed=0):
    rng = np.random.default_rng(seed)
    src = np.clip(np.round(rng.lognormal(np.log(27.0), 0.6, size=count)), 2, 300).astype(int)
    tgt = np.clip(np.round(src * rng.lognormal(np.log(1.1), 0.2, size=count)), 2, 300).astype(int)
    return src, tgt


def padding_benchmark(workdir, pairs=200_000):
    import tensorflow as tf

    from mlperf_keras.inputs import text

    src_len, tgt_len = wmt_like_pairs(pairs)
    os.makedirs(workdir, exist_ok=True)
    files, rng = [], np.random.default_rng(1)
    for k, rows in enumerate(np.array_split(np.arange(pairs), 8)):
        path = os.path.join(workdir, f"wmtlike-{k}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for i in rows:
                w.write(text.serialize_pair(rng.integers(3, 30000, src_len[i]).tolist(),
                                            rng.integers(3, 30000, tgt_len[i]).tolist()))
        files.append(path)
    plan = text.BucketPlan.create(4096, 256, 8, 1.1)
    hist = np.bincount(np.minimum(np.maximum(src_len, tgt_len), 257), minlength=258)[:257]
    steps = plan.steps(hist)
    batches = list(text.TrainPipeline(files, plan, 256, steps, 100_000, seed=0, as_numpy=True).batches(0))
    fixed, real = text.padding_fraction(batches)
    dynamic_alloc = 0
    for x, y in batches:  # the reference: each side padded to its own longest row, no empty rows
        rows = y[:, 0] != 0
        for side in (x["source"][rows], y[rows]):
            dynamic_alloc += side.shape[0] * int((side != 0).sum(axis=1).max())
    return {"pairs": int((hist[:257]).sum()), "batches": len(batches), "buckets": len(plan.lengths),
            "padding_fraction_fixed_shapes": round(fixed, 4),
            "padding_fraction_reference_dynamic": round(1 - real / dynamic_alloc, 4),
            "padding_fraction_longer_side_from_histogram": round(plan.padding_fraction(hist), 4),
            "mean_real_tokens_per_batch": round(real / len(batches), 1)}


def train_and_decode(workdir, epochs, jit_compile):
    import keras

    from data_prep import wmt
    from mlperf_keras import distribute, precision, steps as steps_mod
    from mlperf_keras.decoding import Translator
    from mlperf_keras.inputs import text
    from mlperf_keras.inputs.manifest import read_manifest, worker_shards
    from mlperf_keras.workloads.transformer import Transformer

    data = os.path.join(workdir, "demo_prepared")
    if not os.path.exists(os.path.join(data, "manifest.json")):
        raw = os.path.join(workdir, "demo_raw")
        wmt.write_demo_raw(raw, num_pairs=10_000, num_test=200, task="copy", seed=2017, archives=True)
        wmt.prepare(raw, data, vocab_size=48, max_length=32, num_shards=4, byte_fallback=False, log=lambda _: None)
    workload = Transformer()
    manifest = read_manifest(data, "transformer")
    hp = {**workload.reference_hparams("0.7"), **workload.dataset_hparams(manifest), **workload.demo_hparams}
    config = types.SimpleNamespace(hparams=hp, seed=1, per_worker_batch_size=hp["batch_tokens"], num_workers=1,
                                   data_dir=data, jit_compile=jit_compile)
    precision.set_policy("fp32")
    steps_mod.set_random_seed(1)
    model = workload.build_model(config)
    plan = workload.bucket_plan(config)
    steps = workload.steps_per_epoch(config, manifest)
    optimizer = workload.build_optimizer(config, steps)
    step = steps_mod.make_train_step(model, optimizer, workload.loss, distribute.SingleProcess(), jit_compile)
    files = [os.path.join(data, f["name"]) for f in worker_shards(manifest, "train", 0, 1)]
    pipeline = text.TrainPipeline(files, plan, hp["max_length"], steps, hp["shuffle_buffer"], 1,
                                  as_numpy=keras.backend.backend() != "tensorflow")
    results = {"train_steps_per_epoch": steps}
    for epoch in range(epochs + 1):
        batches = list(pipeline.batches(epoch))
        fraction, real = text.padding_fraction(batches)
        target_tokens = sum(int(np.count_nonzero(np.asarray(y))) for _, y in batches)
        start = time.time()
        for x, y in batches:
            loss = step(x, y)
        float(loss)
        seconds = time.time() - start
        if epoch == 0:
            results["first_epoch_seconds_with_compilation"] = round(seconds, 1)
            continue
        results.setdefault("train_tokens_per_s", []).append(round(real / seconds))
        results.setdefault("train_target_tokens_per_s", []).append(round(target_tokens / seconds))
        results["train_padding_fraction_demo"] = round(fraction, 4)
        results["loss"] = round(float(loss), 4)
    step.sync_to_model()

    sources, _, references, detokenize = text.load_eval_set(data, manifest)
    translator = Translator(model, beam_size=4, alpha=0.6, extra_length=hp["extra_decode_length"], eos_id=1,
                            jit_compile=jit_compile)
    batches = text.eval_batches([len(s) for s in sources], 64, 8, 1.5)
    for attempt in range(2):
        start = time.time()
        hyps = {}
        for rows, length in batches:
            out = translator(text.pad_eval_batch([sources[r] for r in rows if r >= 0], len(rows), length))
            for r, ids in zip(rows, out):
                if r >= 0:
                    hyps[int(r)] = ids
        seconds = time.time() - start
    results["decode_sentences_per_s_beam4"] = round(len(sources) / seconds, 1)
    from mlperf_keras.decoding import strip_eos
    from mlperf_keras.metrics.bleu import corpus_bleu

    results["bleu_after_training"] = round(corpus_bleu([detokenize(strip_eos(hyps[i], 1)) for i in range(len(sources))],
                                                       references), 2)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="/tmp/transformer_bench")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the compiling one")
    parser.add_argument("--jit_compile", action="store_true", help="XLA-compile train step and beam search")
    parser.add_argument("--skip_padding", action="store_true")
    args = parser.parse_args()
    import keras

    report = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "backend": keras.backend.backend(), "jit_compile": args.jit_compile,
              "date": time.strftime("%Y-%m-%d")}
    if not args.skip_padding:
        report["padding_reference_settings"] = padding_benchmark(os.path.join(args.workdir, "wmtlike"))
    report["tiny_demo_config"] = train_and_decode(args.workdir, args.epochs, args.jit_compile)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
