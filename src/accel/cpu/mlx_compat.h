/* MLX-CPU-compatible quantized products (MLXRT_NUMERICS=mlx-cpu): the same arithmetic as
 * MLX 0.32's CPU quantized_matmul for bf16 activations, bit for bit, for comparing with
 * mlx-lm runs made on a CPU. MLX accumulates there in bf16, in K order (docs/NUMERICS.md):
 *   affine:  w = bf16(bf16(s·q) + b),  acc = bf16(acc + bf16(x·w))
 *   fp modes: per group g = bf16(g + bf16(x·v)) over the group, acc = bf16(acc + bf16(s·g))
 * The default path accumulates in float32 (more accurate, and what every backend matches);
 * this one is for verification (a few times slower than the default). */
#ifndef MLXRT_ACCEL_CPU_MLX_COMPAT_H
#define MLXRT_ACCEL_CPU_MLX_COMPAT_H

#include "accel/cpu/cpu_kernels.h"

/* 1 when the spec is one this emulation reproduces (bf16 dense: MLX's bf16 matmul sums in
 * float32 in K order; affine with bf16 scales, nvfp4, mxfp4, mxfp8); other specs (f16/f32
 * dense or scales) go to the default kernels, which accumulate in float like MLX. */
int cpu_mlx_compat_supports(const accel_spec *s);

/* The weight re-laid out for the emulation (decoded to bf16, 16 rows per SIMD block), built
 * on the first product and owned by the caller's weight cache. */
typedef struct cpu_compat_pack cpu_compat_pack;
void cpu_compat_pack_free(cpu_compat_pack *p);

/* y[n, rows] = x[n, cols] · W[expert]ᵀ as MLX's CPU kernel computes it; *pack is built on
 * first use (NULL before). Vectorized across rows (one lane = one row's chain): AVX-512,
 * AVX2 or portable C by isa, all bit-identical; pool may be NULL. */
int cpu_qmatmul_mlx_compat(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, cpu_compat_pack **pack,
                           int64_t expert, const uint16_t *x, int64_t n, float *y, mlxrt_error *err);
/* Reads MLXRT_NUMERICS: unset/"float32" → 0, "mlx-cpu" → 1, anything else an error (-1). */
int cpu_mlx_compat_choose(const char *numerics, int *on, mlxrt_error *err);

#endif
