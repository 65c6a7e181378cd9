/* The batched prompt pass of the CUDA whole-step decoder: a chunk of T tokens per launch
 * instead of T one-token steps. The products themselves are cuBLAS GEMMs on a dequantized copy
 * of each weight (cuda_gemm.c) or the tensor-core mat-vec for short chunks; this file holds the
 * dequantizer, the row-batched versions of decode.cu's elementwise kernels, and a causal
 * attention for T queries (tensor cores, two passes so p is rounded to bf16 after the exact
 * float32 normalisation, as the reference path does; docs/DECODE.md "Prefill"). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
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
    xr[i] = ck_f32_to_bf16(__fmul_rn(rb(__fmul_rn(hr[i], r)), w_next[i]));
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
                                                          float *q_out, uint16_t *kdst, uint16_t *vdst) {
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
    float *qo = q_out + tok * (int64_t)nq * hd + (int64_t)head * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) qo[i] = sv[i];
    return;
  }
  uint16_t *kd = kdst + tok * kvd + (int64_t)kh * hd, *vd = vdst + tok * kvd + (int64_t)kh * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) kd[i] = ck_f32_to_bf16(sv[i]);
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
    vd[i] = ck_f32_to_bf16(v_norm ? __fmul_rn(v, rv) : v);
  }
}

extern "C" int pf_qkv_post(const float *y, int64_t ldy, int T, int64_t p0, int nq, int nkv, int hd, int k_eq_v,
                           const float *qn, const float *kn, const float *inv_freq, int traditional, int v_norm,
                           float eps, float *q_out, uint16_t *kdst, uint16_t *vdst, void *stream) {
  if (T <= 0) return 0;
  pf_qkv_post_kernel<<<dim3(nq + nkv, T), 128, (size_t)hd * sizeof(float), (cudaStream_t)stream>>>(
      y, ldy, p0, nq, nkv, hd, k_eq_v, qn, kn, inv_freq, traditional, v_norm, eps, q_out, kdst, vdst);
  return (int)cudaGetLastError();
}

/* gelu_approx op by op in bf16, as MLX computes it (decode.cu's, repeated: no -rdc) */
static __device__ __forceinline__ float pf_gelu(float x) {
  const float c_sqrt = 0.796875f;     /* bf16(√(2/π)) */
  const float c_k = 0.044677734375f;  /* bf16(0.044715) */
  float x3 = rb(__fmul_rn(__fmul_rn(x, x), x));
  float t = rb(__fadd_rn(x, rb(__fmul_rn(c_k, x3))));
  t = rb(__fmul_rn(c_sqrt, t));
  float th = rb(tanhf(t));
  return rb(__fmul_rn(rb(__fmul_rn(0.5f, x)), rb(__fadd_rn(1.0f, th))));
}

/* grid (ceil(inter / 256), T) */
__global__ void pf_geglu_kernel(const float *y, int64_t inter, uint16_t *out) {
  const int64_t tok = blockIdx.y, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= inter) return;
  const float *yt = y + tok * 2 * inter;
  out[tok * inter + i] = ck_f32_to_bf16(__fmul_rn(pf_gelu(rb(yt[i])), rb(yt[inter + i])));
}

extern "C" int pf_geglu(const float *y, int64_t inter, int T, uint16_t *out, void *stream) {
  if (T <= 0) return 0;
  pf_geglu_kernel<<<dim3((unsigned)((inter + 255) / 256), T), 256, 0, (cudaStream_t)stream>>>(y, inter, out);
  return (int)cudaGetLastError();
}

/* grid (blocks over kvd, rows): rows first..T-1 of the chunk into their ring slots. */
__global__ void pf_kv_commit_kernel(const uint16_t *ks, const uint16_t *vs, uint16_t *kc, uint16_t *vc, int first,
                                    int64_t p0, int64_t kvd, int window) {
  const int64_t tok = first + blockIdx.y, slot = (p0 + tok) % window;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < kvd; c += (int64_t)gridDim.x * blockDim.x) {
    kc[slot * kvd + c] = ks[tok * kvd + c];
    vc[slot * kvd + c] = vs[tok * kvd + c];
  }
}

extern "C" int pf_kv_commit(const uint16_t *ks, const uint16_t *vs, uint16_t *kc, uint16_t *vc, int T, int64_t p0,
                            int64_t kvd, int window, void *stream) {
  if (T <= 0 || window <= 0) return T <= 0 ? 0 : (int)cudaErrorInvalidValue;
  int first = T > window ? T - window : 0;
  int64_t bx = (kvd + 255) / 256;
  if (bx > 64) bx = 64;
  pf_kv_commit_kernel<<<dim3((unsigned)bx, T - first), 256, 0, (cudaStream_t)stream>>>(ks, vs, kc, vc, first, p0,
                                                                                        kvd, window);
  return (int)cudaGetLastError();
}

/* ---- causal attention of T queries -------------------------------------------------------- */
struct PaArgs {
  const float *q;
  const uint16_t *kc, *vc, *kch, *vch;
  uint16_t *att;
  int T, nq, nkv, hd, window;
  int64_t p0;
  float scale;
};

/* K or V row of key j (all KV heads): the chunk's own rows from p0 on, else the cache. */
__device__ __forceinline__ const uint16_t *pa_row(const uint16_t *cache, const uint16_t *chunk, int64_t j, int64_t p0,
                                                  int window, int64_t kvd) {
  if (j >= p0) return chunk + (j - p0) * kvd;
  return cache + (window > 0 ? j % window : j) * kvd;
}

__device__ __forceinline__ int64_t pa_lo(int64_t p, int window) {
  return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

/* ldmatrix: four (two) 8×8 b16 matrices from shared memory, lane l giving the address of row
 * l & 7 of matrix l >> 3; .trans hands each lane a column pair instead of a row pair. */
__device__ __forceinline__ uint32_t pa_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

/* RG (a template parameter): 16-row query groups per block, sharing each K/V tile; 16·RG
 * queries and 128·RG threads per block */
#define PA_KT 32               /* keys per tile: 8 per warp of a row group */
#define PA_PLD 40              /* P row stride (bf16) */

template <int HD, int RG>
constexpr size_t pa_smem() {
  constexpr int PA_QT = 16 * RG;
  return (size_t)(PA_QT + 2 * PA_KT) * (HD + 8) * 2 + PA_QT * PA_PLD * 2 + 4 * PA_QT * 2 * sizeof(float);
}

/* grid (ceil(T / 32), nq), 8 warps. A block holds 32 queries of one head as two row groups of
 * 16 (one m16 tile each, 4 warps each); both read the same K/V tiles from shared memory. Per key
 * tile of 32 (8 per warp of a group): S = Q·Kᵀ with mma m16n8k16 (bf16 in, float32 accumulate),
 * rounded to bf16 and masked. Pass 1 keeps each row's running (max, Σexp); pass 2 recomputes S,
 * forms p = bf16(exp(s − M)·(1/total)) in shared memory, and each warp accumulates P·V for its
 * group's rows and its share of the head's 8-column output tiles. Shared rows are padded by 8
 * bf16 so the fragment loads of the 8 row groups of a warp hit distinct banks. */
template <int HD, bool LDM, int RG>
__global__ void __launch_bounds__(128 * RG) pa_mma_kernel(PaArgs a) {
  constexpr int PA_QT = 16 * RG;
  constexpr int LD = HD + 8, NTILES = HD / 8, VPR = HD / 8;
  /* output tiles per warp: nt = wq + 4i, or with LDM pairs nt = 2wq + 8(i/2) + i%2 (one x4.trans
   * load of V serves both) */
  constexpr int NTW = LDM ? 2 * ((NTILES + 7) / 8) : (NTILES + 3) / 4;
  extern __shared__ __align__(16) uint16_t pa_sm[];
  uint16_t *Qs = pa_sm, *Ks = Qs + PA_QT * LD, *Vs = Ks + PA_KT * LD, *Ps = Vs + PA_KT * LD;
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

  const float bscale = rb(a.scale);
  for (int i = threadIdx.x; i < PA_QT * HD; i += blockDim.x) {
    int r = i / HD, d = i % HD;
    int tok = q0 + (r < nvalid ? r : nvalid - 1);
    float v = a.q[tok * qstride + (int64_t)h * HD + d];
    if (a.scale != 1.0f) v = rb(__fmul_rn(v, bscale));
    Qs[r * LD + d] = ck_f32_to_bf16(v);
  }
  auto load = [&](uint16_t *dst, const uint16_t *cache, const uint16_t *chunk, int64_t k0) {
    for (int i = threadIdx.x; i < PA_KT * VPR; i += blockDim.x) {
      int r = i / VPR, c = i % VPR;
      int64_t j = k0 + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (j <= hi_blk)
        v = *reinterpret_cast<const uint4 *>(pa_row(cache, chunk, j, a.p0, a.window, kvd) + (int64_t)gkv * HD + c * 8);
      *reinterpret_cast<uint4 *>(dst + r * LD + c * 8) = v;
    }
  };
  const uint16_t *qa = Qs + (r0 + g) * LD + 2 * t, *qb = qa + 8 * LD; /* A rows g, g + 8 of the group */
  /* S for rows (g, g+8) × keys k0 + wq·8 + (2t, 2t+1): s[2r + e], masked → -inf */
  /* LDM: fragments by ldmatrix (Q rows lane & 15 at column (lane >> 4)·8; K rows lane & 7 at
   * (lane >> 3)·8: two k steps per x4), and the k steps spread over NCH accumulators (one
   * chain of HD/16 dependent mmas otherwise), added at the end */
  const uint32_t q_ldm = pa_saddr(Qs + (r0 + (lane & 15)) * LD + ((lane >> 4) << 3));
  const uint32_t k_ldm = pa_saddr(Ks + (wq * 8 + (lane & 7)) * LD + ((lane >> 3) << 3));
  auto scores = [&](int64_t k0, float (&s)[4]) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const uint16_t *kr = Ks + (wq * 8 + g) * LD + 2 * t;
    if (LDM) {
      constexpr int NK = HD / 16, NCH = NK >= 4 ? 4 : NK;
      float cc[NCH][4];
#pragma unroll
      for (int i = 0; i < NCH; i++) cc[i][0] = cc[i][1] = cc[i][2] = cc[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < NK; kk += 2) {
        uint32_t A0[4], A1[4], B[4];
        ldsm_x4(A0, q_ldm + kk * 32);
        if (kk + 1 < NK) {
          ldsm_x4(A1, q_ldm + (kk + 1) * 32);
          ldsm_x4(B, k_ldm + kk * 32);
        } else {
          ldsm_x2(B, k_ldm + kk * 32);
        }
        mma_bf16(cc[kk % NCH], A0, B[0], B[1]);
        if (kk + 1 < NK) mma_bf16(cc[(kk + 1) % NCH], A1, B[2], B[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; e++)
        c[e] = NCH == 4 ? (cc[0][e] + cc[1][e]) + (cc[2 % NCH][e] + cc[3 % NCH][e]) : NCH == 2 ? cc[0][e] + cc[1 % NCH][e] : cc[0][e];
    }
#pragma unroll
    for (int kk = 0; kk < (LDM ? 0 : HD / 16); kk++) {
      uint32_t A[4];
      A[0] = *reinterpret_cast<const uint32_t *>(qa + kk * 16);
      A[1] = *reinterpret_cast<const uint32_t *>(qb + kk * 16);
      A[2] = *reinterpret_cast<const uint32_t *>(qa + kk * 16 + 8);
      A[3] = *reinterpret_cast<const uint32_t *>(qb + kk * 16 + 8);
      uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr + kk * 16);
      uint32_t b1 = *reinterpret_cast<const uint32_t *>(kr + kk * 16 + 8);
      mma_bf16(c, A, b0, b1);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int r = e >> 1;
      int64_t j = k0 + wq * 8 + 2 * t + (e & 1);
      s[e] = j <= pr[r] && j >= lo[r] ? rb(c[e]) : -INFINITY;
    }
  };

  /* pass 1: row max and Σ exp(s − max) */
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int it = 0; it < ntiles; it++) {
    int64_t k0 = lo_blk + (int64_t)it * PA_KT;
    __syncthreads();
    load(Ks, a.kc, a.kch, k0);
    __syncthreads();
    float s[4];
    scores(k0, s);
#pragma unroll
    for (int e = 0; e < 4; e++) pa_combine(m[e >> 1], l[e >> 1], s[e], s[e] == -INFINITY ? 0.f : 1.f);
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
  const uint32_t p_ldm = pa_saddr(Ps + (r0 + (lane & 15)) * PA_PLD + ((lane >> 4) << 3));
  const uint32_t v_ldm = pa_saddr(Vs + (lane & 15) * LD + ((lane >> 4) << 3));
  for (int it = 0; it < ntiles; it++) {
    int64_t k0 = lo_blk + (int64_t)it * PA_KT;
    __syncthreads();
    load(Ks, a.kc, a.kch, k0);
    load(Vs, a.vc, a.vch, k0);
    __syncthreads();
    float s[4];
    scores(k0, s);
    uint16_t p[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int r = e >> 1;
      p[e] = s[e] == -INFINITY ? (uint16_t)0 : ck_f32_to_bf16(__fmul_rn(expf(__fsub_rn(s[e], M[r])), inv[r]));
    }
    *reinterpret_cast<uint32_t *>(Ps + (r0 + g) * PA_PLD + wq * 8 + 2 * t) = p[0] | ((uint32_t)p[1] << 16);
    *reinterpret_cast<uint32_t *>(Ps + (r0 + g + 8) * PA_PLD + wq * 8 + 2 * t) = p[2] | ((uint32_t)p[3] << 16);
    __syncthreads();
    if (LDM) {
#pragma unroll
      for (int ks = 0; ks < PA_KT / 16; ks++) {
        uint32_t A[4];
        ldsm_x4(A, p_ldm + ks * 32);
#pragma unroll
        for (int i = 0; i < NTW; i += 2) {
          const int nt = 2 * wq + 4 * i;
          if (nt >= NTILES) continue;
          uint32_t B[4];
          const uint32_t va = v_ldm + (uint32_t)(ks * 16 * LD + nt * 8) * 2;
          if (nt + 1 < NTILES) {
            ldsm_x4_t(B, va);
            mma_bf16(o[i], A, B[0], B[1]);
            mma_bf16(o[i + 1], A, B[2], B[3]);
          } else {
            ldsm_x2_t(B, va);
            mma_bf16(o[i], A, B[0], B[1]);
          }
        }
      }
    }
#pragma unroll
    for (int ks = 0; ks < (LDM ? 0 : PA_KT / 16); ks++) {
      uint32_t A[4];
      A[0] = *reinterpret_cast<const uint32_t *>(pa + ks * 16);
      A[1] = *reinterpret_cast<const uint32_t *>(pb + ks * 16);
      A[2] = *reinterpret_cast<const uint32_t *>(pa + ks * 16 + 8);
      A[3] = *reinterpret_cast<const uint32_t *>(pb + ks * 16 + 8);
      const uint16_t *v0 = Vs + (ks * 16 + 2 * t) * LD + g;
#pragma unroll
      for (int i = 0; i < NTW; i++) {
        int nt = wq + 4 * i;
        if (nt < NTILES) {
          const uint16_t *vc = v0 + nt * 8;
          uint32_t b0 = vc[0] | ((uint32_t)vc[LD] << 16);
          uint32_t b1 = vc[8 * LD] | ((uint32_t)vc[9 * LD] << 16);
          mma_bf16(o[i], A, b0, b1);
        }
      }
    }
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

/* The plain version: one block per (query, head), three passes over the keys (max, Σexp,
 * then p and Σ p·v in key order). Any head dim up to 1024; the reference for the fast one. */
#define PS_THREADS 128
#define PS_KT 128
__global__ void __launch_bounds__(PS_THREADS) pa_simple_kernel(PaArgs a) {
  extern __shared__ float ps_sm[];
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

template <int HD, bool LDM, int RG>
static int pa_launch_k(const PaArgs &a, cudaStream_t st) {
  static int attr_set;
  constexpr size_t smem = pa_smem<HD, RG>();
  constexpr int QT = 16 * RG;
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(pa_mma_kernel<HD, LDM, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e) return (int)e;
    attr_set = 1;
  }
  pa_mma_kernel<HD, LDM, RG><<<dim3((unsigned)((a.T + QT - 1) / QT), a.nq), 128 * RG, smem, st>>>(a);
  return (int)cudaGetLastError();
}
template <int HD>
static int pa_launch(const PaArgs &a, int kind, cudaStream_t st) {
  /* 64 queries per block: half the K/V traffic of 32, the same bits (pp512 at depth 32768 on
   * the H200: 1434-1442 t/s against 1239; docs/PERF.md, session 10) */
  return kind == 2 ? pa_launch_k<HD, false, 2>(a, st) : kind == 3 ? pa_launch_k<HD, true, 2>(a, st) : pa_launch_k<HD, true, 4>(a, st);
}

extern "C" int pf_attention(const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                            const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                            uint16_t *att, int kind, void *stream) {
  if (T <= 0) return 0;
  if (nkv <= 0 || nq % nkv || hd <= 0 || hd > 1024) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  PaArgs a = {q, kc, vc, kch, vch, att, T, nq, nkv, hd, window, p0, scale};
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
  pa_simple_kernel<<<dim3(T, nq), PS_THREADS, smem, st>>>(a);
  return (int)cudaGetLastError();
}
