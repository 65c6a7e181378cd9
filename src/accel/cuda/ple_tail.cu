/* A per-layer-embedding layer's tail in one launch (dk_ple_tail; Gemma 4 E2B / E4B): the FFN
 * residual, the per-layer input gate product, its GeGLU with the layer's per-layer input, the
 * projection product, the residual with post_per_layer_input_norm and the layer scalar, and the
 * next layer's input norm with its product's activation prep. The unfused chain is five
 * launches (two residual norms, two mat-vecs and the GeGLU); each launch boundary of a decode
 * step's chain costs ~2 us (docs/DECODE.md), against products of 0.3 MB each.
 *
 * One cluster of PT_CL blocks. Block b owns the hidden values [b·H/PT_CL, (b+1)·H/PT_CL): the
 * values it normalizes (kept in registers between the passes) and the rows it computes of the
 * projection; it also computes its share of the gate's rows (pt_gate_tiles). Both products'
 * slices of this block are bulk-copied into its shared memory before the wait for the
 * predecessor, so they stream while the FFN's down product runs. Five exchanges go through
 * distributed shared memory — the three norms' sums, bf16 h after the FFN residual (the gate's
 * x) and the GeGLU's values, each with its maxima — every block pushing its values into every
 * block, then one cluster barrier, then local reads; row sums are added in rank order
 * (residual_norm.cu's scheme: every block holds the same totals, deterministic). Every block
 * making the FFN residual of the whole row itself instead (no exchange for it, its loads of y
 * one after another) took 14.3 us a layer against 13.1 (E4B, H100).
 *
 * The products are the mat-vec's (qmv_tc.cuh: the same fragment decode, mma and scale epilogue
 * per unit, x in the same fp16·2^e or bf16 prep), with the k range split over 4 warps per gate
 * tile and whole projection tiles per warp; their float32 sums run in another order than the
 * one-row kernel's (docs/DECODE.md gives the exactness class). The rounding points are the
 * unfused chain's (residual_norm.cu, decode.cu's ple_gate_kernel). All shared state is dynamic,
 * so the host emulation runs a cluster's blocks side by side (tests/gpu/ple_tail_emulate.cpp). */
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "decode_kernels.h"
#include "prep_store.cuh"
#include "qkv_post.cuh" /* ysum */
#include "qmv_tc.cuh"

namespace cg = cooperative_groups;

#define PT_CL 8
#define PT_BT 256
#define PT_W (PT_BT / 32)
#define PT_VPT 4 /* hidden values per thread: H ≤ PT_CL · PT_BT · PT_VPT */
#define PT_MAXP 8 /* prep blocks of the next product's maxima (dk_ple_tail_args pmax) */

/* The fixed part of the shared memory (the products' slices and x follow it). */
struct pt_shared {
  uint64_t mbar[2];         /* the gate's and the projection's slices */
  float part[32];           /* block reductions */
  float sums[3][PT_CL];     /* the three norms' sums of squares, an inbox per block */
  float bmax[3][PT_CL];     /* block maxima: the gate's x, the projection's x, the next x */
  float red[PT_W][32][4];   /* the gate's warp partials */
  unsigned pm[PT_MAXP];     /* this block's maxima per prep block (float bits), and their inboxes */
  float pin[PT_CL][PT_MAXP];
  int xe;
};

/* The cluster's total of v over every block (slot k: each exchange its own inboxes, so a fast
 * block never writes into a slot a slow one still reads). */
__device__ __forceinline__ float pt_total(cg::cluster_group &cl, pt_shared *sh, int k, float v) {
  float b[1] = {v};
  block_reduce_n_in<1>(b, ck_op_add(), 0.0f, sh->part);
  if (threadIdx.x < PT_CL) *cl.map_shared_rank(&sh->sums[k][cl.block_rank()], threadIdx.x) = b[0];
  cl.sync();
  float t = 0.0f;
  for (int r = 0; r < PT_CL; r++) t += sh->sums[k][r];
  return t;
}

/* This block's maximum of m into slot k of every block (seen after the caller's next cluster
 * barrier). */
__device__ __forceinline__ void pt_push_max(cg::cluster_group &cl, pt_shared *sh, int k, float m) {
  float b[1] = {m};
  block_reduce_n_in<1>(b, ck_op_max(), 0.0f, sh->part);
  if (threadIdx.x < PT_CL) *cl.map_shared_rank(&sh->bmax[k][cl.block_rank()], threadIdx.x) = b[0];
}
__device__ __forceinline__ float pt_max(const pt_shared *sh, int k) {
  float m = 0.0f;
  for (int r = 0; r < PT_CL; r++) m = fmaxf(m, sh->bmax[k][r]);
  return m;
}

/* pmax[b] = max |xb| over prep block b (a.pblock values) from every block's values ov: each
 * block's maxima per prep block pushed into every block, one cluster barrier, block 0 writes. */
__device__ __forceinline__ void pt_block_maxima(cg::cluster_group &cl, pt_shared *sh, const dk_ple_tail_args &a,
                                                const uint16_t (&ov)[PT_VPT], int HB, int rank) {
  const int nb = (a.H + a.pblock - 1) / a.pblock;
  if ((int)threadIdx.x < PT_MAXP) sh->pm[threadIdx.x] = 0u;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = threadIdx.x + k * PT_BT;
    if (j < HB) atomicMax(&sh->pm[(rank * HB + j) / a.pblock], __float_as_uint(fabsf(ck_bf16_to_f32(ov[k]))));
  }
  __syncthreads();
  if ((int)threadIdx.x < nb)
    for (int q = 0; q < PT_CL; q++) *cl.map_shared_rank(&sh->pin[rank][threadIdx.x], q) = __uint_as_float(sh->pm[threadIdx.x]);
  cl.sync();
  if (rank == 0 && (int)threadIdx.x < nb) {
    float m = 0.0f;
    for (int q = 0; q < PT_CL; q++) m = fmaxf(m, sh->pin[q][threadIdx.x]);
    a.pmax[threadIdx.x] = m;
  }
}

/* The products' shape per format and group size (qmv_tc.cuh's Shape). The x prep: 2 = bf16 as
 * is (dense bf16), else fp16 · 2^e (affine formats also take its group sums). */
template <int FMT, int GS_> struct PtFmt {
  static constexpr int GS = GS_;
  typedef Shape<FMT, GS> S;
  static constexpr int XMODE = FMT == CK_DBF16 ? 2 : 1;
  static constexpr int YSH = FMT == CK_NVFP4 ? 14 - CK_NV_SCALE_LOG2 : 0; /* the decode's and scales' powers of 2 */
};

/* Sums of one 16-row tile over units [u0, u1) in steps of du: the slice's codes wsm and scales
 * ssm (unit-major, as repacked), x in fragment order xs (row 0 only: lanes g > 0 feed zeros)
 * and, for affine formats, its group sums xsum ([group][8], row 0 in the first). Lane (g, 0)
 * ends holding rows g and g + 8 in r[0] and r[2]. */
template <int FMT, int GS, bool F16>
__device__ __forceinline__ void pt_tile(const uint8_t *wsm, const uint8_t *ssm, const uint4 *xs, const float *xsum,
                                        int u0, int u1, int du, float (&r)[4]) {
  typedef typename PtFmt<FMT, GS>::S S;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  constexpr int XSTEP = (S::UK / 32) * 4, sstride = S::AFF ? 8 : ck_fp_scale_bytes(FMT);
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, tot[4] = {0.f, 0.f, 0.f, 0.f};
  for (int u = u0; u < u1; u += du) {
    UnitRegs<FMT, GS> q;
    const uint4 *w = reinterpret_cast<const uint4 *>(wsm + (size_t)u * S::UNIT_W) + lane;
#pragma unroll
    for (int c = 0; c < S::CPU; c++) q.w[c] = w[c * 32];
#pragma unroll
    for (int h = 0; h < S::MPU / 2; h++) q.x[h] = g == 0 ? xs[u * XSTEP + t + h * 4] : make_uint4(0, 0, 0, 0);
    const uint8_t *sc = ssm + (size_t)u * S::UNIT_S + g * sstride;
    if (S::AFF) {
#pragma unroll
      for (int gl = 0; gl < S::GPU; gl++) {
        q.sc[gl] = reinterpret_cast<const uint2 *>(sc)[gl * 8];
        q.xs[gl] = reinterpret_cast<const float2 *>(xsum)[(u * S::GPU + gl) * 4 + t];
      }
    } else if (FMT == CK_NVFP4) q.sc[0] = *reinterpret_cast<const uint2 *>(sc);
    else if (FMT == CK_MXFP4) q.sc[0].x = *reinterpret_cast<const uint32_t *>(sc);
    else if (FMT == CK_MXFP8) q.sc[0].x = *reinterpret_cast<const uint16_t *>(sc);
    compute_unit<FMT, GS, F16>(q, acc, tot);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) r[i] = S::POST ? tot[i] : acc[i];
}

/* The gate tiles of block `rank`: tiles [t0, t0 + n) of the P / 16 — a whole share of them, or
 * with fewer tiles than blocks one each for the first blocks. */
__host__ __device__ inline void pt_gate_tiles(int P, int rank, int &t0, int &n) {
  const int tiles = P / 16;
  if (tiles >= PT_CL) n = tiles / PT_CL, t0 = rank * n;
  else n = rank < tiles ? 1 : 0, t0 = rank;
}

/* Bytes of the products' slices in a block, and the offsets of what follows them. */
struct pt_layout {
  int gw, gs, pw, ps, xg, xbf, xpp, gbf, out, xsg, xsp, total;
};
template <int FMT, int GS> __host__ __device__ inline pt_layout pt_layout_of(int H, int P) {
  typedef typename PtFmt<FMT, GS>::S S;
  int t0 = 0, tg = 0;
  pt_gate_tiles(P, 0, t0, tg);
  const int tp = H / 16 / PT_CL, ug = H / S::UK, up = P / S::UK;
  pt_layout l;
  int o = (int)((sizeof(pt_shared) + 127) / 128 * 128);
  l.gw = o, o += tg * ug * S::UNIT_W;
  l.gs = o, o += tg * ug * S::UNIT_S;
  l.pw = o, o += tp * up * S::UNIT_W;
  l.ps = o, o += tp * up * S::UNIT_S;
  l.xg = o, o += H * 2;   /* the gate's x prep */
  l.xbf = o, o += H * 2;  /* bf16 h after the FFN residual, from every block */
  l.xpp = o, o += P * 2;  /* the projection's x prep */
  l.gbf = o, o += P * 2;  /* bf16 GeGLU from every block */
  l.out = o, o += H / PT_CL * 4; /* this block's projection rows */
  constexpr int G = GS > 0 ? GS : 1;
  l.xsg = o, o += S::AFF ? H / G * 32 : 0; /* the group sums of the two preps (affine) */
  l.xsp = o, o += S::AFF ? P / G * 32 : 0;
  l.total = o;
  return l;
}

/* The group sums of an affine product's x prep xp of n values (prep_store's order) into xs
 * ([group][8]: row 0, the other rows zero). */
template <int GS_>
__device__ __forceinline__ void pt_group_sums(const uint16_t *xp, int n, float *xs) {
  constexpr int GS = GS_ > 0 ? GS_ : 1; /* (instantiated for every format, called for affine ones) */
  for (int grp = threadIdx.x; grp < n / GS; grp += PT_BT) {
    float sum = 0.0f;
    for (int k = 0; k < GS; k++) {
      const int i = grp * GS + k, kk = i & 31, rr = kk & 15;
      sum += ck_f16_to_f32(xp[((i >> 5) * 4 + ((rr & 7) >> 1)) * 8 + (kk >> 4) * 4 + (rr >> 3) * 2 + (rr & 1)]);
    }
    xs[grp * 8] = sum;
#pragma unroll
    for (int r = 1; r < 8; r++) xs[grp * 8 + r] = 0.0f;
  }
}

/* The n values v (exchanged, in shared memory) as a product's x: the prep with the exponent of
 * exchange k's maximum into xp, with (affine) the group sums into xs. Returns the exponent; ends
 * with the block in step. */
template <int XM, int GS, bool AFF>
__device__ __forceinline__ int pt_prep(const pt_shared *sh, int k, const uint16_t *v, int n, uint16_t *xp, float *xs) {
  const int e = prep_exp(pt_max(sh, k), XM);
  for (int i = threadIdx.x; i < n; i += PT_BT) prep_store(xp, i, v[i], e, XM);
  if (AFF) {
    __syncthreads();
    pt_group_sums<GS>(xp, n, xs);
  }
  __syncthreads();
  return e;
}

template <int FMT, int GS, bool F16>
__global__ void __cluster_dims__(PT_CL, 1, 1) __launch_bounds__(PT_BT) ple_tail_kernel(dk_ple_tail_args a) {
  typedef typename PtFmt<FMT, GS>::S S;
  constexpr int XM = PtFmt<FMT, GS>::XMODE, YSH = PtFmt<FMT, GS>::YSH;
  cg::cluster_group cl = cg::this_cluster();
  CK_DYNAMIC_SHARED(uint8_t, smem);
  pt_shared *sh = reinterpret_cast<pt_shared *>(smem);
  cl.barrier_arrive(); /* waited for before the first write into another block */
  const int H = a.H, P = a.P, HB = H / PT_CL, rank = (int)cl.block_rank();
  const int tp = HB / 16, ug = H / S::UK, up = P / S::UK;
  int t0 = 0, tg = 0;
  pt_gate_tiles(P, rank, t0, tg);
  const int PB = tg * 16, g0 = t0 * 16; /* this block's gate rows [g0, g0 + PB) */
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const pt_layout L = pt_layout_of<FMT, GS>(H, P);
  float *xsg = reinterpret_cast<float *>(smem + L.xsg), *xsp = reinterpret_cast<float *>(smem + L.xsp);
  uint16_t *xg = reinterpret_cast<uint16_t *>(smem + L.xg);
  uint16_t *xbf = reinterpret_cast<uint16_t *>(smem + L.xbf);
  uint16_t *xpp = reinterpret_cast<uint16_t *>(smem + L.xpp), *gbf = reinterpret_cast<uint16_t *>(smem + L.gbf);
  float *out = reinterpret_cast<float *>(smem + L.out);

  /* the slices never change: in flight before the wait */
  if (tid == 0) {
    mbar_init(&sh->mbar[0], 1);
    mbar_init(&sh->mbar[1], 1);
    mbar_init_fence();
    const uint32_t gwb = (uint32_t)(tg * ug * S::UNIT_W), gsb = (uint32_t)(tg * ug * S::UNIT_S);
    const uint32_t pwb = (uint32_t)(tp * up * S::UNIT_W), psb = (uint32_t)(tp * up * S::UNIT_S);
    mbar_expect(&sh->mbar[0], gwb + gsb);
    if (gwb) bulk_copy(smem + L.gw, a.gw + (size_t)t0 * ug * S::UNIT_W, gwb, &sh->mbar[0]);
    if (gsb) bulk_copy(smem + L.gs, a.gs + (size_t)t0 * ug * S::UNIT_S, gsb, &sh->mbar[0]);
    mbar_expect(&sh->mbar[1], pwb + psb);
    bulk_copy(smem + L.pw, a.pw + (size_t)rank * pwb, pwb, &sh->mbar[1]);
    if (psb) bulk_copy(smem + L.ps, a.ps + (size_t)rank * psb, psb, &sh->mbar[1]);
  }
  /* The norm weights, and h: written by the attention's residual norm, which completed before
   * the predecessor (the down product) passed its own wait. The per-layer inputs were written
   * at the step's start, before layer 0's tail (a full graph edge: enqueue_body). Every block
   * makes the whole FFN residual (the gate's x) itself: two cluster exchanges fewer. */
  float wpost[PT_VPT], wple[PT_VPT], wn[PT_VPT], hv[PT_VPT];
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT, i = rank * HB + j;
    const bool in = j < HB;
    wpost[k] = in ? a.w_post[i] : 0.0f;
    wple[k] = in ? a.w_ple[i] : 0.0f;
    wn[k] = in && a.w_next ? a.w_next[i] : 0.0f;
    hv[k] = in ? a.h[i] : 0.0f;
  }
  const float ple = tid < PB ? a.ple[g0 + tid] : 0.0f;
  __syncthreads(); /* the mbarriers' inits before any wait on them */
  ck_pdl_enter();

  /* 1. the FFN residual: h += bf16 rmsnorm(bf16 y, w_post); bf16 h, the gate's x, to every block */
  float yv0[PT_VPT], ss = 0.0f;
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT;
    yv0[k] = j < HB ? rb(ysum(a.y + rank * HB + j, a.ks, a.kstride)) : 0.0f;
    ss = fmaf(yv0[k], yv0[k], ss);
  }
  cl.barrier_wait(); /* (the first write into another block: every block has started) */
  float r = 1.0f / sqrtf(pt_total(cl, sh, 0, ss) / (float)H + a.eps);
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT;
    if (j >= HB) continue;
    hv[k] = rb(__fadd_rn(hv[k], rb(__fmul_rn(rb(__fmul_rn(yv0[k], r)), wpost[k]))));
    const uint16_t o = ck_f32_to_bf16(hv[k]);
    m = fmaxf(m, fabsf(ck_bf16_to_f32(o)));
    for (int q = 0; q < PT_CL; q++) *cl.map_shared_rank(&xbf[rank * HB + j], q) = o;
  }
  pt_push_max(cl, sh, 0, m);
  cl.sync();
  const int ge = pt_prep<XM, GS, S::AFF>(sh, 0, xbf, H, xg, xsg);

  /* 2. the gate: this block's rows, the warps of a tile splitting its units */
  mbar_wait(&sh->mbar[0], 0);
  if (tg) {
    const int wpt = PT_W / tg, tl = warp % tg, part = warp / tg;
    float rr[4];
    pt_tile<FMT, GS, F16>(smem + L.gw + (size_t)tl * ug * S::UNIT_W, smem + L.gs + (size_t)tl * ug * S::UNIT_S,
                          reinterpret_cast<const uint4 *>(xg), xsg, part, ug, wpt, rr);
#pragma unroll
    for (int i = 0; i < 4; i++) sh->red[warp][lane][i] = rr[i];
  }
  __syncthreads();
  m = 0.0f;
  if (tid < PB) { /* row tid of the block's gate rows: tile tid / 16, row rl of it */
    const int tl = tid / 16, rl = tid % 16, wpt = PT_W / tg;
    float s = 0.0f;
    for (int p = 0; p < wpt; p++) s += sh->red[p * tg + tl][(rl & 7) * 4][(rl >> 3) * 2];
    const uint16_t o = ck_geglu(ck_scale_pow2(s, YSH - ge), ple);
    m = fabsf(ck_bf16_to_f32(o));
    for (int q = 0; q < PT_CL; q++) *cl.map_shared_rank(&gbf[g0 + tid], q) = o;
  }
  pt_push_max(cl, sh, 1, m);
  cl.sync();

  /* 3. the projection: this block's H/PT_CL rows, whole tiles per warp */
  const int pe = pt_prep<XM, GS, S::AFF>(sh, 1, gbf, P, xpp, xsp);
  mbar_wait(&sh->mbar[1], 0);
  for (int tl = warp; tl < tp; tl += PT_W) {
    float rr[4];
    pt_tile<FMT, GS, F16>(smem + L.pw + (size_t)tl * up * S::UNIT_W, smem + L.ps + (size_t)tl * up * S::UNIT_S,
                          reinterpret_cast<const uint4 *>(xpp), xsp, 0, up, 1, rr);
    if ((lane & 3) == 0) {
      out[tl * 16 + (lane >> 2)] = ck_scale_pow2(rr[0], YSH - pe);
      out[tl * 16 + (lane >> 2) + 8] = ck_scale_pow2(rr[2], YSH - pe);
    }
  }
  __syncthreads();

  /* 4. the per-layer residual: h += bf16 rmsnorm(bf16 proj, w_ple), times the layer scalar */
  float yv[PT_VPT];
  ss = 0.0f;
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT;
    yv[k] = j < HB ? rb(out[j]) : 0.0f;
    ss = fmaf(yv[k], yv[k], ss);
  }
  r = 1.0f / sqrtf(pt_total(cl, sh, 1, ss) / (float)H + a.eps);
  ss = 0.0f;
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT;
    if (j >= HB) continue;
    float v = rb(__fadd_rn(hv[k], rb(__fmul_rn(rb(__fmul_rn(yv[k], r)), wple[k]))));
    if (a.use_scalar) v = rb(__fmul_rn(v, a.scalar));
    hv[k] = v;
    a.h[rank * HB + j] = v;
    ss = fmaf(v, v, ss);
  }

  /* 5. the next layer's input norm into bf16 xb, and its product's prep */
  r = 1.0f / sqrtf(pt_total(cl, sh, 2, ss) / (float)H + a.eps);
  uint16_t ov[PT_VPT];
  m = 0.0f;
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT, i = rank * HB + j;
    ov[k] = 0;
    if (j >= HB) continue;
    ov[k] = a.w_next ? ck_f32_to_bf16(__fmul_rn(rb(__fmul_rn(hv[k], r)), wn[k])) : ck_f32_to_bf16(hv[k]);
    a.xb[i] = ov[k];
    m = fmaxf(m, fabsf(ck_bf16_to_f32(ov[k])));
  }
  if (!a.xmode) { /* no prep: the block maxima the next product's prep kernel reads */
    pt_block_maxima(cl, sh, a, ov, HB, rank);
    return;
  }
  int e = a.xe_fixed;
  if (a.xe_fixed == DK_XE_ROWMAX) {
    pt_push_max(cl, sh, 2, m);
    cl.sync();
    e = prep_exp(pt_max(sh, 2), a.xmode);
  }
  if (rank == 0 && tid == 0) *a.xexp = e;
#pragma unroll
  for (int k = 0; k < PT_VPT; k++) {
    const int j = tid + k * PT_BT;
    if (j < HB) prep_store(a.xp, rank * HB + j, ov[k], e, a.xmode);
  }
}

typedef void (*pt_fn)(dk_ple_tail_args);

/* The kernel of a format, group size and scale type, and the shared memory it takes (0: none
 * serves them). */
template <int FMT, int GS, bool F16> static pt_fn pt_pick(int H, int P, int *bytes, int *uk) {
  *bytes = pt_layout_of<FMT, GS>(H, P).total;
  *uk = Shape<FMT, GS>::UK;
  return ple_tail_kernel<FMT, GS, F16>;
}
template <int FMT> static pt_fn pt_pick_affine(int gs, int f16, int H, int P, int *bytes, int *uk) {
  switch (gs) {
  case 32: return f16 ? pt_pick<FMT, 32, true>(H, P, bytes, uk) : pt_pick<FMT, 32, false>(H, P, bytes, uk);
  case 64: return f16 ? pt_pick<FMT, 64, true>(H, P, bytes, uk) : pt_pick<FMT, 64, false>(H, P, bytes, uk);
  case 128: return f16 ? pt_pick<FMT, 128, true>(H, P, bytes, uk) : pt_pick<FMT, 128, false>(H, P, bytes, uk);
  }
  return nullptr;
}
static pt_fn pt_kernel(int fmt, int gs, int f16, int H, int P, int *bytes) {
  int uk = 0;
  pt_fn k = nullptr;
  *bytes = 0;
  switch (fmt) {
  case CK_NVFP4: k = pt_pick<CK_NVFP4, 16, false>(H, P, bytes, &uk); break;
  case CK_MXFP4: k = pt_pick<CK_MXFP4, 32, false>(H, P, bytes, &uk); break;
  case CK_MXFP8: k = pt_pick<CK_MXFP8, 32, false>(H, P, bytes, &uk); break;
  case CK_DF16: k = pt_pick<CK_DF16, 0, false>(H, P, bytes, &uk); break;
  case CK_DBF16: k = pt_pick<CK_DBF16, 0, false>(H, P, bytes, &uk); break;
  case CK_AFF4: k = pt_pick_affine<CK_AFF4>(gs, f16, H, P, bytes, &uk); break;
  case CK_AFF8: k = pt_pick_affine<CK_AFF8>(gs, f16, H, P, bytes, &uk); break;
  }
  /* the shape rules: the gate's tiles a whole share per block dividing its warps (or fewer
   * tiles than blocks), H/PT_CL projection rows whole tiles, each a whole number of units */
  const int tiles = P / 16, tg = tiles >= PT_CL ? tiles / PT_CL : 1;
  if (!k || H < 16 * PT_CL || P < 16 || H % (16 * PT_CL) || P % 16 || (tiles > PT_CL && tiles % PT_CL) ||
      PT_W % tg || H % uk || P % uk || H / PT_CL > PT_BT * PT_VPT || *bytes > DK_PLE_TAIL_SMEM_MAX)
    return *bytes = 0, nullptr;
  return k;
}

extern "C" int dk_ple_tail_smem(int fmt, int gs, int f16, int H, int P) {
  int bytes = 0;
  pt_kernel(fmt, gs, f16, H, P, &bytes);
  return bytes;
}

extern "C" int dk_ple_tail(const dk_ple_tail_args *a, void *stream) {
  int smem = 0;
  const pt_fn k = pt_kernel(a->fmt, a->group, a->f16, a->H, a->P, &smem);
  if (!k || a->ks < 1 || a->xmode < 0 || a->xmode > 2 || (a->xmode && (!a->xp || !a->xexp)) ||
      (!a->xmode && (!a->pmax || a->pblock < 1 || (a->H + a->pblock - 1) / a->pblock > PT_MAXP)) ||
      (a->xe_fixed != DK_XE_ROWMAX && (a->xe_fixed < -126 || a->xe_fixed > 127)))
    return (int)cudaErrorInvalidValue;
  if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) return (int)e;
  return (int)ck_launch(k, PT_CL, PT_BT, (size_t)smem, (cudaStream_t)stream, *a);
}

CK_TIMELINE_SETTER(ck_tl_ple_tail)
