#!/usr/bin/env bash
# Which path `mlxrt run --backend cuda` takes for every Gemma 3 and Gemma 4 text preset of
# `mlxrt synth`, in ONE call on the GPU machine: each preset synthesized (nvfp4; the large ones
# cut to 6 layers, which keeps their layer kinds), given the Gemma 3 tokenizer (its ids fit
# every preset's vocabulary), then `mlxrt run --verbose` generates 4 tokens; PASS when stderr
# says the whole-step decoder runs on the cuda backend (src/mlx/decoder_desc.c), FAIL when it
# names the reference path or the run fails.
#
# On the CPU machine (with the demo model cached: scripts/make_demo_model.sh):
#   bash scripts/build_gpu_carry.sh
#   mkdir -p .gpu-carry/tok && gzip -c ~/.cache/mlxrt/models/gemma-3-270m-4bit/tokenizer.json \
#     > .gpu-carry/tok/tokenizer.json.gz
# On the GPU machine (carry [".debs", ".gpu-carry/bin", ".gpu-carry/tok"]):
#   bash scripts/gpu_decoder_paths.sh [PRESET...]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
source scripts/gpu_cjson.sh
BIN=${BUILD:-$ROOT/.gpu-carry/bin}
TOK=${TOK:-$ROOT/.gpu-carry/tok/tokenizer.json.gz}
M=${MODELS:-/tmp/mlxrt-paths}
PRESETS=("$@")
[ ${#PRESETS[@]} -gt 0 ] || PRESETS=(gemma4-31b gemma4-26b-a4b gemma4-e4b gemma4-e2b gemma4-12b gemma3-270m gemma3-1b
                                     gemma3-4b gemma3-12b gemma3-27b)
[ -f "$TOK" ] || { echo "missing $TOK" >&2; exit 1; }
mkdir -p "$M"
rc=0
for p in "${PRESETS[@]}"; do
  d=$M/$p
  layers=(--layers 6)
  case $p in gemma4-e2b|gemma4-e4b|gemma3-270m) layers=() ;; esac
  rm -rf "$d"
  if ! "$BIN/mlxrt" synth --like "$p" --mode nvfp4 "${layers[@]}" -o "$d" >"$M/$p.synth.log" 2>&1; then
    echo "$p: FAIL (synth: $(tail -1 "$M/$p.synth.log"))"; rc=1; continue
  fi
  gunzip -c "$TOK" >"$d/tokenizer.json"
  timeout 300 "$BIN/mlxrt" run -m "$d" --backend cuda --verbose --no-chat-template -p "The capital of France is" \
    -n 4 >"$M/$p.out" 2>"$M/$p.err"
  r=$?
  path=$(grep -E "whole-step decoder on the|reference path" "$M/$p.err" | head -1)
  if [ $r -eq 0 ] && grep -q "whole-step decoder on the cuda backend" "$M/$p.err"; then
    echo "$p: PASS ($path)"
  else
    echo "$p: FAIL rc=$r (${path:-$(tail -1 "$M/$p.err")})"; rc=1
  fi
  rm -rf "$d"
done
echo "gpu_decoder_paths: rc=$rc"
exit $rc
