/* AVX-512 kernels of the MLX-CPU-compatible products (mlx_compat_kernels.h): 16 rows per
 * vector, up to 4 blocks at once so that 4 independent bf16 chains hide the add→round
 * latency. bf16 rounding in integer lanes: u + 0x7fff + ((u >> 16) & 1), low half cleared
 * (MLX's RNE; a NaN stays a NaN except for payloads no product here produces). */
#include <immintrin.h>

#include "accel/cpu/mlx_compat_kernels.h"

#define AI static inline __attribute__((always_inline))

AI __m512 rnd(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
}

AI __m512 wload(const uint16_t *p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

#define FOR_B for (int b = 0; b < nb_; b++)

#define AFFINE_BODY(NB)                                                                  \
  {                                                                                      \
    const int nb_ = NB; __m512 acc[NB];                                                                    \
    FOR_B acc[b] = _mm512_setzero_ps();                                                  \
    for (int64_t k = 0; k < cols; k++) {                                                 \
      __m512 xv = _mm512_set1_ps(x[k]);                                                  \
      FOR_B acc[b] = rnd(_mm512_add_ps(acc[b], rnd(_mm512_mul_ps(xv, wload(w + b * bstride + k * 16))))); \
    }                                                                                    \
    FOR_B _mm512_storeu_ps(out + b * 16, acc[b]);                                        \
  }

void cpu_compat_affine_avx512(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out) {
  int64_t bstride = cols * 16;
  CPU_COMPAT_BY_NBLK(AFFINE_BODY)
}

#define DENSE_BODY(NB)                                                                   \
  {                                                                                      \
    const int nb_ = NB; __m512 acc[NB];                                                  \
    FOR_B acc[b] = _mm512_setzero_ps();                                                  \
    for (int64_t k = 0; k < cols; k++) {                                                 \
      __m512 xv = _mm512_set1_ps(x[k]);                                                  \
      FOR_B acc[b] = _mm512_add_ps(acc[b], _mm512_mul_ps(xv, wload(w + b * bstride + k * 16))); \
    }                                                                                    \
    FOR_B _mm512_storeu_ps(out + b * 16, acc[b]);                                        \
  }

void cpu_compat_dense_avx512(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out) {
  int64_t bstride = cols * 16;
  CPU_COMPAT_BY_NBLK(DENSE_BODY)
}

#define FP_BODY(NB)                                                                      \
  {                                                                                      \
    const int nb_ = NB; __m512 acc[NB];                                                                    \
    FOR_B acc[b] = _mm512_setzero_ps();                                                  \
    for (int64_t g = 0; g < ng; g++) {                                                   \
      __m512 gsum[NB];                                                                   \
      FOR_B gsum[b] = _mm512_setzero_ps();                                               \
      for (int64_t k = g * gs; k < (g + 1) * gs; k++) {                                  \
        __m512 xv = _mm512_set1_ps(x[k]);                                                \
        FOR_B gsum[b] = rnd(_mm512_add_ps(gsum[b], rnd(_mm512_mul_ps(xv, wload(w + b * bstride + k * 16))))); \
      }                                                                                  \
      FOR_B acc[b] = rnd(_mm512_add_ps(acc[b], rnd(_mm512_mul_ps(_mm512_loadu_ps(s + b * sstride + g * 16), gsum[b])))); \
    }                                                                                    \
    FOR_B _mm512_storeu_ps(out + b * 16, acc[b]);                                        \
  }

void cpu_compat_fp_avx512(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                          const float *x, float *out) {
  int64_t bstride = cols * 16, ng = cols / gs, sstride = ng * 16;
  CPU_COMPAT_BY_NBLK(FP_BODY)
}
