/* What every prompt-attention kernel shares (prefill_attn.cu's, prefill_attn_wg.cu's): the launch arguments, a key's K/V row, the first key a query sees, the float32
 * softmax's (max, sum) steps and the bf16 roundings of scores and p — the reference path's
 * rounding points (docs/DECODE.md "Prefill"). */
#ifndef MLXRT_PREFILL_ATTN_COMMON_CUH
#define MLXRT_PREFILL_ATTN_COMMON_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ck_device.cuh"
#include "ck_ring.cuh"
#include "kv_layout.h"

struct PaArgs {
  const float *q;
  const uint16_t *kc, *vc, *kch, *vch;
  uint16_t *att;
  int T, nq, nkv, hd, window;
  int64_t p0;
  float scale;
  dk_kv_layout kv; /* rows kv.ps apart, cache and chunk alike (kv_layout.h) */
};

/* The element of V's dim d of KV head g in a row: g·hd + d, or with K from V a moved dim's place
 * in the tail (dk_kv_vcol). A 16-byte chunk of 8 dims from d stays whole (vr is a multiple of 8),
 * so a tile copier finds it once per thread: its column is the same in every row. The kernels
 * take K from V as a template flag (KFV), so the plain layout's code is what it was without it. */
__device__ __forceinline__ int pa_vcol(const PaArgs &a, int hd, int g, int d) {
  return (int)dk_kv_vcol(a.kv, a.nkv, hd, g, d);
}

/* K or V row of key j (all KV heads): the chunk's own rows from p0 on, else the cache. A ring's
 * slot by a 32-bit remainder: positions are ints in the decoder, and a 64-bit one is a division
 * call whose saved registers spill in the kernels at their register cap. */
__device__ __forceinline__ const uint16_t *pa_row(const uint16_t *cache, const uint16_t *chunk, int64_t j, int64_t p0,
                                                  int window, int64_t kvd) {
  if (j >= p0) return chunk + (j - p0) * kvd;
  return cache + (window > 0 ? (int64_t)((int)j % ck_ring(window)) : j) * kvd;
}

/* The row of key j = k0 + r of a KT-key tile, for copies made row by row: the chunk's from p0
 * on, else the cache's — a sliding layer's ring slot from the tile's first, s0 = k0 % ck_ring(window) (one
 * division per tile; a second only where the ring is narrower than the tile). */
template <int KT>
__device__ __forceinline__ const uint16_t *pa_tile_row(const uint16_t *cache, const uint16_t *chunk, int64_t j, int r,
                                                       int64_t s0, int64_t p0, int window, int64_t kvd) {
  if (j >= p0) return chunk + (j - p0) * kvd;
  if (window > 0) {
    int64_t sl = s0 + r;
    const int ring = ck_ring(window);
    if (sl >= ring) sl = ring >= KT ? sl - ring : sl % ring;
    return cache + sl * kvd;
  }
  return cache + j * kvd;
}

__device__ __forceinline__ int64_t pa_lo(int64_t p, int window) {
  return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* (m, l) pairs of a float32 softmax in progress: l = Σ exp(s − m). Commutative, so every lane
 * that combines the same pairs gets the same bits. */
__device__ __forceinline__ void pa_combine(float &m, float &l, float m2, float l2) {
  float M = fmaxf(m, m2);
  if (M == -INFINITY) return;
  float a = m == -INFINITY ? 0.f : l * expf(__fsub_rn(m, M));
  float b = m2 == -INFINITY ? 0.f : l2 * expf(__fsub_rn(m2, M));
  m = M;
  l = a + b;
}

/* bf16 rounding of the scores and of p by the hardware's cvt.rn (one instruction against
 * ck_f32_to_bf16's seven): the same bits for every input but a NaN, which comes out as the
 * canonical NaN instead of keeping its payload — a NaN score means a NaN input either way */
__device__ __forceinline__ uint16_t pa_bf16(float x) {
#ifdef CK_EMULATION
  return ck_f32_to_bf16(x);
#else
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#endif
}
__device__ __forceinline__ float pa_rb(float x) { return ck_bf16_to_f32(pa_bf16(x)); }

/* pa_combine(m, l, s, s == −∞ ? 0 : 1) with one expf instead of two: the term whose max is the
 * new max is l·expf(0) = l or 1·expf(0) = 1 exactly, so the same bits (pass 1's per-key step).
 * The product and the sum are rounded apart, as pa_combine's are: a contracted l·e + 1 is not. */
__device__ __forceinline__ void pa_push(float &m, float &l, float s) {
  if (s == -INFINITY) return;
  if (s > m) {
    l = __fadd_rn(m == -INFINITY ? 0.f : __fmul_rn(l, expf(__fsub_rn(m, s))), 1.f);
    m = s;
  } else {
    l = __fadd_rn(l, expf(__fsub_rn(s, m)));
  }
}

#endif
