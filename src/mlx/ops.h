/* The reference path's elementwise and attention math, with MLX's rounding points (see
 * docs/NUMERICS.md). Activations are float arrays whose values are always bf16-representable;
 * every function rounds its outputs to bf16 where MLX does. */
#ifndef MLXRT_MLX_OPS_H
#define MLXRT_MLX_OPS_H

#include <stdint.h>

/* y[i] = bf16(bf16(x[i]·r)·w[i]), r = (mean(x²)+eps)^-½ in float32; w NULL = no weight. */
void mx_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* Applies mx_rmsnorm to each of `rows` consecutive vectors of n. */
void mx_rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps);
/* The same with mlx_cpu = 1 taking the mean as MLX's mx.mean does, Σx² · float(1/n) (differs
 * from Σx²/n in the last bit for n not a power of two); mlx_cpu = 0 is mx_rmsnorm. */
void mx_rmsnorm_mode(float *y, const float *x, const float *w, int n, float eps, int mlx_cpu);
void mx_rmsnorm_rows_mode(float *y, const float *x, const float *w, int rows, int n, float eps, int mlx_cpu);

/* gelu_approx op by op in bf16: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (base/gelu.h). */
float mx_gelu_approx(float x);
/* out[i] = bf16(gelu_approx(g[i]) · u[i]) */
void mx_geglu(float *out, const float *g, const float *u, int64_t n);

/* RoPE on one head vector of `dim`: rotate-half pairs (j, j + dim/2), or (2j, 2j+1) when
 * traditional. inv_freq has dim/2 entries (0 for a pass-through pair). cos/sin are rounded
 * to bf16 and each product and sum is rounded to bf16, as MLX's kernel does in bf16. */
void mx_rope_apply(float *x, int dim, const float *inv_freq, float pos, int traditional);

/* The same in two steps, so one position's angles serve every head:
 * mx_rope_angles: c[j], s[j] = bf16(cos θ_j), bf16(sin θ_j) with θ_j = pos·inv_freq[j] in float32
 * (pass-through pairs get 1 and 0). mlx_cpu = 0: libm's cosf/sinf (the default numerics);
 * 1: MLX's own CPU sin/cos (base/mlx_cpu_math.h), for mlx-cpu numerics.
 * mx_rope_rotate: applies them to one head vector of `dim` as mx_rope_apply does. */
void mx_rope_angles(float *c, float *s, int half, const float *inv_freq, float pos, int mlx_cpu);
void mx_rope_rotate(float *x, int dim, const float *c, const float *s, int traditional);

/* MLX's own RoPE frequencies (mx.fast.rope's CPU path, mlx-lm's RoPE classes), for mlx-cpu
 * numerics: inv[half] and the position scale, computed in float32 as MLX does:
 *   default / linear:  inv_j = exp_mlx(−j · (logf(θ)/half)),  pos_scale = (float)(1/factor)
 *   proportional:      inv_j = 1 / (factor · powf(θ, 2j/dim))  for j < live, else 0
 * (kind: 0 default, 1 linear, 2 proportional, as mx_rope_kind). */
void mx_rope_freqs_mlx_cpu(float *inv, float *pos_scale, int kind, double theta, double factor, int dim,
                           int live);

/* Adds elementwise with bf16 rounding: y = bf16(a + b). */
void mx_add(float *y, const float *a, const float *b, int64_t n);
/* y = bf16(x · s) */
void mx_scale(float *y, const float *x, float s, int64_t n);
/* Rounds every value to bf16 in place. */
void mx_round_rows(float *x, int64_t n);

/* Converts bf16-valued floats to bf16 bits and back. */
void mx_to_bf16(uint16_t *dst, const float *src, int64_t n);
void mx_from_bf16(float *dst, const uint16_t *src, int64_t n);

#endif
