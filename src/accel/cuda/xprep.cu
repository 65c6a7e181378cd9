/* The activation prep of the tensor-core mat-vec (qmv_tc.cu): x (bf16, nb rows) as fp16
 * x·2^e per row — max|x·2^e| in [2^14, 2^15), exact for every bf16 value within 2^29 of the
 * row's maximum — in m16n8k16 fragment order, with the affine formats' group sums; dense bf16
 * weights take x unscaled. Two passes: block maxima, then the fill. (The products making this
 * prep themselves measured slower: the prep kernel lets
 * the product's blocks become resident during the attention.) */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "ck_wgmma.cuh"

/* ---- activation prep ------------------------------------------------------------------- */
/* Pass 1: per (2048-value block, row) max|x| into pmax[n][blk]. */
#define XP_BLOCK 2048
/* map (may be NULL): row n is row map[n] of x (a zero row when < 0) */
__device__ __forceinline__ void xmax_body(const uint16_t *x, int64_t cols, int nb, float *pmax, int nblk,
                                          const int *map = nullptr) {
  const int n = blockIdx.y, blk = blockIdx.x;
  if (n >= nb) return;
  if (map && map[n] < 0) {
    if (threadIdx.x == 0) pmax[n * nblk + blk] = 0.f;
    return;
  }
  const uint16_t *xr = x + (int64_t)(map ? map[n] : n) * cols;
  float m = 0.f;
  int64_t k0 = (int64_t)blk * XP_BLOCK + threadIdx.x * 8;
  if (k0 + 8 <= cols) {
    uint4 v = *reinterpret_cast<const uint4 *>(xr + k0);
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
      m = fmaxf(m, fmaxf(fabsf(__uint_as_float(w[i] << 16)), fabsf(__uint_as_float(w[i] & 0xffff0000u))));
  } else {
    for (int64_t k = k0; k < cols && k < k0 + 8; k++) m = fmaxf(m, fabsf(ck_bf16_to_f32(xr[k])));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float wm[8];
  if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) m = fmaxf(m, wm[w]);
    pmax[n * nblk + blk] = m;
  }
}
__global__ void xmax_kernel(const uint16_t *x, int64_t cols, int nb, float *pmax, int nblk) {
  ck_pdl_enter();
  xmax_body(x, cols, nb, pmax, nblk);
}

/* Pass 2: one thread per (32-k slice, row): the slice's fp16 (x · 2^e) values in fragment
 * order (64 contiguous bytes), and the group sums by a shuffle over adjacent slices. Rows
 * ≥ nb write zero sums. cols is a multiple of 32 here (the fast path's unit). efix: e given by
 * the caller (ck_xprep_fixed; no maxima read), or CK_XE_ROWMAX. */
__device__ __forceinline__ void xfill_body(const uint16_t *x, int64_t cols, int nb, int bf16, int gs,
                                           const float *pmax, int nblk, uint16_t *xp, float *xs, int *xexp, int efix,
                                           const int *map = nullptr) {
  const int n = blockIdx.y;
  const int64_t xrow = map ? (n < nb ? map[n] : -1) : n; /* < 0: a zero row, written */
  const int64_t S = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, nsl = cols / 32;
  int e = 0;
  if (n < nb && !bf16 && efix != CK_XE_ROWMAX) {
    e = efix;
  } else if (n < nb && !bf16) {
    float m = 0.f;
    for (int b = 0; b < nblk; b++) m = fmaxf(m, pmax[n * nblk + b]);
    if (m > 0.f && m <= 3.0e38f) {
      frexpf(m, &e); /* m < 2^e: scale by 2^(15-e) → max in [2^14, 2^15) */
      e = 15 - e;
    }
  }
  if (S == 0) xexp[n] = e;
  float sum = 0.f;
  if (S < nsl && n < nb) {
    const uint4 *src = reinterpret_cast<const uint4 *>(x + xrow * cols + S * 32);
    uint16_t h[32];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      uint4 v = xrow >= 0 ? src[q] : make_uint4(0, 0, 0, 0);
      uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
          uint16_t xb = (uint16_t)(w[i] >> (16 * j));
          uint16_t hv = bf16 ? xb : ck_f32_to_f16(ldexpf(ck_bf16_to_f32(xb), e));
          if (!bf16) sum += ck_f16_to_f32(hv);
          h[q * 8 + i * 2 + j] = hv;
        }
      }
    }
    uint4 *dst = reinterpret_cast<uint4 *>(xp + (((int64_t)n * nsl + S) * 4) * 8);
#pragma unroll
    for (int tt = 0; tt < 4; tt++) {
      uint16_t o[8];
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[m * 4 + i] = h[16 * m + 2 * tt + (i & 1) + 8 * (i >> 1)];
      uint4 v;
      v.x = o[0] | ((uint32_t)o[1] << 16);
      v.y = o[2] | ((uint32_t)o[3] << 16);
      v.z = o[4] | ((uint32_t)o[5] << 16);
      v.w = o[6] | ((uint32_t)o[7] << 16);
      dst[tt] = v;
    }
  }
  if (gs > 0) { /* gs/32 adjacent lanes hold one group (groups never straddle a warp) */
    const int per = gs / 32;
    for (int o = per >> 1; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (S < nsl && S % per == 0) xs[(S / per) * 8 + n] = sum;
  }
}
__global__ void xfill_kernel(const uint16_t *x, int64_t cols, int nb, int bf16, int gs,
                             const float *pmax, int nblk, uint16_t *xp, float *xs, int *xexp, int efix) {
  ck_pdl_enter();
  xfill_body(x, cols, nb, bf16, gs, pmax, nblk, xp, xs, xexp, efix);
}

/* ck_xprep_batched: batch blockIdx.z's rows and layout (the strides ck_qmv_experts reads) */
/* (map: batch b's rows are rows map[b·nb …] of x, ck_xprep_rows) */
__global__ void xmax_batched_kernel(const uint16_t *x, int64_t cols, int nb, float *pmax, int nblk, const int *map) {
  ck_pdl_enter();
  const int64_t b = blockIdx.z;
  xmax_body(map ? x : x + b * nb * cols, cols, nb, pmax + b * 8 * nblk, nblk, map ? map + b * nb : nullptr);
}
__global__ void xfill_batched_kernel(const uint16_t *x, int64_t cols, int nb, int bf16, int gs, const float *pmax,
                                     int nblk, uint16_t *xp, float *xs, int *xexp, const int *map, int efix) {
  ck_pdl_enter();
  const int64_t b = blockIdx.z, nsl = cols / 32;
  xfill_body(map ? x : x + b * nb * cols, cols, nb, bf16, gs, pmax ? pmax + b * 8 * nblk : pmax, nblk,
             xp + b * nb * cols, xs + b * nsl * 8, xexp + b * 8, efix, map ? map + b * nb : nullptr);
}

extern "C" int ck_xprep(const ck_layout *L, const uint16_t *x, int nb, uint16_t *xp, float *xs,
                        int *xexp, float *pmax, void *stream) {
  cudaStream_t st = (cudaStream_t)stream;
  int gs = (L->fmt == CK_AFF4 || L->fmt == CK_AFF8) ? L->group_size : 0;
  int bf16 = L->fmt == CK_DBF16;
  int nblk = (int)((L->cols + XP_BLOCK - 1) / XP_BLOCK);
  if (!bf16) {
    cudaError_t e = ck_launch(xmax_kernel, dim3(nblk, nb), 256, 0, st, x, L->cols, nb, pmax, nblk);
    if (e) return (int)e;
  }
  int64_t nsl = L->cols / 32;
  return (int)ck_launch(xfill_kernel, dim3((unsigned)((nsl + 127) / 128), 8), 128, 0, st, x, L->cols, nb, bf16, gs,
                        pmax, nblk, xp, xs, xexp, (int)CK_XE_ROWMAX);
}

/* efix: every row's exponent (no maxima: one launch), or CK_XE_ROWMAX */
static int xprep_batched(const ck_layout *L, const uint16_t *x, int nb, int nbatch, uint16_t *xp, float *xs,
                         int *xexp, float *pmax, bool premax, void *stream, const int *map = nullptr,
                         int efix = CK_XE_ROWMAX) {
  if (nb < 1 || nb > 8 || nbatch < 1 || L->cols % 32) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  const int gs = (L->fmt == CK_AFF4 || L->fmt == CK_AFF8) ? L->group_size : 0, bf16 = L->fmt == CK_DBF16;
  const int nblk = (int)((L->cols + XP_BLOCK - 1) / XP_BLOCK);
  if (bf16) efix = CK_XE_ROWMAX; /* (bf16 takes x unscaled) */
  if (efix != CK_XE_ROWMAX) pmax = nullptr;
  if (!bf16 && !premax && efix == CK_XE_ROWMAX) {
    cudaError_t e =
        ck_launch(xmax_batched_kernel, dim3(nblk, nb, nbatch), 256, 0, st, x, L->cols, nb, pmax, nblk, map);
    if (e) return (int)e;
  }
  const int64_t nsl = L->cols / 32;
  return (int)ck_launch(xfill_batched_kernel, dim3((unsigned)((nsl + 127) / 128), 8, nbatch), 128, 0, st, x, L->cols,
                        nb, bf16, gs, (const float *)pmax, nblk, xp, xs, xexp, map, efix);
}

extern "C" int ck_xprep_batched(const ck_layout *L, const uint16_t *x, int nb, int nbatch, uint16_t *xp, float *xs,
                                int *xexp, float *pmax, void *stream) {
  return xprep_batched(L, x, nb, nbatch, xp, xs, xexp, pmax, false, stream);
}

extern "C" int ck_xprep_batched_fixed(const ck_layout *L, const uint16_t *x, int nb, int nbatch, uint16_t *xp,
                                      float *xs, int *xexp, int e, void *stream) {
  if (e == CK_XE_ROWMAX || e < -126 || e > 127) return (int)cudaErrorInvalidValue;
  return xprep_batched(L, x, nb, nbatch, xp, xs, xexp, nullptr, false, stream, nullptr, e);
}

extern "C" int ck_xprep_rows(const ck_layout *L, const uint16_t *x, const int *map, int nbatch, uint16_t *xp,
                             float *xs, int *xexp, float *pmax, void *stream) {
  if (!map) return (int)cudaErrorInvalidValue;
  return xprep_batched(L, x, 8, nbatch, xp, xs, xexp, pmax, false, stream, map);
}

extern "C" int ck_xprep_batched_premax(const ck_layout *L, const uint16_t *x, int nbatch, uint16_t *xp, float *xs,
                                       int *xexp, const float *pmax, void *stream) {
  return xprep_batched(L, x, 1, nbatch, xp, xs, xexp, (float *)pmax, true, stream);
}

extern "C" size_t ck_xprep_pmax_floats(int64_t cols) { return 8 * (size_t)((cols + XP_BLOCK - 1) / XP_BLOCK); }

extern "C" int ck_xprep_block(void) { return XP_BLOCK; }

extern "C" int ck_xprep_premax(const ck_layout *L, const uint16_t *x, uint16_t *xp, float *xs, int *xexp,
                               const float *pmax, void *stream) {
  int gs = (L->fmt == CK_AFF4 || L->fmt == CK_AFF8) ? L->group_size : 0;
  int bf16 = L->fmt == CK_DBF16;
  int nblk = (int)((L->cols + XP_BLOCK - 1) / XP_BLOCK);
  int64_t nsl = L->cols / 32;
  return (int)ck_launch(xfill_kernel, dim3((unsigned)((nsl + 127) / 128), 8), 128, 0, (cudaStream_t)stream, x, L->cols,
                        1, bf16, gs, pmax, nblk, xp, xs, xexp, (int)CK_XE_ROWMAX);
}

extern "C" int ck_xprep_fixed(const ck_layout *L, const uint16_t *x, uint16_t *xp, float *xs, int *xexp, int e,
                              void *stream) {
  if (e == CK_XE_ROWMAX || e < -126 || e > 127) return (int)cudaErrorInvalidValue;
  int gs = (L->fmt == CK_AFF4 || L->fmt == CK_AFF8) ? L->group_size : 0;
  int bf16 = L->fmt == CK_DBF16;
  int64_t nsl = L->cols / 32;
  return (int)ck_launch(xfill_kernel, dim3((unsigned)((nsl + 127) / 128), 8), 128, 0, (cudaStream_t)stream, x, L->cols,
                        1, bf16, gs, (const float *)NULL, 0, xp, xs, xexp, bf16 ? 0 : e);
}

/* ck_xprep_wg: the warpgroup product's x (qmm_wg.cu). Rows in launches of up to 64 (launch c's
 * at xw + c·64·cols), each launch's n = wg_rows_n(its rows) rows as the wgmma B operand: column
 * blocks of 64 k, n rows × 128 bytes each, 128-byte swizzle (wg_off), rows past T zero. The
 * values and exponents are xfill_body's: fp16 x·2^e, e from the row's maximum, or efix for
 * every row (ck_xprep_wg_fixed: no maxima). One thread per (row, 8 values). */
__global__ void xfill_wg_kernel(const uint16_t *x, int64_t cols, int T, const float *pmax, int nblk, uint16_t *xw,
                                int *xexp, int efix) {
  ck_pdl_enter();
  const int r = blockIdx.y, c = r >> 6, rl = r & 63;
  const int n = wg_rows_n(T - 64 * c < 64 ? T - 64 * c : 64);
  if (rl >= n) return;
  const int64_t k = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
  int e = 0;
  if (r < T && efix != CK_XE_ROWMAX) {
    e = efix;
  } else if (r < T) {
    float m = 0.f;
    for (int b = 0; b < nblk; b++) m = fmaxf(m, pmax[(int64_t)r * nblk + b]);
    if (m > 0.f && m <= 3.0e38f) {
      frexpf(m, &e);
      e = 15 - e;
    }
  }
  if (k == 0) xexp[r] = e;
  if (k >= cols) return;
  uint32_t o[4] = {0, 0, 0, 0};
  if (r < T) {
    const uint4 v = *reinterpret_cast<const uint4 *>(x + (int64_t)r * cols + k);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint32_t lo = ck_f32_to_f16(ldexpf(ck_bf16_to_f32((uint16_t)w[i]), e));
      const uint32_t hi = ck_f32_to_f16(ldexpf(ck_bf16_to_f32((uint16_t)(w[i] >> 16)), e));
      o[i] = lo | hi << 16;
    }
  }
  uint8_t *dst = reinterpret_cast<uint8_t *>(xw + (int64_t)c * 64 * cols) + wg_off(n, rl, (int)k);
  *reinterpret_cast<uint4 *>(dst) = make_uint4(o[0], o[1], o[2], o[3]);
}

extern "C" int ck_xprep_wg(const ck_layout *L, const uint16_t *x, int T, uint16_t *xw, int *xexp, float *pmax,
                           void *stream) {
  if (T < 1 || L->cols % 64 || L->cols > (int64_t)1 << 30 || L->fmt == CK_DBF16) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  const int nblk = (int)((L->cols + XP_BLOCK - 1) / XP_BLOCK), nz = (T + 7) / 8;
  cudaError_t e = ck_launch(xmax_batched_kernel, dim3(nblk, 8, nz), 256, 0, st, x, L->cols, 8, pmax, nblk,
                            (const int *)nullptr);
  if (e) return (int)e;
  const int last = (T - 1) / 64, rows = 64 * last + wg_rows_n(T - 64 * last);
  return (int)ck_launch(xfill_wg_kernel, dim3((unsigned)((L->cols / 8 + 127) / 128), (unsigned)rows), 128, 0, st, x,
                        L->cols, T, (const float *)pmax, nblk, xw, xexp, (int)CK_XE_ROWMAX);
}

extern "C" int ck_xprep_wg_fixed(const ck_layout *L, const uint16_t *x, int T, uint16_t *xw, int *xexp, int e,
                                 void *stream) {
  if (T < 1 || L->cols % 64 || L->cols > (int64_t)1 << 30 || L->fmt == CK_DBF16 || e == CK_XE_ROWMAX || e < -126 ||
      e > 127)
    return (int)cudaErrorInvalidValue;
  const int last = (T - 1) / 64, rows = 64 * last + wg_rows_n(T - 64 * last);
  return (int)ck_launch(xfill_wg_kernel, dim3((unsigned)((L->cols / 8 + 127) / 128), (unsigned)rows), 128, 0,
                        (cudaStream_t)stream, x, L->cols, T, (const float *)nullptr, 0, xw, xexp, e);
}

CK_TIMELINE_SETTER(ck_tl_xprep)
