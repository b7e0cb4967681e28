#!/usr/bin/env bash
# Build and install Horovod 0.28.1 for the installed TensorFlow (2.21, Keras 3).
#
# Horovod 0.28.1 (the last release) does not compile against TF 2.21 as published:
# horovod/tensorflow/xla_mpi_ops.cc (an optional, GPU-only XLA custom-call allreduce)
# fails to build. This script downloads the sdist from PyPI, drops that one file from
# the TensorFlow source list in horovod/tensorflow/CMakeLists.txt, builds a wheel and
# installs it. The wheel is cached, so a second run only reinstalls it.
#
# CPU (default): Gloo controller + Gloo CPU ops.
# GPU: NCCL GPU ops when CUDA (nvcc or /usr/local/cuda) is present AND the installed
# TensorFlow is built with CUDA, or when HOROVOD_GPU_OPERATIONS is set by the caller.
# See BUILD.md. Run with --help for the options and environment variables.
set -euo pipefail

HOROVOD_VERSION=0.28.1
PROG=$(basename "$0")

usage() {
  cat <<EOF
Usage: bash scripts/$PROG [--force] [--help]

Builds a Horovod $HOROVOD_VERSION wheel for the installed TensorFlow (with the
xla_mpi_ops.cc patch), caches it and installs it, then checks the install.

Options:
  --force   rebuild the wheel even if a cached one exists
  --help    show this help

Environment:
  PYTHON                  Python interpreter to build/install for (default: python, else python3)
  MLPERF_KERAS_CACHE      cache root (default: \$HOME/.cache/mlperf_keras); wheels go to
                          \$MLPERF_KERAS_CACHE/wheels/<key>/, build logs to \$MLPERF_KERAS_CACHE/logs/
  HOROVOD_BUILD_JOBS      parallel compile jobs (default: number of cores, capped at 1 per 2 GiB RAM)
  HOROVOD_GPU_OPERATIONS  NCCL (or MPI) forces a GPU build; empty/unset = auto-detect
  HOROVOD_NCCL_HOME       NCCL install (include/ + lib/); also HOROVOD_NCCL_INCLUDE / HOROVOD_NCCL_LIB.
                          Auto-detected from the pip package nvidia-nccl-cu12 (tensorflow[and-cuda]).
  HOROVOD_BUILD_CUDA_CC_LIST  compute capabilities for the CUDA kernels, e.g. 90 for H100/H200
                          (default: every one nvcc supports, which is slow)
  HOROVOD_WITH_MPI=1      build the MPI controller too (default: only if mpicc/mpirun is found)
EOF
}

FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$PROG: unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done

log() { printf '[install_horovod] %s\n' "$*"; }
die() { printf '[install_horovod] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- interpreter, TF
if [[ -z "${PYTHON:-}" ]]; then
  if command -v python >/dev/null 2>&1; then PYTHON=python; else PYTHON=python3; fi
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "Python interpreter '$PYTHON' not found (set PYTHON=...)"

log "checking TensorFlow ($PYTHON)"
TF_INFO=$("$PYTHON" - 2>/dev/null <<'EOF'
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
try:
    import tensorflow as tf
except Exception as e:  # noqa: BLE001
    print("ERROR", type(e).__name__, e)
    sys.exit(0)
print(tf.__version__, "%d.%d" % sys.version_info[:2], int(tf.test.is_built_with_cuda()))
EOF
) || true
TF_INFO=$(printf '%s\n' "$TF_INFO" | tail -n 1)
if [[ -z "$TF_INFO" || "$TF_INFO" == ERROR* ]]; then
  die "cannot import tensorflow with $PYTHON (${TF_INFO:-no output}). Install TensorFlow 2.21 first (pip install tensorflow-cpu==2.21.* or tensorflow[and-cuda]==2.21.*)."
fi
read -r TF_VERSION PY_VERSION TF_CUDA <<<"$TF_INFO"
log "TensorFlow $TF_VERSION, Python $PY_VERSION, TF built with CUDA: $([[ $TF_CUDA == 1 ]] && echo yes || echo no)"
case "$TF_VERSION" in
  2.21.*) ;;
  *) log "WARNING: this script is tested with TensorFlow 2.21 only (found $TF_VERSION); trying anyway" ;;
esac

# ---------------------------------------------------------------- build configuration
# CUDA toolkit: HOROVOD_CUDA_HOME, else /usr/local/cuda, else the folder above nvcc's bin/.
CUDA_HOME_FOUND=""
if [[ -n "${HOROVOD_CUDA_HOME:-}" && -d "${HOROVOD_CUDA_HOME}" ]]; then
  CUDA_HOME_FOUND=$HOROVOD_CUDA_HOME
elif [[ -d /usr/local/cuda ]]; then
  CUDA_HOME_FOUND=/usr/local/cuda
elif command -v nvcc >/dev/null 2>&1; then
  CUDA_HOME_FOUND=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi

GPU_OPS="${HOROVOD_GPU_OPERATIONS:-}"
if [[ -n "$GPU_OPS" ]]; then
  log "HOROVOD_GPU_OPERATIONS=$GPU_OPS given by the environment: GPU build"
elif [[ -n "$CUDA_HOME_FOUND" && "$TF_CUDA" == 1 ]]; then
  GPU_OPS=NCCL
  log "CUDA found ($CUDA_HOME_FOUND) and TensorFlow is built with CUDA: GPU build with HOROVOD_GPU_OPERATIONS=NCCL"
elif [[ -n "$CUDA_HOME_FOUND" ]]; then
  log "CUDA found ($CUDA_HOME_FOUND) but this TensorFlow is CPU-only: CPU build (Gloo);" \
      "set HOROVOD_GPU_OPERATIONS=NCCL to force a GPU build"
fi

BUILD_ENV=(
  HOROVOD_WITH_TENSORFLOW=1
  HOROVOD_WITHOUT_PYTORCH=1
  HOROVOD_WITHOUT_MXNET=1
  HOROVOD_WITH_GLOO=1
)

if [[ "${HOROVOD_WITH_MPI:-}" == 1 ]]; then
  WITH_MPI=1
elif [[ "${HOROVOD_WITHOUT_MPI:-}" == 1 ]]; then
  WITH_MPI=0
elif command -v mpicc >/dev/null 2>&1 || command -v mpirun >/dev/null 2>&1; then
  WITH_MPI=1
else
  WITH_MPI=0
fi
if [[ $WITH_MPI == 1 ]]; then
  BUILD_ENV+=(HOROVOD_WITH_MPI=1)
else
  BUILD_ENV+=(HOROVOD_WITHOUT_MPI=1)
fi

NCCL_RPATH=""
if [[ -n "$GPU_OPS" ]]; then
  BUILD_ENV+=(HOROVOD_GPU_OPERATIONS="$GPU_OPS")
  if [[ "$GPU_OPS" == NCCL && -z "${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}${HOROVOD_NCCL_LIB:-}" ]]; then
    # A system NCCL (nccl.h next to CUDA or in /usr/include) is found by Horovod's CMake on
    # its own. Otherwise use the NCCL that tensorflow[and-cuda] installs (nvidia-nccl-cu12).
    if [[ -f "$CUDA_HOME_FOUND/include/nccl.h" || -f /usr/include/nccl.h ]]; then
      log "using the system NCCL"
    else
      PIP_NCCL=$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
      if [[ -n "$PIP_NCCL" && -f "$PIP_NCCL/include/nccl.h" ]]; then
        log "using NCCL from the pip package nvidia-nccl-cu12: $PIP_NCCL"
        BUILD_ENV+=(HOROVOD_NCCL_INCLUDE="$PIP_NCCL/include" HOROVOD_NCCL_LINK=SHARED)
        NCCL_RPATH="$PIP_NCCL/lib"   # libnccl.so.2 only; a libnccl.so link is made below
      else
        die "HOROVOD_GPU_OPERATIONS=NCCL but no NCCL found: set HOROVOD_NCCL_HOME (folder with include/nccl.h and lib/libnccl.so) or pip install nvidia-nccl-cu12"
      fi
    fi
  fi
  if [[ -z "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ]]; then
    log "note: HOROVOD_BUILD_CUDA_CC_LIST is unset, so the CUDA kernels are built for every architecture nvcc knows (slow); e.g. HOROVOD_BUILD_CUDA_CC_LIST=90 for H100/H200"
  fi
  FLAVOR="nccl"
  [[ "$GPU_OPS" != NCCL ]] && FLAVOR=$(printf '%s' "$GPU_OPS" | tr 'A-Z' 'a-z')
  [[ -n "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ]] && FLAVOR="${FLAVOR}-sm${HOROVOD_BUILD_CUDA_CC_LIST//,/_}"
else
  # CPU build: keep CUDA's NVTX headers out even where a CUDA toolkit is installed.
  BUILD_ENV+=(HOROVOD_WITHOUT_NVTX=1)
  FLAVOR="gloo"
fi
[[ $WITH_MPI == 1 ]] && FLAVOR="${FLAVOR}-mpi"

# Parallel compile jobs: one per core, at most one per 2 GiB of RAM (TF headers are heavy).
NPROC=$(nproc 2>/dev/null || echo 1)
MEM_GIB=$(awk '/MemTotal/ {print int($2/1048576)}' /proc/meminfo 2>/dev/null || echo 2)
JOBS=${HOROVOD_BUILD_JOBS:-$NPROC}
(( JOBS > MEM_GIB / 2 )) && JOBS=$(( MEM_GIB / 2 ))
(( JOBS < 1 )) && JOBS=1

CACHE_ROOT="${MLPERF_KERAS_CACHE:-$HOME/.cache/mlperf_keras}"
KEY="horovod-${HOROVOD_VERSION}_tf-${TF_VERSION}_py${PY_VERSION}_${FLAVOR}"
WHEEL_DIR="$CACHE_ROOT/wheels/$KEY"
LOG_DIR="$CACHE_ROOT/logs"
mkdir -p "$CACHE_ROOT/wheels" "$LOG_DIR"

# ---------------------------------------------------------------- python build deps
log "checking Python build dependencies (cloudpickle psutil pyyaml packaging wheel setuptools)"
if ! "$PYTHON" -c 'import cloudpickle, psutil, yaml, packaging, wheel, setuptools' >/dev/null 2>&1; then
  log "installing missing build dependencies"
  "$PYTHON" -m pip install --quiet cloudpickle psutil pyyaml packaging wheel setuptools \
    || die "pip install of the build dependencies failed"
fi

# ---------------------------------------------------------------- build (or reuse) the wheel
WORK=""
BUILD_PID=""
cleanup() {
  if [[ -n "$BUILD_PID" ]] && kill -0 "$BUILD_PID" 2>/dev/null; then
    kill -- "-$BUILD_PID" 2>/dev/null || kill "$BUILD_PID" 2>/dev/null || true
  fi
  if [[ -n "$WORK" && -d "$WORK" ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

find_wheel() { find "$1" -maxdepth 1 -name "horovod-${HOROVOD_VERSION}-*.whl" 2>/dev/null | head -n 1; }

WHEEL=""
if [[ $FORCE == 0 && -d "$WHEEL_DIR" ]]; then
  WHEEL=$(find_wheel "$WHEEL_DIR")
fi

if [[ -n "$WHEEL" ]]; then
  log "reusing cached wheel $WHEEL (use --force to rebuild)"
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/install_horovod.XXXXXX")
  BUILD_LOG="$LOG_DIR/horovod-${HOROVOD_VERSION}-build-$(date +%Y%m%d-%H%M%S).log"

  log "downloading the horovod==$HOROVOD_VERSION sdist from PyPI"
  ( cd "$WORK" && "$PYTHON" -m pip download --quiet --no-binary=:all: --no-deps \
      "horovod==$HOROVOD_VERSION" -d "$WORK/sdist" ) >"$WORK/download.log" 2>&1 || {
    cat "$WORK/download.log" >&2
    die "pip download horovod==$HOROVOD_VERSION failed (see above)"
  }
  SDIST=$(find "$WORK/sdist" -maxdepth 1 -name "horovod-${HOROVOD_VERSION}.tar.gz" | head -n 1)
  [[ -n "$SDIST" ]] || die "sdist horovod-${HOROVOD_VERSION}.tar.gz not found after download"
  tar -xzf "$SDIST" -C "$WORK"
  SRC="$WORK/horovod-$HOROVOD_VERSION"
  [[ -d "$SRC" ]] || die "unpacked source folder $SRC not found"

  log "patching: removing xla_mpi_ops.cc from horovod/tensorflow/CMakeLists.txt"
  CML="$SRC/horovod/tensorflow/CMakeLists.txt"
  PATTERN='^[[:space:]]*list\(APPEND TF_SOURCES "\$\{PROJECT_SOURCE_DIR\}/horovod/tensorflow/xla_mpi_ops\.cc"\)[[:space:]]*$'
  n_before=$(grep -cE "$PATTERN" "$CML" || true)
  [[ "$n_before" == 1 ]] || die "patch failed: expected exactly 1 line adding xla_mpi_ops.cc to TF_SOURCES in $CML, found ${n_before:-0}; the sdist has changed"
  sed -E -i "\\#${PATTERN}#d" "$CML"
  if grep -q 'xla_mpi_ops\.cc' "$CML"; then
    die "patch failed: xla_mpi_ops.cc is still referenced in $CML"
  fi
  grep -q 'horovod/tensorflow/mpi_ops\.cc' "$CML" || die "patch failed: mpi_ops.cc vanished from $CML"
  log "patch applied (xla_mpi_ops.cc no longer in TF_SOURCES)"

  log "building the wheel ($FLAVOR, $JOBS compile jobs): this takes ~3-5 minutes on 2 cores"
  log "build log: $BUILD_LOG"
  BUILD_ENV+=(MAKEFLAGS="-j$JOBS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS")
  if [[ -n "$NCCL_RPATH" ]]; then
    mkdir -p "$WORK/nccl-lib"
    ln -sf "$NCCL_RPATH/libnccl.so.2" "$WORK/nccl-lib/libnccl.so"
    BUILD_ENV+=(HOROVOD_NCCL_LIB="$WORK/nccl-lib" LDFLAGS="${LDFLAGS:-} -Wl,-rpath,$NCCL_RPATH")
  fi
  {
    echo "# horovod $HOROVOD_VERSION build, $(date)"
    echo "# python: $(command -v "$PYTHON") ($PY_VERSION), tensorflow $TF_VERSION"
    echo "# env: ${BUILD_ENV[*]}"
  } >"$BUILD_LOG"
  START=$(date +%s)
  set -m  # own process group, so an interrupt can stop the whole build
  ( cd "$SRC" && exec env "${BUILD_ENV[@]}" "$PYTHON" -m pip wheel --no-build-isolation --no-deps \
      -v . -w "$WORK/dist" ) >>"$BUILD_LOG" 2>&1 &
  BUILD_PID=$!
  set +m
  last=0
  while kill -0 "$BUILD_PID" 2>/dev/null; do
    sleep 5
    now=$(( $(date +%s) - START ))
    if (( now - last >= 60 )); then
      last=$now
      step=$(grep -oE '^[[:space:]]*\[ *[0-9]+%\] [A-Za-z]+.*' "$BUILD_LOG" 2>/dev/null | tail -n 1 | sed -E 's/^[[:space:]]+//; s/ CXX object / /' | cut -c1-110 || true)
      log "  still building (${now}s)${step:+: $step}"
    fi
  done
  if wait "$BUILD_PID"; then rc=0; else rc=$?; fi
  BUILD_PID=""
  ELAPSED=$(( $(date +%s) - START ))
  if [[ $rc != 0 ]]; then
    {
      echo "----- last 60 lines of $BUILD_LOG -----"
      tail -n 60 "$BUILD_LOG"
      echo "----- end of build log -----"
      ERR_RE=': (fatal )?error:|^[[:space:]]*error:|CMake Error|\*\*\* \['
      if grep -qE "$ERR_RE" "$BUILD_LOG"; then
        echo "----- first compiler/CMake errors in the log -----"
        grep -nE -m 15 "$ERR_RE" "$BUILD_LOG" | cut -c1-400
      fi
    } >&2
    die "building the Horovod wheel failed (exit $rc after ${ELAPSED}s); full build log: $BUILD_LOG"
  fi
  BUILT=$(find_wheel "$WORK/dist")
  [[ -n "$BUILT" ]] || die "pip wheel succeeded but no horovod wheel in $WORK/dist; build log: $BUILD_LOG"
  log "built $(basename "$BUILT") in ${ELAPSED}s ($(( ELAPSED / 60 ))m $(( ELAPSED % 60 ))s)"
  rm -rf "$WHEEL_DIR.tmp"
  mkdir -p "$WHEEL_DIR.tmp"
  cp "$BUILT" "$WHEEL_DIR.tmp/"
  cp "$BUILD_LOG" "$WHEEL_DIR.tmp/build.log"
  rm -rf "$WHEEL_DIR"
  mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"   # atomic-ish: a half-copied wheel is never reused
  WHEEL=$(find_wheel "$WHEEL_DIR")
  log "cached wheel: $WHEEL"
fi

# ---------------------------------------------------------------- install
log "installing $(basename "$WHEEL")"
"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$WHEEL" \
  || die "pip install $WHEEL failed"
if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi

# ---------------------------------------------------------------- checks
log "checking: import horovod.tensorflow; hvd.init(); hvd.size()"
CHECK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/install_horovod_check.XXXXXX")
if ! SIZE_OUT=$(cd "$CHECK_DIR" && TF_CPP_MIN_LOG_LEVEL=3 "$PYTHON" -c \
      'import horovod.tensorflow as hvd; hvd.init(); print(hvd.size())' 2>&1); then
  rm -rf "$CHECK_DIR"
  printf '%s\n' "$SIZE_OUT" | tail -n 60 >&2
  die "horovod.tensorflow does not import/initialise (output above)"
fi
SIZE=$(printf '%s\n' "$SIZE_OUT" | tail -n 1)
[[ "$SIZE" == 1 ]] || { rm -rf "$CHECK_DIR"; printf '%s\n' "$SIZE_OUT" >&2; die "hvd.size() printed '$SIZE', expected 1"; }
log "hvd.init() ok, hvd.size() = $SIZE"

SCRIPTS_DIR=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
HVDRUN="$SCRIPTS_DIR/horovodrun"
[[ -x "$HVDRUN" ]] || HVDRUN=$(command -v horovodrun || true)
[[ -n "$HVDRUN" ]] || { rm -rf "$CHECK_DIR"; die "horovodrun not found (looked in $SCRIPTS_DIR and PATH)"; }
log "checking: $HVDRUN --check-build"
if ! CB_OUT=$(cd "$CHECK_DIR" && TF_CPP_MIN_LOG_LEVEL=3 "$HVDRUN" --check-build 2>&1); then
  rm -rf "$CHECK_DIR"
  printf '%s\n' "$CB_OUT" | tail -n 60 >&2
  die "horovodrun --check-build failed (output above)"
fi
rm -rf "$CHECK_DIR"
printf '%s\n' "$CB_OUT" | sed -n '/Horovod v/,$p'
missing=()
grep -qE '\[X\] TensorFlow' <<<"$CB_OUT" || missing+=(TensorFlow)
grep -qE '\[X\] Gloo' <<<"$CB_OUT" || missing+=(Gloo)
if [[ "$GPU_OPS" == NCCL ]]; then grep -qE '\[X\] NCCL' <<<"$CB_OUT" || missing+=(NCCL); fi
if (( ${#missing[@]} )); then
  die "horovodrun --check-build does not list: ${missing[*]} (the wheel $WHEEL was built without them; rebuild with --force)"
fi
if ! command -v horovodrun >/dev/null 2>&1; then
  log "note: horovodrun is not on PATH; it is at $HVDRUN"
fi
log "done: Horovod $HOROVOD_VERSION ($FLAVOR) installed for TensorFlow $TF_VERSION"
