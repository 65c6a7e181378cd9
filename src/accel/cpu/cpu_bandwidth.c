#include "accel/cpu/cpu_bandwidth.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { CHUNK = 4 << 20 };

typedef struct {
  const uint8_t *buf;
  size_t bytes;
  volatile uint64_t sink[64];
} read_job;

#if defined(__x86_64__)
/* 256-bit loads into four independent accumulators: limited by memory, not by the adds. */
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t *p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  uint64_t t[4];
  _mm256_storeu_si256((__m256i *)t, a);
  return t[0] + t[1] + t[2] + t[3];
}
#endif

static uint64_t sum_plain(const uint8_t *p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0, w[4];
  for (size_t i = 0; i + 32 <= n; i += 32) {
    memcpy(w, p + i, 32);
    a += w[0];
    b += w[1];
    c += w[2];
    d += w[3];
  }
  return a + b + c + d;
}

static void read_task(void *ctx, int64_t t, int worker) {
  read_job *j = ctx;
  size_t off = (size_t)t * CHUNK, n = off + CHUNK > j->bytes ? j->bytes - off : CHUNK;
  uint64_t s;
#if defined(__x86_64__)
  s = __builtin_cpu_supports("avx2") ? sum_avx2(j->buf + off, n) : sum_plain(j->buf + off, n);
#else
  s = sum_plain(j->buf + off, n);
#endif
  j->sink[worker & 63] += s;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double cpu_read_pass(cpu_pool *pool, const uint8_t *buf, size_t bytes) {
  read_job j;
  memset(&j, 0, sizeof j);
  j.buf = buf;
  j.bytes = bytes;
  double t0 = now_s();
  cpu_pool_run(pool, (int64_t)((bytes + CHUNK - 1) / CHUNK), read_task, &j);
  return now_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double cpu_read_bandwidth(cpu_pool *pool, size_t bytes, int runs) {
  uint8_t *buf = malloc(bytes);
  if (!buf || runs < 1) {
    free(buf);
    return 0.0;
  }
  for (size_t i = 0; i < bytes; i += 4096) buf[i] = (uint8_t)i; /* fault the pages in */
  double t[64];
  if (runs > 64) runs = 64;
  cpu_read_pass(pool, buf, bytes); /* warm-up */
  for (int r = 0; r < runs; r++) t[r] = cpu_read_pass(pool, buf, bytes);
  qsort(t, (size_t)runs, sizeof t[0], cmp_double);
  free(buf);
  return (double)bytes / t[runs / 2] / 1e9;
}
