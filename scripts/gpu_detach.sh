#!/usr/bin/env bash
# A run longer than one device call (600 s), on the same warm machine: the command runs in a
# process session of its own, which outlives the call that started it, and later calls wait for
# it and bring back what it wrote. Each next call must come within the machine's idle release
# (30 s), or the machine goes back with the run.
#   bash scripts/gpu_detach.sh start NAME -- CMD [ARG...]
#       starts CMD with DOUT=/tmp/mlxrt-detach/NAME/out (its results; $OUT is emptied per call),
#       its stdout and stderr in /tmp/mlxrt-detach/NAME/log
#   bash scripts/gpu_detach.sh wait NAME [SECONDS]
#       waits up to SECONDS (default 540) for it to end and copies its folder to $OUT/NAME;
#       exit status: the command's when it has ended, 3 while it still runs
set -uo pipefail
cmd=${1:-}
name=${2:-}
[ -n "$name" ] || { echo "usage: gpu_detach.sh start NAME -- CMD... | wait NAME [SECONDS]" >&2; exit 2; }
case "$name" in *[!A-Za-z0-9_-]*) echo "gpu_detach.sh: NAME is letters, digits, - and _" >&2; exit 2 ;; esac
DIR=/tmp/mlxrt-detach/$name
case "$cmd" in
  start)
    shift 2
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || { echo "gpu_detach.sh start: no command" >&2; exit 2; }
    [ -f "$DIR/pid" ] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null && { echo "gpu_detach.sh: $name already runs" >&2; exit 2; }
    rm -rf "$DIR" && mkdir -p "$DIR/out"
    DOUT=$DIR/out setsid bash -c '"$@" >"$0/log" 2>&1; echo $? >"$0/rc"' "$DIR" "$@" </dev/null &
    echo $! >"$DIR/pid"
    echo "gpu_detach.sh: $name started (pid $(cat "$DIR/pid")), log in $DIR/log"
    ;;
  wait)
    limit=${3:-540}
    [ -d "$DIR" ] || { echo "gpu_detach.sh: no run named $name on this machine (a fresh one?)" >&2; exit 2; }
    t0=$(date +%s)
    while [ ! -f "$DIR/rc" ] && [ $(($(date +%s) - t0)) -lt "$limit" ]; do sleep 2; done
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/$name" && cp -r "$DIR/out" "$DIR/log" "$OUT/$name/"; fi
    if [ -f "$DIR/rc" ]; then
      echo "gpu_detach.sh: $name ended with status $(cat "$DIR/rc")"
      exit "$(cat "$DIR/rc")"
    fi
    echo "gpu_detach.sh: $name still runs after ${limit} s; wait again in the next call"
    exit 3
    ;;
  *) echo "usage: gpu_detach.sh start NAME -- CMD... | wait NAME [SECONDS]" >&2; exit 2 ;;
esac
