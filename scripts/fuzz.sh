#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and runs each for N
# executions, seeded from tests/corpus (and config.json files under tests/fixtures; for
# fuzz_cli, the command lines of tests/corpus/cli/command_lines.txt, one per line, words
# split at blanks, and the inputs kept in tests/corpus/cli/). Fails on any crash, leak,
# sanitizer report or timeout.
# Usage: scripts/fuzz.sh [N] [target...]   N defaults to 1000000; targets to all of them.
# Extra libFuzzer flags may be passed in FUZZ_ARGS (e.g. FUZZ_ARGS="-max_len=65536").
set -euo pipefail
cd "$(dirname "$0")/.."

N=${1:-1000000}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_safetensors fuzz_config fuzz_tokenizer fuzz_cli)

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DMLXRT_FUZZ=ON -DMLXRT_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]}"

# Seeds: copies, so libFuzzer never writes into the source tree.
seeds() {
  local t=$1 dir=build-fuzz/seeds/$1 i=0
  rm -rf "$dir" && mkdir -p "$dir"
  case $t in
    fuzz_safetensors) find tests/corpus/safetensors -type f -name '*.safetensors' ;;
    fuzz_config) find tests/corpus tests/fixtures -type f -name '*.json' -size -256k \
                   2>/dev/null || true ;;
    fuzz_tokenizer) find tests/fixtures/tokenizer -type f -name '*.json' ;;
    fuzz_cli) find tests/corpus/cli -type f ! -name '*.txt' ;;
  esac | sort | while read -r f; do
    i=$((i + 1))
    cp "$f" "$dir/seed$i"
  done
  if [ "$t" = fuzz_cli ]; then # one argv per line, NUL-separated as the target splits it
    local k=0
    while read -r line; do
      k=$((k + 1))
      printf '%s' "$line" | tr ' ' '\000' >"$dir/line$k"
    done < <(grep -v '^#' tests/corpus/cli/command_lines.txt)
  fi
  echo "$dir"
}

status=0
for t in "${targets[@]}"; do
  seed_dir=$(seeds "$t")
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  dict=tests/fuzz/${t#fuzz_}.dict
  echo "== $t: $N executions ($(ls "$seed_dir" | wc -l) seeds, $(ls "$work" | wc -l) in work corpus)"
  # shellcheck disable=SC2086
  if ./build-fuzz/tests/fuzz/"$t" -runs="$N" -print_final_stats=1 -dict="$dict" \
       -artifact_prefix=build-fuzz/"$t"- ${FUZZ_ARGS:-} "$work" "$seed_dir" \
       >build-fuzz/"$t".log 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' \
      build-fuzz/"$t".log || true
    echo "== $t: ok"
  else
    tail -n 40 build-fuzz/"$t".log
    echo "== $t: FAILED (log build-fuzz/$t.log, crashing input build-fuzz/$t-*)"
    status=1
  fi
done
exit $status
