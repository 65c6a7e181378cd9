#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with CUDA (sm_90a, H200) from the pinned llama-cpp-python sdist,
# on the CPU machine (nvcc is enough; no GPU needed), as ONE self-contained binary: ggml and
# llama are linked statically; only the CUDA runtime, cuBLAS and the driver stay dynamic (the GPU
# machine has CUDA 13). Idempotent: skips the build when the binary exists. Then copies the
# stripped binary to <repo>/.gpu-carry/llama-bench (ignored; travels with the device call's
# `carry`). Usage: build_llama_bench_cuda.sh [REPO_ROOT] (default: this script's repo).
# Slow on the shared 2-core machine (≈ 1–2 h): runs niced, -j2 at most.
set -euo pipefail
VER=0.3.36
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${1:-$(cd "$HERE/.." && pwd)}
ROOT=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/src
SRC=$ROOT/llama_cpp_python-$VER/vendor/llama.cpp
BUILD=$SRC/build-cuda
BIN=$BUILD/bin/llama-bench
JOBS=${JOBS:-2}
[ "$JOBS" -le 2 ] || JOBS=2

if [ ! -d "$SRC" ]; then
  mkdir -p "$ROOT"
  if [ ! -f "$ROOT/llama_cpp_python-$VER.tar.gz" ]; then
    PY=$(bash "$HERE/venv.sh")
    "$PY" -m pip download -q --no-deps --no-binary=:all: "llama-cpp-python==$VER" -d "$ROOT" >&2
  fi
  tar xzf "$ROOT/llama_cpp_python-$VER.tar.gz" -C "$ROOT"
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
mkdir -p "$REPO/.gpu-carry"
GITDIR=$(git -C "$REPO" rev-parse --git-common-dir 2>/dev/null || true)
if [ -n "$GITDIR" ]; then
  case "$GITDIR" in /*) ;; *) GITDIR=$REPO/$GITDIR ;; esac
  mkdir -p "$GITDIR/info"
  grep -qxF '/.gpu-carry/' "$GITDIR/info/exclude" 2>/dev/null || echo '/.gpu-carry/' >> "$GITDIR/info/exclude"
fi
strip -o "$REPO/.gpu-carry/llama-bench" "$BIN"
size=$(stat -c %s "$REPO/.gpu-carry/llama-bench")
echo "$REPO/.gpu-carry/llama-bench: $size bytes" >&2
[ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "error: llama-bench is over 60 MB" >&2; exit 1; }
echo "$REPO/.gpu-carry/llama-bench"
