#!/usr/bin/env bash
# mlxrt chat on CUDA past 8 K tokens in one session, on a GPU machine:
#   bash tests/gpu/chat_long.sh MLXRT MODEL_DIR
# MODEL_DIR: a Gemma 3 270M-shaped checkpoint (a 32 K context) with its tokenizer and chat
# template. Twelve messages of ~900 tokens each (this repository's docs, cut in pieces, one line
# each) are answered with -n 16 at the model's default context. Checks: the conversation passes
# 8192 tokens; every turn after the first processes only its own new tokens (the session is kept,
# never refed); the device decoder is made once; its KV cache grows by pages past 8192
# positions. Exit status 0 when all hold.
set -uo pipefail
MLXRT=$1
MODEL=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat "$ROOT"/docs/*.md | tr '\n\t' '  ' | tr -s ' ' | fold -w 3600 | head -12 >"$W/messages"
echo /exit >>"$W/messages"
BACKEND=${BACKEND:-cuda} # cpu: the turn checks only (a check of this script without a GPU)
timeout 600 "$MLXRT" chat -m "$MODEL" --backend "$BACKEND" -n 16 --temp 0 -v <"$W/messages" >"$W/out" 2>"$W/err"
rc=$?
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ $rc -eq 0 ] || fail "chat exited with $rc: $(tail -3 "$W/err")"
grep -o '\[prompt: [0-9]* new of [0-9]* tokens' "$W/err" | awk '{print $2, $5}' >"$W/turns"
turns=$(wc -l <"$W/turns")
[ "$turns" -eq 12 ] || fail "$turns turns answered, 12 expected"
last=0
i=0
while read -r new total; do
  i=$((i + 1))
  # a kept session processes the turn's growth of the conversation (+ the last answer token,
  # which the session does not hold yet); a refed one would process all of it
  [ "$i" -eq 1 ] || [ "$new" -le $((total - last + 2)) ] ||
    fail "turn $i processed $new of $total tokens, the conversation grew by $((total - last)): the session was refed"
  [ "$total" -gt "$last" ] || fail "turn $i: the conversation shrank to $total tokens"
  last=$total
done <"$W/turns"
[ "$last" -gt 8192 ] || fail "the conversation reached only $last tokens"
if [ "$BACKEND" = cuda ]; then
made=$(grep -c 'whole-step decoder on the cuda backend' "$W/err")
[ "$made" -eq 1 ] || fail "the device decoder was made $made times"
backed=$(grep -o 'KV cache backs [0-9]*' "$W/err" | awk '{print $4}' | sort -n | tail -1)
[ -n "$backed" ] && [ "$backed" -gt 8192 ] || fail "the KV cache backs ${backed:-no} positions"
fi
echo "turns (new of total tokens): $(tr '\n' ';' <"$W/turns")"
grep 'KV cache backs' "$W/err" | tail -3
[ $fails -eq 0 ] && echo "chat_long: passed" || echo "chat_long: FAIL"
[ $fails -eq 0 ]
