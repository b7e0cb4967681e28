#!/usr/bin/env bash
# Device calls of 2026-12-07 (evening): does nvImageCodec's decode slow beside the train step because it shares the
# SMs, waits on the device, or waits for the interpreter; and which decoder variant (fed_decoder_variants.py) feeds
# ResNet faster? `bash benchmarks/experiments/decode_contention.sh 1` (first call), `2` or `CALL3=1 ... 3`, from the repo
# root with .whl/ and .cache/realdata carried. Results: $OUT/results.jsonl (fed runs), $OUT/parts.jsonl (parts).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_suite}
mkdir -p "$OUT"
# the fed baseline, as shipped (and gpu_suite installs .whl/ into /tmp/site)
STEPS=20 FED_ONLY=1 MODELS=resnet TIMEOUT=150 bash benchmarks/gpu_suite.sh realdata
export PYTHONPATH=/tmp/site:. KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
parts() {
  timeout 150 python3 benchmarks/experiments/gpu_decode_parts.py --batches=25 "$@" 2>>"$OUT/parts.log" \
    | tee -a "$OUT/parts.jsonl" | cut -c1-300 || echo "FAILED: parts $*"
}
fed() {  # tag, then variant flags (MODEL=ssd: SSD, batch 128, on COCO)
  local tag=$1 model=${MODEL:-resnet}; shift
  local batch=256 data=.cache/realdata/imagenet
  [ "$model" = ssd ] && batch=128 data=.cache/realdata/coco
  timeout 150 python3 benchmarks/experiments/fed_decoder_variants.py "$@" -- --model=$model --backend=jax \
    --flagfile=flags/h200.flags --ruleset=0.5 --batch_size=$batch --steps=20 --warmup_steps=5 \
    --data_dir=$data --json_out="/tmp/fed_$tag.json" 2>&1 | tee -a "$OUT/fed.log" \
    | grep -E "^ |^variant|decoding on" || echo "FAILED: fed $tag"
  [ -f "/tmp/fed_$tag.json" ] && python3 -c "import json; d=json.load(open('/tmp/fed_$tag.json')); d['tag']='$tag'; print(json.dumps(d))" >> "$OUT/results.jsonl"
}
IMAGENET=.cache/realdata/imagenet
PADDING=":device_memory_padding=16777216 :host_memory_padding=8388608"
case "${1:-}" in
  1)
    parts --data_dir=$IMAGENET --loads=none,jax,cupy_nonblocking,cupy_blocking,python
    parts --data_dir=$IMAGENET --backend=HW_GPU_ONLY --loads=none,jax,cupy_nonblocking
    fed reuse --reuse_images
    fed priority --stream_priority=high
    fed reuse_priority --reuse_images --stream_priority=high
    parts --model=ssd --data_dir=.cache/realdata/coco --batch_size=128 --loads=none,jax,cupy_nonblocking ;;
  2)
    decode=region_decode,region_decode_threads
    parts --data_dir=$IMAGENET --loads=none,jax,python,cupy_blocking --parts=$decode,canvas,canvas_and_resize
    parts --data_dir=$IMAGENET --loads=none,jax --parts=$decode --decode_threads=4 --stream_priority=high
    parts --data_dir=$IMAGENET --loads=jax --parts=region_decode --options=":num_cuda_streams=4"
    fed threads2 --reuse_images --decode_threads=2
    fed threads3 --reuse_images --decode_threads=3
    fed reuse_priority --reuse_images --stream_priority=high
    fed reuse --reuse_images ;;
  3)  # run as CALL3=1 bash ... 3 (the fed baseline above is then ResNet alone, reusing images as shipped): the GPU
      # tests; new images every batch; nvJPEG's memory paddings at DALI's defaults (buffers that grow less often);
      # the canvas's copies beside a thread that holds the GIL; then SSD as shipped and with new images every batch
    python3 -m pytest -q -m gpu tests/test_imagenet_gpu_decode.py -p no:cacheprovider 2>&1 | tail -4
    fed resnet_no_reuse --no_reuse
    fed resnet_padding --options="$PADDING"
    parts --data_dir=$IMAGENET --batches=8 --loads=none,python --parts=region_decode,canvas
    parts --data_dir=$IMAGENET --batches=10 --loads=none,jax --parts=region_decode,canvas --options="$PADDING"
    STEPS=20 FED_ONLY=1 MODELS=ssd TIMEOUT=150 bash benchmarks/gpu_suite.sh realdata
    MODEL=ssd fed ssd_no_reuse --no_reuse
    fed one_copy --one_copy ;;
  *) echo "usage: decode_contention.sh 1|2|3" >&2; exit 2 ;;
esac
