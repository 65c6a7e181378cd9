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
expect_error "cannot read '$T/nofile.txt'" "$MLXRT" run -m "$T/model" -f "$T/nofile.txt"
expect_error "unknown command" "$MLXRT" frobnicate
expect_error "model.safetensors" "$MLXRT" inspect "$T/broken"
expect_error "comma-separated" "$MLXRT" logits -m "$T/model" --tokens 1,x,3
expect_error "outside the vocabulary" "$MLXRT" logits -m "$T/model" --tokens 1,999999
expect_error "unknown backend" "$MLXRT" logits -m "$T/model" --tokens 1,2 --backend tpu
expect_error "--numerics must be float32 or mlx-cpu" "$MLXRT" run -m "$T/model" -p hi --numerics fast
expect_error "--numerics mlx-cpu runs on the CPU backend" "$MLXRT" logits -m "$T/model" --tokens 1,2 --numerics mlx-cpu --backend cuda
expect_error "fewer than one chunk" "$MLXRT" perplexity -m "$T/model" -f tests/fixtures/tokenizer/small-expected.txt -c 100000
# numbers: one strict parser for every flag (empty, junk, trailing junk, overflow, out of range,
# NaN/inf, hex), one line naming the flag, the range and the value
expect_error "-n expects an integer in -1..1073741824, got '-2'" "$MLXRT" run -m "$T/model" -p hi -n -2
expect_error "-n expects an integer in -1..1073741824, got 'abc'" "$MLXRT" run -m "$T/model" -p hi -n abc
expect_error "--max-tokens expects an integer in -1..1073741824, got '12x'" "$MLXRT" run -m "$T/model" -p hi --max-tokens 12x
expect_error "-n expects an integer in -1..1073741824, got ''" "$MLXRT" run -m "$T/model" -p hi -n ""
expect_error "got '99999999999999999999'" "$MLXRT" run -m "$T/model" -p hi -n 99999999999999999999
expect_error "-n expects an integer in -1..1073741824, got ' 5'" "$MLXRT" chat -m "$T/model" -n " 5"
expect_error "-c expects an integer in 0..1073741824, got '-5'" "$MLXRT" run -m "$T/model" -p hi -c -5
expect_error "--temp expects a number in 0..100, got 'nan'" "$MLXRT" run -m "$T/model" -p hi --temp nan
expect_error "--temp expects a number in 0..100, got 'inf'" "$MLXRT" run -m "$T/model" -p hi --temp inf
expect_error "--top-p expects a number in 0..1, got '1e999'" "$MLXRT" run -m "$T/model" -p hi --top-p 1e999
expect_error "--top-p expects a number in 0..1, got '0x1p-2'" "$MLXRT" run -m "$T/model" -p hi --top-p 0x1p-2
expect_error "-t expects an integer in 0..1024, got '2000'" "$MLXRT" run -m "$T/model" -p hi -t 2000
expect_error "--seed expects an integer in 0..2147483647, got '-1'" "$MLXRT" run -m "$T/model" -p hi --seed -1
expect_error "-r expects an integer in 1..1000, got '0'" "$MLXRT" bench -m "$T/model" -r 0
expect_error "-t expects an integer in 0..1024, got 'abc'" "$MLXRT" bench -m "$T/model" -t abc
expect_error "-p expects comma-separated integers in 0..16777216, got '1,,2'" "$MLXRT" bench -m "$T/model" -p 1,,2
expect_error "-d takes at most 16 values" "$MLXRT" bench -m "$T/model" -d 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
expect_error "--sampler top_k expects an integer in 0..1073741824, got '1.5'" "$MLXRT" bench -m "$T/model" --sampler top_k=1.5
expect_error "-t expects an integer in 0..1024, got '1.5'" "$MLXRT" logits -m "$T/model" --tokens 1,2 -t 1.5
expect_error "-c expects an integer in 8..16777216, got '4'" "$MLXRT" perplexity -m "$T/model" -f "$T/nofile.txt" -c 4
expect_error "--chunks expects an integer in 0..1073741824, got 'x'" "$MLXRT" perplexity -m "$T/model" -f "$T/nofile.txt" --chunks x
expect_error "--decode expects comma-separated integers in 0..2147483647, got '1,-3'" "$MLXRT" tokenize -m "$T/model" --decode 1,-3
expect_error "--layers expects an integer in 1..256, got '1e3'" "$MLXRT" synth --like gemma3-270m --mode bf16 --dry-run --layers 1e3
expect_error "--cols expects a multiple of 128, got 200" "$MLXRT" bench-kernels --cols 200
expect_error "one model at a time" "$MLXRT" inspect "$T/model" "$T/broken"
# speculative decoding's options
expect_error "--spec must be lookup or draft, not 'ngram'" "$MLXRT" run -m "$T/model" -p hi --spec ngram
expect_error "--draft-max expects an integer in 1..32, got '33'" "$MLXRT" run -m "$T/model" -p hi --spec lookup --draft-max 33
expect_error "--spec-ngram expects an integer in 1..8, got '0'" "$MLXRT" chat -m "$T/model" --spec lookup --spec-ngram 0
expect_error "--draft-max needs speculative decoding" "$MLXRT" run -m "$T/model" -p hi --draft-max 4
expect_error "--spec draft needs --draft-model DIR" "$MLXRT" run -m "$T/model" -p hi --spec draft
expect_error "--draft-model is for --spec draft" "$MLXRT" run -m "$T/model" -p hi --spec lookup --draft-model "$T/model"
expect_error "--spec-ngram is for --spec lookup" "$MLXRT" run -m "$T/model" -p hi --draft-model "$T/model" --spec-ngram 2
expect_error "--spec has no meaning in perplexity" "$MLXRT" perplexity -m "$T/model" -f "$T/nofile.txt" --spec lookup
expect_error "--draft-model: " "$MLXRT" run -m "$T/model" -p hi --draft-model "$T/broken"
expect_error "--spec must be lookup or draft" "$MLXRT" serve -m "$T/model" --spec x
expect_error "--cont-batching maybe: expected auto, on or off" "$MLXRT" serve -m "$T/model" --cont-batching maybe
expect_error "speculative decoding (--spec) cannot run there" "$MLXRT" serve -m "$T/model" --backend cpu --port 0 \
  --cont-batching on --spec lookup
mkdir -p "$T/othertok"
cp "$FIX/config.json" "$FIX/model.safetensors" "$T/othertok/"
cp tests/fixtures/tokenizer/small-b.json "$T/othertok/tokenizer.json"
expect_error "has another tokenizer than the model" "$MLXRT" run -m "$T/model" -p hi --draft-model "$T/othertok" --backend cpu

# -n: tokens to generate everywhere; -1 (until a stop token) only where there is a stop token
expect_error "-n -1 (until a stop token) has no meaning in bench" "$MLXRT" bench -m "$T/model" -n 8,-1
expect_error "--decode -1 (until a stop token) has no meaning in logits" "$MLXRT" logits -m "$T/model" --tokens 1 --decode -1
expect_error "-n expects an integer in 0..1073741824, got '-2'" "$MLXRT" logits -m "$T/model" --tokens 1 -n -2
expect_error "nothing to measure: -p 0 and -n 0 skip every test" "$MLXRT" bench -m "$T/model" -p 0 -n 0
expect_error "--batch takes sequence counts from 1 to 256, got 0" "$MLXRT" bench -m "$T/model" --batch 0
expect_error "--batch measures greedy decode from fresh prompts" "$MLXRT" bench -m "$T/model" --batch 4 -d 16
expect_error "-n has no meaning in perplexity" "$MLXRT" perplexity -m "$T/model" -f "$T/nofile.txt" -n 5
# --batch on the CPU backend (its batched decode steps the rows one after another): a row per size
timeout 120 "$MLXRT" bench -m "$T/model" --backend cpu -npl 1,2 -p 8 -n 4 -r 1 >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "| cpu | 8 | 4 | 1 |" "$T/out" && grep -q "| cpu | 8 | 4 | 2 |" "$T/out"; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: bench --batch on the CPU: rc=$rc, stdout: $(cat "$T/out"), stderr: $(cat "$T/err")"; fi
# run -n 0 generates nothing: it ends at once, exit 0, nothing on stdout or stderr
timeout 20 "$MLXRT" run -m "$T/model" -p "hello world" -n 0 --no-chat-template >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$T/out" ] && [ ! -s "$T/err" ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: run -n 0: rc=$rc, stdout $(wc -c <"$T/out") bytes, stderr: $(cat "$T/err")"; fi

# a full context: the answer so far, one notice naming the size and -c, exit status 3
timeout 60 "$MLXRT" run -m "$T/model" -p "hello world" -c 12 --temp 0 --no-chat-template >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 3 ] && [ -s "$T/out" ] && [ "$(grep -c . "$T/err")" -eq 2 ] &&
   grep -qF "mlxrt run: the answer stopped: the context of 12 tokens (-c 12) is full; raise it with -c N" "$T/err"; then
  pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: run with a full context: rc=$rc, stderr: $(cat "$T/err")"; fi

# chat prints the same notice after an answer that filled the context
printf 'hello world\n' | timeout 60 "$MLXRT" chat -m "$T/model" -c 66 --temp 0 >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && grep -qF "mlxrt chat: the answer stopped: the context of 66 tokens (-c 66) is full" "$T/err"; then
  pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: chat with a full context: rc=$rc, stderr: $(cat "$T/err")"; fi

# prompt files: read whole by one reader; never block; no NUL byte; a size limit
mkfifo "$T/fifo"
printf 'hello\0world' >"$T/nul.txt"
truncate -s 300M "$T/big.txt"
printf 'hello world' >"$T/ok.txt"
expect_error "'$T' is a directory" "$MLXRT" run -m "$T/model" -f "$T"
expect_error "'$T/fifo' is not a regular file (it is a FIFO)" timeout 10 "$MLXRT" run -m "$T/model" -f "$T/fifo"
expect_error "'$T/fifo' is not a regular file (it is a FIFO)" timeout 10 "$MLXRT" tokenize -m "$T/model" -f "$T/fifo"
expect_error "'/dev/null' is not a regular file (it is a character device)" "$MLXRT" perplexity -m "$T/model" -f /dev/null
expect_error "'$T/nul.txt' has a NUL byte at offset 5" "$MLXRT" run -m "$T/model" -f "$T/nul.txt"
expect_error "'$T/nul.txt' has a NUL byte at offset 5" "$MLXRT" tokenize -m "$T/model" -f "$T/nul.txt"
expect_error "'$T/nul.txt' has a NUL byte at offset 5" "$MLXRT" perplexity -m "$T/model" -f "$T/nul.txt"
expect_error "'standard input' has a NUL byte at offset 5" "$MLXRT" tokenize -m "$T/model" <"$T/nul.txt"
expect_error "'standard input' has a NUL byte at offset 5" "$MLXRT" run -m "$T/model" -f - <"$T/nul.txt"
expect_error "more than the 256 MiB a text file may have" "$MLXRT" run -m "$T/model" -f "$T/big.txt"
expect_error "the message has a NUL byte at offset 5" "$MLXRT" chat -m "$T/model" <"$T/nul.txt"
expect_error "give the prompt with -p or -f, not both" "$MLXRT" run -m "$T/model" -p hi -f "$T/ok.txt"
expect_error "-p and -f are run's" "$MLXRT" chat -m "$T/model" -p hi
# -f - (standard input) still reads the prompt
if timeout 20 "$MLXRT" run -m "$T/model" -f - -n 2 --no-chat-template <"$T/ok.txt" >"$T/out" 2>"$T/err" &&
   [ -s "$T/out" ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: run -f - : $(cat "$T/err")"; fi

# memory requests beyond the machine are refused before allocating, with the size asked for
expect_error "--decode 1000000000 needs 1536.0 GB for the logits (this machine has" "$MLXRT" logits -m "$T/model" --tokens 1,2 --decode 1000000000
expect_error "--rows 16777216 --cols 16777216 --n 1 needs" "$MLXRT" bench-kernels --rows 16777216 --cols 16777216
# control characters in an argument cannot break the one-line error
expect_error "unknown option '--x\\x0ay'" "$MLXRT" run -m "$T/model" -p hi "--x
y"
# nothing half-written: a failing logits run leaves no output file behind
"$MLXRT" logits -m "$T/model" --tokens 1,999999 -o "$T/out.safetensors" 2>/dev/null
if [ -e "$T/out.safetensors" ] || [ -e "$T/out.safetensors.tmp" ]; then
  fail=$((fail + 1)); echo "FAIL: a failed logits run left a file behind"
else pass=$((pass + 1)); fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
