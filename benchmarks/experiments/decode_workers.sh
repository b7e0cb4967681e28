#!/usr/bin/env bash
# Device calls of 2026-12-07 (night): does decoding in worker processes of their own (hparam decode_workers,
# inputs/decode_process: each its own interpreter and CUDA context, canvases to the training process by CUDA IPC)
# feed ResNet-50 and SSD faster than decoding in the training process? `bash benchmarks/experiments/decode_workers.sh 1`
# from the repo root with .whl/ and .cache/realdata carried. Results: $OUT/results.jsonl (fed runs),
# $OUT/parts.jsonl (decode beside a load in this process and in another), $OUT/ours.log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_suite}
mkdir -p "$OUT"
fed() {  # MODELS=..., then gpu_suite's environment (DECODE_WORKERS=N, INPUT_PIPELINE=...)
  env STEPS=20 FED_ONLY=1 TIMEOUT=150 "$@" bash benchmarks/gpu_suite.sh realdata
}
parts() {
  PYTHONPATH=/tmp/site:. KERAS_BACKEND=jax timeout 120 python3 benchmarks/experiments/gpu_decode_parts.py \
    --batches=12 "$@" 2>>"$OUT/parts.log" | tee -a "$OUT/parts.jsonl" | cut -c1-400 || echo "FAILED: parts $*"
}
IMAGENET=.cache/realdata/imagenet
case "${1:-}" in
  1)
    fed MODELS=resnet                      # the baseline (and gpu_suite installs .whl/ into /tmp/site)
    fed MODELS=resnet DECODE_WORKERS=2
    fed MODELS=ssd
    fed MODELS=ssd DECODE_WORKERS=2
    PYTHONPATH=/tmp/site:. KERAS_BACKEND=jax timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/test_imagenet_gpu_decode.py -k "decode_workers or reusing" 2>&1 | tail -4
    parts --data_dir=$IMAGENET --loads=none,jax,jax_process --parts=region_decode
    fed MODELS=resnet DECODE_WORKERS=1
    fed MODELS=resnet DECODE_WORKERS=3 ;;
  *) echo "usage: decode_workers.sh 1" >&2; exit 2 ;;
esac
