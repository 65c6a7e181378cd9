/* Decode attention in one launch for short key ranges: a cluster of AC_CL blocks per KV head,
 * each block one contiguous share of the keys, the softmax's max and denominator and the p·v
 * partial sums exchanged through distributed shared memory instead of global scratch and two
 * more kernels (attention.cu's scores → pv → combine chain). The step's timeline shows that
 * chain costing 13 µs per sliding layer at depth 0 (6.3 + 4.9 + 2.0), mostly in its launch
 * boundaries; a sliding layer's ring (1024 keys on the 31B) is short
 * enough for one cluster at every depth.
 *
 * The reference path's rounding points, as in attention.cu: q·bf16(scale) → bf16, scores →
 * bf16 (the same per-key dot products and warp sums as the scores kernel), softmax in float32
 * with p = bf16(exp(s − M) / total), Σ p·v float32 → bf16. The denominator is summed over the
 * cluster's blocks (each block's Σ exp(s − m_b) scaled by exp(m_b − M)), and the p·v partials
 * in rank order: another grouping than the split path's, so a result may differ from it in a
 * last bit (the CPU-reference checks decide, as for the split shapes). */
#include <cooperative_groups.h>

#include <atomic>

#include "attention_common.cuh"
#include "prep_store.cuh"
#include "qmv_tc.cuh" /* the mbarrier and bulk-copy primitives */

namespace cg = cooperative_groups;

/* blocks per cluster (the host emulation, tests/gpu/attention_cluster_emulate.cpp, runs the
 * kernel as it is with any count) */
#ifndef AC_CL
#define AC_CL 8
#endif

/* The dynamic shared memory's floats: q [REP][hd] (then the block's p·v partials), the scores
 * and p [REP][kpb], the reductions' [REP][32], the statistics m, l, M, 1/total [4][REP], a
 * flag. */
__host__ __device__ constexpr size_t ac_smem_floats(int rep, int hd, int kpb) {
  return (size_t)rep * hd + (size_t)rep * kpb + (size_t)rep * 32 + 4 * (size_t)rep + 4;
}

/* After those floats, 16-byte aligned, the block's K rows [kpb][hd] and V rows [kpb][hd]
 * (bf16), then the mbarrier of their copies. */
__host__ __device__ constexpr size_t ac_stage_off(int rep, int hd, int kpb) {
  return (ac_smem_floats(rep, hd, kpb) * sizeof(float) + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t ac_smem_bytes(int rep, int hd, int kpb) {
  return ac_stage_off(rep, hd, kpb) + 2 * (size_t)kpb * hd * 2 + 16;
}

/* The keys [lo, hi) of block `rank` at position pos: an equal share of the live range. */
__device__ __forceinline__ void ac_range(int pos, int window, int rank, int cl, int *lo, int *hi) {
  const int first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int len = (pos - first + 1 + cl - 1) / cl;
  *lo = first + rank * len;
  *hi = *lo + len;
  if (*hi > pos + 1) *hi = pos + 1;
  if (*lo > *hi) *lo = *hi;
}

/* Where KV head g's V of a position sits in its row (kv_layout.h): the hd values at g·hd, or with
 * K from V the tail of its moved dims (vlen values; the others are in the K row). */
struct ac_vpart {
  int64_t off;
  int len;
};
__device__ __forceinline__ ac_vpart ac_vrow(dk_kv_layout kv, int nkv, int hd, int g) {
  if (kv.vr > 0) return {(int64_t)nkv * hd + (int64_t)2 * kv.vr * g, 2 * kv.vr};
  return {(int64_t)g * hd, hd};
}

/* Copies this block's K and V rows of keys [lo, hi) but `skip` into kst / vst (row j at j − lo,
 * rows hd apart; V's part of a row as ac_vrow says) with the bulk-copy engine, all issued at once,
 * completing on bar's first phase: the block's whole share in flight together, where loads from
 * the cache come in dependent rounds (8 score steps and 16 p·v batches per warp at 1024 keys).
 * Every thread of the block calls it. */
__device__ __forceinline__ void ac_stage_kv(const uint16_t *kc, const uint16_t *vc, dk_kv_layout kv, int nkv, int g,
                                            int hd, int window, int lo, int hi, int skip, uint16_t *kst,
                                            uint16_t *vst, uint64_t *bar) {
  const int parts = 2, n = hi - lo, rows = n - (skip >= lo && skip < hi ? 1 : 0);
  const ac_vpart vp = ac_vrow(kv, nkv, hd, g);
  const uint32_t k_bytes = (uint32_t)hd * 2, v_bytes = (uint32_t)vp.len * 2;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_init_fence();
    mbar_expect(bar, (uint32_t)rows * (k_bytes + v_bytes));
  }
  __syncthreads();
  for (int t = threadIdx.x; t < parts * n; t += blockDim.x) {
    const int u = t < n ? t : t - n, j = lo + u;
    if (j == skip) continue;
    const int64_t s = window > 0 ? j % ck_ring(window) : j;
    if (t < n)
      bulk_copy(kst + (int64_t)u * hd, kc + s * kv.ps + (int64_t)g * hd, k_bytes, bar);
    else
      bulk_copy(vst + (int64_t)u * hd, vc + s * kv.ps + vp.off, v_bytes, bar);
  }
}

/* grid (CL, nkv, rows), cluster (CL, 1, 1): block `rank` of KV head g takes keys
 * [first + rank·len, …) of the live range, len = ceil(count / CL) ≤ kpb: 4 keys per warp and
 * score step, and each thread DPT dims of every key's V row in p·v. The block's K and V rows
 * are staged in shared memory (ac_stage_kv). */
template <int REP, int DPT, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(AT_THREADS)
    cluster_attention_kernel(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd, dk_kv_layout kv,
                             float scale,
                             const int *pos_p, int window, int kpb, uint16_t *att, float *amax, int namax,
                             float *bmax, unsigned *count, dk_att_prep prep, dk_rows rw) {
  cg::cluster_group cl = cg::this_cluster();
  if (rw.slot) at_row_move(rw, (int)blockIdx.z, q, kc, vc, pos_p, att);
  CK_DYNAMIC_SHARED(float4, sm4);
  float *qs = reinterpret_cast<float *>(sm4), *ps = qs + REP * hd, *red = ps + REP * kpb;
  float *st_m = red + REP * 32, *st_l = st_m + REP, *gm = st_l + REP, *ginv = gm + REP;
  int *last = reinterpret_cast<int *>(ginv + REP);
  uint16_t *kst = reinterpret_cast<uint16_t *>(reinterpret_cast<unsigned char *>(sm4) + ac_stage_off(REP, hd, kpb));
  uint16_t *vst = kst + (int64_t)kpb * hd;
  uint64_t *bar = reinterpret_cast<uint64_t *>(vst + (int64_t)kpb * hd);
  const int rank = (int)blockIdx.x, g = (int)blockIdx.y;
  int lo, hi;
  /* the position is written by the step's first copy or the last step's end, long complete
   * (kernels wait before they trigger). The rows of earlier positions are complete too: this
   * kernel starts only once its predecessor (the q/k/v post step, which writes the newest row)
   * has passed its own wait. So the copies are issued before the wait. */
  {
    const int pos0 = *pos_p;
    ac_range(pos0, window, rank, CL, &lo, &hi);
    ac_stage_kv(kc, vc, kv, nkv, g, hd, window, lo, hi, pos0, kst, vst, bar);
  }
  ck_pdl_enter();
  const int pos = *pos_p;
  ac_range(pos, window, rank, CL, &lo, &hi);
  const int n = hi - lo; /* 0 for a block past the live keys: it still meets every cluster barrier */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5, nch = (hd + 255) / 256;
  auto slot = [&](int j) -> int64_t { return window > 0 ? j % ck_ring(window) : j; };
  const float bscale = rb(scale);
  /* the newest row, which the predecessor wrote: plain loads (no proxy fence needed) */
  if (pos >= lo && pos < hi && warp < 2) {
    const ac_vpart vp = ac_vrow(kv, nkv, hd, g);
    const uint4 *src = reinterpret_cast<const uint4 *>(warp ? vc + slot(pos) * kv.ps + vp.off
                                                            : kc + slot(pos) * kv.ps + (int64_t)g * hd);
    uint4 *dst = reinterpret_cast<uint4 *>((warp ? vst : kst) + (int64_t)(pos - lo) * hd);
    for (int i = lane; i < (warp ? vp.len : hd) / 8; i += 32) dst[i] = __ldcg(src + i);
  }
  mbar_wait(bar, 0);
  auto krow = [&](int j) -> const uint16_t * { return kst + (int64_t)(j - lo) * hd; };

  at_stage_q(q, g, REP, hd, scale, bscale, sm4); /* scaled and rounded as the scores kernel does */
  __syncthreads();
  /* scores: KPI keys per warp and step, completed by one transposed warp reduction (the
   * scores kernel's register path, its sums in its order) */
  constexpr int KPI = REP <= 8 ? 4 : 2, NP = KPI * REP;
  static_assert(NP <= 32, "one transposed warp sum per step");
  const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
  float mxl = -INFINITY;
  for (int j = lo + KPI * warp; j < hi; j += KPI * nw) {
    const uint16_t *kp[KPI];
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      const int jj = j + u < hi ? j + u : j;
      kp[u] = krow(jj);
    }
    float dk[KPI][REP];
    key_dots<REP, KPI, true>(kp, qs, hd, nch, lane, dk);
    /* the step's sums, rounded to bf16, into ps and the running max */
    const float v = at_step_score<REP, KPI>(dk, lane);
    if (j + pu < hi) {
      if (pw) ps[pr * kpb + (j + pu - lo)] = v;
      mxl = fmaxf(mxl, v);
    }
  }

  float mx[REP], sum[REP];
#pragma unroll
  for (int r = 0; r < REP; r++) mx[r] = r == pr ? mxl : -INFINITY;
  block_reduce_n_in<REP>(mx, ck_op_max(), -INFINITY, red); /* (its first barrier: the scores are in ps) */
#pragma unroll
  for (int r = 0; r < REP; r++) {
    sum[r] = 0.0f;
    if (mx[r] > -INFINITY)
      for (int j = threadIdx.x; j < n; j += blockDim.x) sum[r] += expf(__fsub_rn(ps[r * kpb + j], mx[r]));
  }
  block_reduce_n_in<REP>(sum, ck_op_add(), 0.0f, red);
  if (threadIdx.x == 0)
#pragma unroll
    for (int r = 0; r < REP; r++) st_m[r] = mx[r], st_l[r] = sum[r];
  cl.sync();
  /* each head's M and total over the cluster's blocks: a warp per head, lane b reading block b */
  for (int r = warp; r < REP; r += nw) {
    const float m = lane < CL ? *cl.map_shared_rank(&st_m[r], lane) : -INFINITY;
    const float l = lane < CL ? *cl.map_shared_rank(&st_l[r], lane) : 0.0f;
    const float M = warp_max(m);
    const float t = warp_sum(m > -INFINITY ? l * expf(__fsub_rn(m, M)) : 0.0f);
    if (lane == 0) gm[r] = M, ginv[r] = __fdiv_rn(1.0f, t);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < REP * n; i += blockDim.x) {
    const int r = i / n, jj = i - r * n;
    ps[r * kpb + jj] = rb(__fmul_rn(expf(__fsub_rn(ps[r * kpb + jj], gm[r])), ginv[r]));
  }
  __syncthreads();
  /* Σ p·v over the block's keys: thread t owns dims [t·DPT, t·DPT + DPT), eight keys' V loads
   * in flight before their products, each accumulator adding the keys in order */
  float acc[REP][DPT];
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;
  const int d0 = threadIdx.x * DPT;
  if (d0 < hd) {
    /* the thread's dims in the staged rows: vst's, or with K from V the K rows' where unmoved */
    const bool in_k = kv.vr > 0 && !dk_kv_moved(kv, hd, d0);
    const uint16_t *vsrc = in_k ? kst + d0 : vst + (dk_kv_vcol(kv, nkv, hd, g, d0) - ac_vrow(kv, nkv, hd, g).off);
    for (int j0 = 0; j0 < n; j0 += 8) {
      float v[8][DPT];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int j = lo + (j0 + u < n ? j0 + u : j0);
        load_n_shared(vsrc + (int64_t)(j - lo) * hd, DPT, v[u]);
      }
#pragma unroll
      for (int u = 0; u < 8; u++) {
        if (j0 + u >= n) break;
#pragma unroll
        for (int r = 0; r < REP; r++) {
          const float p = ps[r * kpb + j0 + u];
#pragma unroll
          for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p, v[u][i], acc[r][i]);
        }
      }
    }
    /* the partials where q was (every warp is past its last read of q) */
#pragma unroll
    for (int r = 0; r < REP; r++)
#pragma unroll
      for (int i = 0; i < DPT; i++) qs[r * hd + d0 + i] = acc[r][i];
  }
  cl.sync();
  /* block `rank` completes its share of the group's REP·hd outputs, adding the blocks' partials
   * in rank order */
  const int total = REP * hd, per = (total + CL - 1) / CL;
  const int o_end = (rank + 1) * per < total ? (rank + 1) * per : total;
  float vmax = 0.0f;
  for (int i = rank * per + (int)threadIdx.x; i < o_end; i += blockDim.x) {
    float s = 0.0f;
#pragma unroll
    for (int b = 0; b < CL; b++) s += *cl.map_shared_rank(qs + i, b);
    const uint16_t o = ck_f32_to_bf16(s);
    att[(int64_t)g * REP * hd + i] = o;
    if (prep.xp) prep_store(prep.xp, g * REP * hd + i, o, prep.e, prep.xmode); /* o's prep, a fixed exponent */
    const float f = ck_bf16_to_f32(o);
    vmax = fmaxf(vmax, f == f ? fabsf(f) : 0.0f);
  }
  if (prep.xp && g == 0 && rank == 0 && threadIdx.x == 0) *prep.xexp = prep.e;
  cl.sync(); /* no block leaves while another still reads its partials */
  if (!amax) return;
  /* o's x-prep maxima (dk_attention's amax) without a kernel to zero them first: every block
   * writes its max, and the last block of the grid to finish takes the max of them all */
  float vm[1] = {vmax};
  block_reduce_n_in<1>(vm, ck_op_max(), -INFINITY, red);
  if (threadIdx.x == 0) {
    bmax[g * CL + rank] = vm[0];
    __threadfence();
    *last = atomicAdd(count, 1u) == gridDim.x * gridDim.y - 1;
  }
  __syncthreads();
  if (!*last) return;
  __threadfence();
  vm[0] = 0.0f;
  for (int i = threadIdx.x; i < (int)(gridDim.x * gridDim.y); i += blockDim.x) vm[0] = fmaxf(vm[0], __ldcg(bmax + i));
  block_reduce_n_in<1>(vm, ck_op_max(), -INFINITY, red);
  for (int i = threadIdx.x; i < namax; i += blockDim.x) amax[i] = i == 0 ? vm[0] : 0.0f;
  if (threadIdx.x == 0) *count = 0;
}

/* The launch's form: each block's K and V rows staged in its shared memory by the bulk-copy
 * engine, in clusters of AC_CL blocks, or (wide) of 2·AC_CL blocks each taking half the
 * keys: at 1024 keys a block's K and V rows then take 66 KB, so 21 clusters fit the H200 at
 * once instead of 15 (the sliding rings of the 31B: 12.95 us per layer, tg128 +2.4 % at depth
 * 4096). A cluster of 16 is a non-portable size. */
extern "C" int dk_attention_cluster_size(int wide) { return wide ? 2 * AC_CL : AC_CL; }

/* The opt-ins a launch needs, made once per instance (decoders in several threads may race to
 * make them: both set the same attribute). */
template <typename F>
static cudaError_t ac_allow(F fn, int cl, size_t smem, std::atomic<size_t> *allowed, std::atomic<bool> *cl_done) {
  if (smem > allowed->load()) {
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e) return e;
    allowed->store(smem);
  }
  if (cl > 8 && !cl_done->load()) {
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e) return e;
    cl_done->store(true);
  }
  return cudaSuccess;
}

template <int REP, int DPT, int CL>
static cudaError_t launch_cluster_s(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                    dk_kv_layout kv, float scale,
                                    const int *pos, int window, int kpb, uint16_t *att, float *amax, int namax,
                                    float *bmax, unsigned *count, const dk_att_prep &prep, const dk_rows &rw,
                                    int nrows, cudaStream_t st) {
  const size_t smem = ac_smem_bytes(REP, hd, kpb);
  auto fn = cluster_attention_kernel<REP, DPT, CL>;
  static std::atomic<size_t> allowed{48 * 1024};
  static std::atomic<bool> cl_done{false};
  if (cudaError_t e = ac_allow(fn, CL, smem, &allowed, &cl_done)) return e;
  return ck_launch(fn, dim3(CL, (unsigned)nkv, (unsigned)nrows), AT_THREADS, smem, st, q, kc, vc, nkv, hd, kv, scale,
                   pos, window, kpb, att, amax, namax, bmax, count, prep, rw);
}

template <int REP>
static cudaError_t launch_cluster(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                  dk_kv_layout kv, float scale,
                                  const int *pos, int window, int kpb, uint16_t *att, float *amax, int namax,
                                  float *bmax, unsigned *count, const dk_att_prep &prep, int wide, const dk_rows &rw,
                                  int nrows, cudaStream_t st) {
#define AC_ARGS q, kc, vc, nkv, hd, kv, scale, pos, window, kpb, att, amax, namax, bmax, count, prep, rw, nrows, st
#define AC_BY_DPT(DPT) \
  return wide ? launch_cluster_s<REP, DPT, 2 * AC_CL>(AC_ARGS) : launch_cluster_s<REP, DPT, AC_CL>(AC_ARGS)
  if (hd <= AT_THREADS) AC_BY_DPT(1);
  if (hd <= 2 * AT_THREADS) AC_BY_DPT(2);
  if (hd <= 4 * AT_THREADS) AC_BY_DPT(4);
  AC_BY_DPT(8);
#undef AC_BY_DPT
#undef AC_ARGS
}

/* How many of this shape's clusters the device holds at once (cudaOccupancyMaxActiveClusters;
 * 0 where the runtime cannot say): fewer than nkv means the launch runs in more than one wave. */
template <int REP, int DPT, int CL>
static int max_clusters_s(int hd, int kpb) {
#ifdef CK_EMULATION
  (void)hd, (void)kpb;
  return 0;
#else
  const size_t smem = ac_smem_bytes(REP, hd, kpb);
  auto fn = cluster_attention_kernel<REP, DPT, CL>;
  if (smem > 48 * 1024 && cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return 0;
  if (CL > 8 && cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) return 0;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(CL, 1), cfg.blockDim = dim3(AT_THREADS), cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr, cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, fn, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#endif
}
extern "C" int dk_attention_cluster_max_clusters(int nq, int nkv, int hd, int64_t keys, int wide) {
  if (!dk_attention_cluster_fits(nq, nkv, hd, keys, wide) || nq / nkv != 2 || hd > 2 * AT_THREADS) return 0;
  const int cl = dk_attention_cluster_size(wide), kpb = (int)((keys + cl - 1) / cl);
  if (hd <= AT_THREADS) return wide ? max_clusters_s<2, 1, 2 * AC_CL>(hd, kpb) : max_clusters_s<2, 1, AC_CL>(hd, kpb);
  return wide ? max_clusters_s<2, 2, 2 * AC_CL>(hd, kpb) : max_clusters_s<2, 2, AC_CL>(hd, kpb);
}

/* the staged form takes at most 200 KB of shared memory per block */
extern "C" int dk_attention_cluster_fits(int nq, int nkv, int hd, int64_t keys, int wide) {
  const int rep = nkv > 0 ? nq / nkv : 0, cl = dk_attention_cluster_size(wide);
  const int64_t kpb = (keys + cl - 1) / cl;
  return nkv > 0 && nq % nkv == 0 && (rep == 1 || rep == 2 || rep == 4 || rep == 8) && hd % 8 == 0 &&
         hd <= 8 * AT_THREADS && keys >= 1 && kpb <= DK_CLUSTER_MAX_KPB &&
         ac_smem_bytes(rep, hd, (int)kpb) <= 200 * 1024;
}

extern "C" int dk_attention_cluster_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv,
                                         int hd, dk_kv_layout kv, float scale, const int *pos, int window, int64_t keys,
                                         int wide, uint16_t *att, float *amax, int namax, float *bmax, unsigned *count,
                                         const dk_att_prep *prep, const dk_rows *rows, int nrows, void *stream) {
  const dk_att_prep none = {NULL, NULL, 0, 0}, p = prep && prep->xp ? *prep : none;
  const bool batched = rows && rows->slot;
  if (!q || !dk_attention_cluster_fits(nq, nkv, hd, keys, wide) || !dk_kv_layout_ok(kv, nkv, hd, kc, vc, window) || kv.kfmt || (amax && (!bmax || !count || namax < 1)) ||
      (p.xp && (!p.xexp || p.xmode < 1 || p.xmode > 2 || (nq * hd) % 32)) || nrows < 1 || nrows > 65535 ||
      (nrows > 1 && !batched) || (batched && (amax || p.xp)))
    return (int)cudaErrorInvalidValue;
  const dk_rows rw = batched ? *rows : dk_rows{NULL, 0, 0, 0};
  const int cl = dk_attention_cluster_size(wide), kpb = (int)((keys + cl - 1) / cl), rep = nq / nkv;
  cudaStream_t st = (cudaStream_t)stream;
#define AC_CALL(R) \
  launch_cluster<R>(q, kc, vc, nkv, hd, kv, scale, pos, window, kpb, att, amax, namax, bmax, count, p, wide, rw, nrows, st)
  switch (rep) {
  case 1: return (int)AC_CALL(1);
  case 2: return (int)AC_CALL(2);
  case 4: return (int)AC_CALL(4);
  default: return (int)AC_CALL(8);
  }
#undef AC_CALL
}

extern "C" int dk_attention_cluster(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                                    dk_kv_layout kv, float scale, const int *pos, int window, int64_t keys, int wide, uint16_t *att,
                                    float *amax, int namax, float *bmax, unsigned *count, const dk_att_prep *prep,
                                    void *stream) {
  return dk_attention_cluster_rows(q, kc, vc, nq, nkv, hd, kv, scale, pos, window, keys, wide, att, amax, namax, bmax,
                                   count, prep, NULL, 1, stream);
}

CK_TIMELINE_SETTER(ck_tl_attention_cluster)
