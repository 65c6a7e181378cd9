/* The prompt pass's causal attention (pf_attention) on the warpgroup tensor cores (sm_90a
 * wgmma), with the rounding points of the mma.sync kernel — q·bf16(scale) → bf16, scores →
 * bf16, a float32 softmax whose p = bf16(exp(s − M)·(1/Σ)) uses the final max and sum (so two
 * passes over the keys), Σ p·v in float32 → bf16.
 *
 * A block is 64 queries of one head and two warpgroups; a key tile is 64 keys. Each warpgroup
 * owns half of the head dim: in the scores it multiplies its half of Q by its half of K
 * (wgmma m64n64k16, both from shared memory), and the two partial score tiles meet in shared
 * memory, warpgroup H completing the scores of keys 32H … 32H + 31 and making their softmax
 * (each row's (max, sum) over both halves combined once after pass 1). In pass 2 each forms its
 * half of p in registers, hands it to the other through shared memory, and accumulates O for
 * its half of the output columns with p as the register A operand (m64n{hd/2}k16, V from shared
 * memory as an N-major B). Shared memory: Q, one K tile, one V tile, the exchange area — 224 KB
 * at head dim 512 — so pass 2 overlaps the copies across its phases (V of tile i lands during
 * tile i's scores, K of tile i + 1 during tile i's p·v), and pass 1 (K only) alternates two
 * buffers. A full layer at depth 32768 runs 2.23x the mma.sync kernel (pp512 +49.9 %).
 *
 * Over a compressed K (planar3 / planar4, KF) the K tiles are decoded from the blocks into fp16
 * in the rotated domain (pw_tile_decode) while the tensor cores work on the tile before, and the
 * query is rotated and rounded to fp16 (the scores are fp16 products summed in float32; p·v and
 * the roundings after the scores are the bf16 cache's). At depth 131072 on an H100 a full layer's
 * chunk of 512 takes 54 ms against 24.5 ms over bf16 K and 477 ms in the block-per-query kernel
 * (prefill_attn_planar.cu); decoding to bf16 with a float multiply per value took 80 ms: the
 * decode's ALU work bounds it, so a pair of values is one table load and one HMUL2.
 *
 * The mma.sync kernel (prefill_attn.cu) uses 16 × 8 warp tiles; this one sums
 * each score over the head dim in another grouping, so its bits differ from theirs (a bf16
 * rounding of a score may land the other way), not its math. Head dims 128, 256 and 512. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

#include <atomic>
#include <type_traits>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "ck_mma.cuh"
#include "attention_planar.cuh"
#include "ck_wgmma.cuh"
#include "prefill_attn_common.cuh"
#include "prefill_kernels.h"
#include "qmv_tc.cuh" /* fence_proxy_async_smem */

#define PW_QT 64 /* queries per block */
#define PW_KT 64 /* keys per tile */

template <int HD>
struct PwShape {
  static constexpr int HALF = HD / 2;       /* a warpgroup's columns */
  static constexpr int CB = HALF / 64;      /* its 128-byte column blocks */
  static constexpr int KS = HALF / 16;      /* its k steps of the scores */
  static constexpr int OREG = HALF / 2;     /* its accumulator registers per thread for O */
  static constexpr uint32_t QB = PW_QT * HD * 2, TB = PW_KT * HD * 2;
  static constexpr uint32_t XB = 2 * 128 * 32 * 4; /* the partial scores, [warpgroup][reg / 4][thread][4] */
  static constexpr size_t SMEM = QB + 2 * TB + XB + 1024; /* + the 1024-byte alignment of the atoms */
};

/* Rows k0 … k0 + 63 of K or V (rows kvd apart) into a swizzled tile; rows past hi zeroed. Thread i
 * of 256 copies 16-byte column c = i % (HD/8) of rows i / (HD/8), + 256/(HD/8), …, from element col
 * of each row (pw_kernel's kcol / vcol: K's 8c of the KV head, V's where the layout keeps them).
 * A tile whose rows are all live keys of one contiguous run — all in the chunk, or all in the
 * cache without a ring wrap (every tile but a chunk's first and last few) — takes the fast path:
 * one pointer step and one copy per row, no per-row tests (the per-row form cost as much as the
 * softmax). Otherwise a sliding layer's ring slot comes from the
 * tile's first one (one division per tile). */
template <int HD>
__device__ __forceinline__ void pw_tile_load(unsigned char *dst, const uint16_t *cache, const uint16_t *chunk, int64_t k0,
                                             int64_t hi, int64_t p0, int window, int64_t kvd, int col) {
  constexpr int CPR = HD / 8, RSTEP = 256 / CPR, NR = PW_KT / RSTEP;
  static_assert(256 % CPR == 0 && PW_KT % RSTEP == 0, "whole rows per pass of the threads");
  const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
  const int64_t klast = k0 + PW_KT - 1;
  const int64_t s0 = window > 0 ? k0 % ck_ring(window) : 0;
  const uint16_t *run = nullptr;
  if (klast <= hi) {
    if (k0 >= p0)
      run = chunk + (k0 - p0) * kvd;
    else if (klast < p0 && (window == 0 || s0 + PW_KT <= ck_ring(window)))
      run = cache + (window > 0 ? s0 : k0) * kvd;
  }
  if (run) {
    /* rows r0 + k·RSTEP: the swizzle's row bits repeat every 8 rows, so two offsets serve */
    const uint32_t d0 = wg_off(PW_KT, r0, c * 8), d1 = wg_off(PW_KT, r0 + RSTEP, c * 8) - RSTEP * 128;
    const uint16_t *src = run + col + (int64_t)r0 * kvd;
    const int64_t step = (int64_t)RSTEP * kvd;
#pragma unroll
    for (int k = 0; k < NR; k++) {
      at_cp16(dst + ((RSTEP % 8 == 0 || !(k & 1)) ? d0 : d1) + (uint32_t)(k * RSTEP * 128), src);
      src += step;
    }
    return;
  }
  const uint16_t *cache_c = cache + col, *chunk_c = chunk + col;
#pragma unroll
  for (int k = 0; k < NR; k++) {
    const int r = r0 + k * RSTEP;
    const int64_t j = k0 + r;
    unsigned char *d = dst + wg_off(PW_KT, r, c * 8);
    if (j > hi)
      *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    else
      at_cp16(d, pa_tile_row<PW_KT>(cache_c, chunk_c, j, r, s0, p0, window, kvd));
  }
}

/* the block's 64 query rows of head h as bf16(q·bf16(scale)), swizzled; padding rows repeat the
 * last valid query. Over a compressed K (KF 3 / 4) each pair is turned by the codec's rotation
 * and rounded to fp16 instead (the keys are scored in the rotated domain, attention_planar.cuh,
 * as fp16 tiles: pw_tile_decode). */
template <int HD, int KF>
__device__ __forceinline__ void pw_stage_q(unsigned char *Qs, const PaArgs &a, int q0, int h, int nvalid) {
  constexpr int CPR = HD / 8;
  const int64_t qstride = (int64_t)a.nq * HD;
  const float bscale = rb(a.scale);
  for (int i = threadIdx.x; i < PW_QT * CPR; i += 256) {
    const int r = i / CPR, c = i % CPR;
    const int tok = q0 + (r < nvalid ? r : nvalid - 1);
    const float4 *src = reinterpret_cast<const float4 *>(a.q + tok * qstride + (int64_t)h * HD + c * 8);
    const float4 x0 = src[0], x1 = src[1];
    float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      float u0 = v[e], u1 = v[e + 1];
      if (a.scale != 1.0f) u0 = rb(__fmul_rn(u0, bscale)), u1 = rb(__fmul_rn(u1, bscale));
      if (KF) {
        const int p = ((c * 8 + e) % KVC_BLOCK) / 2;
        kvc_rotate(a.kv.kt->cos[p], a.kv.kt->sin[p], u0, u1, &u0, &u1);
        w[e / 2] = (uint32_t)ck_f32_to_f16(u0) | (uint32_t)ck_f32_to_f16(u1) << 16;
      } else {
        w[e / 2] = (uint32_t)ck_f32_to_bf16(u0) | (uint32_t)ck_f32_to_bf16(u1) << 16;
      }
    }
    *reinterpret_cast<uint4 *>(Qs + wg_off(PW_QT, r, c * 8)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/* Keys k0 … k0 + 63 of KV head gkv from a compressed K cache (planar3 / planar4 blocks, kv_layout.h
 * kfmt; rows kps bytes apart) decoded into a swizzled fp16 tile in the rotated domain: value i of
 * a block is fp16(n'·fp16(C[code_i])), with the block's stored fp16 n' — a pair of values is one
 * table load and one HMUL2 (pc_stage_pairs). The scores multiply it by the rotated query in
 * fp16 (pw_stage_q), float32 sums: q·x̂ of attention_planar.cuh's float32 form up to the fp16
 * roundings of q, C and the product (fp16: 3 more bits than the bf16 cache's keys). Rows past
 * hi zeroed. Thread i of 256 takes the 8 values of column chunk c = i % (HD/8) in rows
 * i / (HD/8) + k·256/(HD/8): lanes 2c', 2c' + 1 of block c / 16 (c' = c mod 16), so its bytes are
 * one 16-bit word and a signs byte (planar3) or one 32-bit word (planar4) per row. Every load of
 * the tile is issued before the first value is formed. */
template <int HD, int KF>
__device__ __forceinline__ void pw_tile_decode(unsigned char *dst, const uint8_t *kc, int64_t k0, int64_t hi,
                                               int64_t kps, int64_t koff, const uint32_t *pairs) {
  static_assert(KF == 3 || KF == 4, "planar3 or planar4");
  constexpr int CPR = HD / 8, RSTEP = 256 / CPR, NR = PW_KT / RSTEP;
  constexpr int BB = KF == 3 ? KVC_P3_BYTES : KVC_P4_BYTES, CPB = KVC_BLOCK / 8; /* chunks per block */
  const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR, cc = c % CPB;
  const uint8_t *base = kc + koff + (int64_t)(c / CPB) * BB + k0 * kps + (int64_t)r0 * kps;
  uint32_t code[NR], nrm[NR];
#pragma unroll
  for (int k = 0; k < NR; k++) {
    const uint8_t *blk = base + (int64_t)k * RSTEP * kps;
    const bool live = k0 + r0 + k * RSTEP <= hi;
    nrm[k] = live ? *reinterpret_cast<const uint16_t *>(blk) : 0u;
    code[k] = live ? pc_code8<KF>(blk, cc) : 0u;
  }
  const uint32_t d0 = wg_off(PW_KT, r0, c * 8), d1 = wg_off(PW_KT, r0 + RSTEP, c * 8) - RSTEP * 128;
#pragma unroll
  for (int k = 0; k < NR; k++) {
    const uint32_t n2 = nrm[k] * 0x10001u, q = code[k]; /* a dead row: n' = 0, all zero */
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 4; e++) /* values 2e, 2e + 1 */
      w[e] = pc_hmul2(n2, pairs[pc_pair_index<KF>(q, e)]);
    *reinterpret_cast<uint4 *>(dst + ((RSTEP % 8 == 0 || !(k & 1)) ? d0 : d1) + (uint32_t)(k * RSTEP * 128)) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/* This warpgroup's partial scores of a key tile: its half of Q times its half of K, issued (acc
 * is written asynchronously: wg_wait, then wg_pin, before reading it) ... */
template <int HD, bool F16 = false>
__device__ __forceinline__ void pw_scores_issue(float (&acc)[32], uint32_t q_s, uint32_t k_s, int wg) {
  using S = PwShape<HD>;
#pragma unroll
  for (int i = 0; i < 32; i++) acc[i] = 0.f;
  wg_pin(acc);
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < S::KS; kk++) {
    const uint32_t cb = (uint32_t)(wg * S::CB + kk / 4), ko = (uint32_t)(kk % 4) * 32u;
    const uint64_t da = wg_desc(q_s + cb * (PW_QT * 128) + ko, 16), db = wg_desc(k_s + cb * (PW_KT * 128) + ko, 16);
    if (F16)
      wg_mma_ss_f16<64>(acc, da, db, 1);
    else
      wg_mma_ss<64>(acc, da, db, 1);
  }
  wg_commit();
}
/* ... or issued and waited for */
template <int HD, bool F16 = false>
__device__ __forceinline__ void pw_scores(float (&acc)[32], uint32_t q_s, uint32_t k_s, int wg) {
  pw_scores_issue<HD, F16>(acc, q_s, k_s, wg);
  wg_wait<0>();
  wg_pin(acc);
}

/* The scores of this warpgroup's key half H (score registers 16H … 16H + 15, keys 32H …) in full:
 * each warpgroup publishes its partial sums of the other's half, then adds the other's partial
 * sums of its own. Ends with every warpgroup's wgmma of this tile complete: the K buffer is free. */
template <int H>
__device__ __forceinline__ void pw_exchange(float (&acc)[32], float *X) {
  const int wt = threadIdx.x & 127;
  float4 *mine = reinterpret_cast<float4 *>(X) + (H * 4) * 128 + wt;
  const float4 *theirs = reinterpret_cast<const float4 *>(X) + ((1 - H) * 4) * 128 + wt;
  constexpr int OTHER = 16 * (1 - H), OWN = 16 * H;
#pragma unroll
  for (int i = 0; i < 4; i++)
    mine[i * 128] = make_float4(acc[OTHER + 4 * i], acc[OTHER + 4 * i + 1], acc[OTHER + 4 * i + 2], acc[OTHER + 4 * i + 3]);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float4 o = theirs[i * 128];
    acc[OWN + 4 * i] += o.x, acc[OWN + 4 * i + 1] += o.y, acc[OWN + 4 * i + 2] += o.z, acc[OWN + 4 * i + 3] += o.w;
  }
}

/* Pass 1's step for one row over this thread's 8 scores of its key half (registers 4j + 2r + u, j
 * in 4H … 4H + 3): their max first, then the running sum rescaled once and the 8 terms added as
 * a tree — no chain of dependent steps with an expf each (pa_push's form, kinds 0–8). */
template <int H, class Score>
__device__ __forceinline__ void pw_row_push(float &m, float &l, int r, Score score) {
  float sv[8];
#pragma unroll
  for (int j = 0; j < 4; j++) sv[2 * j] = score(4 * (4 * H + j) + 2 * r), sv[2 * j + 1] = score(4 * (4 * H + j) + 2 * r + 1);
  const float mt = fmaxf(fmaxf(fmaxf(sv[0], sv[1]), fmaxf(sv[2], sv[3])), fmaxf(fmaxf(sv[4], sv[5]), fmaxf(sv[6], sv[7])));
  if (mt == -INFINITY) return; /* every key of the half masked for this row */
  if (mt > m) {
    if (m != -INFINITY) l = __fmul_rn(l, expf(__fsub_rn(m, mt)));
    m = mt;
  }
  float e[8];
#pragma unroll
  for (int q = 0; q < 8; q++) e[q] = expf(__fsub_rn(sv[q], m)); /* a masked −∞ gives 0 */
  l = __fadd_rn(l, __fadd_rn(__fadd_rn(__fadd_rn(e[0], e[1]), __fadd_rn(e[2], e[3])),
                             __fadd_rn(__fadd_rn(e[4], e[5]), __fadd_rn(e[6], e[7]))));
}

/* grid (ceil(T / 64), nq), 256 threads. KF 3 / 4: K in planar3 / planar4 blocks, every key from
 * the cache (a.kc as bytes; the chunk's own were encoded there), decoded tile by tile while the
 * tensor cores work on the tile before (pass 1: the scores of tile it; pass 2: its p·v). */
template <int HD, bool KFV, int KF>
__global__ void __launch_bounds__(256, 1) pw_kernel(PaArgs a) {
  using S = PwShape<HD>;
  static_assert(!(KFV && KF), "K from V has plain K");
  CK_DYNAMIC_SHARED(unsigned char, pw_raw);
  __shared__ uint32_t pairs[KF ? 256 : 1]; /* (KF) the codebook's pairs, pc_stage_pairs */
  const uint32_t raw_s = ck_smem_off(pw_raw);
  unsigned char *Qs = pw_raw + (((raw_s + 1023u) & ~1023u) - raw_s);
  unsigned char *Kb = Qs + S::QB, *Vb = Kb + S::TB;
  float *X = reinterpret_cast<float *>(Vb + S::TB);
  const uint32_t q_s = ck_smem_off(Qs), k_s = ck_smem_off(Kb), v_s = ck_smem_off(Vb);
  const int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, gkv = h / (a.nq / a.nkv), q0 = blockIdx.x * PW_QT;
  const int64_t qstride = (int64_t)a.nq * HD;
  const int nvalid = a.T - q0 < PW_QT ? a.T - q0 : PW_QT;
  const int64_t lo_blk = pa_lo(a.p0 + q0, a.window), hi_blk = a.p0 + q0 + nvalid - 1;
  const int ntiles = (int)((hi_blk - lo_blk + PW_KT) / PW_KT);
  /* this thread's rows 16w + g (+ 8): the last key each sees and its first, as offsets from lo_blk */
  int prr[2], lor[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = 16 * w + g + 8 * r;
    const int64_t p = a.p0 + q0 + (row < nvalid ? row : nvalid - 1);
    prr[r] = (int)(p - lo_blk);
    lor[r] = (int)(pa_lo(p, a.window) - lo_blk);
  }
  /* tiles inside [full_lo, full_hi] are seen whole by every row: no mask */
  const int full_lo = (int)(pa_lo(hi_blk, a.window) - lo_blk), full_hi = (int)(a.p0 + q0 - lo_blk);
  auto masked = [&](int it) { return it * PW_KT < full_lo || it * PW_KT + PW_KT - 1 > full_hi; };
  /* score register i: row 16w + g + 8·((i >> 1) & 1), key 8·(i >> 2) + 2t + (i & 1) of the tile */
  auto score = [&](const float (&acc)[32], int i, int it, bool msk) {
    const int r = (i >> 1) & 1, j = it * PW_KT + 8 * (i >> 2) + 2 * t + (i & 1);
    return msk && (j > prr[r] || j < lor[r]) ? -INFINITY : pa_rb(acc[i]);
  };
  /* this thread's column of K and of V in a row (pw_tile_load's c; with K from V, V's moved dims
   * in the tail) */
  const int c8 = (int)(threadIdx.x % (HD / 8)) * 8, kcol = gkv * HD + c8, vcol = KFV ? pa_vcol(a, HD, gkv, c8) : kcol;
  /* K (a.kc, a.kch) of tile it, and V (a.vc, a.vch: with K from V the same arrays, other columns) */
  auto load = [&](unsigned char *dst, const uint16_t *cache, const uint16_t *chunk, int it) {
    pw_tile_load<HD>(dst, cache, chunk, lo_blk + (int64_t)it * PW_KT, hi_blk, a.p0, a.window, a.kv.ps, kcol);
  };
  auto load_v = [&](unsigned char *dst, int it) {
    pw_tile_load<HD>(dst, a.vc, a.vch, lo_blk + (int64_t)it * PW_KT, hi_blk, a.p0, a.window, a.kv.ps, vcol);
  };
  const int64_t koff = KF ? (int64_t)gkv * (HD / KVC_BLOCK) * dk_kv_block_bytes(KF) : 0;
  auto decode = [&](unsigned char *dst, int it) {
    if constexpr (KF != 0)
      pw_tile_decode<HD, KF>(dst, reinterpret_cast<const uint8_t *>(a.kc), lo_blk + (int64_t)it * PW_KT, hi_blk,
                             a.kv.kps, koff, pairs);
  };

  if constexpr (KF != 0) {
    pc_stage_pairs<KF>(a.kv.kt, pairs);
    __syncthreads();
  }
  pw_stage_q<HD, KF>(Qs, a, q0, h, nvalid);
  /* X: the partial scores [warpgroup][4][thread] float4 (16 KB), then the p fragments
   * [warpgroup][thread] 2 × uint4 (8 KB) */
  uint4 *PX = reinterpret_cast<uint4 *>(X + 2 * 4 * 128 * 4);
  /* Warpgroup H makes the softmax of keys 32H … 32H + 31 of every tile (score registers 16H …), so
   * each thread forms half of a tile's p; both multiply all of p by their V columns. */
  auto run = [&](auto half) {
    constexpr int H = decltype(half)::value;
    /* pass 1: row max and Σ exp(s − max) over this key half, K tiles alternating between the two
     * buffers */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    auto push = [&](const float (&acc)[32], int it) {
      const bool msk = masked(it);
#pragma unroll
      for (int r = 0; r < 2; r++) pw_row_push<H>(m[r], l[r], r, [&](int i) { return score(acc, i, it, msk); });
    };
    if (KF) { /* tile it + 1 decoded while the tensor cores score tile it */
      decode(Kb, 0);
      for (int it = 0; it < ntiles; it++) {
        fence_proxy_async_smem(); /* this thread's writes (tile it, Q) visible to the wgmma */
        __syncthreads();
        float acc[32];
        pw_scores_issue<HD, true>(acc, q_s, (it & 1) ? v_s : k_s, wg);
        if (it + 1 < ntiles) decode((it & 1) ? Kb : Vb, it + 1); /* its wgmma ended before the last exchange */
        wg_wait<0>();
        wg_pin(acc);
        pw_exchange<H>(acc, X);
        push(acc, it);
      }
    } else {
      load(Kb, a.kc, a.kch, 0);
      at_cp_commit();
      for (int it = 0; it < ntiles; it++) {
        if (it + 1 < ntiles) {
          load((it & 1) ? Kb : Vb, a.kc, a.kch, it + 1); /* that buffer's wgmma ended before the last exchange */
          at_cp_commit();
          at_cp_wait<1>();
        } else {
          at_cp_wait<0>();
        }
        fence_proxy_async_smem(); /* this thread's writes (copies, zeros, Q) visible to the wgmma */
        __syncthreads();
        float acc[32];
        pw_scores<HD>(acc, q_s, (it & 1) ? v_s : k_s, wg);
        pw_exchange<H>(acc, X);
        push(acc, it);
      }
    }
    /* the row's (max, sum) over the quad, then over both halves (commutative: the same bits in both
     * warpgroups) */
    float M[2], inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
      for (int o = 1; o <= 2; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m[r], o), l2 = __shfl_xor_sync(0xffffffffu, l[r], o);
        pa_combine(m[r], l[r], m2, l2);
      }
    float4 *st = reinterpret_cast<float4 *>(X) + H * 128 + (threadIdx.x & 127);
    __syncthreads(); /* every thread is past pass 1's last exchange */
    *st = make_float4(m[0], l[0], m[1], l[1]);
    __syncthreads();
    const float4 ot = reinterpret_cast<const float4 *>(X)[(1 - H) * 128 + (threadIdx.x & 127)];
    pa_combine(m[0], l[0], ot.x, ot.y);
    pa_combine(m[1], l[1], ot.z, ot.w);
#pragma unroll
    for (int r = 0; r < 2; r++) M[r] = m[r], inv[r] = __fdiv_rn(1.0f, l[r]);

    /* pass 2: p = bf16(exp(s − M)·inv) in registers (this half's, the other's through shared
     * memory), O += P·V */
    float o[S::OREG];
#pragma unroll
    for (int i = 0; i < S::OREG; i++) o[i] = 0.f;
    __syncthreads(); /* both buffers and X free */
    if (KF)
      decode(Kb, 0);
    else
      load(Kb, a.kc, a.kch, 0);
    at_cp_commit();
    for (int it = 0; it < ntiles; it++) {
      at_cp_wait<0>(); /* K of tile it */
      fence_proxy_async_smem();
      __syncthreads(); /* K visible; every warpgroup's p·v of tile it − 1 done: V and PX free */
      load_v(Vb, it);
      at_cp_commit();
      float acc[32];
      pw_scores<HD, KF != 0>(acc, q_s, k_s, wg);
      pw_exchange<H>(acc, X);
      if (!KF && it + 1 < ntiles) {
        load(Kb, a.kc, a.kch, it + 1);
        at_cp_commit();
      }
      const bool msk = masked(it);
      uint32_t pa[4][4]; /* A fragments of k steps 0 … 3 (keys 16·kk …): the score registers' layout */
#pragma unroll
      for (int kq = 0; kq < 2; kq++) {
        const int kk = 2 * H + kq;
#pragma unroll
        for (int e = 0; e < 4; e++) {
          uint16_t p2[2];
#pragma unroll
          for (int u = 0; u < 2; u++) {
            const int i = 8 * kk + 2 * e + u, r = (i >> 1) & 1;
            const float s = score(acc, i, it, msk);
            p2[u] = s == -INFINITY ? (uint16_t)0 : pa_bf16(__fmul_rn(expf(__fsub_rn(s, M[r])), inv[r]));
          }
          pa[kk][e] = (uint32_t)p2[0] | (uint32_t)p2[1] << 16;
        }
        PX[(H * 2 + kq) * 128 + (threadIdx.x & 127)] = make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
      }
      if (!KF && it + 1 < ntiles)
        at_cp_wait<1>(); /* V of tile it (K of it + 1 may still be in flight) */
      else
        at_cp_wait<0>();
      fence_proxy_async_smem();
      __syncthreads(); /* V visible, and the other half's p */
#pragma unroll
      for (int kq = 0; kq < 2; kq++) {
        const uint4 f = PX[((1 - H) * 2 + kq) * 128 + (threadIdx.x & 127)];
        const int kk = 2 * (1 - H) + kq;
        pa[kk][0] = f.x, pa[kk][1] = f.y, pa[kk][2] = f.z, pa[kk][3] = f.w;
      }
      wg_pin(o);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        wg_mma_rs_t<S::HALF>(o, pa[kk], wg_desc(v_s + (uint32_t)(H * S::CB) * (PW_KT * 128) + (uint32_t)kk * 2048u,
                                                PW_KT * 128),
                             1);
      wg_commit();
      if (KF && it + 1 < ntiles) decode(Kb, it + 1); /* K of tile it was free after the exchange */
      wg_wait<0>();
      wg_pin(o);
#pragma unroll
      for (int kk = 0; kk < 4; kk++) wg_pin_a(pa[kk]);
    }
    /* O register i: row 16w + g + 8·((i >> 1) & 1), column H·HD/2 + 8·(i >> 2) + 2t + (i & 1) */
#pragma unroll
    for (int i = 0; i < S::OREG; i += 2) {
      const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = H * S::HALF + 8 * (i >> 2) + 2 * t;
      if (row >= nvalid) continue;
      const uint32_t pair = (uint32_t)ck_f32_to_bf16(o[i]) | (uint32_t)ck_f32_to_bf16(o[i + 1]) << 16;
      *reinterpret_cast<uint32_t *>(a.att + (int64_t)(q0 + row) * qstride + (int64_t)h * HD + col) = pair;
    }
  };
  if (wg == 0)
    run(std::integral_constant<int, 0>{});
  else
    run(std::integral_constant<int, 1>{});
}

template <int HD, bool KFV, int KF>
static int pw_launch_kv(const PaArgs &a, cudaStream_t st) {
  static std::atomic<int> attr_set{0};
  constexpr size_t smem = PwShape<HD>::SMEM;
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(pw_kernel<HD, KFV, KF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e) return (int)e;
    attr_set = 1;
  }
  return (int)ck_launch(pw_kernel<HD, KFV, KF>, dim3((unsigned)((a.T + PW_QT - 1) / PW_QT), (unsigned)a.nq), 256, smem,
                        st, a);
}
template <int HD>
static int pw_launch(const PaArgs &a, cudaStream_t st) {
  if (a.kv.kfmt) return a.kv.kfmt == 3 ? pw_launch_kv<HD, false, 3>(a, st) : pw_launch_kv<HD, false, 4>(a, st);
  return a.kv.vr > 0 ? pw_launch_kv<HD, true, 0>(a, st) : pw_launch_kv<HD, false, 0>(a, st);
}

/* The primitives alone (pf_wg_selftest): one warpgroup forms D1 = A·Bᵀ (A, B: 64 × 64, both
 * K-major from swizzled shared memory, as the scores) and D2 = A·V (A as register fragments, V:
 * 64 keys × 256 columns N-major, as p·v), D1 and D2 row-major; a host product checks them, so a
 * layout error is told apart from one in the attention's own logic. */
__global__ void __launch_bounds__(128) pw_selftest_kernel(float *d1, float *d2, const uint16_t *A, const uint16_t *B,
                                                         const uint16_t *V) {
  CK_DYNAMIC_SHARED(unsigned char, raw);
  const uint32_t raw_s = ck_smem_off(raw);
  unsigned char *As = raw + (((raw_s + 1023u) & ~1023u) - raw_s), *Bs = As + 64 * 64 * 2, *Vs = Bs + 64 * 64 * 2;
  for (int i = threadIdx.x; i < 64 * 8; i += 128) {
    const int r = i / 8, c = (i % 8) * 8;
    *reinterpret_cast<uint4 *>(As + wg_off(64, r, c)) = *reinterpret_cast<const uint4 *>(A + r * 64 + c);
    *reinterpret_cast<uint4 *>(Bs + wg_off(64, r, c)) = *reinterpret_cast<const uint4 *>(B + r * 64 + c);
  }
  for (int i = threadIdx.x; i < 64 * 32; i += 128) {
    const int r = i / 32, c = (i % 32) * 8;
    *reinterpret_cast<uint4 *>(Vs + wg_off(64, r, c)) = *reinterpret_cast<const uint4 *>(V + r * 256 + c);
  }
  fence_proxy_async_smem();
  __syncthreads();
  const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  float acc[32], o[128];
  for (int i = 0; i < 32; i++) acc[i] = 0.f;
  for (int i = 0; i < 128; i++) o[i] = 0.f;
  uint32_t af[4][4];
  for (int kk = 0; kk < 4; kk++)
    for (int e = 0; e < 4; e++) { /* rows g (e even) or g + 8, columns 16kk + 2t (+ 8 when e ≥ 2) */
      const int r = 16 * w + g + 8 * (e & 1), c = 16 * kk + 2 * t + 8 * (e >> 1);
      af[kk][e] = (uint32_t)A[r * 64 + c] | (uint32_t)A[r * 64 + c + 1] << 16;
    }
  wg_pin(acc);
  wg_pin(o);
  wg_fence();
  const uint32_t a_s = ck_smem_off(As), b_s = ck_smem_off(Bs), v_s = ck_smem_off(Vs);
  for (int kk = 0; kk < 4; kk++) wg_mma_ss<64>(acc, wg_desc(a_s + kk * 32, 16), wg_desc(b_s + kk * 32, 16), 1);
  for (int kk = 0; kk < 4; kk++) wg_mma_rs_t<256>(o, af[kk], wg_desc(v_s + kk * 2048, 64 * 128), 1);
  wg_commit();
  wg_wait<0>();
  wg_pin(acc);
  wg_pin(o);
  for (int kk = 0; kk < 4; kk++) wg_pin_a(af[kk]);
  for (int i = 0; i < 32; i++) d1[(16 * w + g + 8 * ((i >> 1) & 1)) * 64 + 8 * (i >> 2) + 2 * t + (i & 1)] = acc[i];
  for (int i = 0; i < 128; i++) d2[(16 * w + g + 8 * ((i >> 1) & 1)) * 256 + 8 * (i >> 2) + 2 * t + (i & 1)] = o[i];
}

extern "C" int pf_wg_selftest(float *d1, float *d2, const uint16_t *A, const uint16_t *B, const uint16_t *V,
                              void *stream) {
  const size_t smem = 2 * 64 * 64 * 2 + 64 * 256 * 2 + 1024;
  cudaError_t e = cudaFuncSetAttribute(pw_selftest_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e) return (int)e;
  return (int)ck_launch(pw_selftest_kernel, dim3(1), dim3(128), smem, (cudaStream_t)stream, d1, d2, A, B, V);
}

extern "C" int pf_attention_wg_supported(int hd) {
  if (hd != 128 && hd != 256 && hd != 512) return 0;
#ifdef CK_EMULATION
  return 1;
#else
  static int sm90 = -1; /* the sm_90a machine code loads (wgmma is not in the compute_90 PTX) */
  if (sm90 < 0) {
    int dev = 0, major = 0, minor = 0;
    sm90 = !cudaGetDevice(&dev) && !cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) &&
           !cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) && major == 9 && minor == 0;
  }
  return sm90;
#endif
}

extern "C" int pf_attention_wg(const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                               const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                               dk_kv_layout kv, uint16_t *att, void *stream) {
  if (T <= 0) return 0;
  if (nkv <= 0 || nq % nkv || !dk_kv_layout_ok(kv, nkv, hd, kc, vc, window) || (kv.vr > 0 && kch != vch))
    return (int)cudaErrorInvalidValue;
  /* compressed K: every key from the cache (pf_attention's rule) */
  if (kv.kfmt && (kch != (const uint16_t *)((const uint8_t *)kc + p0 * kv.kps) || vch != vc + p0 * kv.ps))
    return (int)cudaErrorInvalidValue;
  const PaArgs a = {q, kc, vc, kch, vch, att, T, nq, nkv, hd, window, p0, scale, kv};
  cudaStream_t st = (cudaStream_t)stream;
  switch (hd) {
  case 128: return pw_launch<128>(a, st);
  case 256: return pw_launch<256>(a, st);
  case 512: return pw_launch<512>(a, st);
  default: return (int)cudaErrorInvalidValue;
  }
}
