/* The prompt pass's causal attention over a compressed K cache (prefill_kernels.h
 * pf_attention_planar; the format: src/accel/kv_codec.h, the scoring: attention_planar.cuh).
 * One block per KV head g and query t: the group's REP query rows of t, bf16(q·bf16(scale)),
 * rotated once into shared memory; then the keys 0 … p0 + t in tiles of PP_TK: each warp scores
 * KPI keys at a time against every row (K read once for the group), the scores rounded to
 * bf16; per head the running max m and sum l of an online softmax (a tile rescales what came
 * before by exp(m_old − m)); and Σ p·v with a thread per PP_MAX_DPT dims of V. Only a tile's
 * scores are ever held. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "attention_common.cuh"
#include "attention_planar.cuh"
#include "prefill_kernels.h"

#define PP_TK 32       /* keys per tile */
#define PP_MAX_DPT 4   /* V dims per thread: head dims up to 4 · AT_THREADS = 512 */

template <int REP, int KF>
__global__ void __launch_bounds__(AT_THREADS) pf_planar_kernel(const float *q, const uint8_t *kc, const uint16_t *vc,
                                                               int64_t p0, int nkv, int hd, dk_kv_layout kv,
                                                               float scale, uint16_t *att) {
  ck_pdl_enter();
  CK_DYNAMIC_SHARED(float4, qs4); /* [REP][hd] rotated query rows */
  float *qs = (float *)qs4;
  __shared__ float cb[16];
  __shared__ float ps[REP][PP_TK]; /* a tile's scores, then its exp(s − m) */
  __shared__ float m_run[REP], l_run[REP], alpha[REP];
  constexpr int BB = KF == 3 ? KVC_P3_BYTES : KVC_P4_BYTES;
  const int g = blockIdx.x, nq = nkv * REP;
  const int64_t t = blockIdx.y, last = p0 + t;
  at_stage_q(q + t * nq * hd, g, REP, hd, scale, rb(scale), qs4);
  __syncthreads();
  pc_rotate_rows(kv.kt, qs, REP * hd);
  pc_stage_codebook(kv.kt, KF, cb);
  if (threadIdx.x < REP) m_run[threadIdx.x] = -INFINITY, l_run[threadIdx.x] = 0.0f;
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = AT_THREADS / 32;
  /* KPI keys per warp and step, their REP·KPI dot products completed by one transposed warp sum:
   * lane l ends with pair l / (32 / NP) (key pu, head pr) */
  constexpr int KPI = REP <= 8 ? 4 : 2, NP = KPI * REP;
  const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
  const int dpt = hd / AT_THREADS;
  const int64_t koff = (int64_t)g * (hd / KVC_BLOCK) * BB;
  float acc[REP][PP_MAX_DPT];
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < PP_MAX_DPT; i++) acc[r][i] = 0.0f;
  for (int64_t j0 = 0; j0 <= last; j0 += PP_TK) {
    const int n = last + 1 - j0 < PP_TK ? (int)(last + 1 - j0) : PP_TK;
    for (int jj = KPI * warp; jj < n; jj += KPI * nw) {
      const uint8_t *kp[KPI];
#pragma unroll
      for (int u = 0; u < KPI; u++) kp[u] = kc + (j0 + (jj + u < n ? jj + u : jj)) * kv.kps + koff;
      float dk[KPI][REP];
      pc_key_dots<REP, KPI, KF>(kp, qs, hd, lane, cb, dk);
      const float v = at_step_score<REP, KPI>(dk, lane);
      if (pw && jj + pu < n) ps[pr][jj + pu] = v;
    }
    __syncthreads();
    if (threadIdx.x < REP) { /* the head's new running max and the factor on what came before */
      const int r = threadIdx.x;
      float m = m_run[r];
      for (int k = 0; k < n; k++) m = fmaxf(m, ps[r][k]);
      alpha[r] = expf(m_run[r] - m);
      m_run[r] = m;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < REP * PP_TK; i += AT_THREADS) {
      const int r = i / PP_TK, k = i % PP_TK;
      ps[r][k] = k < n ? expf(ps[r][k] - m_run[r]) : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x < REP) {
      const int r = threadIdx.x;
      float l = 0.0f;
      for (int k = 0; k < n; k++) l += ps[r][k];
      l_run[r] = fmaf(l_run[r], alpha[r], l);
    }
#pragma unroll
    for (int r = 0; r < REP; r++) {
      const float a = alpha[r];
#pragma unroll
      for (int i = 0; i < PP_MAX_DPT; i++) acc[r][i] *= a;
    }
    for (int k = 0; k < n; k++) {
      const uint16_t *vr = vc + (j0 + k) * kv.ps + (int64_t)g * hd + threadIdx.x;
      float v[PP_MAX_DPT];
#pragma unroll
      for (int i = 0; i < PP_MAX_DPT; i++) v[i] = i < dpt ? ck_bf16_to_f32(vr[i * AT_THREADS]) : 0.0f;
#pragma unroll
      for (int r = 0; r < REP; r++) {
        const float p = ps[r][k];
#pragma unroll
        for (int i = 0; i < PP_MAX_DPT; i++) acc[r][i] = fmaf(p, v[i], acc[r][i]);
      }
    }
    __syncthreads(); /* the tile's ps, alpha and l_run read before the next tile writes them */
  }
  uint16_t *out = att + t * nq * hd + (int64_t)g * REP * hd + threadIdx.x;
#pragma unroll
  for (int r = 0; r < REP; r++) {
    const float l = l_run[r];
#pragma unroll
    for (int i = 0; i < PP_MAX_DPT; i++)
      if (i < dpt) out[(int64_t)r * hd + i * AT_THREADS] = ck_f32_to_bf16(acc[r][i] / l);
  }
}

template <int REP>
static int pp_launch(const float *q, const uint8_t *kc, const uint16_t *vc, int T, int64_t p0, int nkv, int hd,
                     dk_kv_layout kv, float scale, uint16_t *att, cudaStream_t st) {
  const size_t smem = (size_t)REP * hd * sizeof(float);
  return (int)ck_launch(kv.kfmt == 3 ? pf_planar_kernel<REP, 3> : pf_planar_kernel<REP, 4>, dim3((unsigned)nkv, (unsigned)T),
                        AT_THREADS, smem, st, q, kc, vc, p0, nkv, hd, kv, scale, att);
}

extern "C" int pf_attention_planar(const float *q, const uint16_t *kc, const uint16_t *vc, int T, int64_t p0, int nq,
                                   int nkv, int hd, float scale, dk_kv_layout kv, uint16_t *att, void *stream) {
  if (T <= 0) return 0;
  if (!q || !kc || !vc || !att || nkv <= 0 || nq % nkv || hd % KVC_BLOCK || hd > PP_MAX_DPT * AT_THREADS || !kv.kfmt ||
      !dk_kv_layout_ok(kv, nkv, hd, kc, vc, 0) || (size_t)(nq / nkv) * hd * sizeof(float) > 48 * 1024 || T > 65535 ||
      p0 < 0)
    return (int)cudaErrorInvalidValue;
  const uint8_t *kb = (const uint8_t *)kc;
  cudaStream_t st = (cudaStream_t)stream;
  switch (nq / nkv) {
  case 1: return pp_launch<1>(q, kb, vc, T, p0, nkv, hd, kv, scale, att, st);
  case 2: return pp_launch<2>(q, kb, vc, T, p0, nkv, hd, kv, scale, att, st);
  case 4: return pp_launch<4>(q, kb, vc, T, p0, nkv, hd, kv, scale, att, st);
  case 8: return pp_launch<8>(q, kb, vc, T, p0, nkv, hd, kv, scale, att, st);
  case 16: return pp_launch<16>(q, kb, vc, T, p0, nkv, hd, kv, scale, att, st);
  default: return (int)cudaErrorInvalidValue;
  }
}

CK_TIMELINE_SETTER(ck_tl_prefill_attn_planar)
