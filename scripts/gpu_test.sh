#!/usr/bin/env bash
# One call on a GPU machine: build with the CUDA plug-in (sm_90a + compute_90 PTX), run the
# GPU self-test (every kernel against the CPU backend and a float64 reference, embeddings
# bit-exact, error paths) and the mat-vec benchmark on the Gemma 4 31B shapes with the
# device's measured streaming-read bandwidth, then the CPU test suite with the plug-in built.
#
#   bash scripts/gpu_test.sh [--no-bench] [--quick]
# Logs and the benchmark table (bench.md) go to $OUT (default: ./gpu-out).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
source scripts/gpu_build.sh

{ date -u; nvidia-smi; nvcc --version; cmake --version; } >"$OUT/env.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>/dev/null


echo "== build (-j$JOBS)"
gpu_build "$BUILD" "$OUT/build.log" || exit 1
grep -A2 "Compiling entry.*sm_90a" "$OUT/build.log" | grep -E "Compiling|registers|spill" >"$OUT/ptxas.txt" || true
# SASS of the two kernels the targets are about (affine 4-bit g64 bf16 scales, nvfp4)
OBJ=$(find "$BUILD" -name 'qmv_tc.cu.o' | head -1)
if command -v cuobjdump >/dev/null && [ -n "$OBJ" ]; then
  for k in _Z13qmv_tc_kernelILi0ELi64ELb0EEv7QmvArgs _Z13qmv_tc_kernelILi2ELi16ELb0EEv7QmvArgs; do
    cuobjdump -sass -fun "$k" "$OBJ"
  done >"$OUT/sass.txt" 2>&1 || true
fi

echo "== GPU self-test and benchmark"
"$BUILD/mlxrt-cuda-test" --table "$OUT/bench.md" "$@" 2>&1 | tee "$OUT/selftest.log"
rc=${PIPESTATUS[0]}

# Hardware counters for the two target kernels on the lm_head shape (where ncu works).
if [ -z "${NO_NCU:-}" ] && command -v ncu >/dev/null; then
  echo "== ncu (lm_head, n = 1)"
  for f in affine4 nvfp4; do
    timeout 240 ncu --clock-control none -k regex:qmv_tc_kernel -c 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section MemoryWorkloadAnalysis "$BUILD/mlxrt-cuda-test" --profile $f 2>&1
  done >"$OUT/ncu.txt"
  grep -E "qmv_tc_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Issued Ipc|No Eligible|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Eligible Warps|Registers" "$OUT/ncu.txt" | head -60
fi

echo "== CPU test suite with the plug-in built (MLXRT_BACKEND=cpu)"
(cd "$BUILD" && MLXRT_BACKEND=cpu ctest --output-on-failure -j"$JOBS") >"$OUT/ctest.log" 2>&1
crc=$?
tail -3 "$OUT/ctest.log"
echo "self-test rc=$rc, ctest rc=$crc"
[ "$rc" -eq 0 ] && [ "$crc" -eq 0 ]
