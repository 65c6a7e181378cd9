#!/usr/bin/env bash
# The batched step's products at B rows in hardware counters, in ONE call on the GPU machine:
# `mlxrt-rows-bench --batch B` (each product's µs and % of the read rate, beside the one-row
# kernel), then ncu on one launch of KERNEL (default qmm_wg_kernel, the warpgroup product; the
# launches after the first SKIP are the q|k|v shape): occupancy, throughput and issue sections,
# and the warp stall reasons per issued instruction. Logs in $OUT (rows.txt, ncu.txt, stall.txt).
#
# On the CPU machine: bash scripts/build_gpu_carry.sh mlxrt mlxrt_cuda mlxrt-rows-bench
# On the GPU machine (carry [".debs", ".gpu-carry/bin"]):
#   [B=16] [KERNEL=qmm_wg_kernel] [SKIP=8] bash scripts/gpu_ncu_rows.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
source scripts/gpu_cjson.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BIN=${BUILD:-$ROOT/.gpu-carry/bin}
OUT=${OUT:-$ROOT/gpu-out}
B=${B:-16} KERNEL=${KERNEL:-qmm_wg_kernel} SKIP=${SKIP:-8}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 "$BIN/mlxrt-rows-bench" --batch "$B" >"$OUT/rows.txt" 2>&1
echo "rows-bench rc=$?"
grep -E '^\| (q|o|gate|down)' "$OUT/rows.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
# (--clock-control none: the clocks as the benchmarks run them)
timeout 200 "$NCU" --clock-control none -k "regex:$KERNEL" --launch-skip "$SKIP" --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  "$BIN/mlxrt-rows-bench" --batch "$B" >"$OUT/ncu.txt" 2>&1
echo "ncu sections rc=$?"
grep -E "$KERNEL|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Active Warps Per|Registers Per|Block Limit (Registers|Shared)|Dynamic Shared|Waves Per SM" "$OUT/ncu.txt"
timeout 200 "$NCU" --clock-control none -k "regex:$KERNEL" --launch-skip "$SKIP" --launch-count 1 \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__cycles_active.avg' \
  "$BIN/mlxrt-rows-bench" --batch "$B" >"$OUT/stall.txt" 2>&1
echo "ncu stalls rc=$?"
grep -E "stalled|inst_executed|cycles_active" "$OUT/stall.txt" | sort -k3 -g -r
