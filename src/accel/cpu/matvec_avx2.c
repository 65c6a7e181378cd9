/* AVX2 + FMA + F16C kernels: the same scheme as the AVX-512 file with 8 lanes. 4-bit formats
 * read 8 bytes = 16 codes per step (low nibbles = even elements, high = odd), so prep_x
 * de-interleaves x per 16 (8 even, 8 odd). Four rows run together (eight for 4-bit codes).
 * Affine widths 2/3/5/6 unpack two 8-code packs (2·bits bytes) per step with a byte shuffle
 * and variable shifts. */
#include <immintrin.h>

#include "accel/cpu/cpu_isa.h"

#define AI static inline __attribute__((always_inline))
/* vectors of x per pass of a multi-vector kernel: 4 keep its accumulators in the 16 ymm
 * registers (8 vectors of the 270M's head: 60.0 ms a mat-vec against 65.0 in one pass of 8) */
#define XB_MAX 4
/* weight rows per pass of the one-vector 4-bit kernel: each row's chain of FMAs is serial (its
 * bits), so the rows side by side are what hides the FMA latency; 8 keep its inner loop within
 * the 16 ymm registers */
#define NR_MAX 8

static const float FP4_MAG[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static int mv_supports(const accel_spec *s) {
  return s->mode == ACCEL_MODE_DENSE || s->bits == 4 || s->bits == 8 || s->cols % 16 == 0;
}

static void prep_x(const accel_spec *s, const float *x, float *xp) {
  if (s->mode == ACCEL_MODE_DENSE || s->bits != 4) {
    memcpy(xp, x, (size_t)s->cols * sizeof *x);
    return;
  }
  for (int64_t b = 0; b < s->cols; b += 16)
    for (int i = 0; i < 8; i++) {
      xp[b + i] = x[b + 2 * i];
      xp[b + 8 + i] = x[b + 2 * i + 1];
    }
}

AI float hsum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

AI __m256i load8_u8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* E2M1 codes (0..15 in 32-bit lanes) → float: magnitude table, sign from bit 3. */
AI __m256 fp4_ps(__m256i c, __m256 mag) {
  __m256 v = _mm256_permutevar8x32_ps(mag, c); /* uses the low 3 bits */
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
  return _mm256_xor_ps(v, _mm256_castsi256_ps(sign));
}

/* 8 E4M3 bytes at p → float through an f16 bit pattern (see the AVX-512 file). */
AI __m256 e4m3_8(const uint8_t *p) {
  __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
  __m128i h = _mm_and_si128(_mm_srai_epi16(_mm_slli_epi16(v, 8), 1), _mm_set1_epi16((short)0xbf80));
  return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

/* ---- 4-bit: affine, nvfp4, mxfp4 --------------------------------------------------------- */
AI void rows_4bit(const cpu_mv *a, int64_t r, const int NR, const int affine) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size;
  const __m256i m4 = _mm256_set1_epi32(15);
  const __m256 mag = _mm256_loadu_ps(FP4_MAG);
  __m256 racc[NR_MAX];
  float bsum[NR_MAX] = {0};
  const uint8_t *w = a->w + (size_t)r * a->wrow;
  const size_t wrow = a->wrow;
  for (int k = 0; k < NR; k++) racc[k] = _mm256_setzero_ps();
  for (int64_t g = 0; g < cols / gs; g++) {
    __m256 acc[NR_MAX];
    for (int k = 0; k < NR; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t c = g * gs; c < (g + 1) * gs; c += 16) {
      const __m256 xl = _mm256_loadu_ps(a->x + c), xh = _mm256_loadu_ps(a->x + c + 8);
      if ((c & 127) == 0 && r + 2 * NR <= s->rows) /* the next rows' codes: memory latency, not */
        for (int k = 0; k < NR; k++)                /* arithmetic, bounds this loop otherwise */
          _mm_prefetch((const char *)(w + (k + NR) * wrow + c / 2), _MM_HINT_T0);
      for (int k = 0; k < NR; k++) {
        const __m256i v = load8_u8(w + k * wrow + c / 2);
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_srli_epi32(v, 4);
        acc[k] = _mm256_fmadd_ps(affine ? _mm256_cvtepi32_ps(lo) : fp4_ps(lo, mag), xl, acc[k]);
        acc[k] = _mm256_fmadd_ps(affine ? _mm256_cvtepi32_ps(hi) : fp4_ps(hi, mag), xh, acc[k]);
      }
    }
    for (int k = 0; k < NR; k++) {
      float sc, bi;
      cpu_mv_params(a, r + k, g, &sc, &bi);
      racc[k] = _mm256_fmadd_ps(acc[k], _mm256_set1_ps(sc), racc[k]);
      bsum[k] += bi * (affine ? a->xg[g] : 0.0f);
    }
  }
  for (int k = 0; k < NR; k++) a->y[r + k] = hsum8(racc[k]) + bsum[k];
}

/* The same chain per vector for XB vectors of x at once (matvec_multi): the codes of a row
 * are unpacked once; accumulators, order and rounding per vector are rows_4bit's. */
AI void rows_4bit_x(const cpu_mv *a, int64_t r, const int XB, const int affine) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size;
  const __m256i m4 = _mm256_set1_epi32(15);
  const __m256 mag = _mm256_loadu_ps(FP4_MAG);
  __m256 racc[XB_MAX];
  float bsum[XB_MAX];
  for (int i = 0; i < XB; i++) {
    racc[i] = _mm256_setzero_ps();
    bsum[i] = 0;
  }
  const uint8_t *w = a->w + (size_t)r * a->wrow;
  for (int64_t g = 0; g < cols / gs; g++) {
    __m256 acc[XB_MAX];
    for (int i = 0; i < XB; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t c = g * gs; c < (g + 1) * gs; c += 16) {
      __m256i v = load8_u8(w + c / 2);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_srli_epi32(v, 4);
      __m256 ql = affine ? _mm256_cvtepi32_ps(lo) : fp4_ps(lo, mag);
      __m256 qh = affine ? _mm256_cvtepi32_ps(hi) : fp4_ps(hi, mag);
      for (int i = 0; i < XB; i++) {
        const float *x = a->x + i * a->ldx + c;
        acc[i] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(x), acc[i]);
        acc[i] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(x + 8), acc[i]);
      }
    }
    float sc, bi;
    cpu_mv_params(a, r, g, &sc, &bi);
    for (int i = 0; i < XB; i++) {
      racc[i] = _mm256_fmadd_ps(acc[i], _mm256_set1_ps(sc), racc[i]);
      bsum[i] += bi * (affine ? a->xg[i * a->ldxg + g] : 0.0f);
    }
  }
  for (int i = 0; i < XB; i++) a->y[i * a->ldy + r] = hsum8(racc[i]) + bsum[i];
}

/* ---- 8-bit: affine, mxfp8 ---------------------------------------------------------------- */
AI void rows_8bit(const cpu_mv *a, int64_t r, const int NR, const int affine) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size;
  __m256 racc[4];
  float bsum[4] = {0, 0, 0, 0};
  const uint8_t *w[4];
  for (int k = 0; k < NR; k++) {
    racc[k] = _mm256_setzero_ps();
    w[k] = a->w + (size_t)(r + k) * a->wrow;
  }
  for (int64_t g = 0; g < cols / gs; g++) {
    __m256 acc[4];
    for (int k = 0; k < NR; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t c = g * gs; c < (g + 1) * gs; c += 8) {
      __m256 xv = _mm256_loadu_ps(a->x + c);
      if ((c & 63) == 0 && r + 2 * NR <= s->rows) /* the next rows' codes (as rows_4bit) */
        for (int k = 0; k < NR; k++) _mm_prefetch((const char *)(w[k] + NR * a->wrow + c), _MM_HINT_T0);
      for (int k = 0; k < NR; k++) {
        __m256i v = load8_u8(w[k] + c);
        acc[k] = _mm256_fmadd_ps(affine ? _mm256_cvtepi32_ps(v) : e4m3_8(w[k] + c), xv, acc[k]);
      }
    }
    for (int k = 0; k < NR; k++) {
      float sc, bi;
      cpu_mv_params(a, r + k, g, &sc, &bi);
      racc[k] = _mm256_fmadd_ps(acc[k], _mm256_set1_ps(sc), racc[k]);
      bsum[k] += bi * (affine ? a->xg[g] : 0.0f);
    }
  }
  for (int k = 0; k < NR; k++) a->y[r + k] = hsum8(racc[k]) + bsum[k];
}

/* rows_8bit's chain for XB vectors of x at once (see rows_4bit_x). */
AI void rows_8bit_x(const cpu_mv *a, int64_t r, const int XB, const int affine) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size;
  __m256 racc[XB_MAX];
  float bsum[XB_MAX];
  for (int i = 0; i < XB; i++) {
    racc[i] = _mm256_setzero_ps();
    bsum[i] = 0;
  }
  const uint8_t *w = a->w + (size_t)r * a->wrow;
  for (int64_t g = 0; g < cols / gs; g++) {
    __m256 acc[XB_MAX];
    for (int i = 0; i < XB; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t c = g * gs; c < (g + 1) * gs; c += 8) {
      __m256 q = affine ? _mm256_cvtepi32_ps(load8_u8(w + c)) : e4m3_8(w + c);
      for (int i = 0; i < XB; i++) acc[i] = _mm256_fmadd_ps(q, _mm256_loadu_ps(a->x + i * a->ldx + c), acc[i]);
    }
    float sc, bi;
    cpu_mv_params(a, r, g, &sc, &bi);
    for (int i = 0; i < XB; i++) {
      racc[i] = _mm256_fmadd_ps(acc[i], _mm256_set1_ps(sc), racc[i]);
      bsum[i] += bi * (affine ? a->xg[i * a->ldxg + g] : 0.0f);
    }
  }
  for (int i = 0; i < XB; i++) a->y[i * a->ldy + r] = hsum8(racc[i]) + bsum[i];
}

/* ---- affine 2/3/5/6-bit: 8 codes live in `bits` bytes ------------------------------------ */
/* Shuffle controls and shifts that put code j of pack 0 (lo) / pack 1 (hi) in 32-bit lane j:
 * bytes o, o+1 of the pack pair (o = bit offset / 8), shifted right by bit offset % 8. */
typedef struct {
  __m256i lo, hi, shift, mask;
} anybit_ctl;

AI anybit_ctl anybit_setup(int bits) {
  uint8_t lo[32], hi[32];
  uint32_t sh[8];
  for (int j = 0; j < 8; j++) {
    int off = j * bits;
    sh[j] = (uint32_t)(off % 8);
    for (int b = 0; b < 4; b++) { /* lane j sits in 128-bit half j / 4, byte 4·(j % 4) + b */
      int at = 16 * (j / 4) + 4 * (j % 4) + b;
      lo[at] = b < 2 ? (uint8_t)(off / 8 + b) : 0x80;
      hi[at] = b < 2 ? (uint8_t)(bits + off / 8 + b) : 0x80;
    }
  }
  anybit_ctl c;
  c.lo = _mm256_loadu_si256((const __m256i *)lo);
  c.hi = _mm256_loadu_si256((const __m256i *)hi);
  c.shift = _mm256_loadu_si256((const __m256i *)sh);
  c.mask = _mm256_set1_epi32((1 << bits) - 1);
  return c;
}

/* 16 codes from the pack pair at byte p of a row of rowbytes bytes (never reads past it). */
AI void anybit16(const uint8_t *row, size_t p, size_t rowbytes, const anybit_ctl *c, __m256 *q0, __m256 *q1) {
  __m128i raw;
  if (p + 16 <= rowbytes) {
    raw = _mm_loadu_si128((const __m128i *)(row + p));
  } else {
    uint8_t tmp[16] = {0};
    memcpy(tmp, row + p, rowbytes - p);
    raw = _mm_loadu_si128((const __m128i *)tmp);
  }
  __m256i v = _mm256_broadcastsi128_si256(raw);
  *q0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, c->lo), c->shift), c->mask));
  *q1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, c->hi), c->shift), c->mask));
}

AI void rows_anybit(const cpu_mv *a, int64_t r, const int NR) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, gs = s->group_size;
  const int bits = s->bits;
  const anybit_ctl ctl = anybit_setup(bits);
  __m256 racc[4];
  float bsum[4] = {0, 0, 0, 0};
  const uint8_t *w[4];
  for (int k = 0; k < NR; k++) {
    racc[k] = _mm256_setzero_ps();
    w[k] = a->w + (size_t)(r + k) * a->wrow;
  }
  for (int64_t g = 0; g < cols / gs; g++) {
    __m256 acc[4];
    for (int k = 0; k < NR; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t c = g * gs; c < (g + 1) * gs; c += 16) {
      __m256 x0 = _mm256_loadu_ps(a->x + c), x1 = _mm256_loadu_ps(a->x + c + 8);
      for (int k = 0; k < NR; k++) {
        __m256 q0, q1;
        anybit16(w[k], (size_t)(c / 8 * bits), a->wrow, &ctl, &q0, &q1);
        acc[k] = _mm256_fmadd_ps(q0, x0, acc[k]);
        acc[k] = _mm256_fmadd_ps(q1, x1, acc[k]);
      }
    }
    for (int k = 0; k < NR; k++) {
      float sc, bi;
      cpu_mv_params(a, r + k, g, &sc, &bi);
      racc[k] = _mm256_fmadd_ps(acc[k], _mm256_set1_ps(sc), racc[k]);
      bsum[k] += bi * a->xg[g];
    }
  }
  for (int k = 0; k < NR; k++) a->y[r + k] = hsum8(racc[k]) + bsum[k];
}

/* ---- dense ------------------------------------------------------------------------------- */
AI __m256 dense8(const uint8_t *row, int64_t c, accel_dtype dt) {
  if (dt == ACCEL_F32) return _mm256_loadu_ps((const float *)(const void *)(row + 4 * c));
  __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * c));
  if (dt == ACCEL_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI void rows_dense(const cpu_mv *a, int64_t r, const int NR, const accel_dtype dt) {
  const accel_spec *s = a->s;
  const int64_t cols = s->cols, c8 = cols & ~(int64_t)7;
  const int64_t line = dt == ACCEL_F32 ? 15 : 31; /* a 64-byte line of a row, in columns - 1 */
  __m256 acc[4];
  const uint8_t *w[4];
  for (int k = 0; k < NR; k++) {
    acc[k] = _mm256_setzero_ps();
    w[k] = a->w + (size_t)(r + k) * a->wrow;
  }
  for (int64_t c = 0; c < c8; c += 8) {
    __m256 xv = _mm256_loadu_ps(a->x + c);
    if ((c & line) == 0 && r + 2 * NR <= s->rows) /* the next rows (as rows_4bit) */
      for (int k = 0; k < NR; k++)
        _mm_prefetch((const char *)(w[k] + NR * a->wrow + (dt == ACCEL_F32 ? 4 : 2) * c), _MM_HINT_T0);
    for (int k = 0; k < NR; k++) acc[k] = _mm256_fmadd_ps(dense8(w[k], c, dt), xv, acc[k]);
  }
  for (int k = 0; k < NR; k++) {
    float t = hsum8(acc[k]);
    for (int64_t c = c8; c < cols; c++) {
      const uint8_t *p = w[k];
      float v = dt == ACCEL_F32    ? cpu_ld_f32(p + 4 * c)
                : dt == ACCEL_BF16 ? mx_bf16_to_f32(cpu_ld_u16(p + 2 * c))
                                   : mx_f16_to_f32(cpu_ld_u16(p + 2 * c));
      t += v * a->x[c];
    }
    a->y[r + k] = t;
  }
}

#define ROW_LOOP(fn)                                              \
  do {                                                            \
    int64_t r = r0;                                               \
    for (; r + 4 <= r1; r += 4) fn(a, r, 4);                      \
    for (; r < r1; r++) fn(a, r, 1);                              \
  } while (0)
/* the 4- and 8-bit kernels with affine and the float formats apart, the dense one per dtype (a
 * constant), so that no inner loop carries another format's decode */
#define ROW_LOOP_Q(fn, aff, NR)                                   \
  do {                                                            \
    int64_t r = r0;                                               \
    for (; r + NR <= r1; r += NR) fn(a, r, NR, aff);              \
    for (; r + 4 <= r1; r += 4) fn(a, r, 4, aff);                 \
    for (; r < r1; r++) fn(a, r, 1, aff);                         \
  } while (0)

static void mv_4bit(const cpu_mv *a, int64_t r0, int64_t r1) {
  if (a->s->mode == ACCEL_MODE_AFFINE) ROW_LOOP_Q(rows_4bit, 1, NR_MAX);
  else ROW_LOOP_Q(rows_4bit, 0, NR_MAX);
}
static void mv_8bit(const cpu_mv *a, int64_t r0, int64_t r1) {
  if (a->s->mode == ACCEL_MODE_AFFINE) ROW_LOOP_Q(rows_8bit, 1, 4);
  else ROW_LOOP_Q(rows_8bit, 0, 4);
}
static void mv_dense(const cpu_mv *a, int64_t r0, int64_t r1) {
  switch (a->s->dense_dtype) {
  case ACCEL_F32: ROW_LOOP_Q(rows_dense, ACCEL_F32, 4); break;
  case ACCEL_F16: ROW_LOOP_Q(rows_dense, ACCEL_F16, 4); break;
  default: ROW_LOOP_Q(rows_dense, ACCEL_BF16, 4); break;
  }
}
static void mv_anybit(const cpu_mv *a, int64_t r0, int64_t r1) { ROW_LOOP(rows_anybit); }

static void matvec(const cpu_mv *a, int64_t r0, int64_t r1) {
  if (a->s->mode == ACCEL_MODE_DENSE) mv_dense(a, r0, r1);
  else if (a->s->bits == 4) mv_4bit(a, r0, r1);
  else if (a->s->bits == 8) mv_8bit(a, r0, r1);
  else mv_anybit(a, r0, r1);
}

/* nx vectors, XB_MAX at a time per row; other formats run matvec once per vector. */
#define MULTI_LOOP(fn, aff)                                                  \
  do {                                                                      \
    for (int64_t r = r0; r < r1; r++)                                       \
      for (int i = 0; i < nx; i += XB_MAX) {                                \
        cpu_mv b = *a;                                                      \
        b.x += i * a->ldx;                                                  \
        b.xg += i * a->ldxg;                                                \
        b.y += i * a->ldy;                                                  \
        switch (nx - i < XB_MAX ? nx - i : XB_MAX) {                        \
        case 1: fn(&b, r, 1, aff); break;                                    \
        case 2: fn(&b, r, 2, aff); break;                                    \
        case 3: fn(&b, r, 3, aff); break;                                    \
        default: fn(&b, r, 4, aff); break;                                   \
        }                                                                   \
      }                                                                     \
  } while (0)

static void matvec_multi(const cpu_mv *a, int nx, int64_t r0, int64_t r1) {
  const int affine = a->s->mode == ACCEL_MODE_AFFINE;
  if (a->s->mode != ACCEL_MODE_DENSE && a->s->bits == 4) {
    if (affine) MULTI_LOOP(rows_4bit_x, 1);
    else MULTI_LOOP(rows_4bit_x, 0);
  } else if (a->s->mode != ACCEL_MODE_DENSE && a->s->bits == 8) {
    if (affine) MULTI_LOOP(rows_8bit_x, 1);
    else MULTI_LOOP(rows_8bit_x, 0);
  } else {
    for (int i = 0; i < nx; i++) {
      cpu_mv b = *a;
      b.x += i * a->ldx;
      b.xg += i * a->ldxg;
      b.y += i * a->ldy;
      matvec(&b, r0, r1);
    }
  }
}

/* ---- mat-mat ----------------------------------------------------------------------------- */
static int tile_supports(const accel_spec *s) { return s->mode != ACCEL_MODE_DENSE; }

static void decode_tile(const cpu_mv *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                        float *out, int64_t ldo) {
  const accel_spec *s = a->s;
  const int64_t gs = s->group_size;
  const int affine = s->mode == ACCEL_MODE_AFFINE;
  const __m256i m4 = _mm256_set1_epi32(15);
  const __m256 mag = _mm256_loadu_ps(FP4_MAG);
  const anybit_ctl ctl = anybit_setup(s->bits == 4 || s->bits == 8 ? 2 : s->bits);
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *w = a->w + (size_t)r * a->wrow;
    float *o = out + (r - r0) * ldo - c0;
    for (int64_t g = c0 / gs; g < c1 / gs; g++) {
      float sc, bi;
      cpu_mv_params(a, r, g, &sc, &bi);
      const __m256 vs = _mm256_set1_ps(sc), vb = _mm256_set1_ps(bi);
      for (int64_t c = g * gs; c < (g + 1) * gs; c += 8) {
        __m256 q;
        if (s->bits == 4) { /* 8 bytes = 16 elements: interleave even/odd back to order */
          __m256i v = load8_u8(w + c / 2);
          __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_srli_epi32(v, 4);
          __m256 ql = affine ? _mm256_cvtepi32_ps(lo) : fp4_ps(lo, mag);
          __m256 qh = affine ? _mm256_cvtepi32_ps(hi) : fp4_ps(hi, mag);
          __m256 u0 = _mm256_unpacklo_ps(ql, qh), u1 = _mm256_unpackhi_ps(ql, qh);
          __m256 e0 = _mm256_permute2f128_ps(u0, u1, 0x20), e1 = _mm256_permute2f128_ps(u0, u1, 0x31);
          _mm256_storeu_ps(o + c, _mm256_fmadd_ps(e0, vs, vb));
          _mm256_storeu_ps(o + c + 8, _mm256_fmadd_ps(e1, vs, vb));
          c += 8;
          continue;
        }
        if (s->bits != 8) { /* 2/3/5/6-bit: 16 codes per step (every group size is a multiple) */
          __m256 q1;
          anybit16(w, (size_t)(c / 8 * s->bits), a->wrow, &ctl, &q, &q1);
          _mm256_storeu_ps(o + c, _mm256_fmadd_ps(q, vs, vb));
          _mm256_storeu_ps(o + c + 8, _mm256_fmadd_ps(q1, vs, vb));
          c += 8;
          continue;
        }
        q = affine ? _mm256_cvtepi32_ps(load8_u8(w + c)) : e4m3_8(w + c);
        _mm256_storeu_ps(o + c, _mm256_fmadd_ps(q, vs, vb));
      }
    }
  }
}

/* 6 weight rows × IB vectors of 8 x-rows: 12 accumulators + 2 xt + 1 broadcast of 16. */
AI void gemm_block(const float *const wp[6], const float *xt, int64_t npad, int64_t k, int64_t nr,
                   float *yt, int64_t ldyt, const int IB) {
  __m256 acc[6][2];
  for (int r = 0; r < 6; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++) {
    __m256 xa = _mm256_loadu_ps(xt + kk * npad), xb = IB > 1 ? _mm256_loadu_ps(xt + kk * npad + 8) : xa;
    for (int r = 0; r < 6; r++) {
      __m256 wb = _mm256_broadcast_ss(wp[r] + kk);
      acc[r][0] = _mm256_fmadd_ps(wb, xa, acc[r][0]);
      if (IB > 1) acc[r][1] = _mm256_fmadd_ps(wb, xb, acc[r][1]);
    }
  }
  for (int r = 0; r < 6 && r < nr; r++)
    for (int v = 0; v < IB; v++) {
      float *p = yt + r * ldyt + 8 * v;
      _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), acc[r][v]));
    }
}

static void gemm(const float *w, int64_t ldw, int64_t nr, const float *xt, int64_t npad, int64_t k,
                 float *yt, int64_t ldyt) {
  for (int64_t r0 = 0; r0 < nr; r0 += 6) {
    const float *wp[6];
    for (int r = 0; r < 6; r++) wp[r] = w + (r0 + r < nr ? r0 + r : nr - 1) * ldw;
    for (int64_t i0 = 0; i0 < npad; i0 += 16) {
      if (npad - i0 >= 16) gemm_block(wp, xt + i0, npad, k, nr - r0, yt + r0 * ldyt + i0, ldyt, 2);
      else gemm_block(wp, xt + i0, npad, k, nr - r0, yt + r0 * ldyt + i0, ldyt, 1);
    }
  }
}

const cpu_isa_ops cpu_ops_avx2 = {
    .name = "avx2",
    .mv_supports = mv_supports,
    .prep_x = prep_x,
    .matvec = matvec,
    .matvec_multi = matvec_multi,
    .tile_supports = tile_supports,
    .decode_tile = decode_tile,
    .gemm = gemm,
    .gemm_lanes = 8,
};
