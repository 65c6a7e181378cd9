/* AVX-512 (F/BW/VL/DQ) kernels. Mat-vec keeps x in float and decodes weights in registers:
 * 4-bit formats read 16 bytes = 32 codes, low nibbles (even elements) and high nibbles (odd
 * elements) each fill 16 lanes, so prep_x stores x de-interleaved per 32 (16 even, 16 odd).
 * Four rows run together (x loads shared, independent FMA chains). Affine groups use
 * s·Σq·x + b·Σx; fp groups s·Σv·x. Other affine widths (2/3/5/6) unpack 8 codes from `bits`
 * bytes with a variable 64-bit shift. Loads are unaligned or masked (no over-read). */
#include <immintrin.h>

#include "accel/cpu/cpu_isa.h"

#define AI static inline __attribute__((always_inline))

static const float FP4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static int fourbit(const accel_spec *s) {
  return s->mode != ACCEL_MODE_DENSE && s->bits == 4;
}

static int mv_supports(const accel_spec *s) {
  if (s->mode == ACCEL_MODE_DENSE) return 1;
  return s->cols % 32 == 0; /* every quantized format except nvfp4 with cols ≡ 16 (mod 32) */
}

static void prep_x(const accel_spec *s, const float *x, float *xp) {
  if (!fourbit(s)) {
    memcpy(xp, x, (size_t)s->cols * sizeof *x);
    return;
  }
  for (int64_t b = 0; b < s->cols; b += 32)
    for (int i = 0; i < 16; i++) {
      xp[b + i] = x[b + 2 * i];
      xp[b + 16 + i] = x[b + 2 * i + 1];
    }
}

/* E4M3 → float as MLX does: (b & 0x7f) << 7 is an f16 bit pattern whose value ×256 is the
 * magnitude (subnormals included); the sign goes to bit 15. In 16-bit lanes that is
 * ((int16)(b << 8) >> 1) & 0xbf80. Going through f16 keeps float denormals (slow microcode
 * assists) out of the arithmetic. */
AI __m512 e4m3_h16(__m256i v16) {
  __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(v16, 8), 1), _mm256_set1_epi16((short)0xbf80));
  return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
}
/* 16 E4M3 bytes at p (unaligned) */
AI __m512 e4m3_16(const uint8_t *p) { return e4m3_h16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p))); }
/* 16 E4M3 bytes held in 32-bit lanes */
AI __m512 e4m3_ps(__m512i v) { return e4m3_h16(_mm512_cvtepi32_epi16(v)); }

AI __m512i load16_u8(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

/* ---- affine 2/3/5/6-bit: 8 codes live in `bits` bytes ------------------------------------ */
AI __m512 codes16(const uint8_t *p, int bits, __m512i shifts, __m512i mask) {
  __mmask16 bm = (__mmask16)((1u << bits) - 1u);
  __m128i lo = _mm_maskz_loadu_epi8(bm, p), hi = _mm_maskz_loadu_epi8(bm, p + bits);
  __m512i a = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcastq_epi64(lo), shifts), mask);
  __m512i b = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcastq_epi64(hi), shifts), mask);
  __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(a)), _mm512_cvtepi64_epi32(b), 1);
  return _mm512_cvtepi32_ps(v);
}

AI __m512i pack_shifts(int bits) {
  return _mm512_set_epi64(7 * bits, 6 * bits, 5 * bits, 4 * bits, 3 * bits, 2 * bits, bits, 0);
}

/* Up to 16 consecutive group parameters of a row as floats (masked: no over-read). */
AI __m512 params16(const uint8_t *p, accel_dtype dt, __mmask16 m) {
  if (dt == ACCEL_F32) return _mm512_maskz_loadu_ps(m, p);
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (dt == ACCEL_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI __m512 e8m0_16(const uint8_t *p, __mmask16 m) {
  __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
  __m512i f = _mm512_slli_epi32(v, 23);
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(f);
}

enum { K_A4, K_F4, K_A8, K_F8, K_ANY };

/* affine (any width), mxfp4, mxfp8: per row, 16 group scales (and biases) are decoded as one
 * vector; each group's Σq·x vector is scaled by its lane and added; the bias term is
 * Σ_g b_g·Σx_g, one FMA per 16 groups. */
AI void rows_q(const cpu_mv *a, int64_t r, const int NR, const int kind) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size, G = cols / gs;
  const int affine = s->mode == ACCEL_MODE_AFFINE, bits = s->bits;
  const size_t es = affine ? (s->scales_dtype == ACCEL_F32 ? 4 : 2) : 1;
  const __m512i m4 = _mm512_set1_epi32(15);
  const __m512 lut = _mm512_loadu_ps(FP4);
  const __m512i shifts = pack_shifts(bits), mask = _mm512_set1_epi64((1 << bits) - 1);
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
      if (affine) {
        sv[k] = params16(ps, s->scales_dtype, gm);
        const uint8_t *pb = a->bi + (size_t)(r + k) * a->srow + (size_t)g0 * es;
        bacc[k] = _mm512_fmadd_ps(params16(pb, s->scales_dtype, gm), _mm512_maskz_loadu_ps(gm, a->xg + g0), bacc[k]);
      } else {
        sv[k] = e8m0_16(ps, gm);
      }
    }
    for (int64_t j = 0; j < ng; j++) {
      const int64_t c0 = (g0 + j) * gs;
      __m512 acc[4];
      for (int k = 0; k < NR; k++) acc[k] = _mm512_setzero_ps();
      if (kind == K_A4 || kind == K_F4) {
        for (int64_t c = c0; c < c0 + gs; c += 32) {
          __m512 xl = _mm512_loadu_ps(a->x + c), xh = _mm512_loadu_ps(a->x + c + 16);
          for (int k = 0; k < NR; k++) {
            __m512i v = load16_u8(w[k] + c / 2);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_srli_epi32(v, 4);
            __m512 ql = kind == K_A4 ? _mm512_cvtepi32_ps(lo) : _mm512_permutexvar_ps(lo, lut);
            __m512 qh = kind == K_A4 ? _mm512_cvtepi32_ps(hi) : _mm512_permutexvar_ps(hi, lut);
            acc[k] = _mm512_fmadd_ps(ql, xl, acc[k]);
            acc[k] = _mm512_fmadd_ps(qh, xh, acc[k]);
          }
        }
      } else {
        for (int64_t c = c0; c < c0 + gs; c += 16) {
          __m512 xv = _mm512_loadu_ps(a->x + c);
          for (int k = 0; k < NR; k++) {
            __m512 q = kind == K_A8   ? _mm512_cvtepi32_ps(load16_u8(w[k] + c))
                       : kind == K_F8 ? e4m3_16(w[k] + c)
                                      : codes16(w[k] + c / 8 * bits, bits, shifts, mask);
            acc[k] = _mm512_fmadd_ps(q, xv, acc[k]);
          }
        }
      }
      const __m512i jv = _mm512_set1_epi32((int)j);
      for (int k = 0; k < NR; k++)
        racc[k] = _mm512_fmadd_ps(acc[k], _mm512_permutexvar_ps(jv, sv[k]), racc[k]);
    }
  }
  for (int k = 0; k < NR; k++)
    a->y[r + k] = _mm512_reduce_add_ps(racc[k]) + _mm512_reduce_add_ps(bacc[k]);
}

/* nvfp4: groups of 16, so one 32-element block holds two; 16 E4M3 scales per 256 columns are
 * decoded as one vector and each block picks its pair of lanes. */
AI void rows_nvfp4(const cpu_mv *a, int64_t r, const int NR) {
  const int64_t cols = a->s->cols;
  const __m512i m4 = _mm512_set1_epi32(15);
  const __m512 lut = _mm512_loadu_ps(FP4);
  const __m512i half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 racc[4];
  const uint8_t *w[4];
  for (int k = 0; k < NR; k++) {
    racc[k] = _mm512_setzero_ps();
    w[k] = a->w + (size_t)(r + k) * a->wrow;
  }
  for (int64_t c0 = 0; c0 < cols; c0 += 256) {
    int64_t nb = (cols - c0) / 32 < 8 ? (cols - c0) / 32 : 8; /* blocks in this chunk */
    __mmask16 sm = (__mmask16)((1u << (2 * nb)) - 1u);
    __m512 sf[4];
    for (int k = 0; k < NR; k++)
      sf[k] = e4m3_ps(_mm512_cvtepu8_epi32(
          _mm_maskz_loadu_epi8(sm, a->sc + (size_t)(r + k) * a->srow + (size_t)(c0 / 16))));
    for (int64_t j = 0; j < nb; j++) {
      const float *xp = a->x + c0 + 32 * j;
      __m512 xl = _mm512_loadu_ps(xp), xh = _mm512_loadu_ps(xp + 16);
      __m512i idx = _mm512_add_epi32(half, _mm512_set1_epi32((int)(2 * j)));
      for (int k = 0; k < NR; k++) {
        __m512i v = load16_u8(w[k] + (c0 + 32 * j) / 2);
        __m512 t = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(v, m4), lut), xl);
        t = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut), xh, t);
        racc[k] = _mm512_fmadd_ps(t, _mm512_permutexvar_ps(idx, sf[k]), racc[k]);
      }
    }
  }
  for (int k = 0; k < NR; k++) a->y[r + k] = _mm512_reduce_add_ps(racc[k]);
}

AI void rows_a4(const cpu_mv *a, int64_t r, const int NR) { rows_q(a, r, NR, K_A4); }
AI void rows_f4(const cpu_mv *a, int64_t r, const int NR) { rows_q(a, r, NR, K_F4); }
AI void rows_a8(const cpu_mv *a, int64_t r, const int NR) { rows_q(a, r, NR, K_A8); }
AI void rows_f8(const cpu_mv *a, int64_t r, const int NR) { rows_q(a, r, NR, K_F8); }
AI void rows_any(const cpu_mv *a, int64_t r, const int NR) { rows_q(a, r, NR, K_ANY); }

/* ---- dense ------------------------------------------------------------------------------- */
AI __m512 dense16(const uint8_t *row, int64_t c, accel_dtype dt, __mmask16 m) {
  if (dt == ACCEL_F32) return _mm512_maskz_loadu_ps(m, row + 4 * c);
  __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * c);
  if (dt == ACCEL_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void rows_dense(const cpu_mv *a, int64_t r, const int NR) {
  const int64_t cols = a->s->cols;
  const accel_dtype dt = a->s->dense_dtype;
  __m512 acc[4];
  const uint8_t *w[4];
  for (int k = 0; k < NR; k++) {
    acc[k] = _mm512_setzero_ps();
    w[k] = a->w + (size_t)(r + k) * a->wrow;
  }
  for (int64_t c = 0; c < cols; c += 16) {
    __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1u);
    __m512 xv = _mm512_maskz_loadu_ps(m, a->x + c);
    for (int k = 0; k < NR; k++) acc[k] = _mm512_fmadd_ps(dense16(w[k], c, dt, m), xv, acc[k]);
  }
  for (int k = 0; k < NR; k++) a->y[r + k] = _mm512_reduce_add_ps(acc[k]);
}

#define ROW_LOOP(fn)                                              \
  do {                                                            \
    int64_t r = r0;                                               \
    for (; r + 4 <= r1; r += 4) fn(a, r, 4);                      \
    for (; r < r1; r++) fn(a, r, 1);                              \
  } while (0)

static void mv_a4(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_a4); }
static void mv_f4(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_f4); }
static void mv_nv(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_nvfp4); }
static void mv_a8(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_a8); }
static void mv_f8(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_f8); }
static void mv_any(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_any); }
static void mv_dense(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_dense); }

static void matvec(const cpu_mv *a, int64_t r0, int64_t r1) {
  switch (a->s->mode) {
  case ACCEL_MODE_DENSE: mv_dense(a, r0, r1); return;
  case ACCEL_MODE_NVFP4: mv_nv(a, r0, r1); return;
  case ACCEL_MODE_MXFP4: mv_f4(a, r0, r1); return;
  case ACCEL_MODE_MXFP8: mv_f8(a, r0, r1); return;
  default:
    if (a->s->bits == 4) mv_a4(a, r0, r1);
    else if (a->s->bits == 8) mv_a8(a, r0, r1);
    else mv_any(a, r0, r1);
  }
}

/* ---- several vectors of x (matvec_multi) --------------------------------------------------- */
/* One weight row against XB vectors: the row's codes, scales and biases are decoded once, and
 * each vector keeps the accumulators, order and rounding that rows_q / rows_nvfp4 / rows_dense
 * give it alone, so its bits are the one-vector kernel's (qmatmul_rowwise). */
#define XB_MAX 8
AI void rows_q_x(const cpu_mv *a, int64_t r, const int XB, const int kind) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size, G = cols / gs;
  const int affine = s->mode == ACCEL_MODE_AFFINE, bits = s->bits;
  const size_t es = affine ? (s->scales_dtype == ACCEL_F32 ? 4 : 2) : 1;
  const __m512i m4 = _mm512_set1_epi32(15);
  const __m512 lut = _mm512_loadu_ps(FP4);
  const __m512i shifts = pack_shifts(bits), mask = _mm512_set1_epi64((1 << bits) - 1);
  __m512 racc[XB_MAX], bacc[XB_MAX];
  const uint8_t *w = a->w + (size_t)r * a->wrow;
  for (int i = 0; i < XB; i++) racc[i] = bacc[i] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < G; g0 += 16) {
    const int64_t ng = G - g0 < 16 ? G - g0 : 16;
    const __mmask16 gm = (__mmask16)((1u << ng) - 1u);
    const uint8_t *ps = a->sc + (size_t)r * a->srow + (size_t)g0 * es;
    __m512 sv;
    if (affine) {
      sv = params16(ps, s->scales_dtype, gm);
      const __m512 bv = params16(a->bi + (size_t)r * a->srow + (size_t)g0 * es, s->scales_dtype, gm);
      for (int i = 0; i < XB; i++)
        bacc[i] = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(gm, a->xg + i * a->ldxg + g0), bacc[i]);
    } else {
      sv = e8m0_16(ps, gm);
    }
    for (int64_t j = 0; j < ng; j++) {
      const int64_t c0 = (g0 + j) * gs;
      __m512 acc[XB_MAX];
      for (int i = 0; i < XB; i++) acc[i] = _mm512_setzero_ps();
      if (kind == K_A4 || kind == K_F4) {
        for (int64_t c = c0; c < c0 + gs; c += 32) {
          __m512i v = load16_u8(w + c / 2);
          __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_srli_epi32(v, 4);
          __m512 ql = kind == K_A4 ? _mm512_cvtepi32_ps(lo) : _mm512_permutexvar_ps(lo, lut);
          __m512 qh = kind == K_A4 ? _mm512_cvtepi32_ps(hi) : _mm512_permutexvar_ps(hi, lut);
          for (int i = 0; i < XB; i++) {
            const float *x = a->x + i * a->ldx + c;
            acc[i] = _mm512_fmadd_ps(ql, _mm512_loadu_ps(x), acc[i]);
            acc[i] = _mm512_fmadd_ps(qh, _mm512_loadu_ps(x + 16), acc[i]);
          }
        }
      } else {
        for (int64_t c = c0; c < c0 + gs; c += 16) {
          __m512 q = kind == K_A8   ? _mm512_cvtepi32_ps(load16_u8(w + c))
                     : kind == K_F8 ? e4m3_16(w + c)
                                    : codes16(w + c / 8 * bits, bits, shifts, mask);
          for (int i = 0; i < XB; i++) acc[i] = _mm512_fmadd_ps(q, _mm512_loadu_ps(a->x + i * a->ldx + c), acc[i]);
        }
      }
      const __m512 sj = _mm512_permutexvar_ps(_mm512_set1_epi32((int)j), sv);
      for (int i = 0; i < XB; i++) racc[i] = _mm512_fmadd_ps(acc[i], sj, racc[i]);
    }
  }
  for (int i = 0; i < XB; i++)
    a->y[i * a->ldy + r] = _mm512_reduce_add_ps(racc[i]) + _mm512_reduce_add_ps(bacc[i]);
}

AI void rows_nvfp4_x(const cpu_mv *a, int64_t r, const int XB) {
  const int64_t cols = a->s->cols;
  const __m512i m4 = _mm512_set1_epi32(15);
  const __m512 lut = _mm512_loadu_ps(FP4);
  const __m512i half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const uint8_t *w = a->w + (size_t)r * a->wrow;
  __m512 racc[XB_MAX];
  for (int i = 0; i < XB; i++) racc[i] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < cols; c0 += 256) {
    int64_t nb = (cols - c0) / 32 < 8 ? (cols - c0) / 32 : 8;
    __mmask16 sm = (__mmask16)((1u << (2 * nb)) - 1u);
    const __m512 sf =
        e4m3_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(sm, a->sc + (size_t)r * a->srow + (size_t)(c0 / 16))));
    for (int64_t j = 0; j < nb; j++) {
      __m512i v = load16_u8(w + (c0 + 32 * j) / 2);
      const __m512 ql = _mm512_permutexvar_ps(_mm512_and_si512(v, m4), lut);
      const __m512 qh = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
      const __m512 sj = _mm512_permutexvar_ps(_mm512_add_epi32(half, _mm512_set1_epi32((int)(2 * j))), sf);
      for (int i = 0; i < XB; i++) {
        const float *xp = a->x + i * a->ldx + c0 + 32 * j;
        __m512 t = _mm512_mul_ps(ql, _mm512_loadu_ps(xp));
        t = _mm512_fmadd_ps(qh, _mm512_loadu_ps(xp + 16), t);
        racc[i] = _mm512_fmadd_ps(t, sj, racc[i]);
      }
    }
  }
  for (int i = 0; i < XB; i++) a->y[i * a->ldy + r] = _mm512_reduce_add_ps(racc[i]);
}

AI void rows_dense_x(const cpu_mv *a, int64_t r, const int XB) {
  const int64_t cols = a->s->cols;
  const accel_dtype dt = a->s->dense_dtype;
  const uint8_t *w = a->w + (size_t)r * a->wrow;
  __m512 acc[XB_MAX];
  for (int i = 0; i < XB; i++) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) {
    __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1u);
    const __m512 q = dense16(w, c, dt, m);
    for (int i = 0; i < XB; i++) acc[i] = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, a->x + i * a->ldx + c), acc[i]);
  }
  for (int i = 0; i < XB; i++) a->y[i * a->ldy + r] = _mm512_reduce_add_ps(acc[i]);
}

AI void row_x(const cpu_mv *a, int64_t r, const int XB) {
  switch (a->s->mode) {
  case ACCEL_MODE_DENSE: rows_dense_x(a, r, XB); return;
  case ACCEL_MODE_NVFP4: rows_nvfp4_x(a, r, XB); return;
  case ACCEL_MODE_MXFP4: rows_q_x(a, r, XB, K_F4); return;
  case ACCEL_MODE_MXFP8: rows_q_x(a, r, XB, K_F8); return;
  default: rows_q_x(a, r, XB, a->s->bits == 4 ? K_A4 : a->s->bits == 8 ? K_A8 : K_ANY);
  }
}

/* nx vectors, XB_MAX at a time per row (a constant XB per call, so the loops unroll). */
static void matvec_multi(const cpu_mv *a, int nx, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++)
    for (int i = 0; i < nx; i += XB_MAX) {
      cpu_mv b = *a;
      b.x += i * a->ldx;
      b.xg += i * a->ldxg;
      b.y += i * a->ldy;
      switch (nx - i < XB_MAX ? nx - i : XB_MAX) {
      case 1: row_x(&b, r, 1); break;
      case 2: row_x(&b, r, 2); break;
      case 3: row_x(&b, r, 3); break;
      case 4: row_x(&b, r, 4); break;
      case 5: row_x(&b, r, 5); break;
      case 6: row_x(&b, r, 6); break;
      case 7: row_x(&b, r, 7); break;
      default: row_x(&b, r, 8); break;
      }
    }
}

/* ---- mat-mat: decode a tile to float, then a 4×4 register-blocked product ---------------- */
static int tile_supports(const accel_spec *s) { return s->mode != ACCEL_MODE_DENSE; }

static void decode_tile(const cpu_mv *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                        float *out, int64_t ldo) {
  const accel_spec *s = a->s;
  const int64_t gs = s->group_size;
  const int bits = s->bits, affine = s->mode == ACCEL_MODE_AFFINE;
  const __m512i m4 = _mm512_set1_epi32(15);
  const __m512 lut = _mm512_loadu_ps(FP4);
  const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i ihi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512i shifts = pack_shifts(bits), mask = _mm512_set1_epi64((1 << bits) - 1);
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *w = a->w + (size_t)r * a->wrow;
    float *o = out + (r - r0) * ldo - c0;
    for (int64_t g = c0 / gs; g < c1 / gs; g++) {
      float sc, bi;
      cpu_mv_params(a, r, g, &sc, &bi);
      const __m512 vs = _mm512_set1_ps(sc), vb = _mm512_set1_ps(bi);
      for (int64_t c = g * gs; c < (g + 1) * gs; c += 16) {
        __m512 q;
        if (bits == 4) {
          __m128i raw = gs == 16 ? _mm_loadl_epi64((const __m128i *)(w + c / 2))
                                 : _mm_loadu_si128((const __m128i *)(w + c / 2));
          __m512i v = _mm512_cvtepu8_epi32(raw);
          __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_srli_epi32(v, 4);
          __m512 ql = affine ? _mm512_cvtepi32_ps(lo) : _mm512_permutexvar_ps(lo, lut);
          __m512 qh = affine ? _mm512_cvtepi32_ps(hi) : _mm512_permutexvar_ps(hi, lut);
          q = _mm512_permutex2var_ps(ql, ilo, qh);
          if (gs == 16) { /* one group of 16 = 8 bytes: only the low interleave is needed */
            _mm512_storeu_ps(o + c, _mm512_mul_ps(q, vs));
            continue;
          }
          _mm512_storeu_ps(o + c, _mm512_fmadd_ps(q, vs, vb));
          _mm512_storeu_ps(o + c + 16, _mm512_fmadd_ps(_mm512_permutex2var_ps(ql, ihi, qh), vs, vb));
          c += 16;
          continue;
        }
        if (bits == 8) {
          __m512i v = load16_u8(w + c);
          q = affine ? _mm512_cvtepi32_ps(v) : e4m3_ps(v);
        } else {
          q = codes16(w + c / 8 * bits, bits, shifts, mask);
        }
        _mm512_storeu_ps(o + c, _mm512_fmadd_ps(q, vs, vb));
      }
    }
  }
}

/* 8 weight rows × IB vectors of 16 x-rows: 16 accumulators; per k, IB loads of xt and 8
 * broadcasts of w feed 8·IB FMAs. */
AI void gemm_block(const float *const wp[8], const float *xt, int64_t npad, int64_t k, int64_t nr,
                   float *yt, int64_t ldyt, const int IB) {
  __m512 acc[8][2];
  for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++) {
    __m512 xa = _mm512_loadu_ps(xt + kk * npad), xb = IB > 1 ? _mm512_loadu_ps(xt + kk * npad + 16) : xa;
    for (int r = 0; r < 8; r++) {
      __m512 wb = _mm512_set1_ps(wp[r][kk]);
      acc[r][0] = _mm512_fmadd_ps(wb, xa, acc[r][0]);
      if (IB > 1) acc[r][1] = _mm512_fmadd_ps(wb, xb, acc[r][1]);
    }
  }
  for (int r = 0; r < 8 && r < nr; r++)
    for (int v = 0; v < IB; v++) {
      float *p = yt + r * ldyt + 16 * v;
      _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[r][v]));
    }
}

static void gemm(const float *w, int64_t ldw, int64_t nr, const float *xt, int64_t npad, int64_t k,
                 float *yt, int64_t ldyt) {
  for (int64_t r0 = 0; r0 < nr; r0 += 8) {
    const float *wp[8];
    for (int r = 0; r < 8; r++) wp[r] = w + (r0 + r < nr ? r0 + r : nr - 1) * ldw;
    for (int64_t i0 = 0; i0 < npad; i0 += 32) {
      if (npad - i0 >= 32) gemm_block(wp, xt + i0, npad, k, nr - r0, yt + r0 * ldyt + i0, ldyt, 2);
      else gemm_block(wp, xt + i0, npad, k, nr - r0, yt + r0 * ldyt + i0, ldyt, 1);
    }
  }
}

const cpu_isa_ops cpu_ops_avx512 = {
    .name = "avx512",
    .mv_supports = mv_supports,
    .prep_x = prep_x,
    .matvec = matvec,
    .matvec_multi = matvec_multi,
    .tile_supports = tile_supports,
    .decode_tile = decode_tile,
    .gemm = gemm,
    .gemm_lanes = 16,
};
