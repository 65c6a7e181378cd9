#!/usr/bin/env bash
# mlxrt serve --cont-batching on a tiny fixture model: concurrent answers decoded as one batch
# equal the answers of a one-slot server (tests/serve_batch_check.py).
set -u
exec python3 "$(dirname "$0")/serve_batch_check.py" "$1"
