#!/usr/bin/env bash
# The GPU measurements of benchmarks/RESULTS.md, for the lent device (repo root; wheels for keras, namex, optree and
# mlperf-logging in .whl/, since the machine has JAX and PyTorch but no Keras; for realdata also google-crc32c and,
# to decode on the GPU, nvidia-nvimgcodec-cu13 and nvidia-nvjpeg):
#   bash benchmarks/gpu_suite.sh peers     # 1 GPU: ours (loop and bare step) and the PyTorch peer, per workload
#   bash benchmarks/gpu_suite.sh scaling   # 1 and 2 GPUs, per-GPU batch fixed (weak scaling), JAX DataParallel
#   bash benchmarks/gpu_suite.sh gnmt      # GNMT against its PyTorch peer on our own batch (eager and compiled),
#                                          # and beam-5 decoding sentences/s
#   bash benchmarks/gpu_suite.sh maskrcnn  # Mask R-CNN against torchvision's (same image size, ROI counts, objects);
#                                          # GRAPH_VARIANTS="roi_f32" also times graph variants, SPLIT=1 the parts
#                                          # of our graph on their own
#   bash benchmarks/gpu_suite.sh precision # 1 GPU: each of MODELS (default: all six) at bf16, then at fp16 (loss
#                                          # scaling), loop and bare step and the last timed step's loss
#   bash benchmarks/gpu_suite.sh transformer  # the Transformer against its peer on our own batch, and step variants
#                                             # (VARIANTS="flags;flags;..." picks benchmarks/experiments/transformer_variants.py runs)
#   bash benchmarks/gpu_suite.sh realdata  # 1 GPU: each of MODELS (default: all six) on prepared records
#                                          # (benchmarks/real_format_data.py, in REALDATA=.cache/realdata): the step
#                                          # fed by the input pipeline against the same batches resident on the
#                                          # device, then the input pipeline alone (--input_only);
#                                          # INPUT_WORKERS=N plans ResNet's and SSD's batches in N processes,
#                                          # DECODE_WORKERS=N also decodes them in N processes,
#                                          # INPUT_PIPELINE=gpu_hardware decodes ResNet's, SSD's and Mask R-CNN's
#                                          # JPEGs on the GPU's JPEG engines only, REPEAT=N lists ImageNet's and
#                                          # COCO's training files N times (epochs of many batches), FED_ONLY=1
#                                          # skips the --input_only runs
# STEPS=N timed steps (30), WARMUP=N warm-up steps (5) of each run of ours; its whole output goes to $OUT/ours.log.
# TIMEOUT=S limits each run of ours to S seconds (a run past it prints FAILED and the suite goes on).
# PROFILE=gil samples each run of ours with py-spy (its wheel in .whl/), 100 times a second, the stack of the thread
# holding the GIL; PROFILE=all every thread's, waiting ones too: $OUT/<model>_<tag>.<gil|all>.pyspy (py-spy's raw
# format, a "thread;frames count" line per stack; benchmarks/experiments/pyspy_threads.py sums it per thread).
# Each result is one JSON line appended to $OUT/results.jsonl.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_suite}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
# Never use NVLink multicast on shared hosts (the device README's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
declare -A BATCH=([ncf]=1048576 [resnet]=256 [ssd]=128 [transformer]=8192 [gnmt]=256 [maskrcnn]=8)
MODELS_GIVEN=${MODELS:-}
MODELS=${MODELS:-"ncf resnet ssd transformer"}
RUNS=/tmp/gpu_suite_runs  # one JSON per run (only a few files may come back from $OUT)
mkdir -p "$RUNS"

ours_seq_len() {  # the padded length of the batch our 1-GPU run measured (the peer's unpadded shape)
  python3 -c "import json; print(json.load(open('$RUNS/$1_ours_1gpu.json'))['batch_shapes']['source'][1])"
}

ours() {  # model gpus global_batch tag [--variant="variant flags" | other benchmark flags]
  local json="$RUNS/$1_$4.json" m=$1 gpus=$2 batch=$3 tag=$4 entry=(-m mlperf_keras.benchmark) profile=()
  shift 4
  local spy=(/tmp/site/bin/py-spy record --threads --nonblocking -r 100 -f raw)
  case "${PROFILE:-}" in
    gil) profile=("${spy[@]}" --gil -o "$OUT/${m}_$tag.gil.pyspy" --) ;;
    all) profile=("${spy[@]}" --idle -o "$OUT/${m}_$tag.all.pyspy" --) ;;
  esac
  if [[ "${1:-}" == --variant=* ]]; then
    read -ra entry <<< "benchmarks/experiments/transformer_variants.py ${1#--variant=} --"
    shift
  fi
  # --ruleset=0.5: the round every figure in RESULTS.md was measured at (ResNet's default is now 0.7, LARS; the
  # peers use SGD, as v0.5).
  CUDA_VISIBLE_DEVICES=$gpus ${TIMEOUT:+timeout "$TIMEOUT"} "${profile[@]}" python3 "${entry[@]}" --model="$m" \
    --backend=jax --flagfile=flags/h200.flags --ruleset=0.5 --batch_size="$batch" --steps="$STEPS" \
    --warmup_steps="$WARMUP" --json_out="$json" "$@" 2>&1 | tee -a "$OUT/ours.log" \
    | grep -E "^ |on [0-9]+ x|^variant|decoding on|pipeline alone" || echo "FAILED: $m $tag"
  [ -f "$json" ] && python3 -c "import json,sys; d=json.load(open('$json')); d['tag']='$tag'; print(json.dumps(d))" >> "$OUT/results.jsonl"
}

case "${1:-}" in
  peers)
    for m in $MODELS; do
      ours "$m" 0 "${BATCH[$m]}" ours_1gpu
      extra=""
      [ "$m" = transformer ] && extra="--seq_len=$(ours_seq_len "$m")"
      CUDA_VISIBLE_DEVICES=0 python3 benchmarks/torch_peers.py --model="$m" --batch_size="${BATCH[$m]}" --steps="$STEPS" \
        --warmup_steps=5 $extra 2>/dev/null | tail -1 | tee -a "$OUT/results.jsonl" || echo "FAILED: peer $m"
    done ;;
  scaling)
    gpus=$(nvidia-smi -L | wc -l)
    for m in $MODELS; do
      ours "$m" 0 "${BATCH[$m]}" scale_1gpu
      if [ "$gpus" -ge 2 ]; then ours "$m" 0,1 $((2 * ${BATCH[$m]})) scale_2gpu; fi
      if [ "$gpus" -ge 4 ]; then ours "$m" 0,1,2,3 $((4 * ${BATCH[$m]})) scale_4gpu; fi
    done ;;
  precision)
    for m in ${MODELS_PRECISION:-ncf resnet ssd transformer gnmt maskrcnn}; do
      extra=()
      # Mask R-CNN from random weights diverges at the reference's LR (see maskrcnn below).
      [ "$m" = maskrcnn ] && extra=(--hparams=learning_rate=0.0002)
      for p in bf16 fp16; do ours "$m" 0 "${BATCH[$m]}" "precision_$p" --precision="$p" "${extra[@]}"; done
    done ;;
  transformer)
    # Ours as shipped, saving its batch; the peer on that same padded batch (padding masked) and on an unpadded
    # batch of the same shape; then our step with one part swapped (benchmarks/experiments/transformer_variants.py).
    ours transformer 0 8192 ours_1gpu --seed=1 --save_batch="$RUNS/transformer_batch.npz"
    for peer in "--batch_file=$RUNS/transformer_batch.npz" \
                "--seq_len=$(ours_seq_len transformer)"; do
      CUDA_VISIBLE_DEVICES=0 python3 benchmarks/torch_peers.py --model=transformer --batch_size=8192 --steps="$STEPS" \
        --warmup_steps=5 $peer 2>/dev/null | tail -1 | tee -a "$OUT/results.jsonl" || echo "FAILED: peer $peer"
    done
    IFS=';' read -ra variants <<< "${VARIANTS:---dropout=rbg;--dropout=hash;--dropout=off;--attention=bf16_logits;--loss=logsumexp}"
    for v in "${variants[@]}"; do
      tag=$(echo "$v" | tr -c 'a-z0-9\n' '_')
      ours transformer 0 8192 "variant$tag" --variant="$v" --seed=1
    done ;;
  gnmt)
    # Ours as shipped (256 sentences, NVIDIA's v0.6/v0.7 per-GPU batch), saving its batch; the peer on that batch,
    # eager then compiled; then beam-5 decoding sentences/s (2 eval batches of 128, one source length).
    ours gnmt 0 256 ours_1gpu --seed=1 --save_batch="$RUNS/gnmt_batch.npz"
    for extra in "--no_compile" ""; do
      CUDA_VISIBLE_DEVICES=0 python3 benchmarks/torch_peers.py --model=gnmt --batch_size=256 --steps="$STEPS" \
        --warmup_steps=5 --batch_file="$RUNS/gnmt_batch.npz" $extra 2>/dev/null | tail -1 | tee -a "$OUT/results.jsonl" \
        || echo "FAILED: gnmt peer $extra"
      [ -z "$extra" ] || ours gnmt 0 256 decode_1gpu --decode_batches=2
    done ;;
  maskrcnn)
    # 8 images of 800 x 1333 padded to 800 x 1344 per GPU (flags/h200.flags; NVIDIA's v0.7 runs used 6 per GPU),
    # 7 objects each. Ours (the workload's benchmark), then torchvision's in the same call, then our graph on its own
    # (benchmarks/experiments/maskrcnn_graph.py: MaskRCNN(Spec()) and steps.make_train_step's jitted step) as
    # committed and with each of GRAPH_VARIANTS ("a,b;c": runs separated by ';').
    batch=${BATCH[maskrcnn]}
    # From random weights at the reference's LR (0.02 x 8 / 16) the loss is NaN within 25 steps (the reference starts
    # from a pretrained backbone), and NaN boxes change the step's data-dependent work: the timed steps run at LR
    # 1e-4 x 8 / 16, near where the graph's own script runs (the step's work does not depend on the LR otherwise).
    ours maskrcnn 0 "$batch" ours_1gpu --hparams=learning_rate=0.0002
    CUDA_VISIBLE_DEVICES=0 python3 benchmarks/torch_peers.py --model=maskrcnn --batch_size="$batch" --steps="$STEPS" \
      --warmup_steps=5 2>&1 | tee "$OUT/maskrcnn_peer.log" | grep '^{' | tee -a "$OUT/results.jsonl" || echo "FAILED: peer maskrcnn"
    IFS=';' read -ra variants <<< ";${GRAPH_VARIANTS:-}"
    for v in "${variants[@]}"; do
      CUDA_VISIBLE_DEVICES=0 python3 benchmarks/experiments/maskrcnn_graph.py --batch="$batch" --steps="$STEPS" \
        ${v:+--variant="$v"} ${SPLIT:+--split} --json_out="$OUT/results.jsonl" 2>&1 | tee -a "$OUT/maskrcnn_ours.log" \
        | grep -E '^\{|rror' || echo "FAILED: maskrcnn graph $v"
    done ;;
  realdata)
    # The datasets benchmarks/real_format_data.py prepares (official raw formats from real photos and WMT-like text,
    # through data_prep), carried to the device. Per model, at the suite's batch: the benchmark with --data_dir
    # (bare and loop on the pipeline's first batch, then fed against resident), then --input_only on the same data.
    REALDATA=${REALDATA:-.cache/realdata}
    if [ ! -d "$REALDATA" ]; then
      echo "no $REALDATA: python benchmarks/real_format_data.py makes it (needs TensorFlow)" >&2; exit 2
    fi
    declare -A DATASET=([ncf]=movielens [resnet]=imagenet [ssd]=coco [maskrcnn]=coco [transformer]=wmt17 [gnmt]=wmt16)
    # The Transformer last: its fed pass first compiles one step per bucket shape among its first STEPS + 5
    # batches (22 shapes in 35 batches of 8,192 tokens on this data), the longest set-up of the six.
    for m in ${MODELS_GIVEN:-ncf resnet ssd gnmt maskrcnn transformer}; do
      hp=() tag=""
      # INPUT_WORKERS=N: ResNet and SSD plan their batches in N worker processes (hparam input_workers; 0: a thread)
      if [ -n "${INPUT_WORKERS:-}" ] && { [ "$m" = resnet ] || [ "$m" = ssd ]; }; then
        hp+=("input_workers=$INPUT_WORKERS"); tag+="_w$INPUT_WORKERS"
      fi
      # DECODE_WORKERS=N: ResNet and SSD read, plan and decode their batches in N GPU worker processes (hparam
      # decode_workers)
      if [ -n "${DECODE_WORKERS:-}" ] && { [ "$m" = resnet ] || [ "$m" = ssd ]; }; then
        hp+=("decode_workers=$DECODE_WORKERS"); tag+="_d$DECODE_WORKERS"
      fi
      # INPUT_PIPELINE=gpu_hardware (or host): the image workloads' hparam input_pipeline
      if [ -n "${INPUT_PIPELINE:-}" ] && { [ "$m" = resnet ] || [ "$m" = ssd ] || [ "$m" = maskrcnn ]; }; then
        hp+=("input_pipeline=$INPUT_PIPELINE"); tag+="_$INPUT_PIPELINE"
      fi
      io=(${hp[@]:+--hparams="$(IFS=,; echo "${hp[*]}")"})
      # From random weights at the reference's LR Mask R-CNN's loss turns NaN (see maskrcnn above).
      [ "$m" = maskrcnn ] && hp+=("learning_rate=0.0002")
      extra=(${hp[@]:+--hparams="$(IFS=,; echo "${hp[*]}")"})
      data="$REALDATA/${DATASET[$m]}"
      # REPEAT=N: ImageNet's and COCO's training files listed N times (benchmarks/repeat_records.py), so that an
      # epoch holds many batches instead of one or two (each epoch boundary restarts the pipeline)
      if [ -n "${REPEAT:-}" ] && { [ "${DATASET[$m]}" = imagenet ] || [ "${DATASET[$m]}" = coco ]; }; then
        data="/tmp/realdata_x$REPEAT/${DATASET[$m]}"; tag+="_x$REPEAT"
        [ -d "$data" ] || python3 benchmarks/repeat_records.py --data_dir="$REALDATA/${DATASET[$m]}" \
          --copies="$REPEAT" --output_dir="$data" || exit 1
      fi
      ours "$m" 0 "${BATCH[$m]}" "realdata_fed$tag" --data_dir="$data" "${extra[@]}"
      [ -n "${FED_ONLY:-}" ] || ours "$m" 0 "${BATCH[$m]}" "realdata_input_only$tag" --data_dir="$data" --input_only "${io[@]}"
    done ;;
  *) echo "usage: bash benchmarks/gpu_suite.sh peers|scaling|precision|transformer|gnmt|maskrcnn|realdata" >&2
     exit 2 ;;
esac
