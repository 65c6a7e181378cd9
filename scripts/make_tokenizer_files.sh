#!/usr/bin/env bash
# Makes the tokenizer files the tests read from the cache (not committed): the Gemma 3
# tokenizer.json (via make_demo_model.py) and the derived Gemma 4-style one. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/venv.sh)
"$PY" scripts/make_tokenizer_fixtures.py --cache-only
