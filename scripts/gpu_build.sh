# Sourced by the GPU scripts, from the repository root: JOBS, a `stamp` that prefixes seconds
# since sourcing, cJSON from the carried .debs when the image lacks it (scripts/gpu_cjson.sh),
# and `gpu_build DIR LOG [TARGET...]`: configure and build Release with the CUDA plug-in
# (sm_90a, ptxas -v) into DIR, every target when none is named; on failure it prints the
# log's tail and returns 1.
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
source scripts/gpu_cjson.sh
gpu_build() {
  local dir=$1 log=$2
  shift 2
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  if ! { cmake -S . -B "$dir" -DMLXRT_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DMLXRT_CUDA_PTXAS_VERBOSE=ON \
           "${CJSON_CMAKE[@]}" && cmake --build "$dir" -j"$JOBS" "${targets[@]}"; } >"$log" 2>&1; then
    tail -40 "$log"
    echo "BUILD FAILED"
    return 1
  fi
}
