#!/usr/bin/env bash
# llama.cpp and mlxrt side by side on the Gemma 4 31B shapes (or those of other `mlxrt synth`
# presets: --like), in ONE call on the GPU machine: the same -p/-n/-d/-r for llama-bench (Q4_0
# GGUF, every layer on the GPU, flash attention) and `mlxrt bench` (MLXRT_DECODER=1, CUDA) on
# synthetic nvfp4 and affine4 checkpoints; the JSON of each engine and a markdown table
# (BENCHMARKS.md) go to $OUT.
#
# On the CPU machine, once (fills the ignored folder .gpu-carry/ that the device call carries):
#   bash scripts/build_llama_bench_cuda.sh        # llama-bench, CUDA sm_90a (slow: ~1 h 50 min)
#   bash scripts/gpu_bench_vs_llama.sh --prepare  # gguf + yaml Python sources, tokenizer;
#        without a built llama-bench: its source (7 MB), built on the GPU machine (~5-8 min?)
# On the GPU machine (device call with carry [".debs", ".gpu-carry"]):
#   bash scripts/gpu_bench_vs_llama.sh [--quick] [--only llama,nvfp4,affine4]
#        [--depths 0,4096,32768] [--reps 3] [-p 512] [-n 128] [--layers N]
#        [--like gemma4-31b,gemma4-26b-a4b,gemma4-e2b,gemma4-e4b,gemma4-12b]
#   --quick = 6 layers, -r 1, depths 0,4096 (a smoke test of the whole chain).
#   --like (default gemma4-31b): the presets of `mlxrt synth --like` and
#   make_gguf_synth.py --like, run one after the other, each in an equal share of the time
#   left (files $MODELS/PRESET-q4_0.gguf, $MODELS/PRESET-MODE/); every result line in the
#   .jsonl files gets a "preset" field and the table a model column.
#   Phases run in that order, each bounded by `timeout`; the whole call stays under $BUDGET
#   seconds (default 540). A failure or timeout of one step is recorded in status.txt and the
#   other engine's results are kept. Several calls (e.g. --only llama, then --only nvfp4) can
#   be merged afterwards: python3 scripts/bench_table.py --dir OUT1 --dir OUT2 -o BENCH.md
#   The flagship depth in one call (one fill each, ~510 s): SKIP_BUILD=1
#   BUILD=$PWD/.gpu-carry/bin LLAMA_SHARE_PCT=66 MLXRT_BENCH_EXTRA="--warmup-depth 0" BUDGET=585
#   ... --only llama,nvfp4 --depths 262144 -r 1 -p 0 (the carried mlxrt: scripts/build_gpu_carry.sh).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/.gpu-carry
cd "$ROOT" || exit 1

# ---- --prepare (CPU machine) -------------------------------------------------------------
if [ "${1:-}" = "--prepare" ]; then
  set -e
  PY=$(bash scripts/venv.sh)
  SP=$("$PY" -c 'import gguf, os; print(os.path.dirname(os.path.dirname(gguf.__file__)))')
  mkdir -p "$CARRY/pylib"
  rm -rf "$CARRY/pylib/gguf" "$CARRY/pylib/yaml"
  # pure-Python sources only (gguf imports yaml; PyYAML falls back to Python without _yaml)
  (cd "$SP" && find gguf yaml -name '*.py' -not -path '*/scripts/*' -not -path '*/__pycache__/*' |
     while read -r f; do mkdir -p "$CARRY/pylib/$(dirname "$f")"; cp "$f" "$CARRY/pylib/$f"; done)
  TOKSRC=${TOKSRC:-${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-q4_k_m.gguf}
  [ -f "$TOKSRC" ] || { echo "missing $TOKSRC: run scripts/make_demo_model.sh first" >&2; exit 1; }
  [ -f "$CARRY/tok-gemma3.gguf.gz" ] ||
    "$PY" scripts/make_gguf_synth.py --extract-tokenizer "$TOKSRC" -o "$CARRY/tok-gemma3.gguf.gz"
  GITDIR=$(git rev-parse --git-common-dir)
  grep -qxF '/.gpu-carry/' "$GITDIR/info/exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$GITDIR/info/exclude"
  if [ ! -x "$CARRY/llama-bench" ] && [ ! -f "$CARRY/llama-bench.gz" ]; then
    # no binary yet: carry the source so the GPU machine can build it (see build_llama_bench_cuda.sh)
    echo "note: no $CARRY/llama-bench: packing the llama.cpp source instead" >&2
    bash scripts/build_llama_bench_cuda.sh --pack-source "$ROOT"
  else
    rm -f "$CARRY/llama-src.tar.gz"
  fi
  du -sh "$CARRY"/* .debs 2>/dev/null || true
  # what travels: tracked and untracked-not-ignored files plus the carried folders
  tree=$({ git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 du -cb 2>/dev/null |
         awk '$2 == "total" {s += $1} END {print s + 0}')
  carry=$(du -sbc "$CARRY" .debs 2>/dev/null | tail -1 | cut -f1 || true)
  total=$(( tree + carry ))
  echo "travels: tree $((tree / 1048576)) MiB + carry $((carry / 1048576)) MiB = $((total / 1048576)) MiB (limit 64 MiB)"
  if [ "$total" -ge $((60 * 1048576)) ] && [ -f "$CARRY/llama-bench" ]; then
    # too big to travel plain: gzip it (the GPU script unpacks llama-bench.gz)
    gzip -9 -f "$CARRY/llama-bench"
    carry=$(du -sbc "$CARRY" .debs 2>/dev/null | tail -1 | cut -f1 || true)
    total=$(( tree + carry ))
    echo "gzipped llama-bench: now $((total / 1048576)) MiB"
  fi
  [ "$total" -lt $((64 * 1048576)) ] || { echo "error: over 64 MiB" >&2; exit 1; }
  exit 0
fi

# ---- options -------------------------------------------------------------------------------
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET=${BUDGET:-540}
BACKEND=${BACKEND:-cuda}                        # (cpu: a local dry run of the chain)
LLAMA_BENCH=${LLAMA_BENCH:-$CARRY/llama-bench}
LLAMA_EXTRA=${LLAMA_EXTRA:-}                    # e.g. "-t 2" for a local run
SKIP_BUILD=${SKIP_BUILD:-0}                     # 1: use an existing $BUILD/mlxrt
LLAMA_SHARE_PCT=${LLAMA_SHARE_PCT:-40}          # llama-bench's share of the time left when mlxrt runs too
MLXRT_BENCH_EXTRA=${MLXRT_BENCH_EXTRA:-}        # e.g. "--warmup-depth 0": one fill at a deep depth
WORK=${WORK:-/tmp/mlxrt-bench-work}             # per-step logs before they are gathered
ONLY=llama,nvfp4,affine4
DEPTHS=0,4096,32768
REPS=3; NP=512; NG=128; LAYERS=; LIKE=gemma4-31b
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) LAYERS=${LAYERS:-6}; REPS=1; DEPTHS=0,4096 ;;
    --only) ONLY=$2; shift ;;
    --depths) DEPTHS=$2; shift ;;
    --reps|-r) REPS=$2; shift ;;
    -p) NP=$2; shift ;;
    -n) NG=$2; shift ;;
    --layers) LAYERS=$2; shift ;;
    --like) LIKE=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }
LAYER_ARGS=(); [ -n "$LAYERS" ] && LAYER_ARGS=(--layers "$LAYERS")
read -ra PRESETS <<<"${LIKE//,/ }"
for P in "${PRESETS[@]}"; do
  case $P in
    gemma4-31b|gemma4-26b-a4b|gemma4-e2b|gemma4-e4b|gemma4-12b) ;;
    *) echo "unknown preset $P (--like takes gemma4-31b, gemma4-26b-a4b, gemma4-e2b," \
            "gemma4-e4b, gemma4-12b)" >&2; exit 2 ;;
  esac
done
[ "${#PRESETS[@]}" -gt 0 ] || { echo "--like: no preset" >&2; exit 2; }

# $OUT gets at most 6 files (a device call returns 8), whatever the number of presets:
# BENCHMARKS.md, status.txt (environment and each step's outcome), llama-q4_0.jsonl,
# mlxrt-nvfp4.jsonl, mlxrt-affine4.jsonl (result lines tagged with their preset), logs.txt.
mkdir -p "$OUT"
rm -rf "$WORK"; mkdir -p "$WORK"
exec 3>&1  # progress lines go here even while a step's stdout is redirected
T0=$(date +%s)
STATUS=$OUT/status.txt
LOGS=$OUT/logs.txt
: >"$STATUS"; : >"$LOGS"
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(date +%s) + T0 )); }
PEND=$(( T0 + BUDGET ))                  # end of the current preset's share of the budget
pleft() { echo $(( PEND - $(date +%s) )); }
say() { echo "[$(elapsed) s] $*" >&3; }
note() { echo "[$(elapsed) s] $*" >>"$STATUS"; say "$*"; }
gather() { { echo "==== $1"; cat "$2"; echo; } >>"$LOGS" 2>/dev/null; }  # gather TITLE FILE

if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2{print $4}')" -gt $((40 * 1048576)) ]; then
  MODELS=${MODELS:-/dev/shm/mlxrt-bench}
else
  MODELS=${MODELS:-/tmp/mlxrt-bench}
fi
mkdir -p "$MODELS"
finish() {
  rm -rf "$MODELS"
  python3 "$ROOT/scripts/bench_table.py" --dir "$OUT" -o "$OUT/BENCHMARKS.md" >/dev/null 2>>"$LOGS" &&
    cat "$OUT/BENCHMARKS.md"
  say "done"
}
trap finish EXIT

# step NAME CAP CMD...: runs CMD under timeout min(CAP, time left - 25 s); records the outcome.
LAST_RC=0
step() {
  local name=$1 cap=$2; shift 2
  local t; t=$(( $(left) - 25 )); [ "$t" -lt "$cap" ] || t=$cap
  if [ "$t" -lt 10 ]; then note "$name: skipped (no time left)"; LAST_RC=124; return 124; fi
  local s; s=$(date +%s)
  timeout -k 10 "$t" "$@"; LAST_RC=$?
  local d=$(( $(date +%s) - s ))
  case $LAST_RC in
    0) note "$name: ok (${d} s)" ;;
    124|137) note "$name: TIMEOUT after ${d} s (limit ${t} s)" ;;
    *) note "$name: FAILED rc=$LAST_RC (${d} s)" ;;
  esac
  return $LAST_RC
}
# the JSON objects of an `mlxrt bench -o json` list, one per line
json_lines() { grep -E '^ *\{.*\},?$' "$1" | sed -E 's/^ *//; s/,$//'; }
# tag PRESET: adds "preset": PRESET to each JSON line (bench_table.py's model column)
tag() { sed -E "s/^\{/{\"preset\": \"$1\", /"; }
show() { sed -E 's/.*"n_prompt": ([0-9]+), "n_gen": ([0-9]+), "n_depth": ([0-9]+).*"avg_ts": ([0-9.]+).*/  pp\1 tg\2 d\3: \4 t\/s/' >&3; }

# ---- environment ---------------------------------------------------------------------------
{
  echo "== $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
  nvcc --version 2>/dev/null | tail -1
  # the device copy's git metadata can lag the files it carries: say how many differ from HEAD
  echo "mlxrt commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "($(git status --porcelain --untracked-files=no 2>/dev/null | wc -l) tracked files differ from it in this copy)"
  # what the copy holds, whatever its metadata says: compare with `bash scripts/source_hash.sh`
  # run on a checkout of the commit meant
  echo "mlxrt source hash $(bash scripts/source_hash.sh)"
  [ -x "$LLAMA_BENCH" ] && echo "llama.cpp: llama-cpp-python 0.3.36 sdist, $("$LLAMA_BENCH" --version 2>&1 | head -1)"
  echo "$(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GB RAM, models in $MODELS"
  echo "params: --like $LIKE -p $NP -n $NG -d $DEPTHS -r $REPS${LAYERS:+ --layers $LAYERS}, budget $BUDGET s"
  echo "== steps"
} >>"$STATUS" 2>&1
cat "$STATUS"
nvidia-smi >"$WORK/nvidia-smi.txt" 2>&1; gather nvidia-smi "$WORK/nvidia-smi.txt"

# libcjson-dev may be missing on the GPU image: scripts/gpu_cjson.sh unpacks the carried .debs
source scripts/gpu_cjson.sh
CMAKE_EXTRA=("${CJSON_CMAKE[@]}")
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# shared objects llama-bench needs that the image may lack (see build_llama_bench_cuda.sh)
[ -d "$CARRY/lib" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$CARRY/lib"

# TAG names the preset in status lines when several are run
TAG=; [ "${#PRESETS[@]}" -gt 1 ] && TAG=" [${PRESETS[0]}]"
# start_gguf PRESET: writes $MODELS/PRESET-q4_0.gguf in the background (GGUF, GGUF_PID).
# The first preset's is written (I/O bound, one Python thread) while llama-bench / mlxrt build.
GGUF=; GGUF_PID=
start_gguf() {
  GGUF=$MODELS/$1-q4_0.gguf; GGUF_PID=
  want llama || return 0
  if [ -f "$CARRY/tok-gemma3.gguf.gz" ] && [ -d "$CARRY/pylib/gguf" ]; then
    say "writing the $1 GGUF in the background"
    ( s=$(date +%s)
      timeout -k 5 300 env PYTHONPATH="$CARRY/pylib${PYTHONPATH:+:$PYTHONPATH}" python3 \
        scripts/make_gguf_synth.py --like "$1" --tokenizer "$CARRY/tok-gemma3.gguf.gz" -o "$GGUF" \
        "${LAYER_ARGS[@]}" >"$WORK/gguf.log" 2>&1
      rc=$?
      echo "[$(elapsed) s] gguf$TAG: $([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc") ($(( $(date +%s) - s )) s)" >>"$STATUS" ) &
    GGUF_PID=$!
  else
    note "llama: skipped (.gpu-carry/tok-gemma3.gguf.gz or pylib missing: run --prepare)"
  fi
}
start_gguf "${PRESETS[0]}"

# llama-bench: the carried binary, or gzip-compressed (the carried tree is limited to 64 MiB),
# or built here from the carried source (build dirs persist while the machine stays warm, so a
# build cut by its timeout resumes in the next call).
if want llama && [ -n "$GGUF_PID" ] && [ ! -x "$LLAMA_BENCH" ]; then
  if [ -f "$CARRY/llama-bench.gz" ]; then
    gzip -dc "$CARRY/llama-bench.gz" >"$WORK/llama-bench" && chmod +x "$WORK/llama-bench" &&
      LLAMA_BENCH=$WORK/llama-bench
  elif [ -f "$CARRY/llama-src.tar.gz" ]; then
    LSRC=$ROOT/build-llama-src LBUILD=$ROOT/build-llama-cuda
    [ -d "$LSRC/llama.cpp" ] || { mkdir -p "$LSRC" && tar xzf "$CARRY/llama-src.tar.gz" -C "$LSRC"; }
    say "building llama-bench from the carried source (-j$(nproc))"
    step "build llama-bench" 480 env LLAMA_SRC="$LSRC/llama.cpp" LLAMA_BUILD="$LBUILD" JOBS="$(nproc)" \
      NO_CARRY=1 bash scripts/build_llama_bench_cuda.sh >"$WORK/llama-build.log" 2>&1
    gather "build llama-bench" "$WORK/llama-build.log"
    [ "$LAST_RC" = 0 ] || tail -20 "$WORK/llama-build.log" >&3
    [ -x "$LBUILD/bin/llama-bench" ] && LLAMA_BENCH=$LBUILD/bin/llama-bench
  fi
  [ -x "$LLAMA_BENCH" ] && note "llama-bench: $LLAMA_BENCH, $("$LLAMA_BENCH" --version 2>&1 | head -1)"
fi

# cuBLAS/cudart 13 for llama-bench: the toolkit's, else the ones python3's nvidia-* wheels hold
if [ -x "$LLAMA_BENCH" ] && ldd "$LLAMA_BENCH" 2>/dev/null | grep -q "not found"; then
  for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for l in $(find "$d/nvidia" -maxdepth 3 -name 'lib*.so.1[0-9]*' -printf '%h\n' 2>/dev/null | sort -u); do
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$l"
    done
  done
fi
if want llama; then
  ldd "$LLAMA_BENCH" >"$WORK/ldd.txt" 2>&1; gather "ldd llama-bench" "$WORK/ldd.txt"
  grep "not found" "$WORK/ldd.txt" >&3 && note "llama-bench: missing shared libraries (see logs.txt)"
fi

MLXRT=$BUILD/mlxrt
BUILD_OK=1
if [ "$SKIP_BUILD" = 1 ] && [ -x "$MLXRT" ]; then
  BUILD_OK=0
elif want nvfp4 || want affine4; then
  say "build mlxrt (CUDA, -j$(nproc))"
  if step configure 120 cmake -S . -B "$BUILD" -DMLXRT_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
       "${CMAKE_EXTRA[@]}" >"$WORK/build.log" 2>&1 &&
     step build 300 cmake --build "$BUILD" -j"$(nproc)" --target mlxrt mlxrt_cuda >>"$WORK/build.log" 2>&1; then
    BUILD_OK=0
  else
    tail -30 "$WORK/build.log" >&3
  fi
  gather build "$WORK/build.log"
fi

# ---- llama.cpp -----------------------------------------------------------------------------
LJ=$OUT/llama-q4_0.jsonl
llama_phase() {  # llama_phase PRESET: the GGUF start_gguf writes, then llama-bench on it
  [ -n "$GGUF_PID" ] || return 0
  wait "$GGUF_PID"
  cat "$WORK/gguf.log" >&3; gather "gguf$TAG" "$WORK/gguf.log"
  local lj=$WORK/llama.jsonl; : >"$lj"
  if [ ! -x "$LLAMA_BENCH" ]; then
    note "llama-bench: none (carry .gpu-carry/llama-bench[.gz] or llama-src.tar.gz)"
  elif [ -f "$GGUF" ]; then
    local share fa; share=$(pleft)
    if want nvfp4 || want affine4; then share=$(( share * LLAMA_SHARE_PCT / 100 )); fi
    for fa in on auto; do
      say "llama-bench -fa $fa$TAG (limit ${share} s)"
      # shellcheck disable=SC2086
      step "llama-bench -fa $fa$TAG" "$share" "$LLAMA_BENCH" -m "$GGUF" -p "$NP" -n "$NG" -d "$DEPTHS" \
        -r "$REPS" -ngl 99 -fa $fa $LLAMA_EXTRA -o jsonl >"$lj" 2>"$WORK/llama-bench.log"
      tag "$1" <"$lj" >>"$LJ"
      gather "llama-bench -fa $fa$TAG" "$WORK/llama-bench.log"
      grep avg_ts "$lj" | show
      [ "$LAST_RC" = 0 ] && break
      tail -15 "$WORK/llama-bench.log" >&3
      # again with flash attention on auto only after a failure before any result (no timeout)
      { [ "$LAST_RC" = 124 ] || [ "$LAST_RC" = 137 ] || grep -q avg_ts "$lj"; } && break
    done
  fi
  rm -f "$GGUF"
}

# ---- mlxrt -----------------------------------------------------------------------------------
mlxrt_phase() {  # mlxrt_phase PRESET MODE BUDGET
  local like=$1 mode=$2 budget=$3 dir=$MODELS/$1-$2 mj=$OUT/mlxrt-$2.jsonl
  local end=$(( $(date +%s) + budget ))
  say "mlxrt $mode$TAG (limit ${budget} s)"
  if [ "$budget" -lt 30 ]; then note "mlxrt $mode$TAG: skipped (${budget} s left for it)"; return; fi
  step "synth $mode$TAG" 240 "$MLXRT" synth --like "$like" --mode "$mode" -o "$dir" --no-sync \
    "${LAYER_ARGS[@]}" >"$WORK/synth.log" 2>&1
  gather "synth $mode$TAG" "$WORK/synth.log"
  if [ "$LAST_RC" != 0 ]; then tail -5 "$WORK/synth.log" >&3; rm -rf "$dir"; return; fi
  local d
  for d in ${DEPTHS//,/ }; do
    local t=$(( end - $(date +%s) ))
    if [ "$t" -lt 10 ]; then note "mlxrt $mode d$d$TAG: skipped (phase time used up)"; continue; fi
    # one process per depth: a timeout loses only that depth (MLXRT_BENCH_EXTRA split into words)
    # shellcheck disable=SC2086
    step "mlxrt $mode d$d$TAG" "$t" env MLXRT_DECODER=1 "$MLXRT" bench -m "$dir" --backend "$BACKEND" \
      -p "$NP" -n "$NG" -d "$d" -r "$REPS" $MLXRT_BENCH_EXTRA -o json >"$WORK/bench.json" 2>"$WORK/bench.log"
    json_lines "$WORK/bench.json" | tag "$like" >>"$mj"
    json_lines "$WORK/bench.json" | show
    gather "mlxrt $mode d$d$TAG (stdout)" "$WORK/bench.json"
    gather "mlxrt $mode d$d$TAG (stderr)" "$WORK/bench.log"
    if [ "$LAST_RC" != 0 ]; then
      tail -5 "$WORK/bench.log" >&3
      # a deeper cache would take longer still
      if [ "$LAST_RC" = 124 ] || [ "$LAST_RC" = 137 ]; then note "mlxrt $mode$TAG: deeper depths skipped"; break; fi
    fi
  done
  rm -rf "$dir"
}

# ---- the presets, one after the other, each in an equal share of the time left --------------
for ((pi = 0; pi < ${#PRESETS[@]}; pi++)); do
  P=${PRESETS[$pi]}
  PEND=$(( $(date +%s) + $(left) / (${#PRESETS[@]} - pi) ))
  if [ "$pi" -gt 0 ]; then TAG=" [$P]"; say "== $P (until $(( PEND - T0 )) s)"; start_gguf "$P"; fi
  llama_phase "$P"
  if [ "$BUILD_OK" = 0 ]; then
    if want nvfp4; then
      b=$(( $(pleft) - 25 )); want affine4 && b=$(( b / 2 ))
      mlxrt_phase "$P" nvfp4 "$b"
    fi
    if want affine4; then mlxrt_phase "$P" affine4 $(( $(pleft) - 25 )); fi
  fi
done
exit 0
