#!/usr/bin/env bash
# Issue 4's acceptance: `mlxrt run -m <270M> -p "The capital of France is" -n 16 --temp 0`
# against mlx-lm greedy on the same checkpoint, for every demo format with a fixture
# (tests/fixtures/real/gemma-3-270m-<format>.json, capital_n16; `run` applies the chat
# template as mlx-lm's generate command does, so the `chat` texts are the ones compared):
#  (a) --numerics mlx-cpu (MLX's CPU arithmetic, bit for bit) must print mlx-lm's text
#      exactly (capital_n16.chat, made by scripts/golden_real_model.py);
#  (b) the default numerics (float32 accumulation) must print the greedy text of the
#      float32-accumulation mlx-lm reference: mlx-lm with every quantized matrix replaced by
#      its mx.dequantize result (capital_n16.f32_chat, made by scripts/golden_real_f32.py).
# Needs the demo models (scripts/make_demo_model.sh); MLXRT_ALLOW_MISSING_MODELS=1 turns a
# missing one into a skip.
set -u
MLXRT=$1
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models
PROMPT="The capital of France is"
pass=0 fail=0 seen=0
field() { python3 -c "import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))['capital_n16'].get(sys.argv[2], '@@missing@@'))" "$1" "$2"; }
for fmt in 4bit 8bit nvfp4; do
  FIX=tests/fixtures/real/gemma-3-270m-$fmt.json
  MODEL=$ROOT/gemma-3-270m-$fmt
  [ -f "$FIX" ] || continue
  if [ ! -f "$MODEL/model.safetensors" ]; then
    if [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no demo model at $MODEL"; continue; fi
    echo "FAIL: no demo model at $MODEL (run scripts/make_demo_model.sh)"; fail=$((fail + 1)); continue
  fi
  seen=$((seen + 1))
  want=$(field "$FIX" chat)
  want_f32=$(field "$FIX" f32_chat)
  got=$("$MLXRT" run -m "$MODEL" -p "$PROMPT" -n 16 --temp 0 --numerics mlx-cpu 2>/dev/null)
  got_f32=$("$MLXRT" run -m "$MODEL" -p "$PROMPT" -n 16 --temp 0 --backend cpu 2>/dev/null)
  printf '%s\n  mlx-lm:                          %q\n  mlxrt --numerics mlx-cpu:        %q\n' "$fmt" "$want" "$got"
  printf '  float32-accumulation reference:  %q\n  mlxrt (default numerics):        %q\n' "$want_f32" "$got_f32"
  case "$want" in
    *Paris*) echo "  mlx-lm's greedy answer names Paris" ;;
    *) echo "  mlx-lm's greedy answer does not name Paris" ;;
  esac
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else
    echo "FAIL: $fmt: with --numerics mlx-cpu the text differs from mlx-lm's"; fail=$((fail + 1)); fi
  if [ "$want_f32" = @@missing@@ ]; then
    echo "FAIL: $FIX has no capital_n16.f32_chat (run scripts/golden_real_f32.py)"; fail=$((fail + 1))
  elif [ "$got_f32" = "$want_f32" ]; then pass=$((pass + 1)); else
    echo "FAIL: $fmt: the default text differs from the float32-accumulation reference's"; fail=$((fail + 1)); fi
done
if [ $seen = 0 ] && [ $fail = 0 ]; then echo "SKIPPED: no demo model with a fixture"; exit 0; fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
