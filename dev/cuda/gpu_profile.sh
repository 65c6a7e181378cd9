#!/usr/bin/env bash
# One call on a GPU machine: where the decode step's time goes, and whether the decoder's
# logits on the Gemma 4 31B shapes are within the reference path's own noise.
#   1. build mlxrt, the plug-in and mlxrt-decode-test (Release, sm_90a);
#   2. tiny fixtures: decoder vs reference path (regression check);
#   3. synth gemma4-31b nvfp4 with 6 layers (5 sliding + 1 full): the decoder against the
#      reference path on the CPU, and the reference path on CUDA against it (the noise floor);
#   4. synth gemma4-31b nvfp4, 60 layers: per-kernel profile of 32 decode steps
#      (MLXRT_CUDA_PROFILE=1, eager) and `mlxrt bench` tg128 with graphs.
#   prefill (not in the default list): the batched prompt pass — tiny fixtures in every
#      prompt-pass configuration (chunks below and above the sliding windows, mat-vec and GEMM
#      products, tensor-core and plain attention, rewinds) against the reference path; the
#      6-layer 31B synthetic with a 600-token prompt (two chunks); then on the 60-layer 31B a
#      per-kernel profile of one pp512 and `mlxrt bench` pp512 at depths 0 and 4096; first the
#      GPU self-test (pf_dequant and the cuBLAS GEMM are checked there too). Five logs in $OUT
#      (prefill_selftest, prefill_tiny, prefill_s31x6, prefill_prof, prefill_bench31) + build.log.
#      prefill_check / prefill_bench: the correctness half / the 60-layer half alone.
#   qmv (not in the default list): mlxrt-cuda-test — every mat-vec kernel against the CPU
#      backend and float64 with the default stage count, the mat-vec table on the 31B shapes
#      and the variants table (a plain read of the same bytes, loads only, 3 and 4 stages,
#      warps per tile, the one-row kernels without their full-stage loop or without one
#      column per group) → selftest.log,
#      bench.md; then the self-test again (no tables) with MLXRT_QMV_STAGES=n for each n in
#      QMV_STAGES (default "3 4"), so every instance is checked; and with MLXRT_QMV_VARIANT=v for
#      each v in QMV_VARIANTS (default none; 2, 3, 5 are the benchmark variants of kernels.h).
#   pdl (not in the default list): tiny fixtures and tg128 at depths PDL_DEPTHS (default
#      0,4096,32768) for each MLXRT_CUDA_PDL_EARLY in PDL_EARLY (default "0 1").
#   attnbench (not in the default list): mlxrt-attn-bench, decode attention alone on the 31B
#      layer shapes, each split shape checked against the host and timed (attn_benchN.log), once
#      per setting in ATTNB_ENVS.
#   ncuattnb (not in the default list; NCU_KREGEX: the kernels' name regex, NCU_TAG: a log-name
#      suffix): ncu on mlxrt-attn-bench --case for each
#      SHAPE:POS:SPLITS:MIN_KEYS in ATTNB_CASES (default full:32767:128:1); NCU_SOURCE=1 also
#      writes each kernel's source counters (SASS, stall samples per instruction) as CSV.
#   deepchk (not in the default list): the deep contexts' p·v graph (MLXRT_ATTN_PV_DEEP) — the
#      tiny fixtures crossing the three body graphs, the 6-layer 31B with a 600-token prompt
#      crossing into it against the reference path on CUDA (deep_tiny.log, deep_s31x6.log);
#      DEEP_ENV (VAR=V ...) added to the latter. TINY_ENV likewise for the tiny stage.
#   pfattn (not in the default list): mlxrt-pfattn-bench, the prompt pass's attention alone on
#      the 31B layer shapes, kinds PFATTN_KINDS (default 0,6,9) checked and timed (pfattn.log);
#      PFATTN_NCU=SHAPE:P0:T adds ncu on that case per kind (ncu_pfattn_kK.log; PFATTN_NCU_KINDS: only
#      those kinds, space-separated). PREFILL_SELFTEST=0 leaves the self-test out of prefill_check;
#      BUILD_TARGETS names fewer build targets.
#   probe (not in the default list): mlxrt-stream-probe, what each bulk-copy pipeline shape
#      streams next to plain loads (probe.log).
#   attn (not in the default list): tg128 at depths 0/4096/32768 for each decode-attention split
#      shape KEYS:BLOCKS_PER_SM:MAX_SPLITS in ATTN_CONFIGS.
#   onepass (not in the default list): the one-pass decode attention (MLXRT_ATTN_ONEPASS=1) on the
#      tiny fixtures against the CPU reference and the 6-layer 31B with a 600-token prompt against
#      the reference path on CUDA (its attention is the host's), then
#      tg128 at depths ONEPASS_DEPTHS (default 0,4096,32768) without and with it.
#   ab (not in the default list): tg128 at depths AB_DEPTHS (default 0), AB_REPS (default 2)
#      repetitions (each refills the cache by the prompt pass: at depth 131072 use 1, and
#      TG_TIMEOUT, default 400 s, for longer runs), for
#      each setting in AB_CONFIGS (default: the defaults once; VAR=V[,VAR=V...] per setting, e.g. "MLXRT_QMV_VARIANT=0
#      MLXRT_QMV_VARIANT=6 MLXRT_QMV_VARIANT=0"): alternating A/B runs in one build; then the
#      tiny fixtures against the CPU reference with the last setting.
#   pfab (not in the default list): pp512 at depths PFAB_DEPTHS (default 32768), PFAB_REPS (1)
#      repetitions, for each setting in PFAB_CONFIGS (as AB_CONFIGS) → pfabN.log.
#   abrev (not in the default list): the same A/B against an earlier commit packed by
#      scripts/pack_rev.sh (.gpu-carry/rev.tar.gz): built here too, then tg128 at depths
#      AB_DEPTHS (default 0) alternating this tree's mlxrt and the earlier one's, twice each.
#   timeline (not in the default list): the in-graph timeline (MLXRT_CUDA_TIMELINE=1: each
#      kernel's share of the step as the graph with programmatic dependent launches runs it)
#      of tg at depths TL_DEPTHS (default "0 32768"), 64 steps per depth; TL_MODE=2 adds each
#      grid's last block's stamps (MLXRT_CUDA_TIMELINE=2); TG_TIMEOUT and TG_EXTRA as for ab (at
#      depth 131072: TG_EXTRA="--warmup-depth 0", one fill of ~2 minutes instead of two).
#   ncuattn (not in the default list): ncu on the full layers' decode attention (scores, p·v and
#      the one-pass kernel, GQA 8) at depth ATTN_DEPTH (default 32768): duration, DRAM
#      throughput, issue activity and stall reasons, two launches each.
#   ncuqmv (not in the default list): ncu stall reasons (cycles per issued instruction, per
#      reason) of the nvfp4 and affine 4-bit mat-vecs on lm_head and on 21504->5376, and the
#      warp instructions executed per mma (against the SASS count of a full stage).
#   profd (not in the default list): the per-kernel profile of 8 decode steps at depth PROF_DEPTH
#      (default 32768).
#   clusterchk (not in the default list): the one-launch attention's checks — alone
#      (mlxrt-attn-bench with MLXRT_ATTN_CLUSTER=1, every case against the host, µs per call),
#      and again with its K and V rows staged (MLXRT_ATTN_CLUSTER_STAGE=1), staged in one
#      buffer (=2), and both in clusters of 16 blocks (=3, =4), then the tiny fixtures with
#      MLXRT_ATTN_CLUSTER_KEYS=20 (each session crosses graphs; the decoder's default stage
#      knob 11, also 0, 3, 7, 15 and 27, and with the post step inside,
#      MLXRT_ATTN_CLUSTER_POST=1), with
#      the residual norm's pull form (MLXRT_NORM_PUSH=0), without GeGLU in gate|up's epilogue
#      (MLXRT_GEGLU_EPI=0), without the norm's fixed exponent (MLXRT_NORM_FIXEXP=0), and
#      without o's fixed exponent but with the split passes' K/V prefetch (MLXRT_ATTN_FIXEXP=0
#      MLXRT_ATTN_PREFETCH=2) → clchk_*.log.
#   chain (not in the default list): mlxrt-chain-bench, the 31B layer's four nvfp4 products
#      chained over 60 layers, a launch per product against one resident grid (qmv_chain.cu),
#      every product checked → chain.log; then the same with an RMS norm before q|k|v and gate|up
#      (a step of the grid against a kernel: --norm) → chain_norm.log; CHAIN_ARGS adds arguments
#      to both (e.g. "--configs 4:1:4:192").
#   ncuchain (not in the default list): ncu stall reasons of the resident grid's kernel for each
#      configuration in NCU_CHAIN_CFGS (default "8:1:2:0 8:1:2:1"), 4 layers → ncu_chain_*.log.
#   QMV_STAGES="3 4" with prof: also `mlxrt bench` tg128 with each stage count.
#   PACK=DIR: at the end, every file of $OUT in DIR/logs.tgz (a device call returns at most 8
#      files: e.g. OUT=/tmp/gpo PACK=$OUT on the GPU machine).
#   STAGES="build tiny small prof" bash scripts/gpu_profile.sh     Logs go to $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu}
SYN=${SYNTH_DIR:-/tmp}
MODE=${MODE:-nvfp4}
STAGES=${STAGES:-build tiny small prof}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
has() { [[ " $STAGES " == *" $1 "* ]]; }

source scripts/gpu_build.sh
stamp "source hash $(bash scripts/source_hash.sh) (scripts/source_hash.sh on a checkout ties it to a commit)"
if has build; then
  stamp "build (-j$JOBS)"
  # BUILD_TARGETS: fewer targets for a shorter call (default: all the stages need)
  gpu_build "$BUILD" "$OUT/build.log" ${BUILD_TARGETS:-mlxrt mlxrt_cuda mlxrt-decode-test mlxrt-decode-real mlxrt-cuda-test \
    mlxrt-attn-bench mlxrt-chain-bench mlxrt-stream-probe mlxrt-pfattn-bench} || exit 1
fi
DT="$BUILD/mlxrt-decode-test"
rc=0
# synth31 DIR [--layers N]: the synthetic Gemma 4 31B checkpoint (MODE) in DIR, made unless one
# of that mode is already there
synth31() {
  local dir=$1 log="$OUT/synth_$(basename "$1").log"
  shift
  [ -f "$dir/config.json" ] && [ "$(cat "$dir/.mlxrt-mode" 2>/dev/null)" = "$MODE" ] && return 0
  stamp "synth gemma4-31b $MODE $* -> $dir"
  "$BUILD/mlxrt" synth --like gemma4-31b --mode "$MODE" "$@" -o "$dir" >"$log" 2>&1 && echo "$MODE" >"$dir/.mlxrt-mode" ||
    tail -3 "$log"
}
# tiny_check LOG [VAR=VALUE...]: the tiny fixtures, decoder against the CPU reference, with those settings
tiny_check() {
  local log="$OUT/$1"
  shift
  env "$@" timeout 120 "$DT" --ref cpu --gen 24 --tg 0 "${ROOT}"/tests/fixtures/models/gemma* >"$log" 2>&1 || rc=1
  grep -cE "^  PASS" "$log" | sed 's/^/tiny PASS count: /'
  grep -E "FAIL" "$log" | head
}
# tg_depths LOG DEPTHS REPS [VAR=VALUE...]: `mlxrt bench` tg128 on the 60-layer 31B at DEPTHS
# (with $MLXRT_BIN instead of this build's mlxrt when set; $TG_EXTRA added to its arguments,
# e.g. TG_EXTRA="-c 262144" for a session made for the model's whole context)
tg_depths() {
  local log="$OUT/$1" depths=$2 reps=$3
  shift 3
  env "$@" MLXRT_DECODER=1 timeout "${TG_TIMEOUT:-400}" "${MLXRT_BIN:-$BUILD/mlxrt}" bench -m "$SYN/s31" --backend cuda -p 0 -n 128 \
    -d "$depths" -r "$reps" ${TG_EXTRA:-} 2>&1 | tee "$log" | grep -E "tg128|hash"
}
if has tiny; then
  stamp "tiny fixtures ${TINY_ENV:-}"
  tiny_check tiny.log ${TINY_ENV:-}
fi
if has qmv; then
  stamp "mat-vec self-test and tables"
  timeout 300 "$BUILD/mlxrt-cuda-test" --table "$OUT/bench.md" >"$OUT/selftest.log" 2>&1 || rc=1
  grep -E "^FAIL|checks,|streaming read" "$OUT/selftest.log" | head -30
  sed -n '/^format /,$p' "$OUT/selftest.log"
  for n in ${QMV_STAGES-3 4}; do
    stamp "mat-vec self-test, MLXRT_QMV_STAGES=$n"
    MLXRT_QMV_STAGES=$n timeout 200 "$BUILD/mlxrt-cuda-test" --no-bench >"$OUT/selftest_st$n.log" 2>&1 || rc=1
    grep -E "^FAIL|checks," "$OUT/selftest_st$n.log" | head -10
  done
  for v in ${QMV_VARIANTS:-}; do
    stamp "mat-vec self-test, MLXRT_QMV_VARIANT=$v"
    MLXRT_QMV_VARIANT=$v timeout 200 "$BUILD/mlxrt-cuda-test" --no-bench >"$OUT/selftest_v$v.log" 2>&1 || rc=1
    grep -E "^FAIL|checks," "$OUT/selftest_v$v.log" | head -10
  done
fi
if has small; then
  synth31 "$SYN/s31x6" --layers 6
  timeout 240 "$DT" --ref both --prompt 8 --gen 8 --tg 0 "$SYN/s31x6" 2>&1 | tee "$OUT/s31x6.log" || rc=1
fi
if has prof; then
  synth31 "$SYN/s31"
  stamp "profile (eager, 32 steps)"
  MLXRT_CUDA_PROFILE=1 MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 32 -r 1 \
    >"$OUT/prof.log" 2>&1 || rc=1
  cat "$OUT/prof.log"
  for n in ${QMV_STAGES:-}; do
    stamp "bench tg128 with MLXRT_QMV_STAGES=$n"
    MLXRT_QMV_STAGES=$n MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 128 -r 3 \
      2>&1 | tee "$OUT/bench31_st$n.log" | grep tg128
  done
  for w in ${QMV_WARPS:-}; do
    stamp "profile with MLXRT_QMV_WARPS=$w"
    MLXRT_QMV_WARPS=$w MLXRT_CUDA_PROFILE=1 MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda \
      -p 0 -n 16 -r 1 2>&1 | grep -E "mat-vec|t/s|tg" | tee "$OUT/prof_w$w.log"
  done
  if has ncu && command -v ncu >/dev/null; then
    stamp "ncu: device time of one layer's kernels (eager)"
    MLXRT_CUDA_GRAPH=0 MLXRT_DECODER=1 timeout 150 ncu --launch-skip 1200 --launch-count 40 --metrics gpu__time_duration.sum \
      "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 3 -r 1 >"$OUT/ncu.log" 2>&1
    grep -E "^  [a-z_].*\(|gpu__time_duration" "$OUT/ncu.log" | paste - - | awk '{print $1, $(NF)}' | head -60
  fi
  stamp "bench tg128 with graphs"
  MLXRT_DECODER=1 timeout 120 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 512 -n 128 -r 2 ${BENCH_EXTRA:-} 2>&1 | tee "$OUT/bench31.log"
fi
if has pdl; then
  # MLXRT_CUDA_PDL_EARLY: 0 (wait, then trigger) against 1 (trigger, then wait); the logits
  # hash must not change, and the tiny fixtures must pass with either order.
  synth31 "$SYN/s31"
  for e in ${PDL_EARLY:-0 1}; do
    stamp "tiny fixtures, MLXRT_CUDA_PDL_EARLY=$e"
    tiny_check "tiny_early$e.log" MLXRT_CUDA_PDL_EARLY=$e
    stamp "bench tg128 at depths ${PDL_DEPTHS:-0,4096,32768}, MLXRT_CUDA_PDL_EARLY=$e"
    tg_depths "bench31_early$e.log" "${PDL_DEPTHS:-0,4096,32768}" 2 MLXRT_CUDA_PDL_EARLY=$e
  done
fi
if has chain; then
  stamp "product chain: a launch per product against one resident grid"
  timeout 180 "$BUILD/mlxrt-chain-bench" ${CHAIN_ARGS:-} >"$OUT/chain.log" 2>&1 || rc=1
  grep -E "^\||^chain|^checks|FAIL|mlxrt-chain" "$OUT/chain.log" | head -30
  stamp "product chain with the RMS norms inside (--norm)"
  timeout 180 "$BUILD/mlxrt-chain-bench" --norm ${CHAIN_ARGS:-} >"$OUT/chain_norm.log" 2>&1 || rc=1
  grep -E "^\||^chain|^checks|FAIL|mlxrt-chain" "$OUT/chain_norm.log" | head -30
fi
if has attnbench; then
  # decode attention alone on the 31B layer shapes: every split shape against a float64
  # attention on the host, then µs per call in a graph (tests/gpu/attention_bench.c); once per
  # setting in ATTNB_ENVS (VAR=V[,VAR=V...], e.g. "MLXRT_ATTN_SCORES=0 MLXRT_ATTN_SCORES=2"), or
  # once as the environment has it
  n=0
  for c in ${ATTNB_ENVS:-default}; do
    n=$((n + 1))
    ev=${c//,/ }
    [ "$c" = default ] && ev=
    stamp "attention bench ${ev:-(defaults)}"
    env $ev timeout 300 "$BUILD/mlxrt-attn-bench" >"$OUT/attn_bench$n.log" 2>&1 || rc=1
    sed -n '/^fastest/,/^$/p' "$OUT/attn_bench$n.log"
    tail -1 "$OUT/attn_bench$n.log"
  done
fi
if has ncuattnb && command -v ncu >/dev/null; then
  # ncu on mlxrt-attn-bench's one case per ATTNB_CASES entry (SHAPE:POS:SPLITS:MIN_KEYS): the
  # check run's kernels (scores, p·v, combine), stall reasons per issued instruction
  for c in ${ATTNB_CASES:-full:32767:128:1}; do
    IFS=: read -r cs cp cn cm <<<"$c"
    stamp "ncu: mlxrt-attn-bench --case $cs $cp $cn $cm"
    timeout 300 ncu --clock-control none -k "regex:${NCU_KREGEX:-(scores|pv|combine)_kernel}" -c 3 --section SpeedOfLight \
      --section LaunchStats --section Occupancy \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.sum \
      "$BUILD/mlxrt-attn-bench" --case "$cs" "$cp" "$cn" "$cm" >"$OUT/ncu_attnb_$cs$cp${NCU_TAG:-}.log" 2>&1
    grep -E "_kernel|Duration|DRAM Throughput|issue_active|warps_active|inst_executed|Registers Per|Achieved Occ|Theoretical Occ" \
      "$OUT/ncu_attnb_$cs$cp${NCU_TAG:-}.log" | sed 's/  */ /g' | head -40
    grep -E "issue_stalled" "$OUT/ncu_attnb_$cs$cp${NCU_TAG:-}.log" | awk '$NF > 0.3 {print $NF, $1}' | head -30
    if [ "${NCU_SOURCE:-0}" = 1 ]; then
      timeout 300 ncu --clock-control none -k "regex:${NCU_KREGEX:-(scores|pv|combine)_kernel}" -c 2 \
        --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
        "$BUILD/mlxrt-attn-bench" --case "$cs" "$cp" "$cn" "$cm" >"$OUT/ncu_src_$cs$cp${NCU_TAG:-}.csv" 2>&1
      wc -l "$OUT/ncu_src_$cs$cp${NCU_TAG:-}.csv"
    fi
  done
fi
if has pfattn; then
  # the prompt pass's attention alone (tests/gpu/pfattn_bench.c): the kinds in PFATTN_KINDS
  # against the host and against each other, µs and useful TFLOP/s; PFATTN_NCU (SHAPE:P0:T,
  # e.g. full:8192:512): ncu on that case for each kind
  PFATTN_KINDS=${PFATTN_KINDS:-0,6,9}
  stamp "prompt attention alone, kinds $PFATTN_KINDS"
  timeout 300 "$BUILD/mlxrt-pfattn-bench" --kinds "$PFATTN_KINDS" >"$OUT/pfattn.log" 2>&1 || rc=1
  cat "$OUT/pfattn.log"
  if [ -n "${PFATTN_NCU:-}" ] && command -v ncu >/dev/null; then
    IFS=: read -r cs cp ct <<<"$PFATTN_NCU"
    for k in ${PFATTN_NCU_KINDS:-${PFATTN_KINDS//,/ }}; do
      stamp "ncu: mlxrt-pfattn-bench --case $cs $cp $ct --kinds $k"
      timeout 300 ncu --clock-control none -k "regex:pa_" -c 1 --section SpeedOfLight --section Occupancy \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,sm__cycles_elapsed.avg.per_second \
        "$BUILD/mlxrt-pfattn-bench" --case "$cs" "$cp" "$ct" --kinds "$k" >"$OUT/ncu_pfattn_k$k.log" 2>&1
      grep -E "pa_|Duration|Throughput|Pipe|issue_active|Issue Slots|Eligible|Active Warps|inst_executed|cycles_elapsed|Registers Per|Achieved Occ|Bank" \
        "$OUT/ncu_pfattn_k$k.log" | sed 's/  */ /g' | head -50
      grep -E "issue_stalled" "$OUT/ncu_pfattn_k$k.log" | awk '$NF > 0.2 {print $NF, $1}' | head -20
    done
  fi
fi
if has probe; then
  stamp "bulk-copy streaming probe"
  timeout 120 "$BUILD/mlxrt-stream-probe" >"$OUT/probe.log" 2>&1 || rc=1
  cat "$OUT/probe.log"
fi
if has attn; then
  # decode attention's split shape: tg128 at depths 0/4096/32768 for each KEYS:BLOCKS:MAX in
  # ATTN_CONFIGS (MLXRT_ATTN_SPLIT_KEYS, MLXRT_ATTN_BLOCKS_PER_SM, MLXRT_ATTN_MAX_SPLITS)
  synth31 "$SYN/s31"
  for c in ${ATTN_CONFIGS:-64:4:128 32:8:256}; do
    IFS=: read -r ak ab am <<<"$c"
    stamp "bench tg128, attention splits of >= $ak keys, <= $ab blocks per SM, <= $am splits"
    tg_depths "bench31_attn_${ak}_${ab}_${am}.log" 0,4096,32768 1 MLXRT_ATTN_SPLIT_KEYS=$ak \
      MLXRT_ATTN_BLOCKS_PER_SM=$ab MLXRT_ATTN_MAX_SPLITS=$am
  done
fi
if has onepass; then
  # the one-pass decode attention (MLXRT_ATTN_ONEPASS=1, an experiment): the tiny fixtures
  # against the CPU reference and the 6-layer 31B (a 600-token prompt, so decode steps run many
  # splits) against the reference path on CUDA, with it on; then tg128 without and with it
  stamp "one-pass attention: tiny fixtures"
  tiny_check onepass_tiny.log MLXRT_ATTN_ONEPASS=1
  synth31 "$SYN/s31x6" --layers 6
  stamp "one-pass attention: 6-layer 31B, 600-token prompt"
  MLXRT_ATTN_ONEPASS=1 timeout 300 "$DT" --ref cuda --prompt 600 --gen 8 --tg 0 "$SYN/s31x6" 2>&1 |
    tee "$OUT/onepass_s31x6.log" | grep -E "noise|logits|PASS|FAIL" || rc=1
  synth31 "$SYN/s31"
  for e in 0 1; do
    stamp "bench tg128 at depths ${ONEPASS_DEPTHS:-0,4096,32768}, MLXRT_ATTN_ONEPASS=$e"
    tg_depths "bench31_onepass$e.log" "${ONEPASS_DEPTHS:-0,4096,32768}" 1 MLXRT_ATTN_ONEPASS=$e
  done
fi
if has clusterchk; then
  stamp "one-launch attention alone"
  MLXRT_ATTN_CLUSTER=1 timeout 200 "$BUILD/mlxrt-attn-bench" >"$OUT/clchk_bench.log" 2>&1 || rc=1
  grep -E "FAIL|maxima|passed" "$OUT/clchk_bench.log" | head -8
  grep -E "^\| [0-9]" "$OUT/clchk_bench.log" | tr '\n' ' ' | sed 's/$/\n/'
  stamp "one-launch attention alone, K and V staged in shared memory"
  MLXRT_ATTN_CLUSTER=1 MLXRT_ATTN_CLUSTER_STAGE=1 timeout 200 "$BUILD/mlxrt-attn-bench" >"$OUT/clchk_bench_stage.log" 2>&1 || rc=1
  grep -E "FAIL|maxima|passed|at once" "$OUT/clchk_bench_stage.log" | head -8
  grep -E "^\| [0-9]" "$OUT/clchk_bench_stage.log" | tr '\n' ' ' | sed 's/$/\n/'
  stamp "one-launch attention alone, K and then V staged in one buffer"
  MLXRT_ATTN_CLUSTER=1 MLXRT_ATTN_CLUSTER_STAGE=2 timeout 200 "$BUILD/mlxrt-attn-bench" >"$OUT/clchk_bench_stage2.log" 2>&1 || rc=1
  grep -E "FAIL|maxima|passed|at once" "$OUT/clchk_bench_stage2.log" | head -8
  grep -E "^\| [0-9]" "$OUT/clchk_bench_stage2.log" | tr '\n' ' ' | sed 's/$/\n/'
  for m in 3 4; do
    stamp "one-launch attention alone, clusters of 16 blocks (mode $m)"
    MLXRT_ATTN_CLUSTER=1 MLXRT_ATTN_CLUSTER_STAGE=$m timeout 200 "$BUILD/mlxrt-attn-bench" >"$OUT/clchk_bench_stage$m.log" 2>&1 || rc=1
    grep -E "FAIL|maxima|passed|at once" "$OUT/clchk_bench_stage$m.log" | head -8
    grep -E "^\| [0-9]" "$OUT/clchk_bench_stage$m.log" | tr '\n' ' ' | sed 's/$/\n/'
  done
  stamp "tiny fixtures with the one-launch attention's knobs"
  tiny_check clchk_tiny_cross.log MLXRT_ATTN_CLUSTER_KEYS=20
  tiny_check clchk_tiny_cross_st0.log MLXRT_ATTN_CLUSTER_KEYS=20 MLXRT_ATTN_CLUSTER_STAGE=0
  tiny_check clchk_tiny_cross_st3.log MLXRT_ATTN_CLUSTER_KEYS=20 MLXRT_ATTN_CLUSTER_STAGE=3
  tiny_check clchk_tiny_cross_st7.log MLXRT_ATTN_CLUSTER_KEYS=20 MLXRT_ATTN_CLUSTER_STAGE=7
  tiny_check clchk_tiny_cross_st15.log MLXRT_ATTN_CLUSTER_KEYS=20 MLXRT_ATTN_CLUSTER_STAGE=15
  tiny_check clchk_tiny_cross_st27.log MLXRT_ATTN_CLUSTER_KEYS=20 MLXRT_ATTN_CLUSTER_STAGE=27
  tiny_check clchk_tiny_cross_post.log MLXRT_ATTN_CLUSTER_KEYS=20 MLXRT_ATTN_CLUSTER_POST=1
  tiny_check clchk_tiny_pull.log MLXRT_NORM_PUSH=0
  tiny_check clchk_tiny_noepi.log MLXRT_GEGLU_EPI=0
  tiny_check clchk_tiny_nofix.log MLXRT_NORM_FIXEXP=0
  tiny_check clchk_tiny_ofix.log MLXRT_ATTN_FIXEXP=0 MLXRT_ATTN_PREFETCH=2
fi
if has ab; then
  synth31 "$SYN/s31"
  n=0
  last=""
  # no AB_CONFIGS: one run with the defaults (MLXRT_DECODER=1 is what tg_depths sets anyway)
  for c in ${AB_CONFIGS:-MLXRT_DECODER=1}; do
    n=$((n + 1))
    stamp "bench tg128 at depths ${AB_DEPTHS:-0}, ${c//,/ }"
    tg_depths "bench31_ab$n.log" "${AB_DEPTHS:-0}" "${AB_REPS:-2}" ${c//,/ }
    last=$c
  done
  if [ -n "$last" ] && [ ! -x "$DT" ]; then
    stamp "tiny fixtures skipped: $DT not built (BUILD_TARGETS)"
  elif [ -n "$last" ]; then
    stamp "tiny fixtures with ${last//,/ }"
    tiny_check tiny_ab.log ${last//,/ }
  fi
fi
if has pfab; then
  # the batched prompt pass A/B: pp512 at depths PFAB_DEPTHS (default 32768) for each setting in
  # PFAB_CONFIGS (as AB_CONFIGS), one repetition each
  synth31 "$SYN/s31"
  n=0
  for c in ${PFAB_CONFIGS:-}; do
    n=$((n + 1))
    stamp "bench pp512 at depths ${PFAB_DEPTHS:-32768}, ${c//,/ }"
    env ${c//,/ } MLXRT_DECODER=1 timeout 500 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 512 -n 0 \
      -d "${PFAB_DEPTHS:-32768}" -r "${PFAB_REPS:-1}" 2>&1 | tee "$OUT/pfab$n.log" | grep -E "pp512|hash"
  done
fi
if has abrev; then
  if [ ! -f .gpu-carry/rev.tar.gz ]; then
    echo "abrev: no .gpu-carry/rev.tar.gz (run scripts/pack_rev.sh REV on the CPU machine)"
    rc=1
  else
    REVSRC=/tmp/mlxrt-rev
    rm -rf "$REVSRC" && mkdir -p "$REVSRC" && tar -xzf .gpu-carry/rev.tar.gz -C "$REVSRC"
    ln -sfn "$ROOT/.debs" "$REVSRC/.debs"
    stamp "build of the earlier commit $(cat .gpu-carry/rev.txt 2>/dev/null)"
    if (cd "$REVSRC" && source scripts/gpu_build.sh && gpu_build "$REVSRC/build" "$OUT/build_rev.log" mlxrt mlxrt_cuda); then
      synth31 "$SYN/s31"
      for i in 1 2; do
        stamp "bench tg128 at depths ${AB_DEPTHS:-0}: this tree"
        tg_depths "bench31_abrev_new$i.log" "${AB_DEPTHS:-0}" 2
        stamp "bench tg128 at depths ${AB_DEPTHS:-0}: $(cat .gpu-carry/rev.txt 2>/dev/null | cut -c1-12)"
        MLXRT_BIN="$REVSRC/build/mlxrt" tg_depths "bench31_abrev_old$i.log" "${AB_DEPTHS:-0}" 2
      done
    else
      rc=1
    fi
  fi
fi
if has timeline; then
  synth31 "$SYN/s31"
  for d in ${TL_DEPTHS:-0 32768}; do
    stamp "in-graph timeline, tg64 at depth $d"
    MLXRT_CUDA_TIMELINE=${TL_MODE:-1} MLXRT_DECODER=1 timeout "${TG_TIMEOUT:-240}" "$BUILD/mlxrt" bench -m "$SYN/s31" \
      --backend cuda -p 0 -n 64 -r 1 -d "$d" ${TG_EXTRA:-} >"$OUT/timeline_d$d.log" 2>&1 || rc=1
    grep -E "tg64" "$OUT/timeline_d$d.log"
    sed -n '/timeline of the graph replays/,/^$/p' "$OUT/timeline_d$d.log" | head -60
  done
fi
if has ncuattn && command -v ncu >/dev/null; then
  synth31 "$SYN/s31"
  for e in 0 1; do
    stamp "ncu: full-layer decode attention at depth ${ATTN_DEPTH:-32768}, MLXRT_ATTN_ONEPASS=$e"
    MLXRT_ATTN_ONEPASS=$e MLXRT_DECODER=1 timeout 300 ncu --clock-control none \
      -k 'regex:(scores_kernel|pv_kernel|onepass_kernel)ILi8' --launch-skip 2 -c 4 --section SpeedOfLight \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active \
      "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 2 -r 1 -d "${ATTN_DEPTH:-32768}" \
      >"$OUT/ncu_attn_onepass$e.log" 2>&1
    grep -E "_kernel|Duration|DRAM Throughput|issue_active|warps_active" "$OUT/ncu_attn_onepass$e.log" | sed 's/  */ /g' | head -40
    grep -E "issue_stalled" "$OUT/ncu_attn_onepass$e.log" | awk '$NF > 0.5 {print $NF, $1}' | head -24
  done
fi
if has ncuqmv && command -v ncu >/dev/null; then
  for f in nvfp4-down nvfp4 affine4-down affine4; do
    stamp "ncu stall reasons: $f"
    timeout 120 ncu --clock-control none -k regex:qmv_tc_kernel -c 1 --section SpeedOfLight --section Occupancy \
      --section InstructionStats \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_hmma.sum \
      "$BUILD/mlxrt-cuda-test" --profile $f >"$OUT/ncu_$f.log" 2>&1
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|issue_active|warps_active|per_second" "$OUT/ncu_$f.log" | sed 's/  */ /g'
    # warp instructions per mma (the one-row kernels: 8 mmas per pair of units, ~14 per mma in
    # the SASS of a full stage): more means instructions outside the pairs (waits' retries)
    awk '/smsp__inst_executed.sum/ {i = $NF} /pipe_tensor_op_hmma.sum/ {h = $NF}
         END {gsub(",", "", i); gsub(",", "", h); if (h > 0) printf "instructions %s, mmas %s: %.1f per mma\n", i, h, i / h}' \
      "$OUT/ncu_$f.log"
    grep -E "issue_stalled" "$OUT/ncu_$f.log" | awk '{print $NF, $1}' | sort -rn | head -8
  done
fi
if has ncuchain && command -v ncu >/dev/null; then
  # instructions per mma (8 mmas per pair of units) and stall reasons: each chain configuration
  # (4 layers), then the one-launch kernel on 21504->5376 for comparison
  NCU_M=regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_hmma.sum
  ncu_summary() {
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|issue_active|warps_active|per_second" "$1" | sed 's/  */ /g'
    awk '/smsp__inst_executed.sum/ {i = $NF} /pipe_tensor_op_hmma.sum/ {h = $NF}
         END {gsub(",", "", i); gsub(",", "", h); if (h > 0) printf "instructions %s, mmas %s: %.1f per mma\n", i, h, i / h}' "$1"
    grep -E "issue_stalled" "$1" | awk '{print $NF, $1}' | sort -rn | head -6
  }
  for c in ${NCU_CHAIN_CFGS:-8:1:2:0 8:1:2:1}; do
    stamp "ncu: chain $c"
    timeout 120 ncu --clock-control none -k regex:chain_kernel -c 1 --section SpeedOfLight --section Occupancy \
      --metrics "$NCU_M" "$BUILD/mlxrt-chain-bench" --layers 4 --reps 1 --no-cpu --configs "$c" >"$OUT/ncu_chain_${c//:/_}.log" 2>&1
    ncu_summary "$OUT/ncu_chain_${c//:/_}.log"
  done
  stamp "ncu: one-launch nvfp4 21504->5376"
  timeout 120 ncu --clock-control none -k regex:qmv_tc_kernel -c 1 --section SpeedOfLight --section Occupancy \
    --metrics "$NCU_M" "$BUILD/mlxrt-cuda-test" --profile nvfp4-down >"$OUT/ncu_chain_qmv.log" 2>&1
  ncu_summary "$OUT/ncu_chain_qmv.log"
fi
if has profd; then
  # where the step's time goes at depth (eager launches, per-kernel table)
  synth31 "$SYN/s31"
  stamp "profile (eager, 8 steps) at depth ${PROF_DEPTH:-32768}"
  MLXRT_CUDA_PROFILE=1 MLXRT_DECODER=1 timeout 200 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 0 -n 8 -r 1 \
    -d "${PROF_DEPTH:-32768}" >"$OUT/prof_d${PROF_DEPTH:-32768}.log" 2>&1 || rc=1
  cat "$OUT/prof_d${PROF_DEPTH:-32768}.log"
fi
if has prefill || has prefill_check; then
  if [ "${PREFILL_SELFTEST:-1}" != 0 ]; then
    stamp "prefill: GPU self-test (kernels, pf_dequant bit-exact, cuBLAS GEMM on it)"
    timeout 300 "$BUILD/mlxrt-cuda-test" --no-bench >"$OUT/prefill_selftest.log" 2>&1 || rc=1
    grep -E "^FAIL|checks," "$OUT/prefill_selftest.log" | head -20
  fi
  stamp "prefill: tiny fixtures, every prompt-pass configuration and rewinds"
  timeout 300 "$DT" --ref cpu --prompt 40 --gen 16 --tg 0 --prefill 1 "${ROOT}"/tests/fixtures/models/gemma* \
    >"$OUT/prefill_tiny.log" 2>&1 || rc=1
  grep -cE "^  prefill .*: PASS" "$OUT/prefill_tiny.log" | sed 's/^/prefill checks passed: /'
  grep -E "FAIL|differ at" "$OUT/prefill_tiny.log" | head -60
  stamp "prefill: synth gemma4-31b $MODE, 6 layers, 600-token prompt"
  synth31 "$SYN/s31x6" --layers 6
  timeout 400 "$DT" --ref cuda --prompt 600 --gen 8 --tg 0 --prefill 2 "$SYN/s31x6" 2>&1 | tee "$OUT/prefill_s31x6.log" || rc=1
fi
if has deepchk; then
  # the deep contexts' p·v graph: the tiny fixtures crossing all three body graphs (one-cluster,
  # split, deep), then the 6-layer 31B with a 600-token prompt against the reference path on CUDA,
  # its decode steps crossing into the deep graph after four tokens
  stamp "deep p·v graph: tiny fixtures crossing the three body graphs"
  tiny_check deep_tiny.log MLXRT_ATTN_CLUSTER_KEYS=8 MLXRT_ATTN_PV_DEEP_KEYS=20
  stamp "deep p·v graph: synth gemma4-31b $MODE, 6 layers, 600-token prompt, deep from 604 keys"
  synth31 "$SYN/s31x6" --layers 6
  env ${DEEP_ENV:-} MLXRT_ATTN_PV_DEEP_KEYS=604 timeout 400 "$DT" --ref cuda --prompt 600 --gen 8 --tg 0 --prefill 2 "$SYN/s31x6" 2>&1 |
    tee "$OUT/deep_s31x6.log" || rc=1
fi
if has prefill || has prefill_bench; then
  stamp "prefill: synth gemma4-31b $MODE, 60 layers"
  synth31 "$SYN/s31"
  MLXRT_CUDA_PROFILE=1 MLXRT_DECODER=1 timeout 200 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 512 -n 0 -r 1 \
    >"$OUT/prefill_prof.log" 2>&1 || rc=1
  cat "$OUT/prefill_prof.log"
  MLXRT_DECODER=1 timeout 300 "$BUILD/mlxrt" bench -m "$SYN/s31" --backend cuda -p 512 -n 0 -d 0,4096 -r 3 2>&1 |
    tee "$OUT/prefill_bench31.log"
fi
stamp "done, rc=$rc"
# PACK=DIR: every log of $OUT (not the build logs' full text) in one DIR/logs.tgz — a device
# call returns at most 8 files
if [ -n "${PACK:-}" ]; then
  mkdir -p "$PACK"
  tar czf "$PACK/logs.tgz" -C "$OUT" . && echo "packed $(ls "$OUT" | wc -l) files into $PACK/logs.tgz"
fi
exit $rc
