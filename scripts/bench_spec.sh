#!/usr/bin/env bash
# Speculative decoding on the CPU: `mlxrt run` greedy on the demo model with and without each
# drafter, alternating R times (the machine is shared: medians, not lone numbers), checking
# that every run prints the same text. Usage: [PROMPT=...] bench_spec.sh [R] [FORMAT] [N] [SPEC ARGS...]
# (FORMAT: 4bit, 8bit, bf16 or nvfp4 of gemma-3-270m; each SPEC ARGS entry is one drafter's
# options, e.g. "--spec lookup" "--spec lookup --draft-max 6" "--draft-model DIR").
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-5}
FMT=${2:-8bit}
N=${3:-128}
shift $(($# < 3 ? $# : 3))
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models
MODEL=$ROOT/gemma-3-270m-$FMT
[ -f "$MODEL/model.safetensors" ] || { echo "no demo model at $MODEL (scripts/make_demo_model.sh)"; exit 1; }
[ -x build/mlxrt ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j2 --target mlxrt; }
if [ $# -eq 0 ]; then set -- "--spec lookup"; fi
# (PROMPT in the environment replaces the copying task)
PROMPT=${PROMPT:-"Repeat the following passage exactly: The old lighthouse keeper climbed the spiral stairs every \
evening at dusk. He polished the great lens, trimmed the wick, and watched the ships pass safely through the narrow \
channel between the rocks. In winter the storms came early, and the waves broke white against the cliffs below the tower."}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$R"); do
  k=0
  for spec in "" "$@"; do
    # shellcheck disable=SC2086  # (each drafter's options are words)
    build/mlxrt run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --backend cpu $spec >"$out/text.$k.$i" 2>"$out/err.$k.$i"
    k=$((k + 1))
  done
done
python3 - "$out" "$R" "$FMT" "$N" "" "$@" <<'PY'
import re, statistics, sys
d, R, fmt, n, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
print(f"machine: {cpu}; gemma-3-270m-{fmt}, run -n {n} --temp 0 --backend cpu; {R} alternating runs, medians")
print("| drafter | decode t/s | speed-up | passes | drafted | accepted | acceptance | same text |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
base = None
ref = open(f"{d}/text.0.1", "rb").read()
for k, spec in enumerate(specs):
    ts, figs, same = [], None, True
    for i in range(1, R + 1):
        err = open(f"{d}/err.{k}.{i}").read()
        m = re.search(r"decode: (\d+) tokens, ([\d.]+) tokens/s", err)
        if not m:
            sys.exit(f"no decode figures for '{spec}':\n{err}")
        ts.append(float(m.group(2)))
        s = re.search(r"(\d+) passes, (\d+) drafted, (\d+) accepted \(([\d.]+) %\)", err)
        figs = s.groups() if s else None
        same &= open(f"{d}/text.{k}.{i}", "rb").read() == ref
    med = statistics.median(ts)
    base = base or med
    p, dr, ac, rate = figs if figs else ("", "", "", "")
    print(f"| {spec or '(none)'} | {med:.2f} | {med / base:.2f}x | {p} | {dr} | {ac} | {rate + ' %' if rate else ''} "
          f"| {'yes' if same else 'NO'} |")
PY
