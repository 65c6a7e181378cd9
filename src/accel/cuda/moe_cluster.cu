/* The MoE block's one-row kernels of the decode step (dk_moe_norms and dk_moe_combine with
 * T = 1) over a cluster of MC_CL blocks of MC_BT threads: one block per row was latency-bound
 * (the profile: the norms 15 µs and the combine 29 µs per MoE block on the 26B-A4B, each thread
 * walking 11 values, the combine's 9 dependent loads per value). Thread g of the cluster owns
 * values g, g + MC_CL·MC_BT, … kept in registers between the passes; the sums of squares are
 * reduced per block, pushed into every block's shared memory, and added in rank order after
 * one cluster barrier (residual_norm.cu's scheme: every block holds the same total). The
 * rounding points are moe.cu's; only the float32 sums of squares are grouped otherwise.
 * All shared state is dynamic, so the host emulation runs a cluster's blocks side by side
 * (tests/gpu/moe_cluster_emulate.cpp). */
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "moe_kernels.h"
#include "prep_store.cuh"
#include "qkv_post.cuh" /* ysum */

namespace cg = cooperative_groups;

#define MC_CL 8
#define MC_BT 256
#define MC_VPT 4 /* values per thread: H ≤ MC_CL · MC_BT · MC_VPT = 8192 */

struct mc_shared {
  float part[2 * 32]; /* block_reduce_n_in<2>'s scratch */
  float sums[2][MC_CL];
  float vals[2][MC_BT / 32][32]; /* the norms' preps: each warp's fp16 values (router, experts) */
  float slice[2][MC_BT / 32];    /* and their slice sums */
};

/* The cluster's totals of v[0], v[1] (this thread's shares), in every thread. The kernel
 * arrived at the cluster barrier on entry; its wait here lets this block write into the others'
 * shared memory only once they have all started. */
__device__ __forceinline__ void mc_total2(cg::cluster_group &cl, mc_shared *sh, float (&v)[2]) {
  block_reduce_n_in<2>(v, ck_op_add(), 0.0f, sh->part);
  const unsigned rank = cl.block_rank();
  cl.barrier_wait();
  if (threadIdx.x < MC_CL) {
    *cl.map_shared_rank(&sh->sums[0][rank], threadIdx.x) = v[0];
    *cl.map_shared_rank(&sh->sums[1][rank], threadIdx.x) = v[1];
  }
  cl.sync();
  v[0] = v[1] = 0.0f;
  for (unsigned r = 0; r < MC_CL; r++) v[0] += sh->sums[0][r], v[1] += sh->sums[1][r];
}

/* prep value i (bf16 ov) as prep_store writes it; its fp16 value for the group sum */
__device__ __forceinline__ float mc_prep_value(const dk_moe_prep1 &p, int i, uint16_t ov) {
  prep_store(p.xp, i, ov, p.e, p.xmode);
  return p.xmode == 2 ? 0.0f : ck_f16_to_f32(ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ov), p.e)));
}

/* ck_xprep's group sums: the group of gs/32 adjacent slices whose first is slice S (warp w of
 * the block; the others the next warps), added in xfill's shuffle tree (lanes S, S^o for
 * o = per/2 … 1); the other rows' sums zero. Called by the lane 0 of every warp of live slices. */
__device__ __forceinline__ void mc_group_sums(const dk_moe_prep1 &p, const float *slice, int w, int S) {
  if (p.gs <= 0) return;
  const int per = p.gs / 32;
  if (S % per) return;
  float t[8];
  for (int j = 0; j < per; j++) t[j] = slice[w + j];
  for (int o = per >> 1; o > 0; o >>= 1) {
    float u[8];
    for (int j = 0; j < per; j++) u[j] = t[j] + t[j ^ o];
    for (int j = 0; j < per; j++) t[j] = u[j];
  }
  float *g = p.xs + (S / per) * 8;
  g[0] = t[0];
#pragma unroll
  for (int n = 1; n < 8; n++) g[n] = 0.0f;
}

/* One row: xr = bf16 rmsnorm(h, w_router), xe = bf16 rmsnorm(h, w_pre2) (moe.cu's rounding
 * points), block 0 zeroing zero[0 … nzero); with preps, each value's preps (xfill's conversion)
 * and the group sums of the slices, in xfill's order. (Each of 88 threads making a whole slice
 * in turn took ~10 us per MoE layer.) */
__global__ void __cluster_dims__(MC_CL, 1, 1) __launch_bounds__(MC_BT)
    moe_norms_cl_kernel(const float *h, const float *w_router, const float *w_pre2, int H, float eps, uint16_t *xr,
                        uint16_t *xe, float *zero, int nzero, dk_moe_preps pp, int with_preps) {
  cg::cluster_group cl = cg::this_cluster();
  CK_DYNAMIC_SHARED(float, smf);
  mc_shared *sh = reinterpret_cast<mc_shared *>(smf);
  cl.barrier_arrive(); /* waited for before the first write into another block */
  const int rank = (int)cl.block_rank(), g = rank * MC_BT + (int)threadIdx.x, stride = MC_CL * MC_BT;
  ck_pdl_enter();
  float hv[MC_VPT], v[2] = {0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < MC_VPT; k++) {
    const int i = g + k * stride;
    hv[k] = i < H ? h[i] : 0.0f;
    v[0] = fmaf(hv[k], hv[k], v[0]);
  }
  mc_total2(cl, sh, v);
  const float r = 1.0f / sqrtf(v[0] / (float)H + eps);
  if (rank == 0)
    for (int i = threadIdx.x; i < nzero; i += blockDim.x) zero[i] = 0.0f;
  if (!with_preps) {
#pragma unroll
    for (int k = 0; k < MC_VPT; k++) {
      const int i = g + k * stride;
      if (i >= H) break;
      const float hn = rb(__fmul_rn(hv[k], r));
      xr[i] = ck_f32_to_bf16(__fmul_rn(hn, w_router[i]));
      xe[i] = ck_f32_to_bf16(__fmul_rn(hn, w_pre2[i]));
    }
    return;
  }
  if (rank == 0 && threadIdx.x < 8) {
    pp.router.xexp[threadIdx.x] = threadIdx.x == 0 ? pp.router.e : 0;
    pp.experts.xexp[threadIdx.x] = threadIdx.x == 0 ? pp.experts.e : 0;
  }
  /* every thread its own values, as without preps: warp w of a block holds one 32-slice per pass
   * (slice S = i / 32), whose sum lane 0 adds in xfill's order; a group's slices are adjacent
   * warps of the block (mc_group_sums) */
  const int nsl = H / 32, warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < MC_VPT; k++) {
    const int i = g + k * stride;
    const bool live = i / 32 < nsl; /* (the same for the whole warp) */
    float fr = 0.0f, fe = 0.0f;
    if (live) {
      const float hn = rb(__fmul_rn(hv[k], r));
      const uint16_t a = ck_f32_to_bf16(__fmul_rn(hn, w_router[i])), b = ck_f32_to_bf16(__fmul_rn(hn, w_pre2[i]));
      xr[i] = a;
      xe[i] = b;
      fr = mc_prep_value(pp.router, i, a);
      fe = mc_prep_value(pp.experts, i, b);
    }
    if (pp.router.gs <= 0 && pp.experts.gs <= 0) continue;
    sh->vals[0][warp][lane] = fr;
    sh->vals[1][warp][lane] = fe;
    __syncwarp();
    if (lane == 0) /* (a slice past H sums to zero) */
      for (int q = 0; q < 2; q++) {
        float sum = 0.0f;
        for (int l = 0; l < 32; l++) sum += sh->vals[q][warp][l];
        sh->slice[q][warp] = sum;
      }
    __syncthreads();
    if (lane == 0 && live) {
      mc_group_sums(pp.router, sh->slice[0], warp, i / 32);
      mc_group_sums(pp.experts, sh->slice[1], warp, i / 32);
    }
    __syncthreads(); /* (the next pass reuses vals and slice) */
  }
}

/* One row: out = bf16(rmsnorm(bf16 ys, w_post1) + rmsnorm(bf16(Σ_k bf16(wts[k] · bf16 y_k)),
 * w_post2)), y_k at y + k·ldy (moe.cu's moe_combine_kernel for T = 1). */
__global__ void __cluster_dims__(MC_CL, 1, 1) __launch_bounds__(MC_BT)
    moe_combine_cl_kernel(const float *ys, int ks, int64_t kstride, const float *w_post1, const float *y, int64_t ldy,
                          const float *wts, const float *w_post2, int K, int H, float eps, float *out) {
  cg::cluster_group cl = cg::this_cluster();
  CK_DYNAMIC_SHARED(float, smf);
  mc_shared *sh = reinterpret_cast<mc_shared *>(smf);
  cl.barrier_arrive();
  const int rank = (int)cl.block_rank(), g = rank * MC_BT + (int)threadIdx.x, stride = MC_CL * MC_BT;
  ck_pdl_enter();
  float a[MC_VPT], e[MC_VPT], v[2] = {0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < MC_VPT; k++) {
    const int i = g + k * stride;
    a[k] = e[k] = 0.0f;
    if (i >= H) continue;
    a[k] = rb(ysum(ys + i, ks, kstride));
    float acc = 0.0f;
    for (int j = 0; j < K; j++) acc += rb(__fmul_rn(wts[j], rb(y[j * ldy + i])));
    e[k] = rb(acc);
    v[0] = fmaf(a[k], a[k], v[0]);
    v[1] = fmaf(e[k], e[k], v[1]);
  }
  mc_total2(cl, sh, v);
  const float r1 = 1.0f / sqrtf(v[0] / (float)H + eps), r2 = 1.0f / sqrtf(v[1] / (float)H + eps);
#pragma unroll
  for (int k = 0; k < MC_VPT; k++) {
    const int i = g + k * stride;
    if (i >= H) break;
    const float h1 = rb(__fmul_rn(rb(__fmul_rn(a[k], r1)), w_post1[i]));
    out[i] = rb(__fadd_rn(h1, rb(__fmul_rn(rb(__fmul_rn(e[k], r2)), w_post2[i]))));
  }
}

extern "C" int dk_moe_fits_cluster(int H) { return H >= 1 && H <= MC_CL * MC_BT * MC_VPT; }

extern "C" int dk_moe_norms_cluster(const float *h, const float *w_router, const float *w_pre2, int H, float eps,
                                    uint16_t *xr, uint16_t *xe, float *zero, int nzero, const dk_moe_preps *preps,
                                    void *stream) {
  if (!dk_moe_fits_cluster(H)) return (int)cudaErrorInvalidValue;
  /* a group is at most the 8 slices of a block's pass */
  for (int q = 0; preps && q < 2; q++) {
    const int gs = q ? preps->experts.gs : preps->router.gs;
    if (gs > 0 && (gs > 256 || gs % 32 || ((gs / 32) & (gs / 32 - 1)))) return (int)cudaErrorInvalidValue;
  }
  const dk_moe_preps none = {};
  return (int)ck_launch(moe_norms_cl_kernel, MC_CL, MC_BT, sizeof(mc_shared), (cudaStream_t)stream, h, w_router, w_pre2,
                        H, eps, xr, xe, zero, nzero, preps ? *preps : none, preps ? 1 : 0);
}

extern "C" int dk_moe_combine_cluster(const float *ys, int ks, int64_t kstride, const float *w_post1, const float *y,
                                      int64_t ldy, const float *wts, const float *w_post2, int top_k, int H, float eps,
                                      float *out, void *stream) {
  if (!dk_moe_fits_cluster(H)) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(moe_combine_cl_kernel, MC_CL, MC_BT, sizeof(mc_shared), (cudaStream_t)stream, ys, ks, kstride,
                        w_post1, y, ldy, wts, w_post2, top_k, H, eps, out);
}

CK_TIMELINE_SETTER(ck_tl_moe_cluster)
