#!/usr/bin/env bash
# A logits row holding NaN or infinity fails generation with one message on every path: greedy
# and sampled, the reference path and the whole-step decoder (MLXRT_DECODER=1), at the prompt
# and at a later step. CPU in CTest; scripts/gpu_check.sh runs it with "cuda".
# The model: the Gemma 4 bf16 fixture with the first element of embedding rows 300 and 301
# ("▁th", "▁the") set to ±the largest bf16 (the rest 0). The tied head's logits for them are
# ±huge or ±inf, which the final softcap turns into ±30: the prompt's logits stay finite and one
# of the two rows is chosen (greedy or sampled); its input embedding, scaled by sqrt(hidden),
# overflows, and the next step's logits are NaN. A second copy (every row at the largest bf16)
# overflows the prompt itself.
# Usage: tests/cli_nonfinite.sh MLXRT [cpu|cuda]
set -u
MLXRT=$1
BACKEND=${2:-cpu}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FIX=tests/fixtures/models/gemma4-dense-bf16
pass=0 fail=0

patch_model() { # dir, rows to overflow ("" = the two rows), write a copy of the fixture
  mkdir -p "$1"
  cp "$FIX/config.json" "$1/"
  cp tests/fixtures/tokenizer/small-a.json "$1/tokenizer.json"
  python3 - "$FIX/model.safetensors" "$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
src, dst, which = sys.argv[1:4]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
e = h["model.embed_tokens.weight"]
rows, cols = e["shape"]
off = 8 + n + e["data_offsets"][0]
def put(row, col, bits):
    struct.pack_into("<H", b, off + 2 * (row * cols + col), bits)
if which == "late":
    for row, bits in ((300, 0x7F7F), (301, 0xFF7F)):  # ±3.39e38, the largest finite bf16
        for c in range(cols):
            put(row, c, bits if c == 0 else 0)
else:
    for row in range(rows):
        for c in range(cols):
            put(row, c, 0x7F7F)
open(dst, "wb").write(b)
PY
}
patch_model "$T/late" late
patch_model "$T/early" early

# the prompt's n tokens take positions 0..n-1: the overflow reaches the logits after position n
# (the chosen row fed back) in the late model, after position n-1 in the early one
check() { # model, expected position, label, extra args...
  local model=$1 pos=$2 label=$3
  shift 3
  local msgs="" decoder
  for decoder in 0 1; do
    for mode in "--temp 0" "--temp 0.8 --seed 7"; do
      # shellcheck disable=SC2086
      MLXRT_DECODER=$decoder timeout 60 "$MLXRT" run -m "$model" -p hello --no-chat-template -n 8 \
        --backend "$BACKEND" $mode "$@" >"$T/out" 2>"$T/err"
      local rc=$?
      if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "logits after position $pos are not finite" "$T/err"; then
        fail=$((fail + 1))
        echo "FAIL: $label decoder=$decoder $mode: rc=$rc, wanted 'logits after position $pos are not finite':"
        cat "$T/err"
      else
        pass=$((pass + 1))
      fi
      msgs="$msgs$(grep -o 'the logits after.*' "$T/err")"$'\n'
    done
  done
  # one message from every path
  if [ "$(printf '%s' "$msgs" | sort -u | wc -l)" -ne 1 ]; then
    fail=$((fail + 1))
    echo "FAIL: $label: the paths disagree:"
    printf '%s' "$msgs"
  else
    pass=$((pass + 1))
  fi
}
n=$("$MLXRT" tokenize -m "$T/late" -p hello --ids | tr ',' '\n' | grep -c .)
check "$T/late" "$n" "overflow at a later step"
check "$T/early" $((n - 1)) "overflow in the prompt"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
