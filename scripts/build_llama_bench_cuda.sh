#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with CUDA (sm_90a, H200) from the pinned llama-cpp-python sdist
# as ONE self-contained binary: ggml and llama linked statically; only the CUDA runtime, cuBLAS,
# the driver and the C/C++ runtime stay dynamic (the GPU machine has CUDA 13). No GPU needed.
#
#   build_llama_bench_cuda.sh [REPO]
#       on the CPU machine: builds into the cache (build-cuda, niced, -j2 at most: ~1.5–3 h on
#       the shared 2 cores), then copies the stripped binary to REPO/.gpu-carry/llama-bench
#       (ignored; travels with the device call's `carry`). Idempotent: skips a finished build.
#   build_llama_bench_cuda.sh --pack-source [REPO]
#       writes REPO/.gpu-carry/llama-src.tar.gz (~7 MB: the sdist's llama.cpp without models,
#       docs, tests and other backends) so the GPU machine can build it itself (fallback).
#   LLAMA_SRC=DIR LLAMA_BUILD=DIR JOBS=N NO_CARRY=1 build_llama_bench_cuda.sh
#       on the GPU machine (scripts/gpu_bench_vs_llama.sh does this): builds from DIR with N
#       jobs, prints the binary's path.
# REPO defaults to this script's repository.
set -euo pipefail
VER=0.3.36
HERE=$(cd "$(dirname "$0")" && pwd)
PACK=0
if [ "${1:-}" = "--pack-source" ]; then PACK=1; shift; fi
REPO=${1:-$(cd "$HERE/.." && pwd)}
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/src
SRC=${LLAMA_SRC:-$ROOT/llama_cpp_python-$VER/vendor/llama.cpp}
BUILD=${LLAMA_BUILD:-$SRC/build-cuda}
BIN=$BUILD/bin/llama-bench
JOBS=${JOBS:-2}
# the shared CPU machine: never more than 2 jobs there (the GPU machine passes LLAMA_SRC)
[ -n "${LLAMA_SRC:-}" ] || [ "$JOBS" -le 2 ] || JOBS=2

carry_dir() {
  mkdir -p "$REPO/.gpu-carry"
  local g
  g=$(git -C "$REPO" rev-parse --git-common-dir 2>/dev/null || true)
  if [ -n "$g" ]; then
    case "$g" in /*) ;; *) g=$REPO/$g ;; esac
    mkdir -p "$g/info"
    grep -qxF '/.gpu-carry/' "$g/info/exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$g/info/exclude"
  fi
}

if [ ! -d "$SRC" ]; then
  [ -z "${LLAMA_SRC:-}" ] || { echo "error: no llama.cpp source at $SRC" >&2; exit 1; }
  mkdir -p "$ROOT"
  if [ ! -f "$ROOT/llama_cpp_python-$VER.tar.gz" ]; then
    PY=$(bash "$HERE/venv.sh")
    "$PY" -m pip download -q --no-deps --no-binary=:all: "llama-cpp-python==$VER" -d "$ROOT" >&2
  fi
  tar xzf "$ROOT/llama_cpp_python-$VER.tar.gz" -C "$ROOT"
fi

if [ "$PACK" = 1 ]; then
  carry_dir
  ex=()
  for b in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
    ex+=(--exclude="llama.cpp/ggml/src/ggml-$b")
  done
  tar czf "$REPO/.gpu-carry/llama-src.tar.gz" -C "$(dirname "$SRC")" --exclude='llama.cpp/build-*' \
    --exclude=llama.cpp/models --exclude=llama.cpp/docs --exclude=llama.cpp/media \
    --exclude=llama.cpp/tests --exclude=llama.cpp/examples --exclude=llama.cpp/tools/ui \
    --exclude='llama.cpp/.git*' "${ex[@]}" llama.cpp
  ls -la "$REPO/.gpu-carry/llama-src.tar.gz" >&2
  exit 0
fi

if [ ! -x "$BIN" ]; then
  export PATH=/usr/local/cuda/bin:$PATH
  # GGML_NATIVE=OFF with AVX2 only: the GPU host's CPU is not this one; with -ngl 99 the CPU
  # backend only does the tiny leftovers anyway. NCCL off (one GPU; the box may lack libnccl).
  # FA kernels only for the f16 KV cache llama-bench uses by default (saves build time).
  # CUDA graphs on, as llama.cpp's own standalone build has them.
  start=$(date +%s)
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_STATIC=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DGGML_CUDA_GRAPHS=ON \
    -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_FA_QUANTS="f16-f16" -DGGML_CUDA_NCCL=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_CCACHE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF >&2
  nice -n 10 cmake --build "$BUILD" --target llama-bench -j"$JOBS" >&2
  echo "build took $(( $(date +%s) - start )) s" >&2
fi

# Must not depend on any libggml*/libllama* shared object.
if ldd "$BIN" | grep -Eq 'libggml|libllama'; then
  echo "error: $BIN links shared ggml/llama libraries:" >&2; ldd "$BIN" >&2; exit 1
fi
if [ -n "${NO_CARRY:-}" ]; then echo "$BIN"; exit 0; fi
carry_dir
strip -o "$REPO/.gpu-carry/llama-bench" "$BIN"
size=$(stat -c %s "$REPO/.gpu-carry/llama-bench")
echo "$REPO/.gpu-carry/llama-bench: $size bytes" >&2
[ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "error: llama-bench is over 60 MB" >&2; exit 1; }
echo "$REPO/.gpu-carry/llama-bench"
