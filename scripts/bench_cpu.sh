#!/usr/bin/env bash
# CPU decode/prompt throughput of the demo model, mlxrt against llama.cpp's llama-bench on the
# original GGUF, in the same run, alternating the two engines R times (the machine is shared:
# medians and ratios, not lone numbers). Usage: bench_cpu.sh [R] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-5}
T=${2:-$(nproc)}
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models
GGUF=$ROOT/gemma-3-270m-q4_k_m.gguf
MODEL=$ROOT/gemma-3-270m-4bit
LLAMA=$(bash scripts/build_llama_bench.sh cpu)
[ -x build/mlxrt ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)"; }
P=${PP:-128}
N=${TG:-64}
out=$(mktemp -d)
for i in $(seq "$R"); do
  "$LLAMA" -m "$GGUF" -p "$P" -n "$N" -r 1 -t "$T" -o json >"$out/llama.$i.json" 2>/dev/null
  build/mlxrt bench -m "$MODEL" -p "$P" -n "$N" -r 1 -t "$T" --backend cpu -o json >"$out/mlxrt.$i.json"
done
python3 - "$out" "$R" "$P" "$N" "$T" <<'PY'
import json, statistics, sys, platform
d, R, P, N, T = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def series(engine, key):
    xs = []
    for i in range(1, R + 1):
        for r in json.load(open(f"{d}/{engine}.{i}.json")):
            if key(r): xs.append(r["avg_ts"])
    return xs
rows = []
for name, lk, mk in [(f"pp{P}", lambda r: r["n_prompt"] > 0, lambda r: r["n_prompt"] > 0),
                     (f"tg{N}", lambda r: r["n_gen"] > 0, lambda r: r["n_gen"] > 0)]:
    l, m = series("llama", lk), series("mlxrt", mk)
    rows.append((name, statistics.median(l), statistics.median(m)))
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
print(f"machine: {cpu}, {T} threads; {R} alternating runs each, medians")
print("| test | llama.cpp Q4_K_M (t/s) | mlxrt affine 4-bit g64 (t/s) | mlxrt / llama.cpp |")
print("| --- | ---: | ---: | ---: |")
for name, l, m in rows:
    print(f"| {name} | {l:.2f} | {m:.2f} | {m / l:.2f} |")
PY
rm -rf "$out"
