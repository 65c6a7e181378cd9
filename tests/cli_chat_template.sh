#!/usr/bin/env bash
# Chat templates on the command line: the model's own template renders the prompt, --chat-template
# FILE overrides it (its errors name the file), the built-in renderer is the fallback, and -v says
# which one renders. The templates raise an error naming the text they were given, which shows
# that they (and not another renderer) saw the conversation.
set -u
MLXRT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0

check() { # description, expected rc, fragment expected on stderr, command...
  local what=$1 want=$2 frag=$3
  shift 3
  timeout 20 "$@" >"$T/out" 2>"$T/err" </dev/null
  local rc=$?
  if [ $rc -eq "$want" ] && grep -qF -- "$frag" "$T/err" &&
     { [ "$want" -eq 0 ] || [ "$(wc -l <"$T/err")" -eq 1 ]; }; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $what (rc=$rc, wanted $want and '$frag'):"
    head -c 600 "$T/err"
    echo
  fi
}

# (greedy on this fixture with this tokenizer picks ids the tokenizer can decode)
FIX=tests/fixtures/models/gemma4-dense-bf16
mkdir -p "$T/plain" "$T/own"
for d in plain own; do
  cp "$FIX/config.json" "$FIX/model.safetensors" "$T/$d/"
  cp tests/fixtures/tokenizer/small-a.json "$T/$d/tokenizer.json"
done
# renders "<bos>hi" for the prompt "hi", and refuses any other naming what it got
GUARD="{% if messages[-1]['content'] != 'hi' %}{{ raise_exception('got ' + messages[-1]['content']) }}{% endif %}{{ bos_token }}hi"
printf '%s' "$GUARD" >"$T/own/chat_template.jinja"
printf '{"bos_token": {"content": "<bos>"}, "eos_token": "<eos>"}' >"$T/own/tokenizer_config.json"
printf '%s' "${GUARD//got /override got }" >"$T/guard.jinja"
printf '{%% for m in messages %%}{{ m.content }}' >"$T/broken.jinja"
mkdir "$T/dir.jinja"

check "built-in" 0 "chat template: built-in" "$MLXRT" run -m "$T/plain" -p hi -n 1 --temp 0 -v
check "model's own" 0 "chat template: the model's own" "$MLXRT" run -m "$T/own" -p hi -n 1 --temp 0 -v
check "model's own renders" 1 "got bye" "$MLXRT" run -m "$T/own" -p bye -n 1 --temp 0
check "override" 0 "chat template: $T/guard.jinja (--chat-template)" \
  "$MLXRT" run -m "$T/own" -p hi -n 1 --temp 0 -v --chat-template "$T/guard.jinja"
check "override renders" 1 "override got bye" "$MLXRT" run -m "$T/own" -p bye -n 1 --temp 0 --chat-template "$T/guard.jinja"
check "override on the built-in's model" 1 "override got bye" \
  "$MLXRT" run -m "$T/plain" -p bye -n 1 --temp 0 --chat-template "$T/guard.jinja"
check "broken override names its file" 1 "$T/broken.jinja:1:" \
  "$MLXRT" run -m "$T/plain" -p hi -n 1 --chat-template "$T/broken.jinja"
check "override is a directory" 1 "is a directory" "$MLXRT" run -m "$T/plain" -p hi --chat-template "$T/dir.jinja"
check "override missing" 1 "cannot read" "$MLXRT" run -m "$T/plain" -p hi --chat-template "$T/none.jinja"
check "override with --no-chat-template" 2 "exclude each other" \
  "$MLXRT" run -m "$T/plain" -p hi --chat-template "$T/guard.jinja" --no-chat-template
printf 'bye\n' >"$T/in"
check "chat override" 1 "override got bye" \
  sh -c '"$1" chat -m "$2" -n 1 --chat-template "$3" <"$4"' _ "$MLXRT" "$T/plain" "$T/guard.jinja" "$T/in"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
