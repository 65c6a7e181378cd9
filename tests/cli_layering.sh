#!/usr/bin/env bash
# The model layer (src/mlx) must not know which accelerator runs it: no backend names (in code,
# strings or comments), no backend headers, no include of a backend folder, no include of the KV
# cache codec, no comparison of a backend's name. It may only reach src/accel/accel.h.
#   cli_layering.sh [MLXRT] [ROOT]   ROOT: the tree to check (default: this checkout)
set -u
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
dir=$root/src/mlx
[ -d "$dir" ] || { echo "FAIL: no $dir"; echo "0 passed, 1 failed"; exit 1; }
fail=0
hits=$(grep -rnIiwE 'cuda|cublas|cudnn|metal|mps|__global__|cudaMalloc|nvcc|hip|rocm|opencl|vulkan|avx2|avx512|neon' "$dir")
if [ -n "$hits" ]; then
  echo "FAIL: src/mlx names a backend:"; echo "$hits"; fail=$((fail + 1))
fi
inc=$(grep -rnE '#include "accel/(cpu|cuda|[a-z0-9_]+)/' "$dir")
if [ -n "$inc" ]; then
  echo "FAIL: src/mlx includes a backend's header:"; echo "$inc"; fail=$((fail + 1))
fi
# the KV cache's storage codec is the backends' business, below the model layer
codec=$(grep -rnE '#include "(accel/)?kv_codec' "$dir")
if [ -n "$codec" ]; then
  echo "FAIL: src/mlx includes the KV codec (a backend's cache detail):"; echo "$codec"; fail=$((fail + 1))
fi
# a backend told apart by its name: b->name compared, or a backend's name as a string literal
cmp=$(grep -rnEi 'str(n|case)?cmp\([^;]*\b(b|be|bk|backend|accel)->name|\b(b|be|bk|backend|accel)->name *(\[|==|!=)|"(cpu|gpu|cuda|metal|rocm)"' "$dir")
if [ -n "$cmp" ]; then
  echo "FAIL: src/mlx tells backends apart by name:"; echo "$cmp"; fail=$((fail + 1))
fi
echo "$((4 - fail)) passed, $fail failed"
[ $fail -eq 0 ]
