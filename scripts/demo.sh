#!/usr/bin/env bash
# The main job: build mlxrt and run it on the demo model with the default backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
MODEL=tests/fixtures/models/gemma4-dense-affine4
build/mlxrt inspect "$MODEL"
