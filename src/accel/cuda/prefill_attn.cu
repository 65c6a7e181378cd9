/* The batched prompt pass's causal attention for T queries (pf_attention): tensor cores, two
 * passes over the keys so p is rounded to bf16 after the exact float32 normalisation, as the
 * reference path does (docs/DECODE.md "Prefill"), and a plain kernel as its reference. Its
 * primitives have host emulations, so tests/gpu/prefill_attn_emulate.cpp runs these kernels
 * on a machine without a GPU. */
#include <atomic>

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

/* ---- causal attention of T queries -------------------------------------------------------- */
#define PA_KT 32 /* keys per tile: 8 per warp of a row group */

/* this thread's 16-byte column of a tile row (pa_tile_load) */
template <int HD>
__device__ __forceinline__ int pa_cc() { return (int)(threadIdx.x % (HD / 8)); }

/* Rows k0 … k0 + PA_KT − 1 of K or V (rows kvd apart) into a [PA_KT][HD + 8] tile; rows past hi
 * are zeroed. Thread i of NT copies 16-byte column cc = i % (HD/8) of rows i / (HD/8), + NT / (HD/8),
 * …, from element col of each row (K: the KV head's g·HD + 8cc; V: pa_vcol's); a sliding layer's
 * ring slot is found from the tile's first slot (one division per tile, not one per row). ASYNC:
 * cp.async, else plain loads and stores. */
template <int HD, int NT, bool ASYNC>
__device__ __forceinline__ void pa_tile_load(uint16_t *dst, const uint16_t *cache, const uint16_t *chunk, int64_t k0,
                                             int64_t hi, int64_t p0, int window, int64_t kvd, int col) {
  constexpr int VPR = HD / 8, LD = HD + 8, RSTEP = NT / VPR, NR = (PA_KT + RSTEP - 1) / RSTEP;
  static_assert(NT % VPR == 0, "a row's 16-byte columns within one pass of the threads");
  const int cc = pa_cc<HD>(), r0 = threadIdx.x / VPR;
  const int64_t s0 = window > 0 ? k0 % ck_ring(window) : 0;
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
    const uint16_t *src = pa_tile_row<PA_KT>(cache, chunk, j, r, s0, p0, window, kvd) + col;
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

/* A pass's K/V tiles, double-buffered, by cp.async from every thread (pa_tile_load). begin:
 * tile 0's copies; next(it): tile it + 1's issued into the other buffer (the barrier ending
 * iteration it − 1 freed it), then tile it visible to every thread. */
template <int HD, int NT>
struct PaTiles {
  uint16_t *Ks, *Vs;
  const PaArgs *a;
  int64_t lo, hi, kvd;
  int kcol, vcol; /* this thread's column of K and of V in a row (pa_tile_load) */
  int ntiles;
  __device__ void issue(int b, int64_t k0, bool with_v) const {
    uint16_t *kd = Ks + b * PA_KT * (HD + 8), *vd = Vs + b * PA_KT * (HD + 8);
    pa_tile_load<HD, NT, true>(kd, a->kc, a->kch, k0, hi, a->p0, a->window, kvd, kcol);
    if (with_v) pa_tile_load<HD, NT, true>(vd, a->vc, a->vch, k0, hi, a->p0, a->window, kvd, vcol);
  }
  __device__ void begin(bool with_v) const {
    issue(0, lo, with_v);
    at_cp_commit();
  }
  __device__ void next(int it, bool with_v) const {
    const int64_t k0 = lo + (int64_t)it * PA_KT;
    pa_cp_next(it, ntiles, [&](int b) { issue(b, k0 + PA_KT, with_v); });
  }
};

/* PA_RG 16-row query groups per block, sharing each K/V tile: 16·PA_RG queries and 128·PA_RG
 * threads per block */
#define PA_RG 4
#define PA_PLD 40 /* P row stride (bf16) */

template <int HD>
constexpr size_t pa_smem() {
  constexpr int PA_QT = 16 * PA_RG;
  return (size_t)(PA_QT + 4 * PA_KT) * (HD + 8) * 2 + PA_QT * PA_PLD * 2 + 4 * PA_QT * 2 * sizeof(float) +
         2 * sizeof(uint64_t);
}

/* grid (ceil(T / 16·RG), nq), 4·RG warps. A block holds 16·RG queries of one head as RG row
 * groups of 16 (one m16 tile each, 4 warps each); all read the same K/V tiles from shared
 * memory. Fragments by ldmatrix and the score k steps over 4 accumulators. Per key
 * tile of 32 (8 per warp of a group): S = Q·Kᵀ with mma m16n8k16 (bf16 in, float32 accumulate),
 * rounded to bf16 and masked. Pass 1 keeps each row's running (max, Σexp); pass 2 recomputes S,
 * forms p = bf16(exp(s − M)·(1/total)) in shared memory, and each warp accumulates P·V for its
 * group's rows and its share of the head's 8-column output tiles. Shared rows are padded by 8
 * bf16 so the fragment loads of the 8 row groups of a warp hit distinct banks.
 * Two K and two V tiles, the next one copied by cp.async while this one computes. */
template <int HD, bool KFV>
__global__ void __launch_bounds__(128 * PA_RG) pa_mma_kernel(PaArgs a) {
  constexpr int RG = PA_RG;
  constexpr int PA_QT = 16 * RG;
  constexpr int LD = HD + 8, NTILES = HD / 8;
  /* output tiles per warp in pairs nt = 2wq + 8(i/2) + i%2 (one x4.trans load of V serves both) */
  constexpr int NTW = 2 * ((NTILES + 7) / 8);
  CK_DYNAMIC_SHARED(uint16_t, pa_sm);
  constexpr int NB = 2; /* K (and V) tiles in shared memory */
  uint16_t *Qs = pa_sm, *Ks = Qs + PA_QT * LD, *Vs = Ks + NB * PA_KT * LD, *Ps = Vs + NB * PA_KT * LD;
  constexpr uint32_t TILE_BYTES = PA_KT * LD * 2; /* from one K (V) tile to the next */
  float *red = reinterpret_cast<float *>(Ps + PA_QT * PA_PLD); /* [warp of a group][row][m, l] */
  const int h = blockIdx.y, gkv = h / (a.nq / a.nkv), q0 = blockIdx.x * PA_QT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wq = warp & 3, r0 = (warp >> 2) * 16; /* warp within its row group; the group's first row */
  const int64_t qstride = (int64_t)a.nq * HD;
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
  /* the next tile in flight while one computes */
  const int c8 = pa_cc<HD>() * 8, kcol = gkv * HD + c8;
  const PaTiles<HD, 128 * RG> tiles = {Ks, Vs, &a, lo_blk, hi_blk, a.kv.ps, kcol, KFV ? pa_vcol(a, HD, gkv, c8) : kcol,
                                       ntiles};
  auto begin = [&](bool with_v) { tiles.begin(with_v); };
  auto arrive = [&](int it, int64_t, bool with_v) { tiles.next(it, with_v); };
  /* S for rows (g, g+8) × keys k0 + wq·8 + (2t, 2t+1): s[2r + e], masked → -inf */
  /* fragments by ldmatrix (Q rows lane & 15 at column (lane >> 4)·8; K rows lane & 7 at
   * (lane >> 3)·8: two k steps per x4), and the k steps spread over NCH accumulators (one
   * chain of HD/16 dependent mmas otherwise), added at the end */
  const uint32_t q_ldm = ck_smem_off(Qs + (r0 + (lane & 15)) * LD + ((lane >> 4) << 3));
  const uint32_t k_ldm = ck_smem_off(Ks + (wq * 8 + (lane & 7)) * LD + ((lane >> 3) << 3));
  auto scores = [&](int64_t k0, float (&s)[4], int buf) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const uint32_t kl = k_ldm + (uint32_t)buf * TILE_BYTES;
    {
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
    const int buf = it & 1;
    arrive(it, k0, false);
    float s[4];
    scores(k0, s, buf);
#pragma unroll
    for (int e = 0; e < 4; e++) pa_push(m[e >> 1], l[e >> 1], s[e]);
    __syncthreads(); /* every warp is done with buffer buf */
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
  /* P rows lane & 15 at column (lane >> 4)·8; V (.trans) key rows lane & 15 at column
   * (lane >> 4)·8, so one x4 gives the B fragments of output tiles nt and nt + 1 */
  const uint32_t p_ldm = ck_smem_off(Ps + (r0 + (lane & 15)) * PA_PLD + ((lane >> 4) << 3));
  const uint32_t v_ldm = ck_smem_off(Vs + (lane & 15) * LD + ((lane >> 4) << 3));
  begin(true);
  for (int it = 0; it < ntiles; it++) {
    int64_t k0 = lo_blk + (int64_t)it * PA_KT;
    const int buf = it & 1;
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
    {
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
    __syncthreads(); /* every warp is done with buffer buf and with P */
  }
#pragma unroll
  for (int i = 0; i < NTW; i++) {
    int nt = 2 * wq + 8 * (i >> 1) + (i & 1);
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

/* The plain version: one block per (query, head), three passes over the keys (max, Σexp,
 * then p and Σ p·v in key order). Any head dim up to 1024; the reference for the fast one. */
#define PS_THREADS 128
#define PS_KT 128
template <bool KFV>
__global__ void __launch_bounds__(PS_THREADS) pa_simple_kernel(PaArgs a) {
  CK_DYNAMIC_SHARED(float, ps_sm);
  float *qs = ps_sm, *sc = ps_sm + a.hd; /* [hd], [PS_KT] */
  const int tok = blockIdx.x, h = blockIdx.y, hd = a.hd, gkv = h / (a.nq / a.nkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int64_t kvd = a.kv.ps, qstride = (int64_t)a.nq * hd, p = a.p0 + tok, lo = pa_lo(p, a.window);
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
      const uint16_t *vr = pa_row(a.vc, a.vch, k0 + jj, a.p0, a.window, kvd) + (KFV ? 0 : (int64_t)gkv * hd);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        int d = threadIdx.x + i * PS_THREADS;
        if (d < hd) acc[i] = fmaf(sc[jj], ck_bf16_to_f32(vr[KFV ? pa_vcol(a, hd, gkv, d) : d]), acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    int d = threadIdx.x + i * PS_THREADS;
    if (d < hd) a.att[tok * qstride + (int64_t)h * hd + d] = ck_f32_to_bf16(acc[i]);
  }
}

/* 64 queries per block (half the K/V traffic of 32, the same bits: pp512 at depth 32768 1434
 * against 1239 t/s), the next K/V tile copied while one computes (1868 against 1432, the same
 * bits) */
template <int HD, bool KFV>
static int pa_launch_kv(const PaArgs &a, cudaStream_t st) {
  static std::atomic<int> attr_set{0};
  constexpr size_t smem = pa_smem<HD>();
  constexpr int QT = 16 * PA_RG;
  if (!attr_set.load()) {
    cudaError_t e =
        cudaFuncSetAttribute(pa_mma_kernel<HD, KFV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e) return (int)e;
    attr_set.store(1);
  }
  return (int)ck_launch(pa_mma_kernel<HD, KFV>, dim3((unsigned)((a.T + QT - 1) / QT), (unsigned)a.nq), 128 * PA_RG,
                        smem, st, a);
}
template <int HD>
static int pa_launch(const PaArgs &a, cudaStream_t st) {
  return a.kv.vr > 0 ? pa_launch_kv<HD, true>(a, st) : pa_launch_kv<HD, false>(a, st);
}

/* the plain kernel, any head dim up to 1024 */
static int pa_simple_launch(const PaArgs &a, cudaStream_t st) {
  const size_t smem = (size_t)(a.hd + PS_KT) * sizeof(float);
  return (int)ck_launch(a.kv.vr > 0 ? pa_simple_kernel<true> : pa_simple_kernel<false>,
                        dim3((unsigned)a.T, (unsigned)a.nq), PS_THREADS, smem, st, a);
}

extern "C" int pf_attention(const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                            const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                            dk_kv_layout kv, uint16_t *att, void *stream) {
  if (T <= 0) return 0;
  if (nkv <= 0 || nq % nkv || hd <= 0 || hd > 1024 || !dk_kv_layout_ok(kv, nkv, hd, kc, vc, window) ||
      (kv.vr > 0 && kch != vch))
    return (int)cudaErrorInvalidValue;
  /* compressed K: every key from the cache, the chunk's own encoded there by the q/k/v post; the
   * warpgroup kernel decodes its tiles where it runs, else one block per KV head and query */
  if (kv.kfmt) {
    if (kch != (const uint16_t *)((const uint8_t *)kc + p0 * kv.kps) || vch != vc + p0 * kv.ps)
      return (int)cudaErrorInvalidValue;
    return pf_attention_wg_supported(hd) ? pf_attention_wg(q, kc, vc, kch, vch, T, p0, nq, nkv, hd, scale, window, kv, att, stream)
                                         : pf_attention_planar(q, kc, vc, T, p0, nq, nkv, hd, scale, kv, att, stream);
  }
  cudaStream_t st = (cudaStream_t)stream;
  PaArgs a = {q, kc, vc, kch, vch, att, T, nq, nkv, hd, window, p0, scale, kv};
  /* the warpgroup kernel (prefill_attn_wg.cu) for head dims 128, 256, 512 on sm_90a; the mma.sync
   * kernel for the other powers of two up to 512; the plain one for the rest */
  if (pf_attention_wg_supported(hd))
    return pf_attention_wg(q, kc, vc, kch, vch, T, p0, nq, nkv, hd, scale, window, kv, att, stream);
  switch (hd) {
  case 16: return pa_launch<16>(a, st);
  case 32: return pa_launch<32>(a, st);
  case 64: return pa_launch<64>(a, st);
  case 128: return pa_launch<128>(a, st);
  case 256: return pa_launch<256>(a, st);
  case 512: return pa_launch<512>(a, st);
  default: break;
  }
  return pa_simple_launch(a, st);
}
