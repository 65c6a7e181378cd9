/* Decode attention: one query row per head at position *pos over the device KV cache, with
 * the reference path's rounding points (q·bf16(scale) → bf16, scores → bf16, softmax in
 * float32 with p rounded to bf16, Σ p·v → bf16). GQA: query head h reads KV head h / rep.
 * The keys are split over `splits` blocks per head so long contexts fill the SMs, in two passes:
 *   1. scores (one block per KV head and split; K read once for its rep query heads), and per
 *      split the max m_s and the sum l_s = Σ exp(s − m_s);
 *   2. per query head and split: M = max m_s, total = Σ l_s·exp(m_s − M) (the float32 softmax
 *      denominator, summed in another order than the CPU's), p = bf16(exp(s − M) / total),
 *      partial Σ p·v; the last block of each head reduces the partials in split order.
 * A sliding layer (window > 0) keeps a ring: position j lives in slot j % window. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_device.cuh"
#include "decode_kernels.h"

#define AT_THREADS 128
#define AT_MAX_REP 16
#define AT_MAX_HD 1024

static __device__ __forceinline__ float rb(float x) { return ck_bf16_to_f32(ck_f32_to_bf16(x)); }

/* The keys [lo, hi) of this split, from the live range [first, last]. */
__device__ __forceinline__ void split_range(int pos, int window, int splits, int s, int *lo, int *hi) {
  int first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  int cnt = pos - first + 1;
  int len = (cnt + splits - 1) / splits;
  int a = first + s * len, b = a + len;
  if (b > pos + 1) b = pos + 1;
  if (a > b) a = b;
  *lo = a;
  *hi = b;
}

static __device__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x >> 5) ? part[l] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static __device__ float block_add(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x >> 5) ? part[l] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* grid (nkv, splits): each warp takes keys in turn; lanes split the head dim. */
__global__ void __launch_bounds__(AT_THREADS) scores_kernel(const float *q, const uint16_t *kc, int nq, int nkv,
                                                            int hd, float scale, const int *pos_p, int window,
                                                            int splits, int64_t ctx_cap, float *scores,
                                                            float *smax, float *ssum) {
  extern __shared__ float qs[]; /* [rep][hd] */
  int g = blockIdx.x, s = blockIdx.y, rep = nq / nkv;
  int pos = *pos_p, lo, hi;
  split_range(pos, window, splits, s, &lo, &hi);
  float bscale = rb(scale);
  for (int i = threadIdx.x; i < rep * hd; i += blockDim.x) {
    float v = q[(int64_t)g * rep * hd + i];
    qs[i] = scale == 1.0f ? v : rb(__fmul_rn(v, bscale));
  }
  __syncthreads();
  int64_t kvd = (int64_t)nkv * hd;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  float mx[AT_MAX_REP];
  for (int r = 0; r < rep; r++) mx[r] = -INFINITY;
  for (int j = lo + warp; j < hi; j += nw) {
    int64_t slot = window > 0 ? j % window : j;
    const uint16_t *kk = kc + slot * kvd + (int64_t)g * hd;
    float dot[AT_MAX_REP];
    for (int r = 0; r < rep; r++) dot[r] = 0.0f;
    for (int d = lane; d < hd; d += 32) {
      float kv = ck_bf16_to_f32(kk[d]);
      for (int r = 0; r < rep; r++) dot[r] = fmaf(qs[r * hd + d], kv, dot[r]);
    }
    for (int r = 0; r < rep; r++) {
      float v = dot[r];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      float sc = rb(v);
      if (lane == 0) scores[(int64_t)(g * rep + r) * ctx_cap + j] = sc;
      mx[r] = fmaxf(mx[r], sc);
    }
  }
  __syncthreads(); /* the block's own score writes are visible to the whole block */
  for (int r = 0; r < rep; r++) {
    float m = block_max(mx[r]), sum = 0.0f;
    const float *sc = scores + (int64_t)(g * rep + r) * ctx_cap;
    if (m > -INFINITY)
      for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) sum += expf(__fsub_rn(sc[j], m));
    sum = block_add(sum);
    if (threadIdx.x == 0) {
      smax[(g * rep + r) * splits + s] = m;
      ssum[(g * rep + r) * splits + s] = sum;
    }
  }
}

__device__ __forceinline__ float global_max(const float *smax, int h, int splits) {
  float m = -INFINITY;
  for (int i = 0; i < splits; i++) m = fmaxf(m, smax[h * splits + i]);
  return m;
}

/* grid (nq, splits): partial Σ p·v of the split, then the last block of the head reduces. */
__global__ void __launch_bounds__(AT_THREADS) pv_kernel(const uint16_t *vc, int nq, int nkv, int hd,
                                                        const int *pos_p, int window, int splits,
                                                        int64_t ctx_cap, const float *scores,
                                                        const float *smax, const float *ssum, float *pacc,
                                                        unsigned *count, uint16_t *att) {
  int h = blockIdx.x, s = blockIdx.y, pos = *pos_p, lo, hi, rep = nq / nkv, g = h / rep;
  split_range(pos, window, splits, s, &lo, &hi);
  float m = global_max(smax, h, splits), total = 0.0f;
  for (int i = 0; i < splits; i++) {
    float ms = smax[h * splits + i];
    if (ms > -INFINITY) total += ssum[h * splits + i] * expf(__fsub_rn(ms, m));
  }
  float inv = __fdiv_rn(1.0f, total);
  const float *sc = scores + (int64_t)h * ctx_cap;
  int64_t kvd = (int64_t)nkv * hd;
  float acc[AT_MAX_HD / AT_THREADS];
  int nd = (hd + AT_THREADS - 1) / AT_THREADS;
  for (int i = 0; i < nd; i++) acc[i] = 0.0f;
  for (int j = lo; j < hi; j++) {
    float p = rb(__fmul_rn(expf(__fsub_rn(sc[j], m)), inv));
    int64_t slot = window > 0 ? j % window : j;
    const uint16_t *vv = vc + slot * kvd + (int64_t)g * hd;
    for (int i = 0; i < nd; i++) {
      int d = threadIdx.x + i * AT_THREADS;
      if (d < hd) acc[i] = fmaf(p, ck_bf16_to_f32(vv[d]), acc[i]);
    }
  }
  float *dst = pacc + ((int64_t)h * splits + s) * hd;
  for (int i = 0; i < nd; i++) {
    int d = threadIdx.x + i * AT_THREADS;
    if (d < hd) dst[d] = acc[i];
  }
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(count + h, 1u) == (unsigned)splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int i = 0; i < splits; i++) v += __ldcg(pacc + ((int64_t)h * splits + i) * hd + d);
    att[(int64_t)h * hd + d] = ck_f32_to_bf16(v);
  }
  if (threadIdx.x == 0) count[h] = 0;
}

extern "C" int dk_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                            float scale, const int *pos, int window, int splits, int64_t ctx_cap,
                            float *scores, float *smax, float *ssum, float *pacc, unsigned *count,
                            uint16_t *att, void *stream) {
  int rep = nq / nkv;
  if (rep > AT_MAX_REP || hd > AT_MAX_HD || nq % nkv) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  size_t smem = (size_t)rep * hd * sizeof(float);
  if (smem > 48 * 1024) return (int)cudaErrorInvalidValue;
  scores_kernel<<<dim3(nkv, splits), AT_THREADS, smem, st>>>(q, kc, nq, nkv, hd, scale, pos, window, splits,
                                                             ctx_cap, scores, smax, ssum);
  cudaError_t e = cudaGetLastError();
  if (e) return (int)e;
  pv_kernel<<<dim3(nq, splits), AT_THREADS, 0, st>>>(vc, nq, nkv, hd, pos, window, splits, ctx_cap, scores,
                                                     smax, ssum, pacc, count, att);
  return (int)cudaGetLastError();
}
