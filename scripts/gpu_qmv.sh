#!/usr/bin/env bash
# One call on a GPU machine: the mat-vec's stage count, alone and in the decoder.
#   1. build (Release, sm_90a) while `mlxrt synth` writes the 60-layer Gemma 4 31B (nvfp4);
#   2. mlxrt-cuda-test: every kernel against the CPU backend and float64 with the default
#      stages, then the mat-vec table on the 31B shapes and the variants table (3 and 4 stages,
#      loads only, warps per tile) with the read bandwidth of the same run; the self-test again
#      (no tables) for each stage count in QMV_STAGES, so every instance is checked;
#   3. the decoder on the 31B synthetic: tg128 for each stage count (MLXRT_QMV_STAGES), and a
#      per-kernel profile of 16 eager steps with the default.
#   STAGES="build test decode" QMV_STAGES="3 4" bash scripts/gpu_qmv.sh     Logs go to $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
SYN=${SYNTH_DIR:-/tmp}
MODE=${MODE:-nvfp4}
STAGES=${STAGES:-build test decode}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
source scripts/gpu_cjson.sh
rc=0
if has build; then
  stamp "build (-j$JOBS)"
  if ! { cmake -S . -B "$BUILD" -DMLXRT_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DMLXRT_CUDA_PTXAS_VERBOSE=ON \
           "${CJSON_CMAKE[@]}" &&
         cmake --build "$BUILD" -j"$JOBS" --target mlxrt mlxrt_cuda mlxrt-cuda-test; } >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
  fi
fi
SYNTH_PID=
if has decode && [ ! -f "$SYN/s31/config.json" ]; then
  stamp "synth gemma4-31b $MODE (background)"
  "$BUILD/mlxrt" synth --like gemma4-31b --mode "$MODE" -o "$SYN/s31" >"$OUT/synth31.log" 2>&1 &
  SYNTH_PID=$!
fi
if has test; then
  stamp "self-test and mat-vec tables"
  timeout "${TEST_TIMEOUT:-300}" "$BUILD/mlxrt-cuda-test" --table "$OUT/bench.md" >"$OUT/selftest.log" 2>&1 || rc=1
  grep -E "^FAIL|checks,|streaming read" "$OUT/selftest.log" | head -30
  sed -n '/^format /,$p' "$OUT/selftest.log"
  for n in ${QMV_STAGES:-3 4}; do
    stamp "self-test, MLXRT_QMV_STAGES=$n"
    MLXRT_QMV_STAGES=$n timeout 200 "$BUILD/mlxrt-cuda-test" --no-bench >"$OUT/selftest_st$n.log" 2>&1 || rc=1
    grep -E "^FAIL|checks," "$OUT/selftest_st$n.log" | head -10
  done
fi
if has decode; then
  [ -n "$SYNTH_PID" ] && { wait "$SYNTH_PID" || tail -3 "$OUT/synth31.log"; }
  for n in ${QMV_STAGES:-3 4}; do
    stamp "decoder tg128, MLXRT_QMV_STAGES=$n"
    MLXRT_QMV_STAGES=$n MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 128 -r 3 \
      2>&1 | tee "$OUT/bench31_st$n.log" | grep tg128
  done
  stamp "profile (eager, 16 steps)"
  MLXRT_CUDA_PROFILE=1 MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 16 -r 1 \
    >"$OUT/prof.log" 2>&1 || rc=1
  grep -vE "^\s*$" "$OUT/prof.log" | head -40
fi
stamp "done, rc=$rc"
exit $rc
