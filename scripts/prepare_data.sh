#!/usr/bin/env bash
# Makes the generated (not committed) test inputs, idempotently: the Python venv with pinned
# peers, the Gemma 3 270M demo model converted from its GGUF, the tokenizer files and the
# chat-template corpus (templates + transformers' renderings, scripts/jinja_corpus.py).
set -euo pipefail
cd "$(dirname "$0")/.."
for s in scripts/make_demo_model.sh scripts/make_tokenizer_files.sh; do
  if [ -f "$s" ]; then bash "$s"; fi
done
PY=$(bash scripts/venv.sh)
"$PY" scripts/jinja_corpus.py
