# Sourced by the GPU check scripts, from the repository root, with OUT set: rc=0 and
# `step NAME TIMEOUT COMMAND...`, which runs the command into $OUT/NAME.log, prints one line
# (exit status, seconds, the log's last pass/fail lines) and sets rc=1 when it fails.
rc=0
step() {
  local name=$1 t=$2
  shift 2
  local s=$(date +%s)
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  local r=$?
  echo "$name: rc=$r ($(( $(date +%s) - s )) s): $(grep -E 'passed|failed|FAIL|PASS' "$OUT/$name.log" | tail -2 | tr '\n' ' ')"
  [ $r -eq 0 ] || rc=1
}
