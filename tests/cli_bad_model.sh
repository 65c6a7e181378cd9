#!/usr/bin/env bash
# Untrusted model folders (scripts/make_bad_models.py builds them from the fixtures into a temp
# dir): each must make mlxrt exit non-zero with exactly one stderr line naming the cause —
# never hang (every command runs under `timeout 20`), never answer. "run-ok" cases must work.
set -u
MLXRT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 scripts/make_bad_models.py "$T/m" || { echo "FAIL: make_bad_models.py"; exit 1; }
pass=0 fail=0

while IFS=$'\t' read -r name cmd frag; do
  dir=$T/m/$name
  case $cmd in
    inspect) timeout 20 "$MLXRT" inspect "$dir" >"$T/out" 2>"$T/err" ;;
    run) timeout 20 "$MLXRT" run -m "$dir" -p hi -n 2 >"$T/out" 2>"$T/err" ;;
    run-ok) timeout 20 "$MLXRT" run -m "$dir" -p hi -n 2 --no-chat-template >"$T/out" 2>"$T/err" ;;
    run-hub-ok) HF_HUB_CACHE=$T/m/hub timeout 20 "$MLXRT" run -m "$name" -p hi -n 2 \
                  --no-chat-template >"$T/out" 2>"$T/err" ;;
  esac
  rc=$? lines=$(wc -l <"$T/err")
  if [ "$cmd" = run-ok ] || [ "$cmd" = run-hub-ok ]; then
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); else
      fail=$((fail + 1)); echo "FAIL: $name: $cmd (rc=$rc), expected success:"; head -c 600 "$T/err"; echo
    fi
  elif [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && grep -qF -- "$frag" "$T/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name: $cmd (rc=$rc$([ $rc -eq 124 ] && echo ', timed out'), $lines stderr lines, wanted '$frag'):"
    head -c 600 "$T/err"; echo
  fi
done <"$T/m/cases.tsv"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -ge 30 ]
