/* Sampled decode steps through the public API (mlxrt_session_step_sample). On the CPU backend a
 * decoder session (MLXRT_DECODER=1) samples inside the decoder (decoder_step with the
 * sampler's next uniform number), so its tokens must equal, exactly, the reference path's
 * logits run through accel_sample_ref with the same seed's uniforms; they must also equal a
 * reference session stepping with mx_sampler on the host (the two selections agree away from
 * boundary ties); temperature 0 is greedy; a repetition penalty keeps the host path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_sample.h"
#include "mlx/sampler.h"
#include "mlxrt.h"
#include "test_util.h"

#define FIXTURES MLXRT_SOURCE_DIR "/tests/fixtures/models"
#define STEPS 12
#define PROMPT 5

typedef struct cfg {
  float temp;
  int top_k;
  float top_p, min_p, penalty;
  uint64_t seed;
} cfg;

static mlxrt_gen_params gen(const cfg *c) {
  mlxrt_gen_params g;
  mlxrt_gen_params_default(&g);
  g.temperature = c->temp;
  g.top_k = c->top_k;
  g.top_p = c->top_p;
  g.min_p = c->min_p;
  g.repetition_penalty = c->penalty;
  g.seed = c->seed;
  g.seed_set = 1;
  return g;
}

/* tokens out[STEPS] by mlxrt_session_step_sample; decoder selects MLXRT_DECODER. */
static int steps_api(const char *dir, int decoder, const cfg *c, const int32_t *prompt, int32_t *out) {
  mlxrt_error err = {{0}};
  if (decoder) setenv("MLXRT_DECODER", "1", 1);
  else unsetenv("MLXRT_DECODER");
  mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  mlxrt_session *s = m ? mlxrt_session_new(m, 64, &err) : NULL;
  mlxrt_gen_params g = gen(c);
  mlxrt_sampler *smp = s ? mlxrt_sampler_new(m, &g, &err) : NULL;
  int ok = smp && mlxrt_session_feed(s, prompt, PROMPT - 1, NULL, 0, &err) == 0;
  int32_t t = prompt[PROMPT - 1];
  for (int i = 0; ok && i < STEPS; i++) {
    ok = mlxrt_session_step_sample(s, t, smp, &t, &err) == 0;
    out[i] = t;
  }
  CHECKF(ok, "%s (decoder %d): %s", dir, decoder, err.msg);
  mlxrt_sampler_free(smp);
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  unsetenv("MLXRT_DECODER");
  return ok;
}

/* The same steps from first principles: reference-path logits, accel_sample_ref, the seed's
 * uniform stream. */
static int steps_reference(const char *dir, const cfg *c, const int32_t *prompt, int32_t *out) {
  mlxrt_error err = {{0}};
  unsetenv("MLXRT_DECODER");
  mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  mlxrt_session *s = m ? mlxrt_session_new(m, 64, &err) : NULL;
  int V = m ? mlxrt_model_vocab_size(m) : 1;
  float *logits = malloc((size_t)V * sizeof(float));
  mx_rng r;
  mx_rng_seed(&r, c->seed);
  accel_sample_params sp = {c->temp, c->top_k, c->top_p, c->min_p};
  int ok = s && mlxrt_session_feed(s, prompt, PROMPT - 1, NULL, 0, &err) == 0;
  int32_t t = prompt[PROMPT - 1];
  for (int i = 0; ok && i < STEPS; i++) {
    ok = mlxrt_session_feed(s, &t, 1, logits, 0, &err) == 0 &&
         accel_sample_ref(logits, V, &sp, c->temp > 0 ? mx_rng_uniform(&r) : 0.0, &t, &err) == 0;
    out[i] = t;
  }
  CHECKF(ok, "%s (reference): %s", dir, err.msg);
  free(logits);
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  return ok;
}

static void fmt(char *b, size_t n, const int32_t *t) {
  size_t at = 0;
  for (int i = 0; i < STEPS && at + 12 < n; i++) at += (size_t)snprintf(b + at, n - at, "%d ", t[i]);
}

int main(void) {
  const char *models[] = {"gemma3-text-bf16", "gemma4-dense-nvfp4", "gemma3-nested-affine4-g64"};
  const cfg cfgs[] = {
      {1.0f, 0, 1.0f, 0.0f, 1.0f, 7},    {0.8f, 20, 0.9f, 0.0f, 1.0f, 11}, {1.5f, 0, 0.95f, 0.05f, 1.0f, 3},
      {0.0f, 0, 1.0f, 0.0f, 1.0f, 5},    {2.0f, 5, 1.0f, 0.0f, 1.0f, 99},  {1.0f, 0, 1.0f, 0.0f, 1.3f, 21},
  };
  const int32_t prompt[PROMPT] = {2, 17, 5, 42, 9};
  for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[mi]);
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
      const cfg *c = &cfgs[ci];
      int32_t dec[STEPS], host[STEPS], ref[STEPS];
      char a[256] = "", b[256] = "";
      if (!steps_api(dir, 1, c, prompt, dec) || !steps_api(dir, 0, c, prompt, host)) continue;
      fmt(a, sizeof a, dec);
      fmt(b, sizeof b, host);
      CHECKF(!memcmp(dec, host, sizeof dec), "%s config %zu: decoder session %s, host sampler %s", models[mi], ci, a, b);
      if (c->penalty != 1.0f) continue; /* the first-principles path has no penalty */
      if (!steps_reference(dir, c, prompt, ref)) continue;
      fmt(b, sizeof b, ref);
      CHECKF(!memcmp(dec, ref, sizeof dec), "%s config %zu: decoder session %s, reference %s", models[mi], ci, a, b);
    }
  }
  TEST_END();
}
