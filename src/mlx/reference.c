/* The reference forward pass for Gemma 3 and Gemma 4 (every text variant), in plain C with
 * MLX's rounding points. Matrices are applied only through the accel boundary. Read top to
 * bottom: helpers, attention, one layer, the whole pass (the session's state and API:
 * session.c). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "accel/accel_attend.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/mlx_cpu_math.h"
#include "mlx/decoder_desc.h"
#include "mlx/ops.h"
#include "mlx/sampler.h"
#include "mlx/session_internal.h"


/* ---- matrices through the boundary ------------------------------------------------------- */
int mx_ref_linear(mx_session *s, const mx_linear *l, int expert, const float *x, int64_t n, float *y,
                  mlxrt_error *err) {
  int64_t cols = l->aw.spec.cols, rows = l->aw.spec.rows;
  mx_to_bf16(s->xb, x, n * cols);
  if (s->rowwise && n > 1 ? s->b->qmatmul_rowwise(s->b, &l->aw, expert, s->xb, n, y, err)
                          : s->b->qmatmul(s->b, &l->aw, expert, s->xb, n, y, err))
    return -1;
  mx_round_rows(y, n * rows);
  return 0;
}


/* ---- attention ------------------------------------------------------------------------------ */
static const uint16_t *view_key(const mx_kv_view *v, int64_t p) {
  return p < v->pos0 ? mx_kv_key(v->cache, p) : v->ck + (p - v->pos0) * v->dim;
}
static const uint16_t *view_value(const mx_kv_view *v, int64_t p) {
  return p < v->pos0 ? mx_kv_value(v->cache, p) : v->cv + (p - v->pos0) * v->dim;
}

static const uint16_t *view_key_fn(const void *v, int64_t p) { return view_key(v, p); }
static const uint16_t *view_value_fn(const void *v, int64_t p) { return view_value(v, p); }

void mx_ref_attend_group(const mx_kv_view *kv, const float *qv, int nh, int hd, int g, float scale, int64_t lo,
                         int64_t hi, float *scores, int mlx_cpu, float *out) {
  const accel_kv_rows rows = {kv, view_key_fn, view_value_fn};
  accel_attend_group(&rows, qv, nh, hd, g, scale, lo, hi, scores, mlx_cpu, out);
}

/* Every query row of the chunk: a sliding layer's query at p sees keys p−window < k ≤ p. */
/* One task of the attention (accel_attend.h accel_attend_task). */
typedef struct att_job {
  mx_session *s;
  const mx_kv_view *kv;
  int nq, hd, window;
  float scale;
  int64_t per_worker; /* scores scratch per worker */
  accel_attend_split sp;
} att_job;

static void att_task(void *ctx, int64_t t, int worker) {
  const att_job *j = ctx;
  int64_t i;
  int g, h0, nh, hoff;
  accel_attend_task(&j->sp, t, &i, &g, &h0, &nh, &hoff);
  const int64_t p = j->kv->pos0 + i, lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
  const int64_t off = (i * j->nq + hoff) * j->hd;
  mx_ref_attend_group(j->kv, j->s->q + off, nh, j->hd, g, j->scale, lo, p, j->s->scores + worker * j->per_worker,
                      j->s->mlx_cpu, j->s->att + off);
}

/* Every row's groups as tasks on the backend's host threads (accel_attend_split). */
static int attention(mx_session *s, const mx_layer *ly, const mx_kv_view *kv, int64_t n,
                     float scale, int window, mlxrt_error *err) {
  const mx_config *c = &s->m->cfg;
  int hd = ly->head_dim, nq = c->num_heads, nkv = ly->n_kv_heads, rep = nq / nkv;
  const int workers = accel_host_workers(s->b);
  att_job j = {s, kv, nq, hd, window, scale, 0, accel_attend_split_make(n, nkv, rep, workers)};
  j.per_worker = accel_attend_scratch(&j.sp, kv->pos0 + n);
  const int64_t need = j.per_worker * workers;
  if (need > s->scores_cap) {
    float *ns = realloc(s->scores, (size_t)need * sizeof(float));
    if (!ns) return mx_fail(err, "out of memory for attention scores (%lld positions)", (long long)need);
    s->scores = ns;
    s->scores_cap = need;
  }
  if (hd > 1024) return mx_fail(err, "head_dim %d exceeds the reference path's limit of 1024", hd);
  accel_host_for(s->b, accel_attend_tasks(&j.sp, n), att_task, &j);
  return 0;
}

static int commit_kv(mx_session *s, int layer, const uint16_t *ck, const uint16_t *cv,
                     int64_t pos0, int64_t n, mlxrt_error *err) {
  mx_kv_layer *kv = &s->kv[layer];
  int64_t first = kv->window > 0 && n > kv->window ? n - kv->window : 0;
  for (int64_t i = first; i < n; i++) {
    if (mx_kv_reserve(kv, pos0 + i, err)) return -1;
    memcpy(mx_kv_key(kv, pos0 + i), ck + i * kv->dim, (size_t)kv->dim * sizeof(uint16_t));
    memcpy(mx_kv_value(kv, pos0 + i), cv + i * kv->dim, (size_t)kv->dim * sizeof(uint16_t));
  }
  return 0;
}

/* ---- one layer ------------------------------------------------------------------------------ */
static int attention_block(mx_session *s, int li, int64_t n, mlxrt_error *err) {
  const mx_model *m = s->m;
  const mx_config *c = &m->cfg;
  const mx_layer *ly = &m->layers[li];
  int hd = ly->head_dim, nq = c->num_heads, nkv = ly->n_kv_heads;
  int kvd = nkv * hd;
  float eps = (float)c->rms_norm_eps;
  const float *inv = s->inv_freq[li];
  int trad = c->rope_traditional;
  float pscale = s->rope_pos_scale[li], *rc = s->rope_c, *rs = s->rope_s;
  int64_t pos0 = s->pos;

  mx_rmsnorm_rows_mode(s->x, s->h, ly->input_norm.v, (int)n, c->hidden_size, eps, s->mlx_cpu);
  if (mx_ref_linear(s, &ly->q_proj, -1, s->x, n, s->q, err)) return -1;
  mx_rmsnorm_rows_mode(s->q, s->q, ly->q_norm.v, (int)(n * nq), hd, eps, s->mlx_cpu);
  for (int64_t i = 0; i < n; i++) {
    mx_rope_angles(rc, rs, hd / 2, inv, (float)(pos0 + i) * pscale, s->mlx_cpu);
    for (int h = 0; h < nq; h++) mx_rope_rotate(s->q + (i * nq + h) * hd, hd, rc, rs, trad);
  }

  mx_kv_view view;
  int src = ly->kv_source;
  uint16_t *ck = s->chunk_k[src] ? s->chunk_k[src] : s->stage_k;
  uint16_t *cv = s->chunk_v[src] ? s->chunk_v[src] : s->stage_v;
  if (ly->has_kv) {
    if (mx_ref_linear(s, &ly->k_proj, -1, s->x, n, s->k, err)) return -1;
    if (ly->k_eq_v) memcpy(s->v, s->k, (size_t)(n * kvd) * sizeof(float));
    else if (mx_ref_linear(s, &ly->v_proj, -1, s->x, n, s->v, err)) return -1;
    mx_rmsnorm_rows_mode(s->k, s->k, ly->k_norm.v, (int)(n * nkv), hd, eps, s->mlx_cpu);
    for (int64_t i = 0; i < n; i++) {
      mx_rope_angles(rc, rs, hd / 2, inv, (float)(pos0 + i) * pscale, s->mlx_cpu);
      for (int h = 0; h < nkv; h++) mx_rope_rotate(s->k + (i * nkv + h) * hd, hd, rc, rs, trad);
    }
    if (c->family == MX_GEMMA4) /* v_norm: weightless RMSNorm per head */
      mx_rmsnorm_rows_mode(s->v, s->v, NULL, (int)(n * nkv), hd, eps, s->mlx_cpu);
    mx_to_bf16(ck, s->k, n * kvd);
    mx_to_bf16(cv, s->v, n * kvd);
  }
  view.cache = &s->kv[src];
  view.ck = ck;
  view.cv = cv;
  view.pos0 = pos0;
  view.dim = kvd;
  float scale = (float)c->attn_scale;
  int window = ly->type == MX_LAYER_SLIDING ? c->sliding_window : 0;
  if (attention(s, ly, &view, n, scale, window, err)) return -1;
  if (ly->has_kv && !s->feeds_shared[li])
    if (commit_kv(s, li, ck, cv, pos0, n, err)) return -1;

  if (mx_ref_linear(s, &ly->o_proj, -1, s->att, n, s->o, err)) return -1;
  mx_rmsnorm_rows_mode(s->o, s->o, ly->post_attn_norm.v, (int)n, c->hidden_size, eps, s->mlx_cpu);
  mx_add(s->h, s->h, s->o, n * c->hidden_size);
  return 0;
}

/* GeGLU in chunks on the backend's host threads (elementwise: the same bits however cut) */
#define GEGLU_CHUNK 4096
typedef struct geglu_job {
  float *out;
  const float *g, *u;
  int64_t n;
} geglu_job;
static void geglu_task(void *ctx, int64_t t, int worker) {
  const geglu_job *j = ctx;
  const int64_t a = t * GEGLU_CHUNK, len = j->n - a < GEGLU_CHUNK ? j->n - a : GEGLU_CHUNK;
  (void)worker;
  mx_geglu(j->out + a, j->g + a, j->u + a, len);
}

int mx_ref_mlp(mx_session *s, const mx_linear *gate, const mx_linear *up, const mx_linear *down, int expert,
               const float *in, int64_t n, float *out, mlxrt_error *err) {
  int64_t inter = gate->aw.spec.rows;
  if (mx_ref_linear(s, gate, expert, in, n, s->g, err)) return -1;
  if (mx_ref_linear(s, up, expert, in, n, s->u, err)) return -1;
  const geglu_job j = {s->t1, s->g, s->u, n * inter};
  accel_host_for(s->b, (j.n + GEGLU_CHUNK - 1) / GEGLU_CHUNK, geglu_task, (void *)&j);
  return mx_ref_linear(s, down, expert, s->t1, n, out, err);
}

/* Gemma 4 26B-A4B: router over the residual, top-k experts, weighted sum. Token by token. */
static int moe_block(mx_session *s, const mx_layer *ly, int64_t n, float *out, mlxrt_error *err) {
  const mx_config *c = &s->m->cfg;
  int H = c->hidden_size, E = c->num_experts, K = c->top_k_experts;
  float eps = (float)c->rms_norm_eps;
  float rw[4096], scores[512], y[8192];
  int idx[64];
  float wts[64];
  if (H > 8192 || E > 512 || K > 64) return mx_fail(err, "MoE sizes beyond the reference path's limits");
  float root = (float)(1.0 / sqrt((double)H));
  float *rs = s->t2; /* router weight: bf16(scale · H^-½) */
  /* mlx-cpu: MLX rounds the Python scalar H^-½ to the array's dtype (bf16) first */
  if (s->mlx_cpu) root = mx_round_bf16(root);
  for (int i = 0; i < H; i++) rs[i] = mx_round_bf16(ly->router_scale.v[i] * root);
  for (int64_t t = 0; t < n; t++) {
    const float *hrow = s->h + t * H;
    mx_rmsnorm_mode(rw, hrow, rs, H, eps, s->mlx_cpu);
    if (mx_ref_linear(s, &ly->router_proj, -1, rw, 1, scores, err)) return -1;
    /* top-k by score (ties: lower index first) */
    for (int k = 0; k < K; k++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int used = 0;
        for (int j = 0; j < k; j++) used |= idx[j] == e;
        if (!used && (best < 0 || scores[e] > scores[best])) best = e;
      }
      idx[k] = best;
    }
    float mxs = -INFINITY, sum = 0.0f;
    for (int k = 0; k < K; k++) mxs = fmaxf(mxs, scores[idx[k]]);
    if (s->mlx_cpu) { /* mx.softmax(precise=False) on bf16: every operation rounded to bf16 */
      for (int k = 0; k < K; k++) sum = mx_round_bf16(sum + (wts[k] = mx_round_bf16(mx_mlxcpu_expf(mx_round_bf16(scores[idx[k]] - mxs)))));
      float inv = mx_round_bf16(1.0f / sum);
      for (int k = 0; k < K; k++) wts[k] = mx_round_bf16(mx_round_bf16(wts[k] * inv) * ly->per_expert_scale.v[idx[k]]);
    } else {
      for (int k = 0; k < K; k++) sum += wts[k] = expf(scores[idx[k]] - mxs);
      for (int k = 0; k < K; k++)
        wts[k] = mx_round_bf16(mx_round_bf16(wts[k] / sum) * ly->per_expert_scale.v[idx[k]]);
    }
    float xin[8192];
    mx_rmsnorm_mode(xin, hrow, ly->pre_ffw_norm_2.v, H, eps, s->mlx_cpu);
    float acc[8192];
    memset(acc, 0, (size_t)H * sizeof(float));
    for (int k = 0; k < K; k++) {
      if (mx_ref_mlp(s, &ly->exp_gate, &ly->exp_up, &ly->exp_down, idx[k], xin, 1, y, err)) return -1;
      if (s->mlx_cpu) /* (w·y).sum(-2): MLX sums bf16 in bf16 */
        for (int i = 0; i < H; i++) acc[i] = mx_round_bf16(acc[i] + mx_round_bf16(wts[k] * y[i]));
      else
        for (int i = 0; i < H; i++) acc[i] += mx_round_bf16(wts[k] * y[i]);
    }
    float *o = out + t * H;
    for (int i = 0; i < H; i++) o[i] = mx_round_bf16(acc[i]);
    mx_rmsnorm_mode(o, o, ly->post_ffw_norm_2.v, H, eps, s->mlx_cpu);
  }
  return 0;
}

static int ffn_block(mx_session *s, int li, int64_t n, mlxrt_error *err) {
  const mx_model *m = s->m;
  const mx_config *c = &m->cfg;
  const mx_layer *ly = &m->layers[li];
  int H = c->hidden_size;
  float eps = (float)c->rms_norm_eps;
  mx_rmsnorm_rows_mode(s->x, s->h, ly->pre_ffw_norm.v, (int)n, H, eps, s->mlx_cpu);
  if (mx_ref_mlp(s, &ly->gate_proj, &ly->up_proj, &ly->down_proj, -1, s->x, n, s->o, err)) return -1;
  if (c->enable_moe) {
    mx_rmsnorm_rows_mode(s->o, s->o, ly->post_ffw_norm_1.v, (int)n, H, eps, s->mlx_cpu);
    float *h2 = s->moe;
    if (moe_block(s, ly, n, h2, err)) return -1;
    mx_add(s->o, s->o, h2, n * H);
  }
  mx_rmsnorm_rows_mode(s->o, s->o, ly->post_ffw_norm.v, (int)n, H, eps, s->mlx_cpu);
  mx_add(s->h, s->h, s->o, n * H);

  if (c->hidden_size_per_layer_input > 0) {
    int P = c->hidden_size_per_layer_input, L = m->n_layers;
    if (mx_ref_linear(s, &ly->ple_gate, -1, s->h, n, s->g, err)) return -1;
    for (int64_t t = 0; t < n; t++)
      for (int j = 0; j < P; j++) {
        float gg = mx_gelu_approx(s->g[t * P + j]);
        s->t1[t * P + j] = mx_round_bf16(gg * s->ple[(t * L + li) * P + j]);
      }
    if (mx_ref_linear(s, &ly->ple_proj, -1, s->t1, n, s->o, err)) return -1;
    mx_rmsnorm_rows_mode(s->o, s->o, ly->post_ple_norm.v, (int)n, H, eps, s->mlx_cpu);
    mx_add(s->h, s->h, s->o, n * H);
  }
  if (c->has_layer_scalar) mx_scale(s->h, s->h, ly->layer_scalar, n * H);
  return 0;
}

/* ---- per-layer embeddings (Gemma 4 E2B/E4B) ------------------------------------------------- */
static int per_layer_inputs(mx_session *s, const int32_t *tokens, int64_t n, mlxrt_error *err) {
  const mx_model *m = s->m;
  const mx_config *c = &m->cfg;
  int P = c->hidden_size_per_layer_input, L = m->n_layers;
  int64_t LP = (int64_t)L * P;
  float eps = (float)c->rms_norm_eps;
  /* projection of the scaled embedding: bf16(proj · bf16(H^-½)), RMSNorm over each P slice */
  if (mx_ref_linear(s, &m->per_layer_model_proj, -1, s->h, n, s->ple, err)) return -1;
  mx_scale(s->ple, s->ple, mx_round_bf16((float)(1.0 / sqrt((double)c->hidden_size))), n * LP);
  mx_rmsnorm_rows_mode(s->ple, s->ple, m->per_layer_proj_norm.v, (int)(n * L), P, eps, s->mlx_cpu);
  /* the token's own per-layer rows: bf16(E_pl[tok] · bf16(√P)) */
  uint16_t *rows = s->xb;
  for (int64_t t = 0; t < n; t++) {
    int32_t id = tokens[t];
    if (id < 0 || id >= c->vocab_size_per_layer_input) id = 0;
    if (s->b->embed_rows(s->b, &m->embed_per_layer.aw, &id, 1, rows, err)) return -1;
    float sc = mx_round_bf16(sqrtf((float)P));
    float half = mx_round_bf16((float)(1.0 / sqrt(2.0)));
    for (int64_t j = 0; j < LP; j++) {
      float e = mx_round_bf16(mx_bf16_to_f32(rows[j]) * sc);
      float *d = &s->ple[t * LP + j];
      *d = mx_round_bf16(mx_round_bf16(*d + e) * half);
    }
  }
  return 0;
}

/* ---- the whole pass ------------------------------------------------------------------------ */
/* Rows row0 … row0+nrows−1 of the chunk fed at p0: the final norm (kept for a drafter when
 * asked: mx_session_keep_hidden), the head, the softcap. */
static int output_logits(mx_session *s, int64_t p0, int64_t row0, int64_t nrows, float *logits, mlxrt_error *err) {
  const mx_model *m = s->m;
  const mx_config *c = &m->cfg;
  int H = c->hidden_size;
  const mx_linear *head = m->lm_head.present ? &m->lm_head : &m->embed;
  int64_t V = c->vocab_size;
  mx_rmsnorm_rows_mode(s->x, s->h + row0 * H, m->final_norm.v, (int)nrows, H, (float)c->rms_norm_eps, s->mlx_cpu);
  if (s->hid) {
    if (row0 == 0 || s->hid_pos0 + s->hid_n != p0 + row0 || s->hid_n + nrows > s->batch)
      s->hid_n = 0, s->hid_pos0 = p0 + row0;
    memcpy(s->hid + s->hid_n * H, s->x, (size_t)(nrows * H) * sizeof(float));
    s->hid_n += nrows;
  }
  if (mx_ref_linear(s, head, -1, s->x, nrows, logits, err)) return -1;
  if (c->final_logit_softcap > 0) {
    float cap = (float)c->final_logit_softcap;
    for (int64_t i = 0; i < nrows * V; i++)
      logits[i] = mx_round_bf16(mx_round_bf16(tanhf(mx_round_bf16(logits[i] / cap))) * cap);
  }
  return 0;
}

/* Every feed's input checks: ids inside the vocabulary, room in the cache. */
int mx_forward_chunk(mx_session *s, const int32_t *tokens, int64_t n, float *logits,
                         int all_positions, mlxrt_error *err) {
  const mx_model *m = s->m;
  const mx_config *c = &m->cfg;
  int H = c->hidden_size;
  if (mx_session_check_feed(s, tokens, n, err)) return -1;
  uint16_t *rows = s->xb;
  if (s->b->embed_rows(s->b, &m->embed.aw, tokens, n, rows, err)) return -1;
  mx_from_bf16(s->h, rows, n * H);
  mx_scale(s->h, s->h, m->embed_scale, n * H);
  if (c->hidden_size_per_layer_input > 0 && per_layer_inputs(s, tokens, n, err)) return -1;

  for (int li = 0; li < m->n_layers; li++) {
    if (attention_block(s, li, n, err)) return mx_prefix(err, "layer %d", li);
    if (ffn_block(s, li, n, err)) return mx_prefix(err, "layer %d", li);
  }
  for (int li = 0; li < m->n_layers; li++)
    if (s->feeds_shared[li] && commit_kv(s, li, s->chunk_k[li], s->chunk_v[li], s->pos, n, err))
      return -1;
  s->pos += n;
  if (s->pos > s->kv_hi) s->kv_hi = s->pos;

  if (!logits) return 0;
  const int64_t p0 = s->pos - n;
  if (!all_positions) return output_logits(s, p0, n - 1, 1, logits, err);
  /* (row by row the head's weights are read once per call: every row in one) */
  const int64_t step = s->rowwise ? n : 8;
  for (int64_t r = 0; r < n; r += step) {
    int64_t k = n - r < step ? n - r : step;
    if (output_logits(s, p0, r, k, logits + r * c->vocab_size, err)) return -1;
  }
  return 0;
}
