#!/usr/bin/env bash
# Builds mlxrt and the CUDA plug-in (sm_90a) on this CPU machine — nvcc needs no GPU — and copies
# the binaries to .gpu-carry/bin (ignored; it travels with a device call's carry), so that the call
# skips its ~200 s build:
#   bash scripts/build_gpu_carry.sh [TARGET...]      default targets: mlxrt mlxrt_cuda
#   (DEST=DIR puts them elsewhere, e.g. .gpu-carry/before for a side-by-side call)
#   then, on the GPU machine (carry [".debs", ".gpu-carry"]):
#   BUILD=$PWD/.gpu-carry/bin STAGES=timeline bash scripts/gpu_profile.sh   (no "build" stage)
# The binaries load the plug-in from their own folder; the GPU image's CUDA 13 runtime libraries
# and the carried libcjson (scripts/gpu_cjson.sh) serve them there. About 11 MB; a call of
# 29 s where the same stage with its build took ~220 s.
# PATCHES="dev/cuda/A.diff dev/cuda/B.diff" builds HEAD with those studies applied, in a git
# worktree at $BUILD-src (give BUILD and DEST of their own), so that one call can time a study
# against HEAD's build (scripts/gpu_bench_ab.sh):
#   DEST=.gpu-carry/before bash scripts/build_gpu_carry.sh
#   PATCHES="dev/cuda/A.diff" BUILD=/tmp/b-study bash scripts/build_gpu_carry.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(mlxrt mlxrt_cuda)
export PATH=/usr/local/cuda/bin:$PATH
SRC=$ROOT
if [ -n "${PATCHES:-}" ]; then
  SRC=$BUILD-src
  git -C "$ROOT" worktree remove --force "$SRC" 2>/dev/null || rm -rf "$SRC"
  git -C "$ROOT" worktree add --quiet --detach "$SRC" HEAD
  for p in $PATCHES; do git -C "$SRC" apply "$ROOT/$p"; done
fi
cmake -S "$SRC" -B "$BUILD" -DMLXRT_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
nice -n 5 cmake --build "$BUILD" -j"${JOBS:-2}" --target "${TARGETS[@]}"
DEST=${DEST:-$ROOT/.gpu-carry/bin}
rm -rf "$DEST" && mkdir -p "$DEST"
# stripped: with llama-bench.gz the carried tree must stay under a call's 64 MiB
for t in "${TARGETS[@]}"; do
  case "$t" in
    mlxrt_cuda) strip --strip-unneeded -o "$DEST/libmlxrt-cuda.so" "$BUILD/libmlxrt-cuda.so" ;;
    *) strip -o "$DEST/$t" "$BUILD/$t" ;;
  esac
done
g=$(git -C "$ROOT" rev-parse --git-common-dir)
case "$g" in /*) ;; *) g=$ROOT/$g ;; esac
mkdir -p "$g/info"
grep -qxF '/.gpu-carry/' "$g/info/exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$g/info/exclude"
du -sh "$DEST"
