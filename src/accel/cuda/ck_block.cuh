/* Device helpers shared by the decoder's kernels (decode.cu, attention.cu, prefill.cu,
 * qmv_tc.cu): the bf16 rounding point, block-wide sum and max, GeGLU, and the RoPE rotation of
 * one head in shared memory — each with the reference path's rounding points
 * (docs/NUMERICS.md). */
#ifndef MLXRT_CK_BLOCK_CUH
#define MLXRT_CK_BLOCK_CUH

#include <math.h>

#include "ck_device.cuh"

/* A kernel's dynamic shared memory as name[] (in the host emulation of tests/gpu, a static
 * buffer: blocks run one at a time there). */
#ifdef CK_EMULATION
#define CK_DYNAMIC_SHARED(type, name) type *name = reinterpret_cast<type *>(emu_dyn_smem)
#else
#define CK_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

/* x rounded to bf16 (RNE), back as float */
static __device__ __forceinline__ float rb(float x) { return ck_bf16_to_f32(ck_f32_to_bf16(x)); }

/* Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result. */
static __device__ inline float block_sum(float v) {
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

/* Max over the block (same shape rules as block_sum). */
static __device__ inline float block_max(float v) {
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

/* N block reductions at once (two barriers instead of 2·N): v[i] becomes what block_sum /
 * block_max give for it — the same operations in the same order, so the same bits. */
struct ck_op_add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct ck_op_max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
/* ... with the N·32 floats of scratch given (shared memory the caller owns: a kernel whose
 * shared state must all be dynamic, as the host emulation of clusters needs) */
template <int N, typename Op>
static __device__ __forceinline__ void block_reduce_n_in(float (&v)[N], Op op, float identity, float *part) {
  int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
#pragma unroll
  for (int i = 0; i < N; i++)
    for (int o = 16; o > 0; o >>= 1) v[i] = op(v[i], __shfl_xor_sync(0xffffffffu, v[i], o));
  __syncthreads();
  if (l == 0)
#pragma unroll
    for (int i = 0; i < N; i++) part[i * 32 + w] = v[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; i++) {
    v[i] = l < nw ? part[i * 32 + l] : identity;
    for (int o = 16; o > 0; o >>= 1) v[i] = op(v[i], __shfl_xor_sync(0xffffffffu, v[i], o));
  }
}
template <int N, typename Op>
static __device__ void block_reduce_n(float (&v)[N], Op op, float identity) {
  __shared__ float part[N * 32];
  block_reduce_n_in(v, op, identity, part);
}
template <int N> static __device__ void block_sum_n(float (&v)[N]) { block_reduce_n(v, ck_op_add(), 0.0f); }
template <int N> static __device__ void block_max_n(float (&v)[N]) { block_reduce_n(v, ck_op_max(), -INFINITY); }

/* gelu_approx (tanh) op by op in bf16, as MLX computes it */
static __device__ __forceinline__ float ck_gelu_approx(float x) {
  const float c_sqrt = 0.796875f;    /* bf16(√(2/π)) */
  const float c_k = 0.044677734375f; /* bf16(0.044715) */
  float x3 = rb(__fmul_rn(__fmul_rn(x, x), x));
  float t = rb(__fadd_rn(x, rb(__fmul_rn(c_k, x3))));
  t = rb(__fmul_rn(c_sqrt, t));
  float th = rb(tanhf(t));
  return rb(__fmul_rn(rb(__fmul_rn(0.5f, x)), rb(__fadd_rn(1.0f, th))));
}
/* GeGLU of a gate and an up product (float32 sums), as bf16: gelu(bf16(g)) · bf16(u) */
static __device__ __forceinline__ uint16_t ck_geglu(float g, float u) {
  return ck_f32_to_bf16(__fmul_rn(ck_gelu_approx(rb(g)), rb(u)));
}

/* One pair j of the rotation below, with its frequency f (a zero frequency leaves it as it is). */
static __device__ __forceinline__ void rope_pair(float *sv, int j, int half, float f, float fpos, int trad) {
  if (f == 0.0f) return;
  float ang = __fmul_rn(fpos, f);
  float c = rb(cosf(ang)), s = rb(sinf(ang));
  int ia = trad ? 2 * j : j, ib = trad ? 2 * j + 1 : j + half;
  float a = sv[ia], b = sv[ib];
  sv[ia] = rb(__fsub_rn(rb(__fmul_rn(a, c)), rb(__fmul_rn(b, s))));
  sv[ib] = rb(__fadd_rn(rb(__fmul_rn(b, c)), rb(__fmul_rn(a, s))));
}
/* RoPE of one head held in shared memory sv[hd] at position fpos: each live frequency
 * (inv_freq[j] != 0; proportional partial RoPE leaves the rest) rotates its pair (rotate-half,
 * or adjacent when traditional) with cos/sin rounded to bf16 and every product and sum rounded.
 * The caller synchronizes before and after. */
static __device__ __forceinline__ void rope_pairs(float *sv, int hd, const float *inv_freq, float fpos, int trad) {
  const int half = hd / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) rope_pair(sv, j, half, inv_freq[j], fpos, trad);
}

#endif
