#!/usr/bin/env bash
# The K-compression quality study (dev/kv_quality.c) on the CPU: the real Gemma 3 270M (the demo
# model, scripts/make_demo_model.sh) over the licence texts every Debian system ships
# (/usr/share/common-licenses, concatenated in name order), at each context given:
#   bash scripts/kv_quality.sh [CTX...]        default 8192; MODEL= another checkpoint, REPS= a comma
#   list of the representations (dev/kv_quality.c; default all)
# Builds the Release library (build/) when missing. Prints one markdown table per context.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-bf16}
CTXS=("$@")
[ ${#CTXS[@]} -gt 0 ] || CTXS=(8192)
[ -d "$MODEL" ] || MLXRT_DEMO_FORMATS=bf16 bash scripts/make_demo_model.sh >/dev/null
[ -f build/libmlxrt.a ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)" --target mlxrt_static >/dev/null; }
BIN=build/kv_quality
cc -std=c11 -O2 -ffp-contract=off -Isrc -Iinclude dev/kv_quality.c build/libmlxrt.a -lcjson -lm -lpthread -ldl -o "$BIN"
TEXT=$(mktemp)
trap 'rm -f "$TEXT"' EXIT
for f in $(ls /usr/share/common-licenses | sort); do
  [ -f "/usr/share/common-licenses/$f" ] && cat "/usr/share/common-licenses/$f" >>"$TEXT"
done
for c in "${CTXS[@]}"; do "$BIN" "$MODEL" "$TEXT" "$c" 64 ${REPS:+"$REPS"}; done
