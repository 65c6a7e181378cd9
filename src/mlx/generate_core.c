/* Generation on a session, the one loop under mlxrt_session_generate and mlxrt_chat: the
 * longest cached prefix of the prompt is kept, the rest is processed in the session's batches
 * (cancellable between them), then tokens are sampled — on the device when a decoder runs the
 * session and the caller needs no logits, else on the host from the logits — and each one is
 * reported with its text (whole UTF-8 characters from the tokenizer's streaming decoder).
 * With speculative decoding (spec.h) each token fed comes with drafted ones, the pass gives
 * every position's logits, and the loop walks those rows: a drafted token the verification
 * accepts is already in the cache, the first one it does not is replaced and what follows it
 * is taken back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/flag.h"
#include "accel/accel_sample.h"
#include "base/error.h"
#include "base/strbuf.h"
#include "mlx/api_internal.h"
#include "mlx/generate_core.h"
#include "mlx/spec.h"
#include "mlx/tokenizer.h"

#define MAX_TOP_LOGPROBS 20

void mlxrt_generate_options_default(mlxrt_generate_options *o) {
  memset(o, 0, sizeof *o);
  mlxrt_gen_params_default(&o->gen);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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

/* log-softmax of finite logits at id, the normalizer summed in double; and the k most probable
 * ids (value descending, lower id first among equals) with theirs. */
static float log_softmax_at(const float *x, int n, int id, int k, int32_t *top_ids, float *top_lp) {
  float mx = x[0];
  for (int i = 1; i < n; i++)
    if (x[i] > mx) mx = x[i];
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += exp((double)x[i] - (double)mx);
  const double lse = (double)mx + log(sum);
  int have = 0;
  for (int i = 0; i < n && k > 0; i++) {
    if (have == k && x[i] <= x[top_ids[k - 1]]) continue;
    int j = have < k ? have++ : k - 1;
    while (j > 0 && x[top_ids[j - 1]] < x[i]) {
      top_ids[j] = top_ids[j - 1];
      j--;
    }
    top_ids[j] = i;
  }
  for (int j = 0; j < have; j++) top_lp[j] = (float)((double)x[top_ids[j]] - lse);
  return (float)((double)x[id] - lse);
}

/* Feeds tok at position pos with up to k drafted tokens after it (one row-exact pass, every
 * position's logits into logits), first taking back what the session holds from pos on
 * (drafts a verification rejected). *ndraft: the drafts fed (drafts[0..*ndraft)). */
static int spec_feed(mlxrt_session *S, mx_spec *sp, int32_t tok, int64_t pos, int k, float *logits,
                     int32_t *drafts, int *ndraft, mlxrt_gen_stats *st, mlxrt_error *err) {
  mx_session *s = S->s;
  *ndraft = 0;
  if (mx_session_pos(s) > pos && mx_session_rewind(s, pos) != pos)
    return mx_fail(err, "speculative decoding: the cache could not take back the positions from %lld on",
                   (long long)pos);
  S->ids[pos] = tok; /* the context the drafter sees: the ids held, then tok */
  int32_t buf[MLXRT_SPEC_MAX_DRAFT + 1];
  const int nd = k > 0 ? mx_spec_draft(sp, S->ids, (size_t)pos + 1, k, buf + 1, err) : 0;
  if (nd < 0) return -1;
  buf[0] = tok;
  const int e = nd ? mx_session_feed_rowwise(s, buf, nd + 1, logits, err) : mx_session_feed(s, buf, 1, logits, 0, err);
  mx_api_session_track(S, buf, pos);
  if (e) return -1;
  memcpy(drafts, buf + 1, (size_t)nd * sizeof *drafts);
  *ndraft = nd;
  if (nd) {
    st->spec_passes++;
    st->spec_drafted += nd;
  }
  return 0;
}

int mx_generate(mlxrt_session *S, const mx_gen_request *r, mlxrt_gen_stats *st, mlxrt_error *err) {
  mlxrt_gen_stats local;
  if (!st) st = &local;
  memset(st, 0, sizeof *st);
  mx_session *s = S->s;
  const mx_model *m = S->model->m;
  const int V = m->cfg.vocab_size;
  const size_t n = r->n;
  if (n == 0) return mx_fail(err, "the prompt is empty");
  if ((int64_t)n >= mx_session_capacity(s))
    return mx_fail(err, "the prompt has %zu tokens, more than the context of %lld", n,
                   (long long)mx_session_capacity(s));
  const int top_k = r->top_logprobs;
  if (top_k < 0 || top_k > MAX_TOP_LOGPROBS)
    return mx_fail(err, "top_logprobs is %d: expected 0 to %d", top_k, MAX_TOP_LOGPROBS);
  const int want_logprobs = r->logprobs || top_k > 0;
  mx_spec *sp = NULL;
  if (r->spec && r->spec->mode != MLXRT_SPEC_OFF && !(sp = mx_spec_create(S, r->spec, r->smp, r->stops, err)))
    return -1;
  const int K = sp ? mx_spec_draft_max(sp) : 0;
  float *logits = mx_malloc((size_t)(K + 1) * (size_t)V * sizeof *logits, err);
  if (!logits) {
    mx_spec_free(sp);
    return -1;
  }
  int rc = -1;

  /* 1. keep the longest common prefix the cache still holds, process the rest */
  size_t common = 0;
  const size_t held = (size_t)mx_session_pos(s);
  while (common < n && common < held && r->prompt[common] == S->ids[common]) common++;
  if (common == n) common = n - 1; /* the last token must be fed to get logits */
  if ((size_t)mx_session_pos(s) != common) common = (size_t)mx_session_rewind(s, (int64_t)common);
  for (size_t i = 0; i < n; i++) mx_sampler_accept(r->smp, r->prompt[i]);
  st->prompt_tokens = (int64_t)n;
  st->prompt_processed = (int64_t)(n - common);
  double t0 = now_s();
  const int fed = mx_session_feed_cancel(s, r->prompt + common, (int64_t)(n - common), logits, 0,
                                         r->cancel, err);
  mx_api_session_track(S, r->prompt + common, (int64_t)common);
  const int dfed = fed == 0 && sp ? mx_spec_prefill(sp, r->prompt, n, r->cancel, err) : fed;
  st->prompt_seconds = now_s() - t0;
  if (fed < 0 || dfed < 0) goto out;
  if (fed > 0 || dfed > 0) {
    st->stopped_by = 2;
    rc = 0;
    goto out;
  }

  /* 2. sample, report, stop */
  mx_tok_stream ts;
  mx_tok_stream_init(&ts, m->tok, r->skip_special);
  int32_t top_ids[MAX_TOP_LOGPROBS];
  float top_lp[MAX_TOP_LOGPROBS];
  mx_strbuf text = {0}; /* a last token's text and the held bytes after it */
  /* on a decoder session each step samples inside the decoder (only the id comes back) */
  const int on_device = mx_session_uses_decoder(s) && !want_logprobs;
  const int max = r->max_tokens;
  int32_t next = -1;
  /* logits row j: of the token at position row0 + j; drafts[j] was fed at row0 + 1 + j */
  int64_t pos = (int64_t)n, row0 = (int64_t)n - 1;
  int32_t drafts[MLXRT_SPEC_MAX_DRAFT];
  int ndraft = 0;
  double t1 = now_s();
  st->stopped_by = 1;
  for (int i = 0; max <= 0 || i < max; i++, pos++) {
    if (mx_flag_get(r->cancel)) {
      st->stopped_by = 2;
      break;
    }
    const int j = (int)(pos - 1 - row0);
    const float *row = logits + (size_t)j * (size_t)V;
    int fed = 0; /* tok is a drafted token the verification kept: already in the cache */
    int32_t tok = next;
    if (next < 0 && j < ndraft) {
      const int kept = mx_spec_verify(sp, r->smp, row, pos - 1, j, drafts[j], &tok, err);
      if (kept < 0) goto out_stream;
      if (kept) st->spec_accepted++;
      else ndraft = j; /* the drafts after a rejected one are void */
      fed = kept;
    } else if (next < 0) {
      tok = choose(r->smp, row, V, pos - 1, err);
    }
    if (tok < 0) goto out_stream;
    mlxrt_token_info info = {tok, pos, NAN, 0, top_ids, top_lp, "", 0, 0};
    if (want_logprobs) { /* choose() and mx_spec_verify saw these logits finite */
      info.logprob = log_softmax_at(row, V, tok, top_k, top_ids, top_lp);
      info.n_top = top_k < V ? top_k : V;
    }
    if (!r->ignore_stop && mx_gen_config_is_eos(r->stops, tok)) {
      info.is_stop = 1;
      if (r->fn) r->fn(r->user, &info);
      st->stopped_by = 0;
      break;
    }
    mx_sampler_accept(r->smp, tok);
    st->gen_tokens++;
    const char *piece;
    size_t plen;
    if (mx_tok_stream_put(&ts, tok, &piece, &plen, err)) goto out_stream;
    const int full = pos + 1 >= mx_session_capacity(s);
    if (full || i + 1 == max) { /* the last token: it takes any bytes still held */
      text.n = 0;
      mx_strbuf_put(&text, piece, plen);
      if (mx_tok_stream_flush(&ts, &piece, &plen, err)) goto out_stream;
      mx_strbuf_put(&text, piece, plen);
      if (text.oom) {
        mx_fail(err, "out of memory for the token text");
        goto out_stream;
      }
      piece = text.p;
      plen = text.n;
    }
    info.text = piece;
    info.len = plen;
    if (r->fn && r->fn(r->user, &info)) {
      st->stopped_by = 4;
      break;
    }
    if (full) {
      st->stopped_by = 3;
      break;
    }
    if (i + 1 == max) break; /* the answer's last token is not fed */
    if (fed) continue;
    int32_t t32 = tok;
    int e;
    if (sp) { /* drafts that fit the context and the tokens still wanted (one comes on top) */
      int k = (int)(mx_session_capacity(s) - pos - 1);
      if (max > 0 && max - i - 2 < k) k = max - i - 2;
      e = spec_feed(S, sp, t32, pos, k, logits, drafts, &ndraft, st, err);
    } else {
      e = on_device ? mx_session_step_sample(s, t32, r->smp, &next, err) : mx_session_feed(s, &t32, 1, logits, 0, err);
      mx_api_session_track(S, &t32, pos);
    }
    row0 = pos;
    if (e) goto out_stream;
  }
  /* the cache holds what plain decoding leaves: nothing from the last token's position on */
  if (sp && mx_session_pos(s) > pos) mx_session_rewind(s, pos);
  {
    const char *piece;
    size_t plen;
    if (mx_tok_stream_flush(&ts, &piece, &plen, err) == 0 && plen && r->tail) r->tail(r->user, piece, plen);
  }
  st->gen_seconds = now_s() - t1;
  rc = 0;
out_stream:
  mx_tok_stream_free(&ts);
  free(text.p);
out:
  mx_session_idle(s); /* a pool's batched steps stop waiting for this sequence */
  free(logits);
  mx_spec_free(sp);
  return rc;
}

int mlxrt_session_generate(mlxrt_session *S, const int32_t *prompt, size_t n,
                           const mlxrt_generate_options *o, mlxrt_token_fn fn, void *user,
                           mlxrt_gen_stats *stats, mlxrt_error *err) {
  mlxrt_generate_options def;
  if (!o) {
    mlxrt_generate_options_default(&def);
    o = &def;
  }
  if (!prompt && n) return mx_fail(err, "generate: prompt is NULL but n is %zu", n);
  const mlxrt_model *M = S->model;
  if (!M->m->tok) return mx_fail(err, "%s: no tokenizer.json: generation reports text per token", M->m->path);
  /* a fresh sampler per call: the same seed gives the same tokens whatever was cached */
  mx_sampler_params sp;
  mx_sampler_params_default(&sp);
  mx_gen_config_apply_sampling(&M->stops, &sp);
  mx_gen_params_apply_sampling(&o->gen, &sp);
  mx_sampler *smp = mx_sampler_create(&sp, M->m->cfg.vocab_size, err);
  if (!smp) return -1;
  mx_gen_request r = {prompt, n, smp, &M->stops, o->gen.max_tokens, o->logprobs, o->top_logprobs,
                      o->cancel, o->ignore_stop, 0, fn, NULL, user, &o->spec};
  const int rc = mx_generate(S, &r, stats, err);
  mx_sampler_free(smp);
  return rc;
}

int mlxrt_spec_check(mlxrt_session *S, const mlxrt_spec_options *o, mlxrt_error *err) {
  if (!o || o->mode == MLXRT_SPEC_OFF) return 0;
  mx_sampler_params sp;
  mx_sampler_params_default(&sp);
  sp.temperature = 0;
  mx_sampler *smp = mx_sampler_create(&sp, S->model->m->cfg.vocab_size, err);
  mx_spec *spec = smp ? mx_spec_create(S, o, smp, &S->model->stops, err) : NULL;
  mx_spec_free(spec);
  mx_sampler_free(smp);
  return spec ? 0 : -1;
}
