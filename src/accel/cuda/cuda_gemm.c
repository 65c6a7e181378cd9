/* cuBLAS GEMM for the batched prompt pass; see cuda_gemm.h. */
#include "cuda_gemm.h"

#include <cublas_v2.h>

#include "base/error.h"

static int cb_fail(cublasStatus_t st, const char *what, mlxrt_error *err) {
  return mx_fail(err, "cuBLAS %s failed: %s (%d)", what, cublasGetStatusString(st), (int)st);
}

int cg_create(void **handle, mlxrt_error *err) {
  cublasHandle_t h = NULL;
  cublasStatus_t st = cublasCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) return cb_fail(st, "cublasCreate", err);
  st = cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return cb_fail(st, "handle setup", err);
  }
  *handle = h;
  return 0;
}

void cg_destroy(void *handle) {
  if (handle) cublasDestroy((cublasHandle_t)handle);
}

/* Column-major view: Y_cm [rows, n] (ld ldy) = W_cm[cols, rows]ᵀ · X_cm[cols, n]. */
int cg_gemm_bf16(void *handle, void *stream, int64_t n, int64_t rows, int64_t cols, const uint16_t *x,
                 const uint16_t *w, float *y, int64_t ldy, mlxrt_error *err) {
  if (n <= 0) return 0;
  if (n > 0x7fffffff || rows > 0x7fffffff || cols > 0x7fffffff || ldy > 0x7fffffff || ldy < rows)
    return mx_fail(err, "cuBLAS GEMM: shape %lld x %lld x %lld (ldy %lld) out of range", (long long)n,
                   (long long)rows, (long long)cols, (long long)ldy);
  cublasHandle_t h = (cublasHandle_t)handle;
  cublasStatus_t st = cublasSetStream(h, (cudaStream_t)stream);
  if (st != CUBLAS_STATUS_SUCCESS) return cb_fail(st, "cublasSetStream", err);
  const float one = 1.0f, zero = 0.0f;
  st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)cols, &one, w, CUDA_R_16BF, (int)cols, x,
                    CUDA_R_16BF, (int)cols, &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return cb_fail(st, "cublasGemmEx (bf16 x bf16 -> f32)", err);
  return 0;
}
