#!/usr/bin/env bash
# Builds mlxrt twice (Release, and ASan+UBSan) and runs every test in both. Generated inputs
# (demo model, tokenizer files) are made first and cached in ~/.cache/mlxrt.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
bash scripts/deps.sh || exit 1
bash scripts/prepare_data.sh || exit 1

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMLXRT_SANITIZED_EMULATIONS=OFF >/dev/null || exit 1
cmake --build build -j"$JOBS" || exit 1
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLXRT_SANITIZE=ON -DMLXRT_CUDA=OFF >/dev/null || exit 1
cmake --build build-asan -j"$JOBS" || exit 1

# The kernel emulations whose sweep is the same in both builds run (and are built) once, in the sanitizer build
# (label emulator-sanitized); the emulators' full sweeps: scripts/emulate_full.sh.
echo "== Release build: every test but the emulations the sanitizer build runs =="
ctest --test-dir build --output-on-failure -LE 'emulator-full|emulator-sanitized' -j"$JOBS"
rel=$?
echo "== ASan+UBSan build: every test except the heavy real-model ones =="
ctest --test-dir build-asan --output-on-failure -LE 'heavy|emulator-full' -j"$JOBS"
asan=$?
[ $rel -eq 0 ] && [ $asan -eq 0 ]
