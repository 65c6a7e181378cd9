#!/usr/bin/env bash
# `mlxrt run -m <270M> -p "The capital of France is" -n 16 --temp 0` against mlx-lm's greedy
# text on the same checkpoint (tests/fixtures/real/gemma-3-270m-4bit.json, capital_n16.chat).
# mlx-lm on a CPU accumulates quantized products in bf16; with MLXRT_NUMERICS=mlx-cpu mlxrt
# does the same and must print exactly mlx-lm's text. The default float32 path is printed too
# (it agrees with MLX's float32 path; its text may differ from mlx-lm's bf16 one).
set -u
MLXRT=$1
MODEL=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-4bit
FIX=tests/fixtures/real/gemma-3-270m-4bit.json
if [ ! -f "$MODEL/model.safetensors" ]; then
  if [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no demo model at $MODEL"; exit 0; fi
  echo "FAIL: no demo model at $MODEL (run scripts/make_demo_model.sh)"; exit 1
fi
want=$(python3 -c "import json,sys; sys.stdout.write(json.load(open('$FIX'))['capital_n16']['chat'])")
got=$(MLXRT_NUMERICS=mlx-cpu "$MLXRT" run -m "$MODEL" -p "The capital of France is" -n 16 --temp 0 --backend cpu 2>/dev/null)
default=$("$MLXRT" run -m "$MODEL" -p "The capital of France is" -n 16 --temp 0 --backend cpu 2>/dev/null)
printf 'mlx-lm:                 %q\nmlxrt (mlx-cpu):        %q\nmlxrt (float32, default): %q\n' "$want" "$got" "$default"
if [ "$got" = "$want" ]; then echo "1 passed, 0 failed"; exit 0; fi
echo "FAIL: the text differs from mlx-lm's"; echo "0 passed, 1 failed"; exit 1
