#!/usr/bin/env bash
# mlxrt serve under load on a tiny fixture model: 32 clients x 8 requests on --parallel 4, a
# quarter disconnecting mid-stream (tests/serve_load.py); with separate sessions, then with the
# slots decoded as one batch.
set -u
python3 "$(dirname "$0")/serve_load.py" "$1" --cont-batching off || exit 1
exec python3 "$(dirname "$0")/serve_load.py" "$1" --cont-batching on
