/* mlxrt-kvk-compare: the device decoder's K from V against bf16 K, on one model and one token
 * stream, on a GPU machine.
 *   mlxrt-kvk-compare MODEL_DIR [--ctx N] [--steps M] [--chunk C] [--a MODE] [--b MODE] [--chunk-b C]
 * Each of two runs (A: --kv-k bf16, B: auto by default) loads the model, feeds N pseudo-random
 * tokens (the prompt pass, in chunks of C; B's of --chunk-b) and then M more one at a time (the
 * decode step), keeping the logits of each of those M steps. Prints, over the M steps: the mean
 * KL divergence of B's next-token distribution from A's, the share of steps whose argmax agree,
 * the perplexity of the fed tokens under each, and the largest logit difference. A and B in the
 * same mode with another chunk size give the figures of the rounding the prompt pass's grouping
 * alone moves: the scale the K-from-V figures compare with. On a synthetic model these check the
 * shapes' arithmetic; they are not a quality figure. Exit status 0 when both runs ran and every
 * logit is finite. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlxrt.h"

static void fill(int32_t *t, int64_t n, int vocab) {
  uint64_t s = 0x2545f4914f6cdd1dull;
  for (int64_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    t[i] = (int32_t)(10 + s % (uint64_t)(vocab - 10));
  }
}

/* the logits of the M decode steps after the N-token prompt, in mode kv_k (NULL on failure) */
static float *run(const char *dir, const char *kv_k, const int32_t *tok, int64_t n, int m, int64_t chunk, int *vocab) {
  mlxrt_error err = {{0}};
  mlxrt_options opt = {"cuda", 0, 1, NULL, kv_k};
  mlxrt_model *M = mlxrt_model_load(dir, &opt, &err);
  if (!M) {
    fprintf(stderr, "load (%s): %s\n", kv_k, err.msg);
    return NULL;
  }
  const int V = mlxrt_model_vocab_size(M);
  *vocab = V;
  mlxrt_session *s = mlxrt_session_new(M, n + m + 1, &err);
  float *all = s ? malloc((size_t)m * V * sizeof(float)) : NULL;
  int ok = all != NULL;
  for (int64_t done = 0; ok && done < n; done += chunk) {
    const int64_t k = n - done < chunk ? n - done : chunk;
    ok = mlxrt_session_feed(s, tok + done, k, NULL, 0, &err) == 0;
  }
  for (int i = 0; ok && i < m; i++) ok = mlxrt_session_feed(s, tok + n + i, 1, all + (size_t)i * V, 0, &err) == 0;
  if (!ok) {
    fprintf(stderr, "%s: %s\n", kv_k, err.msg);
    free(all);
    all = NULL;
  }
  mlxrt_session_free(s);
  mlxrt_model_free(M);
  return all;
}

/* log-softmax of x[V] into lp */
static void log_softmax(const float *x, int V, double *lp) {
  double mx = -INFINITY, z = 0;
  for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
  for (int i = 0; i < V; i++) z += exp(x[i] - mx);
  const double lz = mx + log(z);
  for (int i = 0; i < V; i++) lp[i] = x[i] - lz;
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  int64_t n = 32768, chunk = 4096, chunk_b = 0;
  int m = 64;
  const char *mode_a = "bf16", *mode_b = "auto";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ctx") && i + 1 < argc) n = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) m = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--chunk-b") && i + 1 < argc) chunk_b = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--a") && i + 1 < argc) mode_a = argv[++i];
    else if (!strcmp(argv[i], "--b") && i + 1 < argc) mode_b = argv[++i];
    else if (argv[i][0] != '-' && !dir) dir = argv[i];
    else dir = NULL, i = argc;
  }
  if (!chunk_b) chunk_b = chunk;
  if (!dir || n < 1 || m < 1 || chunk < 1 || chunk_b < 1) {
    fprintf(stderr, "usage: mlxrt-kvk-compare MODEL_DIR [--ctx N] [--steps M] [--chunk C] [--a MODE] [--b MODE] "
                    "[--chunk-b C]\n");
    return 2;
  }
  int V = 0;
  /* the token stream needs the vocabulary: a first load tells it */
  mlxrt_error err = {{0}};
  mlxrt_options probe = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *P = mlxrt_model_load(dir, &probe, &err);
  if (!P) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  V = mlxrt_model_vocab_size(P);
  mlxrt_model_free(P);
  int32_t *tok = malloc((size_t)(n + m) * sizeof(int32_t));
  fill(tok, n + m, V);
  /* (b: run A, the reference of the divergence; a: run B) */
  float *b = run(dir, mode_a, tok, n, m, chunk, &V), *a = b ? run(dir, mode_b, tok, n, m, chunk_b, &V) : NULL;
  if (!a || !b) return 1;
  double *la = malloc((size_t)V * sizeof(double)), *lb = malloc((size_t)V * sizeof(double));
  double kl = 0, nll_a = 0, nll_b = 0, maxd = 0;
  int agree = 0, finite = 1;
  for (int i = 0; i < m; i++) {
    const float *xa = a + (size_t)i * V, *xb = b + (size_t)i * V;
    int ia = 0, ib = 0;
    for (int v = 0; v < V; v++) {
      finite &= isfinite(xa[v]) && isfinite(xb[v]);
      if (xa[v] > xa[ia]) ia = v;
      if (xb[v] > xb[ib]) ib = v;
      const double d = fabs((double)xa[v] - xb[v]);
      maxd = d > maxd ? d : maxd;
    }
    agree += ia == ib;
    log_softmax(xa, V, la);
    log_softmax(xb, V, lb);
    double k = 0;
    for (int v = 0; v < V; v++) k += exp(lb[v]) * (lb[v] - la[v]);
    kl += k;
    /* the token fed after this step is the one these logits predict */
    if (i + 1 < m) nll_a -= la[tok[n + i + 1]], nll_b -= lb[tok[n + i + 1]];
  }
  const int scored = m > 1 ? m - 1 : 1;
  printf("kvk-compare: context %lld, %d decode steps, A %s (chunks of %lld), B %s (chunks of %lld): mean KL(A || B) "
         "%.3g nats, top-1 agreement %.1f %%, perplexity %.4g (B) vs %.4g (A), max |logit difference| %.3g%s\n",
         (long long)n, m, mode_a, (long long)chunk, mode_b, (long long)chunk_b, kl / m, 100.0 * agree / m,
         exp(nll_a / scored), exp(nll_b / scored), maxd, finite ? "" : ", NON-FINITE LOGITS");
  return finite ? 0 : 1;
}
