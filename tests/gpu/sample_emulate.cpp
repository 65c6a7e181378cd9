/* Runs sample.cu's kernels on host threads (tests/gpu/emu/cuda_runtime.h) against the C
 * reference accel_sample_ref: a check of the kernels' logic (indices, scans, tie ranks, the
 * pass sequence, clean state afterwards) on a machine without a GPU. Not CI (C++, slow: the
 * threads meet at a barrier for every __syncthreads and shuffle). Build and run:
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Isrc -Iinclude -c src/accel/accel_sample.c -o /tmp/as.o
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Isrc -Iinclude -c src/base/error.c -o /tmp/er.o
 *   g++ -std=c++17 -O2 -pthread -DSK_EMULATION -Itests/gpu/emu -Isrc -Isrc/accel/cuda -Iinclude \
 *       tests/gpu/sample_emulate.cpp /tmp/as.o /tmp/er.o -o /tmp/sample_emulate -lm
 *   /tmp/sample_emulate [trials [seed [big]]]   (the first `big` (6) trials use V = 262144)
 */
#include "../../src/accel/cuda/sample.cu"

#include <math.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "emu_rng.h"

extern "C" {
#include "accel/accel_sample.h"
}

thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, gridDim, blockDim;
pthread_barrier_t emu_block_barrier, emu_warp_barrier[8];
uint64_t emu_xbuf[8][32];

static pthread_barrier_t start_b, end_b;
static void (*g_kernel)(sk_args);
static sk_args g_args;
static bool g_quit;

static void *worker(void *arg) {
  threadIdx.x = (unsigned)(uintptr_t)arg;
  for (;;) {
    pthread_barrier_wait(&start_b);
    if (g_quit) return NULL;
    g_kernel(g_args);
    pthread_barrier_wait(&end_b);
  }
}

static void launch(void (*k)(sk_args), int blocks, const sk_args &a) {
  g_kernel = k;
  g_args = a;
  gridDim.x = (unsigned)blocks;
  for (int b = 0; b < blocks; b++) {
    blockIdx.x = (unsigned)b;
    pthread_barrier_wait(&start_b);
    pthread_barrier_wait(&end_b);
  }
}

/* sk_sample's launch sequence (pass_levels), run here. */
static void emu_sample(const float *logits, int V, const sk_params *p, sk_state *st, int32_t *out) {
  sk_args a;
  a.logits = logits;
  a.V = V;
  a.E = (V + SK_THREADS * SK_MAX_BLOCKS - 1) / (SK_THREADS * SK_MAX_BLOCKS);
  a.p = *p;
  a.st = st;
  a.out = out;
  const int blocks = (V + SK_THREADS * a.E - 1) / (SK_THREADS * a.E);
  for (int i = 0; i < 4; i++) {
    if (!pass_levels(p, i, &a.c_level, &a.m_level)) continue;
    a.do_max = i == 0;
    launch(sk_pass_kernel, blocks, a);
  }
  if (!p->greedy) launch(sk_draw_kernel, blocks, a);
}

static uint64_t g_rng = 0x12345678abcdefull;
static uint64_t rnd() { return emu_xorshift64(&g_rng); }
static double unit() { return (double)(rnd() >> 11) * 0x1p-53; }
static double normal() {
  double u1 = unit(), u2 = unit();
  return sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
}
static float bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 200;
  if (argc > 2) g_rng = strtoull(argv[2], NULL, 0) | 1;
  const int big = argc > 3 ? atoi(argv[3]) : 6; /* trials with V = 262144 first */
  blockDim.x = SK_THREADS;
  pthread_barrier_init(&emu_block_barrier, NULL, SK_THREADS);
  for (int w = 0; w < 8; w++) pthread_barrier_init(&emu_warp_barrier[w], NULL, 32);
  pthread_barrier_init(&start_b, NULL, SK_THREADS + 1);
  pthread_barrier_init(&end_b, NULL, SK_THREADS + 1);
  pthread_t th[SK_THREADS];
  for (int t = 0; t < SK_THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t);
  sk_state *st = (sk_state *)calloc(1, sizeof(sk_state));
  const int sizes[] = {262144, 1, 2, 7, 50, 300, 1000, 4096, 65537, 70000};
  float *l = (float *)malloc(300000 * sizeof(float));
  int bad = 0;
  for (int t = 0; t < trials; t++) {
    int V = sizes[rnd() % (t < big ? 1 : 10)];
    if (t >= big && V == 262144) V = 1000;
    int kind = (int)(rnd() % 7);
    double sd = rnd() % 2 ? 1.0 : 4.0;
    for (int i = 0; i < V; i++) {
      float x = (float)(normal() * sd);
      if (kind == 1) x = bf16(x);
      if (kind == 2) x = roundf(x);
      if (kind == 3) x = 2.0f;
      if (kind == 4 && rnd() % 20 == 0) x = (const float[]){NAN, -INFINITY, INFINITY, -0.0f, FLT_MAX}[rnd() % 5];
      if (kind == 5 && rnd() % 50 == 0) x = NAN;
      if (kind == 6) x = rnd() % 2 ? -INFINITY : NAN;
      l[i] = x;
    }
    if (kind == 6 && rnd() % 2) l[rnd() % (uint64_t)V] = 0.5f;
    accel_sample_params p;
    p.temperature = rnd() % 6 == 0 ? 0.0f : (float)(0.1 + 2 * unit());
    const int ks[] = {0, 1, 2, 5, 64, 1024, V - 1, V, V + 3, (int)(1 + rnd() % (uint64_t)V)};
    p.top_k = ks[rnd() % 10];
    if (p.top_k < 0) p.top_k = 0;
    const float ps[] = {1.0f, 0.0f, 1e-7f, 0.5f, 0.9f, 0.999999f, (float)unit()};
    p.top_p = ps[rnd() % 7];
    const float ms[] = {0.0f, 0.0f, 0.0f, 1.0f, 0.05f, (float)(0.3 * unit())};
    p.min_p = ms[rnd() % 6];
    double u = rnd() % 8 == 0 ? 0.0 : rnd() % 8 == 0 ? 1.0 - 0x1p-53 : unit();
    int32_t want = -1, got = -9;
    mlxrt_error err = {{0}};
    if (accel_sample_ref(l, V, &p, u, &want, &err)) want = -1;
    accel_sample_plan pl;
    accel_sample_plan_make(&p, V, u, &pl, &err);
    sk_params kp = {pl.greedy, pl.inv_t, pl.use_min_p, pl.log_min_p, pl.top_k, pl.use_top_p, pl.top_p, pl.x53};
    emu_sample(l, V, &kp, st, &got);
    /* the state must be clean again */
    int dirty = st->count != 0;
    for (int j = 0; j < SK_BINS; j++) dirty |= st->hc[j] != 0 || st->hm[j] != 0;
    if (got != want || dirty) {
      bad++;
      printf("FAIL trial %d V=%d kind %d T=%g k=%d p=%g minp=%g u=%.17g: ref %d emu %d dirty %d\n", t, V, kind,
             p.temperature, p.top_k, p.top_p, p.min_p, u, want, got, dirty);
    }
  }
  g_quit = true;
  pthread_barrier_wait(&start_b);
  for (int t = 0; t < SK_THREADS; t++) pthread_join(th[t], NULL);
  printf("%d trials, %d differ\n", trials, bad);
  return bad != 0;
}
