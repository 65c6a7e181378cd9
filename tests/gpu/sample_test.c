/* mlxrt-sample-test: the device token selection (sample.cu) against the C reference
 * (accel_sample_ref, src/accel/accel_sample.c) on fresh random logits, parameters and uniform
 * numbers: every chosen id must be identical (and the same call twice must agree: the passes
 * leave their state clean). Then timings of one selection on a 262144-entry vocabulary with
 * CUDA events, launched eagerly (as the decoder does) and as a captured graph. With --model DIR
 * (repeatable): sessions on the CUDA decoder (MLXRT_DECODER=1) stepping with
 * mlxrt_session_step_sample (the draw on the device) must give, token for token, what the same
 * decoder's logits (read back) give through accel_sample_ref with the same seed's uniforms.
 *   mlxrt-sample-test [--trials N] [--seed S] [--no-bench] [--model DIR]...
 * Exit status 0 only when every check passed. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_sample.h"
#include "base/bf16.h"
#include "mlx/sampler.h"
#include "mlxrt.h"
#include "runtime.h"
#include "sample_kernels.h"

#define MAX_V 300000

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static double unit(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static double normal(void) {
  double u1 = unit(), u2 = unit();
  return sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
}

static const char *const KINDS[] = {"normal", "bf16", "ties", "peaked", "equal", "specials", "dead"};

/* Logits of a given kind; returns the kind's name. */
static const char *make_logits(float *l, int V, int kind) {
  double sd = kind == 0 ? (rnd() % 4 == 0 ? 0.3 : rnd() % 2 ? 2.0 : 8.0) : 3.0;
  for (int i = 0; i < V; i++) {
    float x = (float)(normal() * sd);
    if (kind == 1) x = mx_round_bf16(x); /* what the decoder's logits are: bf16 values */
    if (kind == 2) x = roundf(x * 2.0f) / 2.0f;
    if (kind == 4) x = 1.5f;
    if (kind == 6) x = rnd() % 2 ? -INFINITY : NAN;
    l[i] = x;
  }
  if (kind == 3) l[rnd() % (uint64_t)V] = 40.0f;
  if (kind == 5)
    for (int j = 0; j < 1 + V / 50; j++) {
      const float sp[5] = {NAN, -INFINITY, INFINITY, -0.0f, FLT_MAX};
      l[rnd() % (uint64_t)V] = sp[rnd() % 5];
    }
  return KINDS[kind];
}

static void random_params(accel_sample_params *p, int V, double *u) {
  const float temps[6] = {0.0f, 0.05f, 0.7f, 1.0f, 1.5f, 1e-30f};
  p->temperature = rnd() % 8 == 0 ? temps[rnd() % 6] : (float)(0.2 + 1.8 * unit());
  if (p->temperature == 0.0f && rnd() % 2) p->temperature = 0.8f;
  switch (rnd() % 9) {
  case 0: p->top_k = 0; break;
  case 1: p->top_k = 1; break;
  case 2: p->top_k = 1 + (int)(rnd() % 64); break;
  case 3: p->top_k = 1 + (int)(rnd() % 1024); break;
  case 4: p->top_k = 1 + (int)(rnd() % (uint64_t)V); break;
  case 5: p->top_k = V - 1 > 0 ? V - 1 : 1; break;
  case 6: p->top_k = V + 3; break;
  default: p->top_k = rnd() % 2 ? 64 : 40; break;
  }
  switch (rnd() % 6) {
  case 0: p->top_p = 1.0f; break;
  case 1: p->top_p = 0.0f; break;
  case 2: p->top_p = 1e-7f; break;
  case 3: p->top_p = 0.999999f; break;
  default: p->top_p = (float)unit(); break;
  }
  switch (rnd() % 6) {
  case 0: case 1: case 2: p->min_p = 0.0f; break;
  case 3: p->min_p = 1.0f; break;
  case 4: p->min_p = 1e-6f; break;
  default: p->min_p = (float)(0.3 * unit()); break;
  }
  int r = (int)(rnd() % 10);
  *u = r == 0 ? 0.0 : r == 1 ? 1.0 - 0x1p-53 : unit();
}

typedef struct gpu {
  void *stream, *state;
  float *logits;
  int32_t *out, *h_out;
} gpu;

static int gpu_pick(gpu *g, const float *l, int V, const accel_sample_params *p, double u, int upload,
                    int32_t *tok, mlxrt_error *err) {
  accel_sample_plan pl;
  if (accel_sample_plan_make(p, V, u, &pl, err)) return -1;
  sk_params kp = {pl.greedy, pl.inv_t, pl.use_min_p, pl.log_min_p, pl.top_k, pl.use_top_p, pl.top_p, pl.x53};
  if (upload && rt_h2d(g->logits, l, (size_t)V * sizeof(float), g->stream, err)) return -1;
  *g->h_out = -7;
  if (rt_memset(g->out, 0x55, sizeof(int32_t), g->stream, err) ||
      rt_status(sk_sample(g->logits, V, &kp, g->state, g->out, g->stream), "sk_sample", err) ||
      rt_d2h(g->h_out, g->out, sizeof(int32_t), g->stream, err) || rt_stream_sync(g->stream, err))
    return -1;
  *tok = *g->h_out;
  return 0;
}

static int bench(gpu *g, float *l, mlxrt_error *err) {
  const int V = 262144, iters = 200;
  g_rng = 4242;
  make_logits(l, V, 1);
  if (rt_h2d(g->logits, l, (size_t)V * sizeof(float), g->stream, err)) return -1;
  struct {
    const char *name;
    accel_sample_params p;
  } cfg[] = {
      {"greedy (temperature 0)", {0.0f, 0, 1.0f, 0.0f}},
      {"temperature 0.8", {0.8f, 0, 1.0f, 0.0f}},
      {"temp 0.8, top_k 64, top_p 0.95", {0.8f, 64, 0.95f, 0.0f}},
      {"temp 1, top_k 40", {1.0f, 40, 1.0f, 0.0f}},
      {"temp 1, top_k 1024", {1.0f, 1024, 1.0f, 0.0f}},
      {"temp 0.7, top_p 0.9", {0.7f, 0, 0.9f, 0.0f}},
      {"temp 1, min_p 0.05", {1.0f, 0, 1.0f, 0.05f}},
      {"temp 1, top_k 64, top_p 0.95, min_p 0.05", {1.0f, 64, 0.95f, 0.05f}},
  };
  void *e0 = NULL, *e1 = NULL;
  if (rt_event_create(&e0, err) || rt_event_create(&e1, err)) return -1;
  printf("\n| selection (V = %d, bf16 logits) | launches | eager µs | graph µs |\n| --- | ---: | ---: | ---: |\n", V);
  int rc = 0;
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0] && !rc; c++) {
    accel_sample_plan pl;
    if (accel_sample_plan_make(&cfg[c].p, V, 0.5, &pl, err)) return -1;
    sk_params kp = {pl.greedy, pl.inv_t, pl.use_min_p, pl.log_min_p, pl.top_k, pl.use_top_p, pl.top_p, pl.x53};
    float ms_eager = 0, ms_graph = 0;
    void *exec = NULL;
    for (int i = 0; i < 10 && !rc; i++) /* warm-up */
      rc = rt_status(sk_sample(g->logits, V, &kp, g->state, g->out, g->stream), "sk_sample", err);
    if (!rc) rc = rt_event_record(e0, g->stream, err);
    for (int i = 0; i < iters && !rc; i++)
      rc = rt_status(sk_sample(g->logits, V, &kp, g->state, g->out, g->stream), "sk_sample", err);
    if (!rc) rc = rt_event_record(e1, g->stream, err) || rt_event_ms(e0, e1, &ms_eager, err);
    if (!rc) rc = rt_graph_begin(g->stream, err);
    if (!rc) {
      int st = sk_sample(g->logits, V, &kp, g->state, g->out, g->stream);
      rc = rt_graph_end(g->stream, &exec, err) || rt_status(st, "sk_sample (capture)", err);
    }
    for (int i = 0; i < 10 && !rc; i++) rc = rt_graph_launch(exec, g->stream, err);
    if (!rc) rc = rt_event_record(e0, g->stream, err);
    for (int i = 0; i < iters && !rc; i++) rc = rt_graph_launch(exec, g->stream, err);
    if (!rc) rc = rt_event_record(e1, g->stream, err) || rt_event_ms(e0, e1, &ms_graph, err);
    rt_graph_destroy(exec);
    if (!rc)
      printf("| %s | %d | %.1f | %.1f |\n", cfg[c].name, sk_launches(&kp), 1000.0 * ms_eager / iters,
             1000.0 * ms_graph / iters);
  }
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  return rc;
}

/* ---- end to end: the decoder's sampled steps against its own logits + the C reference ---- */
#define E2E_STEPS 24

static int e2e_steps(const char *dir, int device, const accel_sample_params *sp, uint64_t seed, int32_t *out,
                     mlxrt_error *err) {
  setenv("MLXRT_DECODER", "1", 1);
  const char *be = getenv("MLXRT_SAMPLE_TEST_BACKEND"); /* "cpu": the same check on the CPU decoder */
  mlxrt_options opt = {be ? be : "cuda", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, err);
  mlxrt_session *s = m ? mlxrt_session_new(m, 256, err) : NULL;
  int V = m ? mlxrt_model_vocab_size(m) : 1, ok = s != NULL;
  mlxrt_gen_params g;
  mlxrt_gen_params_default(&g);
  g.temperature = sp->temperature;
  g.top_k = sp->top_k;
  g.top_p = sp->top_p;
  g.min_p = sp->min_p;
  g.repetition_penalty = 1.0f;
  g.seed = seed;
  g.seed_set = 1;
  mlxrt_sampler *smp = ok && device ? mlxrt_sampler_new(m, &g, err) : NULL;
  float *logits = malloc((size_t)V * sizeof(float));
  mx_rng r;
  mx_rng_seed(&r, seed);
  const int32_t prompt[4] = {2, 10, 11, 12};
  ok = ok && (!device || smp) && logits && mlxrt_session_feed(s, prompt, 3, NULL, 0, err) == 0;
  int32_t t = prompt[3];
  for (int i = 0; ok && i < E2E_STEPS; i++) {
    if (device) ok = mlxrt_session_step_sample(s, t, smp, &t, err) == 0;
    else
      ok = mlxrt_session_feed(s, &t, 1, logits, 0, err) == 0 &&
           accel_sample_ref(logits, V, sp, sp->temperature > 0 ? mx_rng_uniform(&r) : 0.0, &t, err) == 0;
    out[i] = t;
  }
  free(logits);
  mlxrt_sampler_free(smp);
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  unsetenv("MLXRT_DECODER");
  return ok ? 0 : -1;
}

static int e2e(const char *dir, int *checks, int *failed) {
  const accel_sample_params cfg[] = {{0.8f, 64, 0.95f, 0.0f}, {1.0f, 0, 1.0f, 0.0f}, {1.5f, 0, 0.9f, 0.05f},
                                     {0.0f, 0, 1.0f, 0.0f},   {2.0f, 5, 1.0f, 0.0f}};
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    int32_t dev[E2E_STEPS], ref[E2E_STEPS];
    mlxrt_error err = {{0}};
    if (e2e_steps(dir, 1, &cfg[c], 1000 + c, dev, &err) || e2e_steps(dir, 0, &cfg[c], 1000 + c, ref, &err)) {
      printf("FAIL %s: %s\n", dir, err.msg);
      (*checks)++;
      (*failed)++;
      return -1;
    }
    (*checks)++;
    int same = !memcmp(dev, ref, sizeof dev);
    if (!same) (*failed)++;
    printf("%s %s: temperature %g top_k %d top_p %g min_p %g, %d sampled steps:", same ? "ok  " : "FAIL", dir,
           cfg[c].temperature, cfg[c].top_k, cfg[c].top_p, cfg[c].min_p, E2E_STEPS);
    for (int i = 0; i < 8; i++) printf(" %d", dev[i]);
    if (!same) {
      printf(" | reference:");
      for (int i = 0; i < E2E_STEPS; i++) printf(" %d", ref[i]);
    }
    printf("%s\n", same ? " ..." : "");
  }
  return 0;
}

int main(int argc, char **argv) {
  int trials = 600, do_bench = 1, n_models = 0;
  const char *models[16];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--model") && i + 1 < argc && n_models < 16) models[n_models++] = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_rng = strtoull(argv[++i], NULL, 0) | 1;
    else if (!strcmp(argv[i], "--no-bench")) do_bench = 0;
    else {
      fprintf(stderr, "usage: mlxrt-sample-test [--trials N] [--seed S] [--no-bench] [--model DIR]...\n");
      return 2;
    }
  }
  mlxrt_error err = {{0}};
  rt_device_info info;
  gpu g = {0};
  float *l = malloc(MAX_V * sizeof(float));
  if (!l || rt_device_open(&info, &err) || rt_stream_create(&g.stream, &err) ||
      rt_malloc((void **)&g.logits, MAX_V * sizeof(float), &err) || rt_malloc(&g.state, sk_state_bytes(), &err) ||
      rt_malloc((void **)&g.out, sizeof(int32_t), &err) || rt_host_alloc((void **)&g.h_out, sizeof(int32_t), &err) ||
      rt_memset(g.state, 0, sk_state_bytes(), g.stream, &err) || rt_stream_sync(g.stream, &err)) {
    fprintf(stderr, "mlxrt-sample-test: %s\n", err.msg[0] ? err.msg : "out of memory");
    return 1;
  }
  printf("device: %s (%d SMs); %d trials\n", info.name, info.sms, trials);
  const int sizes[] = {262144, 262144, 262144, 1, 2, 7, 50, 1000, 4096, 65536, 65537, 131071, MAX_V};
  int checks = 0, failed = 0, per_kind[7] = {0};
  for (int t = 0; t < trials; t++) {
    const int V = sizes[rnd() % (sizeof sizes / sizeof sizes[0])];
    int kind = (int)(rnd() % 7);
    if (kind == 6 && rnd() % 4) kind = 1; /* all -inf/NaN: now and then */
    const char *kn = make_logits(l, V, kind);
    accel_sample_params p;
    double u;
    random_params(&p, V, &u);
    int32_t want = -1, got = -9, again = -9;
    mlxrt_error re = {{0}};
    if (accel_sample_ref(l, V, &p, u, &want, &re)) want = -1;
    if (gpu_pick(&g, l, V, &p, u, 1, &got, &err) || gpu_pick(&g, l, V, &p, u, 0, &again, &err)) {
      fprintf(stderr, "mlxrt-sample-test: %s\n", err.msg);
      return 1;
    }
    checks++;
    per_kind[kind]++;
    if (got != want || again != want) {
      failed++;
      printf("FAIL trial %d: V=%d logits %s, temperature %g top_k %d top_p %.9g min_p %.9g u %.17g: "
             "reference %d (%s), device %d then %d\n",
             t, V, kn, p.temperature, p.top_k, p.top_p, p.min_p, u, want, want < 0 ? re.msg : "ok", got, again);
    }
  }
  printf("selection: %d trials (", checks);
  for (int k = 0; k < 7; k++) printf("%s%s %d", k ? ", " : "", KINDS[k], per_kind[k]);
  printf("), %d differ from the reference\n", failed);
  int e2e_checks = 0, e2e_failed = 0;
  for (int i = 0; i < n_models; i++) e2e(models[i], &e2e_checks, &e2e_failed);
  if (n_models) printf("decoder sessions: %d sampled runs, %d differ from the reference on their own logits\n", e2e_checks, e2e_failed);
  int rc = failed || e2e_failed ? 1 : 0;
  if (do_bench && bench(&g, l, &err)) {
    fprintf(stderr, "mlxrt-sample-test: %s\n", err.msg);
    rc = 1;
  }
  rt_free(g.logits);
  rt_free(g.state);
  rt_free(g.out);
  rt_host_free(g.h_out);
  rt_stream_destroy(g.stream);
  free(l);
  printf("%s\n", rc ? "FAILED" : "PASSED");
  return rc;
}
