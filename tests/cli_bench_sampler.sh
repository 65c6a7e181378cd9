#!/usr/bin/env bash
# mlxrt bench --sampler: each tg gets a second row timed with that sampler (on the decoder with
# MLXRT_DECODER=1, on the host otherwise), in the table and in JSON; a bad spec exits 2 with one
# line naming it. Also -c CTX (the session's capacity) and --warmup-depth.
set -u
MLXRT=$1
SRC=${MLXRT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
M=$SRC/tests/fixtures/models/gemma3-text-bf16
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

for dec in 0 1; do
  if MLXRT_DECODER=$dec $MLXRT bench -m "$M" --backend cpu -t 1 -p 0 -n 8,4 -r 2 \
      --sampler temp=0.8,top_k=20,top_p=0.9,min_p=0.01,seed=3 >"$T/md" 2>"$T/err"; then ok
  else bad "bench --sampler (decoder $dec) failed: $(cat "$T/err")"; fi
  [ "$(grep -c '| tg8 +sampler |' "$T/md")" -eq 1 ] && [ "$(grep -c '| tg4 +sampler |' "$T/md")" -eq 1 ] &&
    [ "$(grep -c '| tg8 |' "$T/md")" -eq 1 ] && ok || { bad "decoder $dec: rows"; cat "$T/md"; }
  grep -q '^+sampler: every tg step drawn with temp=0.8,top_k=20,top_p=0.9,min_p=0.01,seed=3' "$T/md" && ok ||
    bad "decoder $dec: sampler line"
  if MLXRT_DECODER=$dec $MLXRT bench -m "$M" --backend cpu -t 1 -p 0 -n 4 -r 1 -o json --sampler temp=1 >"$T/json" 2>"$T/err"; then ok
  else bad "bench --sampler -o json (decoder $dec) failed: $(cat "$T/err")"; fi
  [ "$(grep -c '"sampler": "temp=1"' "$T/json")" -eq 1 ] && [ "$(grep -c '"sampler": "greedy"' "$T/json")" -eq 1 ] && ok ||
    { bad "decoder $dec: json"; cat "$T/json"; }
done

for spec in temp=abc foo=1 top_k=-1 temp top_p=0.5,; do
  $MLXRT bench -m "$M" --sampler "$spec" >"$T/out" 2>"$T/err"
  rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF "mlxrt bench: --sampler" "$T/err"; then ok
  else bad "--sampler '$spec': rc=$rc $(cat "$T/err")"; fi
done

# -c CTX: the session is made for CTX tokens (the row says so); on the CPU the capacity changes
# no result, so the logits hash equals the one of a session just large enough
hash_of() { awk -F'|' '/\| tg8/ {gsub(/ /, "", $11); print $11}' "$1"; }
for dec in 0 1; do
  MLXRT_DECODER=$dec $MLXRT bench -m "$M" --backend cpu -t 1 -p 0 -n 8 -r 1 >"$T/c0" 2>"$T/err" || bad "bench (decoder $dec)"
  if MLXRT_DECODER=$dec $MLXRT bench -m "$M" --backend cpu -t 1 -p 0 -n 8 -r 1 -c 3000 >"$T/c1" 2>"$T/err"; then ok
  else bad "bench -c 3000 (decoder $dec) failed: $(cat "$T/err")"; fi
  grep -q '| tg8 ctx 3000 |' "$T/c1" && ok || { bad "decoder $dec: -c row"; cat "$T/c1"; }
  [ -n "$(hash_of "$T/c0")" ] && [ "$(hash_of "$T/c0")" = "$(hash_of "$T/c1")" ] && ok ||
    bad "decoder $dec: -c 3000 changed the logits hash ($(hash_of "$T/c0") vs $(hash_of "$T/c1"))"
done
for v in x -5 12k; do
  $MLXRT bench -m "$M" -c "$v" >"$T/out" 2>"$T/err"
  rc=$?
  [ $rc -eq 2 ] && grep -qF -- "-c expects an integer in 0..1073741824, got '$v'" "$T/err" && ok || bad "-c '$v': rc=$rc $(cat "$T/err")"
done

# --warmup-depth N: only the warm-up run's depth changes, so the timed runs' logits hash is
# the one of the default warm-up (each run has its own session)
dhash() { awk -F'|' '/\| tg4 @ d40/ {gsub(/ /, "", $11); print $11}' "$1"; }
MLXRT_DECODER=1 $MLXRT bench -m "$M" --backend cpu -t 1 -p 0 -n 4 -d 40 -r 1 >"$T/w0" 2>"$T/err" || bad "bench -d 40"
if MLXRT_DECODER=1 $MLXRT bench -m "$M" --backend cpu -t 1 -p 0 -n 4 -d 40 -r 1 --warmup-depth 0 >"$T/w1" 2>"$T/err"; then ok
else bad "bench --warmup-depth 0 failed: $(cat "$T/err")"; fi
[ -n "$(dhash "$T/w0")" ] && [ "$(dhash "$T/w0")" = "$(dhash "$T/w1")" ] && ok ||
  { bad "--warmup-depth 0 changed the logits hash ($(dhash "$T/w0") vs $(dhash "$T/w1"))"; cat "$T/w0" "$T/w1"; }
for v in -1 x 3k; do
  $MLXRT bench -m "$M" --warmup-depth "$v" >"$T/out" 2>"$T/err"
  rc=$?
  [ $rc -eq 2 ] && grep -qF -- "--warmup-depth expects an integer in 0..16777216, got '$v'" "$T/err" && ok ||
    bad "--warmup-depth '$v': rc=$rc $(cat "$T/err")"
done

echo "$((pass + fail)) checks, $pass passed, $fail failed"
[ $fail -eq 0 ]
