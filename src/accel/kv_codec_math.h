/* The float arithmetic of the planar3 / planar4 K-cache codec (kv_codec.h), written once for the
 * C reference (kv_codec.c) and the CUDA encoder (cuda/kv_codec.cu), so that both write the same
 * bytes: the same float32 operations in the same order, every product, sum, quotient and
 * square root rounded on its own (__fmul_rn & co. on the device, where nvcc would otherwise
 * fuse a product and a sum into an FMA; kv_codec.c and the kernel's host emulation are built
 * with -ffp-contract=off).
 *
 * The encoder's work is cut into 32 lanes of 4 consecutive values — lane l holds values
 * 4l..4l+3, i.e. rotation pairs 2l and 2l+1 — which is one warp per 128-value block on the
 * device. Each of the two block sums (‖x‖² and ‖C[idx]‖²) is a lane's 4 terms added left to
 * right, then the 32 lane sums folded in halves (p[i] += p[i+16], then +8, +4, +2, +1): the
 * order in which a warp's xor-shuffle reduction adds. Included by C and CUDA. */
#ifndef MLXRT_ACCEL_KV_CODEC_MATH_H
#define MLXRT_ACCEL_KV_CODEC_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define KVC_FN static __device__ __forceinline__
#define KVC_MUL(a, b) __fmul_rn((a), (b))
#define KVC_ADD(a, b) __fadd_rn((a), (b))
#define KVC_SUB(a, b) __fsub_rn((a), (b))
#define KVC_DIV(a, b) __fdiv_rn((a), (b))
#define KVC_SQRT(a) __fsqrt_rn(a)
KVC_FN uint16_t kvc_f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
#else
#include <math.h>

#include "base/bf16.h"
#define KVC_FN static inline
#define KVC_MUL(a, b) ((a) * (b))
#define KVC_ADD(a, b) ((a) + (b))
#define KVC_SUB(a, b) ((a) - (b))
#define KVC_DIV(a, b) ((a) / (b))
#define KVC_SQRT(a) sqrtf(a)
KVC_FN uint16_t kvc_f32_to_f16(float f) { return mx_f32_to_f16(f); }
#endif

#define KVC_BLOCK 128        /* values per block */
#define KVC_PAIRS 64         /* rotation pairs per block (the same 64 angles for every block) */
#define KVC_LANES 32         /* lanes of 4 values */
#define KVC_NORM_EPS 1e-10f  /* a block (or a code vector) at most this long counts as zero */

/* Byte layouts (little-endian fp16 norm first). planar3: norm, qs[32] (the low 2 bits of value
 * j's code at bits 2(j mod 4) of byte j/4), signs[16] (its high bit at bit j mod 8 of byte j/8).
 * planar4: norm, rnorm (always 0), qs[64] (value j's code in byte j/2, even j in the low nibble). */
#define KVC_P3_BYTES 50
#define KVC_P3_QS 2
#define KVC_P3_SIGNS 34
#define KVC_P4_BYTES 68
#define KVC_P4_RNORM 2
#define KVC_P4_QS 4

/* What the CUDA encoder reports for a block it did not write (ORed into its flags word). */
#define KVC_FLAG_NONFINITE 1u /* a NaN or an infinity among the block's values */
#define KVC_FLAG_RANGE 2u     /* the corrected norm is beyond fp16's range */
#define KVC_FLAG_NO_TABLES 4u /* the tables were never uploaded to the device */

#define KVC_TABLES_MAGIC 0x6b766331u

/* Everything the encoder reads besides the values: the rotation (θ_p as float cos and sin) and,
 * per format, the codebook in ascending order (a code is its index), each entry squared, and
 * the midpoints between neighbours, (C[k] + C[k+1]) · 0.5 in float. Built by kv_codec.c
 * (kvc_tables_get); the CUDA side uploads that same table. */
typedef struct kvc_tables {
  uint32_t magic; /* KVC_TABLES_MAGIC once built */
  float cos[KVC_PAIRS], sin[KVC_PAIRS];
  float cb3[8], sq3[8], mid3[7];
  float cb4[16], sq4[16], mid4[15];
} kvc_tables;

/* ((a + b) + c) + d */
KVC_FN float kvc_add4(float a, float b, float c, float d) { return KVC_ADD(KVC_ADD(KVC_ADD(a, b), c), d); }

/* A lane's part of ‖x‖². */
KVC_FN float kvc_lane_sumsq(const float x[4]) {
  return kvc_add4(KVC_MUL(x[0], x[0]), KVC_MUL(x[1], x[1]), KVC_MUL(x[2], x[2]), KVC_MUL(x[3], x[3]));
}

/* x / n, or 0 for a block whose norm is at most KVC_NORM_EPS (the zero vector encodes as u = 0) */
KVC_FN float kvc_unit(float x, float n) { return n > KVC_NORM_EPS ? KVC_DIV(x, n) : 0.0f; }

/* The pair rotation R_p: r0 = c·a − s·b, r1 = s·a + c·b. */
KVC_FN void kvc_rotate(float c, float s, float a, float b, float *r0, float *r1) {
  *r0 = KVC_SUB(KVC_MUL(c, a), KVC_MUL(s, b));
  *r1 = KVC_ADD(KVC_MUL(s, a), KVC_MUL(c, b));
}

/* The nearest centroid's code: the number of midpoints strictly below r, so a value exactly on
 * a midpoint takes the lower centroid (and ±0 the one below the zero midpoint). */
KVC_FN int kvc_nearest(float r, const float *mid, int nmid) {
  int k = 0;
  for (int i = 0; i < nmid; i++) k += r > mid[i];
  return k;
}

/* A lane's codes (values 4l..4l+3 of x, block norm n) and its part of ‖C[idx]‖². bits: 3 or 4. */
KVC_FN float kvc_lane_codes(const kvc_tables *t, int bits, int lane, const float x[4], float n, int code[4]) {
  const float *mid = bits == 3 ? t->mid3 : t->mid4, *sq = bits == 3 ? t->sq3 : t->sq4;
  const int nmid = bits == 3 ? 7 : 15;
  float r[4];
  for (int h = 0; h < 2; h++) {
    const int p = 2 * lane + h;
    kvc_rotate(t->cos[p], t->sin[p], kvc_unit(x[2 * h], n), kvc_unit(x[2 * h + 1], n), &r[2 * h], &r[2 * h + 1]);
  }
  for (int i = 0; i < 4; i++) code[i] = kvc_nearest(r[i], mid, nmid);
  return kvc_add4(sq[code[0]], sq[code[1]], sq[code[2]], sq[code[3]]);
}

/* The stored norm: fp16(n / ‖C[idx]‖) (n itself when ‖C[idx]‖ ≤ KVC_NORM_EPS), from csq = ‖C[idx]‖². */
KVC_FN uint16_t kvc_norm_half(float n, float csq) {
  const float cn = KVC_SQRT(csq);
  return kvc_f32_to_f16(cn > KVC_NORM_EPS ? KVC_DIV(n, cn) : n);
}

/* The fp16 norm is finite (an infinity means n' overflowed fp16: the block is rejected). */
KVC_FN int kvc_half_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

/* planar3: a lane's qs byte (the low 2 bits of its 4 codes) and its half of a signs byte (4 bits). */
KVC_FN uint8_t kvc_pack3_qs(const int c[4]) {
  return (uint8_t)((c[0] & 3) | (c[1] & 3) << 2 | (c[2] & 3) << 4 | (c[3] & 3) << 6);
}
KVC_FN uint8_t kvc_pack3_signs(const int c[4]) {
  return (uint8_t)((c[0] >> 2) | (c[1] >> 2) << 1 | (c[2] >> 2) << 2 | (c[3] >> 2) << 3);
}
/* planar4: two codes in one byte, the even value's in the low nibble. */
KVC_FN uint8_t kvc_pack4(int even, int odd) { return (uint8_t)(even | odd << 4); }

#endif
