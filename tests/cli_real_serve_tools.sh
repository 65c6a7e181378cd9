#!/usr/bin/env bash
# A tool-call round trip through mlxrt serve and the openai client on a tiny Gemma 4 checkpoint
# with designed answers (scripts/make_tool_call_model.py), the Gemma 4 style tokenizer and the
# Gemma 4 31B chat template (both made by scripts/prepare_data.sh); tests/serve_tools_check.py.
# MLXRT_ALLOW_MISSING_MODELS=1 turns their absence into a skip.
set -u
CACHE=${MLXRT_CACHE:-$HOME/.cache/mlxrt}
TOK=$CACHE/models/gemma-4-style-tokenizer/tokenizer.json
TEMPLATE=$CACHE/src/templates/google-gemma-4-31B-it.jinja
for f in "$TOK" "$TEMPLATE"; do
  if [ ! -f "$f" ]; then
    if [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no $f"; exit 0; fi
    echo "FAIL: no $f (run scripts/prepare_data.sh)"; exit 1
  fi
done
cd "$(dirname "$0")/.."
PY=$(scripts/venv.sh) || { echo "FAIL: scripts/venv.sh could not make the venv"; exit 1; }
exec "$PY" tests/serve_tools_check.py "$1" "$TOK" "$TEMPLATE"
