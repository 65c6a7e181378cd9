/* AVX-512 BF16 mat-vec for affine 4-bit: the codes (0..15) and x are exact in bf16, so
 * VDPBF16PS multiplies them exactly and adds the products into float32 lanes, half the
 * instructions of converting the codes to float first. 32 bytes = 64 codes per step: low
 * nibbles (even elements) and high nibbles (odd) each fill 32 16-bit lanes and map to bf16
 * through one 32-entry permute; prep_x stores x as bf16 de-interleaved per 64 (32 even,
 * 32 odd), so float lane i covers elements 4i..4i+3 of the step and belongs to group
 * (c + 4i) / gs. Each row's 16 group scales are one vector; each step scales its lanes by
 * their group's lane (one permute); the bias term is Σ_g b_g·Σx_g. VDPBF16PS counts inputs
 * below 2^-126 as 0 (negligible for activations). Other formats fall back to the AVX-512
 * table. */
#pragma GCC target("avx512bf16")
#include <immintrin.h>

#include "accel/cpu/cpu_isa.h"

#define AI static inline __attribute__((always_inline))

/* Affine only: on a 16-core Sapphire Rapids (docs/PERF.md) this path was faster than the float
 * one for affine 4-bit (+14 % on one core) but slower for nvfp4/mxfp4 (-13 %), whose AVX-512
 * float path already decodes with one permute. */
static int mv_supports(const accel_spec *s) {
  return s->mode == ACCEL_MODE_AFFINE && s->bits == 4 && s->cols % 64 == 0;
}

static void prep_x(const accel_spec *s, const float *x, float *xp) {
  uint16_t *h = (uint16_t *)(void *)xp; /* xp has room for cols floats; bf16 needs half */
  for (int64_t b = 0; b < s->cols; b += 64)
    for (int i = 0; i < 32; i++) {
      h[b + i] = mx_f32_to_bf16(x[b + 2 * i]);
      h[b + 32 + i] = mx_f32_to_bf16(x[b + 2 * i + 1]);
    }
}

/* bf16 bit patterns of 0..15 (entries 16..31 unused by the permute) */
static const uint16_t LUT_AFFINE[32] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
                                        0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};

AI __m512 params16(const uint8_t *p, accel_dtype dt, __mmask16 m) {
  if (dt == ACCEL_F32) return _mm512_maskz_loadu_ps(m, p);
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (dt == ACCEL_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void rows_bf(const cpu_mv *a, int64_t r, const int NR) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size, G = cols / gs;
  const int shift = gs == 16 ? 4 : gs == 32 ? 5 : gs == 64 ? 6 : 7;
  const size_t es = s->scales_dtype == ACCEL_F32 ? 4 : 2;
  const __m512i lut = _mm512_loadu_si512(LUT_AFFINE);
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
      const uint8_t *ps = a->sc + (size_t)(r + k) * a->srow + (size_t)g0 * es;
      const uint8_t *pb = a->bi + (size_t)(r + k) * a->srow + (size_t)g0 * es;
      sv[k] = params16(ps, s->scales_dtype, gm);
      bacc[k] = _mm512_fmadd_ps(params16(pb, s->scales_dtype, gm), _mm512_maskz_loadu_ps(gm, a->xg + g0), bacc[k]);
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

const cpu_isa_ops cpu_ops_avx512bf16 = {
    .name = "avx512bf16",
    .fallback = &cpu_ops_avx512,
    .mv_supports = mv_supports,
    .prep_x = prep_x,
    .matvec = matvec,
};
