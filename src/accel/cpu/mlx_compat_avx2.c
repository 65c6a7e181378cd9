/* AVX2 kernels of the MLX-CPU-compatible products (mlx_compat_kernels.h): a 16-row block is
 * two 8-lane halves, up to 4 blocks at once (8 independent bf16 chains). bf16 rounding in
 * integer lanes: u + 0x7fff + ((u >> 16) & 1), low half cleared (MLX's RNE). */
#include <immintrin.h>

#include "accel/cpu/mlx_compat_kernels.h"

#define AI static inline __attribute__((always_inline))

AI __m256 rnd(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}

AI __m256 wload(const uint16_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define FOR_H for (int h = 0; h < 2 * nb_; h++) /* half h: block h/2, lanes (h%2)·8.. */
#define WP(k) (w + (h >> 1) * bstride + (k) * 16 + (h & 1) * 8)

#define AFFINE_BODY(NB)                                                                  \
  {                                                                                      \
    const int nb_ = NB; __m256 acc[2 * NB];                                                                \
    FOR_H acc[h] = _mm256_setzero_ps();                                                  \
    for (int64_t k = 0; k < cols; k++) {                                                 \
      __m256 xv = _mm256_set1_ps(x[k]);                                                  \
      FOR_H acc[h] = rnd(_mm256_add_ps(acc[h], rnd(_mm256_mul_ps(xv, wload(WP(k))))));   \
    }                                                                                    \
    FOR_H _mm256_storeu_ps(out + h * 8, acc[h]);                                         \
  }

void cpu_compat_affine_avx2(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out) {
  int64_t bstride = cols * 16;
  CPU_COMPAT_BY_NBLK(AFFINE_BODY)
}

#define DENSE_BODY(NB)                                                                   \
  {                                                                                      \
    const int nb_ = NB; __m256 acc[2 * NB];                                              \
    FOR_H acc[h] = _mm256_setzero_ps();                                                  \
    for (int64_t k = 0; k < cols; k++) {                                                 \
      __m256 xv = _mm256_set1_ps(x[k]);                                                  \
      FOR_H acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(xv, wload(WP(k))));             \
    }                                                                                    \
    FOR_H _mm256_storeu_ps(out + h * 8, acc[h]);                                         \
  }

void cpu_compat_dense_avx2(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out) {
  int64_t bstride = cols * 16;
  CPU_COMPAT_BY_NBLK(DENSE_BODY)
}

#define FP_BODY(NB)                                                                      \
  {                                                                                      \
    const int nb_ = NB; __m256 acc[2 * NB];                                                                \
    FOR_H acc[h] = _mm256_setzero_ps();                                                  \
    for (int64_t g = 0; g < ng; g++) {                                                   \
      __m256 gsum[2 * NB];                                                               \
      FOR_H gsum[h] = _mm256_setzero_ps();                                               \
      for (int64_t k = g * gs; k < (g + 1) * gs; k++) {                                  \
        __m256 xv = _mm256_set1_ps(x[k]);                                                \
        FOR_H gsum[h] = rnd(_mm256_add_ps(gsum[h], rnd(_mm256_mul_ps(xv, wload(WP(k)))))); \
      }                                                                                  \
      FOR_H {                                                                            \
        __m256 sc = _mm256_loadu_ps(s + (h >> 1) * sstride + g * 16 + (h & 1) * 8);      \
        acc[h] = rnd(_mm256_add_ps(acc[h], rnd(_mm256_mul_ps(sc, gsum[h]))));            \
      }                                                                                  \
    }                                                                                    \
    FOR_H _mm256_storeu_ps(out + h * 8, acc[h]);                                         \
  }

void cpu_compat_fp_avx2(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                        const float *x, float *out) {
  int64_t bstride = cols * 16, ng = cols / gs, sstride = ng * 16;
  CPU_COMPAT_BY_NBLK(FP_BODY)
}
