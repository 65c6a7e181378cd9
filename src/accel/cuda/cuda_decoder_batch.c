/* The CUDA decoder's batched decode (continuous batching; docs/BATCH.md):
 * sequences in slots, each with its own K/V (per layer one growable array of a lane per slot:
 * the ring, or the decoder's capacity backed by pages as the slot's positions are used), a
 * slot's prompt through the prompt pass on its cache, and
 * a step of one token for each of up to `slots` sequences at their own positions, each weight
 * read once per 8 rows.
 *
 * A row's arithmetic does not depend on the other rows: the products are the tensor-core
 * mat-vec in batches of 8 rows (a lone row in a batch of its own takes a second, ignored row,
 * so it runs the same kernel as in a full batch), the norms, the q/k/v post step and the
 * attention are per row (dk_qkv_post_rows, dk_attention_rows on the register path), and the
 * logits and the selection per row. So a sequence's tokens and logits are the same bits in
 * any batch, whoever else is in it — except in MoE blocks: the router and the experts run the
 * prompt pass's grouped products (cuda_decoder_moe.c), which group the rows by expert. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda_decoder_internal.h"
#include "cuda_timeline.h"
#include "cuda_timeline_agg.h"
#include "prefill_kernels.h"

typedef struct dec_batch {
  int slots; /* sequences held, and the most rows a step takes */
  int rows;  /* buffer rows: slots + 1 (a lone row's companion) rounded up to whole batches of 8 */
  dec_row_prep prep; /* the products' x prep in batches of 8 rows, the slab list of zeros, the k splits' scratch */
  int *zero;
  uint16_t **kc, **vc; /* per owning layer: every slot's K / V cache (vc == kc: K from V) */
  rt_vmem *kvm;        /* [2 · layers] an owning layer's K and V arrays, a lane per slot */
  int64_t *kv_elems;   /* per layer: elements between two slots' caches (its source's for a reader) */
  int64_t *backed;     /* per slot: positions of the full layers backed by pages (0: none yet) */
  unsigned char *ring_on; /* per slot: its sliding layers' rings backed */
  size_t kv_bytes;
  int32_t *tok, *next;
  int *pos, *slot;
  int32_t *h_tok, *h_next;
  int *h_pos, *h_slot;
  float *h_logits;
  float *h, *y, *q, *ylog, *logits;
  uint16_t *emb, *xb, *attb, *gub;
  float *scores, *smax, *ssum, *pacc;
  unsigned *counts;
  float *ple;
  uint16_t *ple_rows;
  int64_t max_rows, max_q, max_in, max_splits, max_hd;
  /* the step of n rows as a graph (graph[n]), captured on its second use (warm[n]: the first
   * runs eagerly, outside any capture: lazy module loading, occupancy queries) */
  void **graph;
  unsigned char *warm;
  int tl_rows[CTL_GRAPHS - CTL_BATCH]; /* the row count of each batched timeline graph (0: free) */
  /* a step of one row: the one-sequence step's body, its graphs (4 per slot, by the attention's
   * depth class) captured with that slot's caches */
  void **g_one;
  int *warm_one;
  uint16_t **saved; /* the decoder's own caches while a slot's are in place (slot_caches) */
} dec_batch;

void dec_batch_free(accel_decoder *D) {
  dec_batch *B = D->bt;
  if (!B) return;
  if (B->kvm)
    for (int k = 0; k < 2 * D->d->n_layers; k++) rt_vmem_free(&B->kvm[k]);
  if (B->graph)
    for (int n = 0; n <= B->slots; n++) rt_graph_destroy(B->graph[n]);
  free(B->graph);
  free(B->warm);
  if (B->g_one)
    for (int k = 0; k < 4 * B->slots; k++) rt_graph_destroy(B->g_one[k]);
  free(B->g_one);
  free(B->warm_one);
  free(B->saved);
  free(B->kc);
  free(B->vc);
  free(B->kvm);
  free(B->kv_elems);
  free(B->backed);
  free(B->ring_on);
  void *dev[] = {B->prep.xp, B->prep.xs, B->prep.xexp, B->prep.pmax, B->zero, B->prep.part, B->prep.cnt, B->tok, B->next, B->pos, B->slot, B->h, B->y, B->q, B->ylog, B->logits, B->emb, B->xb,
                 B->attb, B->gub, B->scores, B->smax, B->ssum, B->pacc, B->counts, B->ple, B->ple_rows};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  rt_host_free(B->h_tok);
  rt_host_free(B->h_next);
  rt_host_free(B->h_pos);
  rt_host_free(B->h_slot);
  rt_host_free(B->h_logits);
  free(B);
  D->bt = NULL;
}

/* allocates and zeroes count elements of p on the device (a lone row's companion reads
 * whatever its buffer row holds: zeros, never garbage that could be NaN) */
#define BALLOC(p, count)                                                                                         \
  if (rt_malloc((void **)&(p), (size_t)(count) * sizeof *(p), err) ||                                          \
      rt_memset((p), 0, (size_t)(count) * sizeof *(p), D->stream, err))                                         \
  goto fail

/* The most partial sums and counters the k splits of mv's batched products need. */
static void scratch_of(const dec_mv *mv, int sms, int64_t *part, int64_t *cnt) {
  for (int i = 0; i < mv->n; i++) {
    const ck_layout *L = mv->L[i];
    int64_t p = 0, c = 0;
    if (!L || L->fmt == CK_GENERIC) continue;
    ck_qmm_rows_scratch(L, sms, &p, &c);
    if (p > *part) *part = p;
    if (c > *cnt) *cnt = c;
    if (L->fmt != CK_NVFP4) continue;
    ck_qmm_wg_scratch(L, sms, &p, &c);
    if (p > *part) *part = p;
    if (c > *cnt) *cnt = c;
  }
}

int cuda_decoder_batch_init(accel_decoder *D, int slots, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  if (D->bt) return mx_fail(err, "CUDA decoder: batched decode already has %d slots", D->bt->slots);
  if (slots < 1 || slots > DEC_BATCH_MAX)
    return mx_fail(err, "CUDA decoder: %d sequence slots (1 to %d)", slots, DEC_BATCH_MAX);
  if (D->any_planar)
    return mx_fail(err, "CUDA decoder: batched decode keeps K in bf16 or from V; a compressed K cache (--kv-k planar3 "
                   "or planar4) runs one sequence per decoder");
  if (D->mb_pf && slots > dec_prefill_rows(D))
    return mx_fail(err, "CUDA decoder: %d slots exceed the %d rows of the MoE blocks' buffers", slots,
                   dec_prefill_rows(D));
  dec_batch *B = mx_calloc(1, sizeof *B, err);
  if (!B) return -1;
  D->bt = B;
  B->slots = slots;
  B->rows = (slots + 1 + 7) / 8 * 8;
  const int L = d->n_layers, H = d->hidden, nq = d->n_heads;
  const int64_t R = B->rows, V = d->vocab, LP = (int64_t)L * d->ple_dim;
  if (!(B->graph = mx_calloc((size_t)slots + 1, sizeof *B->graph, err)) ||
      !(B->warm = mx_calloc((size_t)slots + 1, sizeof *B->warm, err)) ||
      !(B->g_one = mx_calloc(4 * (size_t)slots, sizeof *B->g_one, err)) ||
      !(B->warm_one = mx_calloc(4 * (size_t)slots, sizeof *B->warm_one, err)) ||
      !(B->saved = mx_calloc(2 * (size_t)L, sizeof *B->saved, err)) ||
      !(B->kc = mx_calloc((size_t)L, sizeof *B->kc, err)) || !(B->vc = mx_calloc((size_t)L, sizeof *B->vc, err)) ||
      !(B->kvm = mx_calloc(2 * (size_t)L, sizeof *B->kvm, err)) ||
      !(B->kv_elems = mx_calloc((size_t)L, sizeof *B->kv_elems, err)) ||
      !(B->backed = mx_calloc((size_t)slots, sizeof *B->backed, err)) ||
      !(B->ring_on = mx_calloc((size_t)slots, sizeof *B->ring_on, err)))
    goto fail;
  B->max_rows = H;
  B->max_in = H;
  if (LP > B->max_rows) B->max_rows = LP;
  for (int i = 0; i < L; i++) {
    const dec_layer *y = &D->ly[i];
    const int64_t qd = (int64_t)nq * y->hd;
    if (y->qkv.rows > B->max_rows) B->max_rows = y->qkv.rows;
    if (2 * (int64_t)y->inter > B->max_rows) B->max_rows = 2 * (int64_t)y->inter;
    if (qd > B->max_q) B->max_q = qd;
    if (y->inter > B->max_in) B->max_in = y->inter;
    if (d->ple_dim > B->max_in) B->max_in = d->ple_dim;
    if (y->splits > B->max_splits) B->max_splits = y->splits;
    if (y->hd > B->max_hd) B->max_hd = y->hd;
    if (!y->own) continue;
    /* one slot's cache, a lane of its own: the ring, or the capacity's rows (the layout of the
     * decoder's own), reserved and backed when the slot uses it (bt_grow) */
    const int64_t lane = (y->window > 0 ? (int64_t)y->window + ACCEL_RING_SLACK : D->capacity) * y->kv.ps;
    for (int k = 0; k < (y->kv.vr > 0 ? 1 : 2); k++)
      if (rt_vmem_reserve_lanes(&B->kvm[2 * i + k], slots, (size_t)lane * sizeof(uint16_t), err)) goto fail;
    B->kv_elems[i] = (int64_t)(B->kvm[2 * i].stride / sizeof(uint16_t));
    B->kc[i] = B->kvm[2 * i].base;
    B->vc[i] = y->kv.vr > 0 ? B->kc[i] : B->kvm[2 * i + 1].base;
  }
  for (int i = 0; i < L; i++) { /* a reader's cache is its source's */
    const int src = d->layers[i].kv_source;
    if (D->ly[i].own) continue;
    B->kc[i] = B->kc[src];
    B->vc[i] = B->vc[src];
    B->kv_elems[i] = B->kv_elems[src];
  }
  { /* x prep scratch for the widest input of any product, every batch of 8 rows */
    const int64_t kp = (B->max_q > B->max_in ? B->max_q : B->max_in) + 128, nz = R / 8;
    BALLOC(B->prep.xp, (R + 63) / 64 * 64 * kp); /* (ck_xprep_wg: launches of 64 rows) */
    BALLOC(B->prep.xs, nz * (kp / 32 + 1) * 8);
    BALLOC(B->prep.xexp, R);
    BALLOC(B->prep.pmax, nz * (int64_t)ck_xprep_pmax_floats(kp));
    BALLOC(B->zero, nz);
    B->prep.zero = B->zero;
    int64_t part = 0, cnt = 0;
    B->prep.sms = cudab_device(D->b)->sms;
    B->prep.cc_major = cudab_device(D->b)->cc_major;
    B->prep.cc_minor = cudab_device(D->b)->cc_minor;
    for (int i = 0; i < L; i++) {
      const dec_layer *y = &D->ly[i];
      const dec_mv *mv[] = {&y->qkv, &y->o, &y->gu, &y->down, &y->pg, &y->pp};
      for (int k = 0; k < 6; k++) scratch_of(mv[k], B->prep.sms, &part, &cnt);
    }
    scratch_of(&D->head, B->prep.sms, &part, &cnt);
    scratch_of(&D->ple_mp, B->prep.sms, &part, &cnt);
    BALLOC(B->prep.part, part > 0 ? part : 1);
    BALLOC(B->prep.cnt, cnt > 0 ? cnt : 1);
  }
  BALLOC(B->tok, R);
  BALLOC(B->next, R);
  BALLOC(B->pos, R);
  BALLOC(B->slot, R);
  BALLOC(B->h, R * H);
  BALLOC(B->y, R * B->max_rows);
  BALLOC(B->q, R * B->max_q);
  BALLOC(B->ylog, R * V);
  BALLOC(B->logits, R * V);
  BALLOC(B->emb, R * H);
  BALLOC(B->xb, R * H);
  BALLOC(B->attb, R * B->max_q);
  BALLOC(B->gub, R * B->max_in);
  BALLOC(B->scores, (int64_t)slots * nq * D->capacity);
  BALLOC(B->smax, (int64_t)slots * nq * B->max_splits);
  BALLOC(B->ssum, (int64_t)slots * nq * B->max_splits);
  BALLOC(B->pacc, (int64_t)slots * nq * B->max_splits * B->max_hd);
  BALLOC(B->counts, (int64_t)slots * nq);
  if (LP > 0) {
    BALLOC(B->ple, R * LP);
    BALLOC(B->ple_rows, R * LP);
  }
  if (rt_host_alloc((void **)&B->h_tok, (size_t)R * sizeof(int32_t), err) ||
      rt_host_alloc((void **)&B->h_next, (size_t)R * sizeof(int32_t), err) ||
      rt_host_alloc((void **)&B->h_pos, (size_t)R * sizeof(int), err) ||
      rt_host_alloc((void **)&B->h_slot, (size_t)R * sizeof(int), err) ||
      rt_host_alloc((void **)&B->h_logits, (size_t)R * (size_t)V * sizeof(float), err) ||
      rt_stream_sync(D->stream, err))
    goto fail;
  if (D->b->verbose)
    fprintf(stderr, "mlxrt cuda: batched decode: %d slots of %lld positions, their K/V backed by pages as used\n",
            slots, (long long)D->capacity);
  return 0;
fail:
  dec_batch_free(D);
  return mx_prefix(err, "CUDA decoder: batched decode of %d slots", slots);
}

size_t dec_batch_kv_bytes(const accel_decoder *D) { return D->bt ? D->bt->kv_bytes : 0; }

/* Points every layer's cache at slot s's (swap: the decoder's own caches back, from saved). */
static void slot_caches(accel_decoder *D, int s, uint16_t **saved) {
  const dec_batch *B = D->bt;
  for (int i = 0; i < D->d->n_layers; i++) {
    dec_layer *y = &D->ly[i];
    if (s < 0) {
      y->kc = saved[2 * i];
      y->vc = saved[2 * i + 1];
      continue;
    }
    saved[2 * i] = y->kc;
    saved[2 * i + 1] = y->vc;
    y->kc = B->kc[i] + (int64_t)s * B->kv_elems[i];
    y->vc = B->vc[i] + (int64_t)s * B->kv_elems[i];
  }
}

/* Backs slot s's cache for positions [0, need): its rings whole on first use, its full layers'
 * lanes KV_MARGIN positions beyond (the attention kernels' tiles read a little past the last
 * key) and at least an eighth more than before, as the decoder's own cache grows (kv_grow).
 * Pages are only added, so no byte of any slot's cache moves; runs before anything of the
 * call is enqueued, so a cache that cannot grow fails the call with nothing changed. */
static int bt_grow(accel_decoder *D, int s, int64_t need, mlxrt_error *err) {
  dec_batch *B = D->bt;
  const int ring = !B->ring_on[s];
  if (!ring && need <= B->backed[s]) return 0;
  int64_t target = need + KV_MARGIN, geo = B->backed[s] + B->backed[s] / 8;
  if (target < geo) target = geo;
  if (target > D->capacity) target = D->capacity;
  const size_t before = B->kv_bytes;
  for (int i = 0; i < D->d->n_layers; i++) {
    const dec_layer *y = &D->ly[i];
    if (!y->own || (y->window > 0 && !ring)) continue;
    const int64_t rows = y->window > 0 ? (int64_t)y->window + ACCEL_RING_SLACK : target;
    for (int k = 0; k < 2; k++) {
      rt_vmem *v = &B->kvm[2 * i + k];
      if (!v->base) continue;
      const size_t was = v->mapped;
      if (rt_vmem_grow_lane(v, s, (size_t)rows * (size_t)y->kv.ps * sizeof(uint16_t), err))
        return mx_prefix(err, "CUDA decoder: slot %d: the KV cache cannot grow to %lld positions (layer %d)", s,
                         (long long)target, i);
      B->kv_bytes += v->mapped - was;
    }
  }
  B->ring_on[s] = 1;
  if (target > B->backed[s]) B->backed[s] = target;
  if (D->b->verbose && B->kv_bytes != before)
    fprintf(stderr, "mlxrt cuda: batched decode: slot %d backs %lld of %lld positions: +%.1f MiB of pages, %.1f MiB held\n",
            s, (long long)B->backed[s], (long long)D->capacity, (double)(B->kv_bytes - before) / (1 << 20),
            (double)B->kv_bytes / (1 << 20));
  return 0;
}

static int check_tokens(const accel_model_desc *d, const int32_t *tokens, int64_t n, mlxrt_error *err) {
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= d->vocab)
      return mx_fail(err, "decoder: token id %d (%lld of %lld) is outside the vocabulary [0, %d)", tokens[i],
                     (long long)i, (long long)n, d->vocab);
  return 0;
}

int cuda_decoder_slot_prompt(accel_decoder *D, int slot, const int32_t *tokens, int64_t n, int64_t pos,
                             const accel_sample_params *sp, double u, float *logits, int32_t *token, mlxrt_error *err) {
  dec_batch *B = D->bt;
  if (!B) return mx_fail(err, "CUDA decoder: no batched decode (decoder_batch_init first)");
  if (slot < 0 || slot >= B->slots) return mx_fail(err, "CUDA decoder: slot %d of %d", slot, B->slots);
  if (n <= 0 || pos < 0 || pos + n > D->capacity)
    return mx_fail(err, "CUDA decoder: slot %d: positions %lld..%lld outside the capacity of %lld", slot, (long long)pos,
                   (long long)(pos + n - 1), (long long)D->capacity);
  sk_params kp;
  int sample;
  if (check_tokens(D->d, tokens, n, err) || dec_sample_plan(D, sp, u, token != NULL, &sample, &kp, err) ||
      bt_grow(D, slot, pos + n, err))
    return -1;
  slot_caches(D, slot, B->saved);
  const int rc = dec_prefill_run(D, tokens, n, pos, err);
  slot_caches(D, -1, B->saved);
  if (rc) return mx_prefix(err, "CUDA decoder: slot %d: prompt of %lld tokens", slot, (long long)n);
  if (!logits && !token) return 0;
  return dec_head_select(D, pos + n - 1, sample, &kp, logits, token, err);
}

static int bt_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, int T, float *y, int64_t ldy, int xready,
                 mlxrt_error *err) {
  return dec_rows_mv(D, mv, x, T, y, ldy, &D->bt->prep, xready, NULL, err);
}

/* A product into B->y read by bt_norm alone, which adds its k splits (dec_rows_mv): *ks says
 * how many it wrote. */
static int bt_mv_split(accel_decoder *D, const dec_mv *mv, const uint16_t *x, int T, int64_t ldy, dec_ksplit *ks,
                       mlxrt_error *err) {
  dec_batch *B = D->bt;
  ks->cap = dk_residual_norm_rows_fits(D->d->hidden) ? (int64_t)B->rows * B->max_rows : 0;
  return dec_rows_mv(D, mv, x, T, B->y, ldy, &B->prep, 0, ks, err);
}

/* The rows' residual norm into B->h and B->xb (pf_norm_rows' arguments; y NULL: the input norm
 * alone; y's k splits ks->n, ks->stride apart, or ks NULL: one): a cluster per row
 * (dk_residual_norm_rows), which also writes the prep of next, the product that reads xb, where
 * that product's rows take it (dec_rows_xmode; *xready says so). A row too long for the
 * clusters takes pf_norm_rows (its product was not split: bt_mv_split). */
static int bt_norm(accel_decoder *D, const float *y, const dec_ksplit *ks, const float *w_post, int use_scalar,
                   float scalar, const float *w_next, const dec_mv *next, int T, int *xready, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_batch *B = D->bt;
  const int H = d->hidden;
  *xready = 0;
  if (!dk_residual_norm_rows_fits(H))
    return rt_status(pf_norm_rows(y, H, w_post, B->h, use_scalar, scalar, w_next, B->xb, T, H, d->eps, D->stream),
                     "residual norm", err);
  const int xmode = next ? dec_rows_xmode(next, T, &B->prep) : 0;
  if (rt_status(dk_residual_norm_rows(y, ks ? ks->n : 1, ks ? ks->stride : 0, H, w_post, B->h, use_scalar, scalar,
                                      w_next, B->xb, H, d->eps,
                                      xmode ? B->prep.xp : NULL, xmode ? B->prep.xexp : NULL, xmode, T, D->stream),
                "residual norm", err))
    return -1;
  *xready = xmode != 0;
  return 0;
}

/* A layer's splits of the batched attention: BATCH_SPLIT_KEYS keys each over its key range (the
 * ring, or the capacity), at most the step's own */
static int bt_splits(const accel_decoder *D, const dec_layer *y) {
  const int64_t keys = y->window > 0 ? y->window : D->capacity;
  const int64_t sp = (keys + BATCH_SPLIT_KEYS - 1) / BATCH_SPLIT_KEYS;
  return sp < y->splits ? (int)sp : y->splits;
}

/* Layer i's attention for the T rows: from STREAM_ATT_MIN rows (a full layer: from
 * STREAM_FULL_BLOCKS rows × KV heads) a block per row and KV head streaming its keys (scores in
 * B->scores where a row's do not fit shared memory); fewer rows of a layer whose whole key range
 * fits one cluster (lkeys: a sliding ring, or a capacity that small) through the same kernel's
 * split form (a cluster of 4 blocks per row and KV head) where its plain form runs it (plain
 * rows, the scores in shared memory), else through the one-launch cluster kernel; the others
 * through the split passes. */
static int bt_attention(accel_decoder *D, int i, int T, const dk_rows *ar, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_batch *B = D->bt;
  const dec_layer *y = &D->ly[i];
  const int nq = d->n_heads;
  const int64_t keys = y->lkeys ? y->lkeys : D->capacity;
  void *st = D->stream;
  if (T >= STREAM_ATT_MIN && (y->window > 0 || (int64_t)T * y->nkv >= STREAM_FULL_BLOCKS) &&
      dk_attention_stream_fits(nq, y->nkv, y->hd, y->kv, y->window, keys, 1))
    return rt_status(dk_attention_stream_rows(B->q, B->kc[i], B->vc[i], nq, y->nkv, y->hd, y->kv, d->attn_scale, B->pos,
                                              y->window, keys, B->scores, B->attb, ar, T, st),
                     "attention", err);
  if (T < STREAM_ATT_MIN && y->lkeys && dk_attention_stream_split_fits(nq, y->nkv, y->hd, y->kv, y->window, keys))
    return rt_status(dk_attention_stream_split_rows(B->q, B->kc[i], B->vc[i], nq, y->nkv, y->hd, y->kv, d->attn_scale,
                                                    B->pos, y->window, keys, B->attb, ar, T, st),
                     "attention", err);
  if (y->lkeys)
    return rt_status(dk_attention_cluster_rows(B->q, B->kc[i], B->vc[i], nq, y->nkv, y->hd, y->kv, d->attn_scale,
                                               B->pos, y->window, y->lkeys, 1, B->attb, NULL, 0, NULL, NULL, NULL, ar,
                                               T, st),
                     "attention", err);
  return rt_status(dk_attention_rows(B->q, B->kc[i], B->vc[i], nq, y->nkv, y->hd, y->kv, d->attn_scale, B->pos,
                                     y->window, bt_splits(D, y), BATCH_SPLIT_KEYS, 0, D->capacity, B->scores, B->smax,
                                     B->ssum, B->pacc, B->counts, B->attb, NULL, 0, ar, T, st),
                   "attention", err);
}

/* Every layer for the T rows staged in B (tok, pos, slot); B->xb holds their final norms after,
 * and *head_ready says whether the head's prep is made too. */
static int bt_layers(accel_decoder *D, int T, int *head_ready, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_batch *B = D->bt;
  const int H = d->hidden, nq = d->n_heads;
  void *st = D->stream;
  const dec_rows R = {B->h, B->y, B->ple, B->xb, B->gub, B->ple_rows, B->emb, B->tok, &B->prep};
  if (dec_rows_embed(D, &R, T, err)) return -1;
  int xq = 0, xg = 0; /* the q|k|v and gate|up products' prep made by the norms before them */
  for (int i = 0; i < d->n_layers; i++) {
    const accel_layer_desc *l = &d->layers[i];
    dec_layer *y = &D->ly[i];
    const float *nrm = y->norms;
    const float *next_norm = i == d->n_layers - 1 ? D->final_norm : D->ly[i + 1].norms;
    const int64_t ldq = y->qkv.rows, inter = y->inter, qd = (int64_t)nq * y->hd;
    const dk_rows qr = {B->slot, B->kv_elems[i], ldq, qd}, ar = {B->slot, B->kv_elems[i], qd, qd};
    /* o's and (a layer whose FFN output goes straight to its residual norm) down's k splits */
    dec_ksplit ko = {0}, kd = {0};
    const int plain = !y->moe && d->ple_dim == 0;
    cprof *C = &D->prof;
    if (cprof_mark(C, "batch: q|k|v product", err) || bt_mv(D, &y->qkv, B->xb, T, B->y, ldq, xq, err) ||
        cprof_mark(C, "batch: q/k/v norm+rope", err) ||
        rt_status(dk_qkv_post_rows(B->y, 1, 0, nq, y->nkv, y->hd, l->k_eq_v, nrm + 4 * (int64_t)H,
                                   nrm + 4 * (int64_t)H + y->hd, y->inv_freq, d->rope_traditional, d->v_norm, d->eps,
                                   B->pos, y->window, y->kv, B->q, y->own ? B->kc[i] : NULL,
                                   y->own ? B->vc[i] : NULL, &qr, T, st),
                  "q/k/v norm+rope", err) ||
        cprof_mark(C, "batch: attention", err) ||
        bt_attention(D, i, T, &ar, err) ||
        cprof_mark(C, "batch: o product", err) || bt_mv_split(D, &y->o, B->attb, T, H, &ko, err) ||
        cprof_mark(C, "batch: norms + residual", err) ||
        bt_norm(D, B->y, &ko, nrm + H, 0, 0.0f, nrm + 2 * (int64_t)H, &y->gu, T, &xg, err) ||
        (y->moe && dec_moe_route(D, i, D->mb_pf, B->h, T, err)) || cprof_mark(C, "batch: gate|up product", err) ||
        bt_mv(D, &y->gu, B->xb, T, B->y, 2 * inter, xg, err) || cprof_mark(C, "batch: geglu", err) ||
        rt_status(pf_geglu(B->y, inter, T, B->gub, y->gu_il, st), "geglu", err) ||
        cprof_mark(C, "batch: down product", err) ||
        (plain ? bt_mv_split(D, &y->down, B->gub, T, H, &kd, err) : bt_mv(D, &y->down, B->gub, T, B->y, H, 0, err)) ||
        cprof_mark(C, "batch: norms + residual", err))
      return mx_prefix(err, "layer %d", i);
    const float *fy = B->y, *fpost = nrm + 3 * (int64_t)H;
    if ((y->moe && dec_moe_experts(D, i, D->mb_pf, B->y, H, 1, 0, T, NULL, &fy, err)) ||
        (d->ple_dim > 0 && dec_rows_ple_layer(D, &R, i, fy, T, err)))
      return mx_prefix(err, "layer %d", i);
    if (d->ple_dim > 0) {
      fy = B->y;
      fpost = y->ple_norm;
    }
    const dec_mv *next = i == d->n_layers - 1 ? &D->head : &D->ly[i + 1].qkv;
    if (bt_norm(D, fy, plain ? &kd : NULL, fpost, d->has_layer_scalar, l->layer_scalar, next_norm, next, T, &xq, err))
      return mx_prefix(err, "layer %d: FFN residual", i);
  }
  *head_ready = xq;
  return 0;
}

/* The step of the T rows staged in B (tok, pos, slot): every layer, the final norm, the head,
 * each row's logits and greedy argmax (B->next). */
static int bt_enqueue(accel_decoder *D, int T, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_batch *B = D->bt;
  const int64_t V = d->vocab;
  void *st = D->stream;
  int head_ready = 0;
  /* (the last layer's FFN residual norm ends in the final norm) */
  if (bt_layers(D, T, &head_ready, err) || cprof_mark(&D->prof, "batch: head", err) ||
      bt_mv(D, &D->head, B->xb, T, B->ylog, V, head_ready, err) || cprof_mark(&D->prof, "batch: logits", err))
    return -1;
  for (int r = 0; r < T; r++)
    if (rt_status(dk_logits(B->ylog + r * V, B->logits + r * V, V, d->final_softcap, D->part_v, D->part_i,
                            D->counts + d->n_heads, D->counts + d->n_heads + 1, B->next + r, st),
                  "logits", err))
      return -1;
  return 0;
}

/* The in-graph timeline's id of the graph of T rows (from CTL_BATCH; -1: not recorded, the first
 * row counts captured take them all). */
static int bt_timeline_id(dec_batch *B, int T) {
  for (int k = 0; k < CTL_GRAPHS - CTL_BATCH; k++) {
    if (!B->tl_rows[k]) B->tl_rows[k] = T;
    if (B->tl_rows[k] == T) return CTL_BATCH + k;
  }
  return -1;
}

/* bt_enqueue as graph[T]: eager on its first use, then captured once and replayed (the rows'
 * tokens, positions and slots are read from device memory). A capture that fails runs eagerly,
 * said once. The in-graph timeline (MLXRT_CUDA_TIMELINE=1) logs each row count's graph as a
 * graph of its own (bt_timeline_id). */
static int bt_launch(accel_decoder *D, int T, mlxrt_error *err) {
  dec_batch *B = D->bt;
  if (!D->use_graph || !B->warm[T]) {
    B->warm[T] = 1;
    return bt_enqueue(D, T, err);
  }
  if (!B->graph[T]) {
    mlxrt_error ce = {0}, e2;
    void *exec = NULL;
    int rc = rt_graph_begin(D->stream, &ce);
    if (!rc) {
      ctl_capture_begin(bt_timeline_id(B, T));
      rc = bt_enqueue(D, T, &ce);
      ctl_capture_end();
      if (rt_graph_end(D->stream, &exec, rc ? &e2 : &ce)) rc = -1;
    }
    if (rc) {
      rt_graph_destroy(exec);
      fprintf(stderr, "mlxrt cuda: batched step graph capture failed (%s); running without graphs\n", ce.msg);
      D->use_graph = 0;
      return bt_enqueue(D, T, err);
    }
    B->graph[T] = exec;
  }
  return ctl_replay_begin(bt_timeline_id(B, T), D->stream, err) || rt_graph_launch(B->graph[T], D->stream, err) ||
         ctl_replay_end(D->stream, err);
}

/* A step of one row: the one-sequence step itself (decoder_step's body and head, bit for bit) on
 * slot s's caches, through the slot's own body graphs; the head and the selection are the
 * decoder's. */
static int bt_step_one(accel_decoder *D, int s, int32_t token, int64_t pos, int sample, const sk_params *kp,
                       float *logits, int32_t *next, mlxrt_error *err) {
  dec_batch *B = D->bt;
  slot_caches(D, s, B->saved);
  const int rc = dec_body_step(D, token, pos, B->g_one + 4 * (size_t)s, B->warm_one + 4 * (size_t)s, err);
  slot_caches(D, -1, B->saved); /* (the enqueued kernels and the captured graphs keep the slot's pointers) */
  if (rc || dec_head_select(D, pos, sample, kp, logits, next, err))
    return mx_prefix(err, "CUDA decoder: batched row 0 (slot %d)", s);
  return 0;
}

int cuda_decoder_batch_step(accel_decoder *D, int n, const int *slots, const int32_t *tokens, const int64_t *pos,
                            const accel_sample_params *sp, const double *u, float *logits, int32_t *next,
                            mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_batch *B = D->bt;
  if (!B) return mx_fail(err, "CUDA decoder: no batched decode (decoder_batch_init first)");
  if (n < 1 || n > B->slots) return mx_fail(err, "CUDA decoder: a batched step of %d rows (1 to %d)", n, B->slots);
  if (!next) return mx_fail(err, "CUDA decoder: a batched step needs its tokens' array");
  if (check_tokens(d, tokens, n, err)) return -1;
  sk_params *kp = NULL;
  for (int r = 0; r < n; r++) {
    if (slots[r] < 0 || slots[r] >= B->slots)
      return mx_fail(err, "CUDA decoder: batched row %d: slot %d of %d", r, slots[r], B->slots);
    if (pos[r] < 0 || pos[r] >= D->capacity)
      return mx_fail(err, "CUDA decoder: batched row %d: position %lld outside the capacity of %lld", r,
                     (long long)pos[r], (long long)D->capacity);
    for (int k = 0; k < r; k++)
      if (slots[k] == slots[r]) return mx_fail(err, "CUDA decoder: batched rows %d and %d share slot %d", k, r, slots[r]);
    B->h_tok[r] = tokens[r];
    B->h_pos[r] = (int)pos[r];
    B->h_slot[r] = slots[r];
  }
  for (int r = 0; r < n; r++)
    if (bt_grow(D, slots[r], pos[r] + 1, err)) return mx_prefix(err, "batched row %d", r);
  if (sp) {
    if (!(kp = mx_calloc((size_t)n, sizeof *kp, err))) return -1;
    for (int r = 0; r < n; r++) {
      int sample;
      if (dec_sample_plan(D, &sp[r], u ? u[r] : 0.0, 1, &sample, &kp[r], err)) {
        free(kp);
        return mx_prefix(err, "batched row %d", r);
      }
    }
  }
  if (n == 1) {
    /* (the one-sequence step's kernels, which fuse each product's x prep into its producer) */
    sk_params k1 = kp ? kp[0] : (sk_params){0};
    free(kp);
    return bt_step_one(D, slots[0], tokens[0], pos[0], sp != NULL, &k1, logits, next, err);
  }
  void *st = D->stream;
  const int64_t V = d->vocab;
  int rc = rt_h2d(B->tok, B->h_tok, (size_t)n * sizeof(int32_t), st, err) ||
           rt_h2d(B->pos, B->h_pos, (size_t)n * sizeof(int), st, err) ||
           rt_h2d(B->slot, B->h_slot, (size_t)n * sizeof(int), st, err) || bt_launch(D, n, err);
  for (int r = 0; r < n && kp && !rc; r++)
    rc = rt_status(sk_sample(B->logits + r * V, (int)V, &kp[r], D->sk_state, B->next + r, st), "sampling", err);
  free(kp);
  rc = rc || rt_d2h(B->h_next, B->next, (size_t)n * sizeof(int32_t), st, err) ||
       (logits && rt_d2h(B->h_logits, B->logits, (size_t)n * (size_t)V * sizeof(float), st, err)) ||
       rt_stream_sync(st, err) || cprof_flush(&D->prof, err);
  if (rc) return mx_prefix(err, "CUDA decoder: batched step of %d rows", n);
  for (int r = 0; r < n; r++) {
    if (B->h_next[r] <= ACCEL_TOKEN_NONFINITE(0)) {
      accel_fail_nonfinite(err, pos[r], ACCEL_NONFINITE_ID(B->h_next[r]));
      return mx_prefix(err, "batched row %d (slot %d)", r, slots[r]);
    }
    if (sp && B->h_next[r] < 0)
      return mx_fail(err, "CUDA decoder: batched row %d: every logit is -inf or NaN, no token can be chosen", r);
    next[r] = B->h_next[r];
  }
  if (logits) memcpy(logits, B->h_logits, (size_t)n * (size_t)V * sizeof(float));
  return 0;
}
