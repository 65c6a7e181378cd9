#!/usr/bin/env bash
# Batched decode on the CPU, mlxrt against llama.cpp's llama-batched-bench on the demo model's
# original GGUF, in the same run, alternating the two engines R times (the machine is shared:
# medians and ratios, not lone numbers): B sequences of PP prompt tokens, then NG steps of all
# of them; the aggregate decode t/s. Usage: bench_cpu_batch.sh [R] [NPL] [THREADS]
# (NPL: a comma list of B, default 1,2,4,8; PP / NG in the environment, default 64 / 32)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-5}
NPL=${2:-1,2,4,8}
T=${3:-$(nproc)}
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models
GGUF=$ROOT/gemma-3-270m-q4_k_m.gguf
MODEL=$ROOT/gemma-3-270m-4bit
LLAMA=$(dirname "$(bash scripts/build_llama_bench.sh cpu)")/llama-batched-bench
[ -x "$LLAMA" ] || { echo "no llama-batched-bench at $LLAMA"; exit 1; }
[ -x build/mlxrt ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)"; }
P=${PP:-64}
N=${NG:-32}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$R"); do
  "$LLAMA" -m "$GGUF" -c 4096 -b 2048 -ub 512 -npp "$P" -ntg "$N" -npl "$NPL" -t "$T" >"$out/llama.$i.txt" 2>/dev/null
  build/mlxrt bench -m "$MODEL" --backend cpu --batch "$NPL" -p "$P" -n "$N" -r 1 -t "$T" -o json \
    >"$out/mlxrt.$i.json"
done
python3 - "$out" "$R" "$P" "$N" "$T" <<'PY'
import json, statistics, sys
d, R, P, N, T = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
llama, mlxrt = {}, {}
for i in range(1, R + 1):
    for line in open(f"{d}/llama.{i}.txt"):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= 8 and c[0].isdigit():  # PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
            llama.setdefault(int(c[2]), []).append(float(c[7]))
    for r in json.load(open(f"{d}/mlxrt.{i}.json")):
        mlxrt.setdefault(r["n_batch"], []).append(r["tg_avg_ts"])
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
print(f"machine: {cpu}, {T} threads; PP {P}, TG {N}; {R} alternating runs each, medians")
print("| B | llama.cpp Q4_K_M S_TG (t/s) | mlxrt affine 4-bit g64 (t/s, aggregate) | mlxrt / llama.cpp | mlxrt B / B=1 |")
print("| ---: | ---: | ---: | ---: | ---: |")
base = statistics.median(mlxrt[min(mlxrt)])
for b in sorted(mlxrt):
    m = statistics.median(mlxrt[b])
    l = statistics.median(llama[b]) if b in llama else float("nan")
    print(f"| {b} | {l:.2f} | {m:.2f} | {m / l:.2f} | {m / base:.2f} |")
PY
