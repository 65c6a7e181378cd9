/* Inner kernels of the MLX-CPU-compatible products (mlx_compat.c), one per ISA. Weights are
 * pre-decoded into blocks of 16 rows, k-major: w[k·16 + lane] is the bf16 value MLX's kernel
 * multiplies (affine: bf16(bf16(s·q) + b); fp modes: the code's value), and for fp modes
 * s[g·16 + lane] the group scale. One SIMD lane follows one row's sequential bf16 chain, so
 * the result is bit-identical to the scalar chain whatever the vector width:
 *   affine:   acc = bf16(acc + bf16(x_k·w_k))                     for k in order
 *   fp modes: g = bf16(g + bf16(x_k·w_k)) over the group, acc = bf16(acc + bf16(s·g))
 *   dense bf16 (MLX's bf16 matmul): acc = acc + x_k·w_k in float32 (exact products), in order
 * Each call computes one token against `nblk` (1..4) consecutive blocks (block strides:
 * cols·16 weights, (cols/gs)·16 scales): out[b·16 + lane]. x holds bf16 values as floats. */
#ifndef MLXRT_ACCEL_CPU_MLX_COMPAT_KERNELS_H
#define MLXRT_ACCEL_CPU_MLX_COMPAT_KERNELS_H

#include <stdint.h>

#define CPU_COMPAT_LANES 16
#define CPU_COMPAT_MAX_BLOCKS 4

typedef void (*cpu_compat_affine_fn)(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
typedef void (*cpu_compat_fp_fn)(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                                 const float *x, float *out);

void cpu_compat_dense_scalar(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
void cpu_compat_dense_avx2(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
void cpu_compat_dense_avx512(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
void cpu_compat_affine_scalar(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
void cpu_compat_fp_scalar(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                          const float *x, float *out);
void cpu_compat_affine_avx2(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
void cpu_compat_fp_avx2(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                        const float *x, float *out);
void cpu_compat_affine_avx512(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out);
void cpu_compat_fp_avx512(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                          const float *x, float *out);

/* The ISA files' dispatch: BODY(n) with the block count nblk (1..4) as a constant, so each
 * count gets its own fully unrolled accumulators. */
#define CPU_COMPAT_BY_NBLK(BODY) \
  switch (nblk) {                \
  case 4: BODY(4) break;         \
  case 3: BODY(3) break;         \
  case 2: BODY(2) break;         \
  default: BODY(1) break;        \
  }

#endif
