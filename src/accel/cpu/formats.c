/* Field decoding and exact dequantization for every MLX weight format (portable C).
 * Affine codes: one little-endian LSB-first bit stream per row (element e at bits
 * [e·b, e·b+b)); fp4 nibbles and fp8 bytes are the same stream with b = 4 or 8. */
#include <string.h>

#include "accel/cpu/cpu_kernels.h"
#include "base/bf16.h"
#include "base/error.h"

static size_t dtype_size(accel_dtype d) { return d == ACCEL_F32 ? 4 : 2; }

size_t cpu_row_bytes(const accel_spec *s) {
  if (s->mode == ACCEL_MODE_DENSE) return (size_t)s->cols * dtype_size(s->dense_dtype);
  return (size_t)s->cols * (size_t)s->bits / 8;
}

size_t cpu_scale_row_bytes(const accel_spec *s) {
  if (s->mode == ACCEL_MODE_DENSE) return 0;
  size_t groups = (size_t)(s->cols / s->group_size);
  return groups * (s->mode == ACCEL_MODE_AFFINE ? dtype_size(s->scales_dtype) : 1);
}

static inline size_t slab_row(const cpu_qmat *m, int64_t expert, int64_t row) {
  return (size_t)expert * (size_t)m->spec.rows + (size_t)row;
}

/* Code of element e of a row stream; a code straddles at most two bytes (bits <= 8). */
static inline unsigned code_at(const uint8_t *p, int bits, int64_t e) {
  uint64_t bit = (uint64_t)e * (uint64_t)bits;
  size_t byte = (size_t)(bit >> 3);
  unsigned sh = (unsigned)(bit & 7);
  unsigned v = p[byte];
  if (sh + (unsigned)bits > 8) v |= (unsigned)p[byte + 1] << 8;
  return (v >> sh) & ((1u << bits) - 1u);
}

void cpu_row_codes(const cpu_qmat *m, int64_t expert, int64_t row, uint8_t *codes) {
  const accel_spec *s = &m->spec;
  const uint8_t *p = (const uint8_t *)m->w + slab_row(m, expert, row) * cpu_row_bytes(s);
  if (s->bits == 8) {
    memcpy(codes, p, (size_t)s->cols);
  } else if (s->bits == 4) {
    for (int64_t i = 0; i < s->cols / 2; i++) {
      codes[2 * i] = p[i] & 15;
      codes[2 * i + 1] = p[i] >> 4;
    }
  } else {
    for (int64_t e = 0; e < s->cols; e++) codes[e] = (uint8_t)code_at(p, s->bits, e);
  }
}

static inline float load_scalar(const uint8_t *p, accel_dtype dt) {
  if (dt == ACCEL_F32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return dt == ACCEL_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}

void cpu_group_params(const cpu_qmat *m, int64_t expert, int64_t row, int64_t g, float *scale,
                      float *bias) {
  const accel_spec *s = &m->spec;
  size_t r = slab_row(m, expert, row);
  size_t groups = (size_t)(s->cols / s->group_size);
  if (s->mode == ACCEL_MODE_AFFINE) {
    size_t es = dtype_size(s->scales_dtype), off = (r * groups + (size_t)g) * es;
    *scale = load_scalar((const uint8_t *)m->scales + off, s->scales_dtype);
    *bias = load_scalar((const uint8_t *)m->biases + off, s->scales_dtype);
    return;
  }
  uint8_t b = ((const uint8_t *)m->scales)[r * groups + (size_t)g];
  *scale = s->mode == ACCEL_MODE_NVFP4 ? mx_e4m3_to_f32(b) : mx_e8m0_to_f32(b);
  *bias = 0.0f;
}

float cpu_code_value(const accel_spec *s, uint8_t code) {
  switch (s->mode) {
  case ACCEL_MODE_NVFP4:
  case ACCEL_MODE_MXFP4: return MX_FP4_LUT[code & 15];
  case ACCEL_MODE_MXFP8: return mx_e4m3_to_f32(code);
  default: return (float)code;
  }
}

float cpu_dense_value(const cpu_qmat *m, int64_t expert, int64_t row, int64_t col) {
  const accel_spec *s = &m->spec;
  size_t es = dtype_size(s->dense_dtype);
  const uint8_t *p = (const uint8_t *)m->w + (slab_row(m, expert, row) * (size_t)s->cols + (size_t)col) * es;
  return load_scalar(p, s->dense_dtype);
}

accel_dtype cpu_dequant_dtype(const accel_spec *s) {
  if (s->mode == ACCEL_MODE_DENSE) return s->dense_dtype;
  if (s->mode == ACCEL_MODE_AFFINE) return s->scales_dtype;
  return ACCEL_BF16;
}

/* Rounds a float to the dtype and stores it (2 or 4 bytes). */
static inline void store_as(void *out, int64_t i, float v, accel_dtype dt) {
  if (dt == ACCEL_F32) {
    memcpy((uint8_t *)out + 4 * i, &v, 4);
    return;
  }
  uint16_t h = dt == ACCEL_BF16 ? mx_f32_to_bf16(v) : mx_f32_to_f16(v);
  memcpy((uint8_t *)out + 2 * i, &h, 2);
}

static inline float round_to(float v, accel_dtype dt) {
  if (dt == ACCEL_BF16) return mx_round_bf16(v);
  if (dt == ACCEL_F16) return mx_f16_to_f32(mx_f32_to_f16(v));
  return v;
}

/* mx.dequantize's graph: affine is multiply(q, s) then add(b), each rounded to the scales
 * dtype (q is exact in it); fp modes are one multiply rounded to bf16 (exact in practice). */
void cpu_dequantize_row(const cpu_qmat *m, int64_t expert, int64_t row, void *out) {
  const accel_spec *s = &m->spec;
  accel_dtype dt = cpu_dequant_dtype(s);
  if (s->mode == ACCEL_MODE_DENSE) {
    size_t rb = cpu_row_bytes(s);
    memcpy(out, (const uint8_t *)m->w + slab_row(m, expert, row) * rb, rb);
    return;
  }
  const uint8_t *p = (const uint8_t *)m->w + slab_row(m, expert, row) * cpu_row_bytes(s);
  int64_t gs = s->group_size;
  for (int64_t g = 0; g < s->cols / gs; g++) {
    float sc, bi;
    cpu_group_params(m, expert, row, g, &sc, &bi);
    for (int64_t e = g * gs; e < (g + 1) * gs; e++) {
      float v = cpu_code_value(s, (uint8_t)code_at(p, s->bits, e));
      float prod = round_to(sc * v, dt);
      store_as(out, e, s->mode == ACCEL_MODE_AFFINE ? prod + bi : prod, dt);
    }
  }
}

void cpu_dequantize_row_bf16(const cpu_qmat *m, int64_t expert, int64_t row, uint16_t *out) {
  accel_dtype dt = cpu_dequant_dtype(&m->spec);
  int64_t cols = m->spec.cols;
  if (dt == ACCEL_BF16) {
    cpu_dequantize_row(m, expert, row, out);
    return;
  }
  if (dt == ACCEL_F16) { /* f16 row first, then bf16 of each value (f16 values are exact in f32) */
    cpu_dequantize_row(m, expert, row, out);
    for (int64_t i = 0; i < cols; i++) {
      uint16_t h;
      memcpy(&h, out + i, 2);
      out[i] = mx_f32_to_bf16(mx_f16_to_f32(h));
    }
    return;
  }
  /* f32: dense values or (q·s)+b in float, each then rounded to bf16 */
  const accel_spec *s = &m->spec;
  if (s->mode == ACCEL_MODE_DENSE) {
    for (int64_t c = 0; c < cols; c++) out[c] = mx_f32_to_bf16(cpu_dense_value(m, expert, row, c));
    return;
  }
  const uint8_t *p = (const uint8_t *)m->w + slab_row(m, expert, row) * cpu_row_bytes(s);
  for (int64_t c = 0; c < cols; c++) {
    float sc, bi;
    cpu_group_params(m, expert, row, c / s->group_size, &sc, &bi);
    out[c] = mx_f32_to_bf16(sc * (float)code_at(p, s->bits, c) + bi);
  }
}

/* Rows [r0, r1) × cols [c0, c1) as float32, w = s·q + b (not rounded to the scales dtype:
 * the products accumulate in float from the exact fields). c0, c1: multiples of the group
 * size (or anything for dense). */
void cpu_decode_tile_f32(const cpu_qmat *m, int64_t expert, int64_t r0, int64_t r1, int64_t c0,
                         int64_t c1, float *out, int64_t ldo) {
  const accel_spec *s = &m->spec;
  for (int64_t r = r0; r < r1; r++) {
    float *o = out + (r - r0) * ldo;
    if (s->mode == ACCEL_MODE_DENSE) {
      for (int64_t c = c0; c < c1; c++) o[c - c0] = cpu_dense_value(m, expert, r, c);
      continue;
    }
    const uint8_t *p = (const uint8_t *)m->w + slab_row(m, expert, r) * cpu_row_bytes(s);
    int64_t gs = s->group_size;
    for (int64_t g = c0 / gs; g < c1 / gs; g++) {
      float sc, bi;
      cpu_group_params(m, expert, r, g, &sc, &bi);
      for (int64_t e = g * gs; e < (g + 1) * gs; e++)
        o[e - c0] = sc * cpu_code_value(s, (uint8_t)code_at(p, s->bits, e)) + bi;
    }
  }
}
