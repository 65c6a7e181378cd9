#!/usr/bin/env bash
# One call on a GPU machine, with carried binaries (no build): every CUDA kernel and the device
# decoder against the CPU reference or a float64 host computation.
#   On the CPU machine: BUILD=$PWD/build-gpu bash scripts/build_gpu_carry.sh mlxrt mlxrt_cuda \
#     mlxrt-cuda-test mlxrt-decode-test mlxrt-batch-test mlxrt-sample-test mlxrt-attn-bench mlxrt-pfattn-bench \
#     mlxrt-kvcodec-test test_threads
#   then copy them to .gpu-carry/tests (with libmlxrt-cuda.so beside them) and, on the GPU
#   machine (carry [".debs", ".gpu-carry/tests"]): bash scripts/gpu_check.sh
#   (the ten binaries are ~60 MB: with the tracked tree they exceed a call's 64 MiB, so carry
#   them as `tar czf .gpu-carry/tests.tgz -C .gpu-carry tests` and unpack it first)
#   1. mlxrt-cuda-test --no-bench: every kernel against the CPU backend and float64;
#   2. mlxrt-attn-bench --quick in the split form, the deep form (each also over K from V: --kfv;
#      the deep form also over planar3 / planar4 K) and both cluster forms, and
#      mlxrt-pfattn-bench: each case against a float64 attention on the host;
#   3. mlxrt-sample-test --no-bench: token selection on the device, every id exact;
#      mlxrt-kvcodec-test: the planar3 / planar4 K encoder, block for block the C reference's bytes;
#   4. mlxrt-decode-test on the tiny fixtures (and a synthetic Gemma 3 270M): the decoder's greedy
#      tokens and logits against the reference path on the CPU; graphs, eager launches and a
#      second run bit-identical; the prompt fed whole, in pieces and token by token; the MoE and
#      the E2B-shaped fixtures (per-layer embeddings, KV sharing, double-wide MLP) again with a
#      prompt of 80 tokens, 64 greedy steps and every prefill form (--prefill 1);
#   4b. mlxrt-batch-test on the tiny fixtures (and a 6-layer synthetic of the 31B's shapes): 16
#      sequences (6 on the 31B's) joining a batched decode at different
#      steps, 128 greedy tokens each, its tokens and logits against the CPU reference and the one-sequence step,
#      and bit-identical to the same batch with its rows reversed (MoE: within tolerance), the
#      slots' KV held at the model's whole context no more than at the capacity they need; then
#      the same sequences through a session pool's step pool, a thread each: the batch's tokens;
#   5. test_threads cuda: two threads on one model (and two models) give each its tokens alone;
#   6. tests/cli_nonfinite.sh cuda: a non-finite logits row fails greedy and sampled steps, the
#      reference path and the device decoder, with the CPU's message;
#   7. a capacity larger than the device's memory is a cap: the session runs, holding pages for
#      the positions it uses.
# Logs go to $OUT; the exit status is 0 when every step passes.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
T=${T:-$ROOT/.gpu-carry/tests}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
source scripts/gpu_cjson.sh
source scripts/gpu_step.sh
step selftest 300 "$T/mlxrt-cuda-test" --no-bench
step attn_split 120 "$T/mlxrt-attn-bench" --quick
step attn_deep 120 "$T/mlxrt-attn-bench" --quick --deep
step attn_kfv 120 "$T/mlxrt-attn-bench" --quick --kfv
step attn_kfv_deep 120 "$T/mlxrt-attn-bench" --quick --deep --kfv
step attn_planar3_deep 120 "$T/mlxrt-attn-bench" --quick --deep --planar3
step attn_planar4_deep 120 "$T/mlxrt-attn-bench" --quick --deep --planar4
step attn_cluster 120 "$T/mlxrt-attn-bench" --quick --cluster
step attn_cluster_wide 120 "$T/mlxrt-attn-bench" --quick --cluster-wide
step pfattn 120 "$T/mlxrt-pfattn-bench"
step sample 120 "$T/mlxrt-sample-test" --no-bench
step kvcodec 60 "$T/mlxrt-kvcodec-test"
FIX=(tests/fixtures/models/gemma*)
step decode_tiny 200 "$T/mlxrt-decode-test" --ref cpu --gen 24 --pp 64 --tg 64 --reps 1 "${FIX[@]}"
step decode_variants 200 "$T/mlxrt-decode-test" --ref cpu --prompt 80 --gen 64 --prefill 1 --pp 64 --tg 64 --reps 1 \
  tests/fixtures/models/gemma4-moe-* tests/fixtures/models/gemma4-e2b-* tests/fixtures/models/gemma4-unified-*
step batch_tiny 360 "$T/mlxrt-batch-test" --seqs 16 --gen 128 "${FIX[@]}"
# the 31B's shapes in 6 layers (5 sliding, 1 full): the products' k splits and the kernels those
# shapes take, against the CPU reference
if "$T/mlxrt" synth --like gemma4-31b --mode nvfp4 --layers 6 -o /dev/shm/s31x6 --no-sync >"$OUT/synth31x6.log" 2>&1; then
  step batch_31b6 300 "$T/mlxrt-batch-test" --seqs 6 --gen 24 /dev/shm/s31x6
  rm -rf /dev/shm/s31x6
fi
if "$T/mlxrt" synth --like gemma3-270m --mode affine4 -o /tmp/s270 >"$OUT/synth270.log" 2>&1; then
  step decode_s270 200 "$T/mlxrt-decode-test" --ref cpu --prompt 16 --gen 32 --pp 512 --tg 128 --reps 3 /tmp/s270
fi
# two threads on one model and two models at once, each decoder on its own stream
# (tests/test_threads.c reads $MLXRT_CACHE/models/gemma-3-270m-4bit: a synthetic one here)
if [ -d /tmp/s270 ]; then
  mkdir -p /tmp/mlxrt-cache/models && ln -sfn /tmp/s270 /tmp/mlxrt-cache/models/gemma-3-270m-4bit
  MLXRT_CACHE=/tmp/mlxrt-cache step threads 300 "$T/test_threads" cuda
fi
step nonfinite 300 bash tests/cli_nonfinite.sh "$T/mlxrt" cuda
# a capacity far beyond the device's memory is a cap, not an allocation: the session is made and
# runs, its KV cache holding pages for the positions used only (the exhaustion of the device's
# memory by a growing cache: scripts/gpu_kv.sh)
if [ -d /tmp/s270 ]; then
  timeout 120 "$T/mlxrt" bench -m /tmp/s270 --backend cuda -c 100000000 -p 16 -n 4 -r 1 >"$OUT/ctx_cap.log" 2>&1
  r=$?
  kv=$(grep -o 'KV cache [0-9.]* MiB' "$OUT/ctx_cap.log" | awk '{print $3}' | sort -n | tail -1)
  if [ $r -eq 0 ] && [ -n "$kv" ] && awk -v k="$kv" 'BEGIN { exit !(k < 1024) }'; then
    echo "ctx_cap: PASS (-c 100000000: the KV cache holds ${kv} MiB)"
  else
    echo "ctx_cap: FAIL rc=$r: $(tail -2 "$OUT/ctx_cap.log")"
    rc=1
  fi
fi
grep -hE "FAIL" "$OUT"/*.log | head -20
echo "gpu_check: rc=$rc"
exit $rc
