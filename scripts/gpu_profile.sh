#!/usr/bin/env bash
# Where the decode step's time goes, per synthetic preset, in ONE call on the GPU machine:
# for each preset, `mlxrt synth --like PRESET --mode MODE`, then the per-kernel profile of
# eager steps (MLXRT_CUDA_PROFILE=1: labels, calls, mean ms, share) and `mlxrt bench` with
# graphs (tg and pp, JSON). Logs per preset in $OUT (prof-PRESET.log, bench-PRESET.json).
#
# On the CPU machine: bash scripts/build_gpu_carry.sh   (-> .gpu-carry/bin)
# On the GPU machine (carry [".debs", ".gpu-carry"]):
#   bash scripts/gpu_profile.sh [--mode nvfp4] [-n 128] [-p 512] [-r 3] PRESET...
#   TIMELINE=1 adds the in-graph timeline (MLXRT_CUDA_TIMELINE=1) of a tg run.
#   BATCH=1,4,16,64 adds the batched step's profile (its `batch:` labels) at each of those row
#   counts (prof-PRESET-batch.log), beside the one-sequence step's.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
source scripts/gpu_build.sh
BIN=${BUILD:-$ROOT/.gpu-carry/bin}
OUT=${OUT:-$ROOT/gpu-out}
MODELS=${MODELS:-/tmp/mlxrt-synth}
MODE=nvfp4 NG=128 NP=512 REPS=3 PRESETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) MODE=$2; shift 2 ;;
    -n) NG=$2; shift 2 ;;
    -p) NP=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    *) PRESETS+=("$1"); shift ;;
  esac
done
[ ${#PRESETS[@]} -gt 0 ] || PRESETS=(gemma4-e4b)
mkdir -p "$OUT" "$MODELS"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
for p in "${PRESETS[@]}"; do
  m=$MODELS/$p-$MODE
  if [ ! -f "$m/config.json" ]; then
    stamp "synth $p $MODE"
    "$BIN/mlxrt" synth --like "$p" --mode "$MODE" -o "$m" >"$OUT/synth-$p.log" 2>&1 || { tail -3 "$OUT/synth-$p.log"; continue; }
  fi
  stamp "profile $p"
  MLXRT_CUDA_PROFILE=1 timeout 200 "$BIN/mlxrt" bench -m "$m" --backend cuda -p 0 -n 32 -r 1 >"$OUT/prof-$p.log" 2>&1 ||
    echo "profile $p: rc=$?"
  if [ -n "${BATCH:-}" ]; then
    stamp "batched profile $p"
    MLXRT_CUDA_PROFILE=1 timeout 300 "$BIN/mlxrt" bench -m "$m" --backend cuda --batch "$BATCH" -p 64 -n 16 -r 1 \
      >"$OUT/prof-$p-batch.log" 2>&1 || echo "batched profile $p: rc=$?"
  fi
  stamp "bench $p"
  timeout 300 "$BIN/mlxrt" bench -m "$m" --backend cuda -p "$NP" -n "$NG" -r "$REPS" -o json >"$OUT/bench-$p.json" 2>"$OUT/bench-$p.err" ||
    { echo "bench $p: rc=$?"; tail -3 "$OUT/bench-$p.err"; }
  grep -h '"test"' "$OUT/bench-$p.json" | sed "s/^/$p: /" | cut -c1-220
  if [ -n "${TIMELINE:-}" ]; then
    stamp "timeline $p"
    dbg=()
    command -v gdb >/dev/null && dbg=(gdb -q -batch -ex run -ex bt --args)
    MLXRT_CUDA_TIMELINE=1 timeout 200 "${dbg[@]}" "$BIN/mlxrt" bench -m "$m" --backend cuda -p 0 -n 64 -r 1 \
      >"$OUT/timeline-$p.log" 2>&1 || echo "timeline $p: rc=$?"
  fi
done
stamp done
