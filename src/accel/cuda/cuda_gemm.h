/* cuBLAS behind one call: y[n, rows] (float32, row stride ldy) = x[n, cols] · Wᵀ with x and W
 * row-major bf16 ([n, cols] and [rows, cols]), float32 accumulation and output. The handle is
 * made once per decoder; atomics are off so repeated runs give the same bits. Only the CUDA
 * plug-in links cuBLAS. */
#ifndef MLXRT_CUDA_GEMM_H
#define MLXRT_CUDA_GEMM_H

#include <stdint.h>

#include "mlxrt.h"

int cg_create(void **handle, mlxrt_error *err);
void cg_destroy(void *handle);
int cg_gemm_bf16(void *handle, void *stream, int64_t n, int64_t rows, int64_t cols, const uint16_t *x,
                 const uint16_t *w, float *y, int64_t ldy, mlxrt_error *err);

#endif
