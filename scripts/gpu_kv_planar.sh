#!/usr/bin/env bash
# The compressed K cache (--kv-k planar3 / planar4, docs/KV.md) on a GPU machine, in one call,
# with carried binaries (no build):
#   On the CPU machine: bash scripts/build_gpu_carry.sh mlxrt mlxrt_cuda mlxrt-kvk-compare mlxrt-kvcodec-test
#   on the GPU machine (carry [".debs", ".gpu-carry/bin"]): bash scripts/gpu_kv_planar.sh
#   1. mlxrt-kvcodec-test: the device encoder's blocks byte for byte against the C reference;
#   2. a synthetic Gemma 3 270M (affine 4-bit; its full layers' K compressed): each K mode against
#      itself fed one token at a time (the decode step's q/k/v post and attention) and in prompt
#      chunks of 256 (the prompt pass's), SMALL_CTX (2048) tokens then 64 steps — the two paths'
#      kernels agree when the figures are at the scale of bf16's own;
#   3. a synthetic Gemma 4 31B in nvfp4: planar3 and planar4 against bf16 K after KVK_CTX (32768)
#      tokens, 64 decode steps (the speed shapes' figures of docs/NUMERICS.md; not a quality
#      claim: the weights are random), and bf16 against itself in other chunks (their scale);
#   4. mlxrt bench on the 31B: pp512 and tg128 at depths DEPTHS (0,4096,32768) for auto, bf16,
#      planar3 and planar4, RUNS (default 2) runs each, alternated (their JSON in the logs, the
#      table by scripts/bench_table.py);
#   5. LONG (default 261000; 0: none): tg16 after LONG tokens with planar3 and with auto, and the
#      device memory each holds there.
# CHECKS=0 skips 1-3. Logs in $OUT; exit status 0 when every step passes.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-$ROOT/.gpu-carry/bin}
OUT=${OUT:-$ROOT/gpu-out}
DEPTHS=${DEPTHS:-0,4096,32768}
mkdir -p "$OUT"
source scripts/gpu_cjson.sh
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
source scripts/gpu_step.sh
S31=/tmp/s31
step synth31 300 "$BIN/mlxrt" synth --like gemma4-31b --mode nvfp4 -o "$S31" --no-sync
if [ "${CHECKS:-1}" = 1 ]; then
  step kvcodec 120 "$BIN/mlxrt-kvcodec-test"
  S270=/tmp/s270
  step synth270 120 "$BIN/mlxrt" synth --like gemma3-270m --mode affine4 -o "$S270" --no-sync
  SMALL=${SMALL_CTX:-2048}
  for m in bf16 planar3 planar4; do
    step "paths_$m" 300 "$BIN/mlxrt-kvk-compare" "$S270" --ctx "$SMALL" --steps 64 --a "$m" --b "$m" --chunk 1 \
      --chunk-b 256
  done
  for m in planar3 planar4; do
    step "kvk31_$m" 500 "$BIN/mlxrt-kvk-compare" "$S31" --ctx "${KVK_CTX:-32768}" --steps 64 --a bf16 --b "$m"
  done
  step kvk31_base 500 "$BIN/mlxrt-kvk-compare" "$S31" --ctx "${KVK_CTX:-32768}" --steps 64 --a bf16 --b bf16 \
    --chunk-b 1000
  grep -h "kvk-compare" "$OUT"/paths_*.log "$OUT"/kvk31_*.log
fi
for r in $(seq 1 "${RUNS:-2}"); do
  for m in auto bf16 planar3 planar4; do
    step "bench_${m}_$r" 300 "$BIN/mlxrt" bench -m "$S31" --backend cuda -p 512 -n 128 -d "$DEPTHS" -r 1 -o json \
      --kv-k "$m"
  done
done
LONG=${LONG:-261000}
if [ "$LONG" -gt 0 ]; then
  for m in planar3 auto; do
    step "long_$m" 500 "$BIN/mlxrt" bench -m "$S31" --backend cuda -p 0 -n 16 -d "$LONG" -r 1 --kv-k "$m"
  done
  grep -h "memory\|tg16" "$OUT"/long_*.log
fi
# one table of every mode (medians of the runs), through the side-by-side table script
args=()
for m in auto bf16 planar3 planar4; do args+=(--mlxrt "$m=$(ls "$OUT"/bench_"$m"_*.log | paste -sd,)"); done
python3 scripts/bench_table.py "${args[@]}" --title "31B nvfp4 synthetic, K modes"
grep -hE "FAIL" "$OUT"/*.log | head -20
echo "gpu_kv_planar: rc=$rc"
exit $rc
