/* The whole-step decoder's elementwise and norm kernels. Each reproduces the reference path's
 * rounding points (docs/NUMERICS.md): bf16 after every op, float32 reductions. Products whose
 * result is rounded before a following add use __fmul_rn so nvcc does not fuse them into an
 * FMA the reference does not have. */
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <float.h>

#include "accel/accel_sample_math.h" /* ACCEL_TOKEN_NONFINITE */
#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "decode_kernels.h"
#include "prep_store.cuh"
#include "qkv_post.cuh" /* ysum */

namespace cg = cooperative_groups;

/* The in-graph timeline's stamp pointer, set in every translation unit that launches through
 * ck_launch (CK_TIMELINE_SETTER). */
extern "C" int ck_tl_attention_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_attention_cluster_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_decode_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qmv_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qmv_cols_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_xprep_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qkv_post_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_residual_norm_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_moe_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_moe_cluster_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qmm_grouped_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qmm_rows_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qmm_wg_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_qmv_generic_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_ple_tail_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_attention_stream_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_kv_codec_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_tl_prefill_attn_planar_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);
extern "C" int ck_set_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st) {
  int e = ck_tl_attention_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_attention_cluster_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_decode_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qmv_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qmv_cols_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_xprep_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qkv_post_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_residual_norm_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_moe_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_moe_cluster_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qmm_grouped_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qmm_rows_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qmm_wg_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_qmv_generic_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_ple_tail_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_attention_stream_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_kv_codec_timeline(t, n, cap, last, st);
  if (!e) e = ck_tl_prefill_attn_planar_timeline(t, n, cap, last, st);
  return e;
}

__global__ void step_end_kernel(int *pos) {
  ck_pdl_enter();
  *pos += 1;
}

extern "C" int dk_step_end(int *pos, void *stream) {
  return (int)ck_launch(step_end_kernel, 1, 1, 0, (cudaStream_t)stream, pos);
}

__global__ void embed_scale_kernel(const uint16_t *e, float *h, int H, float scale) {
  ck_pdl_enter();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < H; i += gridDim.x * blockDim.x)
    h[i] = rb(__fmul_rn(ck_bf16_to_f32(e[i]), scale));
}

extern "C" int dk_embed_scale(const uint16_t *e, float *h, int H, float scale, void *stream) {
  return (int)ck_launch(embed_scale_kernel, (H + 255) / 256, 256, 0, (cudaStream_t)stream, e, h, H, scale);
}

/* Where value i of a gate|up product's gate (and, il further, its up) sits: i, or with rows
 * interleaved by il (ck_qmv_geglu's layout) in the gate half of its 2·il block. */
__device__ __forceinline__ int64_t gu_index(int64_t i, int il) { return il ? (i / il) * 2 * il + i % il : i; }

/* One block per pblock values; block b also writes pmax[b] = max|out| over them. */
__global__ void geglu_kernel(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, float *pmax,
                             int pblock, int il) {
  ck_pdl_enter();
  int64_t b0 = (int64_t)blockIdx.x * pblock, end = b0 + pblock < n ? b0 + pblock : n;
  float m = 0.0f;
  for (int64_t i = b0 + threadIdx.x; i < end; i += blockDim.x) {
    const int64_t j = gu_index(i, il);
    uint16_t o = ck_geglu(ysum(g + j, ks, kstride), ysum(u + j, ks, kstride));
    out[i] = o;
    m = fmaxf(m, fabsf(ck_bf16_to_f32(o)));
  }
  if (!pmax) return;
  m = block_max(m);
  if (threadIdx.x == 0) pmax[blockIdx.x] = m;
}

extern "C" int dk_geglu(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, float *pmax, int pblock,
                        int il, void *stream) {
  if (il < 0 || (il && (u != g + il || n % il))) return (int)cudaErrorInvalidValue;
  int64_t blocks = (n + pblock - 1) / pblock;
  return (int)ck_launch(geglu_kernel, (unsigned)blocks, 1024, 0, (cudaStream_t)stream, g, u, ks, kstride, out, n, pmax,
                        pblock, il);
}

/* ---- per-layer embeddings (Gemma 4 E2B/E4B) ------------------------------------------------ */
#define PLE_T 256

/* grid (L, T): slice l of token t. v = bf16(bf16(y) · ms), n = rmsnorm(v, w) over the P values,
 * e = bf16(bf16 erow · es); out = bf16(bf16(n + e) · mix). */
__global__ void __launch_bounds__(PLE_T) ple_inputs_kernel(const float *y, int ks, int64_t kstride, int64_t ldy,
                                                           const uint16_t *erow, const float *w, int P, float ms,
                                                           float es, float mix, float eps, float *out) {
  ck_pdl_enter();
  const int64_t t = blockIdx.y, LP = (int64_t)gridDim.x * P, off = (int64_t)blockIdx.x * P;
  const float *yr = y + t * ldy + off;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < P; j += blockDim.x) {
    float v = rb(__fmul_rn(rb(ysum(yr + j, ks, kstride)), ms));
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss);
  const float r = 1.0f / sqrtf(ss / (float)P + eps);
  const uint16_t *er = erow + t * LP + off;
  float *o = out + t * LP + off;
  for (int j = threadIdx.x; j < P; j += blockDim.x) {
    float v = rb(__fmul_rn(rb(ysum(yr + j, ks, kstride)), ms));
    float n = rb(__fmul_rn(rb(__fmul_rn(v, r)), w[j]));
    float e = rb(__fmul_rn(ck_bf16_to_f32(er[j]), es));
    o[j] = rb(__fmul_rn(rb(__fadd_rn(n, e)), mix));
  }
}

extern "C" int dk_ple_inputs(const float *y, int ks, int64_t kstride, int64_t ldy, const uint16_t *erow, const float *w,
                             int L, int P, float ms, float es, float mix, float eps, float *out, int T, void *stream) {
  if (L <= 0 || P <= 0 || T <= 0 || ks < 1) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(ple_inputs_kernel, dim3((unsigned)L, (unsigned)T), PLE_T, 0, (cudaStream_t)stream, y, ks, kstride,
                        ldy, erow, w, P, ms, es, mix, eps, out);
}

/* grid T: out[t·P + j] = bf16(gelu_approx(bf16 g) · ple[t·ldp + j]); with xmode (T = 1) also
 * the next product's activation prep of the row (prep_store.cuh) */
#define PLE_VPT 8
__global__ void __launch_bounds__(PLE_T) ple_gate_kernel(const float *g, int ks, int64_t kstride, int64_t ldg,
                                                         const float *ple, int64_t ldp, int P, uint16_t *out,
                                                         uint16_t *xp, int *xexp, int xmode) {
  ck_pdl_enter();
  const int64_t t = blockIdx.x;
  uint16_t ov[PLE_VPT];
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < PLE_VPT; k++) {
    const int j = threadIdx.x + k * PLE_T;
    ov[k] = 0;
    if (j < P) {
      ov[k] = ck_geglu(ysum(g + t * ldg + j, ks, kstride), ple[t * ldp + j]);
      out[t * P + j] = ov[k];
      m = fmaxf(m, fabsf(ck_bf16_to_f32(ov[k])));
    }
  }
  if (!xmode) return;
  const int e = prep_exp(block_max(m), xmode);
  if (threadIdx.x == 0) *xexp = e;
#pragma unroll
  for (int k = 0; k < PLE_VPT; k++) {
    const int j = threadIdx.x + k * PLE_T;
    if (j < P) prep_store(xp, j, ov[k], e, xmode);
  }
}

extern "C" int dk_ple_gate(const float *g, int ks, int64_t kstride, int64_t ldg, const float *ple, int64_t ldp, int P,
                           uint16_t *out, int T, uint16_t *xp, int *xexp, int xmode, void *stream) {
  if (P <= 0 || P > PLE_T * PLE_VPT || T <= 0 || ks < 1 || xmode < 0 || xmode > 2 ||
      (xmode && (T != 1 || !xp || !xexp || P % 32)))
    return (int)cudaErrorInvalidValue;
  return (int)ck_launch(ple_gate_kernel, (unsigned)T, PLE_T, 0, (cudaStream_t)stream, g, ks, kstride, ldg, ple, ldp, P,
                        out, xp, xexp, xmode);
}

/* ---- logits: softcap, then argmax (lowest index on ties) by the last block to finish ---- */
#define LG_BLOCKS 264
#define LG_THREADS 256

__device__ __forceinline__ void better(float &bv, int &bi, float v, int i) {
  if (v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

__global__ void __launch_bounds__(LG_THREADS) logits_kernel(const float *y, float *logits, int64_t V, float cap,
                                                            float *part_v, int *part_i, unsigned *count,
                                                            unsigned *bad_rev, int32_t *next) {
  ck_pdl_enter();
  float bv = -INFINITY;
  int bi = 0x7fffffff, bad = 0x7fffffff;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < V; i += (int64_t)gridDim.x * blockDim.x) {
    float l = rb(y[i]);
    if (cap > 0.0f) l = rb(__fmul_rn(rb(tanhf(rb(__fdiv_rn(l, cap)))), cap));
    logits[i] = l;
    better(bv, bi, l, (int)i);
    if (!(fabsf(l) <= FLT_MAX) && bad == 0x7fffffff) bad = (int)i; /* NaN or ±inf */
  }
  /* a non-finite logit: the lowest such id as V - id, an atomic max (nothing on a finite row) */
  if (bad != 0x7fffffff) {
    atomicMax(bad_rev, (unsigned)(V - bad));
    __threadfence();
  }
  __shared__ float sv[LG_THREADS];
  __shared__ int si[LG_THREADS];
  __shared__ bool last;
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int o = LG_THREADS / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      float v = sv[threadIdx.x];
      int ii = si[threadIdx.x];
      better(v, ii, sv[threadIdx.x + o], si[threadIdx.x + o]);
      sv[threadIdx.x] = v;
      si[threadIdx.x] = ii;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    part_v[blockIdx.x] = sv[0];
    part_i[blockIdx.x] = si[0];
    __threadfence();
    last = atomicAdd(count, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  float v = -INFINITY;
  int ii = 0x7fffffff;
  for (unsigned b = 0; b < gridDim.x; b++) better(v, ii, __ldcg(part_v + b), __ldcg(part_i + b));
  const unsigned br = __ldcg(bad_rev);
  *next = br ? ACCEL_TOKEN_NONFINITE(V - (int64_t)br) : ii;
  *bad_rev = 0;
  *count = 0;
}

extern "C" int dk_logits_blocks(int64_t V) {
  int64_t b = (V + LG_THREADS - 1) / LG_THREADS;
  return (int)(b < LG_BLOCKS ? b : LG_BLOCKS);
}

extern "C" int dk_logits(const float *y, float *logits, int64_t V, float cap, float *part_v, int *part_i,
                         unsigned *count, unsigned *bad_rev, int32_t *next, void *stream) {
  return (int)ck_launch(logits_kernel, dk_logits_blocks(V), LG_THREADS, 0, (cudaStream_t)stream, y, logits, V, cap,
                        part_v, part_i, count, bad_rev, next);
}

CK_TIMELINE_SETTER(ck_tl_decode)
