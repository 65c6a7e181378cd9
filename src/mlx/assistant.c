/* Gemma 4's MTP drafter on the reference path (assistant.h): one token at a time through the
 * drafter's layers, with the model's K/V in place of its own. The rounding points are the
 * reference path's (reference.c): products and attention in bf16 as MLX rounds them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"
#include "mlx/assistant.h"
#include "mlx/ops.h"
#include "mlx/session_internal.h"

struct mx_assistant {
  const mx_model *a;
  accel_backend *b;
  mx_session *as; /* the drafter's scratch: one token, no K/V of its own */
  mx_session *t;  /* the model drafted for */
  int src[2];     /* per layer type: the model's last layer computing K/V of that type, or −1 */
  int ring_len[2];
  int32_t tok;
  int64_t pos;
  int V, H, B;
  float *in, *hid, *next_hid, *logits, *scores, *cent;
  int32_t *ids;
  uint16_t *rows;
};

void mx_assistant_free(mx_assistant *A) {
  if (!A) return;
  mx_session_free(A->as);
  float *fs[] = {A->in, A->hid, A->next_hid, A->logits, A->scores, A->cent};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) free(fs[i]);
  free(A->ids);
  free(A->rows);
  free(A);
}

/* The checks of assistant.h's create: 0, or -1 naming what does not fit. */
static int check_pair(mx_assistant *A, int draft_max, mlxrt_error *err) {
  const mx_model *a = A->a, *m = A->t->m;
  const mx_config *ac = &a->cfg, *mc = &m->cfg;
  if (!ac->assistant) return mx_fail(err, "%s is not a gemma4_assistant", a->path);
  if (mc->family != MX_GEMMA4)
    return mx_fail(err, "the MTP drafter %s drafts for Gemma 4 models; %s is a Gemma 3", a->path, m->path);
  if (ac->backbone_hidden_size != mc->hidden_size)
    return mx_fail(err, "the MTP drafter %s has backbone_hidden_size %d; the model %s has hidden_size %d", a->path,
                   ac->backbone_hidden_size, m->path, mc->hidden_size);
  if (ac->vocab_size != mc->vocab_size)
    return mx_fail(err, "the MTP drafter %s has a vocabulary of %d tokens, the model %s %d", a->path, ac->vocab_size,
                   m->path, mc->vocab_size);
  A->src[0] = A->src[1] = -1;
  for (int i = 0; i < mc->first_kv_shared_layer; i++)
    if (m->layers[i].has_kv) A->src[m->layers[i].type] = i;
  for (int li = 0; li < a->n_layers; li++) {
    const mx_layer *al = &a->layers[li];
    const int s = A->src[al->type];
    if (s < 0)
      return mx_fail(err, "the MTP drafter %s layer %d reads %s K/V, which the model %s has none of", a->path, li,
                     mx_layer_type_name(al->type), m->path);
    const mx_layer *ml = &m->layers[s];
    if (ml->head_dim != al->head_dim || ml->n_kv_heads != al->n_kv_heads)
      return mx_fail(err, "the MTP drafter %s layer %d (%s) expects %d K/V heads of %d; the model %s layer %d has %d of %d",
                     a->path, li, mx_layer_type_name(al->type), al->n_kv_heads, al->head_dim, m->path, s,
                     ml->n_kv_heads, ml->head_dim);
    if (ac->num_heads % al->n_kv_heads)
      return mx_fail(err, "the MTP drafter %s: %d query heads over %d K/V heads", a->path, ac->num_heads, al->n_kv_heads);
    if (al->head_dim > 1024)
      return mx_fail(err, "the MTP drafter %s layer %d: head_dim %d exceeds the reference path's limit of 1024", a->path,
                     li, al->head_dim);
    if (al->type == MX_LAYER_SLIDING) {
      /* a pass reads the sliding_window + 1 positions before it, while up to draft_max
       * positions after it may have been written and taken back */
      const int ring = A->t->kv[s].window;
      if (ac->sliding_window + 1 + draft_max > ring)
        return mx_fail(err, "the MTP drafter %s reads %d sliding positions; with %d drafts taken back the model's "
                            "rings of %d positions cannot hold them (fewer drafts, or a drafter with a smaller "
                            "sliding_window)", a->path, ac->sliding_window + 1, draft_max, ring);
      A->ring_len[MX_LAYER_SLIDING] = ring;
    }
  }
  return 0;
}

mx_assistant *mx_assistant_create(const mx_model *a, accel_backend *b, mx_session *target, int draft_max,
                                  mlxrt_error *err) {
  mx_assistant *A = mx_calloc(1, sizeof *A, err);
  if (!A) return NULL;
  A->a = a;
  A->b = b;
  A->t = target;
  if (check_pair(A, draft_max, err)) goto fail;
  const mx_config *c = &a->cfg;
  A->V = c->vocab_size;
  A->H = c->hidden_size;
  A->B = c->backbone_hidden_size;
  const int64_t cand = c->use_ordered_embeddings ? (int64_t)c->centroid_top_k * (c->vocab_size / c->num_centroids) : 0;
  if (!(A->as = mx_session_create_flags(a, b, 1, 1, MX_SESSION_REFERENCE, err)) ||
      !(A->in = mx_malloc((size_t)(2 * A->B) * sizeof(float), err)) ||
      !(A->hid = mx_malloc((size_t)A->B * sizeof(float), err)) ||
      !(A->next_hid = mx_malloc((size_t)A->B * sizeof(float), err)) ||
      !(A->logits = mx_malloc((size_t)A->V * sizeof(float), err)) ||
      !(A->scores = mx_malloc((size_t)(target->capacity + 1 > cand ? target->capacity + 1 : cand) * sizeof(float), err)) ||
      (cand && (!(A->cent = mx_malloc((size_t)c->num_centroids * sizeof(float), err)) ||
                !(A->ids = mx_malloc((size_t)cand * sizeof(int32_t), err)) ||
                !(A->rows = mx_malloc((size_t)(cand * A->H) * sizeof(uint16_t), err)))) ||
      mx_session_keep_hidden(target, err))
    goto fail;
  return A;
fail:
  mx_assistant_free(A);
  return NULL;
}

int mx_assistant_begin(mx_assistant *A, int32_t tok, int64_t pos, mlxrt_error *err) {
  const mx_session *t = A->t;
  const float *h = pos > 0 ? mx_session_hidden(t, pos - 1) : NULL;
  if (!h || pos != t->pos) return 1;
  /* the oldest sliding position read must still be in the rings (a chat turn taken back
   * further than a draft can leave later positions in its slot) */
  const int64_t lo = pos - A->a->cfg.sliding_window - 1;
  if (A->ring_len[MX_LAYER_SLIDING] && lo >= 0 && lo < t->kv_hi - A->ring_len[MX_LAYER_SLIDING]) return 1;
  (void)err;
  A->tok = tok;
  A->pos = pos;
  memcpy(A->hid, h, (size_t)A->B * sizeof(float));
  return 0;
}

void mx_assistant_push(mx_assistant *A, int32_t tok) {
  A->tok = tok;
  memcpy(A->hid, A->next_hid, (size_t)A->B * sizeof(float));
}

/* One query row (as->q, RoPE'd) over the model's K/V of positions [lo, pos) into as->att. */
static void attention(mx_assistant *A, const mx_layer *ly, const mx_kv_layer *kv, int64_t lo) {
  mx_session *s = A->as;
  const mx_config *c = &A->a->cfg;
  const int hd = ly->head_dim, nq = c->num_heads, rep = nq / ly->n_kv_heads;
  const mx_kv_view view = {kv, NULL, NULL, A->pos, kv->dim};
  for (int h = 0; h < nq; h++) /* a head at a time: the scores scratch holds one row */
    mx_ref_attend_group(&view, s->q + h * hd, 1, hd, h / rep, (float)c->attn_scale, lo, A->pos - 1, A->scores,
                        s->mlx_cpu, s->att + h * hd);
}

static int layer(mx_assistant *A, int li, mlxrt_error *err) {
  mx_session *s = A->as;
  const mx_config *c = &A->a->cfg;
  const mx_layer *ly = &A->a->layers[li];
  const int H = A->H, hd = ly->head_dim, nq = c->num_heads;
  const float eps = (float)c->rms_norm_eps;
  mx_rmsnorm_rows_mode(s->x, s->h, ly->input_norm.v, 1, H, eps, s->mlx_cpu);
  if (mx_ref_linear(s, &ly->q_proj, -1, s->x, 1, s->q, err)) return -1;
  mx_rmsnorm_rows_mode(s->q, s->q, ly->q_norm.v, nq, hd, eps, s->mlx_cpu);
  mx_rope_angles(s->rope_c, s->rope_s, hd / 2, s->inv_freq[li], (float)A->pos * s->rope_pos_scale[li], s->mlx_cpu);
  for (int h = 0; h < nq; h++) mx_rope_rotate(s->q + h * hd, hd, s->rope_c, s->rope_s, c->rope_traditional);
  int64_t lo = 0;
  if (ly->type == MX_LAYER_SLIDING && A->pos > c->sliding_window + 1) lo = A->pos - c->sliding_window - 1;
  attention(A, ly, &A->t->kv[A->src[ly->type]], lo);
  if (mx_ref_linear(s, &ly->o_proj, -1, s->att, 1, s->o, err)) return -1;
  mx_rmsnorm_rows_mode(s->o, s->o, ly->post_attn_norm.v, 1, H, eps, s->mlx_cpu);
  mx_add(s->h, s->h, s->o, H);
  mx_rmsnorm_rows_mode(s->x, s->h, ly->pre_ffw_norm.v, 1, H, eps, s->mlx_cpu);
  if (mx_ref_mlp(s, &ly->gate_proj, &ly->up_proj, &ly->down_proj, -1, s->x, 1, s->o, err)) return -1;
  mx_rmsnorm_rows_mode(s->o, s->o, ly->post_ffw_norm.v, 1, H, eps, s->mlx_cpu);
  mx_add(s->h, s->h, s->o, H);
  if (c->has_layer_scalar) mx_scale(s->h, s->h, ly->layer_scalar, H);
  return 0;
}

/* The ordered-embedding head: the top centroid_top_k centroids' tokens scored against xf, the
 * rest at the smallest of those scores minus 1 (transformers' Gemma4AssistantMaskedEmbedder). */
static int ordered_head(mx_assistant *A, const float *xf, mlxrt_error *err) {
  const mx_model *a = A->a;
  const mx_config *c = &a->cfg;
  const int C = c->num_centroids, K = c->centroid_top_k, per = A->V / C, H = A->H;
  if (mx_ref_linear(A->as, &a->centroids, -1, xf, 1, A->cent, err)) return -1;
  int n = 0;
  for (int k = 0; k < K; k++) { /* the k-th best centroid (ties: the lower index) */
    int best = -1;
    for (int j = 0; j < C; j++)
      if (A->cent[j] > -INFINITY && (best < 0 || A->cent[j] > A->cent[best])) best = j;
    if (best < 0) return mx_fail(err, "MTP drafter: its centroid scores are not finite");
    A->cent[best] = -INFINITY;
    memcpy(A->ids + n, a->token_ordering + (int64_t)best * per, (size_t)per * sizeof(int32_t));
    n += per;
  }
  const mx_linear *head = a->lm_head.present ? &a->lm_head : &a->embed;
  if (A->b->embed_rows(A->b, &head->aw, A->ids, n, A->rows, err)) return -1;
  float lo = INFINITY;
  for (int i = 0; i < n; i++) {
    const uint16_t *r = A->rows + (int64_t)i * H;
    float dot = 0.0f;
    for (int d = 0; d < H; d++) dot += xf[d] * mx_bf16_to_f32(r[d]);
    A->scores[i] = mx_round_bf16(dot);
    if (A->scores[i] < lo) lo = A->scores[i];
  }
  for (int v = 0; v < A->V; v++) A->logits[v] = lo - 1.0f;
  for (int i = 0; i < n; i++) A->logits[A->ids[i]] = A->scores[i];
  return 0;
}

const float *mx_assistant_logits(mx_assistant *A, mlxrt_error *err) {
  const mx_model *a = A->a, *m = A->t->m;
  mx_session *s = A->as;
  const int B = A->B, H = A->H;
  /* the model's embedding of the token as its own pass scales it, beside its hidden state */
  uint16_t *row = s->xb;
  if (A->t->b->embed_rows(A->t->b, &m->embed.aw, &A->tok, 1, row, err)) return NULL;
  mx_from_bf16(A->in, row, B);
  mx_scale(A->in, A->in, m->embed_scale, B);
  memcpy(A->in + B, A->hid, (size_t)B * sizeof(float));
  if (mx_ref_linear(s, &a->pre_proj, -1, A->in, 1, s->h, err)) return NULL;
  for (int li = 0; li < a->n_layers; li++)
    if (layer(A, li, err)) {
      mx_prefix(err, "MTP drafter layer %d", li);
      return NULL;
    }
  mx_rmsnorm_rows_mode(s->x, s->h, a->final_norm.v, 1, H, (float)a->cfg.rms_norm_eps, s->mlx_cpu);
  if (mx_ref_linear(s, &a->post_proj, -1, s->x, 1, A->next_hid, err)) return NULL;
  if (a->cfg.use_ordered_embeddings) {
    if (ordered_head(A, s->x, err)) return NULL;
  } else {
    const mx_linear *head = a->lm_head.present ? &a->lm_head : &a->embed;
    if (mx_ref_linear(s, head, -1, s->x, 1, A->logits, err)) return NULL;
  }
  return A->logits;
}
