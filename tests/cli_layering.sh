#!/usr/bin/env bash
# The model layer (src/mlx) must not know which accelerator runs it: no backend names, no
# backend headers, no include of a backend folder. It may only reach src/accel/accel.h.
set -u
cd "$(dirname "$0")/.."
fail=0
hits=$(grep -rnIiwE 'cuda|cublas|cudnn|metal|mps|__global__|cudaMalloc|nvcc|hip|rocm|opencl|vulkan|avx2|avx512' src/mlx)
if [ -n "$hits" ]; then
  echo "FAIL: src/mlx names a backend:"; echo "$hits"; fail=$((fail + 1))
fi
inc=$(grep -rnE '#include "accel/(cpu|cuda)/' src/mlx)
if [ -n "$inc" ]; then
  echo "FAIL: src/mlx includes a backend's header:"; echo "$inc"; fail=$((fail + 1))
fi
echo "$((2 - fail)) passed, $fail failed"
[ $fail -eq 0 ]
