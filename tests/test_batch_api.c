/* The public batched decode (mlxrt_batch_*) on the CPU backend, against sessions of the same
 * model: each sequence of a batch, joining at its own step, gives the tokens a session gives
 * alone (greedy), and the draws a session's sampler gives (mlxrt_session_step_sample with a
 * sampler of the same parameters and seed); then every refusal a request can meet, each leaving
 * the batch's sequences where they were. */
#include <stdint.h>

#include "mlxrt.h"
#include "test_util.h"
#include "model_dir.h"

#define FIXTURE MLXRT_SOURCE_DIR "/tests/fixtures/models/gemma4-dense-nvfp4"
#define TOKENIZER MLXRT_SOURCE_DIR "/tests/fixtures/tokenizer/small-a.json"
#define NS 4
#define GEN 12
#define CAP 96

static int32_t prompt_id(int s, int i) { return (int32_t)(3 + ((uint32_t)(s * 7919 + i) * 2654435761u) % 380u); }
static int prompt_len(int s) { return 5 + 13 * s; }

static void sampler_params(mlxrt_gen_params *p, int s) {
  mlxrt_gen_params_default(p);
  p->temperature = 0.9f;
  p->top_k = 40;
  p->seed = 1000 + (uint64_t)s;
  p->seed_set = 1;
}

/* A session's GEN tokens after sequence s's prompt: the greedy first one, then greedy steps
 * (sampled = 0) or the steps of a sampler with sampler_params (sampled = 1). */
static int session_tokens(mlxrt_model *m, int s, int sampled, int32_t *out) {
  mlxrt_error err = {{0}};
  mlxrt_session *ss = mlxrt_session_new(m, CAP, &err);
  CHECKF(ss != NULL, "%s", err.msg);
  if (!ss) return -1;
  int32_t p[CAP];
  const int np = prompt_len(s);
  for (int i = 0; i < np; i++) p[i] = prompt_id(s, i);
  static float logits[4096];
  const int V = mlxrt_model_vocab_size(m);
  int rc = V > 4096 || mlxrt_session_feed(ss, p, np, logits, 0, &err);
  mlxrt_gen_params gp;
  sampler_params(&gp, s);
  mlxrt_sampler *smp = sampled && !rc ? mlxrt_sampler_new(m, &gp, &err) : NULL;
  if (!rc) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
      if (logits[v] > logits[best]) best = v;
    out[0] = best;
  }
  for (int i = 1; i < GEN && !rc; i++)
    rc = sampled ? mlxrt_session_step_sample(ss, out[i - 1], smp, &out[i], &err)
                 : mlxrt_session_step_greedy(ss, out[i - 1], &out[i], &err);
  CHECKF(!rc, "session %d: %s", s, err.msg);
  mlxrt_sampler_free(smp);
  mlxrt_session_free(ss);
  return rc ? -1 : 0;
}

/* The batch: sequence s prompts at step s (in slot NS - 1 - s) and steps with the others from
 * then on; every sequence's GEN tokens into out[s]. */
static int batch_tokens(mlxrt_batch *b, mlxrt_model *m, int sampled, int32_t out[NS][GEN]) {
  mlxrt_error err = {{0}};
  mlxrt_sampler *smp[NS] = {0};
  int n_out[NS] = {0}, rc = 0;
  for (int s = 0; s < NS && sampled; s++) {
    mlxrt_gen_params gp;
    sampler_params(&gp, s);
    smp[s] = mlxrt_sampler_new(m, &gp, &err);
    CHECKF(smp[s] != NULL, "%s", err.msg);
  }
  for (int step = 0; !rc; step++) {
    int slots[NS], rows = 0, who[NS];
    int32_t tok[NS], next[NS];
    mlxrt_sampler *rs[NS];
    for (int s = 0; s < NS; s++)
      if (s < step && n_out[s] < GEN) {
        slots[rows] = NS - 1 - s;
        tok[rows] = out[s][n_out[s] - 1];
        rs[rows] = smp[s];
        who[rows++] = s;
      }
    if (rows)
      rc = sampled ? mlxrt_batch_step_sample(b, rows, slots, tok, rs, next, &err)
                   : mlxrt_batch_step(b, rows, slots, tok, next, &err);
    for (int r = 0; r < rows && !rc; r++) out[who[r]][n_out[who[r]]++] = next[r];
    if (step < NS && !rc) { /* sequence `step` joins */
      int32_t p[CAP];
      for (int i = 0; i < prompt_len(step); i++) p[i] = prompt_id(step, i);
      rc = mlxrt_batch_prompt(b, NS - 1 - step, p, prompt_len(step), &out[step][0], &err);
      n_out[step] = 1;
      CHECK(mlxrt_batch_position(b, NS - 1 - step) == prompt_len(step));
    }
    int done = 1;
    for (int s = 0; s < NS; s++) done &= n_out[s] == GEN;
    if (done) break;
  }
  CHECKF(!rc, "batch: %s", err.msg);
  for (int s = 0; s < NS; s++) mlxrt_sampler_free(smp[s]);
  return rc ? -1 : 0;
}

static void test_against_sessions(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  for (int sampled = 0; sampled < 2; sampled++) {
    mlxrt_batch *b = mlxrt_batch_new(m, NS, CAP, &err);
    CHECKF(b != NULL, "%s", err.msg);
    if (!b) return;
    int32_t bt[NS][GEN], st[GEN];
    mlxrt_memory m0, m1;
    CHECKF(!mlxrt_batch_memory(b, &m0, &err), "%s", err.msg);
    const int brc = batch_tokens(b, m, sampled, bt);
    /* the slots' caches count: they hold the sequences' positions now */
    CHECKF(!mlxrt_batch_memory(b, &m1, &err), "%s", err.msg);
    CHECKF(brc || m1.kv_bytes > m0.kv_bytes, "batch memory: %llu KV bytes before the sequences, %llu after",
           (unsigned long long)m0.kv_bytes, (unsigned long long)m1.kv_bytes);
    if (!brc)
      for (int s = 0; s < NS; s++)
        if (!session_tokens(m, s, sampled, st))
          CHECKF(!memcmp(st, bt[s], sizeof st), "%s sequence %d: the batch's tokens differ from a session's",
                 sampled ? "sampled" : "greedy", s);
    mlxrt_batch_free(b);
  }
}

/* Every refusal: the message names what was wrong, and no sequence moved. */
static void test_refusals(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  CHECK(mlxrt_batch_new(m, 0, CAP, &err) == NULL);
  CHECK_MSG(err, "0 slots");
  CHECK(mlxrt_batch_new(m, 257, CAP, &err) == NULL);
  mlxrt_batch *b = mlxrt_batch_new(m, 2, 8, &err);
  CHECKF(b != NULL, "%s", err.msg);
  if (!b) return;
  int32_t p[8] = {5, 6, 7, 8, 9, 10, 11, 12}, next[2] = {0, 0}, t2[2] = {3, 4};
  int s01[2] = {0, 1}, s00[2] = {0, 0}, s2[1] = {2};
  CHECK(mlxrt_batch_prompt(b, 2, p, 3, next, &err) != 0);
  CHECK_MSG(err, "slot 2 of 2");
  CHECK(mlxrt_batch_prompt(b, 0, p, 8, next, &err) != 0); /* no room left for a step */
  CHECK(mlxrt_batch_prompt(b, 0, p, 3, next, &err) == 0);
  CHECK(mlxrt_batch_step(b, 2, s01, t2, next, &err) != 0);
  CHECK_MSG(err, "slot 1 holds no sequence");
  CHECK(mlxrt_batch_prompt(b, 1, p, 6, next, &err) == 0);
  CHECK(mlxrt_batch_step(b, 2, s00, t2, next, &err) != 0);
  CHECK(mlxrt_batch_step(b, 1, s2, t2, next, &err) != 0);
  CHECK_MSG(err, "slot 2 of 2");
  int32_t bad[2] = {3, 1 << 30};
  CHECK(mlxrt_batch_step(b, 2, s01, bad, next, &err) != 0);
  CHECK(mlxrt_batch_position(b, 0) == 3 && mlxrt_batch_position(b, 1) == 6);
  mlxrt_gen_params gp;
  mlxrt_gen_params_default(&gp);
  gp.repetition_penalty = 1.3f;
  mlxrt_sampler *pen = mlxrt_sampler_new(m, &gp, &err);
  mlxrt_sampler *rs[2] = {NULL, pen};
  CHECK(pen != NULL);
  CHECK(mlxrt_batch_step_sample(b, 2, s01, t2, rs, next, &err) != 0);
  CHECK_MSG(err, "repetition penalty");
  CHECK(mlxrt_batch_position(b, 0) == 3 && mlxrt_batch_position(b, 1) == 6);
  CHECK(mlxrt_batch_step(b, 2, s01, t2, next, &err) == 0);
  CHECK(mlxrt_batch_position(b, 0) == 4 && mlxrt_batch_position(b, 1) == 7);
  CHECK(mlxrt_batch_step(b, 1, s01 + 1, t2, next, &err) == 0); /* slot 1's 8th token: the capacity */
  CHECK(mlxrt_batch_step(b, 1, s01 + 1, t2, next, &err) != 0);
  CHECK_MSG(err, "full");
  CHECK(mlxrt_batch_position(b, 1) == 8);
  mlxrt_sampler_free(pen);
  mlxrt_batch_free(b);
}

int main(void) {
  char dir[256] = "/tmp/mlxrt_batch_XXXXXX";
  mlxrt_error err = {{0}};
  if (make_model_dir(dir, FIXTURE, TOKENIZER)) {
    fprintf(stderr, "cannot make the model folder\n");
    return 1;
  }
  mlxrt_options o = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &o, &err);
  CHECKF(m != NULL, "%s", err.msg);
  if (m) {
    test_against_sessions(m);
    test_refusals(m);
  }
  mlxrt_model_free(m);
  remove_model_dir(dir);
  TEST_END();
}
