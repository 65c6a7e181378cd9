/* The generic mat-vec (every format the tensor-core path does not take: affine 2/3/5/6-bit,
 * f32 scales, dense f32, odd shapes, out-of-range fp scales) and the embedding-row
 * dequantizer. Both decode one element at a time in float; correctness, not speed. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"

struct GenArgs {
  int mode, bits, gs, ddt, sdt;
  int64_t rows, cols;
  const void *w, *s, *b;
};

/* Weight (row, k) in float from MLX's layout, as the CPU backend's mat-vec sees it:
 * affine s·q + b, fp modes scale·value, dense as stored. */
__device__ float gen_weight(const GenArgs &a, int64_t row, int64_t k) {
  if (a.mode == CKM_DENSE) {
    int64_t at = row * a.cols + k;
    if (a.ddt == CKT_F32) return ((const float *)a.w)[at];
    uint16_t h = ((const uint16_t *)a.w)[at];
    return a.ddt == CKT_BF16 ? ck_bf16_to_f32(h) : ck_f16_to_f32(h);
  }
  const uint32_t *wr = (const uint32_t *)a.w + row * (a.cols * a.bits / 32);
  uint32_t c = ck_raw_code(wr, a.bits, k);
  int64_t ng = a.cols / a.gs, G = row * ng + k / a.gs;
  switch (a.mode) {
  case CKM_AFFINE:
    return fmaf(ck_load_param(a.s, G, a.sdt), (float)c, ck_load_param(a.b, G, a.sdt));
  case CKM_NVFP4: return ck_fp4_to_f32(c) * ck_e4m3_to_f32(((const uint8_t *)a.s)[G]);
  case CKM_MXFP4: return ck_fp4_to_f32(c) * ck_e8m0_to_f32(((const uint8_t *)a.s)[G]);
  default: return ck_e4m3_to_f32(c) * ck_e8m0_to_f32(((const uint8_t *)a.s)[G]);
  }
}

/* One warp per row; nb ≤ 8 activation rows. */
__device__ __forceinline__ void gen_rows(const GenArgs &a, const uint16_t *x, int nb, float *y, int64_t ldy) {
  int lane = threadIdx.x & 31;
  int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t k = lane; k < a.cols; k += 32) {
    float w = gen_weight(a, row, k);
#pragma unroll
    for (int n = 0; n < 8; n++)
      if (n < nb) acc[n] = fmaf(w, ck_bf16_to_f32(x[n * a.cols + k]), acc[n]);
  }
#pragma unroll
  for (int n = 0; n < 8; n++) {
    float v = acc[n];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && n < nb) y[n * ldy + row] = v;
  }
}
__global__ void qmv_generic_kernel(GenArgs a, const uint16_t *x, int nb, float *y, int64_t ldy) {
  gen_rows(a, x, nb, y, ldy);
}

/* ck_qmv_generic_experts: block (·, z) on slab zslab[z] (a = slab 0's arguments). */
__global__ void qmv_generic_experts_kernel(GenArgs a, const int *zslab, size_t w_slab, size_t s_slab, size_t b_slab,
                                           const uint16_t *x, int64_t xz, int nb, float *y, int64_t ldy, int64_t zy) {
  const int e = zslab[blockIdx.y];
  if (e < 0) return;
  a.w = (const char *)a.w + (size_t)e * w_slab;
  if (a.s) a.s = (const char *)a.s + (size_t)e * s_slab;
  if (a.b) a.b = (const char *)a.b + (size_t)e * b_slab;
  const int64_t z = blockIdx.y;
  gen_rows(a, x + z * xz, nb, y + z * zy, ldy);
}

__host__ __device__ static GenArgs gen_args(const ck_layout *L, int64_t slab) {
  GenArgs a;
  a.mode = L->mode;
  a.bits = L->bits;
  a.gs = L->group_size;
  a.ddt = L->dense_dtype;
  a.sdt = L->scales_dtype;
  a.rows = L->rows;
  a.cols = L->cols;
  a.w = (const char *)L->w + (size_t)slab * L->w_slab;
  a.s = L->s ? (const char *)L->s + (size_t)slab * L->s_slab : nullptr;
  a.b = L->b ? (const char *)L->b + (size_t)slab * L->b_slab : nullptr;
  return a;
}

extern "C" int ck_qmv_generic(const ck_layout *L, int64_t slab, const uint16_t *x, int nb, float *y,
                              int64_t ldy, void *stream) {
  GenArgs a = gen_args(L, slab);
  unsigned blocks = (unsigned)((L->rows + 7) / 8);
  qmv_generic_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(a, x, nb, y, ldy);
  return (int)cudaGetLastError();
}

extern "C" int ck_qmv_generic_experts(const ck_layout *L, const int *zslab, int nz, const uint16_t *x, int64_t xz,
                                      int nb, float *y, int64_t ldy, int64_t zy, void *stream) {
  if (nz < 1 || nb < 1 || nb > 8) return (int)cudaErrorInvalidValue;
  GenArgs a = gen_args(L, 0);
  qmv_generic_experts_kernel<<<dim3((unsigned)((L->rows + 7) / 8), (unsigned)nz), 256, 0, (cudaStream_t)stream>>>(
      a, zslab, L->w_slab, L->s_slab, L->b_slab, x, xz, nb, y, ldy, zy);
  return (int)cudaGetLastError();
}

extern "C" int ck_qmv(const ck_layout *L, int64_t slab, const uint16_t *x, const uint16_t *xp,
                      const float *xs, const int *xexp, int nb, float *y, int64_t ldy,
                      void *stream) {
  if (L->fmt == CK_GENERIC) return ck_qmv_generic(L, slab, x, nb, y, ldy, stream);
  return ck_qmv_fast(L, slab, xp, xs, xexp, nb, y, ldy, stream);
}

/* ---- embedding rows -------------------------------------------------------------------- */
/* Code and group parameters of (row, k) from the tile layout (slab 0). */
__device__ void rep_element(const ck_layout &L, int64_t row, int64_t k, uint32_t *code,
                            float *scale, float *bias) {
  int64_t tile = row >> 4;
  int rr = (int)(row & 15), g = rr & 7, hi = rr >> 3;
  int lane, i;
  const uint32_t *w = (const uint32_t *)L.w;
  *bias = 0.f;
  if (L.fmt == CK_AFF4 || L.fmt == CK_NVFP4 || L.fmt == CK_MXFP4) {
    int64_t nch = L.cols / 64, chunk = k / 64;
    int kc = (int)(k % 64), j = kc >> 4;
    ck_frag_of(rr, kc & 15, &lane, &i);
    uint32_t word = w[((tile * nch + chunk) * 32 + lane) * 4 + j];
    if (L.fmt == CK_AFF4)
      *code = (word >> (4 * ck_aff4_nibble(i))) & 15u;
    else
      *code = ((word >> ck_fp4_mag_pos(i)) & 7u) | (((word >> ck_fp4_sign_pos(i)) & 1u) << 3);
  } else if (L.fmt == CK_AFF8 || L.fmt == CK_MXFP8) {
    int64_t nch = L.cols / 32, chunk = k / 32;
    int kc = (int)(k % 32), m = kc >> 4;
    ck_frag_of(rr, kc & 15, &lane, &i);
    uint32_t word = w[((tile * nch + chunk) * 32 + lane) * 4 + 2 * m + (i >> 2)];
    *code = (word >> (8 * (i & 3))) & 255u;
  } else { /* dense 16-bit */
    int64_t nch = L.cols / 16, chunk = k / 16;
    ck_frag_of(rr, (int)(k % 16), &lane, &i);
    uint32_t word = w[((tile * nch + chunk) * 32 + lane) * 4 + (i >> 1)];
    *code = (word >> (16 * (i & 1))) & 0xffffu;
  }
  if (L.fmt == CK_AFF4 || L.fmt == CK_AFF8) {
    int64_t ng = L.cols / L.group_size, G = k / L.group_size;
    const uint16_t *s = (const uint16_t *)L.s + (((tile * ng + G) * 8 + g) * 4 + 2 * hi);
    *scale = L.scales_dtype == CKT_F16 ? ck_f16_to_f32(s[0]) : ck_bf16_to_f32(s[0]);
    *bias = L.scales_dtype == CKT_F16 ? ck_f16_to_f32(s[1]) : ck_bf16_to_f32(s[1]);
  } else if (L.fmt == CK_NVFP4) {
    int64_t u = k / 64;
    int gu = (int)((k % 64) / 16);
    *scale = ck_nv_tile_scale(L.s, tile, L.nunits, u, g, hi, gu);
  } else if (L.fmt == CK_MXFP4) {
    int64_t u = k / 64;
    int gu = (int)((k % 64) / 32);
    *scale = ck_e8m0_to_f32(((const uint8_t *)L.s)[((tile * L.nunits + u) * 8 + g) * 4 + hi * 2 + gu]);
  } else if (L.fmt == CK_MXFP8) {
    int64_t u = k / 32;
    *scale = ck_e8m0_to_f32(((const uint8_t *)L.s)[((tile * L.nunits + u) * 8 + g) * 2 + hi]);
  }
}

/* Rounding as mx.dequantize: affine bf16(bf16(q·s) + b) in the scales dtype (f32: one
 * rounding at the end), fp modes bf16(s·v), dense converted to bf16. No FMA contraction. */
/* Element (row, k) of the embedding as bf16. */
__device__ __forceinline__ uint16_t embed_value(const ck_layout &L, int64_t row, int64_t k) {
  uint16_t o;
  if (L.mode == CKM_DENSE) {
    float v;
    if (L.fmt == CK_GENERIC) {
      GenArgs a = gen_args(&L, 0);
      v = gen_weight(a, row, k);
    } else {
      uint32_t c;
      float s, b;
      rep_element(L, row, k, &c, &s, &b);
      v = L.dense_dtype == CKT_BF16 ? ck_bf16_to_f32((uint16_t)c) : ck_f16_to_f32((uint16_t)c);
    }
    o = ck_f32_to_bf16(v);
  } else {
    uint32_t c;
    float s, b;
    if (L.fmt == CK_GENERIC) {
      const uint32_t *wr = (const uint32_t *)L.w + row * (L.cols * L.bits / 32);
      c = ck_raw_code(wr, L.bits, k);
      int64_t G = row * (L.cols / L.group_size) + k / L.group_size;
      if (L.mode == CKM_AFFINE) {
        s = ck_load_param(L.s, G, L.scales_dtype);
        b = ck_load_param(L.b, G, L.scales_dtype);
      } else {
        uint8_t sb = ((const uint8_t *)L.s)[G];
        s = L.mode == CKM_NVFP4 ? ck_e4m3_to_f32(sb) : ck_e8m0_to_f32(sb);
        b = 0.f;
      }
    } else {
      rep_element(L, row, k, &c, &s, &b);
    }
    if (L.mode == CKM_AFFINE) {
      float q = (float)c;
      if (L.scales_dtype == CKT_BF16) {
        float p = ck_bf16_to_f32(ck_f32_to_bf16(__fmul_rn(s, q)));
        o = ck_f32_to_bf16(__fadd_rn(p, b));
      } else if (L.scales_dtype == CKT_F16) {
        float p = ck_f16_to_f32(ck_f32_to_f16(__fmul_rn(s, q)));
        o = ck_f32_to_bf16(ck_f16_to_f32(ck_f32_to_f16(__fadd_rn(p, b))));
      } else {
        o = ck_f32_to_bf16(__fadd_rn(__fmul_rn(s, q), b));
      }
    } else {
      float v = L.mode == CKM_MXFP8 ? ck_e4m3_to_f32(c) : ck_fp4_to_f32(c);
      o = ck_f32_to_bf16(__fmul_rn(s, v));
    }
  }
  return o;
}

__global__ void embed_kernel(ck_layout L, const int32_t *ids, int64_t n, uint16_t *out) {
  int64_t total = n * L.cols;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x)
    out[idx] = embed_value(L, ids[idx / L.cols], idx % L.cols);
}

/* The decode step's first kernel: tok[0] = all[*pos], then h = bf16(bf16 row · scale) of that
 * token's embedding row (the prompt pass's gather and scale, one launch instead of three). */
__global__ void embed_step_kernel(ck_layout L, const int32_t *all, const int *pos, int32_t *tok, float scale,
                                  float *h) {
  ck_pdl_enter();
  const int64_t row = all[*pos];
  if (blockIdx.x == 0 && threadIdx.x == 0) tok[0] = (int32_t)row;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < L.cols; k += (int64_t)gridDim.x * blockDim.x)
    h[k] = rb(__fmul_rn(ck_bf16_to_f32(embed_value(L, row, k)), scale));
}

extern "C" int ck_embed_step(const ck_layout *L, const int32_t *all_tokens, const int *pos, int32_t *tok, float scale,
                             float *h, void *stream) {
  return (int)ck_launch(embed_step_kernel, (unsigned)((L->cols + 255) / 256), 256, 0, (cudaStream_t)stream, *L,
                        all_tokens, pos, tok, scale, h);
}

extern "C" int ck_embed(const ck_layout *L, const int32_t *ids, int64_t n, uint16_t *out,
                        void *stream) {
  int64_t total = n * L->cols;
  int64_t blocks = (total + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  if (blocks < 1) blocks = 1;
  embed_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(*L, ids, n, out);
  return (int)cudaGetLastError();
}

CK_TIMELINE_SETTER(ck_tl_qmv_generic)
