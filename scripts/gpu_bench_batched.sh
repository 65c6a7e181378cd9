#!/usr/bin/env bash
# Batched decode against llama.cpp's llama-batched-bench on the same shapes, in one device call
# (docs/BENCHMARKS.md "Batched decode"): B sequences of -p prompt tokens each, then -n decode
# steps of all B together; the aggregate decode t/s at each B.
#
#   on the CPU machine, once:
#     bash scripts/gpu_bench_batched.sh --prepare
#       llama-batched-bench from the cached llama.cpp build (scripts/build_llama_bench_cuda.sh:
#       the libraries are built; this tool links in seconds), xz-compressed into .gpu-carry
#       (21 MB against 24 gzipped: with the tree, two mlxrt builds and the Python parts one
#       call stays under its 64 MiB); then
#     bash scripts/build_gpu_carry.sh mlxrt mlxrt_cuda
#   on the GPU machine (device carry: .debs .gpu-carry/bin .gpu-carry/llama-batched-bench.xz
#   .gpu-carry/pylib .gpu-carry/tok-gemma3.gguf.gz):
#     OUT=$OUT bash scripts/gpu_bench_batched.sh [--like gemma4-31b] [--npl 1,4,16,64] [-p 512] [-n 128]
#       the Q4_0 GGUF of the preset's shapes for llama.cpp and the nvfp4 checkpoint for mlxrt
#       (both synthetic, the same shapes), then llama-batched-bench (flash attention on, every
#       layer on the GPU, a context of max(npl)·(p + n)) and mlxrt bench --batch.
#     BEFORE="DIR ..." (other builds' mlxrt and plug-in): mlxrt bench alternates each DIR and BIN,
#       ROUNDS times each (default 2), in the same call, for a change's A/B beside llama.cpp.
#     PROFILE=1: then the batched step's pieces at the largest B (MLXRT_CUDA_PROFILE=1); PROFILE=4,16:
#       at each B listed.
#     KEEP_MODEL=1: the checkpoint and the GGUF stay in /dev/shm/mlxrt-batched for a later call on
#       the same warm machine.
#   The llama.cpp binary may be carried gzipped or xz-compressed (llama-batched-bench.gz / .xz).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
CARRY=$ROOT/.gpu-carry
if [ "${1:-}" = "--prepare" ]; then
  LB=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/src/llama_cpp_python-0.3.36/vendor/llama.cpp/build-cuda
  [ -f "$LB/CMakeCache.txt" ] || { echo "no llama.cpp CUDA build in $LB: run scripts/build_llama_bench_cuda.sh" >&2; exit 1; }
  PATH=/usr/local/cuda/bin:$PATH nice -n 5 cmake --build "$LB" -j2 --target llama-batched-bench >/dev/null
  mkdir -p "$CARRY"
  strip -o "$CARRY/llama-batched-bench" "$LB/bin/llama-batched-bench"
  rm -f "$CARRY/llama-batched-bench.gz" "$CARRY/llama-batched-bench.xz"
  xz -9 -T2 "$CARRY/llama-batched-bench"
  du -sh "$CARRY/llama-batched-bench.xz"
  exit 0
fi
LIKE=gemma4-31b NPL=1,4,16,64 NP=512 NG=128
while [ $# -gt 0 ]; do
  case "$1" in
    --like) LIKE=$2; shift ;;
    --npl) NPL=$2; shift ;;
    -p) NP=$2; shift ;;
    -n) NG=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-/tmp/mlxrt-batched-out}
BIN=${BIN:-$CARRY/bin}
mkdir -p "$OUT"
WORK=/tmp/mlxrt-batched; rm -rf "$WORK"; mkdir -p "$WORK"
MODELS=/dev/shm/mlxrt-batched; rm -rf "$MODELS"; mkdir -p "$MODELS"
[ -n "${KEEP_MODEL:-}" ] || trap 'rm -rf "$MODELS"' EXIT
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
source scripts/gpu_cjson.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
MAXB=$(tr ',' '\n' <<<"$NPL" | sort -n | tail -1)
CTX=$(( MAXB * (NP + NG) ))

say "writing the $LIKE Q4_0 GGUF (background) and the nvfp4 checkpoint"
( PYTHONPATH="$CARRY/pylib" python3 scripts/make_gguf_synth.py --like "$LIKE" \
    --tokenizer "$CARRY/tok-gemma3.gguf.gz" -o "$MODELS/q4_0.gguf" >"$WORK/gguf.log" 2>&1 ) &
GP=$!
"$BIN/mlxrt" synth --like "$LIKE" --mode nvfp4 -o "$MODELS/nvfp4" --no-sync >"$WORK/synth.log" 2>&1 ||
  { tail -5 "$WORK/synth.log"; exit 1; }
if [ -n "${BEFORE:-}" ]; then
  for r in $(seq 1 "${ROUNDS:-2}"); do
    for b in $BEFORE $BIN; do
      side=$(basename "$b")
      say "mlxrt bench --batch $NPL -p $NP -n $NG -r 1 ($side, round $r)"
      "$b/mlxrt" bench -m "$MODELS/nvfp4" --backend cuda --batch "$NPL" -p "$NP" -n "$NG" -r 1 2>&1 |
        tee "$OUT/mlxrt-batched-$side-$r.txt"
    done
  done
else
  say "mlxrt bench --batch $NPL -p $NP -n $NG -r 2"
  "$BIN/mlxrt" bench -m "$MODELS/nvfp4" --backend cuda --batch "$NPL" -p "$NP" -n "$NG" -r 2 2>&1 | tee "$OUT/mlxrt-batched.txt"
fi
if [ -n "${PROFILE:-}" ]; then # the batched step's pieces (MLXRT_CUDA_PROFILE=1: no graphs)
  [ "$PROFILE" = 1 ] && PROFILE=$MAXB
  for b in ${PROFILE//,/ }; do
    say "mlxrt bench --batch $b -n 8, MLXRT_CUDA_PROFILE=1"
    MLXRT_CUDA_PROFILE=1 "$BIN/mlxrt" bench -m "$MODELS/nvfp4" --backend cuda --batch "$b" -p "$NP" -n 8 -r 1 \
      >"$OUT/mlxrt-profile-$b.txt" 2>&1 || true
    grep "batch:" "$OUT/mlxrt-profile-$b.txt" || tail -3 "$OUT/mlxrt-profile-$b.txt"
  done
fi
[ -n "${KEEP_MODEL:-}" ] || rm -rf "$MODELS/nvfp4"
wait "$GP" || { tail -5 "$WORK/gguf.log"; exit 1; }
if [ -f "$CARRY/llama-batched-bench.xz" ]; then
  xz -dc "$CARRY/llama-batched-bench.xz" >"$WORK/llama-batched-bench"
else
  gzip -dc "$CARRY/llama-batched-bench.gz" >"$WORK/llama-batched-bench"
fi
chmod +x "$WORK/llama-batched-bench"
say "llama-batched-bench -c $CTX -npp $NP -ntg $NG -npl $NPL -ngl 99 -fa on"
"$WORK/llama-batched-bench" -m "$MODELS/q4_0.gguf" -c "$CTX" -b 2048 -ub 512 -npp "$NP" -ntg "$NG" -npl "$NPL" \
  -ngl 99 -fa on 2>"$WORK/llama.log" | tee "$OUT/llama-batched.txt" || { tail -20 "$WORK/llama.log"; exit 1; }
say "done"
