/* MLX-CPU-compatible float32 sin, cos and exp (see the header). Every operation below is a
 * single float32 operation in the order MLX performs it: the build is ISO C11, where GCC and
 * Clang do not contract a·b + c into an FMA (-ffp-contract=off), and the only fused
 * operations are the explicit fmaf calls (exact in glibc with or without an FMA unit). */
#include "base/mlx_cpu_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Cephes single-precision sincos. π/4 is split as DP1 + DP2 + DP3 so that y·DP1 and y·DP2
 * are exact for the octant counts that occur (|x| ≤ 2^23). */
static float cephes_sincos(float in, int want_sin) {
  int neg = in < 0.0f;
  float x = fabsf(in);
  float y = x * 1.27323954473516f; /* 4/π */
  uint32_t j = (uint32_t)y;
  j = (j + 1u) & ~1u;
  y = (float)j;
  int poly2 = (j & 2u) != 0;
  x = fmaf(y, -0.78515625f, x);
  x = fmaf(y, -2.4187564849853515625e-4f, x);
  x = fmaf(y, -3.77489497744594108e-8f, x);
  int sign_sin = neg ^ ((j & 4u) != 0);
  int sign_cos = ((j - 2u) & 4u) != 0;
  float z = x * x;
  /* cos polynomial on [-π/4, π/4] in c, sin polynomial in s */
  float c = fmaf(z, 2.443315711809948e-5f, -1.388731625493765e-3f);
  float s = fmaf(z, -1.9515295891e-4f, 8.3321608736e-3f);
  c = fmaf(c, z, 4.166664568298827e-2f);
  s = fmaf(s, z, -1.6666654611e-1f);
  c = c * z;
  s = s * z;
  c = c * z;
  s = fmaf(x, s, x);
  c = fmaf(z, -0.5f, c);
  c = c + 1.0f;
  if (want_sin) {
    float v = poly2 ? c : s;
    return sign_sin ? -v : v;
  }
  float v = poly2 ? s : c;
  return sign_cos ? v : -v;
}

float mx_mlxcpu_sinf(float x) {
  if (isnan(x)) return x;
  if (fabsf(x) > 8388608.0f) return sinf(x); /* past 2^23 the octant count is inexact */
  return cephes_sincos(x, 1);
}

float mx_mlxcpu_cosf(float x) {
  if (isnan(x)) return x;
  if (fabsf(x) > 8388608.0f) return cosf(x);
  return cephes_sincos(x, 0);
}

float mx_mlxcpu_expf(float in) {
  if (isnan(in)) return in;
  if (in > 88.0f) return INFINITY;
  if (in < -88.0f) return 0.0f;
  float x = in * 1.442695f; /* log2(e) */
  float ipart = (float)floor((double)x + 0.5); /* x + 0.5 is exact in double */
  float f = x - ipart;
  float p = 1.535336188319500e-4f;
  p = fmaf(p, f, 1.339887440266574e-3f);
  p = fmaf(p, f, 9.618437357674640e-3f);
  p = fmaf(p, f, 5.550332471162809e-2f);
  p = fmaf(p, f, 2.402264791363012e-1f);
  p = fmaf(p, f, 6.931472028550421e-1f);
  p = fmaf(p, f, 1.0f);
  uint32_t bits = (uint32_t)((int32_t)ipart + 127) << 23;
  float two_i;
  memcpy(&two_i, &bits, 4);
  return two_i * p;
}
