/* A session: the reference path's state (session_internal.h) or the backend's whole-step
 * decoder running a model, its lifecycle, and the feeding and stepping API (session.h). The
 * forward pass itself is in reference.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flag.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/mlx_cpu_math.h"
#include "accel/accel_sample.h"
#include "mlx/ops.h"
#include "mlx/step_pool.h"
#include "mlx/sampler.h"
#include "mlx/session_internal.h"

/* ---- RoPE tables --------------------------------------------------------------------------- */
/* inv_freq_j = θ^(−2j/D) / factor for the layer's live pairs, 0 for the rest (config.h). */
/* With mlx-cpu numerics MLX's own float32 formulas instead (ops.h), positions scaled apart. */
static float *rope_table(const mx_config *c, int layer, int mlx_cpu, float *pos_scale, mlxrt_error *err) {
  const mx_rope *r = mx_config_layer_rope(c, layer);
  int dim = c->layer_head_dim[layer], half = dim / 2, live = c->layer_rope_pairs[layer];
  float *t = mx_calloc((size_t)half, sizeof(float), err);
  if (!t) return NULL;
  *pos_scale = 1.0f;
  if (mlx_cpu) {
    mx_rope_freqs_mlx_cpu(t, pos_scale, (int)r->kind, r->theta, r->factor > 0 ? r->factor : 1.0, dim, live);
    return t;
  }
  double factor = r->factor > 0 ? r->factor : 1.0;
  for (int j = 0; j < live && j < half; j++) t[j] = (float)(pow(r->theta, -(2.0 * j) / dim) / factor);
  return t;
}

/* ---- session lifecycle ------------------------------------------------------------------- */
int mx_session_keep_hidden(mx_session *s, mlxrt_error *err) {
  if (s->hid) return 0;
  s->hid_n = 0;
  s->hid = mx_malloc((size_t)s->batch * (size_t)s->m->cfg.hidden_size * sizeof(float), err);
  return s->hid ? 0 : -1;
}

const float *mx_session_hidden(const mx_session *s, int64_t pos) {
  if (!s->hid || pos < s->hid_pos0 || pos >= s->hid_pos0 + s->hid_n || pos >= s->pos) return NULL;
  return s->hid + (pos - s->hid_pos0) * s->m->cfg.hidden_size;
}

void mx_session_free(mx_session *s) {
  if (!s) return;
  const mx_model *m = s->m;
  mx_decoder_close(s->dec);
  if (s->pool) mx_pool_release(s->pool, s->slot);
  if (s->kv)
    for (int i = 0; i < m->n_layers; i++) mx_kv_free(&s->kv[i]);
  if (s->chunk_k)
    for (int i = 0; i < m->n_layers; i++) {
      free(s->chunk_k[i]);
      free(s->chunk_v[i]);
    }
  free(s->kv);
  free(s->feeds_shared);
  free(s->chunk_k);
  free(s->chunk_v);
  if (s->inv_freq)
    for (int i = 0; i < m->n_layers; i++) free(s->inv_freq[i]);
  free(s->inv_freq);
  free(s->rope_pos_scale);
  free(s->rope_c);
  free(s->rope_s);
  float *fs[] = {s->h, s->x, s->q, s->k, s->v, s->att, s->o, s->g, s->u, s->t1, s->t2, s->ple, s->scores, s->moe};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) free(fs[i]);
  free(s->hid);
  free(s->xb);
  free(s->stage_k);
  free(s->stage_v);
  free(s);
}

static void track_max(int64_t *mx, const mx_linear *l) {
  if (l->present && l->aw.spec.cols > *mx) *mx = l->aw.spec.cols;
}

mx_session *mx_session_create(const mx_model *m, accel_backend *b, int64_t capacity, int batch,
                              mlxrt_error *err) {
  return mx_session_create_flags(m, b, capacity, batch, 0, err);
}

/* flags beyond session.h's: the session runs on a step pool (no decoder of its own) */
enum { MX_SESSION_POOLED = 1u << 16 };

mx_session *mx_session_create_pooled(const mx_model *m, accel_backend *b, mx_pool *pool, mlxrt_error *err) {
  const int slot = mx_pool_acquire(pool);
  if (slot < 0) {
    mx_fail(err, "the step pool's %d slots are all taken (free a session of it first)", mx_pool_slots(pool));
    return NULL;
  }
  /* the reference path never runs: scratch for one row */
  mx_session *s = mx_session_create_flags(m, b, mx_pool_capacity(pool), 1, MX_SESSION_POOLED, err);
  if (!s) {
    mx_pool_release(pool, slot);
    return NULL;
  }
  s->pool = pool;
  s->slot = slot;
  return s;
}

void mx_session_idle(mx_session *s) {
  if (s->pool) mx_pool_leave(s->pool, s->slot);
}

mx_session *mx_session_create_flags(const mx_model *m, accel_backend *b, int64_t capacity, int batch,
                                    unsigned flags, mlxrt_error *err) {
  const mx_config *c = &m->cfg;
  mx_session *s = mx_calloc(1, sizeof *s, err);
  if (!s) return NULL;
  s->m = m;
  s->b = b;
  s->batch = batch > 0 ? batch : 512;
  s->capacity = capacity > 0 ? capacity : c->max_position_embeddings;
  if (s->capacity <= 0) s->capacity = 131072;

  int L = m->n_layers;
  s->kv = mx_calloc((size_t)L, sizeof *s->kv, err);
  s->feeds_shared = mx_calloc((size_t)L, sizeof(int), err);
  s->chunk_k = mx_calloc((size_t)L, sizeof(uint16_t *), err);
  s->chunk_v = mx_calloc((size_t)L, sizeof(uint16_t *), err);
  if (!s->kv || !s->feeds_shared || !s->chunk_k || !s->chunk_v) goto fail;

  int64_t max_q = 0, max_kv = 0, max_inter = 0, max_hd = 0;
  for (int i = 0; i < L; i++) {
    const mx_layer *ly = &m->layers[i];
    int64_t kvd = (int64_t)ly->n_kv_heads * ly->head_dim;
    if (ly->has_kv)
      mx_kv_init(&s->kv[i], ly->type == MX_LAYER_SLIDING ? c->sliding_window + MX_SESSION_REWIND_MAX : 0, (int)kvd);
    else if (ly->kv_source >= 0) s->feeds_shared[ly->kv_source] = 1; /* (−1: a drafter's, the target's K/V) */
    if ((int64_t)c->num_heads * ly->head_dim > max_q) max_q = (int64_t)c->num_heads * ly->head_dim;
    if (kvd > max_kv) max_kv = kvd;
    if (ly->intermediate > max_inter) max_inter = ly->intermediate;
    if (c->enable_moe && c->moe_intermediate_size > max_inter) max_inter = c->moe_intermediate_size;
    if (ly->head_dim > max_hd) max_hd = ly->head_dim;
    const mx_linear *ls[] = {&ly->q_proj, &ly->k_proj, &ly->v_proj, &ly->o_proj, &ly->gate_proj,
                             &ly->up_proj, &ly->down_proj, &ly->router_proj, &ly->exp_gate,
                             &ly->exp_up, &ly->exp_down, &ly->ple_gate, &ly->ple_proj};
    for (size_t j = 0; j < sizeof ls / sizeof ls[0]; j++) track_max(&s->max_cols, ls[j]);
  }
  track_max(&s->max_cols, &m->embed);
  track_max(&s->max_cols, &m->lm_head);
  track_max(&s->max_cols, &m->per_layer_model_proj);
  track_max(&s->max_cols, &m->pre_proj); /* a drafter's (assistant.c) */
  track_max(&s->max_cols, &m->post_proj);
  track_max(&s->max_cols, &m->centroids);
  for (int i = 0; i < L; i++)
    if (s->feeds_shared[i]) {
      size_t bytes = (size_t)s->batch * (size_t)s->kv[i].dim * sizeof(uint16_t);
      s->chunk_k[i] = mx_malloc(bytes, err);
      s->chunk_v[i] = mx_malloc(bytes, err);
      if (!s->chunk_k[i] || !s->chunk_v[i]) goto fail;
    }

  int64_t B = s->batch, H = c->hidden_size;
  int64_t wide = max_q > H ? max_q : H;
  if (max_inter > wide) wide = max_inter;
  int64_t ple_w = (int64_t)L * c->hidden_size_per_layer_input;
  if (ple_w > wide) wide = ple_w;
#define ALLOC(p, count)                                           \
  if (!((p) = mx_malloc((size_t)(count) * sizeof *(p), err))) goto fail
  ALLOC(s->h, B * H);
  ALLOC(s->x, B * H);
  ALLOC(s->q, B * max_q);
  ALLOC(s->k, B * max_kv);
  ALLOC(s->v, B * max_kv);
  ALLOC(s->att, B * max_q);
  ALLOC(s->o, B * H);
  ALLOC(s->rope_c, max_hd / 2 + 1);
  ALLOC(s->rope_s, max_hd / 2 + 1);
  ALLOC(s->g, B * wide);
  ALLOC(s->u, B * wide);
  ALLOC(s->t1, B * wide);
  ALLOC(s->t2, B * H);
  ALLOC(s->xb, B * (s->max_cols > wide ? s->max_cols : wide));
  if (ple_w) ALLOC(s->ple, B * ple_w);
  if (c->enable_moe) ALLOC(s->moe, B * H);
  /* chunk K/V of layers that are nobody's source is committed at once: one staging area */
  ALLOC(s->stage_k, B * max_kv);
  ALLOC(s->stage_v, B * max_kv);
#undef ALLOC
  s->mlx_cpu = b->mlx_cpu_numerics;
  s->inv_freq = mx_calloc((size_t)L, sizeof(float *), err);
  s->rope_pos_scale = mx_calloc((size_t)L, sizeof(float), err);
  if (!s->inv_freq || !s->rope_pos_scale) goto fail;
  for (int i = 0; i < L; i++)
    if (!(s->inv_freq[i] = rope_table(c, i, s->mlx_cpu, &s->rope_pos_scale[i], err))) goto fail;
  if (flags & MX_SESSION_POOLED) return s; /* the pool's decoder runs it */
  /* The decoder policy (session.h): an explicit request that cannot be honoured is an error,
   * never a silent fallback; a model the decoder does not run says so when verbose. */
  const char *want_dec = getenv("MLXRT_DECODER");
  int force = want_dec && !strcmp(want_dec, "1"), never = want_dec && !strcmp(want_dec, "0");
  if (want_dec && *want_dec && !force && !never) {
    mx_fail(err, "MLXRT_DECODER=%s: expected 1 (require the backend's decoder) or 0 (never)", want_dec);
    goto fail;
  }
  if (force && s->mlx_cpu) {
    mx_fail(err, "MLXRT_DECODER=1: the backend's decoder does not emulate mlx-cpu numerics");
    goto fail;
  }
  if (force && (flags & MX_SESSION_REFERENCE)) {
    mx_fail(err, "MLXRT_DECODER=1: this session needs every position's logits, which only the reference path gives");
    goto fail;
  }
  if (!force && !never && !(flags & MX_SESSION_REFERENCE) && b->decoder_fast) {
    mlxrt_error why = {{0}};
    s->dec = mx_decoder_open(m, b, s->capacity, b->verbose, &why);
    if (!s->dec && why.msg[0]) { /* the decoder runs this model but could not start: no fallback */
      mx_fail(err, "%s decoder: %s", b->name, why.msg);
      goto fail;
    }
  } else if (!force && b->verbose) {
    fprintf(stderr, "mlxrt: reference path on the %s backend (%s)\n", b->name,
            (flags & MX_SESSION_REFERENCE) ? "every position's logits are needed"
            : never                        ? "MLXRT_DECODER=0"
                                           : "the backend's decoder is this path's math, one step at a time");
  }
  if (force) {
    mlxrt_error why = {{0}};
    s->dec = mx_decoder_open(m, b, s->capacity, 0, &why);
    if (!s->dec) {
      const char *reason = mx_decoder_unsupported_reason(m);
      if (why.msg[0]) mx_fail(err, "MLXRT_DECODER=1: %s", why.msg);
      else mx_fail(err, "MLXRT_DECODER=1: the %s backend offers no decoder for this model%s%s%s",
                   b->name, reason ? " (it has " : "", reason ? reason : "", reason ? ")" : "");
      goto fail;
    }
  }
  if (!s->dec && (b->kv_k == ACCEL_KV_K_PLANAR3 || b->kv_k == ACCEL_KV_K_PLANAR4)) {
    mx_fail(err, "kv-k planar%d: this session runs on the reference path, whose cache keeps K in bf16; a compressed K "
            "cache needs the %s backend's whole-step decoder", b->kv_k, b->name);
    goto fail;
  }
  (void)max_hd;
  return s;
fail:
  mx_session_free(s);
  return NULL;
}


int mx_session_check_feed(const mx_session *s, const int32_t *tokens, int64_t n, mlxrt_error *err) {
  const mx_config *c = &s->m->cfg;
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
      return mx_fail(err, "token id %d at position %lld is outside the vocabulary [0, %d)", tokens[i],
                     (long long)(s->pos + i), c->vocab_size);
  if (s->pos + n > s->capacity)
    return mx_fail(err, "context full: %lld tokens in the cache + %lld new exceed the capacity of %lld",
                   (long long)s->pos, (long long)n, (long long)s->capacity);
  return 0;
}

static void advance(mx_session *s, int64_t n) {
  s->pos += n;
  if (s->pos > s->kv_hi) s->kv_hi = s->pos;
}

/* The whole step on the backend's decoder, the session's own or its pool's: the logits of the
 * last token only. On a pool one token joins the batched step, more are a prompt (pieces
 * between the steps, cancellable between them: 1). */
static int decoder_feed(mx_session *s, const int32_t *tokens, int64_t n, float *logits,
                        int all_positions, const volatile int *cancel, mlxrt_error *err) {
  if (logits && all_positions && n > 1)
    return mx_fail(err, "the decoder runs this session and gives the last position's logits only "
                        "(ask for every position with MLXRT_SESSION_ALL_POSITIONS)");
  if (mx_session_check_feed(s, tokens, n, err)) return -1;
  if (s->pool && n == 1) {
    int32_t next;
    if (mx_pool_step(s->pool, s->slot, tokens[0], s->pos, NULL, 0.0, logits, &next, err)) return -1;
  } else if (s->pool) {
    int64_t done = 0;
    const int rc = mx_pool_feed(s->pool, s->slot, tokens, n, s->pos, NULL, 0.0, logits, NULL, cancel, &done, err);
    if (rc >= 0) advance(s, done);
    return rc;
  } else if (mx_decoder_feed(s->dec, tokens, n, s->pos, logits, NULL, err)) return -1;
  advance(s, n);
  return 0;
}

int mx_session_feed(mx_session *s, const int32_t *tokens, int64_t n, float *logits,
                    int all_positions, mlxrt_error *err) {
  return mx_session_feed_cancel(s, tokens, n, logits, all_positions, NULL, err);
}

int mx_session_feed_cancel(mx_session *s, const int32_t *tokens, int64_t n, float *logits,
                           int all_positions, const volatile int *cancel, mlxrt_error *err) {
  if (mx_flag_get(cancel)) return 1;
  if (s->dec || s->pool) return decoder_feed(s, tokens, n, logits, all_positions, cancel, err);
  int64_t V = s->m->cfg.vocab_size;
  for (int64_t done = 0; done < n;) {
    if (done && mx_flag_get(cancel)) return 1;
    int64_t k = n - done < s->batch ? n - done : s->batch;
    int last = done + k == n;
    float *out = NULL;
    if (logits && all_positions) out = logits + done * V;
    else if (logits && last) out = logits;
    if (mx_forward_chunk(s, tokens + done, k, out, all_positions, err)) return -1;
    done += k;
  }
  return 0;
}

/* One token through the session; its logits in a new buffer the caller frees (NULL on error). */
static float *feed_one(mx_session *s, int32_t token, mlxrt_error *err) {
  float *logits = mx_malloc((size_t)s->m->cfg.vocab_size * sizeof(float), err);
  if (logits && mx_session_feed(s, &token, 1, logits, 0, err)) {
    free(logits);
    return NULL;
  }
  return logits;
}

int mx_session_step_greedy(mx_session *s, int32_t token, int32_t *next, mlxrt_error *err) {
  if (s->dec || s->pool) {
    if (mx_session_check_feed(s, &token, 1, err)) return -1;
    if (s->pool ? mx_pool_step(s->pool, s->slot, token, s->pos, NULL, 0.0, NULL, next, err)
                : mx_decoder_feed(s->dec, &token, 1, s->pos, NULL, next, err))
      return -1;
    advance(s, 1);
    return 0;
  }
  float *logits = feed_one(s, token, err);
  if (!logits) return -1;
  const int bad = accel_logits_first_nonfinite(logits, s->m->cfg.vocab_size);
  int b = 0;
  for (int i = 1; i < s->m->cfg.vocab_size; i++)
    if (logits[i] > logits[b]) b = i;
  *next = b;
  free(logits);
  return bad >= 0 ? accel_fail_nonfinite(err, s->pos - 1, bad) : 0;
}

int mx_session_uses_decoder(const mx_session *s) { return s->dec != NULL || s->pool != NULL; }

int mx_session_step_sample(mx_session *s, int32_t token, mx_sampler *smp, int32_t *next, mlxrt_error *err) {
  const mx_sampler_params *sp = mx_sampler_get_params(smp);
  if ((s->dec || s->pool) && sp->repetition_penalty == 1.0f) {
    if (mx_session_check_feed(s, &token, 1, err)) return -1;
    accel_sample_params ap = {sp->temperature, sp->top_k, sp->top_p, sp->min_p};
    const double u = sp->temperature > 0.0f ? mx_sampler_uniform(smp) : 0.0;
    if (s->pool ? mx_pool_step(s->pool, s->slot, token, s->pos, &ap, u, NULL, next, err)
                : s->b->decoder_step(s->dec->dec, &token, 1, s->pos, &ap, u, NULL, next, err))
      return -1;
    advance(s, 1);
    return 0;
  }
  float *logits = feed_one(s, token, err);
  if (!logits) return -1;
  const int bad = accel_logits_first_nonfinite(logits, s->m->cfg.vocab_size);
  const int t = bad >= 0 ? accel_fail_nonfinite(err, s->pos - 1, bad) : mx_sampler_sample(smp, logits, err);
  free(logits);
  if (t < 0) return -1;
  *next = t;
  return 0;
}

int64_t mx_session_pos(const mx_session *s) { return s->pos; }
int64_t mx_session_capacity(const mx_session *s) { return s->capacity; }

uint64_t mx_model_kv_read_bytes(const mx_model *m, int64_t pos) {
  uint64_t b = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const mx_layer *L = &m->layers[i];
    int64_t seen = pos + 1;
    if (L->type == MX_LAYER_SLIDING && seen > m->cfg.sliding_window) seen = m->cfg.sliding_window;
    /* K and V, bf16; KV-shared layers read their source's cache too */
    b += (uint64_t)seen * 2u * (uint64_t)L->n_kv_heads * (uint64_t)L->head_dim * 2u;
  }
  return b;
}

uint64_t mx_session_kv_read_bytes(const mx_session *s, int64_t pos) {
  if (s->dec && !s->pool && s->b->decoder_kv_read_bytes) return s->b->decoder_kv_read_bytes(s->dec->dec, pos);
  return mx_model_kv_read_bytes(s->m, pos);
}

int mx_session_memory(const mx_session *s, mlxrt_memory *out, mlxrt_error *err) {
  memset(out, 0, sizeof *out);
  if (s->pool || s->dec) {
    accel_memory am;
    memset(&am, 0, sizeof am);
    if (s->pool) {
      if (mx_pool_memory(s->pool, &am, err)) return -1;
    } else if (!s->b->decoder_memory) return mx_fail(err, "the %s decoder does not report its memory", s->b->name);
    else if (s->b->decoder_memory(s->dec->dec, &am, err)) return -1;
    *out = (mlxrt_memory){am.kv_bytes, am.kv_positions, am.device_used, am.device_total};
    return 0;
  }
  int64_t backed = s->capacity;
  out->kv_bytes = mx_session_kv_bytes(s);
  for (int i = 0; i < s->m->n_layers; i++) {
    const mx_kv_layer *kv = &s->kv[i];
    if (!kv->dim) continue; /* a KV-shared layer reads its source's */
    if (kv->window == 0 && (int64_t)kv->n_pages * kv->page < backed) backed = (int64_t)kv->n_pages * kv->page;
  }
  out->kv_positions = backed;
  return 0;
}

/* the decoders keep the reference path's slack in their rings */
_Static_assert(MX_SESSION_REWIND_MAX == ACCEL_RING_SLACK, "rings of window + MX_SESSION_REWIND_MAX on every path");

int mx_session_rewind(mx_session *s, int64_t pos) {
  if (pos < 0) pos = 0;
  if (pos >= s->pos) return (int)s->pos;
  const int64_t window = s->m->cfg.sliding_window;
  if (window > 0) {
    /* a query at pos needs [pos - window + 1, pos); once positions up to kv_hi - 1 were
     * written, the ring holds [kv_hi - ring, kv_hi): anything further back was evicted and the
     * session starts over. The reference path's rings and a decoder's (accel_ring.h) keep the
     * same slack beyond the window. */
    const int64_t ring = window + MX_SESSION_REWIND_MAX;
    if (s->kv_hi > ring && s->kv_hi - pos > MX_SESSION_REWIND_MAX + 1) pos = 0;
  }
  s->pos = pos;
  if (pos == 0) s->kv_hi = 0;
  return (int)pos;
}

int mx_session_check_rowwise(const mx_session *s, mlxrt_error *err) {
  if (s->pool)
    return mx_fail(err, "the session runs on a step pool's decoder (batched with other sessions), which gives the "
                        "last position's logits only");
  if (s->dec)
    return mx_fail(err, "the %s backend's whole-step decoder runs this session and gives the last position's "
                        "logits only", s->b->name);
  if (!s->b->qmatmul_rowwise)
    return mx_fail(err, "the %s backend has no row-exact batched product", s->b->name);
  return 0;
}

int mx_session_feed_rowwise(mx_session *s, const int32_t *tokens, int64_t n, float *logits, mlxrt_error *err) {
  if (mx_session_check_rowwise(s, err)) return -1;
  if (n > s->batch)
    return mx_fail(err, "%lld tokens fed row-exact at once: at most the session's batch of %d", (long long)n, s->batch);
  s->rowwise = 1;
  const int rc = mx_forward_chunk(s, tokens, n, logits, 1, err);
  s->rowwise = 0;
  return rc;
}

uint64_t mx_session_kv_bytes(const mx_session *s) {
  uint64_t b = 0;
  for (int i = 0; i < s->m->n_layers; i++) b += mx_kv_bytes(&s->kv[i]);
  return b;
}
