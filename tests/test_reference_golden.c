/* The reference path against mlx-lm: for every tiny checkpoint in tests/fixtures/models, the
 * logits of a batched prompt pass and of 32 greedy decode steps through the KV cache must be
 * within bf16 tolerance of mlx-lm's, with the same argmax at every position. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mlx/safetensors.h"
#include "mlxrt.h"
#include "test_util.h"

#define FIXTURES MLXRT_SOURCE_DIR "/tests/fixtures/models"

/* Tolerance: |ours − mlx| ≤ TOL_ULPS bf16 ulps of the largest |logit| of that row. mlx-lm's
 * CPU matmuls accumulate in bf16 while ours accumulate in float32, so a few ulps differ. */
#define TOL_ULPS 8.0f

static float bf16_ulp(float x) {
  int e;
  frexpf(fabsf(x) > 1e-30f ? fabsf(x) : 1.0f, &e);
  return ldexpf(1.0f, e - 8);
}

/* Tensor views need not be aligned: copy them out. */
static void *copy_out(const st_tensor *t) {
  void *p = malloc(t->nbytes ? t->nbytes : 1);
  if (p) memcpy(p, t->data, t->nbytes);
  return p;
}

static float *f32_tensor(const st_archive *a, const char *name, int64_t *n0, int64_t *n1) {
  const st_tensor *t = st_find(a, name);
  if (!t || t->dtype != ST_F32) return NULL;
  *n0 = t->shape[0];
  *n1 = t->ndim > 1 ? t->shape[1] : 1;
  return copy_out(t);
}

static int32_t *i32_tensor(const st_archive *a, const char *name, int64_t *n) {
  const st_tensor *t = st_find(a, name);
  if (!t || t->dtype != ST_I32) return NULL;
  *n = t->shape[0];
  return copy_out(t);
}

static int argmax(const float *x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return (int)b;
}

/* Compares one row; returns the max |diff| in ulps and checks the argmax agrees (a tie in
 * mlx's row counts as agreement). */
static float compare_row(const char *what, const char *dir, int64_t row, const float *ours,
                         const float *ref, int64_t V, float *max_abs) {
  float mx = 0.0f;
  for (int64_t i = 0; i < V; i++) mx = fmaxf(mx, fabsf(ref[i]));
  float ulp = bf16_ulp(mx), worst = 0.0f;
  for (int64_t i = 0; i < V; i++) {
    float d = fabsf(ours[i] - ref[i]);
    if (d > *max_abs) *max_abs = d;
    if (d / ulp > worst) worst = d / ulp;
  }
  int a = argmax(ours, V), b = argmax(ref, V);
  CHECKF(a == b || ref[a] == ref[b], "%s %s row %lld: argmax %d (mlx %d, margin %g)", dir, what,
         (long long)row, a, b, (double)(ref[b] - ref[a]));
  return worst;
}

/* exact = 1: MLXRT_NUMERICS=mlx-cpu must reproduce mlx-lm bit for bit (0 ulp). */
static void check_model(const char *dir, int exact) {
  char golden[1024];
  snprintf(golden, sizeof golden, "%s/golden.safetensors", dir);
  st_archive g;
  mlxrt_error err = {{0}};
  if (st_open(golden, &g, &err)) {
    CHECKF(0, "%s", err.msg);
    return;
  }
  int64_t P = 0, GP = 0, GV = 0, N = 0, DN = 0, DV = 0;
  int32_t *prompt = i32_tensor(&g, "prompt", &P);
  float *logits = f32_tensor(&g, "logits", &GP, &GV);
  int32_t *greedy = i32_tensor(&g, "greedy", &N);
  float *glogits = f32_tensor(&g, "greedy_logits", &DN, &DV);
  CHECKF(prompt && logits && greedy && glogits && GP == P && DN == N && DV == GV,
         "%s: golden.safetensors lacks prompt/logits/greedy/greedy_logits", dir);
#define FREE_GOLDEN() (free(prompt), free(logits), free(greedy), free(glogits))
  if (!(prompt && logits && greedy && glogits && GP == P && DN == N && DV == GV)) {
    FREE_GOLDEN();
    st_close(&g);
    return;
  }
  /* MLXRT_TEST_BACKEND=cuda runs the same golden comparison through the CUDA backend */
  const char *backend = getenv("MLXRT_TEST_BACKEND");
  mlxrt_options opt = {backend && *backend ? backend : "cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  CHECKF(m != NULL, "%s", err.msg);
  if (!m) {
    FREE_GOLDEN();
    st_close(&g);
    return;
  }
  int64_t V = mlxrt_model_vocab_size(m);
  CHECKF(V == GV, "%s: vocab %lld vs golden %lld", dir, (long long)V, (long long)GV);
  mlxrt_session *s = mlxrt_session_new_ex(m, 0, MLXRT_SESSION_ALL_POSITIONS, &err);
  float *ours = malloc((size_t)(P * V) * sizeof(float));
  float worst_p = 0, worst_d = 0, abs_p = 0, abs_d = 0;
  if (s && ours && V == GV) {
    CHECKF(mlxrt_session_feed(s, prompt, P, ours, 1, &err) == 0, "%s: %s", dir, err.msg);
    for (int64_t r = 0; r < P; r++)
      worst_p = fmaxf(worst_p, compare_row("prompt", dir, r, ours + r * V, logits + r * V, V, &abs_p));
    /* greedy_logits[0] is the last prompt row; each later row follows feeding greedy[i-1] */
    for (int64_t i = 1; i < N; i++) {
      int32_t tok = greedy[i - 1];
      CHECKF(mlxrt_session_feed(s, &tok, 1, ours, 0, &err) == 0, "%s: %s", dir, err.msg);
      worst_d = fmaxf(worst_d, compare_row("decode", dir, i, ours, glogits + i * V, V, &abs_d));
      CHECKF(argmax(ours, V) == greedy[i] || glogits[i * V + argmax(ours, V)] == glogits[i * V + greedy[i]],
             "%s: greedy step %lld: %d vs mlx-lm %d", dir, (long long)i, argmax(ours, V), greedy[i]);
    }
  }
  printf("%-48s prompt %3lld: max %.4f (%.1f ulp)  decode %2lld: max %.4f (%.1f ulp)  tol %.0f ulp\n",
         strrchr(dir, '/') + 1, (long long)P, (double)abs_p, (double)worst_p, (long long)N,
         (double)abs_d, (double)worst_d, (double)TOL_ULPS);
  float tol = exact ? 0.0f : TOL_ULPS;
  CHECKF(worst_p <= tol, "%s: prompt logits differ by %.1f ulp (tolerance %.0f)", dir, (double)worst_p, (double)tol);
  CHECKF(worst_d <= tol, "%s: decode logits differ by %.1f ulp (tolerance %.0f)", dir, (double)worst_d, (double)tol);
  free(ours);
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  FREE_GOLDEN();
  st_close(&g);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  DIR *d = opendir(FIXTURES);
  CHECKF(d != NULL, "cannot open %s", FIXTURES);
  if (!d) TEST_END();
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 256) {
    if (e->d_name[0] == '.') continue;
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s/golden.safetensors", FIXTURES, e->d_name);
    if (stat(p, &st) == 0 && (!only || strstr(e->d_name, only))) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  CHECKF(n > 0, "no golden fixtures found in %s", FIXTURES);
  for (int i = 0; i < n; i++) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", FIXTURES, names[i]);
    check_model(p, 0);
  }
  /* MLX's own CPU arithmetic emulated (mlx-cpu numerics): every checkpoint — bf16, affine,
   * nvfp4, mxfp4, MoE included — must match exactly (docs/NUMERICS.md). */
  const char *backend = getenv("MLXRT_TEST_BACKEND");
  if (!backend || !*backend || !strcmp(backend, "cpu")) {
    setenv("MLXRT_NUMERICS", "mlx-cpu", 1);
    printf("-- MLXRT_NUMERICS=mlx-cpu (bit-exact expected)\n");
    for (int i = 0; i < n; i++) {
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", FIXTURES, names[i]);
      check_model(p, 1);
    }
    unsetenv("MLXRT_NUMERICS");
  }
  for (int i = 0; i < n; i++) free(names[i]);
  TEST_END();
}
