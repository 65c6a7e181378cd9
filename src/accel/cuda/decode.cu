/* The whole-step decoder's elementwise and norm kernels. Each reproduces the reference path's
 * rounding points (docs/NUMERICS.md): bf16 after every op, float32 reductions. Products whose
 * result is rounded before a following add use __fmul_rn so nvcc does not fuse them into an
 * FMA the reference does not have. */
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "decode_kernels.h"
#include "qkv_post.cuh" /* ysum */

static int g_pdl;
extern "C" void ck_set_pdl(int on) { g_pdl = on; }
extern "C" int ck_pdl_enabled(void) { return g_pdl; }

extern "C" int ck_pdl_early_attention(int on);
extern "C" int ck_pdl_early_attention_onepass(int on);
extern "C" int ck_pdl_early_attention_cluster(int on);
extern "C" int ck_pdl_early_decode(int on);
extern "C" int ck_pdl_early_qmv(int on);
extern "C" int ck_pdl_early_xprep(int on);
extern "C" int ck_pdl_early_qkv_post(int on);
extern "C" int ck_pdl_early_attention_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_pdl_early_attention_onepass_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_pdl_early_attention_cluster_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_pdl_early_decode_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_pdl_early_qmv_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_pdl_early_xprep_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_pdl_early_qkv_post_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st);
extern "C" int ck_set_timeline(unsigned long long *t, unsigned *n, unsigned cap, void *st) {
  int e = ck_pdl_early_attention_timeline(t, n, cap, st);
  if (!e) e = ck_pdl_early_attention_onepass_timeline(t, n, cap, st);
  if (!e) e = ck_pdl_early_attention_cluster_timeline(t, n, cap, st);
  if (!e) e = ck_pdl_early_decode_timeline(t, n, cap, st);
  if (!e) e = ck_pdl_early_qmv_timeline(t, n, cap, st);
  if (!e) e = ck_pdl_early_xprep_timeline(t, n, cap, st);
  if (!e) e = ck_pdl_early_qkv_post_timeline(t, n, cap, st);
  return e;
}
extern "C" int ck_set_pdl_early(int on) {
  int e = ck_pdl_early_attention(on);
  if (!e) e = ck_pdl_early_attention_onepass(on);
  if (!e) e = ck_pdl_early_attention_cluster(on);
  if (!e) e = ck_pdl_early_decode(on);
  if (!e) e = ck_pdl_early_qmv(on);
  if (!e) e = ck_pdl_early_xprep(on);
  if (!e) e = ck_pdl_early_qkv_post(on);
  return e;
}


__global__ void step_begin_kernel(const int32_t *all, const int *pos, int32_t *tok) {
  ck_pdl_enter();
  tok[0] = all[*pos];
}
__global__ void step_end_kernel(int *pos) {
  ck_pdl_enter();
  *pos += 1;
}

extern "C" int dk_step_begin(const int32_t *all_tokens, const int *pos, int32_t *tok, void *stream) {
  return (int)ck_launch(step_begin_kernel, 1, 1, 0, (cudaStream_t)stream, all_tokens, pos, tok);
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

/* The mat-vec's activation prep written by the kernel that makes x (xmode, mv_xmode in
 * cuda_decoder.c), bit for bit what ck_xprep_premax computes from the block maxima: the
 * exponent from the row's max |x| (1: fp16 x·2^e, max in [2^14, 2^15); 2: bf16 as it is)... */
__device__ __forceinline__ int prep_exp(float m, int xmode) {
  int e = 0;
  if (xmode == 1 && m > 0.f && m <= 3.0e38f) {
    frexpf(m, &e); /* m < 2^e: scale by 2^(15-e) → max in [2^14, 2^15) */
    e = 15 - e;
  }
  return e;
}
/* ... and value i (bf16 ov) in fragment order: value kk of 32-k slice i/32 (m, hi, t, j) */
__device__ __forceinline__ void prep_store(uint16_t *xp, int i, uint16_t ov, int e, int xmode) {
  const int kk = i & 31, rr = kk & 15;
  const uint16_t v = xmode == 2 ? ov : ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ov), e));
  xp[((i >> 5) * 4 + ((rr & 7) >> 1)) * 8 + (kk >> 4) * 4 + (rr >> 3) * 2 + (rr & 1)] = v;
}

/* One row over a cluster of RN_CL blocks of RN_BT threads (one block alone was latency-bound
 * at ~16 us): thread g of the cluster owns values g, g + RN_CL·RN_BT, … (at most RN_VPT),
 * kept in registers between the passes. The row sums are reduced per block, then each block
 * adds the RN_CL block sums in rank order through distributed shared memory, so every block
 * holds the same total (deterministic). One pass of the cluster covers RN_CL·RN_BT values,
 * which is the activation prep's pblock: the pass's max|xb| is pmax of that pblock. */
#define RN_CL 8
#define RN_BT 256
#define RN_VPT 8
namespace cg = cooperative_groups;

__device__ __forceinline__ float cluster_total(cg::cluster_group &cl, float *slot, float v) {
  v = block_sum(v);
  if (threadIdx.x == 0) *slot = v;
  cl.sync();
  float t = 0.0f;
  for (unsigned r = 0; r < RN_CL; r++) t += *cl.map_shared_rank(slot, r);
  return t;
}

__global__ void __cluster_dims__(RN_CL, 1, 1) __launch_bounds__(RN_BT)
    residual_norm_kernel(const float *y, int ks, int64_t kstride, const float *w_post, float *h, int use_scalar,
                         float scalar, const float *w_next, uint16_t *xb, int H, float eps, float *pmax, int pblock,
                         uint16_t *xp, int *xexp, int xmode) {
  cg::cluster_group cl = cg::this_cluster();
  __shared__ float sums[2];
  __shared__ float wmax[RN_VPT][RN_BT / 32], kmax[RN_VPT];
  const int g = (int)cl.block_rank() * RN_BT + threadIdx.x, step = RN_CL * RN_BT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  /* The loads that do not depend on the predecessor are issued before its wait: this kernel
   * runs while the next mat-vec's resident blocks stream their first weight stages, and a
   * DRAM read queued behind them cost several us per dependent round trip (in-graph
   * timeline, docs/PERF.md session 7). The norm weights never change. With y, the
   * predecessor is the mat-vec writing y, and h was written by a kernel that completed
   * before that mat-vec passed its own wait; without y (the input norm) the predecessor
   * writes h, and when kernels trigger before they wait (ck_pdl_early_c) nothing earlier is
   * known complete: then h is read after the wait. */
  float wp[RN_VPT], wn[RN_VPT], hv[RN_VPT];
  const int early = ck_pdl_early_c || !y;
#pragma unroll
  for (int k = 0; k < RN_VPT; k++) {
    int i = g + k * step;
    wp[k] = y && i < H ? w_post[i] : 0.0f;
    wn[k] = i < H ? w_next[i] : 0.0f;
    hv[k] = !early && i < H ? h[i] : 0.0f;
  }
  ck_pdl_enter();
  if (early) {
#pragma unroll
    for (int k = 0; k < RN_VPT; k++) {
      int i = g + k * step;
      hv[k] = i < H ? h[i] : 0.0f;
    }
  }
  if (y) {
    float yv[RN_VPT], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < RN_VPT; k++) {
      int i = g + k * step;
      yv[k] = i < H ? rb(ysum(y + i, ks, kstride)) : 0.0f;
      ss = fmaf(yv[k], yv[k], ss);
    }
    ss = cluster_total(cl, &sums[0], ss);
    float r = 1.0f / sqrtf(ss / (float)H + eps);
#pragma unroll
    for (int k = 0; k < RN_VPT; k++) {
      int i = g + k * step;
      if (i >= H) continue;
      float o = rb(__fmul_rn(rb(__fmul_rn(yv[k], r)), wp[k]));
      float v = rb(__fadd_rn(hv[k], o));
      if (use_scalar) v = rb(__fmul_rn(v, scalar));
      hv[k] = v;
      h[i] = v;
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < RN_VPT; k++) ss = fmaf(hv[k], hv[k], ss);
  ss = cluster_total(cl, &sums[1], ss);
  float r = 1.0f / sqrtf(ss / (float)H + eps);
  uint16_t ov[RN_VPT];
#pragma unroll
  for (int k = 0; k < RN_VPT; k++) {
    int i = g + k * step;
    float m = 0.0f;
    ov[k] = 0;
    if (i < H) {
      uint16_t o = ck_f32_to_bf16(__fmul_rn(rb(__fmul_rn(hv[k], r)), wn[k]));
      xb[i] = o;
      ov[k] = o;
      m = fabsf(ck_bf16_to_f32(o));
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) wmax[k][warp] = m;
  }
  if (pmax || xmode) {
    __syncthreads();
    if (threadIdx.x < RN_VPT) {
      float m = 0.0f;
      for (int w = 0; w < RN_BT / 32; w++) m = fmaxf(m, wmax[threadIdx.x][w]);
      kmax[threadIdx.x] = m;
    }
    cl.sync();
    int nblk = (H + pblock - 1) / pblock;
    if (pmax && cl.block_rank() == 0 && threadIdx.x < nblk) {
      float m = 0.0f;
      for (unsigned q = 0; q < RN_CL; q++) m = fmaxf(m, *cl.map_shared_rank(&kmax[threadIdx.x], q));
      pmax[threadIdx.x] = m;
    }
    if (xmode) {
      /* the activation prep of the next mat-vec (what ck_xprep_premax computes from pmax, bit
       * for bit): the row maximum over every block's pass maxima, then x in fragment order */
      __shared__ int xe;
      if (warp == 0) {
        float m = 0.0f;
        for (int v = lane; v < RN_CL * nblk; v += 32) m = fmaxf(m, *cl.map_shared_rank(&kmax[v / RN_CL], v % RN_CL));
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) xe = prep_exp(m, xmode);
      }
      __syncthreads();
      const int e = xe;
      if (cl.block_rank() == 0 && threadIdx.x == 0) *xexp = e;
#pragma unroll
      for (int k = 0; k < RN_VPT; k++) {
        int i = g + k * step;
        if (i < H) prep_store(xp, i, ov[k], e, xmode);
      }
    }
  }
  cl.sync(); /* no block leaves while another still reads its shared memory */
}

extern "C" int dk_residual_norm(const float *y, int ks, int64_t kstride, const float *w_post, float *h, int use_scalar, float scalar,
                                const float *w_next, uint16_t *xb, int H, float eps, float *pmax, int pblock,
                                uint16_t *xp, int *xexp, int xmode, void *stream) {
  if (((pmax || xmode) && pblock != RN_CL * RN_BT) || H > RN_CL * RN_BT * RN_VPT || xmode < 0 || xmode > 2 ||
      (xmode && (!xp || !xexp || H % 32)))
    return (int)cudaErrorInvalidValue;
  return (int)ck_launch(residual_norm_kernel, RN_CL, RN_BT, 0, (cudaStream_t)stream, y, ks, kstride, w_post, h,
                        use_scalar, scalar, w_next, xb, H, eps, pmax, pblock, xp, xexp, xmode);
}

/* gelu_approx op by op in bf16, as MLX computes it */
__device__ __forceinline__ float gelu_approx(float x) {
  const float c_sqrt = 0.796875f; /* bf16(√(2/π)) */
  const float c_k = 0.044677734375f; /* bf16(0.044715) */
  float x3 = rb(__fmul_rn(__fmul_rn(x, x), x));
  float t = rb(__fadd_rn(x, rb(__fmul_rn(c_k, x3))));
  t = rb(__fmul_rn(c_sqrt, t));
  float th = rb(tanhf(t));
  return rb(__fmul_rn(rb(__fmul_rn(0.5f, x)), rb(__fadd_rn(1.0f, th))));
}

/* One block per pblock values; block b also writes pmax[b] = max|out| over them. */
__global__ void geglu_kernel(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, float *pmax, int pblock) {
  ck_pdl_enter();
  int64_t b0 = (int64_t)blockIdx.x * pblock, end = b0 + pblock < n ? b0 + pblock : n;
  float m = 0.0f;
  for (int64_t i = b0 + threadIdx.x; i < end; i += blockDim.x) {
    uint16_t o = ck_f32_to_bf16(__fmul_rn(gelu_approx(rb(ysum(g + i, ks, kstride))), rb(ysum(u + i, ks, kstride))));
    out[i] = o;
    m = fmaxf(m, fabsf(ck_bf16_to_f32(o)));
  }
  if (!pmax) return;
  m = block_max(m);
  if (threadIdx.x == 0) pmax[blockIdx.x] = m;
}

extern "C" int dk_geglu(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, float *pmax, int pblock,
                        void *stream) {
  int64_t blocks = (n + pblock - 1) / pblock;
  return (int)ck_launch(geglu_kernel, (unsigned)blocks, 1024, 0, (cudaStream_t)stream, g, u, ks, kstride, out, n, pmax,
                        pblock);
}

/* geglu writing the down product's activation prep itself (dk_geglu_prep): one row over a
 * cluster of GC_CL blocks of 1024 threads, thread g owning values g, g + GC_CL·1024, …; the
 * blocks' maxima meet through distributed shared memory, so every block forms the same
 * exponent and writes its values in fragment order — the prep kernel's output, bit for bit,
 * without its launch. */
#define GC_CL 8
#define GC_VPT 3
__global__ void __cluster_dims__(GC_CL, 1, 1) __launch_bounds__(1024)
    geglu_prep_kernel(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int n, uint16_t *xp,
                      int *xexp, int xmode) {
  cg::cluster_group cl = cg::this_cluster();
  __shared__ float bmax;
  ck_pdl_enter();
  const int gi = (int)cl.block_rank() * 1024 + threadIdx.x, step = GC_CL * 1024;
  uint16_t ov[GC_VPT];
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < GC_VPT; k++) {
    const int i = gi + k * step;
    ov[k] = 0;
    if (i < n) {
      ov[k] = ck_f32_to_bf16(__fmul_rn(gelu_approx(rb(ysum(g + i, ks, kstride))), rb(ysum(u + i, ks, kstride))));
      out[i] = ov[k];
      m = fmaxf(m, fabsf(ck_bf16_to_f32(ov[k])));
    }
  }
  m = block_max(m);
  if (threadIdx.x == 0) bmax = m;
  cl.sync();
  float t = 0.0f;
  for (unsigned r = 0; r < GC_CL; r++) t = fmaxf(t, *cl.map_shared_rank(&bmax, r));
  const int e = prep_exp(t, xmode);
  if (cl.block_rank() == 0 && threadIdx.x == 0) *xexp = e;
#pragma unroll
  for (int k = 0; k < GC_VPT; k++) {
    const int i = gi + k * step;
    if (i < n) prep_store(xp, i, ov[k], e, xmode);
  }
  cl.sync(); /* no block leaves while another still reads its shared memory */
}

extern "C" int dk_geglu_prep_ok(int64_t n) { return n > 0 && n % 32 == 0 && n <= (int64_t)GC_CL * 1024 * GC_VPT; }

extern "C" int dk_geglu_prep(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n,
                             uint16_t *xp, int *xexp, int xmode, void *stream) {
  if (!dk_geglu_prep_ok(n) || xmode < 1 || xmode > 2 || !xp || !xexp) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(geglu_prep_kernel, GC_CL, 1024, 0, (cudaStream_t)stream, g, u, ks, kstride, out, (int)n, xp,
                        xexp, xmode);
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
                                                            int32_t *next) {
  ck_pdl_enter();
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < V; i += (int64_t)gridDim.x * blockDim.x) {
    float l = rb(y[i]);
    if (cap > 0.0f) l = rb(__fmul_rn(rb(tanhf(rb(__fdiv_rn(l, cap)))), cap));
    logits[i] = l;
    better(bv, bi, l, (int)i);
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
  *next = ii == 0x7fffffff ? 0 : ii; /* all NaN: token 0 */
  *count = 0;
}

extern "C" int dk_logits_blocks(int64_t V) {
  int64_t b = (V + LG_THREADS - 1) / LG_THREADS;
  return (int)(b < LG_BLOCKS ? b : LG_BLOCKS);
}

extern "C" int dk_logits(const float *y, float *logits, int64_t V, float cap, float *part_v, int *part_i,
                         unsigned *count, int32_t *next, void *stream) {
  return (int)ck_launch(logits_kernel, dk_logits_blocks(V), LG_THREADS, 0, (cudaStream_t)stream, y, logits, V, cap,
                        part_v, part_i, count, next);
}

CK_PDL_EARLY_SETTER(ck_pdl_early_decode)
