#!/usr/bin/env bash
# End-to-end checks of the reference path on the CUDA backend, run on the GPU machine after
# scripts/gpu_test.sh has built $BUILD:
#  1. every tiny fixture model (tests/fixtures/models) through CUDA against mlx-lm's golden
#     logits (same tolerance and argmax rule as the CPU test);
#  2. when the real Gemma 3 270M is at $MODEL (default /tmp/m), greedy decoding of the 5
#     prompts of tests/fixtures/real/gemma-3-270m-4bit.json for 64 tokens on the CPU and on
#     CUDA: the token sequences must be identical, or differ first at a logged near-tie.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
MODEL=${MODEL:-/tmp/m}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
[ -n "${LD_LIBRARY_PATH:-}" ] || { d=$(dirname "$(find /tmp/mlxrt-cjson -name 'libcjson.so*' 2>/dev/null | head -1)" 2>/dev/null); [ -n "$d" ] && export LD_LIBRARY_PATH=$d; }
fail=0
echo "== tiny fixtures on CUDA vs mlx-lm"
MLXRT_TEST_BACKEND=cuda "$BUILD/test_reference_golden" 2>&1 | tee "$OUT/golden_cuda.log" | tail -30
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
FIX=${PROMPTS:-tests/fixtures/real/gemma-3-270m-4bit.json}
if [ -f "$MODEL/model.safetensors" ] && [ -f "$FIX" ]; then
  echo "== real Gemma 3 270M: greedy 64 tokens, CPU vs CUDA"
  python3 - "$BUILD/mlxrt" "$MODEL" "$FIX" "$OUT" <<'PY' || fail=1
import json, struct, subprocess, sys
import numpy as np
mlxrt, model, fix, out = sys.argv[1:5]
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    res = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[v["dtype"]]
        res[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(v["shape"])
    return res
bad = 0
for p in json.load(open(fix))["prompts"]:
    ids = ",".join(map(str, p["prompt_ids"]))
    r = {}
    for be in ("cpu", "cuda"):
        o = f"{out}/{p['name']}_{be}.safetensors"
        subprocess.run([mlxrt, "logits", "-m", model, "--tokens", ids, "--decode", "64", "--backend", be, "-o", o], check=True)
        r[be] = load(o)
    a, b = r["cpu"]["greedy"], r["cuda"]["greedy"]
    same = int((np.cumprod(a == b)).sum())
    if same == len(a):
        print(f"{p['name']}: 64/64 tokens identical")
        continue
    # at the first divergence, the CPU logits of that step: is it a near-tie?
    l = r["cpu"]["greedy_logits"][same]
    srt = np.sort(l)[::-1]
    margin = float(srt[0] - srt[1])
    near = margin < 0.1
    print(f"{p['name']}: first divergence at step {same} (cpu {a[same]}, cuda {b[same]}), CPU top-2 margin {margin:.4f}{' (near-tie)' if near else ''}")
    bad += not near
print(f"{5 - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
PY
  echo "== real Gemma 3 270M on CUDA: teacher-forced agreement with mlx-lm"
  mkdir -p /tmp/mlxrt-cache/models && ln -sfn "$MODEL" /tmp/mlxrt-cache/models/gemma-3-270m-4bit
  MLXRT_CACHE=/tmp/mlxrt-cache "$BUILD/test_real_gemma3_270m" cuda 2>&1 | tee "$OUT/real_cuda.log" | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
else
  echo "(real 270M not present at $MODEL: skipped)"
fi
echo "gpu_e2e: $([ $fail -eq 0 ] && echo OK || echo FAILED)"
exit $fail
