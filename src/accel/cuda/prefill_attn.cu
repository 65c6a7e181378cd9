/* The batched prompt pass's causal attention for T queries (pf_attention): tensor cores, two
 * passes over the keys so p is rounded to bf16 after the exact float32 normalisation, as the
 * reference path does (docs/DECODE.md "Prefill"), and a plain kernel as its reference. Its
 * primitives have host emulations, so tests/gpu/prefill_attn_emulate.cpp runs these kernels
 * on a machine without a GPU. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "ck_mma.cuh"
#include "prefill_attn_common.cuh"
#include "prefill_kernels.h"
#include "qmv_tc.cuh" /* the mbarrier and bulk-copy primitives */

/* An mma A fragment by 32-bit shared loads (the mma1 baseline kind): rows a (g) and b (g + 8)
 * at this lane's k pair and the pair 8 further. */
__device__ __forceinline__ void frag_a_rows(uint32_t (&A)[4], const uint16_t *a, const uint16_t *b) {
  A[0] = *reinterpret_cast<const uint32_t *>(a);
  A[1] = *reinterpret_cast<const uint32_t *>(b);
  A[2] = *reinterpret_cast<const uint32_t *>(a + 8);
  A[3] = *reinterpret_cast<const uint32_t *>(b + 8);
}

/* ---- causal attention of T queries -------------------------------------------------------- */
#define PA_KT 32 /* keys per tile: 8 per warp of a row group */

/* Rows k0 … k0 + PA_KT − 1 of K or V (coff: the KV head's offset in a row) into a [PA_KT][HD + 8]
 * tile; rows past hi are zeroed. Thread i of NT copies 16-byte column i % (HD/8) of rows i / (HD/8),
 * + NT / (HD/8), …; a sliding layer's ring slot is found from the tile's first slot (one division
 * per tile, not one per row). ASYNC: cp.async, else plain loads and stores. */
template <int HD, int NT, bool ASYNC>
__device__ __forceinline__ void pa_tile_load(uint16_t *dst, const uint16_t *cache, const uint16_t *chunk, int64_t k0,
                                             int64_t hi, int64_t p0, int window, int64_t kvd, int64_t coff) {
  constexpr int VPR = HD / 8, LD = HD + 8, RSTEP = NT / VPR, NR = (PA_KT + RSTEP - 1) / RSTEP;
  static_assert(NT % VPR == 0, "a row's 16-byte columns within one pass of the threads");
  const int cc = threadIdx.x % VPR, r0 = threadIdx.x / VPR;
  const int64_t s0 = window > 0 ? k0 % window : 0;
#pragma unroll
  for (int k = 0; k < NR; k++) {
    const int r = r0 + k * RSTEP;
    if (r >= PA_KT) break;
    const int64_t j = k0 + r;
    uint16_t *d = dst + r * LD + cc * 8;
    if (j > hi) {
      *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
      continue;
    }
    const uint16_t *src = pa_tile_row<PA_KT>(cache, chunk, j, r, s0, p0, window, kvd) + coff + cc * 8;
    if (ASYNC)
      at_cp16(d, src);
    else
      *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(src);
  }
}

/* the block's nrows query rows of head h as bf16(q·bf16(scale)) in shared memory (row stride
 * HD + 8); padding rows repeat the last valid query */
template <int HD>
__device__ __forceinline__ void pa_stage_q(uint16_t *Qs, const PaArgs &a, int nrows, int q0, int h, int nvalid) {
  const int64_t qstride = (int64_t)a.nq * HD;
  const float bscale = rb(a.scale);
  for (int i = threadIdx.x; i < nrows * HD; i += blockDim.x) {
    int r = i / HD, d = i % HD;
    int tok = q0 + (r < nvalid ? r : nvalid - 1);
    float v = a.q[tok * qstride + (int64_t)h * HD + d];
    if (a.scale != 1.0f) v = rb(__fmul_rn(v, bscale));
    Qs[r * (HD + 8) + d] = ck_f32_to_bf16(v);
  }
}

/* Double-buffered tiles by cp.async: wait for tile it's copies while tile it + 1's go into the
 * other buffer (issue(b), b = the buffer; the barrier ending iteration it − 1 freed it), then a
 * block barrier so every thread sees tile it. */
template <class Issue>
__device__ __forceinline__ void pa_cp_next(int it, int ntiles, Issue issue) {
  if (it + 1 < ntiles) {
    issue((it & 1) ^ 1);
    at_cp_commit();
    at_cp_wait<1>();
  } else {
    at_cp_wait<0>();
  }
  __syncthreads();
}

/* BULK tiles (kinds 7 and 8): lane r of warp 0 copies key row k0 + r of K (and of V) with one bulk
 * copy each, completing on the buffer's mbarrier, instead of every thread issuing 16-byte
 * cp.async copies (a quarter of the kernel's instructions on the H200); rows past hi are zeroed
 * by plain stores before the mbarrier's arrival, which publishes them with the copies. Called
 * after a block barrier that freed the buffers (the fence orders the block's generic writes to
 * them — the zeros, the score partials — before the copies). */
template <int HD>
__device__ __forceinline__ void pa_bulk_issue(uint64_t *mb, uint16_t *kdst, uint16_t *vdst, const PaArgs &a, int64_t k0,
                                              int64_t hi, int64_t kvd, int64_t coff) {
  if (threadIdx.x >= 32) return;
  constexpr int LD = HD + 8;
  constexpr uint32_t RB = HD * 2;
  const int lane = threadIdx.x;
  const int64_t j = k0 + lane;
  const bool live = j <= hi;
  const uint32_t nlive = (uint32_t)(hi - k0 + 1 < PA_KT ? hi - k0 + 1 : PA_KT);
  if (!live)
    for (int i = 0; i < HD / 8; i++) {
      *reinterpret_cast<uint4 *>(kdst + lane * LD + i * 8) = make_uint4(0u, 0u, 0u, 0u);
      if (vdst) *reinterpret_cast<uint4 *>(vdst + lane * LD + i * 8) = make_uint4(0u, 0u, 0u, 0u);
    }
  __syncwarp();
  fence_proxy_async_smem(); /* by every lane that issues a copy */
  if (lane == 0) mbar_expect(mb, nlive * RB * (vdst ? 2u : 1u));
  __syncwarp();
  if (live) {
    bulk_copy(kdst + lane * LD, pa_row(a.kc, a.kch, j, a.p0, a.window, kvd) + coff, RB, mb);
    if (vdst) bulk_copy(vdst + lane * LD, pa_row(a.vc, a.vch, j, a.p0, a.window, kvd) + coff, RB, mb);
  }
}

/* the parity of buffer it & 1's mbarrier phase that completes tile it: its uses before in this
 * pass, plus pass 1's when in pass 2 (with_v) */
__device__ __forceinline__ uint32_t pa_bulk_parity(int it, int ntiles, bool with_v) {
  return (uint32_t)((it >> 1) + (with_v ? (ntiles + 1 - (it & 1)) / 2 : 0)) & 1u;
}

/* A pass's K/V tiles, double-buffered: by cp.async from every thread (pa_tile_load), or with
 * BULK by warp 0's bulk copies on a per-buffer mbarrier (init: the mbarriers and a block
 * barrier). begin: tile 0's copies; next(it): tile it + 1's issued into the other buffer (the
 * barrier ending iteration it − 1 freed it), then tile it visible to every thread. */
template <int HD, int NT, bool BULK>
struct PaTiles {
  uint16_t *Ks, *Vs;
  uint64_t *mb;
  const PaArgs *a;
  int64_t lo, hi, kvd, coff;
  int ntiles;
  __device__ void init() const {
    if (BULK && threadIdx.x == 0) {
      mbar_init(&mb[0], 1);
      mbar_init(&mb[1], 1);
      mbar_init_fence();
    }
    if (BULK) __syncthreads();
  }
  __device__ void issue(int b, int64_t k0, bool with_v) const {
    uint16_t *kd = Ks + b * PA_KT * (HD + 8), *vd = Vs + b * PA_KT * (HD + 8);
    if (BULK) {
      pa_bulk_issue<HD>(&mb[b], kd, with_v ? vd : nullptr, *a, k0, hi, kvd, coff);
      return;
    }
    pa_tile_load<HD, NT, true>(kd, a->kc, a->kch, k0, hi, a->p0, a->window, kvd, coff);
    if (with_v) pa_tile_load<HD, NT, true>(vd, a->vc, a->vch, k0, hi, a->p0, a->window, kvd, coff);
  }
  __device__ void begin(bool with_v) const {
    issue(0, lo, with_v);
    if (!BULK) at_cp_commit();
  }
  __device__ void next(int it, bool with_v) const {
    const int64_t k0 = lo + (int64_t)it * PA_KT;
    if (BULK) {
      if (it + 1 < ntiles) issue((it & 1) ^ 1, k0 + PA_KT, with_v);
      mbar_wait(&mb[it & 1], pa_bulk_parity(it, ntiles, with_v));
      return;
    }
    pa_cp_next(it, ntiles, [&](int b) { issue(b, k0 + PA_KT, with_v); });
  }
};

/* RG (a template parameter): 16-row query groups per block, sharing each K/V tile; 16·RG
 * queries and 128·RG threads per block */
#define PA_PLD 40              /* P row stride (bf16) */

template <int HD, int RG, bool DB>
constexpr size_t pa_smem() {
  constexpr int PA_QT = 16 * RG;
  return (size_t)(PA_QT + (DB ? 4 : 2) * PA_KT) * (HD + 8) * 2 + PA_QT * PA_PLD * 2 + 4 * PA_QT * 2 * sizeof(float) +
         (DB ? 2 * sizeof(uint64_t) : 0); /* BULK's mbarriers */
}

/* grid (ceil(T / 16·RG), nq), 4·RG warps. A block holds 16·RG queries of one head as RG row
 * groups of 16 (one m16 tile each, 4 warps each); all read the same K/V tiles from shared
 * memory. LDM: fragments by ldmatrix and the score k steps over 4 accumulators. Per key
 * tile of 32 (8 per warp of a group): S = Q·Kᵀ with mma m16n8k16 (bf16 in, float32 accumulate),
 * rounded to bf16 and masked. Pass 1 keeps each row's running (max, Σexp); pass 2 recomputes S,
 * forms p = bf16(exp(s − M)·(1/total)) in shared memory, and each warp accumulates P·V for its
 * group's rows and its share of the head's 8-column output tiles. Shared rows are padded by 8
 * bf16 so the fragment loads of the 8 row groups of a warp hit distinct banks.
 * DB (with LDM): two K and two V tiles, the next one copied by cp.async while this one computes
 * (the same operations on the same values: the same bits as without). */
template <int HD, bool LDM, int RG, bool DB, bool BULK = false>
__global__ void __launch_bounds__(128 * RG) pa_mma_kernel(PaArgs a) {
  constexpr int PA_QT = 16 * RG;
  constexpr int LD = HD + 8, NTILES = HD / 8;
  /* output tiles per warp: nt = wq + 4i, or with LDM pairs nt = 2wq + 8(i/2) + i%2 (one x4.trans
   * load of V serves both) */
  constexpr int NTW = LDM ? 2 * ((NTILES + 7) / 8) : (NTILES + 3) / 4;
  CK_DYNAMIC_SHARED(uint16_t, pa_sm);
  static_assert(!DB || LDM, "the double-buffered tiles are for the ldmatrix kernel");
  constexpr int NB = DB ? 2 : 1; /* K (and V) tiles in shared memory */
  uint16_t *Qs = pa_sm, *Ks = Qs + PA_QT * LD, *Vs = Ks + NB * PA_KT * LD, *Ps = Vs + NB * PA_KT * LD;
  constexpr uint32_t TILE_BYTES = PA_KT * LD * 2; /* from one K (V) tile to the next */
  float *red = reinterpret_cast<float *>(Ps + PA_QT * PA_PLD); /* [warp of a group][row][m, l] */
  const int h = blockIdx.y, gkv = h / (a.nq / a.nkv), q0 = blockIdx.x * PA_QT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wq = warp & 3, r0 = (warp >> 2) * 16; /* warp within its row group; the group's first row */
  const int64_t kvd = (int64_t)a.nkv * HD, qstride = (int64_t)a.nq * HD;
  const int nvalid = a.T - q0 < PA_QT ? a.T - q0 : PA_QT;
  /* this lane's two rows (r0 + g, r0 + g + 8); padding rows repeat the last valid query */
  int64_t pr[2], lo[2];
  for (int r = 0; r < 2; r++) {
    int row = r0 + g + 8 * r;
    pr[r] = a.p0 + q0 + (row < nvalid ? row : nvalid - 1);
    lo[r] = pa_lo(pr[r], a.window);
  }
  const int64_t lo_blk = pa_lo(a.p0 + q0, a.window), hi_blk = a.p0 + q0 + nvalid - 1;
  const int ntiles = (int)((hi_blk - lo_blk + PA_KT) / PA_KT);

  pa_stage_q<HD>(Qs, a, PA_QT, q0, h, nvalid);
  auto load = [&](uint16_t *dst, const uint16_t *cache, const uint16_t *chunk, int64_t k0) {
    pa_tile_load<HD, 128 * RG, false>(dst, cache, chunk, k0, hi_blk, a.p0, a.window, kvd, (int64_t)gkv * HD);
  };
  /* DB: the next tile in flight while one computes (BULK, kind 8: by bulk copies, as
   * pa_chain_kernel's kind 7); otherwise a plain load between two barriers */
  static_assert(!BULK || DB, "bulk-copy tiles are double-buffered");
  const PaTiles<HD, 128 * RG, BULK> tiles = {Ks, Vs, reinterpret_cast<uint64_t *>(red + 4 * PA_QT * 2), &a, lo_blk, hi_blk,
                                             kvd, (int64_t)gkv * HD, ntiles};
  tiles.init();
  auto begin = [&](bool with_v) {
    if (DB) tiles.begin(with_v);
  };
  auto arrive = [&](int it, int64_t k0, bool with_v) {
    if (DB) {
      tiles.next(it, with_v);
    } else {
      __syncthreads();
      load(Ks, a.kc, a.kch, k0);
      if (with_v) load(Vs, a.vc, a.vch, k0);
      __syncthreads();
    }
  };
  const uint16_t *qa = Qs + (r0 + g) * LD + 2 * t, *qb = qa + 8 * LD; /* A rows g, g + 8 of the group */
  /* S for rows (g, g+8) × keys k0 + wq·8 + (2t, 2t+1): s[2r + e], masked → -inf */
  /* LDM: fragments by ldmatrix (Q rows lane & 15 at column (lane >> 4)·8; K rows lane & 7 at
   * (lane >> 3)·8: two k steps per x4), and the k steps spread over NCH accumulators (one
   * chain of HD/16 dependent mmas otherwise), added at the end */
  const uint32_t q_ldm = ck_smem_off(Qs + (r0 + (lane & 15)) * LD + ((lane >> 4) << 3));
  const uint32_t k_ldm = ck_smem_off(Ks + (wq * 8 + (lane & 7)) * LD + ((lane >> 3) << 3));
  auto scores = [&](int64_t k0, float (&s)[4], int buf) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const uint16_t *kr = Ks + buf * PA_KT * LD + (wq * 8 + g) * LD + 2 * t;
    const uint32_t kl = k_ldm + (uint32_t)buf * TILE_BYTES;
    if (LDM) {
      constexpr int NK = HD / 16, NCH = NK >= 4 ? 4 : NK;
      float cc[NCH][4];
#pragma unroll
      for (int i = 0; i < NCH; i++) cc[i][0] = cc[i][1] = cc[i][2] = cc[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < NK; kk += 2) {
        uint32_t A0[4], A1[4], B[4];
        ck_ldsm<4, false>(A0, q_ldm + kk * 32);
        if (kk + 1 < NK) {
          ck_ldsm<4, false>(A1, q_ldm + (kk + 1) * 32);
          ck_ldsm<4, false>(B, kl + kk * 32);
        } else {
          ck_ldsm<2, false>(B, kl + kk * 32);
        }
        at_mma_bf16(cc[kk % NCH], A0, B[0], B[1]);
        if (kk + 1 < NK) at_mma_bf16(cc[(kk + 1) % NCH], A1, B[2], B[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; e++)
        c[e] = NCH == 4 ? (cc[0][e] + cc[1][e]) + (cc[2 % NCH][e] + cc[3 % NCH][e]) : NCH == 2 ? cc[0][e] + cc[1 % NCH][e] : cc[0][e];
    }
#pragma unroll
    for (int kk = 0; kk < (LDM ? 0 : HD / 16); kk++) {
      uint32_t A[4];
      frag_a_rows(A, qa + kk * 16, qb + kk * 16);
      uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr + kk * 16);
      uint32_t b1 = *reinterpret_cast<const uint32_t *>(kr + kk * 16 + 8);
      at_mma_bf16(c, A, b0, b1);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int r = e >> 1;
      int64_t j = k0 + wq * 8 + 2 * t + (e & 1);
      s[e] = j <= pr[r] && j >= lo[r] ? pa_rb(c[e]) : -INFINITY;
    }
  };

  /* pass 1: row max and Σ exp(s − max) */
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  begin(false);
  for (int it = 0; it < ntiles; it++) {
    int64_t k0 = lo_blk + (int64_t)it * PA_KT;
    const int buf = DB ? it & 1 : 0;
    arrive(it, k0, false);
    float s[4];
    scores(k0, s, buf);
#pragma unroll
    for (int e = 0; e < 4; e++) pa_push(m[e >> 1], l[e >> 1], s[e]);
    if (DB) __syncthreads(); /* every warp is done with buffer buf */
  }
  for (int r = 0; r < 2; r++)
    for (int o = 1; o <= 2; o <<= 1) {
      float m2 = __shfl_xor_sync(0xffffffffu, m[r], o), l2 = __shfl_xor_sync(0xffffffffu, l[r], o);
      pa_combine(m[r], l[r], m2, l2);
    }
  if (t == 0)
    for (int r = 0; r < 2; r++) {
      red[(wq * PA_QT + r0 + g + 8 * r) * 2] = m[r];
      red[(wq * PA_QT + r0 + g + 8 * r) * 2 + 1] = l[r];
    }
  __syncthreads();
  float M[2], inv[2];
  for (int r = 0; r < 2; r++) {
    float mm = -INFINITY, ll = 0.f;
    for (int w = 0; w < 4; w++) {
      const float *rw = red + (w * PA_QT + r0 + g + 8 * r) * 2;
      pa_combine(mm, ll, rw[0], rw[1]);
    }
    M[r] = mm;
    inv[r] = __fdiv_rn(1.0f, ll);
  }

  /* pass 2: p = bf16(exp(s − M)·inv), O += P·V */
  float o[NTW][4];
#pragma unroll
  for (int i = 0; i < NTW; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  const uint16_t *pa = Ps + (r0 + g) * PA_PLD + 2 * t, *pb = pa + 8 * PA_PLD;
  /* LDM: P rows lane & 15 at column (lane >> 4)·8; V (.trans) key rows lane & 15 at column
   * (lane >> 4)·8, so one x4 gives the B fragments of output tiles nt and nt + 1 */
  const uint32_t p_ldm = ck_smem_off(Ps + (r0 + (lane & 15)) * PA_PLD + ((lane >> 4) << 3));
  const uint32_t v_ldm = ck_smem_off(Vs + (lane & 15) * LD + ((lane >> 4) << 3));
  begin(true);
  for (int it = 0; it < ntiles; it++) {
    int64_t k0 = lo_blk + (int64_t)it * PA_KT;
    const int buf = DB ? it & 1 : 0;
    arrive(it, k0, true);
    float s[4];
    scores(k0, s, buf);
    uint16_t p[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int r = e >> 1;
      p[e] = s[e] == -INFINITY ? (uint16_t)0 : pa_bf16(__fmul_rn(expf(__fsub_rn(s[e], M[r])), inv[r]));
    }
    *reinterpret_cast<uint32_t *>(Ps + (r0 + g) * PA_PLD + wq * 8 + 2 * t) = p[0] | ((uint32_t)p[1] << 16);
    *reinterpret_cast<uint32_t *>(Ps + (r0 + g + 8) * PA_PLD + wq * 8 + 2 * t) = p[2] | ((uint32_t)p[3] << 16);
    __syncthreads();
    if (LDM) {
#pragma unroll
      for (int ks = 0; ks < PA_KT / 16; ks++) {
        uint32_t A[4];
        ck_ldsm<4, false>(A, p_ldm + ks * 32);
#pragma unroll
        for (int i = 0; i < NTW; i += 2) {
          const int nt = 2 * wq + 4 * i;
          if (nt >= NTILES) continue;
          uint32_t B[4];
          const uint32_t va = v_ldm + (uint32_t)buf * TILE_BYTES + (uint32_t)(ks * 16 * LD + nt * 8) * 2;
          if (nt + 1 < NTILES) {
            ck_ldsm<4, true>(B, va);
            at_mma_bf16(o[i], A, B[0], B[1]);
            at_mma_bf16(o[i + 1], A, B[2], B[3]);
          } else {
            ck_ldsm<2, true>(B, va);
            at_mma_bf16(o[i], A, B[0], B[1]);
          }
        }
      }
    }
#pragma unroll
    for (int ks = 0; ks < (LDM ? 0 : PA_KT / 16); ks++) {
      uint32_t A[4];
      frag_a_rows(A, pa + ks * 16, pb + ks * 16);
      const uint16_t *v0 = Vs + (ks * 16 + 2 * t) * LD + g;
#pragma unroll
      for (int i = 0; i < NTW; i++) {
        int nt = wq + 4 * i;
        if (nt < NTILES) {
          const uint16_t *vc = v0 + nt * 8;
          uint32_t b0 = vc[0] | ((uint32_t)vc[LD] << 16);
          uint32_t b1 = vc[8 * LD] | ((uint32_t)vc[9 * LD] << 16);
          at_mma_bf16(o[i], A, b0, b1);
        }
      }
    }
    if (DB) __syncthreads(); /* every warp is done with buffer buf and with P */
  }
#pragma unroll
  for (int i = 0; i < NTW; i++) {
    int nt = LDM ? 2 * wq + 8 * (i >> 1) + (i & 1) : wq + 4 * i;
    if (nt >= NTILES) continue;
    int col = nt * 8 + 2 * t;
    for (int r = 0; r < 2; r++) {
      int row = r0 + g + 8 * r;
      if (row >= nvalid) continue;
      uint32_t pair = ck_f32_to_bf16(o[i][2 * r]) | ((uint32_t)ck_f32_to_bf16(o[i][2 * r + 1]) << 16);
      *reinterpret_cast<uint32_t *>(a.att + (int64_t)(q0 + row) * qstride + (int64_t)h * HD + col) = pair;
    }
  }
}

/* Kind 6: the same values as pa_mma_kernel<HD, true, 4, true> — 64 queries of one head per block,
 * K/V tiles of 32 keys copied while the previous one computes, the score k steps in four chains
 * (step kk in chain kk % 4), the same (max, Σexp) tree, the same p and the same P·V mma per
 * output tile — so the same bits; only who issues each mma changes. That kernel's 16 × 8 warp
 * tiles load an A and a B fragment per mma (~768 B of shared memory per mma: the limit, not the
 * tensor cores). Here 8 warps: warp w is chain c = w & 3 of row half w >> 2 and forms its chain's
 * partial scores for 32 rows × 32 keys (8 mma per k step from 2 Q fragments, which pass 1 holds
 * in registers, and 2 K loads); the partials meet in shared memory (in the K tile just used when
 * HD = 512), where warp (c, h) takes keys 8c … 8c + 7 of its rows, the keys warp c of row groups
 * 2h and 2h + 1 had. P·V: each warp all 64 rows × HD/64 output tiles. */
#define PA6_XCH_FLOATS (4 * 3 * 64 * 8) /* [source chain][other n tile][row][8 keys] */
template <int HD>
__host__ __device__ constexpr bool pa6_xch_in_k() {
  return PA_KT * (HD + 8) * 2 >= PA6_XCH_FLOATS * 4;
}
template <int HD>
constexpr size_t pa6_smem() {
  return (size_t)(64 + 4 * PA_KT) * (HD + 8) * 2 + 64 * PA_PLD * 2 + 4 * 64 * 2 * sizeof(float) +
         (pa6_xch_in_k<HD>() ? 0 : PA6_XCH_FLOATS * sizeof(float)) + 2 * sizeof(uint64_t);
}

template <int HD, bool BULK>
__global__ void __launch_bounds__(256, 1) pa_chain_kernel(PaArgs a) {
  constexpr int QT = 64, LD = HD + 8, NK = HD / 16, KC = NK / 4, NTW = HD / 64;
  constexpr uint32_t TILE_BYTES = PA_KT * LD * 2;
  constexpr bool XK = pa6_xch_in_k<HD>();
  static_assert(NK % 4 == 0 && NTW % 2 == 0, "head dims 128 … 512");
  CK_DYNAMIC_SHARED(uint16_t, pa_sm);
  uint16_t *Qs = pa_sm, *Ks = Qs + QT * LD, *Vs = Ks + 2 * PA_KT * LD, *Ps = Vs + 2 * PA_KT * LD;
  float *red = reinterpret_cast<float *>(Ps + QT * PA_PLD); /* [chain][row][m, l] */
  float *xsep = red + 4 * QT * 2;
  uint64_t *mb = reinterpret_cast<uint64_t *>(xsep + (XK ? 0 : PA6_XCH_FLOATS)); /* BULK: one per buffer */
  const int h = blockIdx.y, gkv = h / (a.nq / a.nkv), q0 = blockIdx.x * QT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int c = warp & 3, rh = warp >> 2;
  const int64_t kvd = (int64_t)a.nkv * HD, qstride = (int64_t)a.nq * HD;
  const int nvalid = a.T - q0 < QT ? a.T - q0 : QT;
  const int64_t lo_blk = pa_lo(a.p0 + q0, a.window), hi_blk = a.p0 + q0 + nvalid - 1;
  const int ntiles = (int)((hi_blk - lo_blk + PA_KT) / PA_KT);
  /* this lane's rows rh·32 + m·16 + g + 8r; its keys' range as offsets from lo_blk */
  int prr[2][2], lor[2][2];
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      int row = rh * 32 + m * 16 + g + 8 * r;
      int64_t p = a.p0 + q0 + (row < nvalid ? row : nvalid - 1);
      prr[m][r] = (int)(p - lo_blk);
      lor[m][r] = (int)(pa_lo(p, a.window) - lo_blk);
    }

  pa_stage_q<HD>(Qs, a, QT, q0, h, nvalid);
  const PaTiles<HD, 256, BULK> tiles = {Ks, Vs, mb, &a, lo_blk, hi_blk, kvd, (int64_t)gkv * HD, ntiles};
  tiles.init();
  /* Q rows (lane & 15) of m tile m at column (lane >> 4)·8, this chain's first k step; K keys
   * ((lane >> 4)·8 + (lane & 7)) at column ((lane >> 3) & 1)·8: one x4 gives 2 n tiles' B */
  const uint32_t q_ldm = ck_smem_off(Qs + (rh * 32 + (lane & 15)) * LD + ((lane >> 4) << 3)) + (uint32_t)c * 32;
  const uint32_t k_ldm =
      ck_smem_off(Ks + (((lane >> 4) << 3) + (lane & 7)) * LD + (((lane >> 3) & 1) << 3)) + (uint32_t)c * 32;
  constexpr uint32_t MT_BYTES = 16 * LD * 2, NP_BYTES = 16 * LD * 2, KSTEP_BYTES = 4 * 32;
  uint32_t qreg[2][KC][4];
  /* this chain's partial scores: acc[m][n] rows rh·32 + m·16 + (g, g + 8), keys n·8 + 2t (+1) */
  auto chain_scores = [&](float (&acc)[2][4][4], int buf, bool from_regs) {
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
      for (int n = 0; n < 4; n++) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
#pragma unroll
    for (int i = 0; i < KC; i++) {
      uint32_t A[2][4], B[2][4];
#pragma unroll
      for (int m = 0; m < 2; m++) {
        if (from_regs) {
#pragma unroll
          for (int e = 0; e < 4; e++) A[m][e] = qreg[m][i][e];
        } else {
          ck_ldsm<4, false>(A[m], q_ldm + m * MT_BYTES + i * KSTEP_BYTES);
        }
      }
#pragma unroll
      for (int np = 0; np < 2; np++) ck_ldsm<4, false>(B[np], k_ldm + buf * TILE_BYTES + np * NP_BYTES + i * KSTEP_BYTES);
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int np = 0; np < 2; np++) {
          at_mma_bf16(acc[m][2 * np], A[m], B[np][0], B[np][1]);
          at_mma_bf16(acc[m][2 * np + 1], A[m], B[np][2], B[np][3]);
        }
    }
  };
  /* the partials of the n tiles other warps own, to shared memory; then this warp's own n tile
   * (c): (chain 0 + chain 1) + (chain 2 + chain 3), rounded and masked as pa_mma_kernel does */
  auto xch_put = [&](const float (&acc)[2][4][4], float *xch) {
#pragma unroll
    for (int n = 0; n < 4; n++) {
      if (n == c) continue;
      const int slot = n < c ? n : n - 1;
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const int row = rh * 32 + m * 16 + g + 8 * r;
          *reinterpret_cast<float2 *>(xch + ((c * 3 + slot) * QT + row) * 8 + 2 * t) =
              make_float2(acc[m][n][2 * r], acc[m][n][2 * r + 1]);
        }
    }
  };
  auto xch_take = [&](const float (&acc)[2][4][4], const float *xch, int it, float (&s)[2][4]) {
#pragma unroll
    for (int m = 0; m < 2; m++) {
      float own[4];
#pragma unroll
      for (int e = 0; e < 4; e++) own[e] = c == 0 ? acc[m][0][e] : c == 1 ? acc[m][1][e] : c == 2 ? acc[m][2][e] : acc[m][3][e];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        const int row = rh * 32 + m * 16 + g + 8 * r;
        float v[4][2];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          if (i == c) {
            v[i][0] = own[2 * r];
            v[i][1] = own[2 * r + 1];
          } else {
            const int slot = c < i ? c : c - 1;
            float2 x = *reinterpret_cast<const float2 *>(xch + ((i * 3 + slot) * QT + row) * 8 + 2 * t);
            v[i][0] = x.x;
            v[i][1] = x.y;
          }
        }
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int j = it * PA_KT + c * 8 + 2 * t + e;
          const float sum = (v[0][e] + v[1][e]) + (v[2][e] + v[3][e]);
          s[m][2 * r + e] = j <= prr[m][r] && j >= lor[m][r] ? pa_rb(sum) : -INFINITY;
        }
      }
    }
  };
  auto xch_at = [&](int buf) { return XK ? reinterpret_cast<float *>(Ks + buf * PA_KT * LD) : xsep; };
  /* tile it's scores for this warp's rows and keys (pass 2, with_v: V arrives with K, and Q's
   * fragments come from shared memory instead of registers) */
  auto tile_scores = [&](int it, bool with_v, float (&s)[2][4]) {
    const int buf = it & 1;
    tiles.next(it, with_v);
    float acc[2][4][4];
    chain_scores(acc, buf, !with_v);
    if (XK) __syncthreads(); /* every warp is done with K tile buf: the partials go there */
    xch_put(acc, xch_at(buf));
    __syncthreads();
    xch_take(acc, xch_at(buf), it, s);
  };

  /* pass 1: row max and Σ exp(s − max); Q's fragments of this chain in registers */
  __syncthreads();
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int i = 0; i < KC; i++) ck_ldsm<4, false>(qreg[m][i], q_ldm + m * MT_BYTES + i * KSTEP_BYTES);
  float mm[2][2], ll[2][2];
#pragma unroll
  for (int m = 0; m < 2; m++) mm[m][0] = mm[m][1] = -INFINITY, ll[m][0] = ll[m][1] = 0.f;
  tiles.begin(false);
  for (int it = 0; it < ntiles; it++) {
    float s[2][4];
    tile_scores(it, false, s);
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
      for (int e = 0; e < 4; e++) pa_push(mm[m][e >> 1], ll[m][e >> 1], s[m][e]);
    __syncthreads(); /* the partials are read and buffer buf is free */
  }
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int r = 0; r < 2; r++)
      for (int o = 1; o <= 2; o <<= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, mm[m][r], o), l2 = __shfl_xor_sync(0xffffffffu, ll[m][r], o);
        pa_combine(mm[m][r], ll[m][r], m2, l2);
      }
  if (t == 0)
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
      for (int r = 0; r < 2; r++) {
        const int row = rh * 32 + m * 16 + g + 8 * r;
        red[(c * QT + row) * 2] = mm[m][r];
        red[(c * QT + row) * 2 + 1] = ll[m][r];
      }
  __syncthreads();
  float M[2][2], inv[2][2];
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int row = rh * 32 + m * 16 + g + 8 * r;
      float mx = -INFINITY, lx = 0.f;
      for (int w = 0; w < 4; w++) pa_combine(mx, lx, red[(w * QT + row) * 2], red[(w * QT + row) * 2 + 1]);
      M[m][r] = mx;
      inv[m][r] = __fdiv_rn(1.0f, lx);
    }

  /* pass 2: p = bf16(exp(s − M)·inv), O += P·V (warp w: output tiles w·NTW …, all 64 rows) */
  float o[4][NTW][4];
#pragma unroll
  for (int m = 0; m < 4; m++)
#pragma unroll
    for (int n = 0; n < NTW; n++) o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.f;
  const uint32_t p_ldm = ck_smem_off(Ps + (lane & 15) * PA_PLD + ((lane >> 4) << 3));
  const uint32_t v_ldm = ck_smem_off(Vs + (lane & 15) * LD + ((lane >> 4) << 3) + warp * NTW * 8);
  tiles.begin(true);
  for (int it = 0; it < ntiles; it++) {
    const int buf = it & 1;
    float s[2][4];
    tile_scores(it, true, s);
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
      for (int r = 0; r < 2; r++) {
        uint16_t p[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float sv = s[m][2 * r + e];
          p[e] = sv == -INFINITY ? (uint16_t)0 : pa_bf16(__fmul_rn(expf(__fsub_rn(sv, M[m][r])), inv[m][r]));
        }
        const int row = rh * 32 + m * 16 + g + 8 * r;
        *reinterpret_cast<uint32_t *>(Ps + row * PA_PLD + c * 8 + 2 * t) = p[0] | ((uint32_t)p[1] << 16);
      }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < PA_KT / 16; ks++) {
      uint32_t A[4][4];
#pragma unroll
      for (int m = 0; m < 4; m++) ck_ldsm<4, false>(A[m], p_ldm + (uint32_t)(m * 16 * PA_PLD * 2 + ks * 32));
#pragma unroll
      for (int np = 0; np < NTW / 2; np++) {
        uint32_t B[4];
        ck_ldsm<4, true>(B, v_ldm + (uint32_t)buf * TILE_BYTES + (uint32_t)(ks * 16 * LD + np * 16) * 2);
#pragma unroll
        for (int m = 0; m < 4; m++) {
          at_mma_bf16(o[m][2 * np], A[m], B[0], B[1]);
          at_mma_bf16(o[m][2 * np + 1], A[m], B[2], B[3]);
        }
      }
    }
    __syncthreads(); /* every warp is done with buffer buf, the partials and P */
  }
#pragma unroll
  for (int m = 0; m < 4; m++)
#pragma unroll
    for (int n = 0; n < NTW; n++) {
      const int col = (warp * NTW + n) * 8 + 2 * t;
#pragma unroll
      for (int r = 0; r < 2; r++) {
        const int row = m * 16 + g + 8 * r;
        if (row >= nvalid) continue;
        uint32_t pair = ck_f32_to_bf16(o[m][n][2 * r]) | ((uint32_t)ck_f32_to_bf16(o[m][n][2 * r + 1]) << 16);
        *reinterpret_cast<uint32_t *>(a.att + (int64_t)(q0 + row) * qstride + (int64_t)h * HD + col) = pair;
      }
    }
}

/* The plain version: one block per (query, head), three passes over the keys (max, Σexp,
 * then p and Σ p·v in key order). Any head dim up to 1024; the reference for the fast one. */
#define PS_THREADS 128
#define PS_KT 128
__global__ void __launch_bounds__(PS_THREADS) pa_simple_kernel(PaArgs a) {
  CK_DYNAMIC_SHARED(float, ps_sm);
  float *qs = ps_sm, *sc = ps_sm + a.hd; /* [hd], [PS_KT] */
  const int tok = blockIdx.x, h = blockIdx.y, hd = a.hd, gkv = h / (a.nq / a.nkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int64_t kvd = (int64_t)a.nkv * hd, qstride = (int64_t)a.nq * hd, p = a.p0 + tok, lo = pa_lo(p, a.window);
  const float bscale = rb(a.scale);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = a.q[tok * qstride + (int64_t)h * hd + d];
    qs[d] = a.scale == 1.0f ? v : rb(__fmul_rn(v, bscale));
  }
  __syncthreads();
  auto dot = [&](int64_t j) {
    const uint16_t *kr = pa_row(a.kc, a.kch, j, a.p0, a.window, kvd) + (int64_t)gkv * hd;
    float s = 0.f;
    for (int d = lane; d < hd; d += 32) s = fmaf(qs[d], ck_bf16_to_f32(kr[d]), s);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return rb(s);
  };
  float mx = -INFINITY;
  for (int64_t j = lo + warp; j <= p; j += nw) mx = fmaxf(mx, dot(j));
  const float M = block_max(mx);
  float sum = 0.f;
  for (int64_t j = lo + warp; j <= p; j += nw) {
    float e = expf(__fsub_rn(dot(j), M));
    if (lane == 0) sum += e;
  }
  const float inv = __fdiv_rn(1.0f, block_sum(sum));
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int64_t k0 = lo; k0 <= p; k0 += PS_KT) {
    int n = (int)(p - k0 + 1 < PS_KT ? p - k0 + 1 : PS_KT);
    __syncthreads();
    for (int jj = warp; jj < n; jj += nw) {
      float pv = rb(__fmul_rn(expf(__fsub_rn(dot(k0 + jj), M)), inv));
      if (lane == 0) sc[jj] = pv;
    }
    __syncthreads();
    for (int jj = 0; jj < n; jj++) {
      const uint16_t *vr = pa_row(a.vc, a.vch, k0 + jj, a.p0, a.window, kvd) + (int64_t)gkv * hd;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        int d = threadIdx.x + i * PS_THREADS;
        if (d < hd) acc[i] = fmaf(sc[jj], ck_bf16_to_f32(vr[d]), acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    int d = threadIdx.x + i * PS_THREADS;
    if (d < hd) a.att[tok * qstride + (int64_t)h * hd + d] = ck_f32_to_bf16(acc[i]);
  }
}

template <int HD, bool LDM, int RG, bool DB, bool BULK = false>
static int pa_launch_k(const PaArgs &a, cudaStream_t st) {
  static int attr_set;
  constexpr size_t smem = pa_smem<HD, RG, DB>();
  constexpr int QT = 16 * RG;
  if (!attr_set) {
    cudaError_t e =
        cudaFuncSetAttribute(pa_mma_kernel<HD, LDM, RG, DB, BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e) return (int)e;
    attr_set = 1;
  }
  return (int)ck_launch(pa_mma_kernel<HD, LDM, RG, DB, BULK>, dim3((unsigned)((a.T + QT - 1) / QT), (unsigned)a.nq),
                        128 * RG, smem, st, a);
}
template <int HD, bool BULK>
static int pa_chain_launch(const PaArgs &a, cudaStream_t st) {
  static int attr_set;
  constexpr size_t smem = pa6_smem<HD>();
  if (!attr_set) {
    cudaError_t e =
        cudaFuncSetAttribute(pa_chain_kernel<HD, BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e) return (int)e;
    attr_set = 1;
  }
  return (int)ck_launch(pa_chain_kernel<HD, BULK>, dim3((unsigned)((a.T + 63) / 64), (unsigned)a.nq), 256, smem, st, a);
}
template <int HD>
static int pa_launch(const PaArgs &a, int kind, cudaStream_t st) {
  /* 64 queries per block: half the K/V traffic of 32, the same bits (pp512 at depth 32768 on
   * the H200: 1434-1442 t/s against 1239); the next K/V tile copied while one computes (db,
   * the default since session 11): 1868 against 1432, the same bits (docs/PERF.md) */
  switch (kind) {
  case 2: return pa_launch_k<HD, false, 2, false>(a, st);
  case 3: return pa_launch_k<HD, true, 2, false>(a, st);
  case 5: return pa_launch_k<HD, true, 4, false>(a, st);
  case 8: return pa_launch_k<HD, true, 4, true, true>(a, st);
  default: return pa_launch_k<HD, true, 4, true>(a, st);
  }
}

extern "C" int pf_attention(const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                            const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                            uint16_t *att, int kind, void *stream) {
  if (T <= 0) return 0;
  if (nkv <= 0 || nq % nkv || hd <= 0 || hd > 1024) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  PaArgs a = {q, kc, vc, kch, vch, att, T, nq, nkv, hd, window, p0, scale};
  if (kind == 9) { /* head dims 128, 256, 512 on sm_90a (prefill_attn_wg.cu); the others take kind 0 */
    if (pf_attention_wg_supported(hd)) return pf_attention_wg(q, kc, vc, kch, vch, T, p0, nq, nkv, hd, scale, window, att, stream);
    kind = 0;
  }
  if (kind == 6 || kind == 7) switch (hd) { /* head dims 128 … 512; the others take kind 0, the same bits */
    case 128: return kind == 7 ? pa_chain_launch<128, true>(a, st) : pa_chain_launch<128, false>(a, st);
    case 256: return kind == 7 ? pa_chain_launch<256, true>(a, st) : pa_chain_launch<256, false>(a, st);
    case 512: return kind == 7 ? pa_chain_launch<512, true>(a, st) : pa_chain_launch<512, false>(a, st);
    default: break;
    }
  if (kind != 1) switch (hd) {
    case 16: return pa_launch<16>(a, kind, st);
    case 32: return pa_launch<32>(a, kind, st);
    case 64: return pa_launch<64>(a, kind, st);
    case 128: return pa_launch<128>(a, kind, st);
    case 256: return pa_launch<256>(a, kind, st);
    case 512: return pa_launch<512>(a, kind, st);
    default: break;
    }
  size_t smem = (size_t)(hd + PS_KT) * sizeof(float);
  return (int)ck_launch(pa_simple_kernel, dim3((unsigned)T, (unsigned)nq), PS_THREADS, smem, st, a);
}
