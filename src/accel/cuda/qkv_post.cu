/* The q/k/v post step as a kernel of its own (qkv_post.cuh has the per-head work, which the
 * scores kernel can also do itself: dk_attention's `post`). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_launch.cuh"
#include "ck_ring.cuh"
#include "decode_kernels.h"
#include "qkv_post.cuh"

/* One block per head: blocks [0, nq) are query heads, [nq, nq + nkv) key/value heads
 * (qkv_post.cuh); the norm weights and rotation frequencies, which never change, are loaded
 * before the wait for the q|k|v product (as in residual_norm_kernel). */
__global__ void __launch_bounds__(QP_T) qkv_post_kernel(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd, int k_eq_v,
                                                       const float *qn, const float *kn,
                                                       const float *inv_freq, int trad, int v_norm,
                                                       float eps, const int *pos_p, int window,
                                                       dk_kv_layout kv, float *q_out, uint16_t *kc, uint16_t *vc,
                                                       dk_rows rw) {
  CK_DYNAMIC_SHARED(float, sv); /* [hd] */
  if (rw.slot) { /* a batched step's row z (kv_layout.h) */
    const int z = blockIdx.y;
    const int64_t sl = rw.slot[z];
    y += z * rw.in;
    q_out += z * rw.out;
    pos_p += z;
    if (kc) kc += sl * rw.kv, vc += sl * rw.kv;
  }
  int head = blockIdx.x, is_q = head < nq, kh = head - nq;
  qp_consts c;
  qp_load(c, is_q ? qn : kn, inv_freq, hd);
  ck_pdl_enter();
  const float *src = is_q ? y + (int64_t)head * hd : y + (int64_t)nq * hd + (int64_t)kh * hd;
  int pos = *pos_p;
  qp_head(src, ks, kstride, hd, c, eps, (float)pos, trad, sv);
  if (is_q) {
    qp_write_q(sv, hd, kv, kn, q_out + (int64_t)head * hd);
    return;
  }
  qp_write_kv(y, ks, kstride, nq, nkv, hd, kh, k_eq_v, v_norm, eps, window > 0 ? pos % ck_ring(window) : pos, kv, sv, kc, vc);
}

extern "C" int dk_qkv_post_rows(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd, int k_eq_v,
                                const float *qn, const float *kn, const float *inv_freq, int traditional, int v_norm,
                                float eps, const int *pos, int window, dk_kv_layout kv, float *q_out, uint16_t *kc,
                                uint16_t *vc, const dk_rows *rows, int nrows, void *stream) {
  if (hd > QP_T * QP_V || hd % 2 || !dk_kv_layout_ok(kv, nkv, hd, kc, vc, window) ||
      (kv.vr > 0 && (!kc || !k_eq_v || !v_norm || traditional)) || nrows < 1 || (nrows > 1 && (!rows || !rows->slot)) ||
      (rows && rows->slot && ks != 1) || nrows > 65535)
    return (int)cudaErrorInvalidValue;
  const dk_rows rw = rows && rows->slot ? *rows : dk_rows{NULL, 0, 0, 0};
  /* without kc (a KV-shared layer): the query heads only */
  return (int)ck_launch(qkv_post_kernel, dim3(kc ? nq + nkv : nq, rw.slot ? nrows : 1), QP_T, (size_t)hd * sizeof(float),
                        (cudaStream_t)stream, y, ks, kstride, nq, nkv, hd, k_eq_v, qn, kn, inv_freq, traditional, v_norm,
                        eps, pos, window, kv, q_out, kc, vc, rw);
}

extern "C" int dk_qkv_post(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd, int k_eq_v, const float *qn,
                           const float *kn, const float *inv_freq, int traditional, int v_norm, float eps,
                           const int *pos, int window, dk_kv_layout kv, float *q_out, uint16_t *kc,
                           uint16_t *vc, void *stream) {
  return dk_qkv_post_rows(y, ks, kstride, nq, nkv, hd, k_eq_v, qn, kn, inv_freq, traditional, v_norm, eps, pos, window, kv,
                          q_out, kc, vc, NULL, 1, stream);
}

CK_TIMELINE_SETTER(ck_tl_qkv_post)
