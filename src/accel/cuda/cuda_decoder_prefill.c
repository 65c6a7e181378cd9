/* The CUDA decoder's batched prompt pass (prefill.cu's kernels; docs/DECODE.md "Prefill"): a
 * prompt of n > 1 tokens through every layer in chunks, on the decoder's weights and caches
 * (cuda_decoder_internal.h), leaving the state the step's head graph expects. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda_decoder_internal.h"
#include "cuda_gemm.h"
#include "prefill_kernels.h"

/* A prompt of n > 1 tokens runs in chunks of up to PF_CHUNK tokens, each layer once per chunk:
 * products of T rows (dequantize + cuBLAS GEMM when T > PF_GEMM_MIN, else the tensor-core
 * mat-vec in batches of 8 rows), the row-batched elementwise kernels, and a causal attention of
 * the chunk's T queries. A chunk's K/V go to their cache slots directly on full layers; on
 * sliding layers they are staged and committed to the ring after the chunk's attention, so a
 * chunk may be longer than the window. No host synchronisation inside a chunk; no graphs
 * (PF_CHUNK, PF_GEMM_MIN: tuning.h). */

typedef struct dec_prefill {
  int tmax, gemm_min;
  int64_t max_rows, max_q, max_kvd, max_inter, max_w, max_part_rows;
  void *cublas;
  float *h, *y, *q;
  uint16_t *emb, *xb, *attb, *gub, *ks, *vs, *wbuf;
  int32_t *iota;
  /* KV sharing: a sliding layer that later layers read stages its chunk's K/V in its own
   * buffers [T, kvd], committed to its ring once the chunk has passed every layer */
  uint16_t **fks, **fvs;
  /* per-layer embeddings: the chunk's inputs [T, L·P] and table rows [T, L·P] bf16 */
  float *ple;
  uint16_t *ple_rows;
} dec_prefill;

void dec_prefill_free(accel_decoder *D) {
  dec_prefill *P = D->pf;
  if (!P) return;
  void *dev[] = {P->h, P->y, P->q, P->emb, P->xb, P->attb, P->gub, P->ks, P->vs, P->wbuf, P->iota, P->ple, P->ple_rows};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  if (P->fks)
    for (int i = 0; i < D->d->n_layers; i++) {
      rt_free(P->fks[i]);
      rt_free(P->fvs[i]);
    }
  free(P->fks);
  free(P->fvs);
  cg_destroy(P->cublas);
  free(P);
  D->pf = NULL;
}

int dec_prefill_rows(const accel_decoder *D) { return D->pf ? D->pf->tmax : 0; }

static void track_mv(dec_prefill *P, const dec_mv *mv) {
  for (int i = 0; i < mv->n; i++) {
    int64_t w = mv->L[i]->rows * mv->L[i]->cols;
    if (w > P->max_w) P->max_w = w;
    if (mv->L[i]->rows > P->max_part_rows) P->max_part_rows = mv->L[i]->rows;
  }
}

static int prefill_gemm_ready(accel_decoder *D, mlxrt_error *err);

int dec_prefill_init(accel_decoder *D, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_prefill *P = mx_calloc(1, sizeof *P, err);
  if (!P) return -1;
  D->pf = P;
  P->tmax = PF_CHUNK;
  P->gemm_min = PF_GEMM_MIN;
  if (P->tmax > D->capacity) P->tmax = (int)D->capacity;
  int64_t H = d->hidden, T = P->tmax;
  P->max_rows = H;
  for (int i = 0; i < d->n_layers; i++) {
    const accel_layer_desc *l = &d->layers[i];
    int64_t qd = (int64_t)d->n_heads * l->head_dim, kvd = (int64_t)l->n_kv_heads * l->head_dim;
    int64_t rows = qd + (l->k_eq_v ? 1 : 2) * kvd;
    if (rows > P->max_rows) P->max_rows = rows;
    if (2 * (int64_t)l->intermediate > P->max_rows) P->max_rows = 2 * (int64_t)l->intermediate;
    if (qd > P->max_q) P->max_q = qd;
    if (kvd > P->max_kvd) P->max_kvd = kvd;
    if (l->intermediate > P->max_inter) P->max_inter = l->intermediate;
    const dec_layer *y = &D->ly[i];
    track_mv(P, &y->qkv);
    track_mv(P, &y->o);
    track_mv(P, &y->gu);
    track_mv(P, &y->down);
    if (d->ple_dim > 0) {
      track_mv(P, &y->pg);
      track_mv(P, &y->pp);
    }
  }
  const int64_t LP = (int64_t)d->n_layers * d->ple_dim;
  if (LP > 0) {
    track_mv(P, &D->ple_mp);
    if (LP > P->max_rows) P->max_rows = LP;
    if (d->ple_dim > P->max_inter) P->max_inter = d->ple_dim;
  }
  DALLOC(P->h, T * H);
  DALLOC(P->y, T * P->max_rows);
  DALLOC(P->q, T * P->max_q);
  DALLOC(P->emb, T * H);
  DALLOC(P->xb, T * H);
  DALLOC(P->attb, T * P->max_q);
  DALLOC(P->gub, T * P->max_inter);
  DALLOC(P->ks, T * P->max_kvd);
  DALLOC(P->vs, T * P->max_kvd);
  if (!(P->fks = mx_calloc((size_t)d->n_layers, sizeof *P->fks, err)) ||
      !(P->fvs = mx_calloc((size_t)d->n_layers, sizeof *P->fvs, err)))
    goto fail;
  for (int i = 0; i < d->n_layers; i++)
    if (D->ly[i].feeds && D->ly[i].window > 0) {
      const int64_t kvd = (int64_t)D->ly[i].nkv * D->ly[i].hd;
      DALLOC(P->fks[i], T * kvd);
      DALLOC(P->fvs[i], T * kvd);
    }
  if (LP > 0) {
    DALLOC(P->ple, T * LP);
    DALLOC(P->ple_rows, T * LP);
  }
  if (P->tmax > P->gemm_min && prefill_gemm_ready(D, err)) goto fail;
  if (dec_moe_buffers(D, P->tmax, &D->mb_pf, err)) goto fail;
  return 0;
fail:
  dec_prefill_free(D);
  return mx_prefix(err, "prompt pass setup");
}

/* The GEMM path's scratch: the largest weight part in bf16, ids 0..rows-1 for the generic
 * layout's dequantization, and the cuBLAS handle; made when a chunk first needs them. */
static int prefill_gemm_ready(accel_decoder *D, mlxrt_error *err) {
  dec_prefill *P = D->pf;
  if (P->wbuf) return 0;
  int32_t *ids = NULL;
  if (!P->cublas && cg_create(&P->cublas, err)) return -1;
  if (!P->iota) DALLOC(P->iota, P->max_part_rows);
  if (!(ids = mx_malloc((size_t)P->max_part_rows * sizeof(int32_t), err))) goto fail;
  for (int64_t i = 0; i < P->max_part_rows; i++) ids[i] = (int32_t)i;
  if (rt_h2d(P->iota, ids, (size_t)P->max_part_rows * sizeof(int32_t), D->stream, err) ||
      rt_stream_sync(D->stream, err))
    goto fail;
  free(ids);
  ids = NULL;
  DALLOC(P->wbuf, P->max_w);
  return 0;
fail:
  free(ids);
  rt_free(P->wbuf);
  P->wbuf = NULL;
  return mx_prefix(err, "prompt pass: GEMM scratch of %lld bf16 values", (long long)P->max_w);
}

/* The prep a kernel making the T rows' x can write for mv (dk_residual_norm_rows' xmode): where
 * dec_rows_mv takes the batch kernel on every part at T rows, each row's prep at its own row of
 * rowexact->xp (the layout ck_xprep_batched gives batches of 8 rows, or of T below 8); where it
 * takes the warpgroup product on every part, ck_xprep_wg's layout (3); the exponents at
 * xexp[row]; 0 where a product preps x itself. */
int dec_rows_xmode(const dec_mv *mv, int T, const dec_row_prep *rowexact) {
  if (!rowexact || T < 2 || !mv->xmode) return 0;
  if (T >= WG_MIN) {
    if (mv->xmode != 1) return 0;
    for (int i = 0; i < mv->n; i++)
      if (!ck_qmm_wg_supported(mv->L[i], rowexact->cc_major, rowexact->cc_minor)) return 0;
    return 3;
  }
  if (T >= ROWS_MIN) return 0;
  for (int i = 0; i < mv->n; i++)
    if (mv->L[i]->fmt == CK_GENERIC) return 0;
  return mv->xmode;
}

/* y[t·ldy + off + r] = x[t] · W_partᵀ for t < T, every part of mv. rowexact (the batched decode,
 * whose steps of one row run the one-sequence step instead): each row's bits independent of the
 * other rows and its place among them — 2 to 8 rows (below ROWS_MIN) of the fast formats
 * through ck_qmv_rows (one batch of the T rows, a tile's weights read from memory once for all;
 * nvfp4 through ck_qmv_cols, the one-row kernel's form with the rows as columns),
 * more through ck_qmm_wg (nvfp4 on sm_90a) or ck_qmm_rows; the generic layout in batches of 8
 * rows (a lone row, which no batched step has, given a companion: the buffers hold one more
 * row). xready: the rows' prep is already in rowexact's buffers (dec_rows_xmode). ksp: NULL, or
 * (a consumer that adds k splits' partial sums: the batched step's residual norms) the floats y
 * may take (ksp->cap) and, on return, the splits written and their stride — more than one only
 * through ck_qmv_rows or ck_qmv_cols on a one-part product: split s of row r at y + s·stride + r·ldy. */
int dec_rows_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, int T, float *y, int64_t ldy,
                const dec_row_prep *rowexact, int xready, dec_ksplit *ksp, mlxrt_error *err) {
  dec_prefill *P = D->pf;
  if (ksp) {
    ksp->n = 1;
    ksp->stride = 0;
  }
  for (int i = 0; i < mv->n; i++) {
    const ck_layout *L = mv->L[i];
    float *yo = y + mv->off[i];
    if (rowexact && T >= WG_MIN && ck_qmm_wg_supported(L, rowexact->cc_major, rowexact->cc_minor)) {
      /* nvfp4 on the warpgroup tensor cores: x laid out as their B operand, up to 64 rows a
       * launch, each weight byte read and decoded once per launch (a row's bits depend on its
       * launch's row count rounded up to 8, 16, 32 or 64, never on the other rows) */
      const dec_row_prep *R = rowexact;
      /* x's prep: made by its producer, with the product's fixed exponent (o after an attention
       * over RMS-normed V: one launch), or from the rows' maxima */
      const int prep = xready                      ? 0
                       : mv->fix_e != CK_XE_ROWMAX ? ck_xprep_wg_fixed(L, x, T, R->xp, R->xexp, mv->fix_e, D->stream)
                                                   : ck_xprep_wg(L, x, T, R->xp, R->xexp, R->pmax, D->stream);
      if (rt_status(prep, "x prep launch", err)) return -1;
      for (int r0 = 0; r0 < T; r0 += 64) {
        const int n = T - r0 < 64 ? T - r0 : 64;
        if (rt_status(ck_qmm_wg(L, n, ck_qmm_wg_splits(L, n, R->sms), R->xp + (int64_t)r0 * L->cols, R->xexp + r0,
                                yo + (int64_t)r0 * ldy, ldy, R->part, R->cnt, D->stream),
                      "batched product launch", err))
          return -1;
      }
      continue;
    }
    if (rowexact && L->fmt != CK_GENERIC && T >= ROWS_MIN) {
      /* every row's x in batches of 8 (rows past T are the buffers' zeros), then the product
       * over all of them, each weight byte read and decoded once (ck_qmm_rows_max rows per launch) */
      const dec_row_prep *R = rowexact;
      const int nz = (T + 7) / 8, most = ck_qmm_rows_max(), ks = ck_qmm_rows_splits(L, R->sms);
      const int64_t nsl = L->cols / 32;
      if (rt_status(ck_xprep_batched(L, x, 8, nz, R->xp, R->xs, R->xexp, R->pmax, D->stream), "x prep launch", err))
        return -1;
      for (int r0 = 0; r0 < T; r0 += most)
        if (rt_status(ck_qmm_rows(L, T - r0 < most ? T - r0 : most, ks, R->xp + (int64_t)r0 * L->cols,
                                  R->xs + (int64_t)(r0 / 8) * nsl * 8, R->xexp + r0, yo + (int64_t)r0 * ldy, ldy,
                                  R->part, R->cnt, D->stream),
                      "batched product launch", err))
          return -1;
      continue;
    }
    if (rowexact && L->fmt != CK_GENERIC) {
      /* one batch of the T rows, whole batches of 8 where ROWS_MIN allows more (the buffers hold
       * them; a lone row with a companion: the batch kernel, whose rows' bits do not depend on
       * the count) */
      const int nb = T >= 8 ? 8 : T < 2 ? 2 : T, nz = (T + nb - 1) / nb;
      const dec_row_prep *R = rowexact;
      /* k splits where the consumer adds them: each the nz·nb rows the kernel writes */
      const int64_t stride = (int64_t)nz * nb * ldy;
      /* nvfp4: the rows in the mma's columns (ck_qmv_cols), else the batch kernel */
      const int cols = nz == 1 && ck_qmv_cols_supported(L, nb);
      int split = !ksp || mv->n != 1 ? 1 : cols ? ck_qmv_cols_splits(L, nb, R->sms) : ck_qmv_rows_splits(L, nb, nz, R->sms);
      if (split > 1 && split * stride > ksp->cap) split = (int)(ksp->cap / stride);
      if (split < 1) split = 1;
      /* x's prep: made by its producer, or with the product's fixed exponent (o after an
       * attention over RMS-normed V: one launch, no maxima), or from the rows' maxima */
      const int prep = xready ? 0
                       : mv->fix_e != CK_XE_ROWMAX && L->fmt != CK_DBF16
                           ? ck_xprep_batched_fixed(L, x, nb, nz, R->xp, R->xs, R->xexp, mv->fix_e, D->stream)
                           : ck_xprep_batched(L, x, nb, nz, R->xp, R->xs, R->xexp, R->pmax, D->stream);
      if (rt_status(prep, "x prep launch", err) ||
          rt_status(cols ? ck_qmv_cols(L, nb, R->xp, R->xexp, yo, ldy, split, stride, D->stream)
                         : ck_qmv_rows(L, R->zero, nz, nb, R->xp, R->xs, R->xexp, yo, ldy, split, stride, D->stream),
                    "mat-vec launch", err))
        return -1;
      if (ksp) {
        ksp->n = split;
        ksp->stride = stride;
      }
      continue;
    }
    if (!rowexact && T > P->gemm_min) {
      if (prefill_gemm_ready(D, err) ||
          rt_status(pf_dequant(L, P->iota, P->wbuf, D->stream), "weight dequantization", err) ||
          cg_gemm_bf16(P->cublas, D->stream, T, L->rows, L->cols, x, P->wbuf, yo, ldy, err))
        return -1;
      continue;
    }
    for (int b0 = 0; b0 < T; b0 += 8) {
      int nb = T - b0 < 8 ? T - b0 : 8;
      if (rowexact && nb == 1) nb = 2;
      const uint16_t *xr = x + (int64_t)b0 * L->cols;
      if (L->fmt != CK_GENERIC &&
          rt_status(ck_xprep(L, xr, nb, D->xp, D->xs, D->xexp, D->pmax, D->stream), "x prep launch", err))
        return -1;
      if (rt_status(ck_qmv(L, 0, xr, D->xp, D->xs, D->xexp, nb, yo + (int64_t)b0 * ldy, ldy, D->stream),
                    "mat-vec launch", err))
        return -1;
    }
  }
  return 0;
}
static int pf_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, int T, float *y, int64_t ldy,
                 mlxrt_error *err) {
  return dec_rows_mv(D, mv, x, T, y, ldy, NULL, 0, NULL, err);
}

/* T rows' per-layer embeddings from R->h (the scaled embeddings) into R->ple [T, L·P]. */
int dec_rows_ple_inputs(accel_decoder *D, const dec_rows *R, int T, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int64_t LP = (int64_t)d->n_layers * d->ple_dim;
  void *st = D->stream;
  return cprof_mark(&D->prof, "prefill: per-layer inputs", err) ||
         rt_status(pf_norm_rows(NULL, 0, NULL, R->h, 0, 0.0f, NULL, R->xb, T, d->hidden, d->eps, st), "per-layer input",
                   err) ||
         dec_rows_mv(D, &D->ple_mp, R->xb, T, R->y, LP, R->rowexact, 0, NULL, err) ||
         rt_status(ck_embed(D->ple_emb, R->tok, T, R->ple_rows, st), "per-layer embedding gather", err) ||
         rt_status(dk_ple_inputs(R->y, 1, 0, LP, R->ple_rows, D->ple_pnorm, d->n_layers, d->ple_dim, d->ple_model_scale,
                                 d->ple_embed_scale, d->ple_mix_scale, d->eps, R->ple, T, st),
                   "per-layer inputs", err);
}

/* Layer i's FFN residual from fy [T, H] (xb = bf16 h, no norm), then its per-layer input
 * through gate, GeGLU and projection into R->y [T, H]. */
int dec_rows_ple_layer(accel_decoder *D, const dec_rows *R, int i, const float *fy, int T, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const dec_layer *y = &D->ly[i];
  const int H = d->hidden, Pd = d->ple_dim;
  void *st = D->stream;
  return rt_status(pf_norm_rows(fy, H, y->norms + 3 * (int64_t)H, R->h, 0, 0.0f, NULL, R->xb, T, H, d->eps, st),
                   "FFN residual", err) ||
         cprof_mark(&D->prof, "prefill: per-layer input", err) ||
         dec_rows_mv(D, &y->pg, R->xb, T, R->y, Pd, R->rowexact, 0, NULL, err) ||
         rt_status(dk_ple_gate(R->y, 1, 0, Pd, R->ple + (int64_t)i * Pd, (int64_t)d->n_layers * Pd, Pd, R->gub, T, NULL,
                               NULL, 0, st),
                   "per-layer input gelu", err) ||
         dec_rows_mv(D, &y->pp, R->gub, T, R->y, H, R->rowexact, 0, NULL, err);
}

int dec_rows_embed(accel_decoder *D, const dec_rows *R, int T, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int H = d->hidden;
  void *st = D->stream;
  return cprof_mark(&D->prof, "prefill: embed + norm", err) ||
         rt_status(ck_embed(D->embed, R->tok, T, R->emb, st), "embedding gather", err) ||
         rt_status(dk_embed_scale(R->emb, R->h, T * H, d->embed_scale, st), "embedding scale", err) ||
         (d->ple_dim > 0 && dec_rows_ple_inputs(D, R, T, err)) ||
         rt_status(pf_norm_rows(NULL, 0, NULL, R->h, 0, 0.0f, D->ly[0].norms, R->xb, T, H, d->eps, st), "input norm",
                   err);
}

static dec_rows chunk_rows(const dec_prefill *P, const int32_t *tok) {
  return (dec_rows){P->h, P->y, P->ple, P->xb, P->gub, P->ple_rows, P->emb, tok, NULL};
}

/* One chunk: tokens all_tokens[p0 .. p0+T) through every layer; h holds the residuals after. */
static int pf_chunk(accel_decoder *D, int64_t p0, int T, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_prefill *P = D->pf;
  int H = d->hidden, nq = d->n_heads;
  void *st = D->stream;
  cprof *C = &D->prof;
  const dec_rows R = chunk_rows(P, D->all_tokens + p0);
  if (dec_rows_embed(D, &R, T, err)) return -1;
  for (int i = 0; i < d->n_layers; i++) {
    const accel_layer_desc *l = &d->layers[i];
    dec_layer *y = &D->ly[i];
    const float *nrm = y->norms;
    const float *next_norm = i == d->n_layers - 1 ? D->final_norm : D->ly[i + 1].norms;
    int64_t kvd = (int64_t)y->nkv * y->hd;
    int64_t ldq = y->qkv.rows, inter = y->inter;
    /* the chunk's K/V of the layer whose cache this one reads (itself, or its KV source):
     * full layers straight into their cache slots; sliding layers staged */
    const int src = l->kv_source;
    const dec_layer *sy = &D->ly[src];
    uint16_t *kdst = sy->window > 0     ? (P->fks[src] ? P->fks[src] : P->ks)
                     : sy->kv.kfmt > 0 ? (uint16_t *)((uint8_t *)sy->kc + p0 * sy->kv.kps)
                                       : sy->kc + p0 * sy->kv.ps;
    uint16_t *vdst = sy->window > 0 ? (P->fvs[src] ? P->fvs[src] : P->vs) : sy->vc + p0 * sy->kv.ps;
    if (cprof_mark(C, "prefill: q|k|v product", err) || pf_mv(D, &y->qkv, P->xb, T, P->y, ldq, err) ||
        cprof_mark(C, "prefill: q/k/v norm+rope", err) ||
        rt_status(pf_qkv_post(P->y, ldq, T, p0, nq, y->nkv, y->hd, l->k_eq_v, nrm + 4 * (int64_t)H,
                              nrm + 4 * (int64_t)H + y->hd, y->inv_freq, d->rope_traditional, d->v_norm, d->eps,
                              sy->kv, P->q, y->own ? kdst : NULL, y->own ? vdst : NULL, st),
                  "q/k/v norm+rope", err) ||
        cprof_mark(C, "prefill: attention", err) ||
        rt_status(pf_attention(P->q, y->kc, y->vc, kdst, vdst, T, p0, nq, y->nkv, y->hd, d->attn_scale, y->window,
                               y->kv, P->attb, st),
                  "attention", err) ||
        (y->own && !y->feeds && y->window > 0 &&
         rt_status(pf_kv_commit(P->ks, P->vs, y->kc, y->vc, T, p0, kvd, y->window, st), "K/V commit", err)) ||
        cprof_mark(C, "prefill: o product", err) || pf_mv(D, &y->o, P->attb, T, P->y, H, err) ||
        cprof_mark(C, "prefill: norms + residual", err) ||
        rt_status(pf_norm_rows(P->y, H, nrm + H, P->h, 0, 0.0f, nrm + 2 * (int64_t)H, P->xb, T, H, d->eps, st),
                  "attention residual", err) ||
        (y->moe && dec_moe_route(D, i, D->mb_pf, P->h, T, err)) ||
        cprof_mark(C, "prefill: gate|up product", err) || pf_mv(D, &y->gu, P->xb, T, P->y, 2 * inter, err) ||
        cprof_mark(C, "prefill: geglu", err) ||
        rt_status(pf_geglu(P->y, inter, T, P->gub, y->gu_il, st), "geglu", err) ||
        cprof_mark(C, "prefill: down product", err) || pf_mv(D, &y->down, P->gub, T, P->y, H, err))
      return mx_prefix(err, "layer %d", i);
    /* the FFN's output: the down product, or with an MoE block the block's sum */
    const float *fy = P->y, *fpost = nrm + 3 * (int64_t)H;
    if ((y->moe && dec_moe_experts(D, i, D->mb_pf, P->y, H, 1, 0, T, NULL, &fy, err)) ||
        cprof_mark(C, "prefill: norms + residual", err) ||
        (d->ple_dim > 0 && dec_rows_ple_layer(D, &R, i, fy, T, err)))
      return mx_prefix(err, "layer %d", i);
    if (d->ple_dim > 0) { /* the layer's last residual: its per-layer input's projection */
      fy = P->y;
      fpost = y->ple_norm;
    }
    if (rt_status(pf_norm_rows(fy, H, fpost, P->h, d->has_layer_scalar, l->layer_scalar, next_norm, P->xb, T, H,
                               d->eps, st),
                  "FFN residual", err))
      return mx_prefix(err, "layer %d", i);
  }
  /* the rings later layers read: committed once every layer has seen the chunk */
  for (int i = 0; i < d->n_layers; i++) {
    const dec_layer *y = &D->ly[i];
    if (P->fks[i] && rt_status(pf_kv_commit(P->fks[i], P->fvs[i], y->kc, y->vc, T, p0, (int64_t)y->nkv * y->hd,
                                            y->window, st),
                               "K/V commit", err))
      return mx_prefix(err, "layer %d", i);
  }
  return 0;
}

/* Feeds tokens[0..n) at pos..pos+n-1 in chunks; leaves D->xb / D->pmax as the head expects
 * (the final norm of the last token and its block maxima). */
int dec_prefill_run(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, mlxrt_error *err) {
  if (!D->pf && dec_prefill_init(D, err)) return -1;
  dec_prefill *P = D->pf;
  const accel_model_desc *d = D->d;
  for (int64_t done = 0; done < n;) {
    int64_t k = n - done < STAGE_TOKENS ? n - done : STAGE_TOKENS;
    memcpy(D->h_toks, tokens + done, (size_t)k * sizeof(int32_t));
    if (rt_h2d(D->all_tokens + pos + done, D->h_toks, (size_t)k * sizeof(int32_t), D->stream, err) ||
        rt_stream_sync(D->stream, err))
      return -1;
    done += k;
  }
  int T = 0;
  for (int64_t c0 = 0; c0 < n; c0 += T) {
    T = (int)(n - c0 < P->tmax ? n - c0 : P->tmax);
    if (pf_chunk(D, pos + c0, T, err) || cprof_flush(&D->prof, err))
      return mx_prefix(err, "chunk at position %lld", (long long)(pos + c0));
  }
  const float *h_last = P->h + (int64_t)(T - 1) * d->hidden;
  if (rt_status(dk_residual_norm(NULL, 1, 0, NULL, (float *)h_last, 0, 0.0f, D->final_norm, D->xb, d->hidden, d->eps, D->pmax,
                                 ck_xprep_block(), D->xp, D->xexp, D->head.xmode, DK_XE_ROWMAX, NULL, 0, D->stream),
                "final norm", err))
    return -1;
  return rt_stream_sync(D->stream, err);
}
