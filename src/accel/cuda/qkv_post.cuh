/* The q/k/v post step of one head on a block of QP_T threads, with the reference path's
 * rounding points: rmsnorm with weight (q, k), RoPE, the K and V cache writes (V through the
 * weightless rmsnorm when v_norm). Used by qkv_post_kernel (decode.cu: one block per head) and
 * by the scores kernel when it makes its own q rows and, in the split holding the new
 * position, that position's K and V (attention.cu, dk_attention's `post`): the same
 * operations in the same order, so the same bits. A thread owns values t + k·QP_T (k < QP_V)
 * and rotation pairs likewise. */
#ifndef MLXRT_CUDA_QKV_POST_CUH
#define MLXRT_CUDA_QKV_POST_CUH

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "kv_codec_warp.cuh"
#include "kv_layout.h"

#define QP_T 128
#define QP_V 8 /* head dims up to 1024, as the decoder accepts */

/* A mat-vec output whose k range was split over ks blocks: the partial sums at p, p + kstride,
 * … added in split order (deterministic). */
static __device__ __forceinline__ float ysum(const float *p, int ks, int64_t kstride) {
  float v = p[0];
  for (int s = 1; s < ks; s++) v += p[(int64_t)s * kstride];
  return v;
}

/* This thread's norm weights and rotation frequencies (they never change: loaded before the
 * wait for the product). */
struct qp_consts {
  float w[QP_V], fr[QP_V / 2];
};
static __device__ __forceinline__ void qp_load(qp_consts &c, const float *w, const float *inv_freq, int hd) {
#pragma unroll
  for (int k = 0; k < QP_V; k++) {
    int i = threadIdx.x + k * QP_T;
    c.w[k] = i < hd ? w[i] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < QP_V / 2; k++) {
    int j = threadIdx.x + k * QP_T;
    c.fr[k] = j < hd / 2 ? inv_freq[j] : 0.0f;
  }
}

/* The block sum the post step uses: block_sum, or (qp_sum_in) the same operations in the same
 * order through scratch the caller owns (a kernel whose shared state must all be dynamic). */
struct qp_sum {
  __device__ float operator()(float v) const { return block_sum(v); }
};
struct qp_sum_in {
  float *part; /* 32 floats of shared memory */
  __device__ float operator()(float v) const {
    float a[1] = {v};
    block_reduce_n_in<1>(a, ck_op_add(), 0.0f, part);
    return a[0];
  }
};

/* sv[hd] (shared) = RoPE(rmsnorm(src) · w) at fpos. Starts and ends with the block in step
 * (ends with a barrier). */
template <typename Sum = qp_sum>
static __device__ __forceinline__ void qp_head(const float *src, int ks, int64_t kstride, int hd, const qp_consts &c,
                                               float eps, float fpos, int trad, float *sv, Sum sum = Sum()) {
  float yv[QP_V], ss = 0.0f;
#pragma unroll
  for (int k = 0; k < QP_V; k++) {
    int i = threadIdx.x + k * QP_T;
    yv[k] = i < hd ? rb(ysum(src + i, ks, kstride)) : 0.0f;
    ss = fmaf(yv[k], yv[k], ss);
  }
  ss = sum(ss);
  float r = 1.0f / sqrtf(ss / (float)hd + eps);
#pragma unroll
  for (int k = 0; k < QP_V; k++) {
    int i = threadIdx.x + k * QP_T;
    if (i < hd) sv[i] = rb(__fmul_rn(rb(__fmul_rn(yv[k], r)), c.w[k]));
  }
  __syncthreads();
  /* rotation of pair j: (j, j + hd/2), or (2j, 2j + 1) when traditional; a zero frequency
   * leaves the pair as it is (proportional partial rotation) */
  const int half = hd / 2;
#pragma unroll
  for (int k = 0; k < QP_V / 2; k++) {
    int j = threadIdx.x + k * QP_T;
    if (j < half) rope_pair(sv, j, half, c.fr[k], fpos, trad);
  }
  __syncthreads();
}

/* KV head kh's cache rows at slot (kv_layout.h): K from sv (qp_head of its k row), V from v's own
 * row of y (the raw k row when k_eq_v), through the weightless rmsnorm when v_norm. With K from V
 * (kv.vr > 0, vc == kc) the head's row holds K at the moved dims and V at the others, and V's
 * moved dims go to the tail: K's unmoved dims are bf16(V·k_norm), never stored. With a compressed
 * K (kv.kfmt) the head's K goes into its codec blocks at slot · kv.kps bytes, V to its plain row. */
template <typename Sum = qp_sum>
static __device__ __forceinline__ void qp_write_kv(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd,
                                                   int kh, int k_eq_v, int v_norm, float eps, int64_t slot,
                                                   dk_kv_layout kv, const float *sv, uint16_t *kc, uint16_t *vc,
                                                   Sum sum = Sum()) {
  const int64_t kvd = (int64_t)nkv * hd;
  if (kv.kfmt)
    kvc_encode_head(kv.kt, kv.kfmt, sv, hd,
                    (uint8_t *)kc + slot * kv.kps + (int64_t)kh * (hd / KVC_BLOCK) * dk_kv_block_bytes(kv.kfmt),
                    kv.kflags);
  uint16_t *row = kc + slot * kv.ps, *kd = row + (int64_t)kh * hd, *vrow = vc + slot * kv.ps;
  const float *vs = k_eq_v ? y + (int64_t)nq * hd + (int64_t)kh * hd : y + (int64_t)nq * hd + kvd + (int64_t)kh * hd;
  float rv = 1.0f;
  if (v_norm) {
    float s2 = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      float v = rb(ysum(vs + i, ks, kstride));
      s2 = fmaf(v, v, s2);
    }
    s2 = sum(s2);
    rv = 1.0f / sqrtf(s2 / (float)hd + eps);
  }
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float v = rb(ysum(vs + i, ks, kstride));
    const uint16_t vb = ck_f32_to_bf16(v_norm ? __fmul_rn(v, rv) : v);
    if (kv.vr > 0 && !dk_kv_moved(kv, hd, i)) {
      kd[i] = vb;
    } else {
      if (!kv.kfmt) kd[i] = ck_f32_to_bf16(sv[i]);
      vrow[dk_kv_vcol(kv, nkv, hd, kh, i)] = vb;
    }
  }
}

/* A query head's row out of sv: with K from V the unmoved dims carry k_norm (a float product, the
 * attention rounds q·bf16(scale) to bf16 after it), so Σ q·K over them is Σ (q·k_norm)·V. */
static __device__ __forceinline__ void qp_write_q(const float *sv, int hd, dk_kv_layout kv, const float *kn,
                                                  float *q_out) {
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    q_out[i] = kv.vr > 0 && !dk_kv_moved(kv, hd, i) ? __fmul_rn(sv[i], kn[i]) : sv[i];
}

#endif
