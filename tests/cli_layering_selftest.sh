#!/usr/bin/env bash
# Tests the layering test: on a temporary copy of src/mlx it must pass as the tree is, and fail
# once a violation is planted — a backend name in code, a backend header included, the KV codec
# included, a backend's name compared (each alone).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
expect() { # want(0|1) label
  local want=$1 label=$2
  bash "$here/cli_layering.sh" "${MLXRT:-mlxrt}" "$tmp" >"$tmp/out.txt" 2>&1
  local got=$?
  [ $got -ne 0 ] && got=1
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else failed=$((failed + 1)); echo "FAIL: $label"; cat "$tmp/out.txt"; fi
}
fresh() { rm -rf "$tmp/src"; mkdir -p "$tmp/src"; cp -r "$src/src/mlx" "$tmp/src/mlx"; }
fresh
expect 0 "the clean copy passes"
fresh
printf '\nstatic int planted(void) { return cudaMalloc(0, 0); }\n' >>"$tmp/src/mlx/ops.c"
expect 1 "a CUDA call planted in src/mlx is caught"
fresh
sed -i '0,/#include "/s//#include "accel\/cuda\/kernels.h"\n#include "/' "$tmp/src/mlx/ops.c"
expect 1 "a backend header included from src/mlx is caught"
fresh
sed -i '0,/#include "/s//#include "accel\/kv_codec.h"\n#include "/' "$tmp/src/mlx/ops.c"
expect 1 "the KV codec included from src/mlx is caught"
fresh
printf '\nstatic int planted(const accel_backend *b) { return !strcmp(b->name, "gpu"); }\n' >>"$tmp/src/mlx/ops.c"
expect 1 "a backend's name compared in src/mlx is caught"
fresh
printf '\nstatic int planted(const accel_backend *b) { return b->name[0] == 99; }\n' >>"$tmp/src/mlx/ops.c"
expect 1 "a backend's name inspected in src/mlx is caught"
echo "$pass passed, $failed failed"
[ $failed -eq 0 ]
