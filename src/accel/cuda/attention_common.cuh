/* What the decode attention's kernels share (attention.cu and its bulk-copy forms, the
 * one-cluster kernel of attention_cluster.cu): the split shape, bf16 loads, the x-prep maxima,
 * warp reductions and the scores' dot products. */
#ifndef MLXRT_CUDA_ATTENTION_COMMON_CUH
#define MLXRT_CUDA_ATTENTION_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_ring.cuh"
#include "ck_launch.cuh"
#include "decode_kernels.h"

#define AT_THREADS 128
#define AT_MAX_REP 16
#define AT_MAX_HD 1024

/* The split shape: `n` blocks per KV head (fixed when the step's graph is made, for the
 * session's capacity), each with at least `min_keys` keys of the live range [first, pos]: at
 * short positions only the first few splits hold keys (the live ones), the rest exit at once,
 * and the reductions over the splits read only the live ones. */
struct at_splits {
  int n, min_keys;
};

/* Keys per split at this position: ceil(cnt / n), at least min_keys. */
__device__ __forceinline__ int split_len(int pos, int window, at_splits sp, int *first) {
  *first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int cnt = pos - *first + 1, len = (cnt + sp.n - 1) / sp.n;
  return len > sp.min_keys ? len : sp.min_keys;
}

/* The keys [lo, hi) of split s (empty for a split past the live ones). */
__device__ __forceinline__ void split_range(int pos, int window, at_splits sp, int s, int *lo, int *hi) {
  int first, len = split_len(pos, window, sp, &first);
  int a = first + s * len, b = a + len;
  if (b > pos + 1) b = pos + 1;
  if (a > b) a = b;
  *lo = a;
  *hi = b;
}

/* How many splits hold keys at this position (≥ 1, ≤ sp.n). */
__device__ __forceinline__ int live_splits(int pos, int window, at_splits sp) {
  int first, len = split_len(pos, window, sp, &first);
  const int cnt = pos - first + 1, live = (cnt + len - 1) / len;
  return live < sp.n ? live : sp.n;
}

/* A batched step's row z (kv_layout.h dk_rows): its queries, its slot's cache, its position and
 * its output. */
__device__ __forceinline__ void at_row_move(const dk_rows &rw, int z, const float *&q, const uint16_t *&kc,
                                            const uint16_t *&vc, const int *&pos, uint16_t *&att) {
  const int64_t sl = rw.slot[z];
  q += z * rw.in;
  kc += sl * rw.kv;
  vc += sl * rw.kv;
  pos += z;
  att += z * rw.out;
}

/* Eight bf16 values packed in u as floats. */
__device__ __forceinline__ void unpack8(uint4 u, float *f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
/* Eight bf16 values at p (16-byte aligned) as floats: from global memory (read-only path)... */
__device__ __forceinline__ void load8(const uint16_t *p, float *f) { unpack8(__ldg((const uint4 *)p), f); }
/* ... through the L2 only (coherent: a row written earlier in the same kernel)... */
__device__ __forceinline__ void load8_cg(const uint16_t *p, float *f) { unpack8(__ldcg((const uint4 *)p), f); }
/* ... and from shared memory (the scores kernel's K ring). */
__device__ __forceinline__ void load8_shared(const uint16_t *p, float *f) {
  unpack8(*reinterpret_cast<const uint4 *>(p), f);
}

/* dpt (1, 2, 4 or 8) consecutive bf16 values at p (aligned to their size) as floats. */
__device__ __forceinline__ void load_n(const uint16_t *p, int dpt, float *f) {
  if (dpt == 8) {
    load8(p, f);
  } else if (dpt == 4) {
    uint2 u = __ldg((const uint2 *)p);
    f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  } else if (dpt == 2) {
    uint32_t u = __ldg((const unsigned int *)p);
    f[0] = __uint_as_float(u << 16), f[1] = __uint_as_float(u & 0xffff0000u);
  } else {
    f[0] = ck_bf16_to_f32(__ldg((const unsigned short *)p));
  }
}

/* ... and the same from shared memory (the one-launch attention's staged V rows). */
__device__ __forceinline__ void load_n_shared(const uint16_t *p, int dpt, float *f) {
  if (dpt == 8) {
    load8_shared(p, f);
  } else if (dpt == 4) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  } else if (dpt == 2) {
    const uint32_t u = *reinterpret_cast<const uint32_t *>(p);
    f[0] = __uint_as_float(u << 16), f[1] = __uint_as_float(u & 0xffff0000u);
  } else {
    f[0] = ck_bf16_to_f32(*p);
  }
}

/* The x-prep maxima (dk_attention's amax): the first kernel zeroes them, after its wait (the
 * previous product's prep has read them by then)... */
__device__ __forceinline__ void amax_zero(float *amax, int namax) {
  if (amax && blockIdx.x == 0 && blockIdx.y == 0)
    for (int i = threadIdx.x; i < namax; i += blockDim.x) amax[i] = 0.0f;
}
/* ... and each block writing att adds its max |value| (every thread calls; NaN is skipped, as
 * fmaxf skips it in the prep's max pass). Non-negative floats order as their bits. */
__device__ __forceinline__ void amax_add(float *amax, float v) {
  if (!amax) return;
  float m = block_max(v == v ? fabsf(v) : 0.0f);
  if (threadIdx.x == 0 && m > 0.0f) atomicMax(reinterpret_cast<unsigned *>(amax), __float_as_uint(m));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* The group's q rows (rep·hd floats at q + g·rep·hd, hd % 8 == 0) into shared memory as
 * float4s, each bf16(q·bscale) unless scale is 1 (bscale = bf16(scale)), several loads in flight
 * per thread: 16 KB per block for GQA 8 at head dim 512, a chain of dependent round trips when
 * loaded one float per iteration. */
__device__ __forceinline__ void at_stage_q(const float *q, int g, int rep, int hd, float scale, float bscale,
                                           float4 *qs4) {
  const float4 *q4 = reinterpret_cast<const float4 *>(q + (int64_t)g * rep * hd);
  const int n4 = rep * hd / 4;
#pragma unroll 8
  for (int i = threadIdx.x; i < n4; i += blockDim.x) {
    float4 v = q4[i];
    if (scale != 1.0f) {
      v.x = rb(__fmul_rn(v.x, bscale));
      v.y = rb(__fmul_rn(v.y, bscale));
      v.z = rb(__fmul_rn(v.z, bscale));
      v.w = rb(__fmul_rn(v.w, bscale));
    }
    qs4[i] = v;
  }
}

/* This lane's share of the dot products of KPI keys (kp: their K rows of this KV head) with
 * the REP query heads in qs ([REP][hd] floats): the lane holds 8 consecutive dims of each
 * of the nch 256-dim chunks (one 16-byte load per key and chunk); warp_sum completes each. */
template <int REP, int KPI, bool SMEM = false, bool CG = false>
__device__ __forceinline__ void key_dots(const uint16_t *const (&kp)[KPI], const float *qs, int hd, int nch,
                                         int lane, float (&dk)[KPI][REP]) {
#pragma unroll
  for (int u = 0; u < KPI; u++)
#pragma unroll
    for (int r = 0; r < REP; r++) dk[u][r] = 0.0f;
  for (int c = 0; c < nch; c++) {
    int d = c * 256 + lane * 8;
    if (d >= hd) continue;
    float a[KPI][8];
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      if (SMEM)
        load8_shared(kp[u] + d, a[u]);
      else if (CG)
        load8_cg(kp[u] + d, a[u]);
      else
        load8(kp[u] + d, a[u]);
    }
#pragma unroll
    for (int r = 0; r < REP; r++) {
      const float4 *qp = (const float4 *)(qs + r * hd + d);
      float4 x0 = qp[0], x1 = qp[1];
      float qv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int u = 0; u < KPI; u++)
#pragma unroll
        for (int i = 0; i < 8; i++) dk[u][r] = fmaf(qv[i], a[u][i], dk[u][r]);
    }
  }
}

/* One level of warp_transpose_sum over the first N values of a (N a compile-time constant, so
 * every index is one: with the level's count a run-time value the compiler kept the loop and
 * picked each a[i] through a chain of predicated moves, ~40 instructions per value — most of
 * the scores kernel's instructions): a lane keeps the half its partner at distance O gives away
 * and adds the partner's copy of it. */
template <int N, int O>
struct transpose_level {
  static __device__ __forceinline__ void run(float *a, int lane) {
    const bool up = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
      const float keep = up ? a[N / 2 + i] : a[i], give = up ? a[i] : a[N / 2 + i];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, give, O);
    }
    transpose_level<N / 2, O / 2>::run(a, lane);
  }
};
template <int O>
struct transpose_level<1, O> {
  static __device__ __forceinline__ void run(float *, int) {}
};

/* The warp-wide sums of NP values per lane (NP a power of two ≤ 32) at once: lane l gets the
 * sum of value l / (32 / NP) — the same additions in the same tree as warp_sum on that value
 * (the xor butterfly 16, 8, …, 1, each addition own + partner, which commutes), so the same
 * bits, with NP − 1 + 5 − log2(NP) shuffles instead of 5·NP: at each of the first log2(NP)
 * levels a lane keeps the half of its values that its partner gives away, and adds the
 * partner's copy of them. */
template <int NP>
__device__ __forceinline__ float warp_transpose_sum(const float (&v)[NP], int lane) {
  static_assert(NP >= 1 && NP <= 32 && (NP & (NP - 1)) == 0, "NP: a power of two up to 32");
  float a[NP];
#pragma unroll
  for (int i = 0; i < NP; i++) a[i] = v[i];
  transpose_level<NP, 16>::run(a, lane);
  float t = a[0];
#pragma unroll
  for (int o = 16 / NP; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

/* One score step's result for this lane: the KPI·REP dot products (dk, this lane's shares)
 * completed by one transposed warp sum — lane l gets pair l / (32 / (KPI·REP)), key p / REP and
 * head p % REP — and rounded to bf16. */
template <int REP, int KPI>
__device__ __forceinline__ float at_step_score(const float (&dk)[KPI][REP], int lane) {
  constexpr int NP = KPI * REP;
  float flat[NP];
#pragma unroll
  for (int u = 0; u < KPI; u++)
#pragma unroll
    for (int r = 0; r < REP; r++) flat[u * REP + r] = dk[u][r];
  return rb(warp_transpose_sum<NP>(flat, lane));
}

#endif
