#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-batched-bench (beside it) from the pinned
# llama-cpp-python sdist (PyPI) into the cache, once, and prints llama-bench's path.
# Usage: build_llama_bench.sh [cpu|cuda]. Nothing of llama.cpp is committed: the source lives in
# ${MLXRT_CACHE:-~/.cache/mlxrt}/src.
set -euo pipefail
KIND=${1:-cpu}
VER=0.3.36
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/src
SRC=$ROOT/llama_cpp_python-$VER/vendor/llama.cpp
# The CPU's vector ISA names the build: a build for AVX-512 faults on an AVX2-only machine.
ISA=avx2
grep -qw avx512f /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo && ISA=avx512
BUILD=$SRC/build-$KIND
[ "$KIND" = cpu ] && BUILD=$SRC/build-cpu-$ISA
BIN=$BUILD/bin/llama-bench
if [ -x "$BIN" ] && [ -x "$BUILD/bin/llama-batched-bench" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$ROOT"
if [ ! -d "$SRC" ]; then
  if [ ! -f "$ROOT/llama_cpp_python-$VER.tar.gz" ]; then
    PY=$(bash "$(dirname "$0")/venv.sh")
    "$PY" -m pip download -q --no-deps --no-binary=:all: "llama-cpp-python==$VER" -d "$ROOT" >&2
  fi
  tar xzf "$ROOT/llama_cpp_python-$VER.tar.gz" -C "$ROOT"
fi
# Not -march=native: it turns on AMX, whose tile instructions fault on machines (VMs) that do
# not grant the AMX state; the AVX-512 family (or AVX2 where that is all) is what both engines use here.
EXTRA=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
       -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
if [ "$KIND" = cuda ] || [ $ISA = avx512 ]; then
  EXTRA+=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON)
fi
if [ "$KIND" = cuda ]; then EXTRA+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a); fi
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF "${EXTRA[@]}" >&2
cmake --build "$BUILD" --target llama-bench llama-batched-bench -j"$(nproc)" >&2
echo "$BIN"
