/* Sampler: kept sets against a brute-force (full sort) reference on small and 262144-entry
 * vocabularies, greedy and its limits, draw frequencies against the softmax over many draws with
 * fixed seeds, repetition penalty and its window, determinism, parameter errors, timing; and
 * generation_config.json / config.json parsing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mlx/gen_config.h"
#include "mlx/sampler.h"
#include "test_logits.h"
#include "test_util.h"

#define BIG_VOCAB 262144

/* CPU time of this thread: the machine is shared, wall time would measure the neighbours. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mx_sampler *make(float temp, int top_k, float top_p, float min_p, uint64_t seed, int vocab) {
  mx_sampler_params p;
  mx_sampler_params_default(&p);
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  mlxrt_error err = {{0}};
  mx_sampler *s = mx_sampler_create(&p, vocab, &err);
  CHECKF(s != NULL, "%s", err.msg);
  return s;
}

/* ---- brute-force reference -------------------------------------------------------------- */

static const float *g_sort_vals;
static int by_val_desc(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  if (g_sort_vals[i] != g_sort_vals[j]) return g_sort_vals[i] < g_sort_vals[j] ? 1 : -1;
  return (i > j) - (i < j);
}

/* ids by decreasing logit, ties by increasing id (a full sort: the reference's whole point). */
static int *sorted_order(const float *l, int n) {
  int *order = malloc((size_t)n * sizeof(int));
  for (int i = 0; i < n; i++) order[i] = i;
  g_sort_vals = l;
  qsort(order, (size_t)n, sizeof(int), by_val_desc);
  return order;
}

/* keep[i] = 1 for the tokens mlx-lm's filters keep (temperature > 0); sorted may be NULL. */
static void reference_keep_sorted(const float *l, int n, const int *sorted, int top_k,
                                  float top_p, float min_p, unsigned char *keep) {
  int *own = sorted ? NULL : sorted_order(l, n);
  const int *order = sorted ? sorted : own;
  for (int i = 0; i < n; i++) keep[i] = 1;
  float m = l[order[0]];
  if (top_p > 0.0f && top_p < 1.0f) {
    double z = 0.0;
    for (int i = 0; i < n; i++) z += expf(l[i] - m);
    double above = 0.0, target = (double)top_p * z;
    for (int a = 0; a < n;) {
      int b = a;
      double group = 0.0;
      while (b < n && l[order[b]] == l[order[a]]) group += expf(l[order[b]] - m), b++;
      if (!(above < target))
        for (int j = a; j < b; j++) keep[order[j]] = 0;
      above += group;
      a = b;
    }
  }
  if (min_p > 0.0f)
    for (int i = 0; i < n; i++)
      if (l[i] < m + logf(min_p)) keep[i] = 0;
  if (top_k > 0 && top_k < n)
    for (int j = top_k; j < n; j++) keep[order[j]] = 0;
  free(own);
}

static void reference_keep(const float *l, int n, int top_k, float top_p, float min_p,
                           unsigned char *keep) {
  reference_keep_sorted(l, n, NULL, top_k, top_p, min_p, keep);
}

static int compare_candidates(const float *l, int n, const int *sorted, int top_k, float top_p,
                              float min_p, const char *what) {
  mx_sampler *s = make(1.0f, top_k, top_p, min_p, 1, n);
  if (!s) return 0;
  int *ids = malloc((size_t)n * sizeof(int));
  unsigned char *keep = malloc((size_t)n);
  mlxrt_error err = {{0}};
  int got = mx_sampler_candidates(s, l, ids, &err);
  reference_keep_sorted(l, n, sorted, top_k, top_p, min_p, keep);
  int want = 0, same = got > 0;
  for (int i = 0; i < n; i++) want += keep[i];
  for (int j = 0; j < got && same; j++) same = keep[ids[j]] && (j == 0 || ids[j] > ids[j - 1]);
  same = same && got == want;
  CHECKF(same, "%s (vocab %d, top_k %d, top_p %g, min_p %g): kept %d, reference %d", what, n,
         top_k, top_p, min_p, got, want);
  free(ids);
  free(keep);
  mx_sampler_free(s);
  return want;
}

static void test_candidates_exact(void) {
  static float l[BIG_VOCAB];
  const struct {
    int k;
    float p, minp;
  } cfg[] = {{64, 0.95f, 0.0f}, {0, 0.95f, 0.0f}, {0, 0.5f, 0.0f}, {0, 0.0f, 0.05f},
             {40, 0.0f, 0.0f}, {1, 0.0f, 0.0f},   {0, 0.999f, 0.0f}, {5000, 0.9f, 0.01f},
             {64, 0.3f, 0.2f}, {0, 0.2f, 0.0f}};
  const int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
  for (int trial = 0; trial < 3; trial++) {
    int ties = trial == 2;
    float sd = trial == 0 ? 3.0f : 1.0f; /* peaked vs flat (flat: the top-p set is large) */
    test_random_logits(l, BIG_VOCAB, 100 + (uint64_t)trial, sd, ties ? 0.25f : 0.0f);
    int *sorted = sorted_order(l, BIG_VOCAB);
    for (int c = 0; c < ncfg; c++)
      compare_candidates(l, BIG_VOCAB, sorted, cfg[c].k, cfg[c].p, cfg[c].minp,
                         ties ? "262144 vocab with ties" : "262144 vocab");
    free(sorted);
  }
  /* Small vocabularies, many random cases, heavy ties. */
  float small[37];
  for (int t = 0; t < 300; t++) {
    test_random_logits(small, 37, 1000 + (uint64_t)t, 2.0f, t % 2 ? 0.25f : 0.0f);
    compare_candidates(small, 37, NULL, t % 7, (t % 5) ? 0.15f * (float)(t % 5) + 0.1f : 1.0f,
                       (t % 3) ? 0.0f : 0.1f, "37 vocab");
  }
  /* Orders that stress the top-k threshold scan (every token raises it; nothing does) and
   * ties across its buffer: ascending, descending, all equal, a few plateaus. */
  const char *names[4] = {"ascending", "descending", "all equal", "plateaus"};
  for (int kind = 0; kind < 4; kind++) {
    for (int i = 0; i < BIG_VOCAB; i++)
      l[i] = kind == 0 ? (float)i * 1e-4f
             : kind == 1 ? -(float)i * 1e-4f
             : kind == 2 ? 1.5f
                         : (float)((i * 7919) % 5);
    int *sorted = sorted_order(l, BIG_VOCAB);
    compare_candidates(l, BIG_VOCAB, sorted, 64, 0.0f, 0.0f, names[kind]);
    compare_candidates(l, BIG_VOCAB, sorted, 3000, 0.0f, 0.0f, names[kind]);
    compare_candidates(l, BIG_VOCAB, sorted, 0, 0.5f, 0.0f, names[kind]);
    compare_candidates(l, BIG_VOCAB, sorted, 64, 0.95f, 0.0f, names[kind]);
    free(sorted);
  }

  /* Logits spanning signs and -inf (masked tokens). */
  for (int i = 0; i < 1000; i++) l[i] = (i % 3) ? -INFINITY : (float)(i % 17) - 8.0f;
  compare_candidates(l, 1000, NULL, 0, 0.9f, 0.0f, "masked");
  compare_candidates(l, 1000, NULL, 20, 0.0f, 0.0f, "masked");
  compare_candidates(l, 1000, NULL, 500, 0.0f, 0.0f, "masked, k beyond the finite tokens");
}

/* ---- greedy ----------------------------------------------------------------------------- */

static void test_greedy(void) {
  float l[8] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.0f, -INFINITY, 1.9f};
  mx_sampler *s = make(0.0f, 0, 1.0f, 0.0f, 7, 8);
  mlxrt_error err = {{0}};
  CHECK(mx_sampler_sample(s, l, &err) == 1); /* lowest id among equal maxima, NaN ignored */
  float bad[3] = {NAN, -INFINITY, NAN};
  mx_sampler_free(s);
  s = make(0.0f, 0, 1.0f, 0.0f, 7, 3);
  CHECK(mx_sampler_sample(s, bad, &err) == -1);
  CHECK_MSG(err, "every logit is -inf or NaN");
  mx_sampler_free(s);

  /* temperature -> 0 equals argmax; top_k = 1 equals greedy; min_p = 1 keeps only the max. */
  static float big[BIG_VOCAB];
  int agree_t = 0, agree_k = 0, agree_m = 0, trials = 20;
  mx_sampler *g = make(0.0f, 0, 1.0f, 0.0f, 1, BIG_VOCAB);
  mx_sampler *t = make(1e-3f, 0, 1.0f, 0.0f, 2, BIG_VOCAB);
  mx_sampler *k = make(1.5f, 1, 1.0f, 0.0f, 3, BIG_VOCAB);
  mx_sampler *m = make(2.0f, 0, 1.0f, 1.0f, 4, BIG_VOCAB);
  mx_sampler *tiny = make(1e-40f, 0, 1.0f, 0.0f, 5, BIG_VOCAB); /* subnormal temperature */
  int agree_tiny = 0;
  for (int i = 0; i < trials; i++) {
    test_random_logits(big, BIG_VOCAB, 500 + (uint64_t)i, 2.0f, 0.0f);
    int want = mx_sampler_sample(g, big, &err);
    agree_t += mx_sampler_sample(t, big, &err) == want;
    agree_k += mx_sampler_sample(k, big, &err) == want;
    agree_m += mx_sampler_sample(m, big, &err) == want;
    agree_tiny += mx_sampler_sample(tiny, big, &err) == want;
  }
  CHECKF(agree_tiny == trials, "temperature 1e-40 matched argmax %d/%d", agree_tiny, trials);
  mx_sampler_free(tiny);
  CHECKF(agree_t == trials, "temperature 1e-3 matched argmax %d/%d", agree_t, trials);
  CHECKF(agree_k == trials, "top_k 1 matched argmax %d/%d", agree_k, trials);
  CHECKF(agree_m == trials, "min_p 1 matched argmax %d/%d", agree_m, trials);
  mx_sampler_free(g);
  mx_sampler_free(t);
  mx_sampler_free(k);
  mx_sampler_free(m);
}

/* ---- frequencies ------------------------------------------------------------------------ */

/* Draws n times and checks every token's frequency against softmax(l / T) over the reference
 * kept set, within 5 standard deviations (plus a little slack). Returns the worst z-score. */
static double check_frequencies(const float *l, int V, float temp, int top_k, float top_p,
                                float min_p, int draws, uint64_t seed, const char *what) {
  mx_sampler *s = make(temp, top_k, top_p, min_p, seed, V);
  if (!s) return 1e9;
  unsigned char keep[64];
  double p[64], z = 0.0, worst = 0.0;
  int count[64] = {0}, outside = 0;
  reference_keep(l, V, top_k, top_p, min_p, keep);
  float m = l[0];
  for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
  for (int i = 0; i < V; i++) z += p[i] = keep[i] ? exp((double)(l[i] - m) / temp) : 0.0;
  mlxrt_error err = {{0}};
  for (int d = 0; d < draws; d++) {
    int t = mx_sampler_sample(s, l, &err);
    if (t < 0 || t >= V || !keep[t]) outside++;
    else count[t]++;
  }
  for (int i = 0; i < V; i++) {
    double q = p[i] / z, f = (double)count[i] / draws;
    double sd = sqrt(q * (1.0 - q) / draws) + 1e-12;
    double zs = fabs(f - q) / sd;
    if (q == 0.0) zs = count[i] ? 1e9 : 0.0;
    if (zs > worst) worst = zs;
  }
  CHECKF(outside == 0, "%s: %d draws outside the kept set", what, outside);
  CHECKF(worst < 5.0, "%s: a frequency is %.1f standard deviations from the softmax", what, worst);
  mx_sampler_free(s);
  return worst;
}

static void test_frequencies(void) {
  float l[10] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -2.0f, 0.7f, 1.1f, -1.0f};
  const int N = 200000;
  double w = 0.0, x;
  x = check_frequencies(l, 10, 1.0f, 0, 1.0f, 0.0f, N, 11, "temperature 1"), w = fmax(w, x);
  x = check_frequencies(l, 10, 0.5f, 0, 1.0f, 0.0f, N, 12, "temperature 0.5"), w = fmax(w, x);
  x = check_frequencies(l, 10, 2.5f, 0, 1.0f, 0.0f, N, 13, "temperature 2.5"), w = fmax(w, x);
  x = check_frequencies(l, 10, 1.0f, 3, 1.0f, 0.0f, N, 14, "top_k 3"), w = fmax(w, x);
  x = check_frequencies(l, 10, 1.0f, 0, 0.6f, 0.0f, N, 15, "top_p 0.6"), w = fmax(w, x);
  x = check_frequencies(l, 10, 0.8f, 0, 1.0f, 0.3f, N, 16, "min_p 0.3"), w = fmax(w, x);
  x = check_frequencies(l, 10, 1.3f, 5, 0.9f, 0.05f, N, 17, "top_k 5 + top_p 0.9 + min_p 0.05"),
  w = fmax(w, x);
  printf("frequencies: worst deviation %.2f standard deviations over 7 settings x %d draws\n", w,
         N);

  /* top-p excludes the tail: p = .5 .3 .15 .05; a token is kept while the mass above it is
   * below top_p: .75 keeps the first two, .85 three. */
  float q[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
  check_frequencies(q, 4, 1.0f, 0, 0.75f, 0.0f, 50000, 21, "top_p 0.75 tail");
  unsigned char keep[4];
  reference_keep(q, 4, 0, 0.75f, 0.0f, keep);
  CHECK(keep[0] && keep[1] && !keep[2] && !keep[3]);
  reference_keep(q, 4, 0, 0.85f, 0.0f, keep);
  CHECK(keep[0] && keep[1] && keep[2] && !keep[3]);
  int ids[4];
  mlxrt_error err = {{0}};
  mx_sampler *s = make(1.0f, 0, 0.85f, 0.0f, 1, 4);
  CHECK(mx_sampler_candidates(s, q, ids, &err) == 3);
  mx_sampler_free(s);
  s = make(1.0f, 0, 0.75f, 0.0f, 1, 4);
  CHECK(mx_sampler_candidates(s, q, ids, &err) == 2 && ids[0] == 0 && ids[1] == 1);
  mx_sampler_free(s);
  /* min-p threshold: keep p >= 0.3 * 0.5 = 0.15 → tokens 0, 1, 2. */
  s = make(1.0f, 0, 1.0f, 0.3f, 1, 4);
  CHECK(mx_sampler_candidates(s, q, ids, &err) == 3 && ids[2] == 2);
  mx_sampler_free(s);
  s = make(1.0f, 0, 1.0f, 0.31f, 1, 4);
  CHECK(mx_sampler_candidates(s, q, ids, &err) == 2);
  mx_sampler_free(s);
}

/* ---- repetition penalty ------------------------------------------------------------------ */

static void test_repetition_penalty(void) {
  mx_sampler_params p;
  mx_sampler_params_default(&p);
  p.temperature = 0.0f;
  p.repetition_penalty = 1.1f;
  p.repetition_window = 4;
  mlxrt_error err = {{0}};
  mx_sampler *s = mx_sampler_create(&p, 6, &err);
  float pos[6] = {2.0f, 1.9f, 0, 0, 0, 0};   /* 2 / 1.1 = 1.82 < 1.9 */
  float neg[6] = {-1.0f, -1.05f, -5, -5, -5, -5}; /* -1 * 1.1 = -1.1 < -1.05 */
  CHECK(mx_sampler_sample(s, pos, &err) == 0);
  mx_sampler_accept(s, 0);
  mx_sampler_accept(s, 0); /* repeated in the window: still penalized once */
  CHECK(mx_sampler_sample(s, pos, &err) == 1);
  CHECK(mx_sampler_sample(s, neg, &err) == 1);
  for (int i = 0; i < 3; i++) mx_sampler_accept(s, 3); /* window 4: one 0 is left */
  CHECK(mx_sampler_sample(s, pos, &err) == 1);
  mx_sampler_accept(s, 3); /* token 0 has left the window */
  CHECK(mx_sampler_sample(s, pos, &err) == 0);
  mx_sampler_accept(s, 0);
  CHECK(mx_sampler_sample(s, pos, &err) == 1);
  mx_sampler_reset(s); /* forgets the history */
  CHECK(mx_sampler_sample(s, pos, &err) == 0);
  mx_sampler_accept(s, 99); /* outside the vocab: ignored */
  mx_sampler_accept(s, -1);
  CHECK(mx_sampler_sample(s, pos, &err) == 0);
  mx_sampler_free(s);

  /* Sampling: a repeated token is drawn less often, by the factor the formula predicts. */
  p.temperature = 1.0f;
  p.repetition_penalty = 1.5f;
  p.repetition_window = 20;
  p.seed = 5;
  s = mx_sampler_create(&p, 2, &err);
  float two[2] = {1.2f, 1.2f};
  mx_sampler_accept(s, 0);
  int hits = 0, n = 100000;
  for (int i = 0; i < n; i++) hits += mx_sampler_sample(s, two, &err) == 0;
  double want = 1.0 / (1.0 + exp(1.2 - 1.2 / 1.5)); /* softmax of (0.8, 1.2) */
  double f = (double)hits / n;
  CHECKF(fabs(f - want) < 5.0 * sqrt(want * (1 - want) / n), "penalized frequency %.4f, want %.4f",
         f, want);
  mx_sampler_free(s);
}

/* ---- determinism ------------------------------------------------------------------------ */

static void test_determinism(void) {
  static float l[BIG_VOCAB];
  test_random_logits(l, BIG_VOCAB, 77, 2.0f, 0.0f);
  mx_sampler *a = make(1.0f, 64, 0.95f, 0.0f, 1234, BIG_VOCAB);
  mx_sampler *b = make(1.0f, 64, 0.95f, 0.0f, 1234, BIG_VOCAB);
  mx_sampler *c = make(1.0f, 64, 0.95f, 0.0f, 1235, BIG_VOCAB);
  int seq[60], same = 1, differs = 0;
  mlxrt_error err = {{0}};
  for (int i = 0; i < 60; i++) {
    seq[i] = mx_sampler_sample(a, l, &err);
    same &= mx_sampler_sample(b, l, &err) == seq[i];
    differs += mx_sampler_sample(c, l, &err) != seq[i];
  }
  CHECK(same);
  CHECK(differs > 15);
  mx_sampler_seed(a, 1234); /* reseeding replays the stream */
  int replay = 1;
  for (int i = 0; i < 60; i++) replay &= mx_sampler_sample(a, l, &err) == seq[i];
  CHECK(replay);
  mx_sampler_free(a);
  mx_sampler_free(b);
  mx_sampler_free(c);

  /* The PRNG: fixed stream for a seed, uniform in [0, 1). */
  mx_rng r1, r2;
  mx_rng_seed(&r1, 42);
  mx_rng_seed(&r2, 42);
  double sum = 0.0;
  int in_range = 1, equal = 1;
  for (int i = 0; i < 100000; i++) {
    double u = mx_rng_uniform(&r1);
    equal &= u == mx_rng_uniform(&r2);
    in_range &= u >= 0.0 && u < 1.0;
    sum += u;
  }
  CHECK(equal && in_range);
  CHECKF(fabs(sum / 100000 - 0.5) < 0.005, "mean %.4f", sum / 100000);
}

static void test_params(void) {
  mx_sampler_params p;
  mlxrt_error err;
  const struct {
    float temp, top_p, min_p, pen;
    int k, win, vocab;
    const char *frag;
  } bad[] = {{-1.0f, 1, 0, 1, 0, 20, 10, "temperature"},  {NAN, 1, 0, 1, 0, 20, 10, "temperature"},
             {1.0f, 1.5f, 0, 1, 0, 20, 10, "top_p"},      {1.0f, 1, -0.1f, 1, 0, 20, 10, "min_p"},
             {1.0f, 1, 0, 0.0f, 0, 20, 10, "repetition_penalty"},
             {1.0f, 1, 0, 1, -3, 20, 10, "top_k"},        {1.0f, 1, 0, 1, 0, -1, 10, "window"},
             {1.0f, 1, 0, 1, 0, 20, 0, "vocab size"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mx_sampler_params_default(&p);
    p.temperature = bad[i].temp;
    p.top_p = bad[i].top_p;
    p.min_p = bad[i].min_p;
    p.repetition_penalty = bad[i].pen;
    p.top_k = bad[i].k;
    p.repetition_window = bad[i].win;
    memset(&err, 0, sizeof err);
    CHECK(mx_sampler_create(&p, bad[i].vocab, &err) == NULL);
    CHECK_MSG(err, bad[i].frag);
  }
  /* top_k >= vocab and top_p 0 / 1 are "off". */
  float l[3] = {0.0f, 1.0f, 2.0f};
  int ids[3];
  mx_sampler *s = make(1.0f, 5, 0.0f, 0.0f, 1, 3);
  CHECK(mx_sampler_candidates(s, l, ids, &err) == 3);
  mx_sampler_free(s);
}

static void test_timing(void) {
  static float l[BIG_VOCAB];
  test_random_logits(l, BIG_VOCAB, 9, 3.0f, 0.0f);
  const struct {
    const char *name;
    float t;
    int k;
    float p, minp;
  } cfg[] = {{"greedy", 0, 0, 1, 0},
             {"temperature only", 1, 0, 1, 0},
             {"Gemma default: top_k 64 + top_p 0.95", 1, 64, 0.95f, 0},
             {"top_p 0.95 alone", 1, 0, 0.95f, 0},
             {"min_p 0.05", 1, 0, 1, 0.05f}};
  mlxrt_error err = {{0}};
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    mx_sampler *s = make(cfg[c].t, cfg[c].k, cfg[c].p, cfg[c].minp, 3, BIG_VOCAB);
    const int reps = 20;
    double t0 = now_s();
    int sink = 0;
    for (int i = 0; i < reps; i++) sink += mx_sampler_sample(s, l, &err);
    double us = (now_s() - t0) / reps * 1e6;
    CHECK(sink >= 0);
    printf("timing: %-40s %8.0f us CPU per token (vocab %d)\n", cfg[c].name, us, BIG_VOCAB);
    mx_sampler_free(s);
  }
}

/* ---- generation config ------------------------------------------------------------------ */

static void test_gen_config(void) {
  mx_gen_config g;
  mlxrt_error err = {{0}};
  /* Gemma 4 IT shapes: generation_config's list wins over config.json's. */
  CHECK(mx_gen_config_parse("{\"eos_token_id\":[1,106],\"bos_token_id\":2}",
                            "{\"eos_token_id\":[1,106,50],\"do_sample\":true,\"temperature\":1.0,"
                            "\"top_k\":64,\"top_p\":0.95,\"pad_token_id\":0}",
                            &g, &err) == 0);
  CHECK(g.n_eos == 3 && g.eos_ids[2] == 50 && mx_gen_config_is_eos(&g, 106));
  CHECK(g.bos_id == 2 && g.pad_id == 0);
  CHECK(g.has_top_k && g.top_k == 64 && g.has_top_p && fabsf(g.top_p - 0.95f) < 1e-6f);
  CHECK(!g.has_min_p && !g.has_repetition_penalty);
  mx_sampler_params p;
  mx_sampler_params_default(&p);
  p.temperature = 0.0f;
  mx_gen_config_apply_sampling(&g, &p);
  CHECK(p.temperature == 1.0f && p.top_k == 64 && fabsf(p.top_p - 0.95f) < 1e-6f &&
        p.min_p == 0.0f && p.repetition_penalty == 1.0f);

  /* No generation config: eos from config.json, a single integer, or from text_config. */
  CHECK(mx_gen_config_parse("{\"eos_token_id\":1}", NULL, &g, &err) == 0);
  CHECK(g.n_eos == 1 && g.eos_ids[0] == 1 && g.bos_id == -1);
  CHECK(mx_gen_config_parse("{\"text_config\":{\"eos_token_id\":[1,106],\"bos_token_id\":2}}",
                            "{}", &g, &err) == 0);
  CHECK(g.n_eos == 2 && g.eos_ids[1] == 106 && g.bos_id == 2);
  CHECK(mx_gen_config_add_eos(&g, 106, &err) == 0 && g.n_eos == 2);
  CHECK(mx_gen_config_add_eos(&g, 50, &err) == 0 && g.n_eos == 3);

  /* do_sample false means greedy; min_p and repetition_penalty are taken when present. */
  CHECK(mx_gen_config_parse("{}",
                            "{\"do_sample\":false,\"temperature\":0.7,\"min_p\":0.1,"
                            "\"repetition_penalty\":1.2,\"top_k\":null}",
                            &g, &err) == 0);
  mx_sampler_params_default(&p);
  mx_gen_config_apply_sampling(&g, &p);
  CHECK(p.temperature == 0.0f && fabsf(p.min_p - 0.1f) < 1e-6f &&
        fabsf(p.repetition_penalty - 1.2f) < 1e-6f && p.top_k == 0 && g.n_eos == 0);

  const struct {
    const char *cfg, *gen, *frag;
  } bad[] = {
      {"{\"eos_token_id\":\"<eos>\"}", NULL, "config.json: field eos_token_id"},
      {"{}", "{\"eos_token_id\":[1,-2]}", "generation_config.json: field eos_token_id[1]"},
      {"{}", "{\"eos_token_id\":[1.5]}", "eos_token_id[0]"},
      {"{}", "{\"temperature\":-1}", "field temperature"},
      {"{}", "{\"top_p\":2}", "field top_p"},
      {"{}", "{\"top_k\":3.5}", "field top_k"},
      {"{}", "{\"do_sample\":\"yes\"}", "field do_sample"},
      {"{}", "{\"repetition_penalty\":0}", "field repetition_penalty"},
      {"{", NULL, "config.json: not a valid JSON object"},
      {"[]", NULL, "config.json: not a valid JSON object"},
      {"{}", "{\"a\":", "generation_config.json: not valid JSON"},
      {"{}", "[1]", "generation_config.json: expected a JSON object"},
      {"{}", "{\"eos_token_id\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}", "more than 16"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    CHECKF(mx_gen_config_parse(bad[i].cfg, bad[i].gen, &g, &err) == -1, "bad case %zu", i);
    CHECK_MSG(err, bad[i].frag);
  }

  /* From a directory: config.json required, generation_config.json optional. */
  char dir[] = "/tmp/mlxrt_gencfg_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  memset(&err, 0, sizeof err);
  CHECK(mx_gen_config_load(dir, &g, &err) == -1);
  CHECK_MSG(err, "config.json: cannot open");
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"eos_token_id\":[1,106]}", f);
  fclose(f);
  CHECK(mx_gen_config_load(dir, &g, &err) == 0 && g.n_eos == 2);
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  f = fopen(path, "w");
  fputs("{\"eos_token_id\":7,\"top_p\":5}", f);
  fclose(f);
  memset(&err, 0, sizeof err);
  CHECK(mx_gen_config_load(dir, &g, &err) == -1);
  CHECK_MSG(err, dir);
  CHECK_MSG(err, "generation_config.json: field top_p");
  remove(path);
  snprintf(path, sizeof path, "%s/config.json", dir);
  remove(path);
  rmdir(dir);
}

int main(void) {
  test_candidates_exact();
  test_greedy();
  test_frequencies();
  test_repetition_penalty();
  test_determinism();
  test_params();
  test_gen_config();
  test_timing();
  TEST_END();
}
