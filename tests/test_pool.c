/* Session pools (mlxrt_pool_*) on the CPU backend, against lone sessions of the same model.
 * Four threads answer at the same time on sessions of one pool, each with its own options
 * (greedy; sampled; logprobs with alternatives; a repetition penalty), prompts of different
 * lengths (one longer than a prompt piece), then a follow-up that reuses the cached answer:
 * each thread's tokens and logprobs equal, bit for bit, those of a lone session given the same
 * calls, and the pool's steps held several sequences at once. Then, on one thread: two pool
 * sessions stepped in turn, cancellation, the refusals (slots, capacity, speculative decoding).
 * Last, a sequence whose step overflows fails alone: the one stepping with it goes on. */
#include <pthread.h>
#include <stdint.h>

#include "mlxrt.h"
#include "test_util.h"
#include "model_dir.h"

#define FIXTURES MLXRT_SOURCE_DIR "/tests/fixtures/models/"
#define TOKENIZER MLXRT_SOURCE_DIR "/tests/fixtures/tokenizer/small-a.json"
#define NS 4
#define GEN 24
#define CAP 700
#define MAXP 640

static const int prompt_len[NS] = {5, 40, 600, 17};

typedef struct answer {
  int n;
  int32_t ids[GEN];
  float lp[GEN];
  int32_t top[GEN][3];
  int stopped_by;
} answer;

typedef struct job {
  int s;
  mlxrt_model *m;
  mlxrt_pool *pool; /* NULL: a lone session */
  pthread_barrier_t *start;
  answer a[2];
  int rc;
  char msg[1024];
} job;

static void options(int s, mlxrt_generate_options *o) {
  mlxrt_generate_options_default(o);
  o->gen.max_tokens = GEN;
  o->gen.seed = 100 + (uint64_t)s;
  o->gen.seed_set = 1;
  o->gen.temperature = 0.0f;
  o->ignore_stop = 1;
  if (s == 1) {
    o->gen.temperature = 0.9f;
    o->gen.top_k = 40;
  } else if (s == 2) {
    o->logprobs = 1;
    o->top_logprobs = 3;
    o->ignore_stop = 0;
  } else if (s == 3) {
    o->gen.temperature = 0.8f;
    o->gen.repetition_penalty = 1.3f;
    o->logprobs = 1;
  }
}

static int on_token(void *user, const mlxrt_token_info *t) {
  answer *a = user;
  if (a->n < GEN) {
    a->ids[a->n] = t->id;
    a->lp[a->n] = t->logprob;
    for (int k = 0; k < 3; k++) a->top[a->n][k] = k < t->n_top ? t->top_ids[k] : -1;
  }
  a->n++;
  return 0;
}

/* Two answers on session ss: the prompt, then the prompt + the first answer's tokens but its
 * last + three more tokens (the cache is reused up to there). */
static int answer_twice(job *j, mlxrt_session *ss) {
  mlxrt_error err = {{0}};
  int32_t p[MAXP + GEN + 3];
  int np = prompt_len[j->s];
  for (int i = 0; i < np; i++) p[i] = (int32_t)(3 + ((uint32_t)(j->s * 7919 + i) * 2654435761u) % 340u);
  mlxrt_generate_options o;
  options(j->s, &o);
  for (int turn = 0; turn < 2; turn++) {
    mlxrt_gen_stats st;
    memset(&j->a[turn], 0, sizeof j->a[turn]);
    if (mlxrt_session_generate(ss, p, (size_t)np, &o, on_token, &j->a[turn], &st, &err)) {
      snprintf(j->msg, sizeof j->msg, "sequence %d, answer %d: %s", j->s, turn, err.msg);
      return -1;
    }
    j->a[turn].stopped_by = st.stopped_by;
    for (int i = 0; i + 1 < j->a[turn].n && i < GEN; i++) p[np++] = j->a[turn].ids[i];
    for (int i = 0; i < 3; i++) p[np++] = (int32_t)(7 + 31 * i + j->s);
  }
  return 0;
}

static void *run_job(void *arg) {
  job *j = arg;
  mlxrt_error err = {{0}};
  mlxrt_session *ss = j->pool ? mlxrt_pool_session_new(j->pool, &err) : mlxrt_session_new(j->m, CAP, &err);
  if (j->start) pthread_barrier_wait(j->start);
  if (!ss) {
    snprintf(j->msg, sizeof j->msg, "sequence %d: no session: %s", j->s, err.msg);
    j->rc = -1;
    return NULL;
  }
  j->rc = answer_twice(j, ss);
  mlxrt_session_free(ss);
  return NULL;
}

static void check_same(const job *pool, const job *alone) {
  CHECKF(!pool->rc, "%s", pool->msg);
  CHECKF(!alone->rc, "%s", alone->msg);
  if (pool->rc || alone->rc) return;
  for (int t = 0; t < 2; t++) {
    const answer *a = &pool->a[t], *b = &alone->a[t];
    CHECKF(a->n == b->n && a->stopped_by == b->stopped_by, "sequence %d answer %d: %d tokens (stopped by %d) vs %d (%d)",
           pool->s, t, a->n, a->stopped_by, b->n, b->stopped_by);
    CHECKF(!memcmp(a->ids, b->ids, sizeof a->ids), "sequence %d answer %d: the pool's tokens differ", pool->s, t);
    CHECKF(!memcmp(a->lp, b->lp, sizeof a->lp), "sequence %d answer %d: the pool's logprobs differ", pool->s, t);
    CHECKF(!memcmp(a->top, b->top, sizeof a->top), "sequence %d answer %d: the pool's alternatives differ", pool->s, t);
  }
}

static void test_threads(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  mlxrt_pool *pool = mlxrt_pool_new(m, NS, CAP, &err);
  CHECKF(pool != NULL, "%s", err.msg);
  if (!pool) return;
  static job pj[NS], aj[NS];
  pthread_t th[NS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NS);
  for (int s = 0; s < NS; s++) {
    pj[s] = (job){.s = s, .m = m, .pool = pool, .start = &start};
    CHECK(pthread_create(&th[s], NULL, run_job, &pj[s]) == 0);
  }
  for (int s = 0; s < NS; s++) pthread_join(th[s], NULL);
  pthread_barrier_destroy(&start);
  mlxrt_pool_stats st;
  mlxrt_pool_get_stats(pool, &st);
  /* 2 answers × (GEN - 1) steps each, the follow-ups' 4 new prompt tokens as prompts */
  CHECKF(st.rows >= 2 * NS * (GEN - 1) - 2 * GEN, "%lld sequence steps", (long long)st.rows);
  CHECKF(st.rows > st.steps, "%lld steps of %lld rows: no step held two sequences", (long long)st.steps,
         (long long)st.rows);
  CHECKF(st.prompt_pieces >= NS + 2, "%lld prompt pieces (the long prompt takes two)", (long long)st.prompt_pieces);
  printf("pool: %lld steps, %lld rows (%.2f per step), %lld prompt pieces\n", (long long)st.steps,
         (long long)st.rows, (double)st.rows / (double)(st.steps ? st.steps : 1), (long long)st.prompt_pieces);
  mlxrt_pool_free(pool);
  for (int s = 0; s < NS; s++) {
    aj[s] = (job){.s = s, .m = m};
    run_job(&aj[s]);
    check_same(&pj[s], &aj[s]);
  }
}

static int cancel_after(void *user, const mlxrt_token_info *t) {
  (void)t;
  volatile int *c = user;
  *c = 1;
  return 0;
}

/* One thread: two sessions of a pool stepped in turn (each step waits for the other briefly),
 * cancellation, a failed answer leaving the session usable, and every refusal. */
static void test_one_thread(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  CHECK(mlxrt_pool_new(m, 0, CAP, &err) == NULL);
  CHECK_MSG(err, "0 slots");
  CHECK(mlxrt_pool_new(m, 2, 1 << 20, &err) == NULL);
  CHECK_MSG(err, "capacity");
  mlxrt_pool *pool = mlxrt_pool_new(m, 2, 64, &err);
  CHECKF(pool != NULL, "%s", err.msg);
  if (!pool) return;
  mlxrt_session *a = mlxrt_pool_session_new(pool, &err), *b = mlxrt_pool_session_new(pool, &err);
  CHECK(a && b);
  CHECK(mlxrt_pool_session_new(pool, &err) == NULL);
  CHECK_MSG(err, "slots are all taken");
  mlxrt_session *la = mlxrt_session_new(m, 64, &err), *lb = mlxrt_session_new(m, 64, &err);
  CHECK(la && lb);
  if (!a || !b || !la || !lb) goto out;
  int32_t pa[6] = {11, 12, 13, 14, 15, 16}, pb[9] = {40, 41, 42, 43, 44, 45, 46, 47, 48};
  float la_logits[384], a_logits[384];
  CHECK(mlxrt_model_vocab_size(m) == 384);
  CHECK(mlxrt_session_feed(a, pa, 6, a_logits, 0, &err) == 0);
  CHECK(mlxrt_session_feed(la, pa, 6, la_logits, 0, &err) == 0);
  CHECK(!memcmp(a_logits, la_logits, sizeof a_logits));
  CHECK(mlxrt_session_feed(b, pb, 9, NULL, 0, &err) == 0);
  CHECK(mlxrt_session_feed(lb, pb, 9, NULL, 0, &err) == 0);
  int32_t ta = 20, tb = 30, tla = 20, tlb = 30;
  for (int i = 0; i < 8; i++) {
    CHECK(mlxrt_session_step_greedy(a, ta, &ta, &err) == 0);
    CHECK(mlxrt_session_step_greedy(b, tb, &tb, &err) == 0);
    CHECK(mlxrt_session_step_greedy(la, tla, &tla, &err) == 0);
    CHECK(mlxrt_session_step_greedy(lb, tlb, &tlb, &err) == 0);
    CHECKF(ta == tla && tb == tlb, "step %d: pool %d %d, alone %d %d", i, ta, tb, tla, tlb);
  }
  CHECK(mlxrt_session_position(a) == 14 && mlxrt_session_position(b) == 17);
  mlxrt_memory mem;
  CHECKF(mlxrt_session_memory(a, &mem, &err) == 0, "%s", err.msg);

  mlxrt_spec_options so = {MLXRT_SPEC_LOOKUP, 0, 0, NULL};
  CHECK(mlxrt_spec_check(a, &so, &err) != 0);
  CHECK_MSG(err, "step pool");

  mlxrt_generate_options o;
  mlxrt_generate_options_default(&o);
  o.gen.max_tokens = 10;
  o.gen.temperature = 0.0f;
  volatile int cancel = 1;
  o.cancel = &cancel;
  mlxrt_gen_stats st;
  CHECK(mlxrt_session_generate(a, pa, 6, &o, NULL, NULL, &st, &err) == 0);
  CHECK(st.stopped_by == 2 && st.gen_tokens == 0);
  cancel = 0;
  CHECK(mlxrt_session_generate(a, pa, 6, &o, cancel_after, (void *)&cancel, &st, &err) == 0);
  CHECKF(st.stopped_by == 2 && st.gen_tokens == 1, "stopped by %d after %lld tokens", st.stopped_by,
         (long long)st.gen_tokens);
  int32_t longp[64] = {0};
  CHECK(mlxrt_session_generate(a, longp, 64, &o, NULL, NULL, &st, &err) != 0);
  CHECK_MSG(err, "context");
  o.cancel = NULL;
  CHECK(mlxrt_session_generate(a, pa, 6, &o, NULL, NULL, &st, &err) == 0);
  CHECK(st.gen_tokens == 10);
out:
  mlxrt_session_free(la);
  mlxrt_session_free(lb);
  mlxrt_session_free(a);
  mlxrt_session_free(b);
  mlxrt_session *c = mlxrt_pool_session_new(pool, &err); /* freed sessions free their slots */
  CHECKF(c != NULL, "%s", err.msg);
  mlxrt_session_free(c);
  mlxrt_pool_free(pool);
}

/* ---- one sequence's overflow stays its own ---------------------------------------------------- */
/* The fixture's model.safetensors in dir, replaced by a copy whose embedding row 300 is the
 * largest bf16 in its first element (as tests/cli_nonfinite.sh does): feeding token 300 makes
 * that step's logits NaN. */
static int poison_row_300(const char *dir, const char *fixture) {
  char src[1024], dst[1024];
  snprintf(src, sizeof src, "%s/model.safetensors", fixture);
  snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
  size_t n = 0;
  char *b = mx_read_file(src, &n, NULL);
  if (!b || n < 8) return -1;
  uint64_t hl = 0;
  memcpy(&hl, b, 8);
  cJSON *h = hl < n ? cJSON_ParseWithLength(b + 8, (size_t)hl) : NULL;
  const cJSON *e = cJSON_GetObjectItem(h, "model.embed_tokens.weight");
  const cJSON *off = cJSON_GetArrayItem(cJSON_GetObjectItem(e, "data_offsets"), 0);
  const cJSON *cols = cJSON_GetArrayItem(cJSON_GetObjectItem(e, "shape"), 1);
  int rc = -1;
  if (off && cols) {
    const size_t at = 8 + hl + (size_t)off->valuedouble + 2 * (300 * (size_t)cols->valuedouble);
    memset(b + at, 0, 2 * (size_t)cols->valuedouble);
    b[at] = (char)0x7F, b[at + 1] = (char)0x7F; /* little-endian 0x7F7F: 3.39e38 */
    FILE *f = (unlink(dst), fopen(dst, "wb"));
    rc = f && fwrite(b, 1, n, f) == n ? 0 : -1;
    if (f) fclose(f);
  }
  cJSON_Delete(h);
  free(b);
  return rc;
}

typedef struct poisoned {
  mlxrt_session *s;
  pthread_barrier_t *start;
  int steps, poison_at; /* poison_at < 0: never */
  int32_t toks[24];
  int rc_at;            /* the step that failed, or -1 */
  char msg[1024];
} poisoned;

static void *poisoned_run(void *arg) {
  poisoned *j = arg;
  mlxrt_error err = {{0}};
  j->rc_at = -1;
  if (j->start) pthread_barrier_wait(j->start);
  for (int i = 0; i < j->steps; i++) { /* scripted input (the greedy choice may be 300 itself) */
    int32_t t = i == j->poison_at ? 300 : 20 + i;
    if (mlxrt_session_step_greedy(j->s, t, &t, &err)) {
      j->rc_at = i;
      snprintf(j->msg, sizeof j->msg, "%s", err.msg);
      break;
    }
    j->toks[i] = t;
  }
  return NULL;
}

/* Two sequences stepping together; one feeds the overflowing token at its sixth step: that
 * sequence fails with the non-finite message, the other goes on with the tokens it has alone. */
static void test_poisoned(void) {
  char dir[256] = "/tmp/mlxrt_poison_XXXXXX";
  mlxrt_error err = {{0}};
  const char *fixture = FIXTURES "gemma4-dense-bf16";
  if (make_model_dir(dir, fixture, TOKENIZER) || poison_row_300(dir, fixture)) {
    CHECKF(0, "cannot make the poisoned model folder");
    return;
  }
  mlxrt_options o = {"cpu", 2, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &o, &err);
  CHECKF(m != NULL, "%s", err.msg);
  mlxrt_pool *pool = m ? mlxrt_pool_new(m, 2, 64, &err) : NULL;
  CHECKF(!m || pool, "%s", err.msg);
  if (pool) {
    int32_t p[4] = {11, 12, 13, 14};
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    poisoned a = {mlxrt_pool_session_new(pool, &err), &start, 12, 5, {0}, 0, ""};
    poisoned b = {mlxrt_pool_session_new(pool, &err), &start, 20, -1, {0}, 0, ""};
    poisoned alone = {mlxrt_session_new(m, 64, &err), NULL, 20, -1, {0}, 0, ""};
    CHECK(a.s && b.s && alone.s);
    if (a.s && b.s && alone.s && !mlxrt_session_feed(a.s, p, 4, NULL, 0, &err) &&
        !mlxrt_session_feed(b.s, p, 4, NULL, 0, &err) && !mlxrt_session_feed(alone.s, p, 4, NULL, 0, &err)) {
      pthread_t ta, tb;
      pthread_create(&ta, NULL, poisoned_run, &a);
      pthread_create(&tb, NULL, poisoned_run, &b);
      pthread_join(ta, NULL);
      pthread_join(tb, NULL);
      poisoned_run(&alone);
      CHECKF(a.rc_at == 5 && strstr(a.msg, "not finite"), "the poisoned sequence failed at step %d: %s", a.rc_at,
             a.msg);
      CHECKF(b.rc_at == -1, "the other sequence failed at step %d: %s", b.rc_at, b.msg);
      CHECK(alone.rc_at == -1 && !memcmp(b.toks, alone.toks, sizeof b.toks));
    }
    pthread_barrier_destroy(&start);
    mlxrt_session_free(a.s);
    mlxrt_session_free(b.s);
    mlxrt_session_free(alone.s);
    mlxrt_pool_free(pool);
  }
  mlxrt_model_free(m);
  remove_model_dir(dir);
}

/* a dense Gemma 4 (sliding window 12: the follow-ups rewind its rings), a MoE one, one with
 * per-layer embeddings and KV sharing */
static const char *const MODELS[] = {"gemma4-dense-nvfp4", "gemma4-moe-affine4-g64", "gemma4-e2b-affine4-g64"};

int main(void) {
  for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0]; k++) {
    char dir[256] = "/tmp/mlxrt_pool_XXXXXX", src[1024];
    mlxrt_error err = {{0}};
    snprintf(src, sizeof src, "%s%s", FIXTURES, MODELS[k]);
    if (make_model_dir(dir, src, TOKENIZER)) {
      fprintf(stderr, "cannot make the model folder\n");
      return 1;
    }
    mlxrt_options o = {"cpu", 2, 0, NULL, NULL};
    mlxrt_model *m = mlxrt_model_load(dir, &o, &err);
    CHECKF(m != NULL, "%s: %s", MODELS[k], err.msg);
    if (m) {
      printf("%s\n", MODELS[k]);
      mlxrt_model_info info;
      mlxrt_model_get_info(m, &info);
      CHECK(info.batched_steps == 1); /* the CPU backend reads each weight once per batched step */
      test_threads(m);
      if (k == 0) test_one_thread(m);
    }
    mlxrt_model_free(m);
    remove_model_dir(dir);
  }
  test_poisoned();
  { /* the decoder a pool runs does not emulate MLX's CPU arithmetic: refused, not approximated */
    char dir[256] = "/tmp/mlxrt_pool_XXXXXX";
    mlxrt_error err = {{0}};
    if (!make_model_dir(dir, FIXTURES "gemma4-dense-bf16", TOKENIZER)) {
      mlxrt_options o = {"cpu", 1, 0, "mlx-cpu", NULL};
      mlxrt_model *m = mlxrt_model_load(dir, &o, &err);
      CHECKF(m != NULL, "%s", err.msg);
      if (m) {
        mlxrt_model_info info;
        mlxrt_model_get_info(m, &info);
        CHECK(info.batched_steps == 0);
        CHECK(mlxrt_pool_new(m, 2, 64, &err) == NULL);
        CHECK_MSG(err, "mlx-cpu");
        CHECK(mlxrt_batch_new(m, 2, 64, &err) == NULL);
        CHECK_MSG(err, "mlx-cpu");
      }
      mlxrt_model_free(m);
      remove_model_dir(dir);
    }
  }
  TEST_END();
}
