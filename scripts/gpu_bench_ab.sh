#!/usr/bin/env bash
# Two builds of mlxrt side by side on the GPU machine, in ONE device call, alternating on the
# same synthetic checkpoint: the check that a change keeps speed (every t/s within ±2 %) and
# output bits (every logits hash equal).
#
# On the CPU machine (nvcc needs no GPU), build both and put them where the call carries them:
#   BUILD=/tmp/b-before bash scripts/build_gpu_carry.sh && mv .gpu-carry/bin .gpu-carry/before
#   (in the tree of the change)  bash scripts/build_gpu_carry.sh     # -> .gpu-carry/bin
# On the GPU machine (device call with carry [".debs", ".gpu-carry"]):
#   bash scripts/gpu_bench_ab.sh [--like gemma4-31b] [--mode nvfp4] [--rounds 2]
#        [-p 512] [-n 128] [-d 0,4096] [-r 3] [--layers N] [--extra "BENCH ARGS"]
# (--extra: more `mlxrt bench` arguments for both sides, e.g. "--kv-k planar3 --warmup-depth 0")
# Each round runs `mlxrt bench` of A (.gpu-carry/before) then B (.gpu-carry/bin); the JSON of
# every run and a summary (median t/s per test, B/A, hashes) go to $OUT. KEEP_MODEL=1 leaves the
# checkpoint (/dev/shm/mlxrt-ab-LIKE-MODE) for later steps of the same call.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
A=${A:-$ROOT/.gpu-carry/before}
B=${B:-$ROOT/.gpu-carry/bin}
OUT=${OUT:-$ROOT/gpu-out}
BACKEND=${BACKEND:-cuda}   # (cpu: a local dry run of the script)
LIKE=gemma4-31b MODE=nvfp4 ROUNDS=2 NP=512 NG=128 DEPTHS=0,4096 REPS=3 LAYERS=() EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --like) LIKE=$2; shift 2 ;;
    --mode) MODE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -p) NP=$2; shift 2 ;;
    -n) NG=$2; shift 2 ;;
    -d) DEPTHS=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    --layers) LAYERS=(--layers "$2"); shift 2 ;;
    --extra) read -r -a EXTRA <<<"$2"; shift 2 ;;
    *) echo "gpu_bench_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
source scripts/gpu_cjson.sh
for x in "$A" "$B"; do
  [ -x "$x/mlxrt" ] && [ -f "$x/libmlxrt-cuda.so" ] || { echo "missing $x/mlxrt or its plug-in" >&2; exit 1; }
done
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
MODEL=/dev/shm/mlxrt-ab-$LIKE-$MODE
[ -d /dev/shm ] || MODEL=/tmp/mlxrt-ab-$LIKE-$MODE
rm -rf "$MODEL"
t0=$(date +%s)
"$B/mlxrt" synth --like "$LIKE" --mode "$MODE" -o "$MODEL" --no-sync "${LAYERS[@]}" >"$OUT/synth.log" 2>&1 ||
  { tail -5 "$OUT/synth.log"; exit 1; }
echo "synth $LIKE $MODE: $(( $(date +%s) - t0 )) s, $(du -sh "$MODEL" | cut -f1)"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    t0=$(date +%s)
    MLXRT_DECODER=1 "$bin/mlxrt" bench -m "$MODEL" --backend "$BACKEND" -p "$NP" -n "$NG" -d "$DEPTHS" -r "$REPS" -o json \
      "${EXTRA[@]}" >"$OUT/bench-$side-$r.json" 2>"$OUT/bench-$side-$r.log" || { tail -5 "$OUT/bench-$side-$r.log"; exit 1; }
    echo "round $r $side: $(( $(date +%s) - t0 )) s"
  done
done
[ -n "${KEEP_MODEL:-}" ] || rm -rf "$MODEL"
python3 - "$OUT" "$ROUNDS" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {s: [json.load(open(f"{out}/bench-{s}-{r}.json")) for r in range(1, rounds + 1)] for s in "AB"}
key = lambda x: ("pp%d" % x["n_prompt"] if x["n_prompt"] else "tg%d" % x["n_gen"]) + (" @ d%d" % x["n_depth"] if x["n_depth"] else "")
tests = [key(x) for x in runs["A"][0]]
print("| test | A t/s (runs) | B t/s (runs) | B/A (medians) | hash A | hash B |")
print("| --- | --- | --- | ---: | --- | --- |")
worst, same = 0.0, True
for t in tests:
    v = {s: [x["avg_ts"] for run in runs[s] for x in run if key(x) == t] for s in "AB"}
    h = {s: sorted({x["logits_hash"] for run in runs[s] for x in run if key(x) == t}) for s in "AB"}
    ma, mb = statistics.median(v["A"]), statistics.median(v["B"])
    ratio = mb / ma
    worst = max(worst, abs(ratio - 1))
    same &= h["A"] == h["B"] and len(h["A"]) == 1
    print(f"| {t} | {ma:.2f} ({', '.join(f'{x:.2f}' for x in v['A'])}) | {mb:.2f} ({', '.join(f'{x:.2f}' for x in v['B'])}) "
          f"| {ratio:.4f} | {','.join(h['A'])} | {','.join(h['B'])} |")
print(f"\nlargest |B/A - 1| = {100 * worst:.2f} %; logits hashes {'identical' if same else 'DIFFER'}")
EOF
