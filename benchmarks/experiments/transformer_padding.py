"""Experiment: what the Transformer reference's batching costs in padding, and what ours adds (CPU, NumPy only).

    python benchmarks/experiments/transformer_padding.py [--pairs=4500000] [--batch_tokens=8192] [--data_dir=PREPARED]

Pairs: the training pairs' (source, target) subword lengths from a prepared dataset's records (--data_dir, read with
the TF-free record reader), else a WMT-like mix: source lengths log-normal (median 26 subwords, sigma 0.6), the target
the source times a log-normal ratio (median 1.05, sigma 0.15), as English -> German runs slightly longer.
Batching, both with the reference's buckets (tensor2tensor's boundaries 8, then x1.1 up to max_length, by the pair's
longer side; batch_tokens // boundary pairs per batch) over one shuffled pass:
- reference: each batch padded side by side to its own longest sequence (mlcommons/training 8dbd7b0
  translation/tensorflow/transformer/utils/dataset.py _batch_examples: group_by_window, then
  padded_batch(bucket_batch_size, ([None], [None]))). Its buckets are [previous boundary, boundary), with
  batch_size // boundary pairs; here both schemes use inputs/text.BucketPlan's (previous, boundary], so a pair whose
  longer side equals a boundary falls one bucket lower than in the reference;
- ours: each batch padded to its bucket's length on both sides and to its bucket's batch size (inputs/text.py), so a
  compiled step sees one shape per bucket.
Prints one JSON line: the fraction of target positions (what the loss and the decoder compute) and of source + target
positions that are padding, for each, and the real target tokens per computed target position.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def wmt_like_lengths(pairs: int, max_length: int, seed: int):
    rng = np.random.default_rng(seed)
    source = np.maximum(1, np.round(rng.lognormal(np.log(26.0), 0.6, pairs))).astype(np.int64)
    target = np.maximum(1, np.round(source * rng.lognormal(np.log(1.05), 0.15, pairs))).astype(np.int64)
    keep = np.maximum(source, target) <= max_length
    return source[keep], target[keep]


def prepared_lengths(data_dir: str):
    from mlperf_keras.inputs import record_reader
    from mlperf_keras.inputs.manifest import read_manifest, worker_files

    manifest = read_manifest(data_dir, "transformer")
    source, target = [], []
    for path in worker_files(data_dir, manifest, "train", 0, 1):
        for record in record_reader.iter_records(path):
            example = record_reader.parse_example(record)
            source.append(len(example["inputs"]))
            target.append(len(example["targets"]))
    return np.asarray(source), np.asarray(target)


def padding(source, target, batch_tokens: int, max_length: int, seed: int) -> dict:
    from mlperf_keras.inputs.text import BucketPlan

    plan = BucketPlan.create(batch_tokens, max_length)
    bucket = plan.bucket_of(np.maximum(source, target))
    order = np.random.default_rng(seed).permutation(len(source))
    real_t = int(target.sum())
    real_all = real_t + int(source.sum())
    ref_t = ref_all = ours_t = ours_all = 0
    for k, (length, rows) in enumerate(zip(plan.lengths, plan.batch_sizes)):
        members = order[bucket[order] == k]
        for start in range(0, len(members), rows):
            batch = members[start:start + rows]
            ref_t += len(batch) * int(target[batch].max())
            ref_all += len(batch) * int(target[batch].max() + source[batch].max())
            ours_t += rows * length
            ours_all += 2 * rows * length
    return {"pairs": int(len(source)), "batch_tokens": batch_tokens, "max_length": max_length,
            "median_source": float(np.median(source)), "median_target": float(np.median(target)),
            "reference_target_padding": round(1 - real_t / ref_t, 4),
            "reference_all_padding": round(1 - real_all / ref_all, 4),
            "ours_target_padding": round(1 - real_t / ours_t, 4),
            "ours_all_padding": round(1 - real_all / ours_all, 4),
            "ours_target_positions_per_reference": round(ours_t / ref_t, 4)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4_500_000, help="WMT-like pairs (WMT17 En-De has about 4.5 M)")
    parser.add_argument("--batch_tokens", type=int, default=8192)
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--data_dir", help="a dataset prepared by data_prep.wmt (else WMT-like lengths)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.data_dir:
        source, target = prepared_lengths(args.data_dir)
        keep = np.maximum(source, target) <= args.max_length
        source, target = source[keep], target[keep]
    else:
        source, target = wmt_like_lengths(args.pairs, args.max_length, args.seed)
    print(json.dumps({"lengths": args.data_dir or "wmt-like",
                      **padding(source, target, args.batch_tokens, args.max_length, args.seed)}))


if __name__ == "__main__":
    main()
