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
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_safetensors fuzz_config fuzz_tokenizer fuzz_gen_config
                                     fuzz_shard_index fuzz_model_folder fuzz_chat_template fuzz_jinja
                                     fuzz_chat_render fuzz_cli fuzz_serve_request)
MARK=$'\n@@FILE@@\n'  # part separator of the folder targets (tests/fuzz/fuzz_folder.h)

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DMLXRT_FUZZ=ON -DMLXRT_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]}"

# Files joined with $MARK: one input of a folder target.
join_parts() {
  local first=1 f
  for f in "$@"; do
    [ $first -eq 1 ] || printf '%s' "$MARK"
    first=0
    [ -f "$f" ] && cat "$f"
  done
}

# Seeds for the folder targets, built from the fixtures (written to stdout as file names).
composed_seeds() {
  local t=$1 dir=$2 i=0 m
  case $t in
    fuzz_gen_config)
      for c in tests/corpus/config/good/*.json; do
        for g in tests/corpus/gen_config/*.json; do
          i=$((i + 1)); { cat "$c"; printf '\0'; cat "$g"; } >"$dir/composed$i"
        done
      done ;;
    fuzz_shard_index)
      local s=tests/corpus/safetensors
      join_parts $s/good_sharded_index/model.safetensors.index.json \
        $s/good_sharded_index/model-00001-of-00002.safetensors \
        $s/good_sharded_index/model-00002-of-00002.safetensors >"$dir/composed1"
      join_parts /dev/null /dev/null /dev/null $s/good.safetensors >"$dir/composed2" ;;
    fuzz_model_folder)
      for m in gemma3-text-nvfp4 gemma4-dense-mxfp4 gemma4-e2b-mxfp4 gemma3-nested-nvfp4; do
        i=$((i + 1))
        join_parts tests/fixtures/models/$m/config.json tests/fixtures/models/$m/model.safetensors \
          tests/fixtures/tokenizer/small-c.json tests/corpus/gen_config/gemma3.json >"$dir/composed$i"
      done ;;
    fuzz_chat_render) # the template corpus (scripts/jinja_corpus.py), when it has been made
      local corpus=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/jinja_corpus/corpus.json
      [ -f "$corpus" ] && python3 - "$corpus" "$dir" "$MARK" <<'EOF'
import json, sys
doc, out, mark = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
for i, t in enumerate(doc["templates"]):
    c = doc["conversations"][i % len(doc["conversations"])]
    parts = [t["template"], json.dumps({"bos_token": doc["bos_token"], "eos_token": doc["eos_token"]}),
             c["messages_json"], c["tools_json"] or ""]
    open(f"{out}/composed{i}", "w").write(mark.join(parts))
EOF
      ;;
  esac
}

# Seeds: copies, so libFuzzer never writes into the source tree. tests/corpus/<target>/ holds
# each target's regression inputs (crashes found and fixed).
seeds() {
  local t=$1 dir=build-fuzz/seeds/$1 i=0
  rm -rf "$dir" && mkdir -p "$dir"
  composed_seeds "$t" "$dir"
  { case $t in
    fuzz_safetensors) find tests/corpus/safetensors -type f -name '*.safetensors' ;;
    fuzz_config) find tests/corpus tests/fixtures -type f -name '*.json' -size -256k \
                   2>/dev/null || true ;;
    fuzz_tokenizer) find tests/fixtures/tokenizer -type f -name '*.json' ;;
    fuzz_chat_template) find tests/corpus/chat_template -type f 2>/dev/null || true ;;
    fuzz_jinja) find tests/fixtures -type f -name '*.jinja' 2>/dev/null || true ;;
    fuzz_cli) find tests/corpus/cli -type f ! -name '*.txt' ;;
    fuzz_serve_request) find tests/corpus/serve_request -type f ;;
  esac
  [ -d tests/corpus/$t ] && find tests/corpus/$t -type f; } | sort | while read -r f; do
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
total_runs=0
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
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' build-fuzz/"$t".log | tail -n 1)
  total_runs=$((total_runs + ${runs:-0}))
done
echo "== fuzz: ${#targets[@]} targets, $total_runs executions in all, $([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
