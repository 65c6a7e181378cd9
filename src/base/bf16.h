/* bf16 / f16 / fp8 / fp4 scalar conversions, exactly as MLX does them (round to nearest even). */
#ifndef MLXRT_BASE_BF16_H
#define MLXRT_BASE_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float mx_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* MLX's RNE: add 0x7FFF + lsb, truncate. NaN stays a quiet NaN. */
static inline uint16_t mx_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Rounds a float to the nearest bf16 value and returns it as a float. */
static inline float mx_round_bf16(float f) { return mx_bf16_to_f32(mx_f32_to_bf16(f)); }

static inline float mx_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t mx_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
    uint32_t r = man >> shift;
    if (rest > half || (rest == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (uint32_t)exp << 10 | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

/* FP8 E4M3 as MLX decodes it: bias 7, no NaN (0x7F = 480). */
static inline float mx_e4m3_to_f32(uint8_t b) {
  int e = (b >> 3) & 0xf, m = b & 7;
  float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);
  return (b & 0x80) ? -v : v;
}

/* E8M0: 2^(s-127); s = 0 gives 2^-127. */
static inline float mx_e8m0_to_f32(uint8_t s) {
  uint32_t u = s ? (uint32_t)s << 23 : 0x00400000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* FP4 E2M1 code → value. */
static const float MX_FP4_LUT[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

#endif
