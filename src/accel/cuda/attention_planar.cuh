/* Scores against a compressed K cache (kv_layout.h kfmt: planar3 / planar4 blocks of
 * src/accel/kv_codec.h) in the rotated domain: R is block-diagonal and the same for every key,
 * so q·x̂ = Σ_b n'_b · Σ_j (R q)_j · C[idx_j] over the head's 128-value blocks b. The query rows
 * are rotated once (pc_rotate_rows), after which a key costs one codebook lookup and one
 * multiply-add per value; keys are never decoded. Used by the decode scores pass (attention.cu)
 * and the prompt pass's attention over compressed K (prefill_attn_planar.cu). */
#ifndef MLXRT_CUDA_ATTENTION_PLANAR_CUH
#define MLXRT_CUDA_ATTENTION_PLANAR_CUH

#include "accel/kv_codec_math.h"
#include "ck_device.cuh"

/* Rows of shared q values (n values, whole 128-value blocks) turned by R in place, each pair with
 * kvc_rotate's operations (kv_codec_math.h), so a row equals the C reference's kvc_rotate_q of it.
 * Every thread of the block calls it; the caller synchronises before and after. */
__device__ __forceinline__ void pc_rotate_rows(const kvc_tables *t, float *qs, int n) {
  for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
    const int j = 2 * i, p = (j % KVC_BLOCK) / 2;
    float r0, r1;
    kvc_rotate(t->cos[p], t->sin[p], qs[j], qs[j + 1], &r0, &r1);
    qs[j] = r0, qs[j + 1] = r1;
  }
}

/* The codebook of a format (3 or 4 bits) into shared memory cb[16] (threads of the block; the
 * caller synchronises before use). */
__device__ __forceinline__ void pc_stage_codebook(const kvc_tables *t, int bits, float *cb) {
  if (threadIdx.x < 16) cb[threadIdx.x] = bits == 3 ? (threadIdx.x < 8 ? t->cb3[threadIdx.x] : 0.0f) : t->cb4[threadIdx.x];
}

/* This lane's share of the dot products of KPI keys (kp: each key's row of this KV head, hd / 128
 * blocks of KF's format) with the REP rotated query rows in qs ([REP][hd] floats): lane l takes
 * values 4l..4l+3 of every block (the encoder's lanes), the block's partial scaled by its n'.
 * A warp sum completes each (at_step_score). */
template <int REP, int KPI, int KF>
__device__ __forceinline__ void pc_key_dots(const uint8_t *const (&kp)[KPI], const float *qs, int hd, int lane,
                                            const float *cb, float (&dk)[KPI][REP]) {
  static_assert(KF == 3 || KF == 4, "planar3 or planar4");
  constexpr int BB = KF == 3 ? KVC_P3_BYTES : KVC_P4_BYTES;
#pragma unroll
  for (int u = 0; u < KPI; u++)
#pragma unroll
    for (int r = 0; r < REP; r++) dk[u][r] = 0.0f;
  for (int b = 0; b < hd / KVC_BLOCK; b++) {
    float c[KPI][4], nn[KPI];
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      const uint8_t *blk = kp[u] + b * BB;
      nn[u] = ck_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
      int code[4];
      if (KF == 3) {
        const unsigned qb = blk[KVC_P3_QS + lane], sg = (unsigned)blk[KVC_P3_SIGNS + lane / 2] >> (4 * (lane & 1));
#pragma unroll
        for (int i = 0; i < 4; i++) code[i] = (int)(((qb >> (2 * i)) & 3u) | ((sg >> i) & 1u) << 2);
      } else {
        const unsigned b0 = blk[KVC_P4_QS + 2 * lane], b1 = blk[KVC_P4_QS + 2 * lane + 1];
        code[0] = (int)(b0 & 15u), code[1] = (int)(b0 >> 4), code[2] = (int)(b1 & 15u), code[3] = (int)(b1 >> 4);
      }
#pragma unroll
      for (int i = 0; i < 4; i++) c[u][i] = cb[code[i]];
    }
#pragma unroll
    for (int r = 0; r < REP; r++) {
      const float4 qv = *(const float4 *)(qs + r * hd + b * KVC_BLOCK + 4 * lane);
#pragma unroll
      for (int u = 0; u < KPI; u++) {
        float part = qv.x * c[u][0];
        part = fmaf(qv.y, c[u][1], part);
        part = fmaf(qv.z, c[u][2], part);
        part = fmaf(qv.w, c[u][3], part);
        dk[u][r] = fmaf(nn[u], part, dk[u][r]);
      }
    }
  }
}

#endif
