/* AVX-512 with BF16 and VBMI: mat-vec for affine 2/3/5/6-bit, the widths whose codes straddle
 * bytes. 8 codes live in `bits` bytes: one permute (VPERMB) spreads 8 packs into the 8
 * qwords, one multishift (VPMULTISHIFTQB) moves code j of each pack to byte j, so 64 codes
 * come out as bytes in element order; widened to 16 bits they map to bf16 (exact, ≤ 63)
 * through a 64-entry permute and meet x (bf16, exact, in order) in VDPBF16PS, which adds the
 * exact products into float32 lanes: lane i of a 32-code half covers elements 2i, 2i+1, so a
 * half is one group when gs = 32. Each row's 16 group scales are one vector; the bias term
 * is Σ_g b_g·Σx_g. VDPBF16PS counts inputs below 2^-126 as 0 (negligible for activations).
 * Measured: +20 % over the AVX-512 shift-based unpack for 3-bit; for 4-bit a
 * VDPBF16PS variant was slower than the AVX-512 float path, so 4/8-bit and the fp formats fall
 * back to the AVX-512 table. */
#pragma GCC target("avx512bf16,avx512vbmi")
#include <immintrin.h>

#include "accel/cpu/cpu_isa.h"

#define AI static inline __attribute__((always_inline))

static int mv_supports(const accel_spec *s) {
  return s->mode == ACCEL_MODE_AFFINE && s->bits != 4 && s->bits != 8 && s->cols % 64 == 0;
}

static const uint16_t LUT64[64] = { /* bf16 of 0..63 */
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
    0x4180, 0x4188, 0x4190, 0x4198, 0x41a0, 0x41a8, 0x41b0, 0x41b8,
    0x41c0, 0x41c8, 0x41d0, 0x41d8, 0x41e0, 0x41e8, 0x41f0, 0x41f8,
    0x4200, 0x4204, 0x4208, 0x420c, 0x4210, 0x4214, 0x4218, 0x421c,
    0x4220, 0x4224, 0x4228, 0x422c, 0x4230, 0x4234, 0x4238, 0x423c,
    0x4240, 0x4244, 0x4248, 0x424c, 0x4250, 0x4254, 0x4258, 0x425c,
    0x4260, 0x4264, 0x4268, 0x426c, 0x4270, 0x4274, 0x4278, 0x427c,
};

/* Up to 16 consecutive group parameters of a row as floats (masked: no over-read). */
AI __m512 params16(const uint8_t *p, accel_dtype dt, __mmask16 m) {
  if (dt == ACCEL_F32) return _mm512_maskz_loadu_ps(m, p);
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (dt == ACCEL_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void rows_vbmi(const cpu_mv *a, int64_t r, const int NR) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size, G = cols / gs;
  const int bits = s->bits;
  const size_t es = s->scales_dtype == ACCEL_F32 ? 4 : 2;
  uint8_t spread[64], shifts[64];
  for (int q = 0; q < 8; q++)
    for (int j = 0; j < 8; j++) {
      spread[8 * q + j] = (uint8_t)(j < bits ? q * bits + j : 0);
      shifts[8 * q + j] = (uint8_t)(j * bits);
    }
  const __m512i vspread = _mm512_loadu_si512(spread), vshift = _mm512_loadu_si512(shifts);
  const __m512i cmask = _mm512_set1_epi8((char)((1 << bits) - 1));
  const __mmask64 lmask = (__mmask64)((1ull << (8 * bits)) - 1ull); /* 8·bits bytes per 64 codes */
  const __m512i lut0 = _mm512_loadu_si512(LUT64), lut1 = _mm512_loadu_si512(LUT64 + 32);
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
    __m512 acc[4];
    for (int k = 0; k < NR; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t c = cs; c < ce; c += 64) {
      const __m512bh x0 = (__m512bh)_mm512_loadu_si512(xb + c), x1 = (__m512bh)_mm512_loadu_si512(xb + c + 32);
      for (int k = 0; k < NR; k++) {
        __m512i raw = _mm512_maskz_loadu_epi8(lmask, w[k] + c / 8 * bits);
        __m512i codes = _mm512_and_si512(
            _mm512_multishift_epi64_epi8(vshift, _mm512_permutexvar_epi8(vspread, raw)), cmask);
        __m512i c0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(codes));
        __m512i c1 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(codes, 1));
        __m512i q0 = bits == 6 ? _mm512_permutex2var_epi16(lut0, c0, lut1) : _mm512_permutexvar_epi16(c0, lut0);
        __m512i q1 = bits == 6 ? _mm512_permutex2var_epi16(lut0, c1, lut1) : _mm512_permutexvar_epi16(c1, lut0);
        if (gs == 32) { /* two groups per 64 codes: scale each half by its own lane */
          int64_t j = (c - cs) / 32;
          __m512 t0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)q0, x0);
          __m512 t1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)q1, x1);
          racc[k] = _mm512_fmadd_ps(t0, _mm512_permutexvar_ps(_mm512_set1_epi32((int)j), sv[k]), racc[k]);
          racc[k] = _mm512_fmadd_ps(t1, _mm512_permutexvar_ps(_mm512_set1_epi32((int)j + 1), sv[k]), racc[k]);
        } else {
          acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)q0, x0);
          acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)q1, x1);
          if ((c + 64 - cs) % gs == 0) { /* last block of a group */
            __m512i jv = _mm512_set1_epi32((int)((c - cs) / gs));
            racc[k] = _mm512_fmadd_ps(acc[k], _mm512_permutexvar_ps(jv, sv[k]), racc[k]);
            acc[k] = _mm512_setzero_ps();
          }
        }
      }
    }
  }
  for (int k = 0; k < NR; k++)
    a->y[r + k] = _mm512_reduce_add_ps(racc[k]) + _mm512_reduce_add_ps(bacc[k]);
}

static void matvec(const cpu_mv *a, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows_vbmi(a, r, 4);
  for (; r < r1; r++) rows_vbmi(a, r, 1);
}

/* x as bf16 (exact: it arrived as bf16), in element order, in the float buffer's space */
static void prep_x(const accel_spec *s, const float *x, float *xp) {
  uint16_t *h = (uint16_t *)(void *)xp;
  for (int64_t c = 0; c < s->cols; c++) h[c] = mx_f32_to_bf16(x[c]);
}

const cpu_isa_ops cpu_ops_avx512bf16 = {
    .name = "avx512bf16",
    .fallback = &cpu_ops_avx512,
    .mv_supports = mv_supports,
    .prep_x = prep_x,
    .matvec = matvec,
};
