#!/usr/bin/env bash
# Where the JAX train step's time goes beyond the model's gradient (benchmarks/experiments/step_parts.py), with the
# peer in the same call; one H200, results in $OUT/step_speed.jsonl:
#   bash benchmarks/experiments/step_speed_h200.sh gnmt_transformer|resnet|peers   (repo root; wheels in .whl/)
set -uo pipefail
OUT=${OUT:-/tmp/step_speed}; mkdir -p "$OUT"; R="$OUT/step_speed.jsonl"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B="--backend=jax --flagfile=flags/h200.flags --ruleset=0.5 --steps=30 --warmup_steps=5 --seed=1"
keep() { grep -E '^\{|^ |on [0-9]+ x|rror|FAILED' ; }
parts() {  # model batch tag [more benchmark flags]
  local m=$1 b=$2 tag=$3; shift 3
  timeout "${PARTS_TIMEOUT:-240}" python3 benchmarks/experiments/step_parts.py --steps=20 -- --model="$m" --batch_size="$b" $B \
    --save_batch="/tmp/${m}_batch.npz" --json_out="/tmp/${tag}.json" "$@" 2>&1 | keep | tee -a "$OUT/log" \
    | grep '^{"part"' | sed "s/^{/{\"tag\": \"$tag\", /" >> "$R"
  [ -f "/tmp/${tag}.json" ] && python3 -c "import json; d=json.load(open('/tmp/${tag}.json')); d['tag']='$tag'; print(json.dumps(d))" >> "$R"
}
ours() {  # model batch tag [more benchmark flags]: the workload's benchmark alone
  local m=$1 b=$2 tag=$3; shift 3
  timeout 150 python3 -m mlperf_keras.benchmark --model="$m" --batch_size="$b" $B --json_out="/tmp/${tag}.json" "$@" 2>&1 \
    | keep | tee -a "$OUT/log"
  [ -f "/tmp/${tag}.json" ] && python3 -c "import json; d=json.load(open('/tmp/${tag}.json')); d['tag']='$tag'; print(json.dumps(d))" >> "$R"
}
peer() {  # model batch [peer flags]
  local m=$1 b=$2; shift 2
  timeout 150 python3 benchmarks/torch_peers.py --model="$m" --batch_size="$b" --steps=30 --warmup_steps=5 "$@" 2>/dev/null \
    | tail -1 | tee -a "$R" || echo "FAILED: peer $m $*"
}
case "${1:-}" in
  gnmt_transformer)
    parts gnmt 256 gnmt_shipped
    peer gnmt 256 --batch_file=/tmp/gnmt_batch.npz
    PARTS_TIMEOUT=200 parts transformer 8192 transformer_shipped ;;
  resnet)
    PARTS_TIMEOUT=180 parts resnet 256 resnet_shipped
    peer resnet 256
    ours resnet 512 resnet_batch512
    XLA_FLAGS=--xla_gpu_use_runtime_fusion=true ours resnet 256 resnet_runtime_fusion ;;
  peers)
    # Ours next to the peers in one call: GNMT on our batch (eager, compiled), the Transformer on our padded batch
    # (padding masked) and on an unpadded batch of its shape.
    ours gnmt 256 gnmt_ours --save_batch=/tmp/gnmt_batch.npz
    peer gnmt 256 --batch_file=/tmp/gnmt_batch.npz --no_compile
    peer gnmt 256 --batch_file=/tmp/gnmt_batch.npz
    ours gnmt 512 gnmt_batch512
    ours transformer 8192 transformer_ours --save_batch=/tmp/transformer_batch.npz
    peer transformer 8192 --batch_file=/tmp/transformer_batch.npz
    peer transformer 8192 --seq_len="$(python3 -c "import numpy as np; print(np.load('/tmp/transformer_batch.npz')['source'].shape[1])")" ;;
  *) echo "usage: bash $0 gnmt_transformer|resnet|peers" >&2; exit 2 ;;
esac
