#!/usr/bin/env bash
# The GNMT LSTM-path investigation of 2026-12-02 on one H200 (JAX), one device call, results in $OUT/gnmt.jsonl:
#   bash benchmarks/experiments/gnmt_h200.sh   (repo root; KERAS_BACKEND=jax and the wheels already set up)
# Ours on the Keras LSTM path (cuDNN, float32) and on the scan path (bf16), the peer on the same batch, the step
# split on both paths, decoding sentences/s, then single LSTM layers on every path.
set -uo pipefail
OUT=${OUT:-/tmp/gnmt_h200}; mkdir -p "$OUT"; R="$OUT/gnmt.jsonl"
E=benchmarks/experiments/gnmt_lstm_paths.py
B="--model=gnmt --backend=jax --flagfile=flags/h200.flags --batch_size=256 --steps=20 --warmup_steps=5 --seed=1"
keep() { grep -E '^\{|^ |on [0-9]+ x|^variant|Error|error' ; }
ours() {  # tag, then experiment flags
  local tag=$1; shift
  timeout 150 python3 $E benchmark "$@" -- $B --json_out=/tmp/$tag.json ${SAVE:-} 2>&1 | keep
  [ -f /tmp/$tag.json ] && python3 -c "import json; d=json.load(open('/tmp/$tag.json')); d['tag']='$tag'; print(json.dumps(d))" >> "$R"
}
SAVE=--save_batch=/tmp/gb.npz ours ours_keras_path --lstm_path=keras
ours ours_scan_path --lstm_path=scan
timeout 120 python3 benchmarks/torch_peers.py --model=gnmt --batch_size=256 --steps=20 --warmup_steps=5 \
  --batch_file=/tmp/gb.npz --no_compile 2>&1 | grep '^{' | tee -a "$R"
for p in keras scan; do timeout 100 python3 $E split --lstm_path=$p --batch_file=/tmp/gb.npz 2>&1 | keep | tee -a "$R"; done
timeout 120 python3 -m mlperf_keras.benchmark --model=gnmt --backend=jax --flagfile=flags/h200.flags --decode_batches=2 \
  --json_out=/tmp/decode.json 2>&1 | keep
[ -f /tmp/decode.json ] && python3 -c "import json; d=json.load(open('/tmp/decode.json')); d['tag']='decode'; print(json.dumps(d))" >> "$R"
ours ours_scan_unroll4 --lstm_path=scan --unroll=4
L=$(python3 -c "import numpy as np; print(np.load('/tmp/gb.npz')['source'].shape[1])")
timeout 150 python3 $E layers --length="$L" --inputs=1024 2>&1 | keep | tee -a "$R"
