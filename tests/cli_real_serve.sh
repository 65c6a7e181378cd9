#!/usr/bin/env bash
# mlxrt serve on the demo model through the official `openai` client (tests/serve_openai_check.py,
# run by the pinned venv of scripts/venv.sh). MLXRT_ALLOW_MISSING_MODELS=1 turns a missing demo
# model into a skip.
set -u
MODEL=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-4bit
if [ ! -f "$MODEL/model.safetensors" ]; then
  if [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no demo model at $MODEL"; exit 0; fi
  echo "FAIL: no demo model at $MODEL (run scripts/make_demo_model.sh)"; exit 1
fi
cd "$(dirname "$0")/.."
PY=$(scripts/venv.sh) || { echo "FAIL: scripts/venv.sh could not make the venv"; exit 1; }
exec "$PY" tests/serve_openai_check.py "$1" "$MODEL"
