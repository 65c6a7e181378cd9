#!/usr/bin/env bash
# One call on a GPU machine: the CUDA whole-step decoder (accel.h decoder_*) against the
# reference path, then its timing.
#   1. builds mlxrt, the plug-in and mlxrt-decode-test (Release, sm_90a);
#   2. the tiny fixtures (Gemma 3 / Gemma 4 dense; MoE and PLE ones are shown as skipped):
#      greedy tokens and logits of the decoder vs the reference path on the CPU, graph vs
#      eager vs a second run bit-identical;
#   3. synthetic checkpoints (mlxrt synth): gemma3-270m affine4 (reference on the CPU) and
#      gemma4-31b nvfp4 (reference path on the CUDA backend), each with pp512 / tg128 timings
#      of the decoder;
#   4. mlxrt bench tg128 on the 31B synthetic (times whatever path mlx_session uses).
#   bash scripts/gpu_decode_test.sh          Logs go to $OUT (default ./gpu-out).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
SYN=${SYNTH_DIR:-/tmp}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
source scripts/gpu_build.sh

{ date -u; nvidia-smi; nvcc --version; } >"$OUT/env.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null


stamp "build (-j$JOBS)"
gpu_build "$BUILD" "$OUT/build.log" mlxrt mlxrt_cuda mlxrt-decode-test || exit 1
grep -A2 -E "Compiling entry.*(kernel|Kernel).*sm_90a" "$OUT/build.log" | grep -E "Compiling|registers|spill" >"$OUT/ptxas.txt" || true
DT="$BUILD/mlxrt-decode-test"
rc=0

stamp "tiny fixtures: decoder vs reference path on the CPU"
FIX=()
for d in tests/fixtures/models/gemma*; do FIX+=("$d"); done
timeout 120 "$DT" --ref cpu --gen 24 --pp 64 --tg 64 --reps 1 "${FIX[@]}" >"$OUT/tiny.log" 2>&1 || rc=1
grep -E "^==|PASS|FAIL|skipped|differ|reference:|decoder:" "$OUT/tiny.log" | head -150

stamp "synthetic gemma3-270m affine4"
if "$BUILD/mlxrt" synth --like gemma3-270m --mode affine4 -o "$SYN/s270" >"$OUT/synth270.log" 2>&1; then
  timeout 120 "$DT" --ref cpu --prompt 16 --gen 32 --pp 512 --tg 128 --reps 3 "$SYN/s270" 2>&1 | tee "$OUT/s270.log" || rc=1
else
  tail -3 "$OUT/synth270.log"; rc=1
fi

stamp "synthetic gemma4-31b nvfp4"
if "$BUILD/mlxrt" synth --like gemma4-31b --mode nvfp4 -o "$SYN/s31" >"$OUT/synth31.log" 2>&1; then
  stamp "written"
  timeout 240 "$DT" --ref cuda --prompt 8 --gen 8 --pp 512 --tg 128 --reps 3 "$SYN/s31" 2>&1 | tee "$OUT/s31.log" || rc=1
  stamp "mlxrt bench tg128 (the path mx_session takes)"
  timeout 90 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 128 -r 1 2>&1 | tee "$OUT/bench31.log"
else
  tail -3 "$OUT/synth31.log"; rc=1
fi
stamp "done, rc=$rc"
exit $rc
