/* The real Gemma 3 270M demo model against mlx-lm (tests/fixtures/real/NAME.json, made by
 * scripts/golden_real_model.py and scripts/golden_real_f32.py): 5 prompts × 64 tokens,
 * teacher-forced along mlx-lm's own greedy path; every disagreement is printed with the margin.
 *  - Against mlx-lm on the CPU, whose quantized matmul accumulates in bf16 (NUMERICS.md):
 *    measured 90.9 % top-1 agreement on affine 4-bit (disagreements up to margin 1.25), 94.4 %
 *    on affine 8-bit and 97.8 % on nvfp4; the floor asserted is 85 %. The 98 % target is NOT met against
 *    this peer.
 *  - Against the float32-accumulation reference (the same mlx-lm model with every quantized
 *    matrix replaced by its mx.dequantize result): measured 317/320 = 99.1 % (affine 4-bit,
 *    worst disagreement at margin 0.25) and 318/320 = 99.4 % (nvfp4); asserted ≥ 98 % and
 *    margin < 0.3; 8-bit: 320/320.
 *  - With mlx-cpu numerics (MLX's CPU arithmetic emulated bit for bit: bf16 accumulation, its
 *    own sin/cos/exp, its RMSNorm mean) the acceptance is asserted literally for every
 *    format with a fixture (4-bit, 8-bit, nvfp4): ≥ 98 % top-1 agreement with mlx-lm and any
 *    divergence only at mlx-lm top-2 margin < 0.1. Measured 320/320 for each.
 * Needs the demo model (scripts/make_demo_model.sh); MLXRT_ALLOW_MISSING_MODELS=1 turns its
 * absence into a skip. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlxrt.h"
#include "test_util.h"

static int argmax(const float *x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return (int)b;
}

static int ints(const cJSON *a, int32_t *out, int max) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, a) if (n < max) out[n++] = (int32_t)e->valuedouble;
  return n;
}

static int fixtures_found, models_missing;

/* One model folder against its fixture. */
static void check_model(const char *name, const char *backend) {
  const char *cache = getenv("MLXRT_CACHE");
  const char *home = getenv("HOME");
  char dir[1024], fix[1024];
  if (cache && *cache) snprintf(dir, sizeof dir, "%s/models/%s", cache, name);
  else snprintf(dir, sizeof dir, "%s/.cache/mlxrt/models/%s", home ? home : ".", name);
  snprintf(fix, sizeof fix, "%s/tests/fixtures/real/%s.json", MLXRT_SOURCE_DIR, name);
  FILE *probe = fopen(fix, "r");
  if (!probe) return; /* no golden data for this format */
  fclose(probe);
  fixtures_found++;
  char path[1100];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (!(probe = fopen(path, "r"))) {
    const char *allow = getenv("MLXRT_ALLOW_MISSING_MODELS");
    if (allow && !strcmp(allow, "1")) {
      printf("SKIPPED: %s not found\n", dir);
      models_missing++;
      return;
    }
    CHECKF(0, "demo model %s not found (run scripts/make_demo_model.sh)", dir);
    return;
  }
  fclose(probe);
  mlxrt_error err = {{0}};
  size_t len;
  char *text = mx_read_file(fix, &len, &err);
  CHECKF(text != NULL, "%s", err.msg);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  CHECKF(root != NULL, "%s: invalid JSON", fix);
  if (!root) return;
  mlxrt_options opt = {backend, 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  CHECKF(m != NULL, "%s", err.msg);
  int64_t V = m ? mlxrt_model_vocab_size(m) : 0;
  int total = 0, agree = 0, agree_f32 = 0, total_f32 = 0, bad_f32 = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "prompts")) {
    if (!m) break;
    int32_t prompt[4096], greedy[512], top1[512], top2[512], f32top1[512];
    double margin[512], f32margin[512];
    int P = ints(cJSON_GetObjectItem(p, "prompt_ids"), prompt, 4096);
    int G = ints(cJSON_GetObjectItem(p, "greedy"), greedy, 512);
    ints(cJSON_GetObjectItem(p, "top1"), top1, 512);
    ints(cJSON_GetObjectItem(p, "top2"), top2, 512);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(p, "margin")) if (k < 512) margin[k++] = e->valuedouble;
    int nf = ints(cJSON_GetObjectItem(p, "f32_top1"), f32top1, 512);
    k = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(p, "f32_margin")) if (k < 512) f32margin[k++] = e->valuedouble;
    /* teacher-forced: prompt, then mlx-lm's greedy tokens; logits at P-1 .. P+G-2 */
    int32_t *seq = malloc((size_t)(P + G) * sizeof *seq);
    float *logits = malloc((size_t)G * (size_t)V * sizeof(float));
    mlxrt_session *s = mlxrt_session_new(m, 0, &err);
    if (!seq || !logits || !s) {
      CHECKF(0, "setup: %s", err.msg);
      free(seq);
      free(logits);
      mlxrt_session_free(s);
      continue;
    }
    memcpy(seq, prompt, (size_t)P * sizeof *seq);
    memcpy(seq + P, greedy, (size_t)G * sizeof *seq);
    int ok = mlxrt_session_feed(s, seq, P - 1, NULL, 0, &err) == 0 &&
             mlxrt_session_feed(s, seq + P - 1, G, logits, 1, &err) == 0;
    CHECKF(ok, "%s: %s", cJSON_GetObjectItem(p, "name")->valuestring, err.msg);
    int a = 0, af = 0;
    for (int i = 0; ok && i < G; i++) {
      int ours = argmax(logits + (int64_t)i * V, V);
      total++;
      if (ours == top1[i]) a++;
      else
        printf("  %s step %2d: ours %6d, mlx-lm %6d (top-2 %6d, margin %.4f)\n",
               cJSON_GetObjectItem(p, "name")->valuestring, i, ours, top1[i], top2[i], margin[i]);
      if (i < nf) {
        total_f32++;
        if (ours == f32top1[i]) af++;
        else if (f32margin[i] >= 0.3) {
          bad_f32++;
          printf("  %s step %2d: ours %6d vs float32-accumulation top-1 %6d with margin %.4f\n",
                 cJSON_GetObjectItem(p, "name")->valuestring, i, ours, f32top1[i], f32margin[i]);
        }
      }
    }
    agree += a;
    agree_f32 += af;
    free(seq);
    free(logits);
    mlxrt_session_free(s);
  }
  double rate = total ? 100.0 * agree / total : 0;
  printf("%s (%s): teacher-forced top-1 agreement with mlx-lm %d/%d = %.1f %%", name, backend, agree,
         total, rate);
  if (total_f32)
    printf("; with the float32-accumulation reference %d/%d, %d disagreements at margin >= 0.3", agree_f32,
           total_f32, bad_f32);
  printf("\n");
  CHECKF(total > 0, "%s: no prompts in the fixture", fix);
  CHECKF(rate >= 85.0, "%s: agreement with mlx-lm %.1f %% < 85 %%", name, rate);
  double rate_f32 = total_f32 ? 100.0 * agree_f32 / total_f32 : 100.0;
  CHECKF(rate_f32 >= 98.0, "%s: agreement with the float32 reference %.1f %% < 98 %%", name, rate_f32);
  CHECKF(bad_f32 == 0, "%s: %d disagreements with the float32 reference outside near-ties", name, bad_f32);
  cJSON_Delete(root);
  mlxrt_model_free(m);
}

/* The acceptance, literally, in mlx-cpu numerics (MLX's own CPU arithmetic emulated,
 * docs/NUMERICS.md): every prompt of the fixture, every one of its teacher-forced steps fed as
 * mlx-lm's generate_step feeds them (the prompt but its last token in one batch, then one
 * token per step), top-1 against mlx-lm's; ≥ 98 % agreement and any disagreement only where
 * mlx-lm's top-2 margin is < 0.1. Every disagreement is printed with its margin. */
static void check_mlx_cpu(const char *name) {
  const char *cache = getenv("MLXRT_CACHE");
  const char *home = getenv("HOME");
  char dir[1024], fix[1024], path[1100];
  if (cache && *cache) snprintf(dir, sizeof dir, "%s/models/%s", cache, name);
  else snprintf(dir, sizeof dir, "%s/.cache/mlxrt/models/%s", home ? home : ".", name);
  snprintf(fix, sizeof fix, "%s/tests/fixtures/real/%s.json", MLXRT_SOURCE_DIR, name);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *probe = fopen(path, "r");
  if (!probe) {
    CHECKF(0, "%s: model not found for the mlx-cpu comparison", dir);
    return;
  }
  fclose(probe);
  mlxrt_error err = {{0}};
  size_t len;
  char *text = mx_read_file(fix, &len, &err);
  if (!text) return; /* no golden data for this format */
  cJSON *root = cJSON_Parse(text);
  free(text);
  CHECKF(root != NULL, "%s: invalid JSON", fix);
  setenv("MLXRT_NUMERICS", "mlx-cpu", 1);
  mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = root ? mlxrt_model_load(dir, &opt, &err) : NULL;
  unsetenv("MLXRT_NUMERICS");
  if (!m) {
    CHECKF(0, "%s (mlx-cpu numerics): %s", name, err.msg);
    cJSON_Delete(root);
    return;
  }
  int64_t V = mlxrt_model_vocab_size(m);
  float *logits = malloc((size_t)V * sizeof(float));
  int total = 0, agree = 0, wide = 0;
  double worst = 0.0;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "prompts")) {
    static int32_t seq[4096 + 512];
    int32_t top1[512], top2[512];
    double margin[512];
    const char *pname = cJSON_GetObjectItem(p, "name")->valuestring;
    int P = ints(cJSON_GetObjectItem(p, "prompt_ids"), seq, 4096);
    int G = ints(cJSON_GetObjectItem(p, "greedy"), seq + P, 512);
    ints(cJSON_GetObjectItem(p, "top1"), top1, 512);
    ints(cJSON_GetObjectItem(p, "top2"), top2, 512);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(p, "margin")) if (k < 512) margin[k++] = e->valuedouble;
    if (k < G) G = k;
    mlxrt_session *s = mlxrt_session_new(m, 0, &err);
    int ok = logits && s && P > 0 && mlxrt_session_feed(s, seq, P - 1, NULL, 0, &err) == 0;
    int a = 0, i = 0;
    for (; ok && i < G; i++) {
      ok = mlxrt_session_feed(s, seq + P - 1 + i, 1, logits, 0, &err) == 0;
      if (!ok) break;
      int ours = argmax(logits, V);
      total++;
      if (ours == top1[i]) {
        a++;
        continue;
      }
      if (margin[i] > worst) worst = margin[i];
      if (margin[i] >= 0.1) wide++;
      printf("  mlx-cpu %s step %2d: ours %6d, mlx-lm %6d (top-2 %6d, margin %.4f)\n", pname, i, ours, top1[i],
             top2[i], margin[i]);
    }
    CHECKF(ok, "%s %s (mlx-cpu numerics): %s", name, pname, err.msg);
    agree += a;
    mlxrt_session_free(s);
  }
  double rate = total ? 100.0 * agree / total : 0.0;
  printf("%s with mlx-cpu numerics: teacher-forced top-1 agreement with mlx-lm %d/%d = %.1f %% "
         "(%d disagreements at margin >= 0.1, largest disagreeing margin %.4f)\n",
         name, agree, total, rate, wide, worst);
  CHECKF(total > 0, "%s: no prompts in the fixture", fix);
  CHECKF(rate >= 98.0, "%s: mlx-cpu agreement with mlx-lm %.1f %% < 98 %%", name, rate);
  CHECKF(wide == 0, "%s: %d mlx-cpu disagreements where mlx-lm's top-2 margin is >= 0.1", name, wide);
  free(logits);
  mlxrt_model_free(m);
  cJSON_Delete(root);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "cpu";
  /* the floors above were measured on these checkpoints; other formats get fixtures (and
   * their own measured floors) when scripts/golden_real_model.py has been run for them */
  check_model("gemma-3-270m-4bit", backend);
  check_model("gemma-3-270m-8bit", backend);
  check_model("gemma-3-270m-nvfp4", backend);
  CHECKF(fixtures_found > 0, "no fixture in %s/tests/fixtures/real", MLXRT_SOURCE_DIR);
  /* the acceptance in mlx-cpu numerics: every format with a fixture (CPU only) */
  if (!strcmp(backend, "cpu") && !models_missing) {
    check_mlx_cpu("gemma-3-270m-4bit");
    check_mlx_cpu("gemma-3-270m-8bit");
    check_mlx_cpu("gemma-3-270m-nvfp4");
  }
  TEST_END();
}
