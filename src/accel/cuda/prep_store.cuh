/* The mat-vec's activation prep written by the kernel that makes x (decode.cu's geglu with
 * down's prep, residual_norm.cu), bit for bit what ck_xprep_premax computes. */
#ifndef MLXRT_CUDA_PREP_STORE_CUH
#define MLXRT_CUDA_PREP_STORE_CUH

#include <math.h>
#include <stdint.h>

#include "ck_device.cuh"

/* The mat-vec's activation prep written by the kernel that makes x (xmode, mv_xmode in
 * cuda_decoder.c), bit for bit what ck_xprep_premax computes from the block maxima: the
 * exponent from the row's max |x| (1: fp16 x·2^e, max in [2^14, 2^15); 2: bf16 as it is)... */
static __device__ __forceinline__ int prep_exp(float m, int xmode) {
  int e = 0;
  if (xmode == 1 && m > 0.f && m <= 3.0e38f) {
    frexpf(m, &e); /* m < 2^e: scale by 2^(15-e) → max in [2^14, 2^15) */
    e = 15 - e;
  }
  return e;
}
/* ... and value i (bf16 ov) in fragment order: value kk of 32-k slice i/32 (m, hi, t, j) */
static __device__ __forceinline__ void prep_store(uint16_t *xp, int i, uint16_t ov, int e, int xmode) {
  const int kk = i & 31, rr = kk & 15;
  const uint16_t v = xmode == 2 ? ov : ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ov), e));
  xp[((i >> 5) * 4 + ((rr & 7) >> 1)) * 8 + (kk >> 4) * 4 + (rr >> 3) * 2 + (rr & 1)] = v;
}

#endif
