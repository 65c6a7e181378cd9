#!/usr/bin/env bash
# mlxrt serve on a tiny fixture model over raw HTTP and curl: endpoints, authentication,
# response shapes, SSE framing, prompt reuse and bad input (tests/serve_http_check.py).
set -u
command -v curl >/dev/null || { echo "FAIL: curl is missing (scripts/deps.sh installs it)"; exit 1; }
exec python3 "$(dirname "$0")/serve_http_check.py" "$1"
