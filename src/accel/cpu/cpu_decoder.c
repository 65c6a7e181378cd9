/* The CPU whole-step decoder (dense and MoE layers, per-layer embeddings, KV sharing). Same operations, order and bf16 rounding
 * points as the reference path (docs/NUMERICS.md): activations are floats holding bf16 values,
 * every op rounds its output once, reductions run in float32. Prompts run in chunks of up to
 * CPU_DEC_CHUNK tokens (the reference session's default batch), so the matrix products see
 * the same row counts and the results are bit-identical. */
#include "accel/cpu/cpu_decoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_attend.h"
#include "accel/accel_ring.h"
#include "accel/accel_sample.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/gelu.h"

#define R mx_round_bf16

typedef struct dec_kv {
  int64_t slots;       /* ring size (sliding: window + ACCEL_RING_SLACK) or capacity (full) */
  int64_t alloc;       /* slots allocated so far (grown on demand) */
  uint16_t *k, *v;     /* [alloc, dim] bf16 */
  int dim;
  int window;          /* > 0: ring */
} dec_kv;

struct accel_decoder {
  accel_backend *b;
  const accel_model_desc *d;
  int64_t capacity;
  dec_kv *kv;
  int64_t chunk; /* rows the scratch below holds */
  float *h, *x, *q, *k, *v, *att, *o, *g, *u, *t1, *scores, *logits;
  uint16_t *xb, *ck, *cv;
  int64_t max_q, max_kv, max_inter, max_cols, scores_cap;
  /* MoE layers: the block's output rows [chunk, H], and one token's scratch: router scores
   * [max_experts], router input, expert input, expert output, sum [H each], ids and weights [max_top_k] */
  float *mo, *me;
  int *mid;
  int max_experts, max_top_k;
  /* KV sharing: a layer whose cache later layers read keeps its chunk's K/V in fk/fv until the
   * chunk has passed every layer (a ring committed earlier would have lost positions those
   * layers' first queries still see), as the reference path does */
  int *feeds;
  uint16_t **fk, **fv;
  /* per-layer embeddings: the chunk's inputs [chunk, n_layers · ple_dim], one table row (bf16) */
  float *ple;
  uint16_t *pe;
  /* batched decode: a decoder of the same model and capacity per slot (cpu_decoder_batch_*),
   * whose caches the parent's batched passes use; the passes' logits [nslots, vocab] */
  accel_decoder **slot;
  int nslots;
  float *blogits;
  int blogits_rows;
  struct dec_view *views; /* [nslots]: a batched pass's attention rows */
  int rowwise; /* a batched pass: products row-exact (qmatmul_rowwise), each row's bits its own */
};

/* The rows a pass runs: a chunk of one sequence (D's own caches, positions pos0 .. pos0 + n − 1,
 * causal among them), or a batched step's rows (row i: one token at pos[i] in the caches of
 * slot decoder slot[i]). */
typedef struct dec_rows {
  int64_t n, pos0;
  const int64_t *pos;
  accel_decoder *const *slot; /* NULL: a chunk */
} dec_rows;

static int64_t row_pos(const dec_rows *rw, int64_t i) { return rw->slot ? rw->pos[i] : rw->pos0 + i; }

/* ---- elementwise math (the reference path's rounding points) ------------------------------ */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(ss / (float)n + eps);
  for (int i = 0; i < n; i++) {
    float v = R(x[i] * r);
    y[i] = w ? R(v * w[i]) : v;
  }
}

static void rmsnorm_rows(float *y, const float *x, const float *w, int64_t rows, int n, float eps) {
  for (int64_t r = 0; r < rows; r++) rmsnorm(y + r * n, x + r * n, w, n, eps);
}

/* gelu_approx op by op in bf16 (base/gelu.h: by table on bf16 inputs, the same bits) */
static float gelu_approx(float x) { return mx_gelu_approx_bf16(mx_gelu_table_ready(), x); }

static void rope(float *x, int dim, const float *inv_freq, float pos, int traditional) {
  int half = dim / 2;
  for (int j = 0; j < half; j++) {
    if (inv_freq[j] == 0.0f) continue;
    float ang = pos * inv_freq[j];
    float c = R(cosf(ang)), s = R(sinf(ang));
    float *pa = traditional ? &x[2 * j] : &x[j], *pb = traditional ? &x[2 * j + 1] : &x[j + half];
    float a = *pa, b = *pb;
    *pa = R(R(a * c) - R(b * s));
    *pb = R(R(b * c) + R(a * s));
  }
}

static void add_rows(float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = R(a[i] + b[i]);
}

static void scale_rows(float *y, const float *x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = R(x[i] * s);
}

static void to_bf16(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = mx_f32_to_bf16(src[i]);
}

/* y[n, rows] = bf16(x · Wᵀ) through the backend's own product (of slab `expert` of a stacked W) */
static int linear_e(accel_decoder *D, const accel_weight *w, int expert, const float *x, int64_t n, float *y,
                    mlxrt_error *err) {
  to_bf16(D->xb, x, n * w->spec.cols);
  if (D->rowwise && n > 1 ? D->b->qmatmul_rowwise(D->b, w, expert, D->xb, n, y, err)
                          : D->b->qmatmul(D->b, w, expert, D->xb, n, y, err))
    return -1;
  for (int64_t i = 0; i < n * w->spec.rows; i++) y[i] = R(y[i]);
  return 0;
}

static int linear(accel_decoder *D, const accel_weight *w, const float *x, int64_t n, float *y, mlxrt_error *err) {
  return linear_e(D, w, -1, x, n, y, err);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */
void cpu_decoder_free(accel_decoder *D) {
  if (!D) return;
  for (int s = 0; s < D->nslots; s++) cpu_decoder_free(D->slot[s]);
  free(D->blogits);
  free(D->views);
  free(D->slot);
  if (D->kv)
    for (int i = 0; i < D->d->n_layers; i++) {
      free(D->kv[i].k);
      free(D->kv[i].v);
    }
  free(D->kv);
  if (D->fk)
    for (int i = 0; i < D->d->n_layers; i++) {
      free(D->fk[i]);
      free(D->fv[i]);
    }
  free(D->fk);
  free(D->fv);
  free(D->feeds);
  free(D->ple);
  free(D->pe);
  float *fs[] = {D->h, D->x, D->q, D->k, D->v, D->att, D->o, D->g, D->u, D->t1, D->scores, D->logits};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) free(fs[i]);
  free(D->xb);
  free(D->ck);
  free(D->cv);
  free(D->mo);
  free(D->me);
  free(D->mid);
  free(D);
}

accel_decoder *cpu_decoder_create(accel_backend *b, const accel_model_desc *d, int64_t capacity,
                                  mlxrt_error *err) {
  if (!d || d->n_layers <= 0 || d->hidden <= 0 || d->n_heads <= 0 || d->vocab <= 0 || !d->layers ||
      !d->embed || !d->lm_head || !d->final_norm || capacity <= 0) {
    mx_fail(err, "decoder: incomplete model description or capacity %lld", (long long)capacity);
    return NULL;
  }
  accel_decoder *D = mx_calloc(1, sizeof *D, err);
  if (!D) return NULL;
  D->b = b;
  D->d = d;
  D->capacity = capacity;
  if (!(D->kv = mx_calloc((size_t)d->n_layers, sizeof *D->kv, err)) ||
      !(D->feeds = mx_calloc((size_t)d->n_layers, sizeof *D->feeds, err)) ||
      !(D->fk = mx_calloc((size_t)d->n_layers, sizeof *D->fk, err)) ||
      !(D->fv = mx_calloc((size_t)d->n_layers, sizeof *D->fv, err)))
    goto fail;
  int64_t H = d->hidden;
  D->max_cols = H;
  if (accel_check_weight(d->embed, d->vocab, H, "embedding", -1, err) ||
      accel_check_weight(d->lm_head, d->vocab, H, "lm_head", -1, err) || accel_check_ple(d, err))
    goto fail;
  if (d->ple_dim > 0) {
    if (d->ple_dim > D->max_inter) D->max_inter = d->ple_dim;
    if (!(D->pe = mx_malloc((size_t)d->n_layers * (size_t)d->ple_dim * sizeof(uint16_t), err))) goto fail;
  }
  for (int i = 0; i < d->n_layers; i++) {
    const accel_layer_desc *l = &d->layers[i];
    if (l->n_kv_heads <= 0 || d->n_heads % l->n_kv_heads || l->head_dim <= 0 || l->head_dim > 1024 ||
        l->head_dim % 2 || !l->inv_freq || !l->input_norm || !l->post_attn_norm || !l->pre_ffw_norm ||
        !l->post_ffw_norm || !l->q_norm) {
      mx_fail(err, "decoder: layer %d: unsupported heads (%d q, %d kv, head_dim %d) or missing vectors", i,
              d->n_heads, l->n_kv_heads, l->head_dim);
      goto fail;
    }
    int64_t qd = (int64_t)d->n_heads * l->head_dim, kvd = (int64_t)l->n_kv_heads * l->head_dim;
    if (accel_check_layer_weights(d, i, err)) goto fail;
    if (qd > D->max_q) D->max_q = qd;
    if (kvd > D->max_kv) D->max_kv = kvd;
    if (l->intermediate > D->max_inter) D->max_inter = l->intermediate;
    if (l->moe.intermediate > D->max_inter) D->max_inter = l->moe.intermediate;
    if (l->moe.experts > D->max_experts) D->max_experts = l->moe.experts;
    if (l->moe.experts && l->moe.top_k > D->max_top_k) D->max_top_k = l->moe.top_k;
    if (l->kv_source != i) D->feeds[l->kv_source] = 1;
    dec_kv *kv = &D->kv[i];
    kv->dim = (int)kvd;
    kv->window = l->sliding && d->sliding_window > 0 ? d->sliding_window : 0;
    kv->slots = kv->window > 0 && kv->window + ACCEL_RING_SLACK < capacity ? kv->window + ACCEL_RING_SLACK : capacity;
  }
  if (D->max_q > D->max_cols) D->max_cols = D->max_q;
  if (D->max_inter > D->max_cols) D->max_cols = D->max_inter;
  if (!(D->logits = mx_malloc((size_t)d->vocab * sizeof(float), err))) goto fail;
  if (D->max_experts &&
      (!(D->me = mx_malloc((size_t)(D->max_experts + 4 * H + D->max_top_k) * sizeof(float), err)) ||
       !(D->mid = mx_malloc((size_t)D->max_top_k * sizeof(int), err))))
    goto fail;
  return D;
fail:
  cpu_decoder_free(D);
  return NULL;
}

/* Scratch for chunks of n rows (grown once to the largest chunk seen). */
static int ensure_chunk(accel_decoder *D, int64_t n, mlxrt_error *err) {
  if (n <= D->chunk) return 0;
  int64_t H = D->d->hidden;
  float **fs[] = {&D->h, &D->x, &D->o, &D->q, &D->att, &D->k, &D->v, &D->g, &D->u, &D->t1, &D->mo};
  int64_t widths[] = {H, H, H, D->max_q, D->max_q, D->max_kv, D->max_kv, D->max_inter, D->max_inter, D->max_inter,
                      D->max_experts ? H : 1};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
    free(*fs[i]);
    if (!(*fs[i] = mx_malloc((size_t)(n * widths[i]) * sizeof(float), err))) return -1;
  }
  uint16_t **bs[] = {&D->xb, &D->ck, &D->cv};
  int64_t bw[] = {D->max_cols, D->max_kv, D->max_kv};
  for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
    free(*bs[i]);
    if (!(*bs[i] = mx_malloc((size_t)(n * bw[i]) * sizeof(uint16_t), err))) return -1;
  }
  for (int i = 0; i < D->d->n_layers; i++) {
    if (!D->feeds[i]) continue;
    const int64_t kvd = D->kv[i].dim;
    free(D->fk[i]);
    free(D->fv[i]);
    D->fv[i] = NULL;
    if (!(D->fk[i] = mx_malloc((size_t)(n * kvd) * sizeof(uint16_t), err)) ||
        !(D->fv[i] = mx_malloc((size_t)(n * kvd) * sizeof(uint16_t), err)))
      return -1;
  }
  if (D->d->ple_dim > 0) {
    free(D->ple);
    if (!(D->ple = mx_malloc((size_t)(n * D->d->n_layers * D->d->ple_dim) * sizeof(float), err))) return -1;
  }
  D->chunk = n;
  return 0;
}

static int kv_reserve(dec_kv *kv, int64_t pos, mlxrt_error *err) {
  int64_t slot = pos >= kv->slots ? kv->slots - 1 : pos;
  if (slot < kv->alloc) return 0;
  int64_t na = kv->alloc ? kv->alloc * 2 : 256;
  while (na <= slot) na *= 2;
  if (na > kv->slots) na = kv->slots;
  size_t bytes = (size_t)na * (size_t)kv->dim * sizeof(uint16_t);
  uint16_t *k = realloc(kv->k, bytes);
  if (!k) return mx_fail(err, "decoder: out of memory growing the KV cache to %lld positions", (long long)na);
  kv->k = k;
  uint16_t *v = realloc(kv->v, bytes);
  if (!v) return mx_fail(err, "decoder: out of memory growing the KV cache to %lld positions", (long long)na);
  kv->v = v;
  kv->alloc = na;
  return 0;
}

int cpu_decoder_memory(accel_decoder *D, accel_memory *m, mlxrt_error *err) {
  (void)err;
  memset(m, 0, sizeof *m);
  m->kv_positions = D->capacity;
  for (int i = 0; i < D->d->n_layers; i++) {
    const dec_kv *kv = &D->kv[i];
    if (D->d->layers[i].kv_source != i) continue; /* reads its source's */
    m->kv_bytes += 2 * (uint64_t)kv->alloc * (uint64_t)kv->dim * sizeof(uint16_t);
    if (kv->window == 0 && kv->alloc < m->kv_positions) m->kv_positions = kv->alloc;
  }
  for (int s = 0; s < D->nslots; s++) { /* batched decode: the slots' caches too */
    accel_memory sm;
    cpu_decoder_memory(D->slot[s], &sm, err);
    m->kv_bytes += sm.kv_bytes;
  }
  return 0;
}

static int64_t kv_slot(const dec_kv *kv, int64_t pos) { return pos % kv->slots; }

/* ---- attention ------------------------------------------------------------------------------ */
/* Keys/values of positions < pos0 come from the cache, the chunk's own from ck/cv. */
static const uint16_t *key_at(const dec_kv *kv, const uint16_t *ck, int64_t pos0, int64_t p) {
  return p < pos0 ? kv->k + kv_slot(kv, p) * kv->dim : ck + (p - pos0) * kv->dim;
}
static const uint16_t *value_at(const dec_kv *kv, const uint16_t *cv, int64_t pos0, int64_t p) {
  return p < pos0 ? kv->v + kv_slot(kv, p) * kv->dim : cv + (p - pos0) * kv->dim;
}

/* Query rows q [n, heads · head_dim] at positions pos0 .. pos0 + n − 1 into att: positions
 * before pos0 from the cache, the rows' own from ck / cv (accel_attend.h's arithmetic). */
struct dec_view {
  const dec_kv *kv;
  const uint16_t *ck, *cv;
  int64_t pos0;
};
typedef struct dec_view dec_view;
static const uint16_t *view_key(const void *v, int64_t p) {
  const dec_view *w = v;
  return key_at(w->kv, w->ck, w->pos0, p);
}
static const uint16_t *view_value(const void *v, int64_t p) {
  const dec_view *w = v;
  return value_at(w->kv, w->cv, w->pos0, p);
}

/* Attention of `rows` query rows, row r's at q + r·qs into att + r·qs, as tasks on the backend's
 * host threads: one per row and group, or with fewer of those than threads a group's heads split
 * over them (a group's heads give the same bits whichever are computed together:
 * accel_attend.h). chunk: the rows are a chunk's, over one view, row r at view.pos0 + r; else
 * row r is views[r]'s one query, at its pos0 (a batched step's rows, each over its own slot). */
typedef struct att_job {
  const accel_decoder *D;
  const dec_view *views;
  int chunk;
  const float *q;
  float *att;
  int64_t qs, per_worker;
  int hd;
  accel_attend_split sp;
} att_job;

static void att_task(void *ctx, int64_t t, int worker) {
  const att_job *j = ctx;
  int64_t r;
  int g, h0, nh, hoff;
  accel_attend_task(&j->sp, t, &r, &g, &h0, &nh, &hoff);
  const dec_view *w = j->chunk ? j->views : &j->views[r];
  const int64_t p = w->pos0 + (j->chunk ? r : 0);
  const int64_t lo = w->kv->window > 0 && p - w->kv->window + 1 > 0 ? p - w->kv->window + 1 : 0;
  const accel_kv_rows kr = {w, view_key, view_value};
  const int64_t off = r * j->qs + (int64_t)hoff * j->hd;
  accel_attend_group(&kr, j->q + off, nh, j->hd, g, j->D->d->attn_scale, lo, p, j->D->scores + worker * j->per_worker,
                     0, j->att + off);
}

/* max_pos: the largest query position (the scores scratch's length) */
static int attention(accel_decoder *D, const accel_layer_desc *l, const dec_view *views, int chunk, int64_t rows,
                     int64_t max_pos, const float *q, float *att, mlxrt_error *err) {
  const int nq = D->d->n_heads, nkv = l->n_kv_heads, rep = nq / nkv, workers = accel_host_workers(D->b);
  att_job j = {D, views, chunk, q, att, (int64_t)nq * l->head_dim, 0, l->head_dim,
               accel_attend_split_make(rows, nkv, rep, workers)};
  j.per_worker = accel_attend_scratch(&j.sp, max_pos + 1);
  const int64_t need = j.per_worker * workers;
  if (need > D->scores_cap) {
    float *ns = realloc(D->scores, (size_t)need * sizeof(float));
    if (!ns) return mx_fail(err, "decoder: out of memory for attention scores (%lld positions)", (long long)(max_pos + 1));
    D->scores = ns;
    D->scores_cap = need;
  }
  accel_host_for(D->b, accel_attend_tasks(&j.sp, rows), att_task, &j);
  return 0;
}

/* ---- the MoE block (reference.c moe_block) --------------------------------------------------- */
/* out[n, H] = post_ffw_norm_2(Σ_k w_k · expert_k(pre_ffw_norm_2(h))), token by token. */
static int moe_block(accel_decoder *D, const accel_layer_desc *l, int64_t n, float *out, mlxrt_error *err) {
  const accel_moe_desc *m = &l->moe;
  const int H = D->d->hidden, E = m->experts, K = m->top_k;
  const float eps = D->d->eps;
  float *scores = D->me, *rw = scores + E, *xin = rw + H, *y = xin + H, *acc = y + H, *wts = acc + H;
  int *idx = D->mid;
  for (int64_t t = 0; t < n; t++) {
    const float *hrow = D->h + t * H;
    rmsnorm(rw, hrow, m->router_norm, H, eps);
    if (linear(D, m->router, rw, 1, scores, err)) return -1;
    /* top-k by score (ties: the lower index) */
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
    for (int k = 0; k < K; k++) sum += wts[k] = expf(scores[idx[k]] - mxs);
    for (int k = 0; k < K; k++) wts[k] = R(R(wts[k] / sum) * m->per_expert_scale[idx[k]]);
    rmsnorm(xin, hrow, m->pre_ffw_norm_2, H, eps);
    memset(acc, 0, (size_t)H * sizeof(float));
    const int64_t I = m->intermediate;
    for (int k = 0; k < K; k++) {
      if (linear_e(D, m->gate, idx[k], xin, 1, D->g, err) || linear_e(D, m->up, idx[k], xin, 1, D->u, err)) return -1;
      const uint16_t *gt = mx_gelu_table_ready();
      for (int64_t i = 0; i < I; i++) D->t1[i] = R(mx_gelu_approx_bf16(gt, D->g[i]) * D->u[i]);
      if (linear_e(D, m->down, idx[k], D->t1, 1, y, err)) return -1;
      for (int i = 0; i < H; i++) acc[i] += R(wts[k] * y[i]);
    }
    float *o = out + t * H;
    for (int i = 0; i < H; i++) o[i] = R(acc[i]);
    rmsnorm(o, o, m->post_ffw_norm_2, H, eps);
  }
  return 0;
}

/* ---- one layer ------------------------------------------------------------------------------ */
/* The chunk's K/V rows into the cache (a ring keeps only the chunk's last `slots` positions). */
static int commit_kv(dec_kv *kv, const uint16_t *ck, const uint16_t *cv, int64_t pos0, int64_t n, mlxrt_error *err) {
  const int64_t kvd = kv->dim;
  int64_t first = n > kv->slots ? n - kv->slots : 0;
  for (int64_t i = first; i < n; i++) {
    if (kv_reserve(kv, pos0 + i, err)) return -1;
    int64_t s = kv_slot(kv, pos0 + i);
    memcpy(kv->k + s * kvd, ck + i * kvd, (size_t)kvd * sizeof(uint16_t));
    memcpy(kv->v + s * kvd, cv + i * kvd, (size_t)kvd * sizeof(uint16_t));
  }
  return 0;
}

/* Per-layer embeddings of the chunk (reference.c per_layer_inputs), from D->h = the scaled
 * embeddings: D->ple[t, l·P + j]. */
static int ple_inputs(accel_decoder *D, const int32_t *tokens, int64_t n, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int P = d->ple_dim;
  const int64_t LP = (int64_t)d->n_layers * P;
  if (linear(D, d->ple_model_proj, D->h, n, D->ple, err)) return -1;
  scale_rows(D->ple, D->ple, d->ple_model_scale, n * LP);
  rmsnorm_rows(D->ple, D->ple, d->ple_proj_norm, n * d->n_layers, P, d->eps);
  for (int64_t t = 0; t < n; t++) {
    if (D->b->embed_rows(D->b, d->ple_embed, &tokens[t], 1, D->pe, err)) return -1;
    float *row = D->ple + t * LP;
    for (int64_t j = 0; j < LP; j++) {
      float e = R(mx_bf16_to_f32(D->pe[j]) * d->ple_embed_scale);
      row[j] = R(R(row[j] + e) * d->ple_mix_scale);
    }
  }
  return 0;
}

/* D->t1 = GeGLU(D->g, D->u) over n values, in chunks on the backend's host threads (elementwise:
 * the same bits however cut) */
#define GEGLU_CHUNK 4096
typedef struct geglu_job {
  accel_decoder *D;
  int64_t n;
} geglu_job;
static void geglu_task(void *ctx, int64_t t, int worker) {
  const geglu_job *j = ctx;
  accel_decoder *D = j->D;
  const int64_t a = t * GEGLU_CHUNK, b = j->n - a < GEGLU_CHUNK ? j->n : a + GEGLU_CHUNK;
  (void)worker;
  const uint16_t *gt = mx_gelu_table_ready();
  for (int64_t i = a; i < b; i++) D->t1[i] = R(mx_gelu_approx_bf16(gt, D->g[i]) * D->u[i]);
}

static int layer(accel_decoder *D, int li, const dec_rows *rw, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const accel_layer_desc *l = &d->layers[li];
  const int src = l->kv_source, own = src == li;
  const int64_t n = rw->n;
  uint16_t *ck = D->fk[src] ? D->fk[src] : D->ck, *cv = D->fv[src] ? D->fv[src] : D->cv;
  int H = d->hidden, hd = l->head_dim, nq = d->n_heads, nkv = l->n_kv_heads, kvd = nkv * hd;
  float eps = d->eps;
  int trad = d->rope_traditional;

  rmsnorm_rows(D->x, D->h, l->input_norm, n, H, eps);
  if (linear(D, l->q, D->x, n, D->q, err)) return -1;
  rmsnorm_rows(D->q, D->q, l->q_norm, n * nq, hd, eps);
  for (int64_t i = 0; i < n; i++)
    for (int h = 0; h < nq; h++) rope(D->q + (i * nq + h) * hd, hd, l->inv_freq, (float)row_pos(rw, i), trad);
  if (own) {
    if (linear(D, l->k, D->x, n, D->k, err)) return -1;
    if (l->k_eq_v) memcpy(D->v, D->k, (size_t)(n * kvd) * sizeof(float));
    else if (linear(D, l->v, D->x, n, D->v, err)) return -1;
    rmsnorm_rows(D->k, D->k, l->k_norm, n * nkv, hd, eps);
    for (int64_t i = 0; i < n; i++)
      for (int h = 0; h < nkv; h++) rope(D->k + (i * nkv + h) * hd, hd, l->inv_freq, (float)row_pos(rw, i), trad);
    if (d->v_norm) rmsnorm_rows(D->v, D->v, NULL, n * nkv, hd, eps);
    to_bf16(ck, D->k, n * kvd);
    to_bf16(cv, D->v, n * kvd);
  }
  if (!rw->slot) {
    dec_kv *kv = &D->kv[src];
    const dec_view view = {kv, ck, cv, rw->pos0};
    if (attention(D, l, &view, 1, n, rw->pos0 + n - 1, D->q, D->att, err)) return -1;
    if (own && !D->feeds[li] && commit_kv(kv, ck, cv, rw->pos0, n, err)) return -1;
  } else { /* each row over its own slot's cache and its own K/V */
    int64_t max_pos = 0;
    for (int64_t i = 0; i < n; i++) {
      D->views[i] = (dec_view){&rw->slot[i]->kv[src], ck + i * kvd, cv + i * kvd, rw->pos[i]};
      if (rw->pos[i] > max_pos) max_pos = rw->pos[i];
    }
    if (attention(D, l, D->views, 0, n, max_pos, D->q, D->att, err)) return -1;
    for (int64_t i = 0; i < n; i++) {
      dec_kv *kv = &rw->slot[i]->kv[src];
      const uint16_t *ki = ck + i * kvd, *vi = cv + i * kvd;
      if (own && !D->feeds[li] && commit_kv(kv, ki, vi, rw->pos[i], 1, err)) return -1;
    }
  }
  if (linear(D, l->o, D->att, n, D->o, err)) return -1;
  rmsnorm_rows(D->o, D->o, l->post_attn_norm, n, H, eps);
  add_rows(D->h, D->h, D->o, n * H);

  /* GeGLU MLP */
  int64_t I = l->intermediate;
  rmsnorm_rows(D->x, D->h, l->pre_ffw_norm, n, H, eps);
  if (linear(D, l->gate, D->x, n, D->g, err) || linear(D, l->up, D->x, n, D->u, err)) return -1;
  const geglu_job gj = {D, n * I};
  accel_host_for(D->b, (gj.n + GEGLU_CHUNK - 1) / GEGLU_CHUNK, geglu_task, (void *)&gj);
  if (linear(D, l->down, D->t1, n, D->o, err)) return -1;
  if (l->moe.experts) { /* the dense MLP is the shared expert: its own post-norm, plus the experts' */
    rmsnorm_rows(D->o, D->o, l->moe.post_ffw_norm_1, n, H, eps);
    if (moe_block(D, l, n, D->mo, err)) return -1;
    add_rows(D->o, D->o, D->mo, n * H);
  }
  rmsnorm_rows(D->o, D->o, l->post_ffw_norm, n, H, eps);
  add_rows(D->h, D->h, D->o, n * H);
  if (d->ple_dim > 0) { /* the layer's per-layer input, gated by its residual */
    const int P = d->ple_dim, L = d->n_layers;
    if (linear(D, l->ple_gate, D->h, n, D->g, err)) return -1;
    for (int64_t t = 0; t < n; t++)
      for (int j = 0; j < P; j++)
        D->t1[t * P + j] = R(gelu_approx(D->g[t * P + j]) * D->ple[(t * L + li) * P + j]);
    if (linear(D, l->ple_proj, D->t1, n, D->o, err)) return -1;
    rmsnorm_rows(D->o, D->o, l->post_ple_norm, n, H, eps);
    add_rows(D->h, D->h, D->o, n * H);
  }
  if (d->has_layer_scalar) scale_rows(D->h, D->h, l->layer_scalar, n * H);
  return 0;
}

/* tokens[0 .. rw->n) through every layer; logits (may be NULL): a chunk's last row [vocab], a
 * batched step's every row [n, vocab]. */
static int pass(accel_decoder *D, const int32_t *tokens, const dec_rows *rw, float *logits, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int64_t n = rw->n;
  int H = d->hidden;
  if (ensure_chunk(D, n, err)) return -1;
  if (D->b->embed_rows(D->b, d->embed, tokens, n, D->xb, err)) return -1;
  for (int64_t i = 0; i < n * H; i++) D->h[i] = mx_bf16_to_f32(D->xb[i]);
  scale_rows(D->h, D->h, d->embed_scale, n * H);
  if (d->ple_dim > 0 && ple_inputs(D, tokens, n, err)) return -1;
  for (int li = 0; li < d->n_layers; li++)
    if (layer(D, li, rw, err)) return mx_prefix(err, "layer %d", li);
  for (int li = 0; li < d->n_layers; li++) {
    if (!D->feeds[li]) continue;
    const int64_t kvd = D->kv[li].dim;
    for (int64_t i = 0; i < (rw->slot ? n : 1); i++)
      if (rw->slot ? commit_kv(&rw->slot[i]->kv[li], D->fk[li] + i * kvd, D->fv[li] + i * kvd, rw->pos[i], 1, err)
                   : commit_kv(&D->kv[li], D->fk[li], D->fv[li], rw->pos0, n, err))
        return mx_prefix(err, "layer %d", li);
  }
  if (!logits) return 0;
  const int64_t first = rw->slot ? 0 : n - 1, rows = n - first;
  rmsnorm_rows(D->x, D->h + first * H, d->final_norm, rows, H, d->eps);
  if (linear(D, d->lm_head, D->x, rows, logits, err)) return -1;
  if (d->final_softcap > 0) {
    float cap = d->final_softcap;
    for (int64_t i = 0; i < rows * d->vocab; i++) logits[i] = R(R(tanhf(R(logits[i] / cap))) * cap);
  }
  return 0;
}

static int step_greedy(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, float *logits,
                       int32_t *next_token, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  if (accel_check_step(tokens, n, pos, D->capacity, d->vocab, err)) return -1;
  float *out = logits ? logits : next_token ? D->logits : NULL;
  for (int64_t done = 0; done < n;) {
    int64_t k = n - done < CPU_DEC_CHUNK ? n - done : CPU_DEC_CHUNK;
    int last = done + k == n;
    const dec_rows rw = {k, pos + done, NULL, NULL};
    if (pass(D, tokens + done, &rw, last ? out : NULL, err)) return -1;
    done += k;
  }
  if (next_token) {
    const int bad = accel_logits_first_nonfinite(out, d->vocab);
    if (bad >= 0) return accel_fail_nonfinite(err, pos + n - 1, bad);
    int32_t best = 0;
    for (int32_t i = 1; i < d->vocab; i++)
      if (out[i] > out[best]) best = i;
    *next_token = best;
  }
  return 0;
}

/* decoder_step: greedy as above, or the step's logits then accel_sample_ref (the algorithm the
 * devices implement). */
int cpu_decoder_step(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, const accel_sample_params *sp,
                     double u, float *logits, int32_t *token, mlxrt_error *err) {
  if (!sp || !token) return step_greedy(D, tokens, n, pos, logits, token, err);
  accel_sample_plan pl;
  if (accel_sample_plan_make(sp, D->d->vocab, u, &pl, err)) return mx_prefix(err, "CPU decoder");
  if (step_greedy(D, tokens, n, pos, D->logits, NULL, err)) return -1;
  if (logits) memcpy(logits, D->logits, (size_t)D->d->vocab * sizeof(float));
  if (accel_sample_ref(D->logits, D->d->vocab, sp, u, token, err)) return -1;
  if (*token <= ACCEL_TOKEN_NONFINITE(0)) return accel_fail_nonfinite(err, pos + n - 1, ACCEL_NONFINITE_ID(*token));
  return 0;
}

/* ---- batched decode ------------------------------------------------------------------------- */
#define CPU_BATCH_MAX 256

int cpu_decoder_batch_init(accel_decoder *D, int slots, mlxrt_error *err) {
  if (D->slot) return mx_fail(err, "CPU decoder: batched decode already has %d slots", D->nslots);
  if (slots < 1 || slots > CPU_BATCH_MAX)
    return mx_fail(err, "CPU decoder: %d sequence slots (1 to %d)", slots, CPU_BATCH_MAX);
  if (!(D->slot = calloc((size_t)slots, sizeof *D->slot)) || !(D->views = calloc((size_t)slots, sizeof *D->views))) {
    free(D->slot);
    D->slot = NULL;
    return mx_fail(err, "CPU decoder: out of memory");
  }
  for (int s = 0; s < slots; s++) {
    if (!(D->slot[s] = cpu_decoder_create(D->b, D->d, D->capacity, err))) {
      for (int k = 0; k < s; k++) cpu_decoder_free(D->slot[k]);
      free(D->slot);
      free(D->views);
      D->slot = NULL;
      D->views = NULL;
      D->nslots = 0;
      return mx_prefix(err, "CPU decoder: batched decode, slot %d of %d", s, slots);
    }
  }
  D->nslots = slots;
  return 0;
}

int cpu_decoder_slot_prompt(accel_decoder *D, int slot, const int32_t *tokens, int64_t n, int64_t pos,
                            const accel_sample_params *sp, double u, float *logits, int32_t *token, mlxrt_error *err) {
  if (!D->slot) return mx_fail(err, "CPU decoder: no batched decode (decoder_batch_init first)");
  if (slot < 0 || slot >= D->nslots) return mx_fail(err, "CPU decoder: slot %d of %d", slot, D->nslots);
  if (cpu_decoder_step(D->slot[slot], tokens, n, pos, sp, u, logits, token, err))
    return mx_prefix(err, "CPU decoder: slot %d: prompt of %lld tokens", slot, (long long)n);
  return 0;
}

/* Every row is checked before any slot moves; then one pass of every row over the slots' caches,
 * the products row-exact with each weight read once for all rows (qmatmul_rowwise), the rest
 * row by row: each row the bits of its slot's decoder_step of one token, whatever the batch. */
int cpu_decoder_batch_step(accel_decoder *D, int n, const int *slots, const int32_t *tokens, const int64_t *pos,
                           const accel_sample_params *sp, const double *u, float *logits, int32_t *next,
                           mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  if (!D->slot) return mx_fail(err, "CPU decoder: no batched decode (decoder_batch_init first)");
  if (n < 1 || n > D->nslots) return mx_fail(err, "CPU decoder: a batched step of %d rows (1 to %d)", n, D->nslots);
  if (!slots || !tokens || !pos || !next) return mx_fail(err, "CPU decoder: a batched step needs its rows' arrays");
  for (int r = 0; r < n; r++) {
    if (slots[r] < 0 || slots[r] >= D->nslots)
      return mx_fail(err, "CPU decoder: batched row %d: slot %d of %d", r, slots[r], D->nslots);
    for (int k = 0; k < r; k++)
      if (slots[k] == slots[r]) return mx_fail(err, "CPU decoder: batched rows %d and %d share slot %d", k, r, slots[r]);
    if (pos[r] < 0 || pos[r] >= D->capacity)
      return mx_fail(err, "CPU decoder: batched row %d: position %lld outside the capacity of %lld", r,
                     (long long)pos[r], (long long)D->capacity);
    if (tokens[r] < 0 || tokens[r] >= d->vocab)
      return mx_fail(err, "CPU decoder: batched row %d: token id %d is outside the vocabulary [0, %d)", r, tokens[r],
                     d->vocab);
    accel_sample_plan pl;
    if (sp && accel_sample_plan_make(&sp[r], d->vocab, u ? u[r] : 0.0, &pl, err))
      return mx_prefix(err, "CPU decoder: batched row %d", r);
  }
  if (n > D->blogits_rows) {
    free(D->blogits);
    D->blogits_rows = 0;
    if (!(D->blogits = mx_malloc((size_t)n * (size_t)d->vocab * sizeof(float), err))) return -1;
    D->blogits_rows = n;
  }
  accel_decoder *of[CPU_BATCH_MAX];
  for (int r = 0; r < n; r++) of[r] = D->slot[slots[r]];
  const dec_rows rw = {n, 0, pos, of};
  D->rowwise = 1;
  const int rc = pass(D, tokens, &rw, D->blogits, err);
  D->rowwise = 0;
  if (rc) return mx_prefix(err, "CPU decoder: batched step");
  for (int r = 0; r < n; r++) {
    const float *row = D->blogits + (size_t)r * (size_t)d->vocab;
    if (logits) memcpy(logits + (size_t)r * (size_t)d->vocab, row, (size_t)d->vocab * sizeof(float));
    int bad = -1;
    if (sp) {
      if (accel_sample_ref(row, d->vocab, &sp[r], u ? u[r] : 0.0, &next[r], err))
        return mx_prefix(err, "batched row %d (slot %d)", r, slots[r]);
      if (next[r] <= ACCEL_TOKEN_NONFINITE(0)) bad = ACCEL_NONFINITE_ID(next[r]);
    } else if ((bad = accel_logits_first_nonfinite(row, d->vocab)) < 0) {
      int32_t best = 0;
      for (int32_t i = 1; i < d->vocab; i++)
        if (row[i] > row[best]) best = i;
      next[r] = best;
    }
    if (bad >= 0) {
      accel_fail_nonfinite(err, pos[r], bad);
      return mx_prefix(err, "batched row %d (slot %d)", r, slots[r]);
    }
  }
  return 0;
}
