/* mlxrt-decode-real: a real checkpoint through the public session API, the reference path on
 * the CPU against the device decoder (MLXRT_DECODER=1 on --backend, default cuda), along the
 * prompts of a golden file (tests/fixtures/real/NAME.json: "prompts"[i]."prompt_ids"). For
 * each prompt: the prompt in one feed, then --gen greedy steps on each side; the tokens must
 * agree, or first differ at a near-tie, logged with the margins. Both paths round activations
 * to bf16 and differ only in float32 summation order, so their logits differ by a few bf16
 * units in the last place (ulp) of the logit's magnitude (the "noise" column: the largest
 * difference on the reference's chosen token before any divergence). A near-tie: the
 * reference's margin between its token and the decoder's is at most --tie-ulps (4) ulps or
 * --tie (0.1) logits. Exit status 0 when every prompt passes.
 *   mlxrt-decode-real [--gen 128] [--tie 0.1] [--tie-ulps 4] [--backend cuda] MODEL_DIR GOLDEN.json */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlxrt.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = 0;
  fclose(f);
  return b;
}

/* bf16 unit in the last place at |v| (8 significant bits). */
static double bf16_ulp(double v) {
  int e;
  frexp(fabs(v) > 0 ? fabs(v) : 1e-30, &e);
  return ldexp(1.0, e - 8);
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* Greedy path of `gen` tokens after the prompt; logits[i·V] before token i when wanted. */
static int greedy(mlxrt_model *m, const int32_t *prompt, int np, int gen, int32_t *out, float *logits,
                  mlxrt_error *err) {
  int V = mlxrt_model_vocab_size(m);
  /* the reference model runs on the CPU backend: the reference path; the device model: its
   * decoder (MLXRT_DECODER=1 makes that a requirement) */
  mlxrt_session *s = mlxrt_session_new(m, np + gen + 1, err);
  if (!s) return -1;
  float *l = malloc((size_t)V * sizeof(float));
  int rc = -1;
  if (!l || mlxrt_session_feed(s, prompt, np, l, 0, err)) goto done;
  for (int i = 0; i < gen; i++) {
    if (logits) memcpy(logits + (size_t)i * V, l, (size_t)V * sizeof(float));
    out[i] = argmax(l, V);
    if (i + 1 < gen && mlxrt_session_feed(s, &out[i], 1, l, 0, err)) goto done;
  }
  rc = 0;
done:
  free(l);
  mlxrt_session_free(s);
  return rc;
}

int main(int argc, char **argv) {
  int gen = 128;
  double tie = 0.1, tie_ulps = 4;
  const char *backend = "cuda";
  int a = 1;
  for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
    if (!strcmp(argv[a], "--gen")) gen = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "--tie")) tie = atof(argv[a + 1]);
    else if (!strcmp(argv[a], "--tie-ulps")) tie_ulps = atof(argv[a + 1]);
    else if (!strcmp(argv[a], "--backend")) backend = argv[a + 1];
    else break;
  }
  if (argc - a != 2 || gen < 1) {
    fprintf(stderr, "usage: mlxrt-decode-real [--gen 128] [--tie 0.1] [--backend cuda] MODEL_DIR GOLDEN.json\n");
    return 2;
  }
  const char *dir = argv[a], *golden = argv[a + 1];
  char *text = slurp(golden);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *prompts = root ? cJSON_GetObjectItem(root, "prompts") : NULL;
  if (!cJSON_IsArray(prompts)) {
    fprintf(stderr, "%s: no \"prompts\" array\n", golden);
    cJSON_Delete(root);
    return 2;
  }
  mlxrt_error err = {{0}};
  mlxrt_options ocpu = {"cpu", 0, 0, NULL, NULL}, odev = {backend, 0, 0, NULL, NULL};
  mlxrt_model *ref = mlxrt_model_load(dir, &ocpu, &err);
  if (!ref) {
    fprintf(stderr, "reference model: %s\n", err.msg);
    cJSON_Delete(root);
    return 1;
  }
  setenv("MLXRT_DECODER", "1", 1);
  mlxrt_model *dev = mlxrt_model_load(dir, &odev, &err);
  if (!dev) {
    fprintf(stderr, "%s model: %s\n", backend, err.msg);
    mlxrt_model_free(ref);
    cJSON_Delete(root);
    return 1;
  }
  int V = mlxrt_model_vocab_size(ref), failures = 0, n = 0, total_equal = 0, total = 0;
  int32_t *rt = malloc((size_t)gen * sizeof(int32_t)), *dt = malloc((size_t)gen * sizeof(int32_t));
  float *rl = malloc((size_t)gen * V * sizeof(float)), *dl = malloc((size_t)gen * V * sizeof(float));
  const cJSON *p;
  cJSON_ArrayForEach(p, prompts) {
    const cJSON *ids = cJSON_GetObjectItem(p, "prompt_ids"), *name = cJSON_GetObjectItem(p, "name");
    int np = cJSON_GetArraySize(ids);
    int32_t *prompt = malloc((size_t)(np > 0 ? np : 1) * sizeof(int32_t));
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
    const char *nm = cJSON_IsString(name) ? name->valuestring : "prompt";
    double t0 = now_s();
    int ok = rt && dt && rl && dl && np > 0 && greedy(ref, prompt, np, gen, rt, rl, &err) == 0;
    double t1 = now_s();
    ok = ok && greedy(dev, prompt, np, gen, dt, dl, &err) == 0;
    double t2 = now_s();
    n++;
    if (!ok) {
      printf("%-24s FAIL: %s\n", nm, err.msg);
      failures++;
      free(prompt);
      continue;
    }
    int same = 0;
    double noise = 0; /* ulps, on the reference's token, while the paths agree */
    while (same < gen && rt[same] == dt[same]) {
      double r = rl[(size_t)same * V + rt[same]], d = dl[(size_t)same * V + rt[same]];
      if (fabs(r - d) / bf16_ulp(r) > noise) noise = fabs(r - d) / bf16_ulp(r);
      same++;
    }
    total_equal += same;
    total += gen;
    if (same == gen) {
      printf("%-24s %d prompt + %d tokens identical; noise %.1f ulp (cpu %.1f s, %s %.2f s)\n", nm, np, gen, noise,
             t1 - t0, backend, t2 - t1);
    } else {
      const float *l = rl + (size_t)same * V, *g = dl + (size_t)same * V;
      int ta = rt[same], tb = dt[same];
      double margin = (double)l[ta] - (double)l[tb], ulps = margin / bf16_ulp(l[ta]);
      int near = margin <= tie || ulps <= tie_ulps;
      printf("%-24s %d prompt: tokens identical for %d/%d (noise %.1f ulp), then reference %d vs %s %d: reference "
             "logits %.4f / %.4f (margin %.4f = %.1f ulp), %s logits %.4f / %.4f%s\n",
             nm, np, same, gen, noise, ta, backend, tb, l[ta], l[tb], margin, ulps, backend, g[ta], g[tb],
             near ? ": near-tie, accepted" : ": NOT a near-tie");
      if (!near) failures++;
    }
    free(prompt);
  }
  printf("%s: %d/%d prompts pass; %d/%d tokens before any divergence\n", failures ? "FAIL" : "PASS", n - failures, n,
         total_equal, total);
  free(rt);
  free(dt);
  free(rl);
  free(dl);
  mlxrt_model_free(dev);
  mlxrt_model_free(ref);
  cJSON_Delete(root);
  return failures ? 1 : 0;
}
