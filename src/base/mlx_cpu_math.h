/* float32 sin, cos and exp computed the way MLX 0.32's CPU backend computes them on Linux
 * (its scalar SIMD fallback), so that mlx-cpu numerics (docs/NUMERICS.md) reproduce MLX's
 * RoPE tables bit for bit. These are NOT libm: sin/cos use the Cephes single-precision scheme
 * (octant reduction j = ((uint)(|x|·4/π) + 1) & ~1, the three-part π/4 reduction with fused
 * multiply-adds, two minimax polynomials) and fall back to libm's sinf/cosf for |x| > 2^23;
 * exp is 2^round(x·log2 e) times a degree-6 polynomial in the remainder, 0 below −88 and +inf
 * above 88. Checked against mx.sin / mx.cos / mx.exp by tests/test_mlx_cpu_math.c. */
#ifndef MLXRT_BASE_MLX_CPU_MATH_H
#define MLXRT_BASE_MLX_CPU_MATH_H

float mx_mlxcpu_sinf(float x);
float mx_mlxcpu_cosf(float x);
float mx_mlxcpu_expf(float x);

#endif
