/* Reference elementwise math with MLX's rounding points. Each rounding below was checked
 * against MLX 0.32.4 on the CPU (docs/NUMERICS.md). */
#include "mlx/ops.h"

#include <math.h>

#include "base/bf16.h"

#define R mx_round_bf16

void mx_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(ss / (float)n + eps);
  for (int i = 0; i < n; i++) {
    float v = R(x[i] * r);
    y[i] = w ? R(v * w[i]) : v;
  }
}

void mx_rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps) {
  for (int r = 0; r < rows; r++) mx_rmsnorm(y + (int64_t)r * n, x + (int64_t)r * n, w, n, eps);
}

float mx_gelu_approx(float x) {
  static float c_sqrt, c_k, c_half;
  if (c_half == 0.0f) {
    c_sqrt = R((float)sqrt(2.0 / M_PI));
    c_k = R(0.044715f);
    c_half = 0.5f;
  }
  float x3 = R(x * x * x);
  float t = R(x + R(c_k * x3));
  t = R(c_sqrt * t);
  float th = R(tanhf(t));
  return R(R(c_half * x) * R(1.0f + th));
}

void mx_geglu(float *out, const float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = R(mx_gelu_approx(g[i]) * u[i]);
}

void mx_rope_apply(float *x, int dim, const float *inv_freq, float pos, int traditional) {
  int half = dim / 2;
  for (int j = 0; j < half; j++) {
    if (inv_freq[j] == 0.0f) continue; /* cos 1, sin 0: exact pass-through */
    float ang = pos * inv_freq[j];
    float c = R(cosf(ang)), s = R(sinf(ang));
    float *pa = traditional ? &x[2 * j] : &x[j], *pb = traditional ? &x[2 * j + 1] : &x[j + half];
    float a = *pa, b = *pb;
    *pa = R(R(a * c) - R(b * s));
    *pb = R(R(b * c) + R(a * s));
  }
}

void mx_add(float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = R(a[i] + b[i]);
}

void mx_scale(float *y, const float *x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = R(x[i] * s);
}

void mx_round_rows(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = R(x[i]);
}

void mx_to_bf16(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = mx_f32_to_bf16(src[i]);
}

void mx_from_bf16(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = mx_bf16_to_f32(src[i]);
}
