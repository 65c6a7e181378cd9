#!/usr/bin/env bash
# `mlxrt logits` against mlx-lm's golden logits on a flat (model.*, gemma4_text) and a nested
# (language_model.model.*, gemma4 with text_config) checkpoint, and a Gemma 3 one: the written
# safetensors must hold logits [positions, vocab] within 8 bf16 ulps of mlx-lm's row maximum
# with the same argmax per row, and greedy / greedy_logits for --decode.
set -u
MLXRT=$1
PY=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/venv/bin/python
[ -x "$PY" ] || PY=python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0 pass=0
for m in gemma4-dense-nvfp4 gemma4-nested-affine4-g64 gemma3-nested-bf16 gemma3-text-affine8-g32; do
  dir=tests/fixtures/models/$m
  toks=$("$PY" - "$dir/golden.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
s, e = h["prompt"]["data_offsets"]
print(",".join(str(v) for v in struct.unpack(f"<{(e - s) // 4}i", b[8 + n + s:8 + n + e])))
PY
)
  if ! "$MLXRT" logits -m "$dir" --tokens "$toks" --decode 8 --backend cpu -o "$T/$m.safetensors"; then
    echo "FAIL: $m: mlxrt logits failed"; fail=$((fail + 1)); continue
  fi
  if "$PY" - "$dir/golden.safetensors" "$T/$m.safetensors" "$m" <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype={"F32": np.float32, "I32": np.int32}[v["dtype"]]).reshape(v["shape"])
    return out
g, o, name = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
ok = o["logits"].shape == g["logits"].shape
ulp = 2.0 ** (np.floor(np.log2(np.abs(g["logits"]).max(-1))) - 7)
worst = float((np.abs(o["logits"] - g["logits"]).max(-1) / ulp).max())
am = (o["logits"].argmax(-1) == g["logits"].argmax(-1)).all()
dec = (o["greedy"][:8] == g["greedy"][:8]).all()
print(f"{name}: logits {o['logits'].shape}, worst {worst:.1f} ulp, argmax equal {am}, greedy[:8] equal {dec}")
sys.exit(0 if ok and worst <= 8 and am and dec else 1)
PY
  then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
