/* The decoders' token selection (src/accel/accel_sample.h), which the CUDA kernels reproduce bit
 * for bit: kept sets against a brute-force (full sort) form of the definition, kept sets and
 * draws against mx_sampler (the session sampler) on distributions where the two must agree,
 * edge cases (greedy, top_k 1, tiny top_p, min_p 1, NaN / ±inf / -0, all-equal logits, every
 * logit -inf), draw frequencies, the ends of u, and parameter errors. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel_sample.h"
#include "accel/accel_sample_math.h"
#include "mlx/sampler.h"
#include "test_logits.h"
#include "test_util.h"

#define BIG 262144

/* ---- brute force: sort by (value desc, id asc), cut the order where the definition says ---- */
static const float *g_vals;
static int by_val(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  if (g_vals[i] != g_vals[j]) return g_vals[i] < g_vals[j] ? 1 : -1;
  return (i > j) - (i < j);
}

static int brute_kept(const float *logits, int V, const accel_sample_params *sp, unsigned char *keep) {
  float *x = malloc((size_t)V * sizeof(float));
  int *ord = malloc((size_t)V * sizeof(int));
  for (int i = 0; i < V; i++) {
    x[i] = spm_sanitize(logits[i]);
    ord[i] = i;
  }
  g_vals = x;
  qsort(ord, (size_t)V, sizeof(int), by_val);
  float m = x[ord[0]];
  int n = V;
  if (m == -INFINITY) n = 0;
  else if (sp->temperature == 0.0f || sp->top_k == 1) n = 1;
  else {
    if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
    if (sp->min_p > 0.0f) {
      float thr = m + logf(sp->min_p);
      int c = 0;
      while (c < V && x[ord[c]] >= thr) c++;
      if (c < n) n = c;
    }
    if (sp->top_p > 0.0f && sp->top_p < 1.0f) {
      uint64_t tot = 0, above = 0;
      for (int i = 0; i < V; i++) tot += spm_weight(x[i], m, 1.0f);
      double tgt = (double)sp->top_p * (double)tot;
      int c = 0;
      while (c < V) { /* one group of equal values at a time */
        if (!((double)above < tgt)) break;
        int e = c;
        while (e < V && x[ord[e]] == x[ord[c]]) above += spm_weight(x[ord[e++]], m, 1.0f);
        c = e;
      }
      if (c < n) n = c;
    }
  }
  memset(keep, 0, (size_t)V);
  for (int i = 0; i < n; i++) keep[ord[i]] = 1;
  free(x);
  free(ord);
  return n;
}

static accel_sample_params P(float t, int k, float p, float mp) {
  accel_sample_params s = {t, k, p, mp};
  return s;
}

static mx_sampler *make_sampler(const accel_sample_params *sp, uint64_t seed, int V) {
  mx_sampler_params p;
  mx_sampler_params_default(&p);
  p.temperature = sp->temperature;
  p.top_k = sp->top_k;
  p.top_p = sp->top_p;
  p.min_p = sp->min_p;
  p.seed = seed;
  mlxrt_error err = {{0}};
  mx_sampler *s = mx_sampler_create(&p, V, &err);
  CHECKF(s != NULL, "%s", err.msg);
  return s;
}

static const accel_sample_params CASES[] = {
    {1.0f, 0, 1.0f, 0.0f},  {0.8f, 64, 0.95f, 0.0f}, {1.0f, 40, 1.0f, 0.0f},  {0.7f, 0, 0.9f, 0.0f},
    {1.3f, 0, 1.0f, 0.05f}, {1.0f, 1000, 0.5f, 0.1f}, {0.5f, 5, 0.0f, 0.0f}, {2.0f, 0, 0.99f, 0.01f},
    {1.0f, 2000, 1.0f, 0.0f}, {0.9f, 100000, 0.7f, 0.0f},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

/* kept sets: brute force and mx_sampler_candidates */
static void test_kept(int V, int trials, int with_sampler) {
  float *l = malloc((size_t)V * sizeof(float));
  unsigned char *a = malloc((size_t)V), *b = malloc((size_t)V), *c = malloc((size_t)V);
  int *ids = malloc((size_t)V * sizeof(int));
  mlxrt_error err = {{0}};
  int bad_brute = 0, bad_sampler = 0, total = 0;
  for (int t = 0; t < trials; t++) {
    int ties = t % 3 == 2;
    test_random_logits(l, V, 1000 + (uint64_t)t, t % 2 ? 1.0f : 3.0f, ties ? 0.5f : 0.0f);
    for (int ci = 0; ci < NCASES; ci++) {
      accel_sample_params sp = CASES[ci];
      int n = accel_sample_kept(l, V, &sp, a, &err);
      int nb = brute_kept(l, V, &sp, b);
      total++;
      if (n != nb || memcmp(a, b, (size_t)V)) {
        if (bad_brute++ < 5)
          fprintf(stderr, "V=%d trial %d case %d: kept %d, brute force %d\n", V, t, ci, n, nb);
      }
      if (with_sampler && !ties) {
        mx_sampler *s = make_sampler(&sp, 1, V);
        int ns = mx_sampler_candidates(s, l, ids, &err);
        memset(c, 0, (size_t)V);
        for (int j = 0; j < ns; j++) c[ids[j]] = 1;
        if (ns != n || memcmp(a, c, (size_t)V)) {
          if (bad_sampler++ < 5)
            fprintf(stderr, "V=%d trial %d case %d: kept %d, mx_sampler %d\n", V, t, ci, n, ns);
        }
        mx_sampler_free(s);
      }
    }
  }
  CHECKF(bad_brute == 0, "V=%d: %d of %d kept sets differ from the brute force", V, bad_brute, total);
  CHECKF(bad_sampler == 0, "V=%d: %d kept sets differ from mx_sampler", V, bad_sampler);
  free(l);
  free(a);
  free(b);
  free(c);
  free(ids);
}

/* draws: the same seed gives the same tokens as mx_sampler_sample */
static void test_draws_vs_sampler(int V, int logit_sets, int draws) {
  float *l = malloc((size_t)V * sizeof(float));
  mlxrt_error err = {{0}};
  int diff = 0, n = 0;
  for (int t = 0; t < logit_sets; t++) {
    test_random_logits(l, V, 77 + (uint64_t)t, t % 2 ? 1.5f : 4.0f, 0.0f);
    for (int ci = 0; ci < NCASES; ci++) {
      accel_sample_params sp = CASES[ci];
      uint64_t seed = 12345 + (uint64_t)(t * 100 + ci);
      mx_sampler *s = make_sampler(&sp, seed, V);
      mx_rng r;
      mx_rng_seed(&r, seed);
      for (int d = 0; d < draws; d++) {
        int want = mx_sampler_sample(s, l, &err);
        int32_t got = -1;
        int rc = accel_sample_ref(l, V, &sp, mx_rng_uniform(&r), &got, &err);
        n++;
        if (rc || got != want) {
          if (diff++ < 5) fprintf(stderr, "V=%d set %d case %d draw %d: %d vs mx_sampler %d (%s)\n", V, t, ci, d, got, want, rc ? err.msg : "");
        }
      }
      mx_sampler_free(s);
    }
  }
  CHECKF(diff == 0, "V=%d: %d of %d draws differ from mx_sampler with the same seed", V, diff, n);
  free(l);
}

static int32_t pick(const float *l, int V, accel_sample_params sp, double u) {
  mlxrt_error err = {{0}};
  int32_t t = -7;
  if (accel_sample_ref(l, V, &sp, u, &t, &err)) {
    fprintf(stderr, "pick: %s\n", err.msg);
    return -2;
  }
  return t;
}

static void test_edges(void) {
  enum { V = 16 };
  float l[V];
  mlxrt_error err = {{0}};
  unsigned char keep[V];
  for (int i = 0; i < V; i++) l[i] = (float)(i % 5) * 0.25f; /* max 1.0 at ids 4, 9, 14 */
  /* greedy: temperature 0 or top_k 1, lowest id of the maximum, u ignored */
  CHECK(pick(l, V, P(0.0f, 0, 1.0f, 0.0f), 0.99) == 4);
  CHECK(pick(l, V, P(1.0f, 1, 1.0f, 0.0f), 0.99) == 4);
  /* top_k 2 on a three-way tie keeps the two lowest ids */
  CHECK(accel_sample_kept(l, V, &(accel_sample_params){1.0f, 2, 1.0f, 0.0f}, keep, &err) == 2);
  CHECK(keep[4] && keep[9] && !keep[14]);
  CHECK(pick(l, V, P(1.0f, 2, 1.0f, 0.0f), 0.0) == 4 && pick(l, V, P(1.0f, 2, 1.0f, 0.0f), 0.999999) == 9);
  /* a tiny top_p and min_p 1 keep the maximum's ties only */
  CHECK(accel_sample_kept(l, V, &(accel_sample_params){1.0f, 0, 1e-9f, 0.0f}, keep, &err) == 3);
  CHECK(keep[4] && keep[9] && keep[14]);
  CHECK(accel_sample_kept(l, V, &(accel_sample_params){1.0f, 0, 1.0f, 1.0f}, keep, &err) == 3);
  CHECK(pick(l, V, P(1.0f, 0, 1.0f, 1.0f), 0.5) == 9 && pick(l, V, P(1.0f, 0, 1.0f, 1.0f), 0.9) == 14);
  /* min_p 0.5 of p_max: logits >= 1 + ln 0.5 = 0.307 → values 0.5, 0.75, 1.0 */
  CHECK(accel_sample_kept(l, V, &(accel_sample_params){1.0f, 0, 1.0f, 0.5f}, keep, &err) == 9);
  /* step 0: a row holding NaN or ±inf gives ACCEL_TOKEN_NONFINITE(the lowest such id), greedy
   * or sampled, whatever u */
  float m[6] = {0.5f, -0.0f, NAN, 0.0f, -INFINITY, NAN};
  float inf[4] = {1.0f, FLT_MAX, INFINITY, 2.0f};
  float neg[3] = {1.0f, 2.0f, -INFINITY};
  for (int d = 0; d < 4; d++) {
    CHECK(pick(m, 6, P(0.0f, 0, 1.0f, 0.0f), d / 4.0) == ACCEL_TOKEN_NONFINITE(2));
    CHECK(pick(m, 6, P(1.0f, 0, 1.0f, 0.0f), d / 4.0) == ACCEL_TOKEN_NONFINITE(2));
    CHECK(pick(inf, 4, P(0.7f, 3, 0.9f, 0.1f), d / 4.0) == ACCEL_TOKEN_NONFINITE(2));
    CHECK(pick(neg, 3, P(0.0f, 0, 1.0f, 0.0f), d / 4.0) == ACCEL_TOKEN_NONFINITE(2));
  }
  CHECK(ACCEL_NONFINITE_ID(ACCEL_TOKEN_NONFINITE(2)) == 2 && ACCEL_TOKEN_NONFINITE(0) == -2);
  CHECK(accel_logits_first_nonfinite(m, 6) == 2 && accel_logits_first_nonfinite(m, 2) == -1);
  /* past a block of 64 finite values, and every kind of non-finite bit pattern */
  float big[200];
  for (int i = 0; i < 200; i++) big[i] = (float)i - 100.0f;
  CHECK(accel_logits_first_nonfinite(big, 200) == -1);
  const uint32_t pats[4] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFF800001u};
  for (int k = 0; k < 4; k++) {
    float x;
    memcpy(&x, &pats[k], sizeof x);
    big[130 + k] = x;
    CHECK(accel_logits_first_nonfinite(big, 200) == 130 + k);
    big[130 + k] = 0.0f;
  }
  CHECK(accel_fail_nonfinite(&err, 17, 42) == -1);
  CHECK_MSG(err, "the logits after position 17 are not finite");
  CHECK_MSG(err, "at id 42");
  /* -0 equals +0 */
  float z[2] = {-0.0f, 0.0f};
  CHECK(pick(z, 2, P(0.0f, 0, 1.0f, 0.0f), 0.0) == 0);
  CHECK(pick(z, 2, P(1.0f, 0, 1.0f, 0.0f), 0.49) == 0 && pick(z, 2, P(1.0f, 0, 1.0f, 0.0f), 0.51) == 1);
  /* every logit -inf or NaN: non-finite too */
  float dead[3] = {-INFINITY, NAN, -INFINITY};
  int32_t t = 5;
  CHECK(accel_sample_ref(dead, 3, &(accel_sample_params){1.0f, 0, 1.0f, 0.0f}, 0.5, &t, &err) == 0 &&
        t == ACCEL_TOKEN_NONFINITE(0));
  /* all equal: u splits the vocabulary evenly; the ends of u */
  float eq[8] = {3, 3, 3, 3, 3, 3, 3, 3};
  for (int i = 0; i < 8; i++) CHECK(pick(eq, 8, P(1.0f, 0, 1.0f, 0.0f), (i + 0.5) / 8.0) == i);
  CHECK(pick(eq, 8, P(1.0f, 0, 1.0f, 0.0f), 0.0) == 0);
  CHECK(pick(eq, 8, P(1.0f, 0, 1.0f, 0.0f), 1.0 - 0x1p-53) == 7);
  CHECK(pick(eq, 8, P(1.0f, 0, 1.0f, 0.0f), 1.0) == 7);  /* clamped into [0, 1) */
  CHECK(pick(eq, 8, P(1.0f, 0, 1.0f, 0.0f), -3.0) == 0);
  CHECK(pick(eq, 8, P(1.0f, 3, 1.0f, 0.0f), 0.99) == 2);
  /* a token far below the maximum weighs 0 and is never drawn, even at the top of u */
  float far[3] = {0.0f, -200.0f, 0.0f};
  CHECK(pick(far, 3, P(1.0f, 0, 1.0f, 0.0f), 1.0 - 0x1p-53) == 2);
  CHECK(pick(far, 3, P(1.0f, 0, 1.0f, 0.0f), 0.0) == 0);
  /* a tiny temperature is greedy in effect (ties still split) */
  float two[3] = {1.0f, 1.0001f, 1.0f};
  CHECK(pick(two, 3, P(1e-30f, 0, 1.0f, 0.0f), 0.999) == 1);
  /* parameter errors */
  CHECK(accel_sample_ref(l, V, &(accel_sample_params){-1.0f, 0, 1.0f, 0.0f}, 0.5, &t, &err) == -1);
  CHECK_MSG(err, "temperature");
  CHECK(accel_sample_ref(l, V, &(accel_sample_params){NAN, 0, 1.0f, 0.0f}, 0.5, &t, &err) == -1);
  CHECK(accel_sample_ref(l, V, &(accel_sample_params){1.0f, -2, 1.0f, 0.0f}, 0.5, &t, &err) == -1);
  CHECK_MSG(err, "top_k");
  CHECK(accel_sample_ref(l, V, &(accel_sample_params){1.0f, 0, 1.5f, 0.0f}, 0.5, &t, &err) == -1);
  CHECK_MSG(err, "top_p");
  CHECK(accel_sample_ref(l, V, &(accel_sample_params){1.0f, 0, 1.0f, -0.1f}, 0.5, &t, &err) == -1);
  CHECK_MSG(err, "min_p");
  CHECK(accel_sample_ref(l, V, &(accel_sample_params){1.0f, 0, 1.0f, 0.0f}, NAN, &t, &err) == -1);
  CHECK(accel_sample_ref(l, 0, &(accel_sample_params){1.0f, 0, 1.0f, 0.0f}, 0.5, &t, &err) == -1);
  CHECK_MSG(err, "vocabulary");
}

/* draw frequencies against e^(l/T) over the kept set */
static void test_frequencies(void) {
  enum { V = 6, N = 60000 };
  float l[V] = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, -3.0f};
  accel_sample_params sp = {0.8f, 4, 1.0f, 0.0f}; /* keeps ids 3, 1, 4, 0 */
  int count[V] = {0};
  mx_rng r;
  mx_rng_seed(&r, 99);
  for (int i = 0; i < N; i++) {
    int32_t t = pick(l, V, sp, mx_rng_uniform(&r));
    if (t >= 0 && t < V) count[t]++;
  }
  double z = 0;
  for (int i = 0; i < V; i++)
    if (i != 2 && i != 5) z += exp(l[i] / 0.8);
  for (int i = 0; i < V; i++) {
    double p = i == 2 || i == 5 ? 0.0 : exp(l[i] / 0.8) / z, f = (double)count[i] / N;
    CHECKF(fabs(f - p) <= 4.0 * sqrt(p * (1 - p) / N) + 1e-9, "id %d: frequency %.4f, expected %.4f", i, f, p);
  }
}

int main(void) {
  test_edges();
  test_frequencies();
  test_kept(50, 30, 1);
  test_kept(3000, 6, 1);
  test_kept(BIG, 1, 1);
  test_draws_vs_sampler(40, 10, 30);
  test_draws_vs_sampler(5000, 3, 20);
  test_draws_vs_sampler(BIG, 1, 4);
  /* timing of the CPU selection on the Gemma vocabulary (the CPU decoder runs it per token) */
  float *l = malloc(BIG * sizeof(float));
  test_random_logits(l, BIG, 5, 3.0f, 0.0f);
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  int32_t tok;
  mlxrt_error err = {{0}};
  for (int i = 0; i < 5; i++) accel_sample_ref(l, BIG, &(accel_sample_params){0.8f, 64, 0.95f, 0.0f}, i / 5.0, &tok, &err);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  printf("accel_sample_ref, V=%d, top_k 64 + top_p 0.95: %.2f ms per token\n", BIG,
         ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6) / 5);
  free(l);
  TEST_END();
}
