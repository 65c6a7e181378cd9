#!/usr/bin/env bash
# Spellings every command accepts, each against the plain spelling's output on a tiny fixture:
#  - "--flag=value" for every long option that takes a value (and a value given to an option
#    that takes none, or to no option, refused in one line);
#  - `-p -` reads the prompt from standard input (run, tokenize), like `-f -`;
#  - MODEL as a Hugging Face repo id (org/name) in the local HF cache in every command that
#    takes a model, resolved to the snapshot that refs/main names (a temporary HF_HOME).
set -u
MLXRT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0

same() { # description, expected-output file, command... (stdin passed through)
  local what=$1 want=$2
  shift 2
  "$@" >"$T/got" 2>"$T/err"
  local rc=$?
  if [ $rc -eq 0 ] && [ -s "$want" ] && cmp -s "$want" "$T/got"; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "FAIL: $what (rc=$rc): $*"
    diff "$want" "$T/got" | head -5
    head -3 "$T/err"
  fi
}
expect_error() { # fragment, command...
  local frag=$1
  shift
  "$@" >/dev/null 2>"$T/err"
  local rc=$? lines
  lines=$(wc -l <"$T/err")
  if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -qF -- "$frag" "$T/err"; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "FAIL: $* (rc=$rc, $lines stderr lines, wanted '$frag'):"
    cat "$T/err"
  fi
}
ref() { "$@" >"$T/want" 2>/dev/null || echo "FAIL: the reference command failed: $*"; }

# A Hugging Face cache holding the fixture: blobs, a snapshot of links to them, refs/main.
FIX=tests/fixtures/models/gemma4-dense-bf16
export HF_HOME=$T/hf
unset HF_HUB_CACHE
R=$HF_HOME/hub/models--fixture-org--tiny-gemma
M=$R/snapshots/0123abcd
mkdir -p "$R/blobs" "$R/refs" "$M" "$R/snapshots/00older"
cp "$FIX/config.json" "$R/blobs/c0" && ln -s ../../blobs/c0 "$M/config.json"
cp "$FIX/model.safetensors" "$R/blobs/w0" && ln -s ../../blobs/w0 "$M/model.safetensors"
cp tests/fixtures/tokenizer/small-a.json "$R/blobs/t0" && ln -s ../../blobs/t0 "$M/tokenizer.json"
printf '0123abcd' >"$R/refs/main"
ID=fixture-org/tiny-gemma
PF=tests/fixtures/tokenizer/small-expected.txt

# --- run: --flag=value, -p -, a repo id
RUN=(run -n 4 --no-chat-template --temp 0 --backend cpu -t 1)
ref "$MLXRT" "${RUN[@]}" -m "$M" -p "hello world"
same "run --flag=value" "$T/want" "$MLXRT" run --max-tokens=4 --no-chat-template --temp=0 --backend=cpu \
  --threads=1 --model="$M" --prompt="hello world"
same "run -p - (standard input)" "$T/want" "$MLXRT" "${RUN[@]}" -m "$M" -p - < <(printf 'hello world')
same "run -m REPO_ID" "$T/want" "$MLXRT" "${RUN[@]}" -m "$ID" -p "hello world"
ref "$MLXRT" run -n 4 --no-chat-template --temp 0.8 --top-k 5 --top-p 0.9 --min-p 0.01 --seed 7 \
  --repeat-penalty 1.1 --repeat-last-n 8 -c 64 --backend cpu --numerics float32 -m "$M" -p "hello"
same "run sampling flags as --flag=value" "$T/want" "$MLXRT" run --n-predict=4 --no-chat-template \
  --temperature=0.8 --top-k=5 --top-p=0.9 --min-p=0.01 --seed=7 --repetition-penalty=1.1 \
  --repeat-last-n=8 --ctx-size=64 --backend=cpu --numerics=float32 --model="$M" --prompt=hello

# --- --kv-k: the CPU keeps bf16 K for auto and bf16 (the same text), refuses a compressed K by
# name when the model loads, and a bad value is refused in one line
same "run --kv-k bf16 on the CPU" "$T/want" "$MLXRT" "${RUN[@]}" -m "$M" -p "hello world" --kv-k bf16
same "run --kv-k=auto on the CPU" "$T/want" "$MLXRT" "${RUN[@]}" -m "$M" -p "hello world" --kv-k=auto
expect_error "kv-k planar3: the cpu backend keeps its K cache in bf16" "$MLXRT" run -m "$M" -p hi --backend cpu --kv-k planar3
expect_error "kv-k planar4: the cpu backend keeps its K cache in bf16" "$MLXRT" bench -m "$M" --backend cpu --kv-k planar4
expect_error "--kv-k must be auto, bf16, planar3 or planar4, not 'q8'" "$MLXRT" bench -m "$M" --kv-k q8
expect_error "--kv-k must be auto, bf16, planar3 or planar4, not 'x'" "$MLXRT" serve -m "$M" --kv-k x

# --- speculative decoding: greedy text as without it, the figures on stderr
ref "$MLXRT" run -n 8 --no-chat-template --temp 0 --backend cpu -t 1 -m "$M" -p "hello world hello world hello"
same "run --spec lookup" "$T/want" "$MLXRT" run -n 8 --no-chat-template --temp 0 --backend cpu -t 1 -m "$M" \
  -p "hello world hello world hello" --spec lookup --draft-max 5 --spec-ngram 2
same "run --draft-model=DIR" "$T/want" "$MLXRT" run -n 8 --no-chat-template --temp 0 --backend cpu -t 1 -m "$M" \
  -p "hello world hello world hello" --draft-model="$M" --draft-max=3
if "$MLXRT" run -n 8 --no-chat-template --temp 0 --backend cpu -t 1 -m "$M" -p "hello world hello world hello" \
  --spec lookup 2>&1 >/dev/null | grep -qE "spec lookup: [0-9]+ passes, [0-9]+ drafted, [0-9]+ accepted \([0-9.]+ %\)"; then
  pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: run --spec lookup prints no figures"; fi

# --- tokenize
ref "$MLXRT" tokenize -m "$M" -p "hi there" --ids
same "tokenize --flag=value" "$T/want" "$MLXRT" tokenize --model="$M" --prompt="hi there" --ids
same "tokenize -p - (standard input)" "$T/want" "$MLXRT" tokenize -m "$M" -p - --ids < <(printf 'hi there')
same "tokenize -m REPO_ID" "$T/want" "$MLXRT" tokenize -m "$ID" -p "hi there" --ids
ref "$MLXRT" tokenize -m "$M" --decode 2,271,272
same "tokenize --decode=IDS" "$T/want" "$MLXRT" tokenize -m "$M" --decode=2,271,272

# --- inspect
ref "$MLXRT" inspect "$M" --json
same "inspect REPO_ID" "$T/want" "$MLXRT" inspect "$ID" --json
same "inspect --model=REPO_ID" "$T/want" "$MLXRT" inspect --model="$ID" --json

# --- logits
ref "$MLXRT" logits -m "$M" --tokens 1,2,3 --backend cpu -n 2 -t 1
same "logits --flag=value" "$T/want" "$MLXRT" logits --model="$M" --tokens=1,2,3 --backend=cpu --decode=2 --threads=1
same "logits -m REPO_ID" "$T/want" "$MLXRT" logits -m "$ID" --tokens 1,2,3 --backend cpu -n 2 -t 1

# --- perplexity (its own -c/--chunks and the shared flags)
ref "$MLXRT" perplexity -m "$M" -f "$PF" -c 16 --chunks 2 --backend cpu -t 1
same "perplexity --flag=value" "$T/want" "$MLXRT" perplexity --model="$M" --file="$PF" --ctx-size=16 --chunks=2 \
  --backend=cpu --threads=1
same "perplexity -m REPO_ID" "$T/want" "$MLXRT" perplexity -m "$ID" -f "$PF" -c 16 --chunks 2 --backend cpu -t 1

# --- bench: every line but the timings' ("| test | t/s | ..." columns vary run to run)
bench_rows() { "$@" | sed -n 's/^| \([^|]*\) |.*| \([^|]*\) |$/\1 \2/p'; }
bench_rows "$MLXRT" bench -m "$M" -p 4 -n 2 -r 1 -t 1 --backend cpu >"$T/want" 2>/dev/null
same "bench --flag=value" "$T/want" bench_rows "$MLXRT" bench --model="$M" --n-prompt=4 --n-gen=2 --repetitions=1 \
  --threads=1 --backend=cpu --output=md
same "bench -m REPO_ID" "$T/want" bench_rows "$MLXRT" bench -m "$ID" -p 4 -n 2 -r 1 -t 1 --backend cpu

# --- synth and bench-kernels
ref "$MLXRT" synth --like gemma3-270m --mode bf16 --layers 2 --dry-run
same "synth --flag=value" "$T/want" "$MLXRT" synth --like=gemma3-270m --mode=bf16 --layers=2 --dry-run
expect_error "--rows expects an integer in 1..16777216, got '0'" "$MLXRT" bench-kernels --rows=0
expect_error "--cols expects a multiple of 128" "$MLXRT" bench-kernels --cols=200

# --- refusals, one line each
expect_error "'--think=1': --think is not an option that takes a value" "$MLXRT" run -m "$M" -p hi --think=1
expect_error "'--bogus=2': --bogus is not an option that takes a value" "$MLXRT" run -m "$M" -p hi --bogus=2
expect_error "--temp expects a number in 0..100, got ''" "$MLXRT" run -m "$M" -p hi --temp=
expect_error "--ids is not an option that takes a value" "$MLXRT" tokenize -m "$M" -p hi --ids=1
expect_error "--json is not an option that takes a value" "$MLXRT" inspect "$M" --json=yes
expect_error "--chunks expects an integer" "$MLXRT" perplexity -m "$M" -f "$PF" --chunks=x
expect_error "--hot is not an option that takes a value" "$MLXRT" bench-kernels --hot=1
expect_error "not in the Hugging Face cache" "$MLXRT" inspect fixture-org/missing
expect_error "not in the Hugging Face cache" "$MLXRT" bench -m fixture-org/missing
expect_error "not in the Hugging Face cache" "$MLXRT" tokenize -m fixture-org/missing -p hi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
