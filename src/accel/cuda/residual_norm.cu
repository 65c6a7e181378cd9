/* The decoder's residual norm (dk_residual_norm): post-norm of a product's output, residual
 * add, layer scalar, then the next norm into bf16 x and the next mat-vec's activation prep, one
 * row over a cluster of RN_CL blocks of RN_BT threads (one block alone was latency-bound at
 * ~16 us). The reference path's rounding points (docs/NUMERICS.md): bf16 after every op,
 * float32 reductions.
 *
 * Thread g of the cluster owns values g, g + RN_CL·RN_BT, … (at most RN_VPT), kept in registers
 * between the passes. The row sums are reduced per block, then every block adds the RN_CL block
 * sums in rank order, so every block holds the same total (deterministic). Each block pushes
 * its sum into every block's shared memory, then one cluster barrier, then local reads: no
 * remote read, and no barrier at the end (nothing remote is touched after the last one) —
 * tg128 +0.5 % against each block pulling the others' sums, the same bits.
 * All shared state is in dynamic shared memory, so that the host emulation can run a cluster's
 * blocks side by side (tests/gpu/residual_norm_emulate.cpp). One pass of the cluster covers
 * RN_CL·RN_BT values, which is the activation prep's pblock: the pass's max|xb| is pmax of that
 * pblock. A grid of several rows (the batched step, dk_residual_norm_rows) gives each row a
 * cluster of its own (blockIdx.y): its bits are those of the same row alone. */
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "ck_wgmma.cuh" /* wg_off, wg_rows_n */
#include "decode_kernels.h"
#include "prep_store.cuh"
#include "qkv_post.cuh" /* ysum */

namespace cg = cooperative_groups;

#ifndef RN_CL
#define RN_CL 8
#endif
#define RN_BT 256
#define RN_VPT 8

/* the dynamic shared memory: the block reduction's scratch [32], the two sums' inboxes
 * [2][RN_CL], the pass maxima [RN_VPT], their inbox [RN_CL][RN_VPT], the warp maxima [RN_VPT][RN_BT / 32], the exponent */
struct rn_shared {
  float part[32], sums[2][RN_CL], kmax[RN_VPT], kin[RN_CL][RN_VPT], wmax[RN_VPT][RN_BT / 32];
  int xe;
};

/* the cluster's total of v (this block's share). first: the kernel's first exchange — a block
 * may write into another's shared memory only once that one has started, which the barrier the
 * kernel arrived at on entry ensures */
__device__ __forceinline__ float cluster_total(cg::cluster_group &cl, rn_shared *sh, int k, float v, bool first) {
  float b[1] = {v};
  block_reduce_n_in<1>(b, ck_op_add(), 0.0f, sh->part);
  const unsigned rank = cl.block_rank();
  float t = 0.0f;
  if (first) cl.barrier_wait();
  if (threadIdx.x < RN_CL) *cl.map_shared_rank(&sh->sums[k][rank], threadIdx.x) = b[0];
  cl.sync();
  for (unsigned r = 0; r < RN_CL; r++) t += sh->sums[k][r];
  return t;
}

__global__ void __cluster_dims__(RN_CL, 1, 1) __launch_bounds__(RN_BT)
    residual_norm_kernel(const float *y, int ks, int64_t kstride, int64_t ldy, const float *w_post, float *h,
                         int use_scalar, float scalar, const float *w_next, uint16_t *xb, int H, float eps,
                         float *pmax, int pblock, uint16_t *xp, int *xexp, int xmode, int xe_fixed, float *zero,
                         int nzero) {
  cg::cluster_group cl = cg::this_cluster();
  /* row blockIdx.y (rows H apart in h, xb and the prep; ldy apart in y) */
  const int64_t row = blockIdx.y;
  /* xmode 3 (the rows of the warpgroup product): row r's values at wg_off of its launch of 64
   * rows, each launch's n = wg_rows_n(its rows) wide, as ck_xprep_wg lays them out */
  const int wg = xmode == 3, wg_left = (int)gridDim.y - (int)(row & ~63);
  const int wg_n = wg_rows_n(wg_left < 64 ? wg_left : 64);
  if (row) {
    if (y) y += row * ldy;
    h += row * H;
    xb += row * H;
    if (xp) xp += wg ? (row >> 6) * 64 * H : row * H;
    if (xexp) xexp += row;
  }
  /* value i of this row's prep (fp16 x·2^e, or bf16 as it is) */
  auto store = [&](int i, uint16_t ov, int e) {
    if (wg)
      *reinterpret_cast<uint16_t *>(reinterpret_cast<uint8_t *>(xp) + wg_off(wg_n, (int)(row & 63), i)) =
          ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ov), e));
    else
      prep_store(xp, i, ov, e, xmode);
  };
  cl.barrier_arrive(); /* waited for before the first write into another block */
  CK_DYNAMIC_SHARED(rn_shared, sh);
  const int g = (int)cl.block_rank() * RN_BT + threadIdx.x, step = RN_CL * RN_BT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  /* The loads that do not depend on the predecessor are issued before its wait: this kernel
   * runs while the next mat-vec's resident blocks stream their first weight stages, and a
   * DRAM read queued behind them costs several us per dependent round trip (in-graph
   * timeline). The norm weights never change. With y, the predecessor is the mat-vec writing
   * y, and h was written by a kernel that completed before that mat-vec passed its own wait;
   * without y (the input norm) the predecessor writes h: then h is read after the wait. */
  float wp[RN_VPT], wn[RN_VPT], hv[RN_VPT];
  const int early = !y; /* h read after the wait */
#pragma unroll
  for (int k = 0; k < RN_VPT; k++) {
    int i = g + k * step;
    wp[k] = y && i < H ? w_post[i] : 0.0f;
    wn[k] = i < H && w_next ? w_next[i] : 0.0f;
    hv[k] = !early && i < H ? h[i] : 0.0f;
  }
  ck_pdl_enter();
  /* a later product's epilogue maxima (ck_qmv_geglu's amax): their last reader, a kernel before
   * this one's predecessor, has completed */
  if (zero && cl.block_rank() == 0)
    for (int i = threadIdx.x; i < nzero; i += RN_BT) zero[i] = 0.0f;
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
    ss = cluster_total(cl, sh, 0, ss, true);
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
  ss = cluster_total(cl, sh, 1, ss, !y);
  float r = 1.0f / sqrtf(ss / (float)H + eps);
  uint16_t ov[RN_VPT];
  /* the prep with an exponent given by the caller: no maxima, so no third exchange */
  const bool fixed = xmode && xe_fixed != DK_XE_ROWMAX && !pmax;
#pragma unroll
  for (int k = 0; k < RN_VPT; k++) {
    int i = g + k * step;
    float m = 0.0f;
    ov[k] = 0;
    if (i < H) {
      /* without w_next: h itself (the input of a product that takes the residual unnormed) */
      uint16_t o = w_next ? ck_f32_to_bf16(__fmul_rn(rb(__fmul_rn(hv[k], r)), wn[k])) : ck_f32_to_bf16(hv[k]);
      xb[i] = o;
      ov[k] = o;
      m = fabsf(ck_bf16_to_f32(o));
    }
    if (fixed) continue;
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) sh->wmax[k][warp] = m;
  }
  if (fixed) {
    if (cl.block_rank() == 0 && threadIdx.x == 0) *xexp = xe_fixed;
#pragma unroll
    for (int k = 0; k < RN_VPT; k++) {
      int i = g + k * step;
      if (i < H) store(i, ov[k], xe_fixed);
    }
    return;
  }
  if (!pmax && !xmode) return;
  __syncthreads();
  const unsigned rank = cl.block_rank();
  if (threadIdx.x < RN_VPT) {
    float m = 0.0f;
    for (int w = 0; w < RN_BT / 32; w++) m = fmaxf(m, sh->wmax[threadIdx.x][w]);
    sh->kmax[threadIdx.x] = m;
    for (unsigned q = 0; q < RN_CL; q++) cl.map_shared_rank(&sh->kin[rank][0], q)[threadIdx.x] = m;
  }
  cl.sync();
  /* pass k's maximum in block q: its inbox row */
  auto kmax_of = [&](unsigned q, int k) -> float { return sh->kin[q][k]; };
  int nblk = (H + pblock - 1) / pblock;
  if (pmax && rank == 0 && (int)threadIdx.x < nblk) {
    float m = 0.0f;
    for (unsigned q = 0; q < RN_CL; q++) m = fmaxf(m, kmax_of(q, (int)threadIdx.x));
    pmax[threadIdx.x] = m;
  }
  if (xmode) {
    /* the activation prep of the next mat-vec (what ck_xprep_premax computes from pmax, bit
     * for bit): the row maximum over every block's pass maxima, then x in fragment order */
    if (warp == 0) {
      float m = 0.0f;
      for (int v = lane; v < RN_CL * nblk; v += 32) m = fmaxf(m, kmax_of((unsigned)(v % RN_CL), v / RN_CL));
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      if (lane == 0) sh->xe = prep_exp(m, wg ? 1 : xmode);
    }
    __syncthreads();
    const int e = sh->xe;
    if (rank == 0 && threadIdx.x == 0) *xexp = e;
#pragma unroll
    for (int k = 0; k < RN_VPT; k++) {
      int i = g + k * step;
      if (i < H) store(i, ov[k], e);
    }
  }
}

extern "C" int dk_residual_norm(const float *y, int ks, int64_t kstride, const float *w_post, float *h, int use_scalar, float scalar,
                                const float *w_next, uint16_t *xb, int H, float eps, float *pmax, int pblock,
                                uint16_t *xp, int *xexp, int xmode, int xe_fixed, float *zero, int nzero, void *stream) {
  if (((pmax || xmode) && pblock != RN_CL * RN_BT) || H > RN_CL * RN_BT * RN_VPT || xmode < 0 || xmode > 2 ||
      (xmode && (!xp || !xexp || H % 32)) || nzero < 0 || (nzero && !zero) ||
      (xe_fixed != DK_XE_ROWMAX && (pmax || xe_fixed < -126 || xe_fixed > 127)))
    return (int)cudaErrorInvalidValue;
  return (int)ck_launch(residual_norm_kernel, RN_CL, RN_BT, sizeof(rn_shared), (cudaStream_t)stream, y, ks, kstride,
                        (int64_t)0, w_post, h, use_scalar, scalar, w_next, xb, H, eps, pmax, pblock, xp, xexp, xmode,
                        xe_fixed, zero, nzero);
}

extern "C" int dk_residual_norm_rows(const float *y, int ks, int64_t kstride, int64_t ldy, const float *w_post,
                                     float *h, int use_scalar, float scalar, const float *w_next, uint16_t *xb, int H,
                                     float eps, uint16_t *xp, int *xexp, int xmode, int T, void *stream) {
  if (T < 1 || T > 65535 || !dk_residual_norm_rows_fits(H) || xmode < 0 || xmode > 3 || (xmode && (!xp || !xexp)) ||
      (xmode == 3 && H % 64) || ks < 1)
    return (int)cudaErrorInvalidValue;
  return (int)ck_launch(residual_norm_kernel, dim3(RN_CL, (unsigned)T), RN_BT, sizeof(rn_shared), (cudaStream_t)stream,
                        y, ks, kstride, ldy, w_post, h, use_scalar, scalar, w_next, xb, H, eps, (float *)NULL,
                        RN_CL * RN_BT, xp, xexp, xmode, (int)DK_XE_ROWMAX, (float *)NULL, 0);
}

extern "C" int dk_residual_norm_rows_fits(int H) { return H >= 1 && H <= RN_CL * RN_BT * RN_VPT && H % 32 == 0; }

CK_TIMELINE_SETTER(ck_tl_residual_norm)
