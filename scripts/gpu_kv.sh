#!/usr/bin/env bash
# The device decoder's KV cache in one call on a GPU machine, with carried binaries (no build):
#   On the CPU machine: bash scripts/build_gpu_carry.sh mlxrt mlxrt_cuda mlxrt-decode-test mlxrt-kvgrowth-test
#   (and, for the speed comparison, a second build of mlxrt + libmlxrt-cuda.so in BEFORE);
#   on the GPU machine (carry [".debs", ".gpu-carry/bin", ".gpu-carry/before", ".gpu-carry/tok"]):
#   bash scripts/gpu_kv.sh
#   1. mlxrt-decode-test on the tiny fixtures: the paged cache under every variant, against the
#      reference path on the CPU;
#   2. a synthetic Gemma 4 31B in nvfp4: mlxrt-kvgrowth-test (1 K → 64 K tokens in chunks of 1 K,
#      the allocation table, the grown session's logits against a one-feed session's, then the
#      device's memory taken until EXHAUST GiB stay free and the cache made to run out);
#   3. tests/gpu/chat_long.sh: mlxrt chat past 8 K tokens in one session, on a synthetic Gemma 3
#      270M with the demo model's tokenizer and template (TOK, default .gpu-carry/tok:
#      tokenizer.json.gz, tokenizer_config.json, chat_template.jinja);
#   4. mlxrt bench on the 31B: pp512 and tg128 at depths 0 / 4096 / 32768, this build and BEFORE
#      alternated (RUNS, default 3, runs each; 0: none), with the memory each run holds; DEPTHS
#      overrides the depths.
# Logs in $OUT; exit status 0 when every check passes.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BIN=${BIN:-$ROOT/.gpu-carry/bin}
BEFORE=${BEFORE:-$ROOT/.gpu-carry/before}
OUT=${OUT:-$ROOT/gpu-out}
EXHAUST=${EXHAUST:-3}
DEPTHS=${DEPTHS:-0,4096,32768}
mkdir -p "$OUT"
source scripts/gpu_cjson.sh
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
source scripts/gpu_step.sh
step decode_tiny 200 "$BIN/mlxrt-decode-test" --ref cpu --prompt 80 --gen 64 --prefill 1 --pp 64 --tg 16 --reps 1 \
  tests/fixtures/models/gemma*
S31=/tmp/s31
step synth31 300 "$BIN/mlxrt" synth --like gemma4-31b --mode nvfp4 -o "$S31" --no-sync
step kvgrowth 300 "$BIN/mlxrt-kvgrowth-test" "$S31" --to 65536 --chunk 1024 --exhaust "$EXHAUST"
cat "$OUT/kvgrowth.log"
# chat past 8 K tokens in one session: a synthetic Gemma 3 270M (a 32 K context, like the demo
# model) with the demo model's tokenizer and chat template carried in TOK
TOK=${TOK:-$ROOT/.gpu-carry/tok}
if [ -f "$TOK/tokenizer.json.gz" ] && "$BIN/mlxrt" synth --like gemma3-270m --mode affine4 -o /tmp/c270 >"$OUT/synth270.log" 2>&1 &&
  gunzip -c "$TOK/tokenizer.json.gz" >/tmp/c270/tokenizer.json && cp "$TOK"/tokenizer_config.json "$TOK"/chat_template.jinja /tmp/c270/; then
  step chat_long 600 bash tests/gpu/chat_long.sh "$BIN/mlxrt" /tmp/c270
  cat "$OUT/chat_long.log"
else
  echo "chat_long: FAIL: no checkpoint with a tokenizer (TOK=$TOK)"
  rc=1
fi
for r in $(seq 1 "${RUNS:-3}"); do
  for b in "$BIN" "$BEFORE"; do
    [ -x "$b/mlxrt" ] || continue
    tag=$(basename "$b")
    step "bench_${tag}_$r" 300 "$b/mlxrt" bench -m "$S31" --backend cuda -p 512 -n 128 -d "$DEPTHS" -r 1 -o json
  done
done
python3 - "$OUT" <<'PY'
import json, glob, os, sys, statistics
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "bench_*.log"))):
    tag = os.path.basename(f).split("_")[1]
    txt = open(f).read()
    try:
        js = json.loads(txt[txt.index("["):txt.rindex("]") + 1])
    except ValueError:
        continue
    for r in js:
        key = ("pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]) + " @ d%d" % r["n_depth"]
        rows.setdefault(key, {}).setdefault(tag, []).append((r["avg_ts"], r.get("kv_bytes", 0), r.get("device_used_bytes", 0)))
print("| test | paged t/s | contiguous t/s | ratio | paged KV MiB | paged device GiB | contiguous device GiB |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for k, v in rows.items():
    a = statistics.median(x[0] for x in v.get("bin", [(0, 0, 0)]))
    b = statistics.median(x[0] for x in v.get("before", [(0, 0, 0)]))
    kv = max(x[1] for x in v.get("bin", [(0, 0, 0)])) / 2**20
    da = max(x[2] for x in v.get("bin", [(0, 0, 0)])) / 2**30
    db = max(x[2] for x in v.get("before", [(0, 0, 0)])) / 2**30
    print("| %s | %.1f | %.1f | %.3f | %.1f | %.2f | %.2f |" % (k, a, b, a / b if b else 0, kv, da, db))
PY
grep -hE "FAIL" "$OUT"/*.log | head -20
echo "gpu_kv: rc=$rc"
exit $rc
