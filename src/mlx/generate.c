/* Generation and chat: chat template → tokens → the longest cached prefix is kept, the rest is
 * processed as one batched prompt → sample, stream, stop. The conversation keeps the exact
 * token ids in the cache, so a new turn processes only its own tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel_sample.h"
#include "base/error.h"
#include "mlx/chat_render.h"
#include "mlx/chat_template.h"
#include "mlx/gen_config.h"
#include "mlx/model.h"
#include "mlx/sampler.h"
#include "mlx/session.h"
#include "mlx/tokenizer.h"
#include "mlxrt.h"

const mx_model *mlxrt_model_internal(const mlxrt_model *M);

struct mlxrt_chat {
  mlxrt_model *M;
  const mx_model *m;
  accel_backend *b;
  mx_session *s;
  mx_tokenizer *tok;
  mx_sampler *sampler;
  mx_gen_config gen;
  mlxrt_chat_options opt;
  char *system;
  char *chat_template; /* the caller's template override, copied */
  mx_chat_msg *msgs;  /* conversation so far (owned strings) */
  size_t nmsgs, cap_msgs;
  int32_t *cached;    /* token ids in the session's cache, in order */
  size_t ncached, cap_cached;
  float *logits;
  int end_of_turn_id; /* the template's turn terminator, a stop token in chat mode */
};

accel_backend *mlxrt_model_backend_internal(const mlxrt_model *M);

void mlxrt_gen_params_default(mlxrt_gen_params *p) {
  memset(p, 0, sizeof *p);
  p->temperature = -1;
  p->top_k = -1;
  p->top_p = -1;
  p->min_p = -1;
  p->repetition_penalty = -1;
  p->repetition_window = -1;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int push_cached(mlxrt_chat *c, const int32_t *ids, size_t n, mlxrt_error *err) {
  if (c->ncached + n > c->cap_cached) {
    size_t cap = c->cap_cached ? c->cap_cached * 2 : 1024;
    while (cap < c->ncached + n) cap *= 2;
    int32_t *p = realloc(c->cached, cap * sizeof *p);
    if (!p) return mx_fail(err, "out of memory for the token history");
    c->cached = p;
    c->cap_cached = cap;
  }
  if (n) memcpy(c->cached + c->ncached, ids, n * sizeof *ids);
  c->ncached += n;
  return 0;
}

static int push_msg(mlxrt_chat *c, const char *role, const char *content, size_t len, mlxrt_error *err) {
  if (c->nmsgs == c->cap_msgs) {
    size_t cap = c->cap_msgs ? c->cap_msgs * 2 : 16;
    mx_chat_msg *p = realloc(c->msgs, cap * sizeof *p);
    if (!p) return mx_fail(err, "out of memory for the conversation");
    c->msgs = p;
    c->cap_msgs = cap;
  }
  char *text = mx_malloc(len + 1, err);
  if (!text) return -1;
  memcpy(text, content, len);
  text[len] = 0;
  c->msgs[c->nmsgs].role = role;
  c->msgs[c->nmsgs].content = text;
  c->nmsgs++;
  return 0;
}

static void clear_msgs(mlxrt_chat *c) {
  for (size_t i = 0; i < c->nmsgs; i++) free((char *)c->msgs[i].content);
  c->nmsgs = 0;
}

void mlxrt_chat_reset(mlxrt_chat *c) {
  clear_msgs(c);
  c->ncached = 0;
  mx_session_rewind(c->s, 0);
  mx_sampler_reset(c->sampler);
  if (c->system) push_msg(c, "system", c->system, strlen(c->system), NULL);
}

void mlxrt_chat_free(mlxrt_chat *c) {
  if (!c) return;
  clear_msgs(c);
  free(c->msgs);
  free(c->cached);
  free(c->logits);
  free(c->system);
  free(c->chat_template);
  mx_sampler_free(c->sampler);
  mx_session_free(c->s);
  free(c);
}

mlxrt_chat *mlxrt_chat_new(mlxrt_model *M, const mlxrt_chat_options *opt, mlxrt_error *err) {
  mlxrt_chat *c = mx_calloc(1, sizeof *c, err);
  if (!c) return NULL;
  c->M = M;
  c->m = mlxrt_model_internal(M);
  c->b = mlxrt_model_backend_internal(M);
  if (opt) c->opt = *opt;
  else {
    c->opt.use_template = 1;
    mlxrt_gen_params_default(&c->opt.gen);
  }
  const char *dir = c->m->path;
  /* the model's tokenizer, checked against its vocabulary when the model was loaded */
  if (!(c->tok = c->m->tok)) {
    mx_fail(err, "%s: no tokenizer.json: a chat needs the model's tokenizer", dir);
    goto fail;
  }
  if (mx_gen_config_load(dir, &c->gen, err)) goto fail;
  /* stop tokens: the model's eos ids, plus the turn terminator in chat mode */
  const char *eot = c->m->cfg.family == MX_GEMMA4 ? "<turn|>" : "<end_of_turn>";
  c->end_of_turn_id = mx_tok_token_to_id(c->tok, eot, strlen(eot));
  if (c->opt.use_template && c->end_of_turn_id >= 0 && mx_gen_config_add_eos(&c->gen, c->end_of_turn_id, err))
    goto fail;

  mx_sampler_params sp;
  mx_sampler_params_default(&sp);
  mx_gen_config_apply_sampling(&c->gen, &sp);
  mx_gen_params_apply_sampling(&c->opt.gen, &sp);
  if (!(c->sampler = mx_sampler_create(&sp, c->m->cfg.vocab_size, err))) goto fail;
  if (!(c->s = mx_session_create(c->m, c->b, c->opt.capacity, 0, err))) goto fail;
  if (!(c->logits = mx_malloc((size_t)c->m->cfg.vocab_size * sizeof(float), err))) goto fail;
  if (c->opt.system && !(c->system = mx_strdup(c->opt.system, err))) goto fail;
  if (c->opt.chat_template && !(c->chat_template = mx_strdup(c->opt.chat_template, err))) goto fail;
  mlxrt_chat_reset(c);
  return c;
fail:
  mlxrt_chat_free(c);
  return NULL;
}

int mlxrt_chat_tokenize(mlxrt_chat *c, const char *text, int add_special, int32_t **ids,
                        size_t *n, mlxrt_error *err) {
  return mx_tok_encode(c->tok, text, strlen(text), add_special, ids, n, err);
}

/* ---- streaming the answer ------------------------------------------------------------------ */
typedef struct {
  mlxrt_text_fn fn;
  void *user;
  char *answer; /* what goes into the history */
  size_t len, cap;
} sink_ctx;

static void keep(sink_ctx *k, const char *t, size_t n) {
  if (k->len + n + 1 > k->cap) {
    size_t cap = (k->cap + n + 1) * 2;
    char *p = realloc(k->answer, cap);
    if (!p) return;
    k->answer = p;
    k->cap = cap;
  }
  memcpy(k->answer + k->len, t, n);
  k->len += n;
  k->answer[k->len] = 0;
}

static void sink(void *user, int is_thought, const char *text, size_t len) {
  sink_ctx *k = user;
  if (!is_thought) keep(k, text, len);
  if (k->fn && len) k->fn(k->user, text, len);
}

/* The next token from logits on the host (of the token at position pos): a non-finite row fails
 * on both paths with the decoders' message (accel_sample.h, step 0). */
static int choose(mx_sampler *smp, const float *x, int n, int64_t pos, mlxrt_error *err) {
  const int bad = accel_logits_first_nonfinite(x, n);
  if (bad >= 0) return accel_fail_nonfinite(err, pos, bad);
  if (mx_sampler_get_params(smp)->temperature != 0) return mx_sampler_sample(smp, x, err);
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

int mlxrt_chat_turn(mlxrt_chat *c, const char *user_text, mlxrt_text_fn fn, void *user,
                    mlxrt_gen_stats *st, mlxrt_error *err) {
  mlxrt_gen_stats local;
  if (!st) st = &local;
  memset(st, 0, sizeof *st);
  const mx_config *cfg = &c->m->cfg;
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = -1;
  size_t nmsgs_before = c->nmsgs;
  sink_ctx k = {fn, user, NULL, 0, 0};

  /* 1. the tokens the whole conversation should have in the cache */
  if (c->opt.use_template) {
    if (push_msg(c, "user", user_text, strlen(user_text), err)) return -1;
    char *text = mx_render_chat_msgs(c->m, c->msgs, c->nmsgs, 1, c->opt.enable_thinking,
                                     c->chat_template, err);
    if (!text) goto out;
    int e = mx_tok_encode(c->tok, text, strlen(text), 0, &ids, &n, err);
    free(text);
    if (e) goto out;
  } else {
    /* raw completion: the text continues what is cached */
    int32_t *more = NULL;
    size_t nm = 0;
    if (mx_tok_encode(c->tok, user_text, strlen(user_text), c->ncached == 0, &more, &nm, err)) goto out;
    ids = malloc((c->ncached + nm + 1) * sizeof *ids);
    if (!ids) {
      free(more);
      mx_fail(err, "out of memory");
      goto out;
    }
    if (c->ncached) memcpy(ids, c->cached, c->ncached * sizeof *ids);
    if (nm) memcpy(ids + c->ncached, more, nm * sizeof *ids);
    n = c->ncached + nm;
    free(more);
  }
  if (n == 0) {
    mx_fail(err, "the prompt is empty");
    goto out;
  }
  if ((int64_t)n >= mx_session_capacity(c->s)) {
    mx_fail(err, "the prompt has %zu tokens, more than the context of %lld", n,
            (long long)mx_session_capacity(c->s));
    goto out;
  }

  /* 2. keep the longest common prefix that is still in the cache, process the rest */
  size_t common = 0;
  while (common < n && common < c->ncached && ids[common] == c->cached[common]) common++;
  if (common == n) common = n - 1; /* the last token must be fed to get logits */
  if ((size_t)mx_session_pos(c->s) != common) {
    int64_t at = mx_session_rewind(c->s, (int64_t)common);
    common = (size_t)at;
  }
  c->ncached = common;
  for (size_t i = 0; i < common; i++) mx_sampler_accept(c->sampler, ids[i]);
  st->prompt_tokens = (int64_t)n;
  st->prompt_processed = (int64_t)(n - common);
  double t0 = now_s();
  if (mx_session_feed(c->s, ids + common, (int64_t)(n - common), c->logits, 0, err)) goto out;
  if (push_cached(c, ids + common, n - common, err)) goto out;
  for (size_t i = common; i < n; i++) mx_sampler_accept(c->sampler, ids[i]);
  st->prompt_seconds = now_s() - t0;

  /* 3. sample, stream, stop */
  mx_tok_stream ts;
  mx_thought_stream th;
  int gemma4 = cfg->family == MX_GEMMA4;
  mx_tok_stream_init(&ts, c->tok, !gemma4);
  mx_thought_stream_init(&th, c->opt.show_thinking);
  int max = c->opt.gen.max_tokens;
  /* on a decoder session each step samples inside the decoder (only the id comes back) */
  const int on_device = mx_session_uses_decoder(c->s);
  int32_t next = -1;
  double t1 = now_s();
  st->stopped_by = 1;
  for (int i = 0; max <= 0 || i < max; i++) {
    if (c->opt.interrupt && *c->opt.interrupt) {
      st->stopped_by = 2;
      break;
    }
    int tok = next >= 0 ? next : choose(c->sampler, c->logits, cfg->vocab_size, mx_session_pos(c->s) - 1, err);
    if (tok < 0) goto out_stream;
    if (mx_gen_config_is_eos(&c->gen, tok)) {
      st->stopped_by = 0;
      break;
    }
    mx_sampler_accept(c->sampler, tok);
    st->gen_tokens++;
    const char *piece;
    size_t plen;
    if (mx_tok_stream_put(&ts, tok, &piece, &plen, err)) goto out_stream;
    if (plen) {
      if (gemma4) mx_thought_stream_feed(&th, piece, plen, sink, &k);
      else sink(&k, 0, piece, plen);
    }
    if (mx_session_pos(c->s) + 1 >= mx_session_capacity(c->s)) {
      st->stopped_by = 3;
      break;
    }
    int32_t t32 = tok;
    if (on_device ? mx_session_step_sample(c->s, t32, c->sampler, &next, err)
                  : mx_session_feed(c->s, &t32, 1, c->logits, 0, err))
      goto out_stream;
    if (push_cached(c, &t32, 1, err)) goto out_stream;
  }
  {
    const char *piece;
    size_t plen;
    if (mx_tok_stream_flush(&ts, &piece, &plen, err) == 0 && plen) {
      if (gemma4) mx_thought_stream_feed(&th, piece, plen, sink, &k);
      else sink(&k, 0, piece, plen);
    }
    if (gemma4) mx_thought_stream_finish(&th, sink, &k);
  }
  st->gen_seconds = now_s() - t1;
  if (c->opt.use_template && push_msg(c, "model", k.answer ? k.answer : "", k.len, err)) goto out_stream;
  rc = 0;
out_stream:
  mx_tok_stream_free(&ts);
out:
  if (rc && c->nmsgs > nmsgs_before) {
    /* a failed turn leaves the conversation as it was */
    for (size_t i = nmsgs_before; i < c->nmsgs; i++) free((char *)c->msgs[i].content);
    c->nmsgs = nmsgs_before;
  }
  free(ids);
  free(k.answer);
  return rc;
}
