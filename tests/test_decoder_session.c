/* Sessions with MLXRT_DECODER=1 run every step on the backend's decoder. On the CPU backend
 * that decoder computes the reference path's math, so a decoder session must give the same
 * logits, bit for bit, as a reference session for the prompt and 16 greedy steps on every
 * tiny fixture (dense, MoE, per-layer embeddings with KV sharing); all-position requests are
 * refused by name. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlxrt.h"
#include "test_util.h"

#define FIXTURES MLXRT_SOURCE_DIR "/tests/fixtures/models"

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

static void run(const char *dir, int decoder, int32_t *toks, int n_prompt, int steps, float *out, int V) {
  mlxrt_error err = {{0}};
  if (decoder) setenv("MLXRT_DECODER", "1", 1);
  else unsetenv("MLXRT_DECODER");
  mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  mlxrt_session *s = m ? mlxrt_session_new(m, 256, &err) : NULL;
  CHECKF(s != NULL, "%s (decoder %d): %s", dir, decoder, err.msg);
  if (s) {
    CHECKF(mlxrt_session_feed(s, toks, n_prompt, out, 0, &err) == 0, "%s: %s", dir, err.msg);
    for (int i = 0; i < steps; i++) {
      int32_t t = toks[n_prompt + i] = argmax(out + (int64_t)i * V, V);
      CHECKF(mlxrt_session_feed(s, &t, 1, out + (int64_t)(i + 1) * V, 0, &err) == 0, "%s: %s", dir, err.msg);
    }
  }
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  unsetenv("MLXRT_DECODER");
}

int main(void) {
  DIR *d = opendir(FIXTURES);
  CHECKF(d != NULL, "cannot open %s", FIXTURES);
  if (!d) TEST_END();
  struct dirent *e;
  int tested = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || strstr(e->d_name, "README") || strstr(e->d_name, "VERSIONS")) continue;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, e->d_name);
    const int P = 29, S = 16, V = 384;
    int32_t toks[64];
    for (int i = 0; i < P; i++) toks[i] = i ? 3 + (i * 37) % 300 : 2;
    int32_t toks2[64];
    memcpy(toks2, toks, sizeof toks);
    float *a = calloc((size_t)(S + 1) * V, sizeof(float)), *b = calloc((size_t)(S + 1) * V, sizeof(float));
    run(dir, 0, toks, P, S, a, V);
    run(dir, 1, toks2, P, S, b, V);
    CHECKF(memcmp(a, b, (size_t)(S + 1) * V * sizeof(float)) == 0, "%s: decoder session logits differ", dir);
    CHECKF(memcmp(toks, toks2, sizeof toks) == 0, "%s: decoder session tokens differ", dir);
    free(a);
    free(b);
    tested++;
  }
  closedir(d);
  /* mlxrt_options.kv_k: auto and bf16 load (the CPU keeps bf16 K either way), planar3 / planar4
   * are refused on the CPU by name, another value is refused naming what it takes */
  {
    mlxrt_error err = {{0}};
    const char *ok_values[] = {"auto", "bf16", ""};
    for (int i = 0; i < 3; i++) {
      mlxrt_options opt = {"cpu", 1, 0, NULL, ok_values[i]};
      mlxrt_model *m = mlxrt_model_load(FIXTURES "/gemma4-dense-bf16", &opt, &err);
      CHECKF(m != NULL, "kv_k '%s': %s", ok_values[i], err.msg);
      mlxrt_model_free(m);
    }
    const char *cpu_refuses[] = {"planar3", "planar4"};
    for (int i = 0; i < 2; i++) {
      mlxrt_options opt = {"cpu", 1, 0, NULL, cpu_refuses[i]};
      mlxrt_model *m = mlxrt_model_load(FIXTURES "/gemma4-dense-bf16", &opt, &err);
      CHECK(m == NULL);
      CHECK_MSG(err, "the cpu backend keeps its K cache in bf16");
      CHECK_MSG(err, cpu_refuses[i]);
      mlxrt_model_free(m);
    }
    mlxrt_options bad = {"cpu", 1, 0, NULL, "planar5"};
    mlxrt_model *m = mlxrt_model_load(FIXTURES "/gemma4-dense-bf16", &bad, &err);
    CHECK(m == NULL);
    CHECK_MSG(err, "kv-k 'planar5': expected auto, bf16, planar3 or planar4");
    mlxrt_model_free(m);
  }
  /* a decoder session refuses to return every position's logits */
  {
    setenv("MLXRT_DECODER", "1", 1);
    mlxrt_error err = {{0}};
    mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
    mlxrt_model *m = mlxrt_model_load(FIXTURES "/gemma4-dense-bf16", &opt, &err);
    mlxrt_session *s = m ? mlxrt_session_new(m, 64, &err) : NULL;
    int32_t t[3] = {2, 5, 7};
    float *l = calloc(3 * 384, sizeof(float));
    CHECK(s != NULL);
    if (s) {
      CHECK(mlxrt_session_feed(s, t, 3, l, 1, &err) != 0);
      CHECK_MSG(err, "last position");
    }
    free(l);
    mlxrt_session_free(s);
    mlxrt_model_free(m);
    unsetenv("MLXRT_DECODER");
  }
  printf("%d fixtures (dense, MoE, per-layer embeddings with KV sharing) identical through the decoder\n", tested);
  CHECK(tested >= 15);
  TEST_END();
}
