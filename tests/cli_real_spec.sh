#!/usr/bin/env bash
# Speculative decoding on the real Gemma 3 270M demo models: greedy `mlxrt run` prints exactly
# the text it prints without speculation. The 4-bit model: with prompt lookup (the defaults,
# and one-token n-grams with short drafts), with the 8-bit model as the draft model, and with
# itself as its own draft (every draft accepted), on an input-grounded prompt (copying a
# passage: most drafts accepted) and a free one, through the chat template and raw; every
# other format present: the passage through the chat template with prompt lookup and another
# format as the draft (the drafting does not depend on the format); then a long list continued past the
# sliding window. Needs the demo models (scripts/make_demo_model.sh);
# MLXRT_ALLOW_MISSING_MODELS=1 turns a missing one into a skip.
set -u
MLXRT=$1
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0 seen=0
PASSAGE="Repeat the following passage exactly: The old lighthouse keeper climbed the spiral stairs every evening \
at dusk. He polished the great lens, trimmed the wick, and watched the ships pass safely through the narrow \
channel between the rocks."
FREE="Write a short story about a dragon who learns to paint."
draft_for() { case $1 in 4bit) echo 8bit ;; *) echo 4bit ;; esac; }
for fmt in 4bit 8bit nvfp4; do
  MODEL=$ROOT/gemma-3-270m-$fmt
  DRAFT=$ROOT/gemma-3-270m-$(draft_for "$fmt")
  if [ ! -f "$MODEL/model.safetensors" ] || [ ! -f "$DRAFT/model.safetensors" ]; then
    if [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no demo models $MODEL, $DRAFT"; continue; fi
    echo "FAIL: no demo model at $MODEL or $DRAFT (run scripts/make_demo_model.sh)"; fail=$((fail + 1)); continue
  fi
  seen=$((seen + 1))
  modes=(chat) whiches=(passage) specs=("--spec lookup" "--draft-model $DRAFT")
  if [ "$fmt" = 4bit ]; then
    modes=(chat raw) whiches=(passage free)
    specs=("--spec lookup" "--spec lookup --draft-max 3 --spec-ngram 1" "--draft-model $DRAFT"
           "--draft-model $MODEL --draft-max 6")
  fi
  for mode in "${modes[@]}"; do
    for which in "${whiches[@]}"; do
      prompt=$PASSAGE
      [ $which = free ] && prompt=$FREE
      extra=()
      [ $mode = raw ] && extra=(--no-chat-template)
      base=(run -m "$MODEL" -p "$prompt" -n 48 --temp 0 --backend cpu "${extra[@]}")
      if ! "$MLXRT" "${base[@]}" >"$T/want" 2>"$T/err"; then
        echo "FAIL: $fmt $mode $which: the plain run failed: $(cat "$T/err")"; fail=$((fail + 1)); continue
      fi
      for spec in "${specs[@]}"; do
        # shellcheck disable=SC2086  # (the drafter's options are words)
        if "$MLXRT" "${base[@]}" $spec >"$T/got" 2>"$T/err" && cmp -s "$T/want" "$T/got"; then
          pass=$((pass + 1))
          echo "$fmt $mode $which $spec: same text; $(grep -o 'spec [a-z]*: .*' "$T/err")"
        else
          fail=$((fail + 1))
          echo "FAIL: $fmt $mode $which $spec: the text differs from plain greedy decoding"
          printf '  plain:       %q\n  speculative: %q\n  %s\n' "$(cat "$T/want")" "$(cat "$T/got")" "$(tail -1 "$T/err")"
        fi
        case $spec in
          "--draft-model $MODEL"*) # the model drafting for itself: every draft is accepted
            if grep -qE "spec draft: [0-9]+ passes, ([0-9]+) drafted, \1 accepted" "$T/err"; then pass=$((pass + 1)); else
              fail=$((fail + 1)); echo "FAIL: $fmt $mode $which: self-draft with rejections: $(tail -1 "$T/err")"; fi ;;
        esac
      done
    done
  done
done
# past the sliding window (512 + the 32 positions the rings keep for taking drafts back): a
# 750-token list the model continues, every rejection rewinding a ring that has wrapped
MODEL=$ROOT/gemma-3-270m-4bit
if [ -f "$MODEL/model.safetensors" ]; then
  LIST="Continue the list."
  for i in $(seq 1 40); do LIST="$LIST Item $i: a box of $((i * 7 % 23 + 2)) red apples costs $((i * 3 + 5)) dollars."; done
  long=(run -m "$MODEL" -p "$LIST" -n 128 --temp 0 --backend cpu --no-chat-template)
  "$MLXRT" "${long[@]}" >"$T/want" 2>/dev/null
  if "$MLXRT" "${long[@]}" --spec lookup --draft-max 8 >"$T/got" 2>"$T/err" && cmp -s "$T/want" "$T/got" &&
     [ "$(wc -c <"$T/want")" -gt 300 ] && grep -q "prompt: 7[0-9][0-9] tokens" "$T/err" &&
     ! grep -qE "spec lookup: [0-9]+ passes, ([0-9]+) drafted, \1 accepted" "$T/err"; then
    pass=$((pass + 1)); echo "4bit raw list of 750 tokens -n 128 --spec lookup: same text; $(grep -o 'spec [a-z]*: .*' "$T/err")"
  else fail=$((fail + 1)); echo "FAIL: 4bit 750-token list --spec lookup: the text differs from plain greedy decoding, or no draft was rejected: $(tail -1 "$T/err")"; fi
fi
if [ $seen = 0 ] && [ $fail = 0 ]; then echo "SKIPPED: no demo model"; exit 0; fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
