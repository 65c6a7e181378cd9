#!/usr/bin/env bash
# mlxrt synth from the command line: a small synthetic checkpoint that `mlxrt inspect` and
# `mlxrt logits` accept; bad arguments exit non-zero with one line naming the problem; a failed
# or interrupted run leaves neither the directory nor its temporary behind.
set -u
MLXRT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

expect_error() { # fragment, command...
  local frag=$1
  shift
  "$@" >"$T/out" 2>"$T/err"
  local rc=$? lines
  lines=$(wc -l <"$T/err")
  if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -qF -- "$frag" "$T/err"; then ok
  else
    bad "$* (rc=$rc, $lines stderr lines, wanted '$frag'):"
    cat "$T/err"
  fi
}

S="$MLXRT synth"
expect_error "--like, --mode and -o are required" $S --mode nvfp4 -o "$T/x"
expect_error "unknown model 'gemma9'" $S --like gemma9 --mode nvfp4 -o "$T/x"
expect_error "unknown mode 'fp3'" $S --like gemma4-31b --mode fp3 -o "$T/x"
expect_error "--layers expects an integer in 1..256, got '0'" $S --like gemma4-31b --mode nvfp4 -o "$T/x" --layers 0
expect_error "--layers expects an integer in 1..256, got '2x'" $S --like gemma4-31b --mode nvfp4 -o "$T/x" --layers 2x
expect_error "--seed expects an integer in 0..9223372036854775807, got '-4'" $S --like gemma4-31b --mode nvfp4 -o "$T/x" --seed -4
expect_error "unknown option '--vocab'" $S --like gemma4-31b --mode nvfp4 -o "$T/x" --vocab 10
expect_error "option '--like' needs a value" $S --mode nvfp4 -o "$T/x" --like
mkdir -p "$T/full" && touch "$T/full/keep"
expect_error "already exists and is not empty" $S --like gemma3-270m --mode nvfp4 -o "$T/full" --layers 1
expect_error "exists and is not a directory" $S --like gemma3-270m --mode nvfp4 -o "$T/full/keep" --layers 1
[ "$(ls "$T/full")" = "keep" ] && ok || bad "the non-empty directory was touched"
[ ! -e "$T/x" ] && ok || bad "a failed run created the output directory"

# the plan alone
$S --like gemma4-31b --mode nvfp4 --dry-run >"$T/out" 2>"$T/err" && grep -q "30.697 B parameters, 17.27 GB in 4 files" "$T/out" \
  && ok || { bad "dry run of gemma4-31b nvfp4"; cat "$T/out" "$T/err"; }

# a small checkpoint end to end
if $S --like gemma3-270m --mode nvfp4 --layers 2 --seed 5 -o "$T/m" >"$T/out" 2>"$T/err"; then
  ok
  grep -q "^wrote $T/m: gemma3-270m nvfp4, 2 layers" "$T/out" && ok || { bad "summary line"; cat "$T/out"; }
  [ ! -s "$T/err" ] && ok || { bad "stderr not empty off a terminal"; cat "$T/err"; }
  ls "$T/m" | tr '\n' ' ' >"$T/ls"
  grep -qx "config.json generation_config.json model.safetensors model.safetensors.index.json " "$T/ls" \
    && ok || { bad "unexpected files: $(cat "$T/ls")"; }
  "$MLXRT" inspect --json "$T/m" >"$T/inspect.json" 2>"$T/err" && grep -q '"model_type":[[:space:]]*"gemma3_text"' "$T/inspect.json" \
    && grep -q '"format":[[:space:]]*"nvfp4"' "$T/inspect.json" && ok || { bad "inspect --json"; cat "$T/err"; }
  "$MLXRT" logits -m "$T/m" --tokens 2,818,5279 --backend cpu -t 2 >"$T/out" 2>"$T/err" && grep -q "^argmax: [0-9]* [0-9]* [0-9]*$" "$T/out" \
    && ok || { bad "logits"; cat "$T/out" "$T/err"; }
else
  bad "synth gemma3-270m"; cat "$T/err"
fi
ls -d "$T"/*.tmp-synth-* >/dev/null 2>&1 && bad "temporary directory left behind" || ok

# Ctrl-C: the run stops, cleans up and says so in one line (skipped if it finished first)
$S --like gemma4-31b --mode bf16 --layers 6 --threads 1 --no-sync -o "$T/big" >"$T/out" 2>"$T/err" &
pid=$!
sleep 0.5
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -ne 0 ]; then
  [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "cancelled" "$T/err" && ok || { bad "interrupt message"; cat "$T/err"; }
  [ ! -e "$T/big" ] && ! ls -d "$T"/big.tmp-synth-* >/dev/null 2>&1 && ok || bad "an interrupted run left files"
else
  echo "note: the interrupted run finished first; cancellation not checked"
  rm -rf "$T/big"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
