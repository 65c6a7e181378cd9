/* The batched prompt pass of the CUDA whole-step decoder: a chunk of T tokens per launch
 * instead of T one-token steps. The products themselves are cuBLAS GEMMs on a dequantized copy
 * of each weight (cuda_gemm.c) or the tensor-core mat-vec for short chunks; this file holds the
 * dequantizer and the row-batched versions of decode.cu's elementwise kernels; the causal
 * attention for T queries is prefill_attn.cu's (docs/DECODE.md "Prefill"). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_ring.cuh"
#include "kv_codec_warp.cuh"
#include "prefill_kernels.h"


/* ---- dequantization of a resident weight to bf16 ----------------------------------------- */
/* E2M1 code → float without a lookup table (no local memory): e = 0 is 0 or 0.5, else
 * (1 + m/2)·2^(e-1). */
__device__ __forceinline__ float pf_fp4(uint32_t c) {
  uint32_t e = (c >> 1) & 3u, m = c & 1u;
  uint32_t bits = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3f000000u : 0u);
  return __uint_as_float(bits | ((c & 8u) << 28));
}

/* Scale (and bias) of element (row rr of the tile, column k0 + kc) from the repacked scale
 * layout (kernels.h); k0 = chunk·CK, and a chunk is one scale unit for the fp formats. */
template <int FMT>
__device__ __forceinline__ void pf_params(const ck_layout &L, int64_t tile, int rr, int64_t chunk, int64_t k0,
                                          int kc, int gshift, float *s, float *b) {
  int g = rr & 7, hi = rr >> 3;
  *b = 0.f;
  *s = 1.f;
  if (FMT == CK_AFF4 || FMT == CK_AFF8) {
    int64_t ng = L.cols >> gshift, G = (k0 + kc) >> gshift;
    const uint16_t *sp = (const uint16_t *)L.s + (((tile * ng + G) * 8 + g) * 4 + 2 * hi);
    *s = L.scales_dtype == CKT_F16 ? ck_f16_to_f32(sp[0]) : ck_bf16_to_f32(sp[0]);
    *b = L.scales_dtype == CKT_F16 ? ck_f16_to_f32(sp[1]) : ck_bf16_to_f32(sp[1]);
  } else if (FMT == CK_NVFP4) {
    *s = ck_nv_tile_scale(L.s, tile, L.nunits, chunk, g, hi, kc >> 4);
  } else if (FMT == CK_MXFP4) {
    *s = ck_e8m0_to_f32(((const uint8_t *)L.s)[((tile * L.nunits + chunk) * 8 + g) * 4 + hi * 2 + (kc >> 5)]);
  } else if (FMT == CK_MXFP8) {
    *s = ck_e8m0_to_f32(((const uint8_t *)L.s)[((tile * L.nunits + chunk) * 8 + g) * 2 + hi]);
  }
}

/* bf16 of one element. Affine: one rounding of s·q + b (s·q is exact in float), the value the
 * mat-vec's float accumulation sees, rounded once; fp formats: s·v is exact in bf16. */
template <int FMT>
__device__ __forceinline__ uint16_t pf_value(const ck_layout &L, int64_t tile, int rr, int64_t chunk, int64_t k0,
                                             int kc, int gshift, uint32_t code) {
  if (FMT == CK_DBF16) return (uint16_t)code;
  if (FMT == CK_DF16) return ck_f32_to_bf16(ck_f16_to_f32((uint16_t)code));
  float s, b;
  pf_params<FMT>(L, tile, rr, chunk, k0, kc, gshift, &s, &b);
  if (FMT == CK_AFF4 || FMT == CK_AFF8) return ck_f32_to_bf16(__fadd_rn(__fmul_rn(s, (float)code), b));
  float v = FMT == CK_MXFP8 ? ck_e4m3_to_f32(code) : pf_fp4(code);
  return ck_f32_to_bf16(__fmul_rn(s, v));
}

#define DQ_WARPS 4

/* One warp per (16-row tile, chunk): the lane's 16 bytes are decoded into a shared 16 × CK
 * tile through the fragment index maps (the inverse of repack.cu), then written out as whole
 * rows with 16-byte stores. */
template <int FMT>
__global__ void __launch_bounds__(DQ_WARPS * 32) pf_dequant_kernel(ck_layout L, uint16_t *out, int64_t nwork) {
  constexpr int CK = ck_chunk_k(FMT);
  constexpr int LD = CK + 8;
  __shared__ __align__(16) uint16_t tl[DQ_WARPS][16 * LD];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t nch = L.cols / CK;
  const int gshift = L.group_size > 0 ? __ffs(L.group_size) - 1 : 0; /* affine group sizes are powers of 2 */
  uint16_t *my = tl[warp];
  for (int64_t wi = (int64_t)blockIdx.x * DQ_WARPS + warp; wi < nwork; wi += (int64_t)gridDim.x * DQ_WARPS) {
    const int64_t tile = wi / nch, chunk = wi % nch, k0 = chunk * CK;
    const uint4 v = reinterpret_cast<const uint4 *>(L.w)[(tile * nch + chunk) * 32 + lane];
    const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
    if (FMT == CK_AFF4 || FMT == CK_NVFP4 || FMT == CK_MXFP4) {
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
          int rr = ck_frag_row(g, i), kc = 16 * j + ck_frag_k(t, i);
          uint32_t code = FMT == CK_AFF4 ? (wd[j] >> (4 * ck_aff4_nibble(i))) & 15u
                                         : ((wd[j] >> ck_fp4_mag_pos(i)) & 7u) |
                                               (((wd[j] >> ck_fp4_sign_pos(i)) & 1u) << 3);
          my[rr * LD + kc] = pf_value<FMT>(L, tile, rr, chunk, k0, kc, gshift, code);
        }
    } else if (FMT == CK_AFF8 || FMT == CK_MXFP8) {
#pragma unroll
      for (int wj = 0; wj < 4; wj++)
#pragma unroll
        for (int b = 0; b < 4; b++) {
          int i = 4 * (wj & 1) + b, rr = ck_frag_row(g, i), kc = 16 * (wj >> 1) + ck_frag_k(t, i);
          my[rr * LD + kc] = pf_value<FMT>(L, tile, rr, chunk, k0, kc, gshift, (wd[wj] >> (8 * b)) & 255u);
        }
    } else { /* dense 16-bit: word j is fragment register j */
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          int i = 2 * j + e, rr = ck_frag_row(g, i), kc = ck_frag_k(t, i);
          my[rr * LD + kc] = pf_value<FMT>(L, tile, rr, chunk, k0, kc, gshift, (wd[j] >> (16 * e)) & 0xffffu);
        }
    }
    __syncwarp();
    for (int idx = lane; idx < 16 * CK / 8; idx += 32) {
      int rr = idx / (CK / 8), c8 = idx % (CK / 8);
      int64_t row = tile * 16 + rr;
      if (row < L.rows)
        *reinterpret_cast<uint4 *>(out + row * L.cols + k0 + c8 * 8) =
            *reinterpret_cast<const uint4 *>(my + rr * LD + c8 * 8);
    }
    __syncwarp();
  }
}

template <int FMT>
static int dequant_launch(const ck_layout *L, uint16_t *out, cudaStream_t st) {
  int64_t nwork = L->tiles * (L->cols / ck_chunk_k(FMT));
  int64_t blocks = (nwork + DQ_WARPS - 1) / DQ_WARPS;
  if (blocks > 65536) blocks = 65536;
  if (blocks < 1) blocks = 1;
  pf_dequant_kernel<FMT><<<(unsigned)blocks, DQ_WARPS * 32, 0, st>>>(*L, out, nwork);
  return (int)cudaGetLastError();
}

extern "C" int pf_dequant(const ck_layout *L, const int32_t *iota, uint16_t *out, void *stream) {
  cudaStream_t st = (cudaStream_t)stream;
  if (L->slabs != 1) return (int)cudaErrorInvalidValue;
  switch (L->fmt) {
  case CK_AFF4: return dequant_launch<CK_AFF4>(L, out, st);
  case CK_AFF8: return dequant_launch<CK_AFF8>(L, out, st);
  case CK_NVFP4: return dequant_launch<CK_NVFP4>(L, out, st);
  case CK_MXFP4: return dequant_launch<CK_MXFP4>(L, out, st);
  case CK_MXFP8: return dequant_launch<CK_MXFP8>(L, out, st);
  case CK_DBF16: return dequant_launch<CK_DBF16>(L, out, st);
  case CK_DF16: return dequant_launch<CK_DF16>(L, out, st);
  default: return ck_embed(L, iota, L->rows, out, stream); /* generic layout: slow, rare */
  }
}

/* ---- row-batched elementwise kernels ------------------------------------------------------ */
#define NR_THREADS 512
__global__ void __launch_bounds__(NR_THREADS) pf_norm_kernel(const float *y, int64_t ldy, const float *w_post,
                                                             float *h, int use_scalar, float scalar,
                                                             const float *w_next, uint16_t *xb, int H, float eps) {
  const int64_t row = blockIdx.x;
  float *hr = h + row * H;
  uint16_t *xr = xb + row * H;
  if (y) {
    const float *yr = y + row * ldy;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      float v = rb(yr[i]);
      ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      float o = rb(__fmul_rn(rb(__fmul_rn(rb(yr[i]), r)), w_post[i]));
      float v = rb(__fadd_rn(hr[i], o));
      if (use_scalar) v = rb(__fmul_rn(v, scalar));
      hr[i] = v;
    }
  }
  float ss = 0.0f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss = fmaf(hr[i], hr[i], ss);
  ss = block_sum(ss);
  float r = 1.0f / sqrtf(ss / (float)H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    xr[i] = w_next ? ck_f32_to_bf16(__fmul_rn(rb(__fmul_rn(hr[i], r)), w_next[i])) : ck_f32_to_bf16(hr[i]);
}

extern "C" int pf_norm_rows(const float *y, int64_t ldy, const float *w_post, float *h, int use_scalar, float scalar,
                            const float *w_next, uint16_t *xb, int T, int H, float eps, void *stream) {
  if (T <= 0) return 0;
  pf_norm_kernel<<<T, NR_THREADS, 0, (cudaStream_t)stream>>>(y, ldy, w_post, h, use_scalar, scalar, w_next, xb, H, eps);
  return (int)cudaGetLastError();
}

/* grid (nq + nkv, T): blocks [0, nq) of a token are query heads, [nq, nq + nkv) KV heads. */
__global__ void __launch_bounds__(128) pf_qkv_post_kernel(const float *y, int64_t ldy, int64_t p0, int nq, int nkv,
                                                          int hd, int k_eq_v, const float *qn, const float *kn,
                                                          const float *inv_freq, int trad, int v_norm, float eps,
                                                          dk_kv_layout kv, float *q_out, uint16_t *kdst,
                                                          uint16_t *vdst) {
  extern __shared__ float sv[]; /* [hd] */
  const int head = blockIdx.x, is_q = head < nq, kh = head - nq;
  const int64_t tok = blockIdx.y, kvd = (int64_t)nkv * hd;
  const float *yt = y + tok * ldy;
  const float *src = is_q ? yt + (int64_t)head * hd : yt + (int64_t)nq * hd + (int64_t)kh * hd;
  const float *w = is_q ? qn : kn;
  const float fpos = (float)(p0 + tok);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float v = rb(src[i]);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss);
  float r = 1.0f / sqrtf(ss / (float)hd + eps);
  for (int i = threadIdx.x; i < hd; i += blockDim.x) sv[i] = rb(__fmul_rn(rb(__fmul_rn(rb(src[i]), r)), w[i]));
  __syncthreads();
  rope_pairs(sv, hd, inv_freq, fpos, trad);
  __syncthreads();
  if (is_q) {
    /* with K from V the unmoved dims carry k_norm (kv_layout.h; qp_write_q's rule) */
    float *qo = q_out + tok * (int64_t)nq * hd + (int64_t)head * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
      qo[i] = kv.vr > 0 && !dk_kv_moved(kv, hd, i) ? __fmul_rn(sv[i], kn[i]) : sv[i];
    return;
  }
  /* rows kv.ps apart (kv_layout.h): with K from V, K at the moved dims, V at the others and in
   * the tail (vdst == kdst) */
  uint16_t *krow = kdst + tok * kv.ps, *kd = krow + (int64_t)kh * hd, *vrow = vdst + tok * kv.ps;
  if (kv.kfmt) /* compressed K: the head's codec blocks at tok · kv.kps bytes */
    kvc_encode_head(kv.kt, kv.kfmt, sv, hd,
                    (uint8_t *)kdst + tok * kv.kps + (int64_t)kh * (hd / KVC_BLOCK) * dk_kv_block_bytes(kv.kfmt),
                    kv.kflags);
  else
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
      if (kv.vr == 0 || dk_kv_moved(kv, hd, i)) kd[i] = ck_f32_to_bf16(sv[i]);
  const float *vs = k_eq_v ? src : yt + (int64_t)nq * hd + kvd + (int64_t)kh * hd;
  float rv = 1.0f;
  if (v_norm) {
    float s2 = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      float v = rb(vs[i]);
      s2 = fmaf(v, v, s2);
    }
    s2 = block_sum(s2);
    rv = 1.0f / sqrtf(s2 / (float)hd + eps);
  }
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float v = rb(vs[i]);
    vrow[dk_kv_vcol(kv, nkv, hd, kh, i)] = ck_f32_to_bf16(v_norm ? __fmul_rn(v, rv) : v);
  }
}

extern "C" int pf_qkv_post(const float *y, int64_t ldy, int T, int64_t p0, int nq, int nkv, int hd, int k_eq_v,
                           const float *qn, const float *kn, const float *inv_freq, int traditional, int v_norm,
                           float eps, dk_kv_layout kv, float *q_out, uint16_t *kdst, uint16_t *vdst,
                           void *stream) {
  if (T <= 0) return 0;
  if (!dk_kv_layout_ok(kv, nkv, hd, kdst, vdst, 0) || (kv.vr > 0 && (!kdst || !k_eq_v || !v_norm || traditional)))
    return (int)cudaErrorInvalidValue;
  /* without kdst (a KV-shared layer): the query heads only */
  pf_qkv_post_kernel<<<dim3(kdst ? nq + nkv : nq, T), 128, (size_t)hd * sizeof(float), (cudaStream_t)stream>>>(
      y, ldy, p0, nq, nkv, hd, k_eq_v, qn, kn, inv_freq, traditional, v_norm, eps, kv, q_out, kdst, vdst);
  return (int)cudaGetLastError();
}

/* grid (ceil(inter / 256), T); il > 0: each token's rows interleaved by il */
__global__ void pf_geglu_kernel(const float *y, int64_t inter, int il, uint16_t *out) {
  const int64_t tok = blockIdx.y, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= inter) return;
  const float *yt = y + tok * 2 * inter;
  const int64_t g = il ? (i / il) * 2 * il + i % il : i, u = il ? g + il : inter + i;
  out[tok * inter + i] = ck_geglu(yt[g], yt[u]);
}

extern "C" int pf_geglu(const float *y, int64_t inter, int T, uint16_t *out, int il, void *stream) {
  if (T <= 0) return 0;
  if (il < 0 || (il && inter % il)) return (int)cudaErrorInvalidValue;
  pf_geglu_kernel<<<dim3((unsigned)((inter + 255) / 256), T), 256, 0, (cudaStream_t)stream>>>(y, inter, il, out);
  return (int)cudaGetLastError();
}

/* grid (blocks over kvd, rows): rows first..T-1 of the chunk into their ring slots. */
__global__ void pf_kv_commit_kernel(const uint16_t *ks, const uint16_t *vs, uint16_t *kc, uint16_t *vc, int first,
                                    int64_t p0, int64_t kvd, int window) {
  const int64_t tok = first + blockIdx.y, slot = (p0 + tok) % ck_ring(window);
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < kvd; c += (int64_t)gridDim.x * blockDim.x) {
    kc[slot * kvd + c] = ks[tok * kvd + c];
    vc[slot * kvd + c] = vs[tok * kvd + c];
  }
}

extern "C" int pf_kv_commit(const uint16_t *ks, const uint16_t *vs, uint16_t *kc, uint16_t *vc, int T, int64_t p0,
                            int64_t kvd, int window, void *stream) {
  if (T <= 0 || window <= 0) return T <= 0 ? 0 : (int)cudaErrorInvalidValue;
  const int ring = ck_ring(window), first = T > ring ? T - ring : 0;
  int64_t bx = (kvd + 255) / 256;
  if (bx > 64) bx = 64;
  pf_kv_commit_kernel<<<dim3((unsigned)bx, T - first), 256, 0, (cudaStream_t)stream>>>(ks, vs, kc, vc, first, p0,
                                                                                        kvd, window);
  return (int)cudaGetLastError();
}
