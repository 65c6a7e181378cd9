/* Decode attention in one launch for short key ranges: a cluster of AC_CL blocks per KV head,
 * each block one contiguous share of the keys, the softmax's max and denominator and the p·v
 * partial sums exchanged through distributed shared memory instead of global scratch and two
 * more kernels (attention.cu's scores → pv → combine chain). The step's timeline showed that
 * chain costing 13 µs per sliding layer at depth 0 (6.3 + 4.9 + 2.0, docs/PERF.md session 11),
 * mostly in its launch boundaries; a sliding layer's ring (1024 keys on the 31B) is short
 * enough for one cluster at every depth.
 *
 * The reference path's rounding points, as in attention.cu: q·bf16(scale) → bf16, scores →
 * bf16 (the same per-key dot products and warp sums as the scores kernel), softmax in float32
 * with p = bf16(exp(s − M) / total), Σ p·v float32 → bf16. The denominator is summed over the
 * cluster's blocks (each block's Σ exp(s − m_b) scaled by exp(m_b − M)), and the p·v partials
 * in rank order: another grouping than the split path's, so a result may differ from it in a
 * last bit (the CPU-reference checks decide, as for the split shapes). */
#include <cooperative_groups.h>

#include "attention_common.cuh"
#include "prep_store.cuh"

namespace cg = cooperative_groups;

/* blocks per cluster (the host emulation, tests/gpu/attention_cluster_emulate.cpp, runs the
 * kernel as it is with any count) */
#ifndef AC_CL
#define AC_CL 8
#endif
/* the fast form's keys per warp and step, and the V rows per warp and batch */
#define AC_FAST_KPI 8
#define AC_FAST_VB 8

/* The dynamic shared memory's floats: q [REP][hd] (then the block's p·v partials), the scores
 * and p [REP][kpb], the reductions' [REP][32], the statistics m, l, M, 1/total [4][REP], a
 * flag, and for the fast form each warp's p·v partials [warps][REP][hd]. */
__host__ __device__ constexpr size_t ac_smem_floats(int rep, int hd, int kpb, bool fast) {
  return (size_t)rep * hd + (size_t)rep * kpb + (size_t)rep * 32 + 4 * (size_t)rep + 4 +
         (fast ? (size_t)(AT_THREADS / 32) * rep * hd : 0);
}

/* grid (CL, nkv), cluster (CL, 1, 1): block `rank` of KV head g takes keys
 * [first + rank·len, …) of the live range, len = ceil(count / CL) ≤ kpb.
 * FAST (head dims ≤ 256, GQA ≤ 4): each score step takes AC_FAST_KPI keys per warp, the next
 * step's K rows in flight while one is summed (the same score bits as the plain form: the same
 * products in the same order per key, and the transposed warp sum's tree does not depend on
 * how many keys it takes); p·v splits the block's keys over its warps, a lane holding 16 bytes
 * of each V row, AC_FAST_VB rows per batch with the next batch in flight, the warps' sums then
 * added in warp order (another grouping than the plain form's, so other last bits). The plain
 * form: 4 keys per warp and step, and each thread a few dims of every key's V row (measured on
 * the H200, session 11: level with the split passes up to 128 keys, 2× slower at 1024). */
template <int REP, int DPT, int CL, bool FAST>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(AT_THREADS)
    cluster_attention_kernel(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd, float scale,
                             const int *pos_p, int window, int kpb, uint16_t *att, float *amax, int namax,
                             float *bmax, unsigned *count, dk_prep_out prep) {
  static_assert(!FAST || (DPT <= 2 && REP <= 4), "the fast form: head dims up to 256, GQA up to 4");
  cg::cluster_group cl = cg::this_cluster();
  CK_DYNAMIC_SHARED(float4, sm4);
  float *qs = reinterpret_cast<float *>(sm4), *ps = qs + REP * hd, *red = ps + REP * kpb;
  float *st_m = red + REP * 32, *st_l = st_m + REP, *gm = st_l + REP, *ginv = gm + REP;
  int *last = reinterpret_cast<int *>(ginv + REP);
  float *wpart = ginv + REP + 4; /* FAST: [warps][REP][hd] */
  ck_pdl_enter();
  const int rank = (int)blockIdx.x, g = (int)blockIdx.y, pos = *pos_p;
  const int first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int len = (pos - first + 1 + CL - 1) / CL;
  int lo = first + rank * len, hi = lo + len;
  if (hi > pos + 1) hi = pos + 1;
  if (lo > hi) lo = hi;
  const int n = hi - lo; /* 0 for a block past the live keys: it still meets every cluster barrier */
  const int64_t kvd = (int64_t)nkv * hd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5, nch = (hd + 255) / 256;
  auto slot = [&](int j) -> int64_t { return window > 0 ? j % window : j; };

  const float bscale = rb(scale);
  at_stage_q(q, g, REP, hd, scale, bscale, sm4); /* scaled and rounded as the scores kernel does */
  __syncthreads();
  /* scores: KPI keys per warp and step, completed by one transposed warp reduction (the
   * scores kernel's register path, its sums in its order) */
  constexpr int KPI = FAST ? AC_FAST_KPI : REP <= 8 ? 4 : 2, NP = KPI * REP;
  static_assert(NP <= 32, "one transposed warp sum per step");
  const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
  float mxl = -INFINITY;
  /* one step's sums: the dot products of KPI keys with the REP heads, rounded to bf16, written
   * into ps and folded into the running max */
  auto finish = [&](int j, float (&dk)[KPI][REP]) {
    const float v = at_step_score<REP, KPI>(dk, lane);
    if (j + pu < hi) {
      if (pw) ps[pr * kpb + (j + pu - lo)] = v;
      mxl = fmaxf(mxl, v);
    }
  };
  if constexpr (FAST) {
    /* head dims ≤ 256: one 16-byte piece per key and lane (dims 8·lane …), zero past hd */
    const bool dl = lane * 8 < hd;
    uint4 kr[KPI], kn[KPI];
    auto load = [&](int j, uint4 (&k)[KPI]) {
#pragma unroll
      for (int u = 0; u < KPI; u++) {
        const int jj = j + u < hi ? j + u : j;
        k[u] = dl && j < hi ? __ldg(reinterpret_cast<const uint4 *>(kc + slot(jj) * kvd + (int64_t)g * hd + lane * 8))
                            : make_uint4(0u, 0u, 0u, 0u);
      }
    };
    int j = lo + KPI * warp;
    load(j, kr);
    for (; j < hi; j += KPI * nw) {
      load(j + KPI * nw, kn); /* the next step's rows (none past hi) */
      float dk[KPI][REP];
#pragma unroll
      for (int u = 0; u < KPI; u++)
#pragma unroll
        for (int r = 0; r < REP; r++) dk[u][r] = 0.0f;
      if (dl) {
#pragma unroll
        for (int r = 0; r < REP; r++) {
          const float4 *qp = reinterpret_cast<const float4 *>(qs + r * hd + lane * 8);
          const float4 x0 = qp[0], x1 = qp[1];
          const float qv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
          for (int u = 0; u < KPI; u++) {
            float a[8];
            unpack8(kr[u], a);
#pragma unroll
            for (int i = 0; i < 8; i++) dk[u][r] = fmaf(qv[i], a[i], dk[u][r]);
          }
        }
      }
      finish(j, dk);
#pragma unroll
      for (int u = 0; u < KPI; u++) kr[u] = kn[u];
    }
  } else {
    for (int j = lo + KPI * warp; j < hi; j += KPI * nw) {
      const uint16_t *kp[KPI];
#pragma unroll
      for (int u = 0; u < KPI; u++) {
        const int jj = j + u < hi ? j + u : j;
        kp[u] = kc + slot(jj) * kvd + (int64_t)g * hd;
      }
      float dk[KPI][REP];
      key_dots<REP, KPI>(kp, qs, hd, nch, lane, dk);
      finish(j, dk);
    }
  }
  /* FAST: the first batch of V rows in flight during the softmax's reductions */
  constexpr int VB = AC_FAST_VB;
  uint4 va[VB], vb[VB];
  const bool vl = lane * 8 < hd;
  auto vload = [&](int k0, uint4 (&v)[VB]) { /* rows k0 + u·nw of the block's keys, warp-strided */
#pragma unroll
    for (int u = 0; u < VB; u++) {
      const int k = k0 + u * nw;
      v[u] = vl && k < n ? __ldg(reinterpret_cast<const uint4 *>(vc + slot(lo + k) * kvd + (int64_t)g * hd + lane * 8))
                         : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  if (FAST) vload(warp, va);

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
  if constexpr (FAST) {
    /* warp w: keys w, w + nw, …, in batches of VB with the next batch in flight; lane l dims
     * 8l … 8l + 7 */
    float acc[REP][8];
#pragma unroll
    for (int r = 0; r < REP; r++)
#pragma unroll
      for (int i = 0; i < 8; i++) acc[r][i] = 0.0f;
    for (int k0 = warp; k0 < n; k0 += VB * nw) {
      vload(k0 + VB * nw, vb);
#pragma unroll
      for (int u = 0; u < VB; u++) {
        const int k = k0 + u * nw;
        if (k >= n) break;
        float v[8];
        unpack8(va[u], v);
#pragma unroll
        for (int r = 0; r < REP; r++) {
          const float p = ps[r * kpb + k];
#pragma unroll
          for (int i = 0; i < 8; i++) acc[r][i] = fmaf(p, v[i], acc[r][i]);
        }
      }
#pragma unroll
      for (int u = 0; u < VB; u++) va[u] = vb[u];
    }
    if (vl)
#pragma unroll
      for (int r = 0; r < REP; r++)
#pragma unroll
        for (int i = 0; i < 8; i++) wpart[((size_t)warp * REP + r) * hd + lane * 8 + i] = acc[r][i];
    __syncthreads();
    /* the block's partials where q was (every warp is past its last read of q): the warps' in order */
    for (int i = threadIdx.x; i < REP * hd; i += blockDim.x) {
      float s = 0.0f;
      for (int w = 0; w < nw; w++) s += wpart[(size_t)w * REP * hd + i];
      qs[i] = s;
    }
  } else {
    /* Σ p·v over the block's keys: thread t owns dims [t·DPT, t·DPT + DPT), eight keys' V loads
     * in flight before their products, each accumulator adding the keys in order */
    float acc[REP][DPT];
#pragma unroll
    for (int r = 0; r < REP; r++)
#pragma unroll
      for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;
    const int d0 = threadIdx.x * DPT;
    if (d0 < hd) {
      const int64_t voff = (int64_t)g * hd + d0;
      for (int j0 = 0; j0 < n; j0 += 8) {
        float v[8][DPT];
#pragma unroll
        for (int u = 0; u < 8; u++) load_n(vc + slot(lo + (j0 + u < n ? j0 + u : j0)) * kvd + voff, DPT, v[u]);
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
    const float f = ck_bf16_to_f32(o);
    vmax = fmaxf(vmax, f == f ? fabsf(f) : 0.0f);
  }
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
  if (!prep.xp) return;
  /* and o's activation prep itself (what ck_xprep_premax makes of att and these maxima, bit for
   * bit: prep_store.cuh), so that no prep kernel runs between the attention and o */
  const int e = prep_exp(vm[0], prep.xmode), nout = (int)gridDim.y * REP * hd;
  if (threadIdx.x == 0) *prep.xexp = e;
#pragma unroll 4
  for (int i = threadIdx.x; i < nout; i += blockDim.x) prep_store(prep.xp, i, __ldcg(att + i), e, prep.xmode);
}

template <int REP, int DPT, bool FAST>
static cudaError_t launch_cluster_k(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                    float scale, const int *pos, int window, int kpb, uint16_t *att, float *amax,
                                    int namax, float *bmax, unsigned *count, dk_prep_out prep, cudaStream_t st) {
  const size_t smem = ac_smem_floats(REP, hd, kpb, FAST) * sizeof(float);
  return ck_launch(cluster_attention_kernel<REP, DPT, AC_CL, FAST>, dim3(AC_CL, (unsigned)nkv), AT_THREADS, smem, st,
                   q, kc, vc, nkv, hd, scale, pos, window, kpb, att, amax, namax, bmax, count, prep);
}

template <int REP>
static cudaError_t launch_cluster(bool fast, const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                  float scale, const int *pos, int window, int kpb, uint16_t *att, float *amax,
                                  int namax, float *bmax, unsigned *count, dk_prep_out prep, cudaStream_t st) {
#define AC_ARGS q, kc, vc, nkv, hd, scale, pos, window, kpb, att, amax, namax, bmax, count, prep, st
  if constexpr (REP <= 4) {
    if (fast && hd <= AT_THREADS) return launch_cluster_k<REP, 1, true>(AC_ARGS);
    if (fast && hd <= 2 * AT_THREADS) return launch_cluster_k<REP, 2, true>(AC_ARGS);
  }
  if (hd <= AT_THREADS) return launch_cluster_k<REP, 1, false>(AC_ARGS);
  if (hd <= 2 * AT_THREADS) return launch_cluster_k<REP, 2, false>(AC_ARGS);
  if (hd <= 4 * AT_THREADS) return launch_cluster_k<REP, 4, false>(AC_ARGS);
  return launch_cluster_k<REP, 8, false>(AC_ARGS);
#undef AC_ARGS
}

/* the fast form where it applies: head dims ≤ 256, GQA ≤ 4 */
static bool ac_fast(int form, int rep, int hd) { return form == 1 && rep <= 4 && hd <= 2 * AT_THREADS; }

extern "C" int dk_attention_cluster_fits(int nq, int nkv, int hd, int64_t keys, int form) {
  const int rep = nkv > 0 ? nq / nkv : 0;
  const int64_t kpb = (keys + AC_CL - 1) / AC_CL;
  return nkv > 0 && nq % nkv == 0 && (rep == 1 || rep == 2 || rep == 4 || rep == 8) && hd % 8 == 0 &&
         hd <= 8 * AT_THREADS && keys >= 1 && kpb <= DK_CLUSTER_MAX_KPB && (form == 0 || form == 1) &&
         ac_smem_floats(rep, hd, (int)kpb, ac_fast(form, rep, hd)) * sizeof(float) <= 48 * 1024;
}

extern "C" int dk_attention_cluster(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                                    float scale, const int *pos, int window, int64_t keys, int form, uint16_t *att,
                                    float *amax, int namax, float *bmax, unsigned *count, const dk_prep_out *prep,
                                    void *stream) {
  const dk_prep_out none = {NULL, NULL, 0}, p = prep && prep->xp ? *prep : none;
  if (!q || !dk_attention_cluster_fits(nq, nkv, hd, keys, form) || (amax && (!bmax || !count || namax < 1)) ||
      (p.xp && (!amax || !p.xexp || p.xmode < 1 || p.xmode > 2 || (nq * hd) % 32)))
    return (int)cudaErrorInvalidValue;
  const int kpb = (int)((keys + AC_CL - 1) / AC_CL), rep = nq / nkv;
  const bool fast = ac_fast(form, rep, hd);
  cudaStream_t st = (cudaStream_t)stream;
#define AC_CALL(R) launch_cluster<R>(fast, q, kc, vc, nkv, hd, scale, pos, window, kpb, att, amax, namax, bmax, count, p, st)
  switch (rep) {
  case 1: return (int)AC_CALL(1);
  case 2: return (int)AC_CALL(2);
  case 4: return (int)AC_CALL(4);
  default: return (int)AC_CALL(8);
  }
#undef AC_CALL
}

CK_PDL_EARLY_SETTER(ck_pdl_early_attention_cluster)
