/* CPU kernels for every MLX weight format: exact field decoding, mx.dequantize-exact
 * dequantization, and float32-accumulating products y = x·Wᵀ (mat-vec and mat-mat).
 * These functions are also the CPU reference other backends' tests compare against:
 * cpu_qmatmul(NULL, CPU_ISA_SCALAR, ...) is the portable single-threaded product.
 * Weight pointers are mmap views: never assumed aligned. */
#ifndef MLXRT_ACCEL_CPU_KERNELS_H
#define MLXRT_ACCEL_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "accel/cpu/pool.h"

/* A weight's bytes plus its description. Pointers cover every expert of a stacked weight. */
typedef struct cpu_qmat {
  accel_spec spec;
  const void *w;      /* packed uint32 words (quantized) or the dense matrix */
  const void *scales; /* NULL for dense */
  const void *biases; /* affine only, else NULL */
} cpu_qmat;

/* AVX512BF16 (needs AVX512-BF16 and VBMI: Sapphire Rapids, Zen 4) adds a mat-vec kernel for
 * affine 2/3/5/6-bit (VPERMB + VPMULTISHIFTQB unpack, VDPBF16PS products) to AVX512. */
typedef enum {
  CPU_ISA_SCALAR = 0,
  CPU_ISA_AVX2 = 1,
  CPU_ISA_AVX512 = 2,
  CPU_ISA_AVX512BF16 = 3,
  CPU_ISA_COUNT
} cpu_isa;

/* ---- spec and layout --------------------------------------------------------------------- */
/* Bytes of one row of the packed weight (or dense row), and of one row of scales. */
size_t cpu_row_bytes(const accel_spec *s);
size_t cpu_scale_row_bytes(const accel_spec *s);

/* ---- decoded fields (what a float64 reference is built from) ----------------------------- */
/* codes[cols]: the raw code of every element of one row (quantized modes only). */
void cpu_row_codes(const cpu_qmat *m, int64_t expert, int64_t row, uint8_t *codes);
/* Scale and bias of group g of one row, decoded exactly (bias 0 for fp modes). */
void cpu_group_params(const cpu_qmat *m, int64_t expert, int64_t row, int64_t g, float *scale,
                      float *bias);
/* Value a code stands for before scaling: q for affine, E2M1 for fp4, E4M3 for mxfp8. */
float cpu_code_value(const accel_spec *s, uint8_t code);
/* Dense element (expert, row, col) as a float (dense mode only). */
float cpu_dense_value(const cpu_qmat *m, int64_t expert, int64_t row, int64_t col);

/* ---- dequantization ---------------------------------------------------------------------- */
/* dtype mx.dequantize returns: the scales dtype for affine, bf16 for fp modes, the weight's
 * own dtype for dense. */
accel_dtype cpu_dequant_dtype(const accel_spec *s);
/* One row exactly as mx.dequantize rounds it, in cpu_dequant_dtype (2 or 4 bytes each). */
void cpu_dequantize_row(const cpu_qmat *m, int64_t expert, int64_t row, void *out);
/* The same row converted to bf16 (RNE), what a quantized embedding lookup yields. */
void cpu_dequantize_row_bf16(const cpu_qmat *m, int64_t expert, int64_t row, uint16_t *out);
/* Rows [r0, r1) × cols [c0, c1) as float32 (w = s·q + b in float, not rounded to the scales
 * dtype), row stride ldo. c0 and c1 must be multiples of the group size (any for dense). */
void cpu_decode_tile_f32(const cpu_qmat *m, int64_t expert, int64_t r0, int64_t r1, int64_t c0,
                         int64_t c1, float *out, int64_t ldo);

/* ---- products ---------------------------------------------------------------------------- */
/* Best ISA this CPU supports, the ISA $MLXRT_CPU_ISA asks for (scalar|avx2|avx512|avx512bf16;
 * unset or auto = best; -1 with err set if unknown or unsupported here), and names. */
cpu_isa cpu_isa_best(void);
int cpu_isa_supported(cpu_isa isa);
int cpu_isa_from_env(cpu_isa *out, mlxrt_error *err);
const char *cpu_isa_name(cpu_isa isa);

/* y[n, rows] = x[n, cols] · W[expert]ᵀ; x bf16, y float32, float32 accumulation.
 * pool may be NULL (runs on the calling thread); a pool runs one product at a time.
 * expert must be 0 for rank-2 weights. Affine: Σ_g s_g·Σq·x + b_g·Σx (n < 4) or a float
 * tile w = s·q + b (n ≥ 4); fp modes: Σ_g s_g·Σv·x. */
int cpu_qmatmul(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, int64_t expert,
                const uint16_t *x, int64_t n, float *y, mlxrt_error *err);
/* cpu_qmatmul whose row i of y is bit for bit what cpu_qmatmul gives for row i of x alone
 * (the mat-vec kernels at every n), each block of weight rows read once for all n rows:
 * a batch of tokens gets exactly the logits one-token steps would. */
int cpu_qmatmul_rowwise(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, int64_t expert,
                        const uint16_t *x, int64_t n, float *y, mlxrt_error *err);

#endif
