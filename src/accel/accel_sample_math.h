/* The scalar arithmetic of the decoders' token selection (accel_sample.h), written once for the
 * C reference (accel_sample.c) and the CUDA kernels (cuda/sample.cu): the same float32
 * operations in the same order, products and sums rounded separately (__fmul_rn / __fadd_rn on
 * the device, where nvcc would otherwise fuse them into FMAs; the C build is ISO C11, which
 * does not contract), so both sides compute bit-identical weights. Included by C and CUDA. */
#ifndef MLXRT_ACCEL_SAMPLE_MATH_H
#define MLXRT_ACCEL_SAMPLE_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define SPM_FN static __device__ __forceinline__
#define SPM_MUL(a, b) __fmul_rn((a), (b))
#define SPM_ADD(a, b) __fadd_rn((a), (b))
#define SPM_SUB(a, b) __fsub_rn((a), (b))
SPM_FN uint32_t spm_bits(float f) { return __float_as_uint(f); }
SPM_FN float spm_float_bits(uint32_t u) { return __uint_as_float(u); }
SPM_FN uint64_t spm_f2u64(float f) { return (uint64_t)__float2ull_rz(f); }
#else
#include <string.h>
#define SPM_FN static inline
#define SPM_MUL(a, b) ((a) * (b))
#define SPM_ADD(a, b) ((a) + (b))
#define SPM_SUB(a, b) ((a) - (b))
SPM_FN uint32_t spm_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
SPM_FN float spm_float_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
SPM_FN uint64_t spm_f2u64(float f) { return (uint64_t)f; } /* f in [0, 2^41]: truncation */
#endif

/* Weights are fixed point with this many fraction bits (a token with less than 2^-40 of the
 * most probable one's weight counts as 0); integer sums are exact in any order. */
#define SPM_FIX_BITS 40
#define SPM_NEG_INF_KEY 0x007FFFFFu /* key of -inf, the smallest key after sanitizing */

/* The token a selection reports for a logits row holding NaN or ±inf (accel_sample.h, step 0):
 * -2 - the lowest such id, so -1 (no token) and real ids stay distinct. */
#define ACCEL_TOKEN_NONFINITE(id) (-2 - (int32_t)(id))
#define ACCEL_NONFINITE_ID(token) (-2 - (int32_t)(token))

/* NaN → -inf, -0 → +0, +inf → the largest finite float (an order-preserving sanitization: every
 * remaining value is finite or -inf, and each has one key). */
SPM_FN float spm_sanitize(float x) {
  uint32_t u = spm_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return spm_float_bits(0xFF800000u);
  if (u == 0x80000000u) return 0.0f;
  if (u == 0x7F800000u) return spm_float_bits(0x7F7FFFFFu);
  return x;
}

/* Unsigned order of the keys = numeric order of the (sanitized) floats; a bijection. */
SPM_FN uint32_t spm_key(float f) {
  uint32_t u = spm_bits(f);
  return u ^ ((0u - (u >> 31)) | 0x80000000u);
}
SPM_FN float spm_unkey(uint32_t k) { return spm_float_bits(k ^ ((0u - ((~k) >> 31)) | 0x80000000u)); }

/* e^x for x <= 0 (x < -87 and -inf give 0): Cody-Waite reduction and a degree-6 polynomial,
 * 2^n built in the exponent bits (the same function as src/mlx/sampler.c's exp_neg). */
SPM_FN float spm_exp_neg(float x) {
  if (!(x >= -87.0f)) return 0.0f;
  const float t = SPM_MUL(x, 1.44269504088896341f);
  const float n = SPM_SUB(SPM_ADD(t, 12582912.0f), 12582912.0f); /* round to nearest */
  const float r = SPM_SUB(SPM_SUB(x, SPM_MUL(n, 0.693359375f)), SPM_MUL(n, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = SPM_ADD(SPM_MUL(p, r), 1.3981999507e-3f);
  p = SPM_ADD(SPM_MUL(p, r), 8.3334519073e-3f);
  p = SPM_ADD(SPM_MUL(p, r), 4.1665795894e-2f);
  p = SPM_ADD(SPM_MUL(p, r), 1.6666665459e-1f);
  p = SPM_ADD(SPM_MUL(p, r), 5.0000001201e-1f);
  p = SPM_ADD(SPM_ADD(SPM_MUL(SPM_MUL(p, r), r), r), 1.0f);
  const float scale = spm_float_bits((uint32_t)((int32_t)n + 127) << 23);
  return SPM_MUL(p, scale);
}

/* Fixed-point weight of a sanitized logit x against the maximum m: e^((x - m)·inv_t) · 2^40,
 * truncated; -inf weighs 0. inv_t = 1 gives the untempered (top-p) weight. */
SPM_FN uint64_t spm_weight(float x, float m, float inv_t) {
  if (spm_bits(x) == 0xFF800000u) return 0;
  const float w = spm_exp_neg(SPM_MUL(SPM_SUB(x, m), inv_t));
  return spm_f2u64(SPM_MUL(w, 1099511627776.0f)); /* 2^40 */
}

/* floor(x53 · total / 2^53) for x53 < 2^53: the draw's point in [0, total). */
SPM_FN uint64_t spm_scale_draw(uint64_t x53, uint64_t total) {
  const uint64_t a0 = x53 & 0xFFFFFFFFu, a1 = x53 >> 32, b0 = total & 0xFFFFFFFFu, b1 = total >> 32;
  const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const uint64_t mid = (p00 >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu);
  const uint64_t hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  const uint64_t lo = (mid << 32) | (p00 & 0xFFFFFFFFu);
  return (hi << 11) | (lo >> 53);
}

#endif
