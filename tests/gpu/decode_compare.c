/* mlxrt-decode-test: the CUDA whole-step decoder (accel.h decoder_*) against the reference
 * path, on a GPU machine. For each model folder:
 *   1. reference: the reference path (src/mlx/reference.c) on the CPU backend (--ref cpu, the
 *      default for models under 2 GB per token) or on the CUDA backend (--ref cuda);
 *   2. the CUDA decoder with graphs, again without graphs (MLXRT_CUDA_PROFILE=1), and once more
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
#include "accel/accel_ring.h"
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
  mx_session *s = mx_session_create_flags(m, b, np + gen + 1, 0, MX_SESSION_REFERENCE, err);
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
  if (b->decoder_step(dec, prompt, np, 0, NULL, 0.0, o->logits, &next, err)) goto done;
  for (int i = 0; i < gen; i++) {
    o->toks[i] = next;
    if (next != argmax(o->logits + (size_t)i * V, V)) {
      snprintf(err->msg, sizeof err->msg, "device argmax %d differs from the host argmax %d of the same logits",
               next, argmax(o->logits + (size_t)i * V, V));
      goto done;
    }
    if (b->decoder_step(dec, &o->toks[i], 1, np + i, NULL, 0.0, o->logits + (size_t)(i + 1) * V, &next, err)) goto done;
  }
  rc = 0;
done:
  b->decoder_free(dec);
  return rc;
}

/* ---- the batched prompt pass (--prefill 1) ------------------------------------------------- */
/* Logits after the prompt and each greedy step within `tol` of the reference's range, and the
 * same greedy tokens (or a first difference at a near-tie of the reference). */
static int compare_runs(const char *label, const run_out *r0, const run_out *g0, int gen, int V, double tol) {
  double worst = 0;
  int same = gen, bad = 0;
  for (int i = 0; i <= gen; i++) {
    const float *r = r0->logits + (size_t)i * V, *g = g0->logits + (size_t)i * V;
    float mr = 0, md = 0;
    for (int j = 0; j < V; j++) {
      if (fabsf(r[j]) > mr) mr = fabsf(r[j]);
      if (isnan(g[j])) md = INFINITY;
      else if (fabsf(r[j] - g[j]) > md) md = fabsf(r[j] - g[j]);
    }
    double rel = mr > 0 ? md / mr : md;
    if (rel > worst) worst = rel;
    if (i < gen && same == gen && r0->toks[i] != g0->toks[i]) {
      same = i;
      float gap = r[r0->toks[i]] - r[g0->toks[i]];
      if (gap > 0.01f * mr) bad = 1;
      printf("    %s: tokens first differ at step %d: reference %d vs decoder %d%s\n", label, i, r0->toks[i],
             g0->toks[i], bad ? "" : " (near-tie, accepted)");
    }
  }
  if (!(worst <= tol)) bad = 1;
  printf("  prefill %-44s logits within %.3g of range, tokens %d/%d equal: %s\n", label, worst, same, gen,
         bad ? "FAIL" : "PASS");
  return bad;
}

typedef struct feed {
  int64_t pos;
  const int32_t *toks;
  int n;
} feed;

/* The decoder fed `f` in order (a smaller pos is a rewind), then gen greedy steps. */
static int run_decoder_feeds(accel_backend *b, const accel_model_desc *d, const feed *f, int nf, int gen, run_out *o,
                             mlxrt_error *err) {
  int V = d->vocab;
  int64_t cap = 0;
  for (int i = 0; i < nf; i++)
    if (f[i].pos + f[i].n > cap) cap = f[i].pos + f[i].n;
  accel_decoder *dec = b->decoder_create(b, d, cap + gen + 1, err);
  if (!dec) return -1;
  int rc = -1;
  int32_t next = -1;
  for (int i = 0; i < nf; i++)
    if (b->decoder_step(dec, f[i].toks, f[i].n, f[i].pos, NULL, 0.0, i == nf - 1 ? o->logits : NULL, &next, err)) goto done;
  int64_t pos = f[nf - 1].pos + f[nf - 1].n;
  for (int i = 0; i < gen; i++) {
    o->toks[i] = next;
    if (b->decoder_step(dec, &o->toks[i], 1, pos + i, NULL, 0.0, o->logits + (size_t)(i + 1) * V, &next, err)) goto done;
  }
  rc = 0;
done:
  b->decoder_free(dec);
  return rc;
}

/* The prompt fed whole (the prompt pass in chunks of PF_CHUNK, GEMM products above PF_GEMM_MIN
 * rows), in pieces of 5 tokens (several prompt passes of mat-vec products, crossing the sliding
 * window between calls) and token by token (the step graphs), then two rewinds, each against the
 * reference path on the same token sequence. ref0: the reference run on `prompt` (np tokens, gen
 * greedy steps). */
static int prefill_checks(const mx_model *m, accel_backend *dev, accel_backend *refb, const accel_model_desc *d,
                          const int32_t *prompt, int np, int gen, const run_out *ref0, int quick) {
  static const struct {
    const char *label;
    int piece; /* tokens per decoder_step call (0: the whole prompt) */
    int quick; /* also in the quick set (--prefill 2: big models) */
  } cfg[] = {
      {"whole prompt:", 0, 1},
      {"pieces of 5 tokens:", 5, 0},
      {"token by token:", 1, 1},
  };
  const int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
  int V = d->vocab, bad = 0;
  mlxrt_error err = {0};
  run_out o = {calloc((size_t)gen, sizeof(int32_t)), calloc((size_t)(gen + 1) * V, sizeof(float))};
  run_out r = {calloc((size_t)gen, sizeof(int32_t)), calloc((size_t)(gen + 1) * V, sizeof(float))};
  int32_t *other = malloc((size_t)np * sizeof(int32_t)), *seq = malloc((size_t)2 * np * sizeof(int32_t));
  feed *fs = malloc((size_t)np * sizeof(feed));
  if (!o.toks || !o.logits || !r.toks || !r.logits || !other || !seq || !fs) {
    printf("  FAIL prefill checks: out of memory\n");
    bad = 1;
    goto done;
  }
  for (int i = 0; i < np; i++) other[i] = (int32_t)(((uint64_t)i * 69069u + 12345u) % (uint64_t)V);
  for (int c = 0; c < ncfg; c++) {
    if (quick && !cfg[c].quick) continue;
    const int piece = cfg[c].piece ? cfg[c].piece : np;
    int nf = 0;
    for (int at = 0; at < np; at += piece) fs[nf++] = (feed){at, prompt + at, np - at < piece ? np - at : piece};
    if (run_decoder_feeds(dev, d, fs, nf, gen, &o, &err)) {
      printf("  prefill %s FAIL: %s\n", cfg[c].label, err.msg);
      bad = 1;
      continue;
    }
    bad |= compare_runs(cfg[c].label, ref0, &o, gen, V, 0.05);
  }
  /* rewinds: (a) back to 0 after a whole prompt, another prompt; (b) within the window before
   * any ring wrapped: a = min(np, window) tokens, back to a/2, then the other prompt; (c) after
   * the rings wrapped (np > window + ACCEL_RING_SLACK + 1): back by ACCEL_RING_SLACK + 1 from
   * the end of the whole prompt, which the rings' slack beyond the window still serves */
  if (quick) goto done;
  int w = d->sliding_window > 0 ? d->sliding_window : np;
  int a = np < w ? np : w, back = a / 2;
  {
    for (int k = 0; k < 3; k++) {
      int fed = k == 1 ? a : np, to = k == 0 ? 0 : k == 1 ? back : np - ACCEL_RING_SLACK - 1;
      if (k == 2 && (d->sliding_window <= 0 || np <= w + ACCEL_RING_SLACK + 1)) continue;
      feed f[2] = {{0, prompt, fed}, {to, other, np}};
      memcpy(seq, prompt, (size_t)to * sizeof(int32_t));
      memcpy(seq + to, other, (size_t)np * sizeof(int32_t));
      int len = to + np;
      char label[96];
      snprintf(label, sizeof label, "rewind to %d after %d tokens:", to, fed);
      if (run_reference(m, refb, seq, len, gen, &r, &err) || run_decoder_feeds(dev, d, f, 2, gen, &o, &err)) {
        printf("  prefill %s FAIL: %s\n", label, err.msg);
        bad = 1;
        continue;
      }
      bad |= compare_runs(label, &r, &o, gen, V, 0.05);
    }
  }
done:
  free(fs);
  free(o.toks);
  free(o.logits);
  free(r.toks);
  free(r.logits);
  free(other);
  free(seq);
  return bad;
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
    if (b->decoder_step(dec, toks, ppn, 0, NULL, 0.0, NULL, &next, &err)) rc = -1;
    double t1 = now_s();
    for (int i = 0; i < tg && !rc; i++)
      if (b->decoder_step(dec, &next, 1, ppn + i, NULL, 0.0, NULL, &next, &err)) rc = -1;
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
  int np = 13, gen = 24, pp = 512, tg = 128, reps = 3, prefill = 0;
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
    else if (!strcmp(a, "--prefill")) prefill = atoi(v);
    else break;
    first++;
  }
  if (first >= argc || np < 1 || gen < 1) {
    fprintf(stderr, "usage: mlxrt-decode-test [--prompt 13] [--gen 24] [--pp 512] [--tg 128] [--reps 3]\n"
                    "                         [--ref cpu|cuda|both] [--backend cuda|cpu] [--prefill 1] MODEL_DIR...\n"
                    "--prefill 1 also checks the batched prompt pass in every configuration and with rewinds;\n"
                    "--prefill 2 in the default configuration, with the plain attention and token by token only.\n"
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
    if (run_decoder(cuda, &dd->d, prompt, np, gen, &o[1], &err)) {
      printf("  FAIL decoder: %s\n", err.msg);
      failures++;
      goto next;
    }
    double t2 = now_s();
    setenv("MLXRT_CUDA_PROFILE", "1", 1); /* per-kernel timing: the same work launched eagerly, no graphs */
    const int eager_rc = run_decoder(cuda, &dd->d, prompt, np, gen, &o[2], &err);
    unsetenv("MLXRT_CUDA_PROFILE");
    if (eager_rc) {
      printf("  FAIL decoder without graphs: %s\n", err.msg);
      failures++;
      goto next;
    }
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
    if (prefill && prefill_checks(m, cuda, use_cpu ? cpu : cuda, &dd->d, prompt, np, gen, &o[0], prefill == 2)) bad = 1;
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
