#!/usr/bin/env bash
# The demo model through `mlxrt chat` on a pty (tests/chat_pty.py). Needs the demo model
# (scripts/make_demo_model.sh); MLXRT_ALLOW_MISSING_MODELS=1 turns its absence into a skip.
set -u
MODEL=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-4bit
if [ ! -f "$MODEL/model.safetensors" ]; then
  if [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no demo model at $MODEL"; exit 0; fi
  echo "FAIL: no demo model at $MODEL (run scripts/make_demo_model.sh)"; exit 1
fi
exec python3 "$(dirname "$0")/chat_pty.py" "$1" "$MODEL"
