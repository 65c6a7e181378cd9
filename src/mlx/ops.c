/* Reference elementwise math with MLX's rounding points. Each rounding below was checked
 * against MLX 0.32.4 on the CPU (docs/NUMERICS.md). */
#include "mlx/ops.h"

#include <math.h>

#include "base/bf16.h"
#include "base/gelu.h"
#include "base/mlx_cpu_math.h"

#define R mx_round_bf16

void mx_rmsnorm_mode(float *y, const float *x, const float *w, int n, float eps, int mlx_cpu) {
  float ss = 0.0f;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float mean = mlx_cpu ? ss * (float)(1.0 / n) : ss / (float)n;
  float r = 1.0f / sqrtf(mean + eps);
  for (int i = 0; i < n; i++) {
    float v = R(x[i] * r);
    y[i] = w ? R(v * w[i]) : v;
  }
}

void mx_rmsnorm(float *y, const float *x, const float *w, int n, float eps) { mx_rmsnorm_mode(y, x, w, n, eps, 0); }

void mx_rmsnorm_rows_mode(float *y, const float *x, const float *w, int rows, int n, float eps, int mlx_cpu) {
  for (int r = 0; r < rows; r++) mx_rmsnorm_mode(y + (int64_t)r * n, x + (int64_t)r * n, w, n, eps, mlx_cpu);
}

void mx_rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps) {
  mx_rmsnorm_rows_mode(y, x, w, rows, n, eps, 0);
}

float mx_gelu_approx(float x) { return mx_gelu_approx_bf16(mx_gelu_table_ready(), x); }

void mx_geglu(float *out, const float *g, const float *u, int64_t n) {
  const uint16_t *table = mx_gelu_table_ready();
  for (int64_t i = 0; i < n; i++) out[i] = R(mx_gelu_approx_bf16(table, g[i]) * u[i]);
}

void mx_rope_angles(float *c, float *s, int half, const float *inv_freq, float pos, int mlx_cpu) {
  for (int j = 0; j < half; j++) {
    if (inv_freq[j] == 0.0f) { /* cos 1, sin 0: exact pass-through */
      c[j] = 1.0f;
      s[j] = 0.0f;
      continue;
    }
    float ang = pos * inv_freq[j];
    c[j] = R(mlx_cpu ? mx_mlxcpu_cosf(ang) : cosf(ang));
    s[j] = R(mlx_cpu ? mx_mlxcpu_sinf(ang) : sinf(ang));
  }
}

void mx_rope_rotate(float *x, int dim, const float *c, const float *s, int traditional) {
  int half = dim / 2;
  for (int j = 0; j < half; j++) {
    if (c[j] == 1.0f && s[j] == 0.0f) continue; /* pass-through: a·1 − b·0 = a */
    float *pa = traditional ? &x[2 * j] : &x[j], *pb = traditional ? &x[2 * j + 1] : &x[j + half];
    float a = *pa, b = *pb;
    *pa = R(R(a * c[j]) - R(b * s[j]));
    *pb = R(R(b * c[j]) + R(a * s[j]));
  }
}

void mx_rope_apply(float *x, int dim, const float *inv_freq, float pos, int traditional) {
  float c[512], s[512];
  int half = dim / 2 < 512 ? dim / 2 : 512;
  mx_rope_angles(c, s, half, inv_freq, pos, 0);
  mx_rope_rotate(x, 2 * half, c, s, traditional);
}

void mx_rope_freqs_mlx_cpu(float *inv, float *pos_scale, int kind, double theta, double factor, int dim,
                           int live) {
  int half = dim / 2;
  float base = (float)theta, fac = (float)factor;
  *pos_scale = 1.0f;
  if (kind == 2) { /* mlx-lm ProportionalRoPE: freqs = factor·θ^(arange(0, rot, 2)/dim), inf past rot */
    for (int j = 0; j < half; j++) {
      if (j >= live) {
        inv[j] = 0.0f; /* 1/inf */
        continue;
      }
      float e = (float)(2 * j) / (float)dim;
      inv[j] = 1.0f / (fac * powf(base, e));
    }
    return;
  }
  /* mx.fast.rope's own frequencies: exp(arange(0, −half, −1) · (log(base)/half)) */
  float step = logf(base) / (float)half;
  for (int j = 0; j < half; j++) inv[j] = j < live ? mx_mlxcpu_expf((float)(-j) * step) : 0.0f;
  if (kind == 1) *pos_scale = (float)(1.0 / factor);
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
