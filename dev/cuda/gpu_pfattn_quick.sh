#!/usr/bin/env bash
# One quick call on a GPU machine for the prompt pass's attention alone: builds mlxrt-pfattn-bench
# from just the files it needs (prefill_attn.cu, prefill_attn_wg.cu, the runtime wrapper; ~15 s
# instead of the whole plug-in's ~200 s), then runs it — the default cases with PFATTN_KINDS
# (default 0,9), each MLXRT_PW_MODE in PW_MODES on the case PW_CASE (default "full 32768 512";
# the modes are kind 9's diagnosis: 1 copies only each pass's first tiles, 2 skips the wgmma, 4
# the softmax and p, 6 both), and ncu on NCU_CASE (default "full 8192 512") for each kind in
# NCU_KINDS (default 9). Logs in $OUT.
#   PFATTN_KINDS=0,9 PW_MODES="0 1 2 4 6" NCU_KINDS="0 9" bash scripts/gpu_pfattn_quick.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
B=${PFQ_BUILD:-/tmp/pfq}
mkdir -p "$OUT" "$B"
cd "$ROOT" || exit 1
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
INC=(-I"$ROOT/src/accel/cuda" -I"$ROOT/src" -I"$ROOT/include")
NV=(nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas=-v "${INC[@]}")
stamp "build mlxrt-pfattn-bench (prompt attention only)"
printf 'int ck_pdl_enabled(void) { return 0; }\nvoid ck_tl_note(const void *k) { (void)k; }\n' >"$B/stub.c"
{
  "${NV[@]}" -c src/accel/cuda/prefill_attn.cu -o "$B/pa.o" &
  "${NV[@]}" -c src/accel/cuda/prefill_attn_wg.cu -o "$B/pw.o" &
  gcc -O2 -std=c11 "${INC[@]}" -I/usr/local/cuda/include -c tests/gpu/pfattn_bench.c -o "$B/bench.o" &&
    gcc -O2 -std=c11 "${INC[@]}" -I/usr/local/cuda/include -c src/accel/cuda/runtime.c -o "$B/rt.o" &&
    gcc -O2 -std=c11 "${INC[@]}" -c src/base/error.c -o "$B/err.o" && gcc -c "$B/stub.c" -o "$B/stub.o" &
  wait
  nvcc -gencode=arch=compute_90a,code=sm_90a "$B"/bench.o "$B"/rt.o "$B"/err.o "$B"/stub.o "$B"/pa.o "$B"/pw.o \
    -o "$B/mlxrt-pfattn-bench" -lm
} >"$OUT/pfq_build.log" 2>&1 || { tail -30 "$OUT/pfq_build.log"; echo "BUILD FAILED"; exit 1; }
grep -A2 "pw_kernel" "$OUT/pfq_build.log" | grep -E "Used|spill" | head -12
BIN=$B/mlxrt-pfattn-bench
rc=0
stamp "default cases, kinds ${PFATTN_KINDS:-0,9}"
timeout 300 "$BIN" --kinds "${PFATTN_KINDS:-0,9}" 2>&1 | tee "$OUT/pfq_cases.log" || rc=1
for m in ${PW_MODES:-}; do
  stamp "MLXRT_PW_MODE=$m, case ${PW_CASE:-full 32768 512}"
  MLXRT_PW_MODE=$m timeout 120 "$BIN" --case ${PW_CASE:-full 32768 512} --kinds 9 2>&1 | grep -E "^\| (full|sliding)" |
    sed "s/^/mode $m /" | tee -a "$OUT/pfq_modes.log"
done
if command -v ncu >/dev/null; then
  for k in ${NCU_KINDS:-9}; do
    stamp "ncu: kind $k, case ${NCU_CASE:-full 8192 512}"
    timeout 300 ncu --clock-control none -k "regex:pw_kernel|pa_" -c 1 --section SpeedOfLight --section Occupancy \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
      --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,sm__cycles_elapsed.avg.per_second,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
      "$BIN" --case ${NCU_CASE:-full 8192 512} --kinds "$k" >"$OUT/pfq_ncu_k$k.log" 2>&1
    grep -E "pw_kernel|pa_|Duration|Throughput|Hit Rate|dram__|lts__|inst_executed|Eligible|Issued Warp|No Eligible|Registers Per|Achieved Occ|Busy" \
      "$OUT/pfq_ncu_k$k.log" | sed 's/  */ /g' | head -45
    grep -E "issue_stalled" "$OUT/pfq_ncu_k$k.log" | awk '$NF > 0.3 {print $NF, $1}' | sort -rn | head -12
  done
fi
stamp "done, rc=$rc"
exit $rc
