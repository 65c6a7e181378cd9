#!/usr/bin/env bash
# The device decoder's KV cache in one call on a GPU machine, with carried binaries (no build):
#   On the CPU machine: bash scripts/build_gpu_carry.sh mlxrt mlxrt_cuda mlxrt-decode-test mlxrt-kvgrowth-test \
#     mlxrt-kvk-compare
#   (and, for the speed comparison, a second build of mlxrt + libmlxrt-cuda.so in BEFORE);
#   on the GPU machine (carry [".debs", ".gpu-carry/bin", ".gpu-carry/before", ".gpu-carry/tok"]):
#   bash scripts/gpu_kv.sh
#   1. mlxrt-decode-test on the tiny fixtures: the paged cache under every variant, against the
#      reference path on the CPU;
#   2. a synthetic Gemma 4 31B in nvfp4: mlxrt-kvgrowth-test (1 K → 64 K tokens in chunks of 1 K,
#      the allocation table, the grown session's logits against a one-feed session's, then the
#      device's memory taken until EXHAUST GiB stay free and the cache made to run out), then
#      mlxrt-kvk-compare: K from V against bf16 K after KVK_CTX (32768) tokens, 64 decode steps,
#      and bf16 K against itself with the prompt in other chunks (the scale of those figures);
#   3. tests/gpu/chat_long.sh: mlxrt chat past 8 K tokens in one session, on a synthetic Gemma 3
#      270M with the demo model's tokenizer and template (TOK, default .gpu-carry/tok:
#      tokenizer.json.gz, tokenizer_config.json, chat_template.jinja);
#   4. mlxrt bench on the 31B: pp512 and tg128 at depths 0 / 4096 / 32768, this build with K from V
#      (bin), this build with --kv-k bf16 (bf16) and BEFORE alternated (RUNS, default 3, runs each;
#      0: none), with the memory each run holds; DEPTHS overrides the depths;
#   5. LONG (default 261000; 0: none): tg16 after LONG tokens, with K from V and with --kv-k bf16,
#      and the device memory each holds there.
# CHECKS=0 skips 1-3 (the benches alone, within one call's time). Logs in $OUT; exit status 0
# when every check passes.
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
# CHECKS=0: the benches alone (a second call within a call's time limit)
if [ "${CHECKS:-1}" = 1 ]; then
step decode_tiny 200 "$BIN/mlxrt-decode-test" --ref cpu --prompt 80 --gen 64 --prefill 1 --pp 64 --tg 16 --reps 1 \
  tests/fixtures/models/gemma*
fi
S31=/tmp/s31
step synth31 300 "$BIN/mlxrt" synth --like gemma4-31b --mode nvfp4 -o "$S31" --no-sync
if [ "${CHECKS:-1}" = 1 ]; then
step kvgrowth 300 "$BIN/mlxrt-kvgrowth-test" "$S31" --to 65536 --chunk 1024 --exhaust "$EXHAUST"
cat "$OUT/kvgrowth.log"
step kvk 500 "$BIN/mlxrt-kvk-compare" "$S31" --ctx "${KVK_CTX:-32768}" --steps 64
# the scale of the figures: bf16 K against itself with the prompt fed in other chunks
step kvk_base 500 "$BIN/mlxrt-kvk-compare" "$S31" --ctx "${KVK_CTX:-32768}" --steps 64 --b bf16 --chunk-b 1000
grep -h "kvk-compare" "$OUT"/kvk*.log
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
fi
for r in $(seq 1 "${RUNS:-3}"); do
  step "bench_bin_$r" 300 "$BIN/mlxrt" bench -m "$S31" --backend cuda -p 512 -n 128 -d "$DEPTHS" -r 1 -o json
  step "bench_bf16_$r" 300 "$BIN/mlxrt" bench -m "$S31" --backend cuda -p 512 -n 128 -d "$DEPTHS" -r 1 -o json \
    --kv-k bf16
  [ -x "$BEFORE/mlxrt" ] &&
    step "bench_before_$r" 300 "$BEFORE/mlxrt" bench -m "$S31" --backend cuda -p 512 -n 128 -d "$DEPTHS" -r 1 -o json
done
LONG=${LONG:-261000}
if [ "$LONG" -gt 0 ]; then
  step long_bin 400 "$BIN/mlxrt" bench -m "$S31" --backend cuda -p 0 -n 16 -d "$LONG" -r 1
  step long_bf16 400 "$BIN/mlxrt" bench -m "$S31" --backend cuda -p 0 -n 16 -d "$LONG" -r 1 --kv-k bf16
  grep -h "memory\|tg16" "$OUT"/long_*.log
fi
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
def med(v, tag, i):
    return statistics.median(x[i] for x in v.get(tag, [(0, 0, 0)]))
print("| test | K from V t/s | bf16 K t/s | before t/s | K from V / bf16 | bf16 / before | KV MiB (K from V, bf16) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for k, v in rows.items():
    a, b, c = med(v, "bin", 0), med(v, "bf16", 0), med(v, "before", 0)
    print("| %s | %.1f | %.1f | %.1f | %.3f | %.3f | %.1f, %.1f |" % (k, a, b, c, a / b if b else 0, b / c if c else 0,
          med(v, "bin", 1) / 2**20, med(v, "bf16", 1) / 2**20))
PY
grep -hE "FAIL" "$OUT"/*.log | head -20
echo "gpu_kv: rc=$rc"
exit $rc
