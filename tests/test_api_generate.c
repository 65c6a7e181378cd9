/* Generation on a session (mlxrt_session_generate), the token calls, message-list chat and
 * tool-call parsing, on a tiny fixture checkpoint (gemma3-text-bf16: random weights, vocabulary
 * 384, sliding window 8) given a tokenizer: tests/fixtures/tokenizer/small-a.json (345 ids, byte
 * fallback) plus plain added tokens for ids 345..383, written into a temporary model folder.
 * What must hold: reusing a cached prefix gives the tokens a fresh session gives (greedy and
 * seeded sampling) and prompt_processed counts what was processed; the session's ids follow
 * feed/generate/rewind; cancel and the callback end the answer with their stopped_by; logprobs
 * are the log-softmax of the logits mlxrt_session_feed returns; tool calls parse as mlx-lm's
 * parser does (tests/fixtures/tool_calls/gemma4.json, scripts/make_tool_call_fixtures.py). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "mlxrt.h"
#include "test_util.h"
#include "api_checks.h"
#include "model_dir.h"

#define MODEL_DIR MLXRT_SOURCE_DIR "/tests/fixtures/models/gemma3-text-bf16"
#define TOKENIZER MLXRT_SOURCE_DIR "/tests/fixtures/tokenizer/small-a.json"
#define TOOL_CASES MLXRT_SOURCE_DIR "/tests/fixtures/tool_calls/gemma4.json"
#define CAP 4096

/* ---- what a generate call reported ---------------------------------------------------------- */
#define MAXGEN 64
typedef struct run {
  int32_t ids[MAXGEN];
  float lp[MAXGEN];
  int32_t top_ids[MAXGEN][20];
  float top_lp[MAXGEN][20];
  int n_top[MAXGEN];
  int64_t pos[MAXGEN];
  int n, n_stop;
  char text[4096];
  size_t len;
  int stop_after;          /* the callback asks to stop after this many tokens (0: never) */
  volatile int *cancel_at; /* set to 1 after cancel_after tokens */
  int cancel_after;
  int bad_order;           /* a token after a stop token */
  int drop_special;        /* text: leave out the special tokens' */
  int specials_seen, specials_written; /* special tokens, and those whose text ends with their name */
} run;

static int on_token(void *user, const mlxrt_token_info *t) {
  run *r = user;
  if (r->n_stop) r->bad_order = 1;
  if (t->is_stop) {
    r->n_stop++;
    CHECK(t->len == 0);
  }
  if (r->n < MAXGEN) {
    r->ids[r->n] = t->id;
    r->lp[r->n] = t->logprob;
    r->pos[r->n] = t->position;
    r->n_top[r->n] = t->n_top;
    for (int k = 0; k < t->n_top && k < 20; k++) {
      r->top_ids[r->n][k] = t->top_ids[k];
      r->top_lp[r->n][k] = t->top_logprobs[k];
    }
  }
  r->n++;
  const int special = t->id == 0 || (t->id >= 2 && t->id <= 4);
  static const char *const names[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
  if (t->id >= 0 && t->id <= 5 && !t->is_stop) { /* stop ids too when ignore_stop */
    const size_t nl = strlen(names[t->id]);
    r->specials_seen++;
    r->specials_written += t->len >= nl && !memcmp(t->text + t->len - nl, names[t->id], nl);
  }
  if (!(r->drop_special && special) && r->len + t->len < sizeof r->text) {
    memcpy(r->text + r->len, t->text, t->len);
    r->len += t->len;
  }
  if (r->cancel_at && r->n == r->cancel_after) *r->cancel_at = 1;
  return r->stop_after && r->n >= r->stop_after;
}

static mlxrt_generate_options opts(float temp, uint64_t seed, int max) {
  mlxrt_generate_options o;
  mlxrt_generate_options_default(&o);
  o.gen.temperature = temp;
  o.gen.top_k = 40;
  o.gen.seed = seed;
  o.gen.seed_set = 1;
  o.gen.max_tokens = max;
  o.ignore_stop = 1; /* random weights: keep answers their full length */
  return o;
}

static int gen(mlxrt_session *s, const int32_t *p, size_t n, const mlxrt_generate_options *o, run *r,
               mlxrt_gen_stats *st) {
  mlxrt_error err = {{0}};
  int rc = mlxrt_session_generate(s, p, n, o, on_token, r, st, &err);
  CHECKF(rc == 0, "generate: %s", err.msg);
  CHECK(r->specials_seen == r->specials_written && !r->bad_order);
  return rc;
}

static void random_ids(int32_t *v, size_t n, unsigned seed) {
  v[0] = 2;
  for (size_t i = 1; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = 8 + (int32_t)((seed >> 8) % 330u);
  }
}

/* ---- prefix reuse ---------------------------------------------------------------------------- */
static void test_reuse(mlxrt_model *m, float temp) {
  mlxrt_error err = {{0}};
  mlxrt_session *a = mlxrt_session_new(m, CAP, &err), *b = mlxrt_session_new(m, CAP, &err);
  CHECK(a && b);
  if (!a || !b) goto out;
  int32_t p[80];
  random_ids(p, 40, 7);
  mlxrt_gen_stats st;
  run r1 = {0};
  mlxrt_generate_options o = opts(temp, 11, 8);
  gen(a, p, 40, &o, &r1, &st);
  CHECK(st.prompt_tokens == 40 && st.prompt_processed == 40 && st.gen_tokens == 8 && st.stopped_by == 1);
  /* the session holds the prompt and the answer but its last token */
  size_t nt = 0;
  const int32_t *held = mlxrt_session_tokens(a, &nt);
  CHECK(nt == 47 && mlxrt_session_position(a) == 47);
  /* the cache it holds backs those positions; a host backend reports no device memory */
  mlxrt_memory mem;
  CHECK(!mlxrt_session_memory(a, &mem, &err) && mem.kv_bytes > 0 && mem.kv_positions >= 47 &&
        mem.kv_positions <= CAP && mem.device_used == 0 && mem.device_total == 0);
  /* the bytes a step reads: the host decoders keep K and V in bf16, the model's count */
  CHECK(mlxrt_session_kv_read_bytes(a, 46) == mlxrt_model_kv_bytes_per_token(m, 46) &&
        mlxrt_session_kv_read_bytes(a, 46) > mlxrt_session_kv_read_bytes(a, 10) && mlxrt_session_kv_read_bytes(a, 0) > 0);
  CHECK(nt == 47 && !memcmp(held, p, 40 * sizeof *p) && !memcmp(held + 40, r1.ids, 7 * sizeof *p));
  for (int i = 0; i < 8; i++) CHECK(r1.pos[i] == 40 + i);

  /* 1. the conversation grows: prompt + answer + more reuses all that is held */
  memcpy(p + 40, r1.ids, 8 * sizeof *p);
  random_ids(p + 48, 10, 99);
  p[48] = 17;
  run ra = {0}, rb = {0};
  gen(a, p, 58, &o, &ra, &st);
  CHECK(st.prompt_tokens == 58 && st.prompt_processed == 58 - 47);
  gen(b, p, 58, &o, &rb, &st);
  CHECK(st.prompt_processed == 58);
  CHECK(ra.n == 8 && rb.n == 8 && !memcmp(ra.ids, rb.ids, sizeof ra.ids));

  /* 2. the same prompt again: its last token is processed again (the rings of the sliding
   * layers keep 32 positions beyond the window of 8, so going 8 back keeps the cache) */
  run rc = {0};
  gen(a, p, 58, &o, &rc, &st);
  CHECK(st.prompt_processed == 1);
  CHECK(!memcmp(rc.ids, rb.ids, sizeof rc.ids));

  /* 3. a short history is rewound in place: prompt[0..4) kept */
  mlxrt_session_reset(a);
  int32_t q[8];
  random_ids(q, 6, 5);
  mlxrt_generate_options one = opts(temp, 11, 1);
  run rq = {0};
  gen(a, q, 6, &one, &rq, &st);
  CHECK(mlxrt_session_position(a) == 6);
  q[4] = 300, q[5] = 301, q[6] = 302;
  run r3a = {0}, r3b = {0};
  gen(a, q, 7, &o, &r3a, &st);
  CHECK(st.prompt_processed == 3);
  mlxrt_session_reset(b);
  gen(b, q, 7, &o, &r3b, &st);
  CHECK(st.prompt_processed == 7);
  CHECK(!memcmp(r3a.ids, r3b.ids, sizeof r3a.ids));
  /* 4. the same prompt, history within the window: only its last token */
  run r4 = {0};
  mlxrt_session_reset(a);
  CHECK(mlxrt_session_feed(a, q, 7, NULL, 0, &err) == 0);
  gen(a, q, 7, &o, &r4, &st);
  CHECK(st.prompt_processed == 1);
  CHECK(!memcmp(r4.ids, r3b.ids, sizeof r4.ids));
out:
  mlxrt_session_free(a);
  mlxrt_session_free(b);
}

/* ---- the session's ids and rewind ------------------------------------------------------------- */
static void test_tokens_rewind(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(m, CAP, &err);
  CHECK(s != NULL);
  if (!s) return;
  int32_t p[20];
  random_ids(p, 20, 3);
  size_t n = 99;
  mlxrt_session_tokens(s, &n);
  CHECK(n == 0);
  CHECK(mlxrt_session_feed(s, p, 6, NULL, 0, &err) == 0);
  const int32_t *t = mlxrt_session_tokens(s, &n);
  CHECK(n == 6 && !memcmp(t, p, 6 * sizeof *p));
  int32_t next = -1;
  CHECK(mlxrt_session_step_greedy(s, p[6], &next, &err) == 0);
  t = mlxrt_session_tokens(s, &n);
  CHECK(n == 7 && t[6] == p[6]);
  CHECK(mlxrt_session_rewind(s, 8) == -1);
  CHECK(mlxrt_session_rewind(s, -1) == -1);
  CHECK(mlxrt_session_rewind(s, 7) == 7);
  CHECK(mlxrt_session_rewind(s, 3) == 3);
  t = mlxrt_session_tokens(s, &n);
  CHECK(n == 3 && mlxrt_session_position(s) == 3 && !memcmp(t, p, 3 * sizeof *p));
  CHECK(mlxrt_session_feed(s, p + 3, 17, NULL, 0, &err) == 0);
  t = mlxrt_session_tokens(s, &n);
  CHECK(n == 20 && !memcmp(t, p, 20 * sizeof *p));
  /* within the 32 positions a sliding ring keeps beyond its window (8) it goes back */
  CHECK(mlxrt_session_rewind(s, 15) == 15);
  CHECK(mlxrt_session_feed(s, p + 15, 5, NULL, 0, &err) == 0);
  /* further back than 33 positions from the furthest one written, after the ring (40) wrapped,
   * it cannot: rewinding starts over */
  int32_t more[40];
  random_ids(more, 40, 4);
  CHECK(mlxrt_session_feed(s, more, 40, NULL, 0, &err) == 0);
  CHECK(mlxrt_session_rewind(s, 60 - 33) == 60 - 33);
  CHECK(mlxrt_session_rewind(s, 26) == 0);
  mlxrt_session_tokens(s, &n);
  CHECK(n == 0);
  /* a failed feed keeps the ids in step with the position */
  int32_t badp[3] = {5, 6, 9999};
  CHECK(mlxrt_session_feed(s, badp, 3, NULL, 0, &err) == -1);
  mlxrt_session_tokens(s, &n);
  CHECK((int64_t)n == mlxrt_session_position(s));
  mlxrt_session_free(s);
}

/* ---- cancel and the callback's stop --------------------------------------------------------- */
typedef struct canceller {
  volatile int *flag;
  int ms;
} canceller;

static void *cancel_later(void *arg) {
  canceller *c = arg;
  struct timespec t = {0, (long)c->ms * 1000000L};
  nanosleep(&t, NULL);
  *c->flag = 1;
  return NULL;
}

static void test_cancel(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(m, CAP, &err);
  CHECK(s != NULL);
  if (!s) return;
  enum { LONG = 3500 };
  int32_t *p = malloc(LONG * sizeof *p);
  random_ids(p, LONG, 21);
  mlxrt_gen_stats st;
  volatile int flag = 1;
  mlxrt_generate_options o = opts(0, 1, 8);
  o.cancel = &flag;
  /* already set: nothing is processed, nothing generated */
  run r0 = {0};
  gen(s, p, LONG, &o, &r0, &st);
  CHECK(st.stopped_by == 2 && r0.n == 0 && mlxrt_session_position(s) == 0);
  /* set by a second thread during the prompt: the call returns at a batch boundary (512) */
  flag = 0;
  canceller c = {&flag, 5};
  pthread_t th;
  pthread_create(&th, NULL, cancel_later, &c);
  run r1 = {0};
  gen(s, p, LONG, &o, &r1, &st);
  pthread_join(th, NULL);
  const int64_t pos = mlxrt_session_position(s);
  CHECKF(st.stopped_by == 2, "stopped_by %d", st.stopped_by);
  CHECKF(pos == LONG + r1.n - 1 || (pos % 512 == 0 && r1.n == 0), "position %lld after cancel", (long long)pos);
  size_t n = 0;
  const int32_t *t = mlxrt_session_tokens(s, &n);
  CHECK((int64_t)n == pos && !memcmp(t, p, (size_t)(pos < LONG ? pos : LONG) * sizeof *p));
  /* set from the token callback: the answer ends after that token */
  flag = 0;
  run r2 = {0};
  r2.cancel_at = &flag;
  r2.cancel_after = 2;
  gen(s, p, 30, &o, &r2, &st);
  CHECK(st.stopped_by == 2 && r2.n == 2 && st.gen_tokens == 2);
  /* the callback asks */
  o.cancel = NULL;
  run r3 = {0};
  r3.stop_after = 3;
  gen(s, p, 30, &o, &r3, &st);
  CHECK(st.stopped_by == 4 && r3.n == 3 && st.gen_tokens == 3);
  /* max_tokens and a full context */
  mlxrt_session *small = mlxrt_session_new(m, 34, &err);
  run r4 = {0};
  o.gen.max_tokens = 0;
  if (small) gen(small, p, 30, &o, &r4, &st);
  CHECK(small && st.stopped_by == 3 && r4.n == 4);
  mlxrt_session_free(small);
  free(p);
  mlxrt_session_free(s);
}

/* ---- logprobs -------------------------------------------------------------------------------- */
static void test_logprobs(mlxrt_model *m, float temp) {
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(m, CAP, &err), *ref = mlxrt_session_new(m, CAP, &err);
  const int V = mlxrt_model_vocab_size(m);
  float *logits = malloc((size_t)V * sizeof *logits);
  CHECK(s && ref && logits);
  if (!s || !ref || !logits) goto out;
  int32_t p[24];
  random_ids(p, 24, 8);
  mlxrt_generate_options o = opts(temp, 5, 10);
  o.top_logprobs = 5;
  mlxrt_gen_stats st;
  run r = {0};
  gen(s, p, 24, &o, &r, &st);
  CHECK(r.n == 10);
  /* the same tokens without logprobs (the sampler's stream is the same) */
  run plain = {0};
  mlxrt_generate_options o2 = o;
  o2.top_logprobs = 0;
  mlxrt_session_reset(s);
  gen(s, p, 24, &o2, &plain, &st);
  CHECK(!memcmp(plain.ids, r.ids, sizeof r.ids));
  CHECK(isnan(plain.lp[0]) && plain.n_top[0] == 0);
  /* log-softmax computed here from the logits mlxrt_session_feed returns */
  int ok = mlxrt_session_feed(ref, p, 24, logits, 0, &err) == 0;
  for (int i = 0; ok && i < r.n && i < MAXGEN; i++) {
    double mx = logits[0], sum = 0;
    for (int v = 1; v < V; v++)
      if (logits[v] > mx) mx = logits[v];
    for (int v = 0; v < V; v++) sum += exp((double)logits[v] - mx);
    const double want = (double)logits[r.ids[i]] - mx - log(sum);
    CHECKF(isfinite(r.lp[i]) && r.lp[i] <= 0.0f, "token %d logprob %g", i, r.lp[i]);
    CHECKF(fabs(r.lp[i] - want) < 1e-4, "token %d logprob %g, expected %g", i, r.lp[i], want);
    CHECK(r.n_top[i] == 5);
    for (int k = 0; k < 5; k++) {
      const double wk = (double)logits[r.top_ids[i][k]] - mx - log(sum);
      CHECK(fabs(r.top_lp[i][k] - wk) < 1e-4);
      if (k) CHECK(r.top_lp[i][k] <= r.top_lp[i][k - 1]);
      int above = 0; /* the k-th best: exactly k tokens are more probable */
      for (int v = 0; v < V; v++) above += logits[v] > logits[r.top_ids[i][k]];
      CHECK(above <= k);
    }
    if (temp == 0) CHECK(r.ids[i] == r.top_ids[i][0]);
    CHECK(r.lp[i] <= r.top_lp[i][0]);
    ok = mlxrt_session_feed(ref, &r.ids[i], 1, logits, 0, &err) == 0;
  }
  CHECKF(ok, "%s", err.msg);
  mlxrt_generate_options bad = o;
  bad.top_logprobs = 21;
  CHECK(mlxrt_session_generate(s, p, 24, &bad, NULL, NULL, NULL, &err) == -1);
  CHECK_MSG(err, "top_logprobs");
out:
  free(logits);
  mlxrt_session_free(s);
  mlxrt_session_free(ref);
}

/* The decoder's device-side sampling and the host path give the same greedy tokens. */
static void test_decoder_path(const char *dir) {
  mlxrt_error err = {{0}};
  setenv("MLXRT_DECODER", "1", 1);
  mlxrt_options opt = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  mlxrt_session *s = m ? mlxrt_session_new(m, CAP, &err) : NULL;
  CHECKF(s != NULL, "%s", err.msg);
  if (s) {
    int32_t p[16];
    random_ids(p, 16, 4);
    mlxrt_generate_options o = opts(0, 1, 12);
    run dev = {0}, host = {0};
    mlxrt_gen_stats st;
    gen(s, p, 16, &o, &dev, &st);
    o.logprobs = 1;
    gen(s, p, 16, &o, &host, &st);
    CHECK(dev.n == 12 && !memcmp(dev.ids, host.ids, sizeof dev.ids));
  }
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  unsetenv("MLXRT_DECODER");
}

/* ---- tokens and text -------------------------------------------------------------------------- */
static void test_tokens(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  static const char *samples[] = {"hello world", "", "  two  spaces\n\nand lines\t", "héllo wörld 世界 😀",
                                  "<start_of_turn>user\nhi<end_of_turn>\n", "a<bos>b"};
  check_roundtrip(m, samples, sizeof samples / sizeof samples[0]);
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK(mlxrt_tokenize(m, "hi", 2, 1, &ids, &n, &err) == 0 && n >= 2 && ids[0] == 2);
  char *t = mlxrt_detokenize(m, ids, n, 1, NULL, &err);
  CHECK(t && !strcmp(t, "hi"));
  mlxrt_free(t);
  mlxrt_free(ids);
  int32_t bad = 500;
  CHECK(mlxrt_detokenize(m, &bad, 1, 0, NULL, &err) == NULL);
  /* eos (config.json: 1) and the turn terminator (<end_of_turn> = 5) stop; others do not */
  CHECK(mlxrt_token_is_stop(m, 1) && mlxrt_token_is_stop(m, 5));
  CHECK(!mlxrt_token_is_stop(m, 2) && !mlxrt_token_is_stop(m, 100) && !mlxrt_token_is_stop(m, -1));

  /* stop tokens end the answer, come last, with no text; special tokens are written out */
  mlxrt_session *s = mlxrt_session_new(m, CAP, &err);
  int stopped = 0, specials = 0;
  for (unsigned seed = 0; s && seed < 40; seed++) {
    int32_t p[12];
    random_ids(p, 12, seed);
    mlxrt_generate_options o = opts(1.0f, seed, 40);
    o.ignore_stop = 0;
    run r = {0};
    mlxrt_gen_stats st;
    gen(s, p, 12, &o, &r, &st);
    CHECK(!r.bad_order);
    CHECK(r.specials_seen == r.specials_written);
    specials += r.specials_seen;
    if (r.n_stop) {
      stopped++;
      CHECK(st.stopped_by == 0 && mlxrt_token_is_stop(m, r.ids[r.n - 1]) && st.gen_tokens == r.n - 1);
    }
  }
  CHECK(stopped > 0 && specials > 0);
  /* errors */
  mlxrt_gen_stats st;
  CHECK(s && mlxrt_session_generate(s, NULL, 0, NULL, NULL, NULL, &st, &err) == -1);
  CHECK_MSG(err, "empty");
  int32_t oob[2] = {2, 4000};
  CHECK(s && mlxrt_session_generate(s, oob, 2, NULL, NULL, NULL, &st, &err) == -1);
  CHECK_MSG(err, "outside the vocabulary");
  mlxrt_session_free(s);
}

/* ---- chat: message lists and prefill --------------------------------------------------------- */
typedef struct text_acc {
  char s[4096];
  size_t n;
} text_acc;

static void on_text(void *user, const char *t, size_t n) {
  text_acc *a = user;
  if (a->n + n < sizeof a->s) {
    memcpy(a->s + a->n, t, n);
    a->n += n;
  }
}

static void test_messages(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  mlxrt_chat_options co = {0};
  co.use_template = 1;
  mlxrt_gen_params_default(&co.gen);
  co.gen.temperature = 0;
  co.gen.max_tokens = 6;
  co.capacity = 512;
  mlxrt_chat *c = mlxrt_chat_new(m, &co, &err);
  CHECKF(c != NULL, "%s", err.msg);
  if (!c) return;
  mlxrt_message msgs[] = {{"user", "hello there"}, {"assistant", "Sure, here"}};
  CHECK(mlxrt_chat_set_messages(c, msgs, 2, &err) == 0);
  text_acc a = {{0}, 0};
  mlxrt_gen_stats st;
  CHECKF(mlxrt_chat_respond(c, on_text, &a, &st, &err) == 0, "%s", err.msg);
  /* the prompt: the conversation before the prefill with the generation prompt, then the
   * prefill verbatim (Gemma 3's template, tests/fixtures/chat/gemma3.json) */
  const char *want = "<bos><start_of_turn>user\nhello there<end_of_turn>\n<start_of_turn>model\nSure, here";
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK(mlxrt_tokenize(m, want, strlen(want), 0, &ids, &n, &err) == 0);
  CHECK(st.prompt_tokens == (int64_t)n);
  /* the answer is what the session call generates from that prompt (greedy), special tokens
   * (<pad> <bos> <unk> <start_of_turn>: ids 0, 2, 3, 4) dropped */
  mlxrt_session *s = mlxrt_session_new(m, 512, &err);
  mlxrt_generate_options o;
  mlxrt_generate_options_default(&o);
  o.gen.temperature = 0;
  o.gen.max_tokens = 6;
  run r = {0};
  r.drop_special = 1;
  gen(s, ids, n, &o, &r, &st);
  CHECKF(a.n == r.len && !memcmp(a.s, r.text, a.n), "answer '%.*s', expected '%.*s'", (int)a.n, a.s, (int)r.len,
         r.text);
  mlxrt_free(ids);
  mlxrt_session_free(s);
  /* the next turn renders prefill + answer as the model's message */
  text_acc b = {{0}, 0};
  CHECKF(mlxrt_chat_turn(c, "thanks", on_text, &b, &st, &err) == 0, "%s", err.msg);
  /* bad input */
  mlxrt_message bad[] = {{"robot", "x"}};
  CHECK(mlxrt_chat_set_messages(c, bad, 1, &err) == -1);
  CHECK_MSG(err, "robot");
  mlxrt_message none[] = {{"user", NULL}};
  CHECK(mlxrt_chat_set_messages(c, none, 1, &err) == -1);
  /* an empty conversation cannot be answered */
  CHECK(mlxrt_chat_set_messages(c, NULL, 0, &err) == 0);
  CHECK(mlxrt_chat_respond(c, on_text, &b, &st, &err) == -1);
  mlxrt_chat_free(c);
}

/* ---- tool calls ------------------------------------------------------------------------------- */
static void test_tool_calls(mlxrt_model *m) {
  char *text = mx_read_file(TOOL_CASES, NULL, NULL);
  cJSON *doc = text ? cJSON_Parse(text) : NULL;
  free(text);
  cJSON *cases = doc ? cJSON_GetObjectItem(doc, "cases") : NULL;
  CHECKF(cJSON_GetArraySize(cases) > 10, "no cases in %s", TOOL_CASES);
  int idx = 0;
  for (cJSON *c = cases ? cases->child : NULL; c; c = c->next, idx++) {
    const char *in = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text"));
    mlxrt_error err = {{0}};
    char *content = NULL;
    char *got = mlxrt_parse_tool_calls(m, in, strlen(in), &content, &err);
    if (cJSON_IsTrue(cJSON_GetObjectItem(c, "error"))) {
      CHECKF(!got && strstr(err.msg, "offset"), "case %d: expected an error, got %s", idx, got ? got : "");
      mlxrt_free(got);
      continue;
    }
    CHECKF(got != NULL, "case %d: %s", idx, err.msg);
    if (!got) continue;
    const char *want_content = cJSON_GetStringValue(cJSON_GetObjectItem(c, "content"));
    CHECKF(content && !strcmp(content, want_content), "case %d: content '%s', expected '%s'", idx,
           content ? content : "", want_content);
    cJSON *arr = cJSON_Parse(got), *want = cJSON_GetObjectItem(c, "calls");
    CHECKF(arr && cJSON_GetArraySize(arr) == cJSON_GetArraySize(want), "case %d: %s", idx, got);
    cJSON *g = arr ? arr->child : NULL, *w = want ? want->child : NULL;
    for (; g && w; g = g->next, w = w->next) {
      cJSON *fn = cJSON_GetObjectItem(g, "function");
      CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(g, "type")), "function"));
      const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(fn, "name"));
      CHECKF(name && !strcmp(name, cJSON_GetStringValue(cJSON_GetObjectItem(w, "name"))), "case %d: name %s", idx,
             name ? name : "(none)");
      const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(fn, "arguments"));
      cJSON *ga = args ? cJSON_Parse(args) : NULL;
      CHECKF(ga && cJSON_Compare(ga, cJSON_GetObjectItem(w, "arguments"), 1), "case %d: arguments %s", idx,
             args ? args : "(none)");
      cJSON_Delete(ga);
    }
    cJSON_Delete(arr);
    mlxrt_free(got);
    mlxrt_free(content);
  }
  cJSON_Delete(doc);
  /* beyond mlx-lm's cases: an unterminated block, a stray closer, bad UTF-8, deep nesting */
  static const char *bad[] = {"x<|tool_call>call:f{a:1}", "x<tool_call|>", "\xff<|tool_call>call:f{}<tool_call|>"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mlxrt_error err = {{0}};
    char *got = mlxrt_parse_tool_calls(m, bad[i], strlen(bad[i]), NULL, &err);
    CHECKF(!got && strstr(err.msg, "offset"), "bad case %zu: %s", i, got ? got : "no error");
    mlxrt_free(got);
  }
  char deep[400] = "<|tool_call>call:f{a:";
  for (int i = 0; i < 100; i++) strcat(deep, "[");
  strcat(deep, "1");
  for (int i = 0; i < 100; i++) strcat(deep, "]");
  strcat(deep, "}<tool_call|>");
  mlxrt_error err = {{0}};
  char *got = mlxrt_parse_tool_calls(m, deep, strlen(deep), NULL, &err);
  CHECK(!got && strstr(err.msg, "deeply"));
  mlxrt_free(got);
}

int main(void) {
  char dir[] = "/tmp/mlxrt_api_generate_XXXXXX";
  unsetenv("MLXRT_DECODER");
  CHECK(make_model_dir(dir, MODEL_DIR, TOKENIZER) == 0);
  mlxrt_error err = {{0}};
  mlxrt_options opt = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  CHECKF(m != NULL, "%s", err.msg);
  if (m) {
    test_tokens(m);
    test_tokens_rewind(m);
    test_reuse(m, 0.0f);
    test_reuse(m, 0.9f);
    test_cancel(m);
    test_logprobs(m, 0.0f);
    test_logprobs(m, 0.8f);
    test_messages(m);
    test_tool_calls(m);
    test_decoder_path(dir);
  }
  mlxrt_model_free(m);
  remove_model_dir(dir);
  TEST_END();
}
