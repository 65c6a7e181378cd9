#!/usr/bin/env bash
# One call on a GPU machine: token selection on the device (src/accel/cuda/sample.cu).
#   1. builds mlxrt, the plug-in and mlxrt-sample-test (Release, sm_90a);
#   2. mlxrt-sample-test: the device selection against the C reference (accel_sample_ref) on
#      fresh random logits / parameters / u, every id exact; decoder sessions (tiny fixtures and
#      a synthetic gemma3-270m) whose device-sampled steps must equal their own logits through
#      the C reference, token for token; then the kernel timing table;
#   3. mlxrt bench on a synthetic gemma3-270m affine4 with the device decoder
#      (MLXRT_DECODER=1): tg128 greedy and tg128 with --sampler (the sampler's cost per token);
#      the same on the gemma4-31b nvfp4 synthetic when $SYNTH_DIR/s31 exists already
#      (scripts/gpu_decode_test.sh writes it).
#   bash scripts/gpu_sample_test.sh          Logs go to $OUT (default ./gpu-out).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
SYN=${SYNTH_DIR:-/tmp}
TRIALS=${TRIALS:-3000}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
source scripts/gpu_build.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null


stamp "build (-j$JOBS)"
gpu_build "$BUILD" "$OUT/build.log" mlxrt mlxrt_cuda mlxrt-sample-test || exit 1
grep -A2 -E "Compiling entry.*sk_.*sm_90a" "$OUT/build.log" | grep -E "Compiling|registers|spill" >"$OUT/ptxas_sample.txt" || true
rc=0

stamp "synthetic gemma3-270m affine4 (V = 262144)"
[ -d "$SYN/s270" ] || "$BUILD/mlxrt" synth --like gemma3-270m --mode affine4 -o "$SYN/s270" >"$OUT/synth270.log" 2>&1 ||
  { tail -3 "$OUT/synth270.log"; rc=1; }
MODELS=()
for d in tests/fixtures/models/gemma3-text-bf16 tests/fixtures/models/gemma3-nested-affine4-g64 \
         tests/fixtures/models/gemma4-dense-nvfp4 tests/fixtures/models/gemma4-dense-bf16 "$SYN/s270"; do
  [ -d "$d" ] && MODELS+=(--model "$d")
done

stamp "mlxrt-sample-test --trials $TRIALS (+ decoder sessions end to end)"
timeout 400 "$BUILD/mlxrt-sample-test" --trials "$TRIALS" "${MODELS[@]}" >"$OUT/sample_test.log" 2>&1 || rc=1
grep -E "^device|^FAIL|^ok|^selection|^decoder sessions|^\||PASSED|FAILED|mlxrt-sample-test" "$OUT/sample_test.log" | head -80

SAMPLER=${SAMPLER:-temp=0.8,top_k=64,top_p=0.95}
stamp "synthetic gemma3-270m affine4: tg128 greedy and --sampler $SAMPLER (device decoder)"
if [ -d "$SYN/s270" ]; then
  MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s270" --backend cuda -p 0 -n 128 -r 5 \
    --sampler "$SAMPLER" 2>&1 | tee "$OUT/bench270_sampler.log" || rc=1
fi
if [ -d "$SYN/s31" ]; then
  stamp "synthetic gemma4-31b nvfp4: tg128 greedy and --sampler $SAMPLER (device decoder)"
  MLXRT_DECODER=1 timeout 240 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 128 -r 3 \
    --sampler "$SAMPLER" 2>&1 | tee "$OUT/bench31_sampler.log" || rc=1
fi
stamp "done, rc=$rc"
exit $rc
