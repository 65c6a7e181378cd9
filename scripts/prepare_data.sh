#!/usr/bin/env bash
# Makes the generated (not committed) test inputs, idempotently: the Python venv with pinned
# peers, the Gemma 3 270M demo model converted from its GGUF, and the tokenizer files.
set -euo pipefail
cd "$(dirname "$0")/.."
for s in scripts/make_demo_model.sh scripts/make_tokenizer_files.sh; do
  if [ -f "$s" ]; then bash "$s"; fi
done
