/* AVX-512 BF16 mat-vec for the 4-bit formats (affine 4-bit, nvfp4, mxfp4): the codes' values
 * (0..15, or E2M1) and x are exact in bf16, so VDPBF16PS multiplies them exactly and adds
 * the products into float32 lanes, half the instructions of converting to float first.
 * 32 bytes = 64 codes per step: low nibbles (even elements) and high nibbles (odd) each fill
 * 32 16-bit lanes and map to bf16 through one 32-entry permute; prep_x stores x as bf16
 * de-interleaved per 64 (32 even, 32 odd), so float lane i covers elements 4i..4i+3 of the
 * step and belongs to group (c + 4i) / gs. Each row's 16 group scales are one vector; each
 * step scales its lanes by their group's lane (one permute), the affine bias term is
 * Σ_g b_g·Σx_g. (Inputs below 2^-126 count as 0 in VDPBF16PS: negligible for activations.)
 * Everything else falls back to the plain AVX-512 table. */
#pragma GCC target("avx512bf16")
#include <immintrin.h>

#include "accel/cpu/cpu_isa.h"

#define AI static inline __attribute__((always_inline))

static int mv_supports(const accel_spec *s) {
  return (s->mode == ACCEL_MODE_NVFP4 || s->mode == ACCEL_MODE_MXFP4 ||
          (s->mode == ACCEL_MODE_AFFINE && s->bits == 4)) &&
         s->cols % 64 == 0;
}

static void prep_x(const accel_spec *s, const float *x, float *xp) {
  uint16_t *h = (uint16_t *)(void *)xp; /* xp has room for cols floats; bf16 needs half */
  for (int64_t b = 0; b < s->cols; b += 64)
    for (int i = 0; i < 32; i++) {
      h[b + i] = mx_f32_to_bf16(x[b + 2 * i]);
      h[b + 32 + i] = mx_f32_to_bf16(x[b + 2 * i + 1]);
    }
}

/* bf16 bit patterns of the code values (entries 16..31 unused) */
static uint16_t LUT_AFFINE[32], LUT_FP4[32];
static void init_luts(void) {
  static int done;
  if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) return;
  for (int i = 0; i < 16; i++) {
    LUT_AFFINE[i] = mx_f32_to_bf16((float)i);
    LUT_FP4[i] = mx_f32_to_bf16(MX_FP4_LUT[i]);
  }
  __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

AI __m512 params16(const uint8_t *p, accel_dtype dt, __mmask16 m) {
  if (dt == ACCEL_F32) return _mm512_maskz_loadu_ps(m, p);
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (dt == ACCEL_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 group scales of a row: bf16/f16/f32 (affine), E4M3 (nvfp4) or E8M0 (mxfp4) */
AI __m512 scales16(const cpu_mv *a, int64_t r, int64_t g0, __mmask16 m) {
  const accel_spec *s = a->s;
  const uint8_t *ps = a->sc + (size_t)r * a->srow;
  if (s->mode == ACCEL_MODE_AFFINE) {
    size_t es = s->scales_dtype == ACCEL_F32 ? 4 : 2;
    return params16(ps + (size_t)g0 * es, s->scales_dtype, m);
  }
  __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, ps + g0));
  if (s->mode == ACCEL_MODE_NVFP4) { /* E4M3 through f16 bits: ((int16)(b << 8) >> 1) & 0xbf80 */
    __m256i b16 = _mm512_cvtepi32_epi16(v);
    __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b16, 8), 1), _mm256_set1_epi16((short)0xbf80));
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
  }
  __m512i f = _mm512_slli_epi32(v, 23); /* E8M0; byte 0 is 2^-127 */
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(f);
}

AI void rows_bf(const cpu_mv *a, int64_t r, const int NR) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size, G = cols / gs;
  const int affine = s->mode == ACCEL_MODE_AFFINE;
  const int shift = gs == 16 ? 4 : gs == 32 ? 5 : gs == 64 ? 6 : 7;
  const size_t es = affine ? (s->scales_dtype == ACCEL_F32 ? 4 : 2) : 1;
  const __m512i lut = _mm512_loadu_si512(affine ? LUT_AFFINE : LUT_FP4);
  const __m512i m4 = _mm512_set1_epi16(15);
  const __m512i lane4 = _mm512_set_epi32(60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
  const uint16_t *xb = (const uint16_t *)(const void *)a->x;
  __m512 racc[4], bacc[4];
  const uint8_t *w[4];
  for (int k = 0; k < NR; k++) {
    racc[k] = bacc[k] = _mm512_setzero_ps();
    w[k] = a->w + (size_t)(r + k) * a->wrow;
  }
  for (int64_t g0 = 0; g0 < G; g0 += 16) {
    const int64_t ng = G - g0 < 16 ? G - g0 : 16;
    const __mmask16 gm = (__mmask16)((1u << ng) - 1u);
    __m512 sv[4];
    for (int k = 0; k < NR; k++) {
      sv[k] = scales16(a, r + k, g0, gm);
      if (affine) {
        const uint8_t *pb = a->bi + (size_t)(r + k) * a->srow + (size_t)g0 * es;
        bacc[k] = _mm512_fmadd_ps(params16(pb, s->scales_dtype, gm), _mm512_maskz_loadu_ps(gm, a->xg + g0), bacc[k]);
      }
    }
    const int64_t cs = g0 * gs, ce = (g0 + ng) * gs;
    for (int64_t c = cs; c < ce; c += 64) {
      const __m512i idx = _mm512_srli_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)(c - cs)), lane4), shift);
      const __m512bh xl = (__m512bh)_mm512_loadu_si512(xb + c), xh = (__m512bh)_mm512_loadu_si512(xb + c + 32);
      for (int k = 0; k < NR; k++) {
        __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(w[k] + c / 2)));
        __m512i ql = _mm512_permutexvar_epi16(_mm512_and_si512(v, m4), lut);
        __m512i qh = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), lut);
        __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)ql, xl);
        t = _mm512_dpbf16_ps(t, (__m512bh)qh, xh);
        racc[k] = _mm512_fmadd_ps(t, _mm512_permutexvar_ps(idx, sv[k]), racc[k]);
      }
    }
  }
  for (int k = 0; k < NR; k++)
    a->y[r + k] = _mm512_reduce_add_ps(racc[k]) + _mm512_reduce_add_ps(bacc[k]);
}

static void matvec(const cpu_mv *a, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows_bf(a, r, 4);
  for (; r < r1; r++) rows_bf(a, r, 1);
}

static void prep_x_init(const accel_spec *s, const float *x, float *xp) {
  init_luts(); /* prep_x runs on the calling thread before any matvec task */
  prep_x(s, x, xp);
}

const cpu_isa_ops cpu_ops_avx512bf16 = {
    .name = "avx512bf16",
    .fallback = &cpu_ops_avx512,
    .mv_supports = mv_supports,
    .prep_x = prep_x_init,
    .matvec = matvec,
};
