/* Chat: the conversation → chat template → tokens → the generation loop of generate_core.c
 * (the longest cached prefix is kept, the rest processed in batches; sample, stream, stop). The
 * session keeps the exact token ids it holds, so a new turn processes only its own tokens. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "mlx/api_internal.h"
#include "mlx/chat_render.h"
#include "mlx/chat_template.h"
#include "mlx/gen_config.h"
#include "mlx/generate_core.h"
#include "mlx/sampler.h"
#include "mlx/tokenizer.h"
#include "mlxrt.h"

struct mlxrt_chat {
  mlxrt_model *M;
  const mx_model *m;
  mlxrt_session *S;
  const mx_tokenizer *tok;
  mx_sampler *sampler;  /* one random stream for the chat's life */
  mx_gen_config gen;    /* stop ids: the model's eos ids, + the turn terminator in chat mode */
  mlxrt_chat_options opt;
  char *system;
  char *chat_template;  /* the caller's template override, copied */
  mx_chat_msg *msgs;    /* conversation so far (owned contents, static role names) */
  size_t nmsgs, cap_msgs;
  int32_t *hist;        /* raw completion (no template): the ids of the text so far */
  size_t nhist, cap_hist;
};

void mlxrt_gen_params_default(mlxrt_gen_params *p) {
  memset(p, 0, sizeof *p);
  p->temperature = -1;
  p->top_k = -1;
  p->top_p = -1;
  p->min_p = -1;
  p->repetition_penalty = -1;
  p->repetition_window = -1;
}

static int push_ids(int32_t **v, size_t *len, size_t *cap, const int32_t *ids, size_t n, mlxrt_error *err) {
  if (*len + n > *cap) {
    size_t c = *cap ? *cap * 2 : 1024;
    while (c < *len + n) c *= 2;
    int32_t *p = realloc(*v, c * sizeof *p);
    if (!p) return mx_fail(err, "out of memory for the token history");
    *v = p;
    *cap = c;
  }
  if (n) memcpy(*v + *len, ids, n * sizeof *ids);
  *len += n;
  return 0;
}

/* The role names the conversation stores (static, so messages own only their contents). */
static const char *known_role(const char *role) {
  static const char *const roles[] = {"system", "user", "assistant", "tool", "model", "developer"};
  for (size_t i = 0; role && i < sizeof roles / sizeof roles[0]; i++)
    if (!strcmp(role, roles[i])) return roles[i];
  return NULL;
}

static int is_assistant(const char *role) { return !strcmp(role, "assistant") || !strcmp(role, "model"); }

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

static void drop_msgs_from(mlxrt_chat *c, size_t from) {
  for (size_t i = from; i < c->nmsgs; i++) free((char *)c->msgs[i].content);
  c->nmsgs = from;
}

void mlxrt_chat_reset(mlxrt_chat *c) {
  drop_msgs_from(c, 0);
  c->nhist = 0;
  mlxrt_session_reset(c->S);
  mx_sampler_reset(c->sampler);
  if (c->system) push_msg(c, "system", c->system, strlen(c->system), NULL);
}

void mlxrt_chat_free(mlxrt_chat *c) {
  if (!c) return;
  drop_msgs_from(c, 0);
  free(c->msgs);
  free(c->hist);
  free(c->system);
  free(c->chat_template);
  mx_sampler_free(c->sampler);
  mlxrt_session_free(c->S);
  free(c);
}

mlxrt_chat *mlxrt_chat_new(mlxrt_model *M, const mlxrt_chat_options *opt, mlxrt_error *err) {
  mlxrt_chat *c = mx_calloc(1, sizeof *c, err);
  if (!c) return NULL;
  c->M = M;
  c->m = M->m;
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
  if (c->opt.use_template && M->end_of_turn_id >= 0 && mx_gen_config_add_eos(&c->gen, M->end_of_turn_id, err))
    goto fail;

  mx_sampler_params sp;
  mx_sampler_params_default(&sp);
  mx_gen_config_apply_sampling(&c->gen, &sp);
  mx_gen_params_apply_sampling(&c->opt.gen, &sp);
  if (!(c->sampler = mx_sampler_create(&sp, c->m->cfg.vocab_size, err))) goto fail;
  if (!(c->S = mlxrt_session_new(M, c->opt.capacity, err))) goto fail;
  if (mlxrt_spec_check(c->S, &c->opt.spec, err)) goto fail;
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

int mlxrt_chat_set_messages(mlxrt_chat *c, const mlxrt_message *msgs, size_t n, mlxrt_error *err) {
  if (!c->opt.use_template)
    return mx_fail(err, "chat: set_messages needs the chat template (the chat was made with use_template = 0)");
  if (!msgs && n) return mx_fail(err, "chat: messages is NULL but n is %zu", n);
  for (size_t i = 0; i < n; i++) {
    if (!known_role(msgs[i].role))
      return mx_fail(err, "chat: message %zu has role \"%.64s\" (expected system, user, assistant or tool)", i,
                     msgs[i].role ? msgs[i].role : "(null)");
    if (!msgs[i].content) return mx_fail(err, "chat: message %zu (%s) has no content", i, msgs[i].role);
  }
  const size_t before = c->nmsgs;
  for (size_t i = 0; i < n; i++)
    if (push_msg(c, known_role(msgs[i].role), msgs[i].content, strlen(msgs[i].content), err)) {
      drop_msgs_from(c, before);
      return -1;
    }
  /* the new list replaces the old one */
  for (size_t i = 0; i < before; i++) free((char *)c->msgs[i].content);
  memmove(c->msgs, c->msgs + before, n * sizeof *c->msgs);
  c->nmsgs = n;
  return 0;
}

/* ---- the answer --------------------------------------------------------------------------- */
/* The conversation's text for the model (the one place that renders it). */
static char *render(const mlxrt_chat *c, const mx_chat_msg *msgs, size_t n, mlxrt_error *err) {
  return mx_render_chat_msgs(c->m, msgs, n, 1, c->opt.enable_thinking, c->chat_template, err);
}

typedef struct answer_ctx {
  mlxrt_chat *c;
  mlxrt_text_fn fn;
  void *user;
  mx_thought_stream th;
  int gemma4;
  mx_strbuf answer; /* what goes into the history */
  int32_t *ids; /* the generated ids (the stop token excluded) */
  size_t nids, cap_ids;
  int oom;
} answer_ctx;

static void sink(void *user, int is_thought, const char *text, size_t len) {
  answer_ctx *k = user;
  if (!is_thought) mx_strbuf_put(&k->answer, text, len);
  if (k->fn && len) k->fn(k->user, text, len);
}

static void on_text(void *user, const char *text, size_t len) {
  answer_ctx *k = user;
  if (!len) return;
  if (k->gemma4) mx_thought_stream_feed(&k->th, text, len, sink, k);
  else sink(k, 0, text, len);
}

static int on_token(void *user, const mlxrt_token_info *t) {
  answer_ctx *k = user;
  if (t->is_stop) return 0;
  if (push_ids(&k->ids, &k->nids, &k->cap_ids, &t->id, 1, NULL)) k->oom = 1;
  on_text(k, t->text, t->len);
  return 0;
}

/* Generates the answer to the prompt ids, streaming it to fn; the answer's text (thought
 * removed) and ids are left in k. */
static int answer(mlxrt_chat *c, const int32_t *ids, size_t n, answer_ctx *k, mlxrt_gen_stats *st,
                  mlxrt_error *err) {
  k->gemma4 = c->m->cfg.family == MX_GEMMA4;
  mx_thought_stream_init(&k->th, c->opt.show_thinking);
  mx_gen_request r = {ids, n, c->sampler, &c->gen, c->opt.gen.max_tokens, 0, 0, c->opt.interrupt, 0,
                      !k->gemma4, on_token, on_text, k, &c->opt.spec};
  if (mx_generate(c->S, &r, st, err)) return -1;
  if (k->gemma4) mx_thought_stream_finish(&k->th, sink, k);
  if (k->oom || k->answer.oom) return mx_fail(err, "out of memory for the answer");
  return 0;
}

/* Chat mode: renders the conversation (a final assistant message is a prefill: the conversation
 * before it with the generation prompt, then its text verbatim) and answers it. */
static int respond_template(mlxrt_chat *c, mlxrt_text_fn fn, void *user, mlxrt_gen_stats *st, mlxrt_error *err) {
  const int prefill = c->nmsgs > 0 && is_assistant(c->msgs[c->nmsgs - 1].role);
  char *text = render(c, c->msgs, c->nmsgs - (size_t)prefill, err);
  if (!text) return -1;
  if (prefill) {
    const char *p = c->msgs[c->nmsgs - 1].content;
    size_t tl = strlen(text), pl = strlen(p);
    char *t2 = realloc(text, tl + pl + 1);
    if (!t2) {
      free(text);
      return mx_fail(err, "out of memory for the prompt");
    }
    memcpy(t2 + tl, p, pl + 1);
    text = t2;
  }
  int32_t *ids = NULL;
  size_t n = 0;
  int e = mx_tok_encode(c->tok, text, strlen(text), 0, &ids, &n, err);
  free(text);
  if (e) return -1;
  answer_ctx k = {.c = c, .fn = fn, .user = user};
  int rc = answer(c, ids, n, &k, st, err);
  if (rc == 0 && prefill) {
    /* the prefill and its continuation are one message */
    mx_chat_msg *last = &c->msgs[c->nmsgs - 1];
    size_t pl = strlen(last->content);
    char *joined = mx_malloc(pl + k.answer.n + 1, err);
    if (!joined) rc = -1;
    else {
      memcpy(joined, last->content, pl);
      if (k.answer.n) memcpy(joined + pl, k.answer.p, k.answer.n);
      joined[pl + k.answer.n] = 0;
      free((char *)last->content);
      last->content = joined;
    }
  } else if (rc == 0) {
    rc = push_msg(c, "model", k.answer.p ? k.answer.p : "", k.answer.n, err);
  }
  free(ids);
  free(k.answer.p);
  free(k.ids);
  return rc;
}

/* Raw completion: the text continues the ids so far. */
static int respond_raw(mlxrt_chat *c, const char *more_text, mlxrt_text_fn fn, void *user, mlxrt_gen_stats *st,
                       mlxrt_error *err) {
  int32_t *more = NULL, *ids = NULL;
  size_t nm = 0, n = 0, cap = 0;
  answer_ctx k = {.c = c, .fn = fn, .user = user};
  int rc = -1;
  if (mx_tok_encode(c->tok, more_text, strlen(more_text), c->nhist == 0, &more, &nm, err) == 0 &&
      push_ids(&ids, &n, &cap, c->hist, c->nhist, err) == 0 && push_ids(&ids, &n, &cap, more, nm, err) == 0 &&
      answer(c, ids, n, &k, st, err) == 0 &&
      push_ids(&ids, &n, &cap, k.ids, k.nids, err) == 0) { /* the history: prompt + answer */
    c->nhist = 0;
    rc = push_ids(&c->hist, &c->nhist, &c->cap_hist, ids, n, err);
  }
  free(k.answer.p);
  free(k.ids);
  free(more);
  free(ids);
  return rc;
}

int mlxrt_chat_respond(mlxrt_chat *c, mlxrt_text_fn fn, void *user, mlxrt_gen_stats *st, mlxrt_error *err) {
  if (!c->opt.use_template) return respond_raw(c, "", fn, user, st, err);
  return respond_template(c, fn, user, st, err);
}

int mlxrt_chat_turn(mlxrt_chat *c, const char *user_text, mlxrt_text_fn fn, void *user,
                    mlxrt_gen_stats *st, mlxrt_error *err) {
  if (!c->opt.use_template) return respond_raw(c, user_text, fn, user, st, err);
  const size_t before = c->nmsgs;
  if (push_msg(c, "user", user_text, strlen(user_text), err)) return -1;
  int rc = respond_template(c, fn, user, st, err);
  if (rc) drop_msgs_from(c, before); /* a failed turn leaves the conversation as it was */
  return rc;
}
