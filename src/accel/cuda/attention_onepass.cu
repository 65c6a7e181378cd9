/* The one-pass decode attention (MLXRT_ATTN_ONEPASS=1; an experiment, off by default). */
#include "attention_common.cuh"

/* Each block reads its split's K and V once, in tiles of OP_TILE keys, with an online softmax
 * (as fused decode kernels do): scores as above (q·bf16(scale) → bf16, score → bf16), then per
 * head the running max m and sum l, the weights exp(s − m) unrounded, the accumulator rescaled
 * when m grows. A second kernel weighs the splits by exp(m_s − M) and divides by the total. p is
 * never rounded to bf16, so this is not the reference path's rounding: a third of the outputs
 * move by at most one bf16 step, toward exact attention (docs/PERF.md, session 5). V is read
 * with 8- or 16-byte loads by threads owning dpt dims, the key groups of a tile in parallel. */
#define OP_TILE 32 /* keys per tile: one per lane in the softmax step */
#define OP_WARPS (AT_THREADS / 32)
/* dims per thread in the V step: 16-byte loads for small groups; fewer for large ones, whose
 * accumulators (REP × dpt floats) would not fit in registers (so REP 8 takes hd ≤ 512 and
 * REP 16 hd ≤ 256 here) */
#define OP_DPT(rep) ((rep) <= 4 ? 8 : (rep) <= 8 ? 4 : 2)

template <int REP>
__global__ void __launch_bounds__(AT_THREADS) onepass_kernel(const float *q, const uint16_t *kc, const uint16_t *vc,
                                                             int nkv, int hd, float scale, const int *pos_p,
                                                             int window, at_splits sp, float *smax, float *ssum,
                                                             float *pacc, float *amax, int namax) {
  constexpr int DPT = OP_DPT(REP), OP_HPW = (REP + OP_WARPS - 1) / OP_WARPS; /* heads per warp */
  ck_pdl_enter();
  amax_zero(amax, namax);
  CK_DYNAMIC_SHARED(float4, dyn4); /* q as [REP][hd]; at the end the key groups' sums */
  float *qs = (float *)dyn4;
  __shared__ float ps[REP][OP_TILE], alpha[REP];
  const int g = blockIdx.x, s = blockIdx.y, pos = *pos_p, splits = sp.n;
  int lo, hi;
  split_range(pos, window, sp, s, &lo, &hi);
  if (lo == hi) return; /* past the live splits: the combine reads only those */
  const float bscale = rb(scale);
  for (int i = threadIdx.x; i < REP * hd; i += blockDim.x) {
    float v = q[(int64_t)g * REP * hd + i];
    qs[i] = scale == 1.0f ? v : rb(__fmul_rn(v, bscale));
  }
  const int64_t kvd = (int64_t)nkv * hd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5, nch = (hd + 255) / 256;
  /* V: T threads cover a key's hd dims (DPT each); G key groups take the tile's keys in turn */
  const int T = hd / DPT, G = (int)blockDim.x / T, kg = threadIdx.x / T, d0 = (threadIdx.x % T) * DPT;
  const bool vact = kg < G;
  float acc[REP][DPT];
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;
  /* the running max and sum of head r = warp + k·OP_WARPS, held by that warp's lanes */
  float m_runs[OP_HPW], l_runs[OP_HPW];
#pragma unroll
  for (int k = 0; k < OP_HPW; k++) m_runs[k] = -INFINITY, l_runs[k] = 0.0f;
  __syncthreads();
  for (int t0 = lo; t0 < hi; t0 += OP_TILE) {
    const int n = hi - t0 < OP_TILE ? hi - t0 : OP_TILE;
    /* 1. scores of the tile: warp w takes KPI keys at a time (fewer for large groups: registers) */
    constexpr int KPI = REP <= 4 ? 4 : 2;
    for (int j0 = KPI * warp; j0 < n; j0 += KPI * nw) {
      const uint16_t *kp[KPI];
#pragma unroll
      for (int u = 0; u < KPI; u++) {
        int jj = j0 + u < n ? j0 + u : j0, j = t0 + jj;
        int64_t sl = window > 0 ? j % window : j;
        kp[u] = kc + sl * kvd + (int64_t)g * hd;
      }
      float dk[KPI][REP];
      key_dots<REP, KPI>(kp, qs, hd, nch, lane, dk);
#pragma unroll
      for (int r = 0; r < REP; r++)
#pragma unroll
        for (int u = 0; u < KPI; u++) {
          float v = rb(warp_sum(dk[u][r]));
          if (lane == 0 && j0 + u < n) ps[r][j0 + u] = v;
        }
    }
    __syncthreads();
    /* 2. per head (warp r mod nw, a lane per key): the running max and sum, the weights */
#pragma unroll
    for (int k = 0; k < OP_HPW; k++) {
      const int r = warp + k * OP_WARPS;
      if (r >= REP) break;
      float sv = lane < n ? ps[r][lane] : -INFINITY;
      float m_new = fmaxf(m_runs[k], warp_max(sv));
      float a = m_runs[k] == -INFINITY ? 0.0f : expf(__fsub_rn(m_runs[k], m_new));
      float p = lane < n ? expf(__fsub_rn(sv, m_new)) : 0.0f;
      l_runs[k] = fmaf(l_runs[k], a, warp_sum(p));
      m_runs[k] = m_new;
      ps[r][lane] = p;
      if (lane == 0) alpha[r] = a;
    }
    __syncthreads();
    /* 3. V: rescale, then this key group's keys of the tile, two loads in flight */
    if (vact) {
#pragma unroll
      for (int r = 0; r < REP; r++) {
        const float a = alpha[r];
#pragma unroll
        for (int i = 0; i < DPT; i++) acc[r][i] *= a;
      }
      int jj = kg;
      for (; jj + G < n; jj += 2 * G) {
        float v0[DPT], v1[DPT];
        int j = t0 + jj, j1 = j + G;
        int64_t s0 = window > 0 ? j % window : j, s1 = window > 0 ? j1 % window : j1;
        load_n(vc + s0 * kvd + (int64_t)g * hd + d0, DPT, v0);
        load_n(vc + s1 * kvd + (int64_t)g * hd + d0, DPT, v1);
#pragma unroll
        for (int r = 0; r < REP; r++) {
          const float p0 = ps[r][jj], p1 = ps[r][jj + G];
#pragma unroll
          for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p1, v1[i], fmaf(p0, v0[i], acc[r][i]));
        }
      }
      if (jj < n) {
        float v0[DPT];
        int j = t0 + jj;
        int64_t s0 = window > 0 ? j % window : j;
        load_n(vc + s0 * kvd + (int64_t)g * hd + d0, DPT, v0);
#pragma unroll
        for (int r = 0; r < REP; r++) {
          const float p0 = ps[r][jj];
#pragma unroll
          for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p0, v0[i], acc[r][i]);
        }
      }
    }
    __syncthreads(); /* ps and alpha are rewritten by the next tile */
  }
  /* the key groups' sums in group order (q is no longer needed: its memory takes them) */
  float *red = qs; /* [G][REP][hd] */
  if (vact)
#pragma unroll
    for (int r = 0; r < REP; r++)
#pragma unroll
      for (int i = 0; i < DPT; i++) red[((int64_t)kg * REP + r) * hd + d0 + i] = acc[r][i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < REP * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx - r * hd;
    float v = 0.0f;
    for (int k = 0; k < G; k++) v += red[((int64_t)k * REP + r) * hd + d];
    pacc[((int64_t)(g * REP + r) * splits + s) * hd + d] = v;
  }
#pragma unroll
  for (int k = 0; k < OP_HPW; k++) {
    const int r = warp + k * OP_WARPS;
    if (r < REP && lane == 0) {
      smax[(g * REP + r) * splits + s] = m_runs[k];
      ssum[(g * REP + r) * splits + s] = l_runs[k];
    }
  }
}

/* grid (nq, ceil(hd / AT_THREADS)): out = Σ_s w_s·acc_s / Σ_s w_s·l_s with w_s = exp(m_s − M),
 * the splits in order; empty splits (m_s = −∞) weigh nothing. */
__global__ void __launch_bounds__(AT_THREADS) onepass_combine_kernel(const float *smax, const float *ssum,
                                                                     const float *pacc, const int *pos_p, int window,
                                                                     at_splits sp, int hd, uint16_t *att, float *amax) {
  ck_pdl_enter();
  const int h = blockIdx.x, d = blockIdx.y * AT_THREADS + threadIdx.x, splits = sp.n;
  const int live = live_splits(*pos_p, window, sp);
  float out = 0.0f;
  if (d < hd) {
    float M = -INFINITY;
    for (int k = 0; k < live; k++) M = fmaxf(M, smax[h * splits + k]);
    float num = 0.0f, den = 0.0f;
    for (int k = 0; k < live; k++) {
      const float ms = smax[h * splits + k];
      if (ms == -INFINITY) continue;
      const float w = expf(__fsub_rn(ms, M));
      den = fmaf(w, ssum[h * splits + k], den);
      num = fmaf(w, __ldcg(pacc + ((int64_t)h * splits + k) * hd + d), num);
    }
    const uint16_t b = ck_f32_to_bf16(__fdiv_rn(num, den));
    att[(int64_t)h * hd + d] = b;
    out = ck_bf16_to_f32(b);
  }
  amax_add(amax, out);
}

template <int REP>
static cudaError_t launch_onepass(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd, float scale,
                                  const int *pos, int window, at_splits sp, float *smax, float *ssum, float *pacc,
                                  uint16_t *att, float *amax, int namax, cudaStream_t st) {
  const int splits = sp.n;
  const int dpt = OP_DPT(REP); /* every dim owned by one thread: hd ≤ 128·dpt */
  if (hd % dpt || hd / dpt > AT_THREADS) return cudaErrorInvalidValue;
  const int G = AT_THREADS / (hd / dpt);
  const size_t smem = (size_t)(G > 1 ? G : 1) * REP * hd * sizeof(float);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;
  cudaError_t e = ck_launch(onepass_kernel<REP>, dim3(nkv, splits), AT_THREADS, smem, st, q, kc, vc, nkv, hd,
                            scale, pos, window, sp, smax, ssum, pacc, amax, namax);
  if (e) return e;
  return ck_launch(onepass_combine_kernel, dim3(nkv * REP, (hd + AT_THREADS - 1) / AT_THREADS), AT_THREADS, 0, st,
                   smax, ssum, pacc, pos, window, sp, hd, att, amax);
}

extern "C" int dk_attention_onepass_supports(int rep, int hd) {
  return (rep == 1 || rep == 2 || rep == 4 || rep == 8 || rep == 16) && hd % 8 == 0 && hd <= AT_THREADS * OP_DPT(rep);
}

extern "C" int dk_attention_onepass(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                                    float scale, const int *pos, int window, int splits, int min_keys, float *smax,
                                    float *ssum, float *pacc, uint16_t *att, float *amax, int namax, void *stream) {
  if (nkv <= 0 || nq % nkv || hd % 8 || hd > AT_MAX_HD || splits < 1 || min_keys < 1) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  const at_splits sp = {splits, min_keys};
  switch (nq / nkv) {
  case 1: return (int)launch_onepass<1>(q, kc, vc, nkv, hd, scale, pos, window, sp, smax, ssum, pacc, att, amax, namax, st);
  case 2: return (int)launch_onepass<2>(q, kc, vc, nkv, hd, scale, pos, window, sp, smax, ssum, pacc, att, amax, namax, st);
  case 4: return (int)launch_onepass<4>(q, kc, vc, nkv, hd, scale, pos, window, sp, smax, ssum, pacc, att, amax, namax, st);
  case 8: return (int)launch_onepass<8>(q, kc, vc, nkv, hd, scale, pos, window, sp, smax, ssum, pacc, att, amax, namax, st);
  case 16: return (int)launch_onepass<16>(q, kc, vc, nkv, hd, scale, pos, window, sp, smax, ssum, pacc, att, amax, namax, st);
  default: return (int)cudaErrorInvalidValue;
  }
}

CK_PDL_EARLY_SETTER(ck_pdl_early_attention_onepass)
