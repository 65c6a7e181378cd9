/* Decode attention: one query row per head at position *pos over the device KV cache, with
 * the reference path's rounding points (q·bf16(scale) → bf16, scores → bf16, softmax in
 * float32 with p rounded to bf16, Σ p·v → bf16). GQA: query head h reads KV head h / rep.
 * The keys are split over `splits` blocks per head so long contexts fill the SMs, in two passes:
 *   1. scores (one block per KV head and split; K read once for its rep query heads), and per
 *      split the max m_s and the sum l_s = Σ exp(s − m_s);
 *   2. per KV head and split (V read once for its rep query heads): M = max m_s,
 *      total = Σ l_s·exp(m_s − M) (the float32 softmax denominator, summed over the splits
 *      by a warp, in another order than the CPU's), p = bf16(exp(s − M) / total), partial
 *      Σ p·v; the last block of each KV head reduces the partials in split order (above 4
 *      splits: a third kernel, one thread per output, with the same sums).
 * The query-group size (rep) is a template parameter so the per-head sums stay in registers.
 * A sliding layer (window > 0) keeps a ring: position j lives in slot j % ck_ring(window).
 * For GQA 8 at head dims 256 and 512 the scores pass streams K by bulk copies, one block per
 * split for every KV head (attention_scores_tma.cuh), and at deep contexts the p·v pass does the
 * same for V (attention_pv_tma.cuh); over a cache that keeps K from V or a compressed K, deep
 * contexts take one pass over the rows instead, under an online softmax (attention_onepass_tma.cuh:
 * its rounding of p differs, docs/NUMERICS.md). */
#include <atomic>

#include "attention_common.cuh"
#include "attention_planar.cuh"
#include "ck_mma.cuh"
#include "qmv_tc.cuh" /* the mbarrier and bulk-copy primitives */

/* A batched step's row (kv_layout.h dk_rows): launch z serves row z; its slot's K/V, its position
 * and its scratch (per row: nq·ctx_cap scores, nq·splits maxima and sums, nq·splits·hd partials,
 * nq counters) are found by offsets. Nothing moves without rows (rw.slot NULL). */
__device__ __forceinline__ int at_row(const dk_rows &rw, int64_t *slot) {
  if (!rw.slot) return *slot = 0, 0;
  const int z = blockIdx.z;
  *slot = rw.slot[z];
  return z;
}

/* Word i (a compile-time constant where it is called) of v. */
__device__ __forceinline__ uint32_t u4_word(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/* Two floats holding bf16 values as a bf16 pair (lo in the low half). */
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  return (uint32_t)ck_f32_to_bf16(lo) | (uint32_t)ck_f32_to_bf16(hi) << 16;
}

/* The tensor-core scores of 16 keys (rows gq and gq + 8 of lane (gq, t)'s A operand) against
 * the group's eight q rows: per 32-dim unit u, load_a(u, a, b) gives the lane's 16 bytes of its
 * two keys and load_b(u) its B fragment (the k order permuted alike in both). Two accumulator
 * chains (each unit's first and second 16 dims), added at the end: 16 dependent mmas per chain
 * instead of 32 (F16: fp16 operands). c receives the unrounded sums: heads 2t, 2t + 1 of key gq
 * in c[0], c[1], of key gq + 8 in c[2], c[3]. UB units' loads are issued before their mmas (ptxas interleaves: ~5
 * ahead); a kernel short of registers takes fewer at a time, the same operations in order. */
template <int NU, int UB = 8, bool F16 = false, typename LA, typename LB>
__device__ __forceinline__ void at_tc_dots(LA load_a, LB load_b, float (&c)[4]) {
  static_assert(NU % UB == 0, "whole batches of units");
  float c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 4; i++) c[i] = 0.0f;
#pragma unroll
  for (int u0 = 0; u0 < NU; u0 += UB) {
    uint4 la[UB], lb[UB];
#pragma unroll
    for (int u = 0; u < UB; u++) load_a(u0 + u, la[u], lb[u]);
#pragma unroll
    for (int u = 0; u < UB; u++) {
      const uint4 b = load_b(u0 + u);
      const uint32_t a0[4] = {la[u].x, lb[u].x, la[u].y, lb[u].y}, a1[4] = {la[u].z, lb[u].z, la[u].w, lb[u].w};
      if (F16) {
        at_mma_f16(c, a0, b.x, b.y);
        at_mma_f16(c2, a1, b.z, b.w);
      } else {
        at_mma_bf16(c, a0, b.x, b.y);
        at_mma_bf16(c2, a1, b.z, b.w);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++) c[i] += c2[i];
}

/* at_tc_dots's scores of keys ka = gq and kb = gq + 8 of the tile: those below hi get their bf16
 * scores stored (heads 2t, 2t + 1 at sa, sb) and passed to fold(s_2t, s_2t+1) (the running
 * maxima, or the running softmax statistics). */
template <int NU, typename LA, typename LB, typename FOLD>
__device__ __forceinline__ void at_tc_keys(LA load_a, LB load_b, int ka, int kb, int hi, float *sa, float *sb,
                                           FOLD fold) {
  float c[4];
  at_tc_dots<NU>(load_a, load_b, c);
  if (ka < hi) {
    const float s0 = rb(c[0]), s1 = rb(c[1]);
    sa[ka] = s0, sb[ka] = s1;
    fold(s0, s1);
  }
  if (kb < hi) {
    const float s2 = rb(c[2]), s3 = rb(c[3]);
    sa[kb] = s2, sb[kb] = s3;
    fold(s2, s3);
  }
}

/* grid (nkv, splits): the REP query heads of KV head g over the split's keys. Each warp
 * takes KPI keys at a time; a lane holds 8 consecutive dims of each 256-dim chunk (one
 * 16-byte load per key and chunk), so K is read once, coalesced, for all REP heads. KF 3 / 4:
 * K in planar3 / planar4 blocks (kv.kfmt), scored in the rotated domain (attention_planar.cuh). */
template <int REP, int KF = 0>
__global__ void __launch_bounds__(AT_THREADS) scores_kernel(const float *q, const uint16_t *kc, int nkv, int hd,
                                                            dk_kv_layout kv, float scale, const int *pos_p, int window,
                                                            at_splits sp, int64_t ctx_cap, float *scores,
                                                            float *smax, float *ssum, float *amax, int namax, dk_rows rw) {
  ck_pdl_enter();
  {
    int64_t sl;
    const int z = at_row(rw, &sl), nq = nkv * REP;
    q += z * rw.in;
    kc += sl * rw.kv;
    pos_p += z;
    scores += (int64_t)z * nq * ctx_cap;
    smax += (int64_t)z * nq * sp.n;
    ssum += (int64_t)z * nq * sp.n;
  }
  amax_zero(amax, namax);
  CK_DYNAMIC_SHARED(float4, qs4); /* [REP][hd] floats */
  float *qs = (float *)qs4;
  int g = blockIdx.x, s = blockIdx.y, splits = sp.n;
  int pos = *pos_p, lo, hi;
  split_range(pos, window, sp, s, &lo, &hi);
  if (lo == hi) return; /* past the live splits: nothing reads this split's results */
  float bscale = rb(scale);
  at_stage_q(q, g, REP, hd, scale, bscale, qs4);
  __shared__ float cb[16]; /* (KF) the codebook */
  if (KF) {
    __syncthreads();
    pc_rotate_rows(kv.kt, qs, REP * hd);
    pc_stage_codebook(kv.kt, KF, cb);
  }
  __syncthreads(); /* q staged */
  (void)nkv; /* (the rows' stride is kv.ps) */
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  int nch = (hd + 255) / 256;
  float mx[REP]; /* this thread's running max of each head's scores (−∞ where it has none) */
  {
    constexpr int KPI = REP <= 8 ? 4 : 2, NP = KPI * REP;
    const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
    float *prow = scores + (int64_t)(g * REP + pr) * ctx_cap;
    float mxl = -INFINITY;
    /* KPI keys per warp and step, their loads issued before any is used (the loop is latency-
     * bound: one step's loads and reductions overlap). The KPI·REP dot products are completed
     * by one transposed warp reduction: lane l ends with pair p = l / (32 / NP) (key u = p / REP,
     * head r = p % REP), each sum in the same order as one key at a time; the first lane of
     * each pair writes its score (rounded; the keys past hi repeat key j and are dropped), and
     * each lane keeps the running max of its head's scores. */
    for (int j = lo + KPI * warp; j < hi; j += KPI * nw) {
      float dk[KPI][REP];
      if constexpr (KF != 0) {
        const uint8_t *kp[KPI];
#pragma unroll
        for (int u = 0; u < KPI; u++)
          kp[u] = (const uint8_t *)kc + (int64_t)(j + u < hi ? j + u : j) * kv.kps +
                  (int64_t)g * (hd / KVC_BLOCK) * (KF == 3 ? KVC_P3_BYTES : KVC_P4_BYTES);
        pc_key_dots<REP, KPI, KF>(kp, qs, hd, lane, cb, dk);
      } else {
        const uint16_t *kp[KPI];
#pragma unroll
        for (int u = 0; u < KPI; u++) {
          int jj = j + u < hi ? j + u : j;
          int64_t sl = window > 0 ? jj % ck_ring(window) : jj;
          kp[u] = kc + sl * kv.ps + (int64_t)g * hd;
        }
        key_dots<REP, KPI, false>(kp, qs, hd, nch, lane, dk);
      }
      const float v = at_step_score<REP, KPI>(dk, lane);
      if (j + pu < hi) {
        if (pw) prow[j + pu] = v;
        mxl = fmaxf(mxl, v);
      }
    }
#pragma unroll
    for (int r = 0; r < REP; r++) mx[r] = r == pr ? mxl : -INFINITY;
  }
  __syncthreads(); /* the block's own score writes are visible to the whole block */
  /* every head's max, then its Σ exp(s − max), each as one block reduction would give it (the
   * REP reductions share their barriers) */
  block_max_n<REP>(mx);
  /* the group's scores of one key loaded at once (one L2 round trip per key a thread takes, not
   * one per head and key), each head's sum in the same key order */
  float sum[REP];
#pragma unroll
  for (int r = 0; r < REP; r++) sum[r] = 0.0f;
  const float *sc = scores + (int64_t)g * REP * ctx_cap;
  for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    float v[REP];
#pragma unroll
    for (int r = 0; r < REP; r++) v[r] = sc[(int64_t)r * ctx_cap + j];
#pragma unroll
    for (int r = 0; r < REP; r++)
      if (mx[r] > -INFINITY) sum[r] += expf(__fsub_rn(v[r], mx[r]));
  }
  block_sum_n<REP>(sum);
  if (threadIdx.x == 0)
#pragma unroll
    for (int r = 0; r < REP; r++) {
      smax[(g * REP + r) * splits + s] = mx[r];
      ssum[(g * REP + r) * splits + s] = sum[r];
    }
}

#include "attention_scores_tma.cuh"

#define PV_TILE 256
/* Up to this many splits the last pv block of a KV head reduces them; above, combine_kernel
 * (the last block alone is latency-bound on REP·hd outputs: measured ~10 us at 16 splits). */
#define AT_LAST_BLOCK_SPLITS 4

/* Σ over the live splits of one output (stride hd): eight independent chains (up to 32 loads
 * in flight: combine_kernel's threads are latency-bound on them), added in a fixed order —
 * the order a sum over all `total` splits takes with the dead ones' zeros left out (each
 * chain's partial is never −0, so adding +0 changes no bit): chains over the first total / 8
 * groups of eight, the remainder into chain 0. */
__device__ __forceinline__ float split_sum(const float *src, int live, int total, int hd) {
  float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const int chained = total / 8 * 8;
  int k = 0;
#pragma unroll 4
  for (; k < chained && k < live; k += 8) {
    float x[8];
#pragma unroll
    for (int c = 0; c < 8; c++) x[c] = k + c < live ? __ldcg(src + (int64_t)(k + c) * hd) : 0.0f;
#pragma unroll
    for (int c = 0; c < 8; c++)
      if (k + c < live) v[c] += x[c];
  }
  for (k = chained; k < live; k++) v[0] += __ldcg(src + (int64_t)k * hd);
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* The four p·v tiles of 64 dims: v[j] holds the lane's 16 bytes (dims 8gq … 8gq + 7) of its j-th
 * key; byte permutes pair two keys' values of one dim into each A register (row gq ↔ the even
 * dim 8gq + 2i of tile i, row gq + 8 ↔ the odd one), B (b0, b1) the bf16 p of head gq at the
 * same four keys in the same order. */
__device__ __forceinline__ void at_pv_tiles(const uint4 (&v)[4], uint32_t b0, uint32_t b1, float (&acc)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t w0 = u4_word(v[0], i), w1 = u4_word(v[1], i), w2 = u4_word(v[2], i), w3 = u4_word(v[3], i);
    const uint32_t a[4] = {__byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632), __byte_perm(w2, w3, 0x5410),
                           __byte_perm(w2, w3, 0x7632)};
    at_mma_bf16(acc[i], a, b0, b1);
  }
}

/* After a block wrote its split's partial sums of heads [h0, h0 + nh): the last of the live
 * splits' blocks to count itself in (*count) reduces every split of those heads in split order
 * (split_sum), writes att and adds its maxima to amax, and clears the counter for the next step. */
__device__ __forceinline__ void at_reduce_last(const float *pacc, unsigned *count, int h0, int nh, int live, int splits,
                                               int hd, uint16_t *att, float *amax, bool *last) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *last = atomicAdd(count, 1u) == (unsigned)live - 1;
  __syncthreads();
  if (!*last) return;
  __threadfence();
  float vmax = 0.0f;
  for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) {
    const int r = i / hd, d = i - r * hd, h = h0 + r;
    const uint16_t b = ck_f32_to_bf16(split_sum(pacc + (int64_t)h * splits * hd + d, live, splits, hd));
    att[(int64_t)h * hd + d] = b;
    vmax = fmaxf(vmax, fabsf(ck_bf16_to_f32(b)));
  }
  amax_add(amax, vmax);
  if (threadIdx.x == 0) *count = 0;
}

/* V of KPI consecutive keys from j0 (ring slots when window > 0): this thread's DPT dims at
 * voff of each key row (rows ps elements apart). */
template <int KPI, int DPT>
__device__ __forceinline__ void pv_load_keys(const uint16_t *vc, int j0, int window, int64_t ps, int64_t voff,
                                             float (&v)[KPI][DPT]) {
#pragma unroll
  for (int u = 0; u < KPI; u++) {
    const int j = j0 + u;
    const int64_t slot = window > 0 ? j % ck_ring(window) : j;
    load_n(vc + slot * ps + voff, DPT, v[u]);
  }
}
/* acc[r] += p[r][jj + u] · v[u] for the KPI keys in order. */
template <int REP, int KPI, int DPT>
__device__ __forceinline__ void pv_add_keys(const float (&ps)[REP][PV_TILE], int jj, const float (&v)[KPI][DPT],
                                            float (&acc)[REP][DPT]) {
#pragma unroll
  for (int u = 0; u < KPI; u++)
#pragma unroll
    for (int r = 0; r < REP; r++) {
      const float p = ps[r][jj + u];
#pragma unroll
      for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p, v[u][i], acc[r][i]);
    }
}

/* grid (nkv, splits): Σ p·v of the split for the REP query heads of KV head g, V read once
 * (thread t owns dims [t·DPT, t·DPT + DPT)); then the last block of the group reduces the
 * splits in order. p = bf16(exp(s − M)/total) with the global M and total, staged per tile
 * of keys in shared memory. DPT is a template parameter so that the accumulators are REP·DPT
 * registers, not REP·8 (with a run-time count the GQA-8 kernel took 128 registers: 4 resident
 * blocks per SM where the split count assumes 8). */
template <int REP, int DPT>
__global__ void __launch_bounds__(AT_THREADS) pv_kernel(const uint16_t *vc, int nkv, int hd,
                                                        dk_kv_layout kv, const int *pos_p, int window, at_splits sp,
                                                        int64_t ctx_cap, const float *scores,
                                                        const float *smax, const float *ssum, float *pacc,
                                                        unsigned *count, uint16_t *att, float *amax, dk_rows rw) {
  ck_pdl_enter();
  {
    int64_t sl;
    const int z = at_row(rw, &sl), nq = nkv * REP;
    vc += sl * rw.kv;
    pos_p += z;
    scores += (int64_t)z * nq * ctx_cap;
    smax += (int64_t)z * nq * sp.n;
    ssum += (int64_t)z * nq * sp.n;
    pacc += (int64_t)z * nq * sp.n * hd;
    count += (int64_t)z * nq;
    att += z * rw.out;
  }
  __shared__ float ps[REP][PV_TILE];
  __shared__ float gm[REP], ginv[REP];
  __shared__ bool last;
  int g = blockIdx.x, s = blockIdx.y, pos = *pos_p, lo, hi, splits = sp.n;
  split_range(pos, window, sp, s, &lo, &hi);
  if (lo == hi) return; /* past the live splits (the reductions below read only those) */
  const int live = live_splits(pos, window, sp);
  { /* each head's M and total: a warp per head, its lanes over the splits (one thread per
     * head looped over every split alone: ~2·splits dependent loads before any work); a warp
     * with several heads (GQA 8: two) runs them side by side, so their loads are in flight
     * together — each head's sums in the same order as alone */
    constexpr int NW = AT_THREADS / 32, RW = (REP + NW - 1) / NW;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float m[RW], total[RW];
#pragma unroll
    for (int k = 0; k < RW; k++) m[k] = -INFINITY, total[k] = 0.0f;
#pragma unroll 4
    for (int i = lane; i < live; i += 32)
#pragma unroll
      for (int k = 0; k < RW; k++)
        if (warp + k * NW < REP) m[k] = fmaxf(m[k], smax[(g * REP + warp + k * NW) * splits + i]);
#pragma unroll
    for (int k = 0; k < RW; k++) m[k] = warp_max(m[k]);
#pragma unroll 4
    for (int i = lane; i < live; i += 32)
#pragma unroll
      for (int k = 0; k < RW; k++) {
        if (warp + k * NW >= REP) continue;
        const int h = g * REP + warp + k * NW;
        float ms = smax[h * splits + i];
        if (ms > -INFINITY) total[k] += ssum[h * splits + i] * expf(__fsub_rn(ms, m[k]));
      }
#pragma unroll
    for (int k = 0; k < RW; k++) {
      total[k] = warp_sum(total[k]);
      if (lane == 0 && warp + k * NW < REP) {
        gm[warp + k * NW] = m[k];
        ginv[warp + k * NW] = __fdiv_rn(1.0f, total[k]);
      }
    }
  }
  int d0 = threadIdx.x * DPT, active = d0 < hd;
  /* the thread's DPT dims within a row (all moved or all unmoved: kv_layout.h) */
  const int64_t voff = active ? dk_kv_vcol(kv, nkv, hd, g, d0) : 0;
  float acc[REP][DPT];
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;
  for (int t0 = lo; t0 < hi; t0 += PV_TILE) {
    int n = hi - t0 < PV_TILE ? hi - t0 : PV_TILE;
    __syncthreads(); /* gm/ginv written; the previous tile consumed */
    for (int i = threadIdx.x; i < REP * n; i += blockDim.x) {
      int r = i / n, jj = i - r * n;
      float sc = scores[(int64_t)(g * REP + r) * ctx_cap + t0 + jj];
      ps[r][jj] = rb(__fmul_rn(expf(__fsub_rn(sc, gm[r])), ginv[r]));
    }
    __syncthreads();
    if (!active) continue;
    constexpr int KPI = REP <= 8 ? 8 : 2;
    const int nb = n / KPI;
    /* KPI keys' loads in flight before their products, and the next KPI keys' loads issued
     * before this batch's products (two register buffers: the loop is latency-bound, and
     * with one buffer each batch waited a full round trip); each accumulator still adds the
     * keys in order */
    float va[KPI][DPT], vb[KPI][DPT];
    if (nb > 0) pv_load_keys<KPI, DPT>(vc, t0, window, kv.ps, voff, va);
    for (int b = 0; b < nb; b += 2) {
      if (b + 1 < nb) pv_load_keys<KPI, DPT>(vc, t0 + (b + 1) * KPI, window, kv.ps, voff, vb);
      pv_add_keys<REP, KPI, DPT>(ps, b * KPI, va, acc);
      if (b + 1 < nb) {
        if (b + 2 < nb) pv_load_keys<KPI, DPT>(vc, t0 + (b + 2) * KPI, window, kv.ps, voff, va);
        pv_add_keys<REP, KPI, DPT>(ps, (b + 1) * KPI, vb, acc);
      }
    }
    int jj = nb * KPI;
    for (; jj < n; jj++) {
      int j = t0 + jj;
      int64_t slot = window > 0 ? j % ck_ring(window) : j;
      float v[DPT];
      load_n(vc + slot * kv.ps + voff, DPT, v);
#pragma unroll
      for (int r = 0; r < REP; r++) {
        float p = ps[r][jj];
#pragma unroll
        for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p, v[i], acc[r][i]);
      }
    }
  }
  if (active) {
#pragma unroll
    for (int r = 0; r < REP; r++) {
      float *dst = pacc + ((int64_t)(g * REP + r) * splits + s) * hd + d0;
#pragma unroll
      for (int i = 0; i < DPT; i++) dst[i] = acc[r][i];
    }
  }
  if (splits > AT_LAST_BLOCK_SPLITS) return; /* combine_kernel reduces the splits */
  at_reduce_last(pacc, count + g, g * REP, REP, live, splits, hd, att, amax, &last);
}

/* grid (nq, ceil(hd / 32)), AT_THREADS threads: the splits summed as split_sum does, with its
 * eight chains spread over the block's four warps — warp w adds chains w and w + 4 (splits c,
 * c + 8, … in order) for 32 consecutive outputs, their loads in flight together, and the
 * chains meet in shared memory in split_sum's final tree: the same additions in the same
 * order, so the same bits. For many splits (full layers at long contexts) the last block of a
 * KV head would read rep · splits · hd partials alone, and one thread per output is
 * latency-bound on its chains (27 µs for 256 splits of the 31B's full layer, one warp per
 * scheduler). */
#define CB_CHAINS 8
__global__ void __launch_bounds__(AT_THREADS) combine_kernel(const float *pacc, const int *pos_p, int window,
                                                             at_splits sp, int hd, uint16_t *att, float *amax,
                                                             dk_rows rw) {
  static_assert(AT_THREADS / 32 * 2 == CB_CHAINS, "two chains per warp");
  ck_pdl_enter();
  {
    int64_t sl;
    const int z = at_row(rw, &sl);
    pacc += (int64_t)z * gridDim.x * sp.n * hd;
    pos_p += z;
    att += z * rw.out;
  }
  __shared__ float part[CB_CHAINS][32];
  const int h = blockIdx.x, w = threadIdx.x >> 5, lane = threadIdx.x & 31, d = blockIdx.y * 32 + lane;
  const int splits = sp.n, live = live_splits(*pos_p, window, sp);
  const int chained = splits / 8 * 8, end = live < chained ? live : chained;
  float v0 = 0.0f, v1 = 0.0f; /* chains w and w + 4 */
  if (d < hd) {
    const float *src = pacc + (int64_t)h * splits * hd + d;
    for (int s0 = 0; s0 < end; s0 += 8 * 4) {
      float x0[4], x1[4];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int a = s0 + 8 * i + w, b = a + 4;
        x0[i] = a < end ? __ldcg(src + (int64_t)a * hd) : 0.0f;
        x1[i] = b < end ? __ldcg(src + (int64_t)b * hd) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; i++) {
        if (s0 + 8 * i + w < end) v0 += x0[i];
        if (s0 + 8 * i + w + 4 < end) v1 += x1[i];
      }
    }
    if (w == 0)
      for (int k = chained; k < live; k++) v0 += __ldcg(src + (int64_t)k * hd);
  }
  part[w][lane] = v0;
  part[w + 4][lane] = v1;
  __syncthreads();
  float out = 0.0f;
  if (w == 0 && d < hd) {
    const float t = ((part[0][lane] + part[1][lane]) + (part[2][lane] + part[3][lane])) +
                    ((part[4][lane] + part[5][lane]) + (part[6][lane] + part[7][lane]));
    const uint16_t b = ck_f32_to_bf16(t);
    att[(int64_t)h * hd + d] = b;
    out = ck_bf16_to_f32(b);
  }
  amax_add(amax, out);
}

#include "attention_pv_tma.cuh"
#include "attention_onepass_tma.cuh"

/* Raises a kernel's dynamic shared memory limit to `bytes` where *set (what was allowed so far)
 * is below it. */
template <typename F>
static cudaError_t at_allow_smem(F fn, size_t bytes, std::atomic<size_t> *set) {
#ifndef CK_EMULATION
  if (set->load() < bytes) {
    const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e) return e;
    set->store(bytes);
  }
#else
  (void)fn, (void)bytes, (void)set;
#endif
  return cudaSuccess;
}

template <int REP>
static cudaError_t launch_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                    dk_kv_layout kv, float scale, const int *pos, int window, at_splits sp, int64_t ctx_cap,
                                    float *scores, float *smax, float *ssum, float *pacc, unsigned *count,
                                    uint16_t *att, float *amax, int namax, int deep, dk_rows rw, int nrows,
                                    cudaStream_t st) {
  const int splits = sp.n;
  const size_t smem = (size_t)REP * hd * sizeof(float);
  const int dpt = hd <= AT_THREADS ? 1 : hd <= 2 * AT_THREADS ? 2 : hd <= 4 * AT_THREADS ? 4 : 8;
  /* GQA 8 at head dims 256 and 512 with at most 4 KV heads: the scores with K streamed by bulk
   * copies (tg128 +2.4 % at depth 32768, +0.6 % at 4096), and with `deep` p·v with V streamed
   * likewise; every other shape, and p·v while few keys are live, through registers */
  const bool tma = REP == 8 && (hd == 256 || hd == 512) && nkv <= AS_MAX_NKV && !rw.slot;
  /* a compressed K (kv.kfmt) is scored on the register path, but at deep contexts in the one
   * pass where its rows allow (dk_attention_onepass); else its V, plain rows, takes the p·v pass
   * by bulk copies as bf16 K does */
  const bool tma_scores = tma && !kv.kfmt;
  cudaError_t e = cudaSuccess;
  if constexpr (REP == 8)
    if (deep && tma && dk_attention_onepass(nkv * REP, nkv, hd, kv)) {
      /* K from V or a compressed K: one pass over the rows (K from V: K and V in each; else V's
       * with the positions' K blocks beside), then the splits merged */
      const size_t osm = op_smem_bytes(kv.ps, kv.kfmt ? kv.kps : 0, nkv, hd);
      void (*fn)(const float *, const uint16_t *, const uint16_t *, int, int, dk_kv_layout, float, const int *, int,
                 at_splits, float *, float *, float *, float *, int);
      const int f = (kv.kfmt == 3 ? 1 : kv.kfmt == 4 ? 2 : 0) * 2 + (hd == 512);
      switch (f) {
      case 0: fn = onepass_tma_kernel<8, 4, 0>; break;
      case 1: fn = onepass_tma_kernel<16, 8, 0>; break;
      case 2: fn = onepass_tma_kernel<8, 4, 3>; break;
      case 3: fn = onepass_tma_kernel<16, 8, 3>; break;
      case 4: fn = onepass_tma_kernel<8, 4, 4>; break;
      default: fn = onepass_tma_kernel<16, 8, 4>; break;
      }
      static std::atomic<size_t> oattr_set[6] = {{0}, {0}, {0}, {0}, {0}, {0}};
      e = at_allow_smem(fn, osm, &oattr_set[f]);
      if (!e)
        e = ck_launch(fn, dim3(splits), OP_THREADS, osm, st, q, kc, vc, nkv, hd, kv, scale, pos, window, sp, smax, ssum,
                      pacc, amax, namax);
      if (!e)
        e = ck_launch(onepass_combine_kernel, dim3(nkv * REP, (hd + 31) / 32), AT_THREADS, 0, st, smax, ssum, pacc,
                      pos, window, sp, hd, att, amax);
      return e;
    }
  if constexpr (REP == 8)
    if (tma_scores) {
      const size_t tsm = as_smem_bytes(nkv, hd);
      void (*fn)(const float *, const uint16_t *, int, int, dk_kv_layout, float, const int *, int, at_splits, int64_t,
                 float *, float *, float *, float *, int) = hd == 512 ? scores_tma_kernel<16> : scores_tma_kernel<8>;
      static std::atomic<size_t> attr_set[2] = {{0}, {0}}; /* the dynamic shared memory allowed so far, per instance */
      e = at_allow_smem(fn, tsm, &attr_set[hd == 512]);
      if (e) return e;
      e = ck_launch(fn, dim3(splits), AT_THREADS, tsm, st, q, kc, nkv, hd, kv, scale, pos, window, sp, ctx_cap,
                    scores, smax, ssum, amax, namax);
    }
  if (!tma_scores)
    e = ck_launch(kv.kfmt == 3   ? scores_kernel<REP, 3>
                  : kv.kfmt == 4 ? scores_kernel<REP, 4>
                                 : scores_kernel<REP, 0>,
                  dim3(nkv, splits, nrows), AT_THREADS, smem, st, q, kc, nkv, hd, kv, scale, pos, window, sp, ctx_cap,
                  scores, smax, ssum, amax, namax, rw);
  if (e) return e;
  void (*pv)(const uint16_t *, int, int, dk_kv_layout, const int *, int, at_splits, int64_t, const float *,
             const float *, const float *, float *, unsigned *, uint16_t *, float *, dk_rows) =
      dpt == 1 ? pv_kernel<REP, 1> : dpt == 2 ? pv_kernel<REP, 2> : dpt == 4 ? pv_kernel<REP, 4> : pv_kernel<REP, 8>;
  bool pv_tma = false;
  if constexpr (REP == 8)
    if (deep && tma) {
      pv_tma = true;
      const size_t psm = pt_smem_bytes(kv.ps);
      void (*fn)(const uint16_t *, int, int, dk_kv_layout, const int *, int, at_splits, int64_t, const float *,
                 const float *, const float *, float *, unsigned *, uint16_t *, float *) =
          hd == 512 ? pv_tma_kernel<8> : pv_tma_kernel<4>;
      static std::atomic<size_t> pattr_set[2] = {{0}, {0}};
      e = at_allow_smem(fn, psm, &pattr_set[hd == 512]);
      if (e) return e;
      e = ck_launch(fn, dim3(splits), AT_THREADS, psm, st, vc, nkv, hd, kv, pos, window, sp, ctx_cap, scores, smax,
                    ssum, pacc, count, att, amax);
    }
  if (!pv_tma)
    e = ck_launch(pv, dim3(nkv, splits, nrows), AT_THREADS, 0, st, vc, nkv, hd, kv, pos, window, sp, ctx_cap, scores,
                  smax, ssum, pacc, count, att, amax, rw);
  if (e || splits <= AT_LAST_BLOCK_SPLITS) return e;
  return ck_launch(combine_kernel, dim3(nkv * REP, (hd + 31) / 32, nrows), AT_THREADS, 0, st, pacc, pos, window, sp, hd,
                   att, amax, rw);
}

extern "C" int dk_attention_onepass(int nq, int nkv, int hd, dk_kv_layout kv) {
  return nkv > 0 && nq == 8 * nkv && (hd == 256 || hd == 512) && nkv <= AS_MAX_NKV &&
         (kv.vr > 0 || ((kv.kfmt == 3 || kv.kfmt == 4) && kv.kps % 16 == 0));
}

extern "C" int dk_attention_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                                 dk_kv_layout kv, float scale, const int *pos, int window, int splits, int min_keys,
                                 int deep, int64_t ctx_cap, float *scores, float *smax, float *ssum, float *pacc,
                                 unsigned *count, uint16_t *att, float *amax, int namax, const dk_rows *rows,
                                 int nrows, void *stream) {
  const bool batched = rows && rows->slot;
  if (!q || nkv <= 0 || nq % nkv || hd % 8 || hd > AT_MAX_HD || (size_t)(nq / nkv) * hd * sizeof(float) > 48 * 1024 ||
      splits < 1 || min_keys < 1 || !dk_kv_layout_ok(kv, nkv, hd, kc, vc, window) || nrows < 1 || nrows > 65535 ||
      (nrows > 1 && !batched) || (batched && (amax || deep || kv.kfmt)))
    return (int)cudaErrorInvalidValue;
  const dk_rows rw = batched ? *rows : dk_rows{NULL, 0, 0, 0};
  cudaStream_t st = (cudaStream_t)stream;
  const at_splits sp = {splits, min_keys};
#define AT_CALL(R) \
  (int)launch_attention<R>(q, kc, vc, nkv, hd, kv, scale, pos, window, sp, ctx_cap, scores, smax, ssum, pacc, count, att, \
                           amax, namax, deep, rw, nrows, st)
  switch (nq / nkv) {
  case 1: return AT_CALL(1);
  case 2: return AT_CALL(2);
  case 4: return AT_CALL(4);
  case 8: return AT_CALL(8);
  case 16: return AT_CALL(16);
  default: return (int)cudaErrorInvalidValue;
  }
#undef AT_CALL
}

extern "C" int dk_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                            dk_kv_layout kv, float scale, const int *pos, int window, int splits, int min_keys,
                            int deep, int64_t ctx_cap, float *scores, float *smax, float *ssum, float *pacc,
                            unsigned *count, uint16_t *att, float *amax, int namax, void *stream) {
  return dk_attention_rows(q, kc, vc, nq, nkv, hd, kv, scale, pos, window, splits, min_keys, deep, ctx_cap, scores, smax,
                           ssum, pacc, count, att, amax, namax, NULL, 1, stream);
}

CK_TIMELINE_SETTER(ck_tl_attention)
