#!/usr/bin/env bash
# Bad input to the CLI: each case must exit non-zero with exactly one line on stderr that
# names the problem, and write nothing half-done.
set -u
MLXRT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0

expect_error() { # fragment, command...
  local frag=$1
  shift
  "$@" >"$T/out" 2>"$T/err"
  local rc=$? lines
  lines=$(wc -l <"$T/err")
  if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -qF -- "$frag" "$T/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $* (rc=$rc, $lines stderr lines, wanted '$frag'):"
    cat "$T/err"
  fi
}

FIX=tests/fixtures/models/gemma4-dense-bf16
mkdir -p "$T/model" "$T/badtok" "$T/broken"
cp "$FIX/config.json" "$FIX/model.safetensors" "$T/model/"
cp tests/fixtures/tokenizer/small-a.json "$T/model/tokenizer.json"
cp "$FIX/config.json" "$FIX/model.safetensors" "$T/badtok/"
echo '{"model": {"type": "BPE", "vocab": {' >"$T/badtok/tokenizer.json"
cp "$FIX/config.json" "$T/broken/"
head -c 1000 "$FIX/model.safetensors" >"$T/broken/model.safetensors"

expect_error "no such directory" "$MLXRT" run -m "$T/missing" -p hi
expect_error "tokenizer.json" "$MLXRT" run -m "$T/badtok" -p hi
expect_error "more than the context" "$MLXRT" run -m "$T/model" -p "hello world hello world hello" -c 4 --no-chat-template
expect_error "--temp expects a number" "$MLXRT" run -m "$T/model" -p hi --temp abc
expect_error "unknown option '--bogus'" "$MLXRT" run -m "$T/model" -p hi --bogus
expect_error "needs a value" "$MLXRT" run -m "$T/model" -p
expect_error "-m/--model is required" "$MLXRT" run -p hi
expect_error "give a prompt" "$MLXRT" run -m "$T/model"
expect_error "cannot read prompt file" "$MLXRT" run -m "$T/model" -f "$T/nofile.txt"
expect_error "unknown command" "$MLXRT" frobnicate
expect_error "model.safetensors" "$MLXRT" inspect "$T/broken"
expect_error "comma-separated" "$MLXRT" logits -m "$T/model" --tokens 1,x,3
expect_error "outside the vocabulary" "$MLXRT" logits -m "$T/model" --tokens 1,999999
expect_error "unknown backend" "$MLXRT" logits -m "$T/model" --tokens 1,2 --backend tpu
expect_error "--numerics must be float32 or mlx-cpu" "$MLXRT" run -m "$T/model" -p hi --numerics fast
expect_error "--numerics mlx-cpu runs on the CPU backend" "$MLXRT" logits -m "$T/model" --tokens 1,2 --numerics mlx-cpu --backend cuda
expect_error "fewer than one chunk" "$MLXRT" perplexity -m "$T/model" -f tests/fixtures/tokenizer/small-expected.txt -c 100000
# nothing half-written: a failing logits run leaves no output file behind
"$MLXRT" logits -m "$T/model" --tokens 1,999999 -o "$T/out.safetensors" 2>/dev/null
if [ -e "$T/out.safetensors" ] || [ -e "$T/out.safetensors.tmp" ]; then
  fail=$((fail + 1)); echo "FAIL: a failed logits run left a file behind"
else pass=$((pass + 1)); fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
