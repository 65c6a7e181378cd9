#!/usr/bin/env bash
# One quick call on a GPU machine: mlxrt-stream-probe built from just its files (~10 s instead of
# the plug-in's ~200 s), run at each size in PROBE_MB (MiB per launch, default "62 134 4096": the
# 31B MLP product's 65 MB, a full layer's K at 32768 keys, and the 4 GiB of the mat-vec bench's
# read-bandwidth reference). What streams at each size, by pipeline shape, says how far any kernel
# that reads those bytes in one launch can get. Logs in $OUT.
#   PROBE_MB="62 4096" bash scripts/gpu_probe_quick.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
B=${PROBE_BUILD:-/tmp/probeq}
mkdir -p "$OUT" "$B"
cd "$ROOT" || exit 1
INC=(-I"$ROOT/src/accel/cuda" -I"$ROOT/src" -I"$ROOT/include")
{
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a "${INC[@]}" -c src/accel/cuda/probe/stream_probe.cu -o "$B/sp.o" &&
    gcc -O2 -std=c11 "${INC[@]}" -I/usr/local/cuda/include -c tests/gpu/stream_probe.c -o "$B/main.o" &&
    gcc -O2 -std=c11 "${INC[@]}" -I/usr/local/cuda/include -c src/accel/cuda/runtime.c -o "$B/rt.o" &&
    gcc -O2 -std=c11 "${INC[@]}" -c src/base/error.c -o "$B/err.o" &&
    nvcc -gencode=arch=compute_90a,code=sm_90a "$B"/main.o "$B"/sp.o "$B"/rt.o "$B"/err.o -o "$B/mlxrt-stream-probe"
} >"$OUT/probe_build.log" 2>&1 || { tail -30 "$OUT/probe_build.log"; echo "BUILD FAILED"; exit 1; }
rc=0
for mb in ${PROBE_MB:-62 134 4096}; do
  echo "== --mb $mb"
  timeout 240 "$B/mlxrt-stream-probe" --mb "$mb" 2>&1 | tee "$OUT/probe_mb$mb.log" || rc=1
done
exit $rc
