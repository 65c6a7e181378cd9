/* Scores against a compressed K cache (kv_layout.h kfmt: planar3 / planar4 blocks of
 * src/accel/kv_codec.h) in the rotated domain: R is block-diagonal and the same for every key,
 * so q·x̂ = Σ_b n'_b · Σ_j (R q)_j · C[idx_j] over the head's 128-value blocks b. The query rows
 * are rotated once (pc_rotate_rows), after which a key costs one codebook lookup and one
 * multiply-add per value; keys are never decoded. Used by the decode scores pass (attention.cu)
 * and the prompt pass's attention over compressed K (prefill_attn_planar.cu). The tensor-core
 * forms (the prompt's tile kernel, prefill_attn_wg.cu, and the deep contexts' one pass,
 * attention_onepass_tma.cuh) instead form each value as fp16(n'·fp16(C)), a pair of values one
 * pair-table load and one HMUL2 (pc_stage_pairs, pc_hmul2), against a query rotated and rounded
 * to fp16. */
#ifndef MLXRT_CUDA_ATTENTION_PLANAR_CUH
#define MLXRT_CUDA_ATTENTION_PLANAR_CUH

#include <cuda_fp16.h>

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

/* Two fp16 values times the fp16 n' in both halves, each product rounded to fp16 (HMUL2; the
 * emulation forms the same exact product in float and rounds it once). */
__device__ __forceinline__ uint32_t pc_hmul2(uint32_t n2, uint32_t c2) {
#ifdef CK_EMULATION
  const float n = ck_f16_to_f32((uint16_t)n2);
  return (uint32_t)ck_f32_to_f16(n * ck_f16_to_f32((uint16_t)c2)) |
         (uint32_t)ck_f32_to_f16(n * ck_f16_to_f32((uint16_t)(c2 >> 16))) << 16;
#else
  const __half2 r = __hmul2(*reinterpret_cast<const __half2 *>(&n2), *reinterpret_cast<const __half2 *>(&c2));
  return *reinterpret_cast<const uint32_t *>(&r);
#endif
}

/* The pair table of a format: entry i holds two neighbouring values' codebook entries as fp16,
 * the even value's in the low half. planar3 (64 entries): i = the pair's two 2-bit code parts
 * (bits 0–3, the even value's low) | their two sign bits << 4 — the bits as a qs byte and a
 * signs byte hold them; planar4 (256): i = the qs byte. Threads of the block; the caller
 * synchronises before use. */
template <int KF>
__device__ __forceinline__ void pc_stage_pairs(const kvc_tables *t, uint32_t *pairs) {
  for (int i = threadIdx.x; i < (KF == 3 ? 64 : 256); i += blockDim.x) {
    int c0, c1;
    if (KF == 3)
      c0 = (i & 3) | ((i >> 4) & 1) << 2, c1 = ((i >> 2) & 3) | ((i >> 5) & 1) << 2;
    else
      c0 = i & 15, c1 = i >> 4;
    const float *cb = KF == 3 ? t->cb3 : t->cb4;
    pairs[i] = (uint32_t)ck_f32_to_f16(cb[c0]) | (uint32_t)ck_f32_to_f16(cb[c1]) << 16;
  }
}

/* A block's 8 values 8c … 8c + 7 (encoder lanes 2c, 2c + 1) as one code word: planar3 their qs
 * bytes (a 16-bit word) | their signs byte << 16, planar4 their four qs bytes. */
template <int KF>
__device__ __forceinline__ uint32_t pc_code8(const uint8_t *blk, int c) {
  if (KF == 3)
    return (uint32_t)*reinterpret_cast<const uint16_t *>(blk + KVC_P3_QS + 2 * c) | (uint32_t)blk[KVC_P3_SIGNS + c] << 16;
  return *reinterpret_cast<const uint32_t *>(blk + KVC_P4_QS + 4 * c);
}
/* The pair-table index (pc_stage_pairs) of values 2e, 2e + 1 of a code word (pc_code8). */
template <int KF>
__device__ __forceinline__ uint32_t pc_pair_index(uint32_t code, int e) {
  return KF == 3 ? ((code >> (4 * e)) & 15u) | ((code >> (16 + 2 * e)) & 3u) << 4 : (code >> (8 * e)) & 255u;
}

/* Values 8c … 8c + 7 of a block as four fp16 pairs in the rotated domain, fp16(n'·fp16(C)) each
 * (pairs: pc_stage_pairs). */
template <int KF>
__device__ __forceinline__ uint4 pc_values8(const uint8_t *blk, int c, const uint32_t *pairs) {
  const uint32_t n2 = (uint32_t)*reinterpret_cast<const uint16_t *>(blk) * 0x10001u, code = pc_code8<KF>(blk, c);
  return make_uint4(pc_hmul2(n2, pairs[pc_pair_index<KF>(code, 0)]), pc_hmul2(n2, pairs[pc_pair_index<KF>(code, 1)]),
                    pc_hmul2(n2, pairs[pc_pair_index<KF>(code, 2)]), pc_hmul2(n2, pairs[pc_pair_index<KF>(code, 3)]));
}

#endif
