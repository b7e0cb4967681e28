"""Benchmark: the ImageNet tf.data pipeline (inputs/image.py), images/s and images/s per core, train and eval.

    python benchmarks/imagenet_pipeline.py [--data_dir=/tmp/imagenet_bench/prepared] [--threads=N]
                                           [--batch=64] [--batches=40] [--image_size=224] [--eval_resize=256]

Reads a dataset prepared by data_prep.imagenet (default: the one benchmarks/imagenet_prep.py writes; run that
first) and times the training pipeline (records -> fused decode-and-crop, flip, resize, uint8 batches) and the eval
pipeline (decode, shorter side to 256, center crop) on a private tf.data thread pool of --threads threads (default:
every core). Only the input pipeline runs: no model. The first batches (pipeline start-up) are not timed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mlperf_keras.inputs import image, records  # noqa: E402
from mlperf_keras.inputs.manifest import read_manifest  # noqa: E402


def timed(dataset, warmup: int) -> tuple[int, float]:
    images, start = 0, None
    for i, (batch, _) in enumerate(dataset):
        if i == warmup:
            start = time.time()
        if i >= warmup:
            images += int(batch.shape[0])
    return images, time.time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="/tmp/imagenet_bench/prepared")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--eval_resize", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    manifest = read_manifest(args.data_dir, "resnet")
    train = records.worker_files(args.data_dir, manifest, "train", 0, 1)
    val = records.worker_files(args.data_dir, manifest, "validation", 0, 1)
    dataset = image.classification_train_dataset(train, seed=1, epoch=0, rank=0, batch_size=args.batch,
                                                 num_batches=args.batches + args.warmup, image_size=args.image_size,
                                                 shuffle_buffer=1000, threads=args.threads)
    n, seconds = timed(dataset, args.warmup)
    print(f"train pipeline ({args.image_size}px, decode_and_crop + flip + resize): {n / seconds:,.0f} images/s "
          f"on {args.threads} threads = {n / seconds / args.threads:,.0f} images/s per core")
    eval_images = manifest["counts"]["val_images"]
    passes = max(1, (args.batches * args.batch) // eval_images)
    total, seconds = 0, 0.0
    for _ in range(passes):
        dataset = image.classification_eval_dataset(val, batch_size=args.batch, image_size=args.image_size,
                                                    resize_min=args.eval_resize, threads=args.threads)
        n, s = timed(dataset, 1)
        total, seconds = total + n, seconds + s
    print(f"eval pipeline ({args.eval_resize} shorter side, center {args.image_size}px): {total / seconds:,.0f} "
          f"images/s on {args.threads} threads = {total / seconds / args.threads:,.0f} images/s per core")
    print(f"({os.cpu_count()} cores; JPEGs of {manifest['counts']['train_images']} generated 500x375 photos)")


if __name__ == "__main__":
    main()
