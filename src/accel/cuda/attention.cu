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
 * A sliding layer (window > 0) keeps a ring: position j lives in slot j % window.
 * kpath picks each pass's form: the decoder's default scores pass (kpath 3) streams K by bulk
 * copies, one block per split for every KV head (attention_scores_tma.cuh); kpath bit 8 does
 * the same for V (attention_pv_tma.cuh). */
#include "attention_common.cuh"
#include "ck_mma.cuh"
#include "qkv_post.cuh"
#include "qmv_tc.cuh" /* the mbarrier and bulk-copy primitives */

/* dk_attention_post's q/k/v post step inside the scores kernel: its inputs, and the caches it
 * writes the new position's K and V into (y == NULL: q is read from dk_attention's q) */
struct at_post {
  dk_post p;
  uint16_t *kc, *vc;
};

/* the scores kernel's K ring (MLXRT_ATTN_SCORES=1): keys per warp and step, steps per warp */
#define AT_RING_KPI 2
#define AT_RING_STAGES 4
/* how the scores kernel reads K (MLXRT_ATTN_SCORES): through registers (FMA), a shared-memory
 * ring (FMA), or into tensor-core fragments (mma) */
#define AT_K_REG 0
#define AT_K_RING 1
#define AT_K_TC 2
#define AT_K_TMA 3 /* the tensor-core form with K streamed by bulk copies (attention_scores_tma.cuh) */
/* how the p·v kernel forms Σ p·v (dk_attention's kpath bit AT_V_TC_BIT): FMAs key by key, or
 * tensor-core tiles */
#define AT_V_FMA 0
#define AT_V_TC 1
#define AT_V_TC_BIT 4
#define AT_V_TMA_BIT 8 /* the tensor-core form with V streamed by bulk copies (attention_pv_tma.cuh) */

/* MLXRT_ATTN_PREFETCH (dk_set_attn_prefetch): the scores kernel pulls its split's K rows, the
 * p·v kernel its V rows, into the L2 before waiting for their predecessors — rows of earlier
 * steps, which the weights' stream has evicted; the L2 is coherent, so the new position's rows
 * may be among them. A hint: the results do not depend on it. */
static __constant__ int at_prefetch_c __attribute__((unused));
extern "C" int dk_set_attn_prefetch_split(int on) { return (int)cudaMemcpyToSymbol(at_prefetch_c, &on, sizeof on); }

/* Prefetches into the L2 the rows [lo, hi) of KV head g of a cache (hd·2-byte rows). */
__device__ __forceinline__ void at_prefetch_rows(const uint16_t *c, int64_t kvd, int g, int hd, int window, int lo,
                                                 int hi) {
#if defined(__CUDA_ARCH__)
  const int lpr = hd * 2 / 128 > 0 ? hd * 2 / 128 : 1; /* 128-byte lines per row */
  for (int t = threadIdx.x; t < (hi - lo) * lpr; t += blockDim.x) {
    const int j = lo + t / lpr;
    const int64_t s = window > 0 ? j % window : j;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + s * kvd + (int64_t)g * hd + (t % lpr) * 64));
  }
#else
  (void)c, (void)kvd, (void)g, (void)hd, (void)window, (void)lo, (void)hi;
#endif
}
/* ... for this block's split, before its wait: the position, written by the step's first copy or
 * the last step's end, is long complete unless kernels trigger before they wait */
__device__ __forceinline__ void at_prefetch_split(const uint16_t *c, int nkv, int hd, const int *pos_p, int window,
                                                  at_splits sp) {
  if (!at_prefetch_c || ck_pdl_early_c) return;
  int lo, hi;
  split_range(*pos_p, window, sp, (int)blockIdx.y, &lo, &hi);
  at_prefetch_rows(c, (int64_t)nkv * hd, (int)blockIdx.x, hd, window, lo, hi);
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
 * instead of 32. The keys below hi get their bf16 scores stored (heads 2t, 2t + 1 at sa, sb)
 * and passed to fold(s_2t, s_2t+1) (the running maxima, or the running softmax statistics). */
template <int NU, typename LA, typename LB, typename FOLD>
__device__ __forceinline__ void at_tc_keys(LA load_a, LB load_b, int ka, int kb, int hi, float *sa, float *sb,
                                           FOLD fold) {
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int u0 = 0; u0 < NU; u0 += 8) { /* eight units' loads, then their mmas (ptxas interleaves: ~5 ahead) */
    uint4 la[8], lb[8];
#pragma unroll
    for (int u = 0; u < 8; u++) load_a(u0 + u, la[u], lb[u]);
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const uint4 b = load_b(u0 + u);
      const uint32_t a0[4] = {la[u].x, lb[u].x, la[u].y, lb[u].y}, a1[4] = {la[u].z, lb[u].z, la[u].w, lb[u].w};
      at_mma_bf16(c, a0, b.x, b.y);
      at_mma_bf16(c2, a1, b.z, b.w);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++) c[i] += c2[i];
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
 * 16-byte load per key and chunk), so K is read once, coalesced, for all REP heads. */
template <int REP, int KM, int NU>
__global__ void __launch_bounds__(AT_THREADS) scores_kernel(const float *q, const uint16_t *kc, int nkv, int hd,
                                                            float scale, const int *pos_p, int window,
                                                            at_splits sp, int64_t ctx_cap, float *scores,
                                                            float *smax, float *ssum, float *amax, int namax,
                                                            at_post post) {
  /* with post: q's and k's norm weights and the rotation frequencies, which never change,
   * before the wait (as qkv_post_kernel loads them) */
  qp_consts cq, ckn;
  if (KM == AT_K_REG && post.p.y) {
    qp_load(cq, post.p.qn, post.p.inv_freq, hd);
    qp_load(ckn, post.p.kn, post.p.inv_freq, hd);
  }
  if (KM == AT_K_REG && !post.p.y) at_prefetch_split(kc, nkv, hd, pos_p, window, sp);
  ck_pdl_enter();
  amax_zero(amax, namax);
  CK_DYNAMIC_SHARED(float4, qs4); /* [REP][hd] floats (with post, then [hd] for the new key) */
  float *qs = (float *)qs4;
  int g = blockIdx.x, s = blockIdx.y, splits = sp.n;
  int pos = *pos_p, lo, hi;
  split_range(pos, window, sp, s, &lo, &hi);
  if (lo == hi) return; /* past the live splits: nothing reads this split's results */
  float bscale = rb(scale);
  /* with post, the split holding the new position writes its K and V first, and reads its keys
   * through the L2 (coherent loads: one of them was written by this block) */
  const bool post_kv = KM == AT_K_REG && post.p.y && hi == pos + 1;
  if (KM == AT_K_REG && post.p.y) {
    /* the q/k/v post step of this group's heads (qkv_post.cuh: qkv_post_kernel's operations),
     * then bf16(q·bf16(scale)) as below */
    const dk_post &pp = post.p;
    for (int r = 0; r < REP; r++)
      qp_head(pp.y + (int64_t)(g * REP + r) * hd, pp.ks, pp.kstride, hd, cq, pp.eps, (float)pos, pp.traditional,
              qs + r * hd);
    if (scale != 1.0f)
      for (int i = threadIdx.x; i < REP * hd; i += blockDim.x) qs[i] = rb(__fmul_rn(qs[i], bscale));
    if (post_kv) {
      float *kv = qs + REP * hd;
      qp_head(pp.y + (int64_t)pp.nq * hd + (int64_t)g * hd, pp.ks, pp.kstride, hd, ckn, pp.eps, (float)pos,
              pp.traditional, kv);
      qp_write_kv(pp.y, pp.ks, pp.kstride, pp.nq, nkv, hd, g, pp.k_eq_v, pp.v_norm, pp.eps,
                  window > 0 ? pos % window : pos, kv, post.kc, post.vc);
    }
  } else {
    at_stage_q(q, g, REP, hd, scale, bscale, qs4);
  }
  __syncthreads(); /* q staged; with post_kv, the new key's row written */
  int64_t kvd = (int64_t)nkv * hd;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  int nch = (hd + 255) / 256;
  float mx[REP]; /* this thread's running max of each head's scores (−∞ where it has none) */
  if constexpr (KM == AT_K_TC) {
    /* tensor cores (MLXRT_ATTN_SCORES=2; GQA 8, head dims 256 and 512): a warp takes 16 keys at a
     * time as the A operand of mma.m16n8k16 (rows = keys) and the group's eight q rows as B
     * (columns = heads). Lane (gq, t) = (lane / 4, lane % 4) loads its own 16 bytes of keys
     * gq and gq + 8 at dims 32u + 8t of each 32-dim unit u, and the fragment k order is
     * permuted alike in A and B (unit u's first mma takes dims 8t + {0, 1, 2, 3}, its second
     * 8t + {4 … 7}), so no shuffle or shared-memory staging is needed: 2 loads and 2 mmas
     * per 32 dims of 16 keys, against ~180 instructions per key on the FMA path. The
     * products are exact; the float32 sums run in the tensor cores' order, so the scores may
     * differ from the FMA path's in their last bf16 bit (a different sum, not a different
     * product: the CPU-reference checks decide). Lane (gq, t) ends with heads 2t and 2t + 1
     * of keys gq and gq + 8. */
    static_assert(REP == 8 && NU >= 1 && NU <= 16 && NU % 8 == 0, "tensor-core scores: GQA 8, head dim 256 or 512");
    const int gq = lane >> 2, t = lane & 3;
    /* the B fragments in shared memory after q, in fragment order (unit u, lane L: the bf16
     * pairs of head L / 4 at dims 32u + 8(L % 4) …), one 16-byte load per unit and lane: held in
     * registers they took 64 of the kernel's 168 (now 56–64) */
    uint4 *qf = reinterpret_cast<uint4 *>(qs + REP * hd); /* [NU][32] */
    for (int i = threadIdx.x; i < NU * 32; i += blockDim.x) {
      const int u = i >> 5, L = i & 31;
      const float4 *qp = reinterpret_cast<const float4 *>(qs + (L >> 2) * hd + u * 32 + 8 * (L & 3));
      const float4 x0 = qp[0], x1 = qp[1];
      qf[i] = make_uint4(bf16_pair(x0.x, x0.y), bf16_pair(x0.z, x0.w), bf16_pair(x1.x, x1.y), bf16_pair(x1.z, x1.w));
    }
    __syncthreads();
    float *sa = scores + (int64_t)(g * REP + 2 * t) * ctx_cap, *sb = sa + ctx_cap;
    float ma = -INFINITY, mb = -INFINITY;
    for (int j0 = lo + 16 * warp; j0 < hi; j0 += 16 * nw) {
      const int ka = j0 + gq, kb = ka + 8, ja = ka < hi ? ka : j0, jb = kb < hi ? kb : j0;
      const uint16_t *ra = kc + (window > 0 ? ja % window : ja) * kvd + (int64_t)g * hd + 8 * t;
      const uint16_t *rb8 = kc + (window > 0 ? jb % window : jb) * kvd + (int64_t)g * hd + 8 * t;
      at_tc_keys<NU>(
          [&](int u, uint4 &a, uint4 &b) {
            a = __ldg(reinterpret_cast<const uint4 *>(ra + u * 32));
            b = __ldg(reinterpret_cast<const uint4 *>(rb8 + u * 32));
          },
          [&](int u) { return qf[u * 32 + lane]; }, ka, kb, hi, sa, sb,
          [&](float x, float y) { ma = fmaxf(ma, x), mb = fmaxf(mb, y); });
    }
#pragma unroll
    for (int r = 0; r < REP; r++) mx[r] = r == 2 * t ? ma : r == 2 * t + 1 ? mb : -INFINITY;
  } else {
    constexpr int KPI = KM == AT_K_RING ? AT_RING_KPI : REP <= 8 ? 4 : 2, NP = KPI * REP;
    const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
    float *prow = scores + (int64_t)(g * REP + pr) * ctx_cap;
    float mxl = -INFINITY;
    /* one step: the dot products of the KPI keys at kp with the group's heads, completed, rounded
     * and written (the keys past hi repeat key j and are dropped) */
    auto step = [&](int j, const uint16_t *const (&kp)[KPI], bool cg) {
      float dk[KPI][REP];
      if (KM == AT_K_REG && cg) /* (a generic lambda here crashed nvcc 13.0) */
        key_dots<REP, KPI, false, true>(kp, qs, hd, nch, lane, dk);
      else
        key_dots<REP, KPI, KM == AT_K_RING>(kp, qs, hd, nch, lane, dk);
      const float v = at_step_score<REP, KPI>(dk, lane);
      if (j + pu < hi) {
        if (pw) prow[j + pu] = v;
        mxl = fmaxf(mxl, v);
      }
    };
    if constexpr (KM == AT_K_RING) {
      /* K through a per-warp ring of AT_RING_STAGES steps in shared memory, filled by cp.async:
       * AT_RING_STAGES − 1 steps' keys in flight while one is computed, without holding
       * registers. Each lane copies exactly the 16-byte pieces it reads itself (dims
       * c·256 + 8·lane of each key), so the only ordering needed is its own wait. */
      uint16_t *ring = reinterpret_cast<uint16_t *>(qs + REP * hd) + (size_t)warp * AT_RING_STAGES * KPI * hd;
      const int stride = KPI * nw;
      auto issue = [&](int j, int slot) {
        if (j < hi)
  #pragma unroll
          for (int u = 0; u < KPI; u++) {
            const int jj = j + u < hi ? j + u : j;
            const int64_t sl = window > 0 ? jj % window : jj;
            const uint16_t *src = kc + sl * kvd + (int64_t)g * hd;
            uint16_t *dst = ring + ((size_t)slot * KPI + u) * hd;
            for (int c = 0; c < nch; c++) {
              const int d = c * 256 + lane * 8;
              if (d < hd) at_cp16(dst + d, src + d);
            }
          }
        at_cp_commit(); /* one group per step, empty past hi, so the wait count stays fixed */
      };
      int j = lo + KPI * warp;
  #pragma unroll
      for (int t = 0; t < AT_RING_STAGES - 1; t++) issue(j + t * stride, t);
      for (int t = 0; j < hi; j += stride, t++) {
        issue(j + (AT_RING_STAGES - 1) * stride, (t + AT_RING_STAGES - 1) % AT_RING_STAGES);
        at_cp_wait<AT_RING_STAGES - 1>(); /* this step's group has landed */
        const uint16_t *kp[KPI];
  #pragma unroll
        for (int u = 0; u < KPI; u++) kp[u] = ring + ((size_t)(t % AT_RING_STAGES) * KPI + u) * hd;
        step(j, kp, false);
      }
    } else {
      /* KPI keys per warp and step, their loads issued before any is used (the loop is latency-
       * bound: one step's loads and reductions overlap). The KPI·REP dot products are completed
       * by one transposed warp reduction: lane l ends with pair p = l / (32 / NP) (key u = p / REP,
       * head r = p % REP), each sum in the same order as one key at a time; the first lane of
       * each pair writes its score, and each lane keeps the running max of its head's scores. */
      for (int j = lo + KPI * warp; j < hi; j += KPI * nw) {
        const uint16_t *kp[KPI];
  #pragma unroll
        for (int u = 0; u < KPI; u++) {
          int jj = j + u < hi ? j + u : j;
          int64_t sl = window > 0 ? jj % window : jj;
          kp[u] = kc + sl * kvd + (int64_t)g * hd;
        }
        step(j, kp, post_kv);
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
 * voff of each key row. */
template <int KPI, int DPT>
__device__ __forceinline__ void pv_load_keys(const uint16_t *vc, int j0, int window, int64_t kvd, int64_t voff,
                                             float (&v)[KPI][DPT]) {
#pragma unroll
  for (int u = 0; u < KPI; u++) {
    const int j = j0 + u;
    const int64_t slot = window > 0 ? j % window : j;
    load_n(vc + slot * kvd + voff, DPT, v[u]);
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
template <int REP, int DPT, int VM>
__global__ void __launch_bounds__(AT_THREADS) pv_kernel(const uint16_t *vc, int nkv, int hd,
                                                        const int *pos_p, int window, at_splits sp,
                                                        int64_t ctx_cap, const float *scores,
                                                        const float *smax, const float *ssum, float *pacc,
                                                        unsigned *count, uint16_t *att, float *amax) {
  at_prefetch_split(vc, nkv, hd, pos_p, window, sp);
  ck_pdl_enter();
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
  int64_t kvd = (int64_t)nkv * hd;
  int d0 = threadIdx.x * DPT, active = d0 < hd;
  /* tensor cores (VM == AT_V_TC; GQA 8, head dims 256 / 512, so DPT 2 / 4): warp w owns dims
   * [w·hd/4, (w+1)·hd/4) in VG groups of 64, each as four mma.m16n8k16 tiles (rows = dims,
   * columns = the 8 heads, k = 16 keys) */
  constexpr int VG = VM == AT_V_TC ? DPT / 2 : 1;
  static_assert(VM != AT_V_TC || (REP == 8 && (DPT == 2 || DPT == 4)), "tensor-core p·v: GQA 8, head dim 256 or 512");
  float tacc[VG][4][4] = {};
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
    if constexpr (VM == AT_V_TC) {
      /* Lane (gq, t) loads 16 bytes (dims 8gq … 8gq + 7 of its group of 64) of 4 keys, 4t … 4t + 3
       * of each 16; byte permutes pair two keys' values of one dim into each A register (row
       * gq ↔ the even dim 8gq + 2i of mma i, row gq + 8 ↔ the odd one), and B pairs the bf16 p
       * of head gq at the same keys (the k order permuted alike in A and B). The products are
       * exact; the float32 sums run in the tensor cores' order, not key by key. Keys past n get
       * p = 0 and a zero V. */
      const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
      const int64_t vrow = (int64_t)g * hd + (threadIdx.x >> 5) * (hd / 4) + 8 * gq;
      for (int kt = 0; kt < n; kt += 16) {
        const int kk = kt + 4 * t;
        float p4[4];
#pragma unroll
        for (int j = 0; j < 4; j++) p4[j] = kk + j < n ? ps[gq][kk + j] : 0.0f;
        const uint32_t b0 = bf16_pair(p4[0], p4[1]), b1 = bf16_pair(p4[2], p4[3]);
#pragma unroll
        for (int gi = 0; gi < VG; gi++) {
          uint4 v[4];
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const int key = t0 + kk + j;
            const int64_t sl = window > 0 ? key % window : key;
            v[j] = kk + j < n ? __ldg(reinterpret_cast<const uint4 *>(vc + sl * kvd + vrow + 64 * gi))
                              : make_uint4(0u, 0u, 0u, 0u);
          }
          at_pv_tiles(v, b0, b1, tacc[gi]);
        }
      }
      continue;
    }
    if (!active) continue;
    constexpr int KPI = REP <= 8 ? 8 : 2;
    const int nb = n / KPI;
    const int64_t voff = (int64_t)g * hd + d0;
    /* KPI keys' loads in flight before their products, and the next KPI keys' loads issued
     * before this batch's products (two register buffers: the loop is latency-bound, and
     * with one buffer each batch waited a full round trip); each accumulator still adds the
     * keys in order */
    float va[KPI][DPT], vb[KPI][DPT];
    if (nb > 0) pv_load_keys<KPI, DPT>(vc, t0, window, kvd, voff, va);
    for (int b = 0; b < nb; b += 2) {
      if (b + 1 < nb) pv_load_keys<KPI, DPT>(vc, t0 + (b + 1) * KPI, window, kvd, voff, vb);
      pv_add_keys<REP, KPI, DPT>(ps, b * KPI, va, acc);
      if (b + 1 < nb) {
        if (b + 2 < nb) pv_load_keys<KPI, DPT>(vc, t0 + (b + 2) * KPI, window, kvd, voff, va);
        pv_add_keys<REP, KPI, DPT>(ps, (b + 1) * KPI, vb, acc);
      }
    }
    int jj = nb * KPI;
    for (; jj < n; jj++) {
      int j = t0 + jj;
      int64_t slot = window > 0 ? j % window : j;
      float v[DPT];
      load_n(vc + slot * kvd + (int64_t)g * hd + d0, DPT, v);
#pragma unroll
      for (int r = 0; r < REP; r++) {
        float p = ps[r][jj];
#pragma unroll
        for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p, v[i], acc[r][i]);
      }
    }
  }
  if constexpr (VM == AT_V_TC) {
    /* lane (gq, t) holds heads 2t and 2t + 1 at dims 8gq + 2i and + 1 of each group */
    const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
    float *d0p = pacc + ((int64_t)(g * REP + 2 * t) * splits + s) * hd + (threadIdx.x >> 5) * (hd / 4) + 8 * gq;
    float *d1p = d0p + (int64_t)splits * hd;
#pragma unroll
    for (int gi = 0; gi < VG; gi++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        d0p[64 * gi + 2 * i] = tacc[gi][i][0], d0p[64 * gi + 2 * i + 1] = tacc[gi][i][2];
        d1p[64 * gi + 2 * i] = tacc[gi][i][1], d1p[64 * gi + 2 * i + 1] = tacc[gi][i][3];
      }
  } else if (active) {
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
 * KV head would read rep · splits · hd partials alone, and one thread per output (the previous
 * form of this kernel) was latency-bound on its chains: 27 µs for 256 splits of the 31B's full
 * layer (ncu, session 8), one warp per scheduler. */
#define CB_CHAINS 8
__global__ void __launch_bounds__(AT_THREADS) combine_kernel(const float *pacc, const int *pos_p, int window,
                                                             at_splits sp, int hd, uint16_t *att, float *amax) {
  static_assert(AT_THREADS / 32 * 2 == CB_CHAINS, "two chains per warp");
  ck_pdl_enter();
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

/* Raises a kernel's dynamic shared memory limit to `bytes` where *set (what was allowed so far)
 * is below it. */
template <typename F>
static cudaError_t at_allow_smem(F fn, size_t bytes, size_t *set) {
#ifndef CK_EMULATION
  if (*set < bytes) {
    const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e) return e;
    *set = bytes;
  }
#else
  (void)fn, (void)bytes, (void)set;
#endif
  return cudaSuccess;
}

template <int REP>
static cudaError_t launch_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                    float scale, const int *pos, int window, at_splits sp, int64_t ctx_cap,
                                    float *scores, float *smax, float *ssum, float *pacc, unsigned *count,
                                    uint16_t *att, float *amax, int namax, int kpath, at_post post,
                                    cudaStream_t st) {
  const int splits = sp.n;
  size_t smem = (size_t)(REP + (post.p.y ? 1 : 0)) * hd * sizeof(float);
  /* how the scores pass reads K (dk_attention's kpath): the ring where ring and q fit 48 KB,
   * the tensor cores for GQA 8 at head dims 256 and 512; otherwise through registers */
  const size_t ring_smem = smem + (size_t)(AT_THREADS / 32) * AT_RING_STAGES * AT_RING_KPI * hd * sizeof(uint16_t);
  const bool use_ring = (kpath & 3) == AT_K_RING && ring_smem <= 48 * 1024;
  void (*scores_fn)(const float *, const uint16_t *, int, int, float, const int *, int, at_splits, int64_t, float *,
                    float *, float *, float *, int, at_post) =
      use_ring ? scores_kernel<REP, AT_K_RING, 0> : scores_kernel<REP, AT_K_REG, 0>;
  if constexpr (REP == 8)
    if ((kpath & 3) == AT_K_TC && (hd == 256 || hd == 512)) {
      scores_fn = hd == 512 ? scores_kernel<8, AT_K_TC, 16> : scores_kernel<8, AT_K_TC, 8>;
      smem += (size_t)hd / 32 * 32 * sizeof(uint4); /* the q fragments */
    }
  int dpt = hd <= AT_THREADS ? 1 : hd <= 2 * AT_THREADS ? 2 : hd <= 4 * AT_THREADS ? 4 : 8;
#ifndef CK_EMULATION
  /* 48 KB of ring and q plus the kernel's static buffers pass the default limit of 48 KB per
   * block (GQA 8, head dim 512): raise it once */
  static bool ring_attr_set = false;
  if (use_ring && !ring_attr_set) {
    cudaError_t a = cudaFuncSetAttribute(scores_kernel<REP, AT_K_RING, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         48 * 1024);
    if (a) return a;
    ring_attr_set = true;
  }
#endif
  cudaError_t e = cudaSuccess;
  bool tma = false;
  if constexpr (REP == 8)
    /* K streamed by bulk copies (kpath 3): the shapes it takes (GQA 8, head dims 256 and 512,
     * at most 4 KV heads, no fused post step); other layers keep the register path */
    if ((kpath & 3) == AT_K_TMA && (hd == 256 || hd == 512) && nkv <= AS_MAX_NKV && !post.p.y) {
      tma = true;
      const size_t tsm = as_smem_bytes(nkv, hd);
      void (*fn)(const float *, const uint16_t *, int, int, float, const int *, int, at_splits, int64_t, float *,
                 float *, float *, float *, int) = hd == 512 ? scores_tma_kernel<16> : scores_tma_kernel<8>;
      static size_t attr_set[2] = {0, 0}; /* the dynamic shared memory allowed so far, per instance */
      e = at_allow_smem(fn, tsm, &attr_set[hd == 512]);
      if (e) return e;
      e = ck_launch(fn, dim3(splits), AT_THREADS, tsm, st, q, kc, nkv, hd, scale, pos, window, sp, ctx_cap, scores,
                    smax, ssum, amax, namax);
    }
  if (!tma)
    e = ck_launch(scores_fn, dim3(nkv, splits), AT_THREADS, use_ring ? ring_smem : smem, st, q, kc, nkv, hd, scale,
                  pos, window, sp, ctx_cap, scores, smax, ssum, amax, namax, post);
  if (e) return e;
  void (*pv)(const uint16_t *, int, int, const int *, int, at_splits, int64_t, const float *, const float *,
             const float *, float *, unsigned *, uint16_t *, float *) =
      dpt == 1   ? pv_kernel<REP, 1, AT_V_FMA>
      : dpt == 2 ? pv_kernel<REP, 2, AT_V_FMA>
      : dpt == 4 ? pv_kernel<REP, 4, AT_V_FMA>
                 : pv_kernel<REP, 8, AT_V_FMA>;
  if constexpr (REP == 8)
    if ((kpath & AT_V_TC_BIT) && (hd == 256 || hd == 512))
      pv = hd == 512 ? pv_kernel<8, 4, AT_V_TC> : pv_kernel<8, 2, AT_V_TC>;
  bool pv_tma = false;
  if constexpr (REP == 8)
    /* V streamed by bulk copies (kpath bit AT_V_TMA_BIT): GQA 8, head dims 256 and 512, at most 4
     * KV heads; other layers keep the kernel above */
    if ((kpath & AT_V_TMA_BIT) && (hd == 256 || hd == 512) && nkv <= AS_MAX_NKV) {
      pv_tma = true;
      const size_t psm = pt_smem_bytes(nkv, hd);
      void (*fn)(const uint16_t *, int, int, const int *, int, at_splits, int64_t, const float *, const float *,
                 const float *, float *, unsigned *, uint16_t *, float *) =
          hd == 512 ? pv_tma_kernel<8> : pv_tma_kernel<4>;
      static size_t pattr_set[2] = {0, 0};
      e = at_allow_smem(fn, psm, &pattr_set[hd == 512]);
      if (e) return e;
      e = ck_launch(fn, dim3(splits), AT_THREADS, psm, st, vc, nkv, hd, pos, window, sp, ctx_cap, scores, smax, ssum,
                    pacc, count, att, amax);
    }
  if (!pv_tma)
    e = ck_launch(pv, dim3(nkv, splits), AT_THREADS, 0, st, vc, nkv, hd, pos, window, sp, ctx_cap, scores, smax,
                  ssum, pacc, count, att, amax);
  if (e || splits <= AT_LAST_BLOCK_SPLITS) return e;
  return ck_launch(combine_kernel, dim3(nkv * REP, (hd + 31) / 32), AT_THREADS, 0, st, pacc, pos, window, sp, hd,
                   att, amax);
}

static_assert(AT_THREADS == QP_T, "the scores kernel's q/k/v post step runs qkv_post.cuh on its threads");

static int attention_impl(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd, float scale,
                          const int *pos, int window, int splits, int min_keys, int kpath, int64_t ctx_cap,
                          float *scores, float *smax, float *ssum, float *pacc, unsigned *count, uint16_t *att,
                          float *amax, int namax, at_post post, void *stream) {
  const int extra = post.p.y ? 1 : 0; /* the new key's row beside q */
  if (nkv <= 0 || nq % nkv || hd % 8 || hd > AT_MAX_HD ||
      (size_t)(nq / nkv + extra) * hd * sizeof(float) > 48 * 1024 || splits < 1 || min_keys < 1 ||
      (post.p.y && (kpath != 0 || hd > QP_T * QP_V || post.p.nq != nq || !post.kc || !post.vc)))
    return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  const at_splits sp = {splits, min_keys};
  switch (nq / nkv) {
  case 1: return (int)launch_attention<1>(q, kc, vc, nkv, hd, scale, pos, window, sp, ctx_cap, scores, smax, ssum, pacc, count, att, amax, namax, kpath, post, st);
  case 2: return (int)launch_attention<2>(q, kc, vc, nkv, hd, scale, pos, window, sp, ctx_cap, scores, smax, ssum, pacc, count, att, amax, namax, kpath, post, st);
  case 4: return (int)launch_attention<4>(q, kc, vc, nkv, hd, scale, pos, window, sp, ctx_cap, scores, smax, ssum, pacc, count, att, amax, namax, kpath, post, st);
  case 8: return (int)launch_attention<8>(q, kc, vc, nkv, hd, scale, pos, window, sp, ctx_cap, scores, smax, ssum, pacc, count, att, amax, namax, kpath, post, st);
  case 16: return (int)launch_attention<16>(q, kc, vc, nkv, hd, scale, pos, window, sp, ctx_cap, scores, smax, ssum, pacc, count, att, amax, namax, kpath, post, st);
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int dk_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                            float scale, const int *pos, int window, int splits, int min_keys, int kpath,
                            int64_t ctx_cap, float *scores, float *smax, float *ssum, float *pacc, unsigned *count,
                            uint16_t *att, float *amax, int namax, void *stream) {
  if (!q) return (int)cudaErrorInvalidValue;
  at_post none = {};
  return attention_impl(q, kc, vc, nq, nkv, hd, scale, pos, window, splits, min_keys, kpath, ctx_cap, scores, smax,
                        ssum, pacc, count, att, amax, namax, none, stream);
}

extern "C" int dk_attention_post(const dk_post *post, uint16_t *kc, uint16_t *vc, int nq, int nkv, int hd, float scale,
                                 const int *pos, int window, int splits, int min_keys, int64_t ctx_cap, float *scores,
                                 float *smax, float *ssum, float *pacc, unsigned *count, uint16_t *att, float *amax,
                                 int namax, void *stream) {
  if (!post || !post->y) return (int)cudaErrorInvalidValue;
  at_post p = {*post, kc, vc};
  return attention_impl(NULL, kc, vc, nq, nkv, hd, scale, pos, window, splits, min_keys, 0, ctx_cap, scores, smax,
                        ssum, pacc, count, att, amax, namax, p, stream);
}

CK_PDL_EARLY_SETTER(ck_pdl_early_attention)
