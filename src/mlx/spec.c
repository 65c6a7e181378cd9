/* Speculative decoding's drafter and judge (spec.h). Drafts come from the context (prompt
 * lookup), from a draft model's session, which the target session keeps (S->draft) so that
 * its cache carries over from one call to the next like the target's, or from a Gemma 4 MTP
 * drafter reading the target session's own K/V and hidden states (assistant.h). */
#include <stdlib.h>
#include <string.h>

#include "accel/accel_sample.h"
#include "base/error.h"
#include "mlx/assistant.h"
#include "mlx/spec.h"
#include "mlx/spec_lookup.h"
#include "mlx/spec_rule.h"
#include "mlx/tokenizer.h"

enum { DEFAULT_LOOKUP_DRAFT = 10, DEFAULT_MODEL_DRAFT = 4, DEFAULT_NGRAM = 3 };

struct mx_spec {
  int mode, k, ngram, greedy;
  /* the draft length now: up 2 after a pass whose drafts were all kept, down 1 (to 1) after
   * one with a rejection, so that drafts nobody keeps cost little (transformers' heuristic) */
  int k_now, drafted, kept;
  mlxrt_session *D;           /* the draft model's session (S->draft), mode DRAFT */
  mx_assistant *A;            /* or the MTP drafter (a gemma4_assistant draft model): drafts a
                               * constant draft_max per pass, as transformers' does */
  mx_sampler *dsmp;           /* the draft model's sampler (sampled drafting) */
  const mx_gen_config *stops; /* a drafted stop token ends the draft */
  int V;
  float *dlogits;             /* [V]: the draft model's logits */
  double *q;                  /* [k][V]: the distributions the drafts were drawn from */
  double *p, *r;              /* [V]: the model's distribution at a drafted position, residual */
};

void mx_spec_free(mx_spec *sp) {
  if (!sp) return;
  mx_assistant_free(sp->A);
  mx_sampler_free(sp->dsmp);
  free(sp->dlogits);
  free(sp->q);
  free(sp->p);
  free(sp->r);
  free(sp);
}

int mx_spec_draft_max(const mx_spec *sp) { return sp->k; }

/* The draft model must speak the model's vocabulary: the sizes, and where both have a
 * tokenizer, the text of every 61st id. */
static int check_vocab(const mlxrt_model *M, const mlxrt_model *DM, mlxrt_error *err) {
  const int V = M->m->cfg.vocab_size, DV = DM->m->cfg.vocab_size;
  if (V != DV)
    return mx_fail(err, "spec: the draft model %s has a vocabulary of %d tokens, the model %d: a draft model "
                        "must share the model's tokenizer", DM->m->path, DV, V);
  const mx_tokenizer *a = M->m->tok, *b = DM->m->tok;
  if (!a || !b) return 0;
  for (int32_t id = 0; id < V; id += 61) {
    size_t la = 0, lb = 0;
    const char *ta = mx_tok_id_to_token(a, id, &la), *tb = mx_tok_id_to_token(b, id, &lb);
    if ((ta == NULL) != (tb == NULL) || la != lb || (ta && memcmp(ta, tb, la)))
      return mx_fail(err, "spec: the draft model %s has another tokenizer than the model (token %d differs)",
                     DM->m->path, (int)id);
  }
  return 0;
}

/* The options' checks: 0, or -1 with err naming the one at fault. */
static int check_options(mlxrt_session *S, const mlxrt_spec_options *o, mlxrt_error *err) {
  if (o->mode != MLXRT_SPEC_LOOKUP && o->mode != MLXRT_SPEC_DRAFT)
    return mx_fail(err, "spec: mode %d is not one of MLXRT_SPEC_OFF (0), MLXRT_SPEC_LOOKUP (1), MLXRT_SPEC_DRAFT (2)",
                   o->mode);
  const int draft = o->mode == MLXRT_SPEC_DRAFT;
  if (o->draft_max < 0 || o->draft_max > MLXRT_SPEC_MAX_DRAFT)
    return mx_fail(err, "spec: draft_max %d must be 1 to %d (0: the default)", o->draft_max, MLXRT_SPEC_MAX_DRAFT);
  if (o->ngram_max < 0 || o->ngram_max > MLXRT_SPEC_MAX_NGRAM)
    return mx_fail(err, "spec: ngram_max %d must be 1 to %d (0: the default, 3)", o->ngram_max, MLXRT_SPEC_MAX_NGRAM);
  if (draft && !o->draft_model) return mx_fail(err, "spec: MLXRT_SPEC_DRAFT needs a draft_model");
  if (!draft && o->draft_model) return mx_fail(err, "spec: a draft_model is for MLXRT_SPEC_DRAFT, not prompt lookup");
  if (draft && o->ngram_max) return mx_fail(err, "spec: ngram_max is prompt lookup's, not the draft model's");
  mlxrt_error why = {{0}};
  if (mx_session_check_rowwise(S->s, &why))
    return mx_fail(err, "speculative decoding (spec) verifies drafted tokens with every position's logits, each "
                        "as a one-token step computes it, and here %s: it needs a backend whose sessions run the "
                        "reference path with row-exact products",
                   why.msg);
  return draft ? check_vocab(S->model, o->draft_model, err) : 0;
}

mx_spec *mx_spec_create(mlxrt_session *S, const mlxrt_spec_options *o, const mx_sampler *smp,
                        const mx_gen_config *stops, mlxrt_error *err) {
  if (check_options(S, o, err)) return NULL;
  const int draft = o->mode == MLXRT_SPEC_DRAFT;
  mx_spec *sp = mx_calloc(1, sizeof *sp, err);
  if (!sp) return NULL;
  sp->mode = o->mode;
  sp->k = o->draft_max ? o->draft_max : draft ? DEFAULT_MODEL_DRAFT : DEFAULT_LOOKUP_DRAFT;
  sp->k_now = sp->k;
  sp->ngram = o->ngram_max ? o->ngram_max : DEFAULT_NGRAM;
  sp->greedy = mx_sampler_get_params(smp)->temperature == 0.0f;
  sp->stops = stops;
  sp->V = S->model->m->cfg.vocab_size;
  const size_t V = (size_t)sp->V;
  if (!sp->greedy && (!(sp->p = mx_malloc(V * sizeof *sp->p, err)) || !(sp->r = mx_malloc(V * sizeof *sp->r, err))))
    goto fail;
  if (draft && o->draft_model->m->cfg.assistant) {
    if (!(sp->A = mx_assistant_create(o->draft_model->m, o->draft_model->b, S->s, sp->k, err))) goto fail;
  } else if (draft) {
    if (S->draft && S->draft->model != o->draft_model) { /* another draft model than last time */
      mlxrt_session_free(S->draft);
      S->draft = NULL;
    }
    if (!S->draft && !(S->draft = mlxrt_session_new(o->draft_model, mx_session_capacity(S->s), err))) goto fail;
    sp->D = S->draft;
    if (mx_session_uses_decoder(sp->D->s)) {
      mx_fail(err, "spec: the draft model runs on the %s backend's whole-step decoder, whose cache cannot take "
                   "back drafted positions: load it on a backend whose sessions run the reference path",
              o->draft_model->b->name);
      goto fail;
    }
    if (!(sp->dlogits = mx_malloc(V * sizeof *sp->dlogits, err))) goto fail;
  }
  if (draft) {
    if (!sp->greedy) {
      mx_sampler_params dp = *mx_sampler_get_params(smp);
      dp.seed ^= 0x5bd1e9955bd1e995ull; /* a stream of its own */
      if (!(sp->dsmp = mx_sampler_create(&dp, sp->V, err)) ||
          !(sp->q = mx_malloc((size_t)sp->k * V * sizeof *sp->q, err)))
        goto fail;
    }
  }
  return sp;
fail:
  mx_spec_free(sp);
  return NULL;
}

/* ---- drafting ------------------------------------------------------------------------------ */
/* The draft session made to hold ctx[0..n), its logits after ctx[n-1] in sp->dlogits. */
static int draft_sync(mx_spec *sp, const int32_t *ctx, size_t n, mlxrt_error *err) {
  mlxrt_session *D = sp->D;
  size_t held = (size_t)mx_session_pos(D->s), common = 0;
  while (common < n && common < held && D->ids[common] == ctx[common]) common++;
  if (common == n) common = n - 1; /* the last token is fed again for its logits */
  if ((size_t)mx_session_pos(D->s) != common) common = (size_t)mx_session_rewind(D->s, (int64_t)common);
  const int64_t pos0 = mx_session_pos(D->s);
  const int rc = mx_session_feed(D->s, ctx + common, (int64_t)(n - common), sp->dlogits, 0, err);
  mx_api_session_track(D, ctx + common, pos0);
  return rc ? mx_prefix(err, "draft model") : 0;
}

int mx_spec_prefill(mx_spec *sp, const int32_t *prompt, size_t n, const volatile int *cancel, mlxrt_error *err) {
  if (sp->mode != MLXRT_SPEC_DRAFT || sp->A || n == 0) return 0;
  mlxrt_session *D = sp->D;
  size_t held = (size_t)mx_session_pos(D->s), common = 0;
  while (common < n && common < held && D->ids[common] == prompt[common]) common++;
  if ((size_t)mx_session_pos(D->s) != common) common = (size_t)mx_session_rewind(D->s, (int64_t)common);
  const int64_t pos0 = mx_session_pos(D->s);
  const int rc = mx_session_feed_cancel(D->s, prompt + common, (int64_t)(n - common), NULL, 0, cancel, err);
  mx_api_session_track(D, prompt + common, pos0);
  return rc < 0 ? mx_prefix(err, "draft model") : rc;
}

/* The draft model's next token from its logits x: the argmax, or a draw from its sampler's
 * distribution (kept in sp->q[j] for the verification). -1: no token possible. */
static int32_t draft_pick(mx_spec *sp, const float *x, int j) {
  if (sp->greedy) {
    int b = 0;
    for (int i = 1; i < sp->V; i++)
      if (x[i] > x[b]) b = i;
    return b;
  }
  double *q = sp->q + (size_t)j * (size_t)sp->V;
  mlxrt_error ignored = {{0}}; /* a draft that cannot be drawn ends the draft, nothing more */
  if (mx_sampler_probs(sp->dsmp, x, q, &ignored) < 0) return -1;
  return mx_spec_draw(q, sp->V, 1.0, mx_sampler_uniform(sp->dsmp));
}

/* The draft sampler's repetition-penalty history: the context's tail. */
static void draft_history(mx_spec *sp, const int32_t *ctx, size_t n) {
  if (!sp->dsmp) return;
  const int w = mx_sampler_get_params(sp->dsmp)->repetition_window;
  mx_sampler_reset(sp->dsmp);
  for (size_t i = n > (size_t)w ? n - (size_t)w : 0; i < n; i++) mx_sampler_accept(sp->dsmp, ctx[i]);
}

/* The MTP drafter from the last token chosen (ctx[n-1], at the target's position n-1). */
static int draft_mtp(mx_spec *sp, const int32_t *ctx, size_t n, int k, int32_t *draft, mlxrt_error *err) {
  const int rc = mx_assistant_begin(sp->A, ctx[n - 1], (int64_t)n - 1, err);
  if (rc) return rc < 0 ? -1 : 0; /* (1: what it reads is gone; this pass goes without drafts) */
  draft_history(sp, ctx, n);
  int m = 0;
  while (m < k) {
    const float *x = mx_assistant_logits(sp->A, err);
    if (!x) return -1;
    const int32_t t = draft_pick(sp, x, m);
    if (t < 0) break;
    draft[m++] = t;
    if (sp->dsmp) mx_sampler_accept(sp->dsmp, t);
    if (m == k || mx_gen_config_is_eos(sp->stops, t)) break;
    mx_assistant_push(sp->A, t);
  }
  return m;
}

static int draft_model(mx_spec *sp, const int32_t *ctx, size_t n, int k, int32_t *draft, mlxrt_error *err) {
  if (draft_sync(sp, ctx, n, err)) return -1;
  draft_history(sp, ctx, n);
  int m = 0;
  while (m < k) {
    const int32_t t = draft_pick(sp, sp->dlogits, m);
    if (t < 0) break;
    draft[m++] = t;
    if (sp->dsmp) mx_sampler_accept(sp->dsmp, t);
    if (m == k || mx_gen_config_is_eos(sp->stops, t)) break; /* a stop token would end the answer */
    const int64_t pos0 = mx_session_pos(sp->D->s);
    const int rc = mx_session_feed(sp->D->s, &draft[m - 1], 1, sp->dlogits, 0, err);
    mx_api_session_track(sp->D, &draft[m - 1], pos0);
    if (rc) return mx_prefix(err, "draft model");
  }
  return m;
}

int mx_spec_draft(mx_spec *sp, const int32_t *ctx, size_t n, int k, int32_t *draft, mlxrt_error *err) {
  if (sp->drafted > 0 && !sp->A) { /* the last pass's outcome sets this one's length */
    sp->k_now = sp->kept == sp->drafted ? sp->k_now + 2 : sp->k_now - 1;
    sp->k_now = sp->k_now < 1 ? 1 : sp->k_now > sp->k ? sp->k : sp->k_now;
  }
  sp->drafted = sp->kept = 0;
  if (k > sp->k_now) k = sp->k_now;
  if (k <= 0 || n == 0) return 0;
  const int m = sp->mode == MLXRT_SPEC_LOOKUP ? mx_lookup_draft(ctx, n, sp->ngram, k, draft)
                : sp->A                       ? draft_mtp(sp, ctx, n, k, draft, err)
                                              : draft_model(sp, ctx, n, k, draft, err);
  sp->drafted = m > 0 ? m : 0;
  return m;
}

/* ---- verification --------------------------------------------------------------------------- */
int mx_spec_verify(mx_spec *sp, mx_sampler *smp, const float *row, int64_t pos, int j, int32_t x, int32_t *tok,
                   mlxrt_error *err) {
  const int bad = accel_logits_first_nonfinite(row, sp->V);
  if (bad >= 0) return accel_fail_nonfinite(err, pos, bad);
  if (sp->greedy) { /* the plain loop's argmax (lowest id among equal maxima) */
    int b = 0;
    for (int i = 1; i < sp->V; i++)
      if (row[i] > row[b]) b = i;
    *tok = b;
    sp->kept += b == x;
    return b == x;
  }
  if (mx_sampler_probs(smp, row, sp->p, err) < 0) return -1;
  const double *q = sp->mode == MLXRT_SPEC_DRAFT ? sp->q + (size_t)j * (size_t)sp->V : NULL;
  if (mx_sampler_uniform(smp) < mx_spec_accept_prob(sp->p, q, x)) {
    *tok = x;
    sp->kept++;
    return 1;
  }
  double total = mx_spec_residual(sp->p, q, sp->V, x, sp->r);
  const double u = mx_sampler_uniform(smp);
  int32_t t = mx_spec_draw(sp->r, sp->V, total, u);
  if (t < 0) t = mx_spec_draw(sp->p, sp->V, 1.0, u); /* (only rounding leaves the residual empty) */
  if (t < 0) return mx_fail(err, "speculative sampling: no token has a probability at position %lld", (long long)pos);
  *tok = t;
  return 0;
}
