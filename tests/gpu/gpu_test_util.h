/* Shared by the GPU self-test and benchmark: random MLX-format weights held in host memory
 * behind an accel_weight loader, and a float64 reference decoder. */
#ifndef MLXRT_GPU_TEST_UTIL_H
#define MLXRT_GPU_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "base/bf16.h"

typedef struct host_weight {
  accel_weight w;
  void *part[3];
  size_t bytes[3];
  int owns; /* frees parts on release */
} host_weight;

static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}
static inline double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static inline const void *host_loader(void *ctx, accel_part part, size_t *n, mlxrt_error *err) {
  host_weight *h = ctx;
  (void)err;
  *n = h->bytes[part];
  return h->part[part];
}

static inline void fill_random(void *p, size_t n, uint64_t *s) {
  uint8_t *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng_next(s);
    memcpy(b + i, &v, 8);
  }
  for (; i < n; i++) b[i] = (uint8_t)rng_next(s);
}

/* A value of magnitude in [lo, hi) with random sign, stored in dtype dt at index i. */
static inline void put_value(void *p, size_t i, accel_dtype dt, double v) {
  if (dt == ACCEL_F32) {
    float f = (float)v;
    memcpy((uint8_t *)p + 4 * i, &f, 4);
  } else {
    uint16_t h = dt == ACCEL_BF16 ? mx_f32_to_bf16((float)v) : mx_f32_to_f16((float)v);
    memcpy((uint8_t *)p + 2 * i, &h, 2);
  }
}

static inline double get_value(const void *p, size_t i, accel_dtype dt) {
  if (dt == ACCEL_F32) {
    float f;
    memcpy(&f, (const uint8_t *)p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, (const uint8_t *)p + 2 * i, 2);
  return dt == ACCEL_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}

/* Fills a weight with random codes and realistic scales. scale_lo/hi bound fp scale bytes
 * (nvfp4 E4M3, mx E8M0); 0/0 picks the realistic default. */
static inline int host_weight_make(host_weight *h, const accel_spec *spec, uint64_t key,
                                   const char *name, int scale_lo, int scale_hi, uint64_t *rng) {
  memset(h, 0, sizeof *h);
  h->w.key = key;
  h->w.spec = *spec;
  h->w.load = host_loader;
  h->w.load_ctx = h;
  h->w.name = name;
  h->owns = 1;
  for (int p = 0; p < 3; p++) {
    h->bytes[p] = accel_part_bytes(spec, (accel_part)p);
    if (!h->bytes[p]) continue;
    h->part[p] = malloc(h->bytes[p]);
    if (!h->part[p]) return -1;
  }
  if (spec->mode == ACCEL_MODE_DENSE) {
    size_t n = h->bytes[0] / (spec->dense_dtype == ACCEL_F32 ? 4 : 2);
    if (spec->dense_dtype == ACCEL_BF16) { /* bf16 bits with exponents 2^-10..2^-3, fast */
      uint16_t *q = h->part[0];
      for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(rng);
        q[i] = (uint16_t)(((r & 1) << 15) | ((117 + (r >> 1) % 8) << 7) | ((r >> 8) & 0x7f));
      }
    } else {
      for (size_t i = 0; i < n; i++)
        put_value(h->part[0], i, spec->dense_dtype, (rng_unit(rng) * 2 - 1) * 0.1);
    }
    return 0;
  }
  fill_random(h->part[0], h->bytes[0], rng);
  if (spec->mode == ACCEL_MODE_AFFINE) {
    size_t n = h->bytes[1] / (spec->scales_dtype == ACCEL_F32 ? 4 : 2);
    for (size_t i = 0; i < n; i++) {
      double s = (0.001 + 0.02 * rng_unit(rng)) * (rng_next(rng) & 1 ? -1 : 1);
      put_value(h->part[1], i, spec->scales_dtype, s);
      put_value(h->part[2], i, spec->scales_dtype, (rng_unit(rng) * 2 - 1) * 0.05);
    }
    return 0;
  }
  if (!scale_lo && !scale_hi) {
    scale_lo = spec->mode == ACCEL_MODE_NVFP4 ? 0x08 : 118;
    scale_hi = spec->mode == ACCEL_MODE_NVFP4 ? 0x47 : 130;
  }
  uint8_t *sc = h->part[1];
  for (size_t i = 0; i < h->bytes[1]; i++)
    sc[i] = (uint8_t)(scale_lo + (int)(rng_next(rng) % (uint64_t)(scale_hi - scale_lo + 1)));
  return 0;
}

static inline void host_weight_free(host_weight *h) {
  if (h->owns)
    for (int p = 0; p < 3; p++) free(h->part[p]);
  memset(h, 0, sizeof *h);
}

/* A view of another weight's bytes under a different key (the benchmark's L2-busting copies). */
static inline void host_weight_alias(host_weight *dst, const host_weight *src, uint64_t key) {
  *dst = *src;
  dst->owns = 0;
  dst->w.key = key;
  dst->w.load_ctx = dst;
}

/* ---- float64 reference -------------------------------------------------------------- */
static inline uint32_t ref_code(const uint8_t *row, int bits, int64_t e) {
  uint32_t v = 0;
  for (int b = 0; b < bits; b++) {
    int64_t bit = e * bits + b;
    v |= (uint32_t)((row[bit >> 3] >> (bit & 7)) & 1) << b;
  }
  return v;
}

static inline double ref_weight(const host_weight *h, int64_t slab, int64_t r, int64_t k) {
  const accel_spec *s = &h->w.spec;
  int64_t row = slab * s->rows + r;
  if (s->mode == ACCEL_MODE_DENSE) return get_value(h->part[0], (size_t)(row * s->cols + k), s->dense_dtype);
  const uint8_t *wr = (const uint8_t *)h->part[0] + (size_t)row * (size_t)(s->cols * s->bits / 8);
  uint32_t c = ref_code(wr, s->bits, k);
  size_t G = (size_t)(row * (s->cols / s->group_size) + k / s->group_size);
  const uint8_t *sc = h->part[1];
  switch (s->mode) {
  case ACCEL_MODE_AFFINE:
    return get_value(h->part[1], G, s->scales_dtype) * c + get_value(h->part[2], G, s->scales_dtype);
  case ACCEL_MODE_NVFP4: return (double)MX_FP4_LUT[c] * mx_e4m3_to_f32(sc[G]);
  case ACCEL_MODE_MXFP4: return (double)MX_FP4_LUT[c] * mx_e8m0_to_f32(sc[G]);
  default: return (double)mx_e4m3_to_f32((uint8_t)c) * mx_e8m0_to_f32(sc[G]);
  }
}

/* mx.dequantize of (row, k) as bf16 bits: affine round(round(q·s) + b) in the scales dtype
 * (f32: one rounding at the end), fp modes bf16(s·v), dense converted. */
static inline float ref_round(float v, accel_dtype dt) {
  if (dt == ACCEL_BF16) return mx_round_bf16(v);
  if (dt == ACCEL_F16) return mx_f16_to_f32(mx_f32_to_f16(v));
  return v;
}
static inline uint16_t ref_embed(const host_weight *h, int64_t row, int64_t k) {
  const accel_spec *s = &h->w.spec;
  if (s->mode == ACCEL_MODE_DENSE) return mx_f32_to_bf16((float)ref_weight(h, 0, row, k));
  const uint8_t *wr = (const uint8_t *)h->part[0] + (size_t)row * (size_t)(s->cols * s->bits / 8);
  uint32_t c = ref_code(wr, s->bits, k);
  size_t G = (size_t)(row * (s->cols / s->group_size) + k / s->group_size);
  if (s->mode == ACCEL_MODE_AFFINE) {
    float sc = (float)get_value(h->part[1], G, s->scales_dtype);
    float bi = (float)get_value(h->part[2], G, s->scales_dtype);
    float p = ref_round(sc * (float)c, s->scales_dtype);
    return mx_f32_to_bf16(ref_round(p + bi, s->scales_dtype));
  }
  const uint8_t *sb = h->part[1];
  float sc = s->mode == ACCEL_MODE_NVFP4 ? mx_e4m3_to_f32(sb[G]) : mx_e8m0_to_f32(sb[G]);
  float v = s->mode == ACCEL_MODE_MXFP8 ? mx_e4m3_to_f32((uint8_t)c) : MX_FP4_LUT[c];
  return mx_f32_to_bf16(sc * v);
}

/* y[n, rows] in double. */
static inline void ref_qmatmul(const host_weight *h, int64_t slab, const uint16_t *x, int64_t n,
                               double *y) {
  const accel_spec *s = &h->w.spec;
  double *wrow = malloc((size_t)s->cols * sizeof *wrow);
  for (int64_t r = 0; r < s->rows; r++) {
    for (int64_t k = 0; k < s->cols; k++) wrow[k] = ref_weight(h, slab, r, k);
    for (int64_t i = 0; i < n; i++) {
      double acc = 0;
      for (int64_t k = 0; k < s->cols; k++) acc += wrow[k] * mx_bf16_to_f32(x[i * s->cols + k]);
      y[i * s->rows + r] = acc;
    }
  }
  free(wrow);
}

#endif
