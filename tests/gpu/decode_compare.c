/* mlxrt-decode-test: the CUDA whole-step decoder (accel.h decoder_*) against the reference
 * path, on a GPU machine. For each model folder:
 *   1. reference: the reference path (src/mlx/reference.c) on the CPU backend (--ref cpu, the
 *      default for models under 2 GB per token) or on the CUDA backend (--ref cuda);
 *   2. the CUDA decoder with graphs, again without graphs (MLXRT_CUDA_GRAPH=0), and once more
 *      with graphs: the three must agree bit for bit (determinism, graph = eager);
 *   3. greedy tokens and logits of the decoder against the reference: the tokens must agree,
 *      or first differ where the reference's top two logits are a near-tie (logged);
 *   4. timing of the decoder: pp (one prompt of --pp tokens) and tg (--tg tokens, token id
 *      read back only), with GB/s from the model's bytes per token.
 * Exit status 0 when every model passes. --backend cpu puts the CPU decoder in the device's
 * place (a check of this harness without a GPU). Prompt ids are fixed pseudo-random ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"
#include "mlx/decoder_desc.h"
#include "mlx/session.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int32_t argmax(const float *x, int n) {
  int32_t b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

static uint64_t hash_floats(const float *x, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  const unsigned char *p = (const unsigned char *)x;
  for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

typedef struct run_out {
  int32_t *toks; /* [gen] */
  float *logits; /* [gen + 1][V]: after the prompt, then after each fed token */
} run_out;

/* Reference path: prompt, then gen greedy steps. */
static int run_reference(const mx_model *m, accel_backend *b, const int32_t *prompt, int np, int gen,
                         run_out *o, mlxrt_error *err) {
  int V = m->cfg.vocab_size;
  mx_session *s = mx_session_create(m, b, np + gen + 1, 0, err);
  if (!s) return -1;
  int rc = -1;
  if (mx_session_feed(s, prompt, np, o->logits, 0, err)) goto done;
  for (int i = 0; i < gen; i++) {
    o->toks[i] = argmax(o->logits + (size_t)i * V, V);
    if (mx_session_feed(s, &o->toks[i], 1, o->logits + (size_t)(i + 1) * V, 0, err)) goto done;
  }
  rc = 0;
done:
  mx_session_free(s);
  return rc;
}

static int run_decoder(accel_backend *b, const accel_model_desc *d, const int32_t *prompt, int np, int gen,
                       run_out *o, mlxrt_error *err) {
  int V = d->vocab;
  accel_decoder *dec = b->decoder_create(b, d, np + gen + 1, err);
  if (!dec) return -1;
  int rc = -1;
  int32_t next = -1;
  if (b->decoder_step(dec, prompt, np, 0, o->logits, &next, err)) goto done;
  for (int i = 0; i < gen; i++) {
    o->toks[i] = next;
    if (next != argmax(o->logits + (size_t)i * V, V)) {
      snprintf(err->msg, sizeof err->msg, "device argmax %d differs from the host argmax %d of the same logits",
               next, argmax(o->logits + (size_t)i * V, V));
      goto done;
    }
    if (b->decoder_step(dec, &o->toks[i], 1, np + i, o->logits + (size_t)(i + 1) * V, &next, err)) goto done;
  }
  rc = 0;
done:
  b->decoder_free(dec);
  return rc;
}

static void print_tokens(const char *label, const int32_t *t, int n) {
  printf("  %-14s", label);
  for (int i = 0; i < n; i++) printf(" %d", t[i]);
  printf("\n");
}

static int bench(accel_backend *b, const accel_model_desc *d, const mx_model *m, int pp, int tg, int reps) {
  mlxrt_error err = {0};
  int V = d->vocab;
  int ppn = pp > 0 ? pp : 1; /* tg needs a first token: a one-token prompt when --pp 0 */
  int32_t *toks = malloc((size_t)ppn * sizeof(int32_t));
  if (!toks) return -1;
  for (int i = 0; i < ppn; i++) toks[i] = (int32_t)(((uint64_t)i * 2654435761u + 7) % (uint64_t)V);
  accel_decoder *dec = b->decoder_create(b, d, ppn + tg + 2, &err);
  if (!dec) {
    fprintf(stderr, "  bench: %s\n", err.msg);
    free(toks);
    return -1;
  }
  mx_model_stats st;
  mx_model_stats_compute(m, &st);
  int rc = 0;
  for (int r = 0; r < reps && !rc; r++) {
    int32_t next = 0;
    double t0 = now_s();
    if (b->decoder_step(dec, toks, ppn, 0, NULL, &next, &err)) rc = -1;
    double t1 = now_s();
    for (int i = 0; i < tg && !rc; i++)
      if (b->decoder_step(dec, &next, 1, ppn + i, NULL, &next, &err)) rc = -1;
    double t2 = now_s();
    if (rc) break;
    double tgs = tg / (t2 - t1);
    printf("  bench rep %d: pp%d %.1f t/s   tg%d %.2f t/s (%.2f ms/token, %.1f GB/s of weights)\n", r, pp,
           pp > 0 ? pp / (t1 - t0) : 0.0, tg, tgs, 1e3 / tgs, tgs * (double)st.bytes_per_token / 1e9);
  }
  if (rc) fprintf(stderr, "  bench: %s\n", err.msg);
  b->decoder_free(dec);
  free(toks);
  return rc;
}

int main(int argc, char **argv) {
  int np = 13, gen = 24, pp = 512, tg = 128, reps = 3;
  const char *ref = NULL, *backend = "cuda";
  int first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    const char *a = argv[first], *v = first + 1 < argc ? argv[first + 1] : NULL;
    if (!v) break;
    if (!strcmp(a, "--prompt")) np = atoi(v);
    else if (!strcmp(a, "--gen")) gen = atoi(v);
    else if (!strcmp(a, "--pp")) pp = atoi(v);
    else if (!strcmp(a, "--tg")) tg = atoi(v);
    else if (!strcmp(a, "--reps")) reps = atoi(v);
    else if (!strcmp(a, "--ref")) ref = v;
    else if (!strcmp(a, "--backend")) backend = v;
    else break;
    first++;
  }
  if (first >= argc || np < 1 || gen < 1) {
    fprintf(stderr, "usage: mlxrt-decode-test [--prompt 13] [--gen 24] [--pp 512] [--tg 128] [--reps 3]\n"
                    "                         [--ref cpu|cuda|both] [--backend cuda|cpu] MODEL_DIR...\n"
                    "--backend cpu runs the CPU decoder in the device's place (checks this harness).\n");
    return 2;
  }
  mlxrt_error err = {0};
  accel_options co = {.backend = backend, .threads = 0, .verbose = 0};
  accel_backend *cuda = accel_create(&co, &err);
  if (!cuda) {
    fprintf(stderr, "%s backend: %s\n", backend, err.msg);
    return 1;
  }
  if (!cuda->decoder_create) {
    fprintf(stderr, "the %s backend offers no decoder\n", backend);
    return 1;
  }
  accel_backend *cpu = accel_cpu_create(0, &err);
  if (!cpu) {
    fprintf(stderr, "CPU backend: %s\n", err.msg);
    return 1;
  }
  int failures = 0;
  for (int a = first; a < argc; a++) {
    const char *dir = argv[a];
    printf("== %s\n", dir);
    mx_model *m = mx_model_open(dir, &err);
    if (!m) {
      printf("  FAIL open: %s\n", err.msg);
      failures++;
      continue;
    }
    const char *why = mx_decoder_unsupported_reason(m);
    if (why) {
      printf("  skipped: the decoder does not run models with %s (reference path only)\n", why);
      mx_model_close(m);
      continue;
    }
    mx_decoder_desc *dd = mx_decoder_desc_create(m, &err);
    int V = m->cfg.vocab_size;
    mx_model_stats st;
    mx_model_stats_compute(m, &st);
    int use_cpu = ref ? strcmp(ref, "cuda") != 0 : st.bytes_per_token < 2000000000ULL;
    run_out o[4];
    int ok = dd != NULL;
    for (int k = 0; k < 4; k++) {
      o[k].toks = calloc((size_t)gen, sizeof(int32_t));
      o[k].logits = calloc((size_t)(gen + 1) * V, sizeof(float));
      ok &= o[k].toks && o[k].logits;
    }
    int32_t *prompt = malloc((size_t)np * sizeof(int32_t));
    ok &= prompt != NULL;
    if (!ok) {
      printf("  FAIL setup: %s\n", dd ? "out of memory" : err.msg);
      failures++;
      goto next;
    }
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)(((uint64_t)i * 40503u + 17) % (uint64_t)V);
    double t0 = now_s();
    if (run_reference(m, use_cpu ? cpu : cuda, prompt, np, gen, &o[0], &err)) {
      printf("  FAIL reference (%s): %s\n", use_cpu ? "cpu" : "cuda", err.msg);
      failures++;
      goto next;
    }
    double t1 = now_s();
    int bad = 0;
    if (ref && !strcmp(ref, "both")) {
      /* the noise floor: the same reference path with the CUDA mat-vecs underneath */
      run_out oc = {calloc((size_t)gen, sizeof(int32_t)), calloc((size_t)(gen + 1) * V, sizeof(float))};
      if (!oc.toks || !oc.logits || run_reference(m, cuda, prompt, np, gen, &oc, &err))
        printf("  FAIL reference on cuda: %s\n", err.msg), bad = 1;
      else {
        double w = 0;
        for (int i = 0; i <= gen; i++) {
          const float *r = o[0].logits + (size_t)i * V, *g = oc.logits + (size_t)i * V;
          float mr = 0, md = 0;
          for (int j = 0; j < V; j++) {
            if (fabsf(r[j]) > mr) mr = fabsf(r[j]);
            if (fabsf(r[j] - g[j]) > md) md = fabsf(r[j] - g[j]);
          }
          if (mr > 0 && md / mr > w) w = md / mr;
        }
        int same = 0;
        while (same < gen && oc.toks[same] == o[0].toks[same]) same++;
        printf("  noise floor: reference path on cuda vs on cpu: logits differ by %.3g of their range, tokens "
               "equal for %d/%d steps\n", w, same, gen);
      }
      free(oc.toks);
      free(oc.logits);
    }
    unsetenv("MLXRT_CUDA_GRAPH");
    if (run_decoder(cuda, &dd->d, prompt, np, gen, &o[1], &err)) {
      printf("  FAIL decoder: %s\n", err.msg);
      failures++;
      goto next;
    }
    double t2 = now_s();
    setenv("MLXRT_CUDA_GRAPH", "0", 1);
    if (run_decoder(cuda, &dd->d, prompt, np, gen, &o[2], &err)) {
      printf("  FAIL decoder without graphs: %s\n", err.msg);
      failures++;
      goto next;
    }
    unsetenv("MLXRT_CUDA_GRAPH");
    if (run_decoder(cuda, &dd->d, prompt, np, gen, &o[3], &err)) {
      printf("  FAIL decoder (second run): %s\n", err.msg);
      failures++;
      goto next;
    }
    size_t nl = (size_t)(gen + 1) * V;
    printf("  reference on %s: %.2f s; decoder (first run, uploads included): %.2f s\n", use_cpu ? "cpu" : "cuda",
           t1 - t0, t2 - t1);
    printf("  logits hash: decoder %016llx, without graphs %016llx, second run %016llx\n",
           (unsigned long long)hash_floats(o[1].logits, nl), (unsigned long long)hash_floats(o[2].logits, nl),
           (unsigned long long)hash_floats(o[3].logits, nl));
    if (memcmp(o[1].logits, o[2].logits, nl * sizeof(float)) || memcmp(o[1].logits, o[3].logits, nl * sizeof(float))) {
      printf("  FAIL: graph / eager / repeated runs are not bit-identical\n");
      bad = 1;
    }
    print_tokens("reference:", o[0].toks, gen);
    print_tokens("decoder:", o[1].toks, gen);
    double worst = 0;
    for (int i = 0; i <= gen; i++) {
      const float *r = o[0].logits + (size_t)i * V, *g = o[1].logits + (size_t)i * V;
      float mr = 0, md = 0;
      for (int j = 0; j < V; j++) {
        if (fabsf(r[j]) > mr) mr = fabsf(r[j]);
        if (fabsf(r[j] - g[j]) > md || isnan(g[j])) md = isnan(g[j]) ? INFINITY : fabsf(r[j] - g[j]);
      }
      double rel = mr > 0 ? md / mr : md;
      if (rel > worst) worst = rel;
      if (i < gen && o[0].toks[i] != o[1].toks[i]) {
        /* near-tie: the reference's logit of the decoder's token within 1% of the range */
        float gap = r[o[0].toks[i]] - r[o[1].toks[i]];
        int tie = gap <= 0.01f * mr;
        printf("  tokens first differ at step %d: reference %d (%.5g) vs decoder %d (%.5g in the reference)%s\n", i,
               o[0].toks[i], r[o[0].toks[i]], o[1].toks[i], r[o[1].toks[i]], tie ? ": near-tie, accepted" : "");
        if (!tie) bad = 1;
        break;
      }
    }
    printf("  logits: max |decoder − reference| / max |reference| over %d positions = %.3g\n", gen + 1, worst);
    if (!(worst <= 0.05)) {
      printf("  FAIL: logits differ by more than 5%% of their range\n");
      bad = 1;
    }
    if (tg > 0 && bench(cuda, &dd->d, m, pp, tg, reps)) bad = 1;
    printf("  %s\n", bad ? "FAIL" : "PASS");
    failures += bad;
  next:
    for (int k = 0; k < 4; k++) {
      free(o[k].toks);
      free(o[k].logits);
    }
    free(prompt);
    mx_decoder_desc_free(dd);
    mx_model_close(m);
  }
  accel_destroy(cuda);
  accel_destroy(cpu);
  printf("%s: %d model(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
