#!/usr/bin/env bash
# The full sweeps of the CUDA kernels' host emulations (CTest label emulator-full; the default
# test run takes a quick subset of each). Slow on 2 cores (the threads of an emulated block meet
# at a barrier for every __syncthreads and shuffle): run it on a machine with many cores, or
# after a change to a kernel's index logic.
#   bash scripts/emulate_full.sh [BUILD_DIR]     (default build-emu; configured without CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-emu}
bash scripts/deps.sh
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DMLXRT_CUDA=OFF >/dev/null
cmake --build "$B" -j"$(nproc)" --target attention_emulate prefill_attn_emulate residual_norm_emulate sample_emulate attention_planar_emulate
ctest --test-dir "$B" -L emulator-full --output-on-failure -j"$(nproc)"
