/* Portable C kernels for every format: the fallback when no SIMD path applies, and the
 * reference the SIMD paths are tested against. Affine groups use the factorisation
 * s·Σq·x + b·Σx (Σx per group precomputed); fp groups use s·Σv·x. All in float32. */
#include "accel/cpu/cpu_isa.h"

#define E4M3_ROW(h)                                                                          \
  E4M3_1(h + 0), E4M3_1(h + 1), E4M3_1(h + 2), E4M3_1(h + 3), E4M3_1(h + 4), E4M3_1(h + 5),     \
      E4M3_1(h + 6), E4M3_1(h + 7), E4M3_1(h + 8), E4M3_1(h + 9), E4M3_1(h + 10),                \
      E4M3_1(h + 11), E4M3_1(h + 12), E4M3_1(h + 13), E4M3_1(h + 14), E4M3_1(h + 15)
/* value of byte b: e = b>>3 & 15, m = b & 7 (bias 7, no NaN) as a constant expression */
#define E4M3_1(b)                                                                          \
  (((b) & 0x80) ? -1.0f : 1.0f) *                                                          \
      ((((b) >> 3) & 15) ? (1.0f + (float)((b) & 7) / 8.0f) * E4M3_POW2((((b) >> 3) & 15) - 7) \
                         : (float)((b) & 7) / 8.0f * 0x1p-6f)
#define E4M3_POW2(k)                                                                      \
  ((k) >= 0 ? (float)(1u << ((k) >= 0 ? (k) : 0)) : 1.0f / (float)(1u << ((k) < 0 ? -(k) : 0)))
const float cpu_e4m3_table[256] = {
    E4M3_ROW(0),   E4M3_ROW(16),  E4M3_ROW(32),  E4M3_ROW(48),  E4M3_ROW(64),  E4M3_ROW(80),
    E4M3_ROW(96),  E4M3_ROW(112), E4M3_ROW(128), E4M3_ROW(144), E4M3_ROW(160), E4M3_ROW(176),
    E4M3_ROW(192), E4M3_ROW(208), E4M3_ROW(224), E4M3_ROW(240)};

static int supports_all(const accel_spec *s) {
  (void)s;
  return 1;
}

static void prep_identity(const accel_spec *s, const float *x, float *xp) {
  memcpy(xp, x, (size_t)s->cols * sizeof *x);
}

/* Group values before scaling, in element order. */
static void group_values(const accel_spec *s, const uint8_t *row, int64_t g, float *v) {
  int64_t gs = s->group_size, e0 = g * gs;
  switch (s->bits) {
  case 8:
    for (int64_t i = 0; i < gs; i++) {
      uint8_t c = row[e0 + i];
      v[i] = s->mode == ACCEL_MODE_MXFP8 ? cpu_e4m3(c) : (float)c;
    }
    return;
  case 4:
    for (int64_t i = 0; i < gs; i += 2) {
      uint8_t c = row[(e0 + i) / 2];
      if (s->mode == ACCEL_MODE_AFFINE) {
        v[i] = (float)(c & 15);
        v[i + 1] = (float)(c >> 4);
      } else {
        v[i] = MX_FP4_LUT[c & 15];
        v[i + 1] = MX_FP4_LUT[c >> 4];
      }
    }
    return;
  default: /* 2, 3, 5, 6: a group is a whole number of bytes (gs·bits is a multiple of 32) */
    for (int64_t i = 0; i < gs; i++) {
      uint64_t bit = (uint64_t)(e0 + i) * (uint64_t)s->bits;
      unsigned sh = (unsigned)(bit & 7), w = row[bit >> 3];
      if (sh + (unsigned)s->bits > 8) w |= (unsigned)row[(bit >> 3) + 1] << 8;
      v[i] = (float)((w >> sh) & ((1u << s->bits) - 1u));
    }
    return;
  }
}

static float dot(const float *a, const float *b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; i++) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

static void matvec_scalar(const cpu_mv *a, int64_t r0, int64_t r1) {
  const accel_spec *s = a->s;
  int64_t cols = s->cols;
  if (s->mode == ACCEL_MODE_DENSE) {
    float buf[256];
    for (int64_t r = r0; r < r1; r++) {
      const uint8_t *row = a->w + (size_t)r * a->wrow;
      float acc = 0;
      for (int64_t c0 = 0; c0 < cols; c0 += 256) {
        int64_t n = cols - c0 < 256 ? cols - c0 : 256;
        for (int64_t i = 0; i < n; i++) {
          int64_t c = c0 + i;
          buf[i] = s->dense_dtype == ACCEL_F32    ? cpu_ld_f32(row + 4 * c)
                   : s->dense_dtype == ACCEL_BF16 ? mx_bf16_to_f32(cpu_ld_u16(row + 2 * c))
                                                  : mx_f16_to_f32(cpu_ld_u16(row + 2 * c));
        }
        acc += dot(buf, a->x + c0, n);
      }
      a->y[r] = acc;
    }
    return;
  }
  int64_t gs = s->group_size, groups = cols / gs;
  float v[128];
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->wrow;
    float acc = 0;
    for (int64_t g = 0; g < groups; g++) {
      float sc, bi;
      cpu_mv_params(a, r, g, &sc, &bi);
      group_values(s, row, g, v);
      float qx = dot(v, a->x + g * gs, gs);
      acc += s->mode == ACCEL_MODE_AFFINE ? sc * qx + bi * a->xg[g] : sc * qx;
    }
    a->y[r] = acc;
  }
}

static void decode_tile_scalar(const cpu_mv *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                               float *out, int64_t ldo) {
  const accel_spec *s = a->s;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->wrow;
    float *o = out + (r - r0) * ldo;
    if (s->mode == ACCEL_MODE_DENSE) {
      for (int64_t c = c0; c < c1; c++)
        o[c - c0] = s->dense_dtype == ACCEL_F32    ? cpu_ld_f32(row + 4 * c)
                    : s->dense_dtype == ACCEL_BF16 ? mx_bf16_to_f32(cpu_ld_u16(row + 2 * c))
                                                   : mx_f16_to_f32(cpu_ld_u16(row + 2 * c));
      continue;
    }
    int64_t gs = s->group_size;
    for (int64_t g = c0 / gs; g < c1 / gs; g++) {
      float sc, bi, v[128];
      cpu_mv_params(a, r, g, &sc, &bi);
      group_values(s, row, g, v);
      for (int64_t i = 0; i < gs; i++) o[g * gs - c0 + i] = sc * v[i] + bi;
    }
  }
}

static void gemm_scalar(const float *w, int64_t ldw, int64_t nr, const float *xt, int64_t npad,
                        int64_t k, float *yt, int64_t ldyt) {
  for (int64_t r = 0; r < nr; r++) {
    float *yr = yt + r * ldyt;
    for (int64_t kk = 0; kk < k; kk++) {
      const float wv = w[r * ldw + kk], *xr = xt + kk * npad;
      for (int64_t i = 0; i < npad; i++) yr[i] += wv * xr[i];
    }
  }
}

const cpu_isa_ops cpu_ops_scalar = {
    .name = "scalar",
    .mv_supports = supports_all,
    .prep_x = prep_identity,
    .matvec = matvec_scalar,
    .tile_supports = supports_all,
    .decode_tile = decode_tile_scalar,
    .gemm = gemm_scalar,
    .gemm_lanes = 1,
};
