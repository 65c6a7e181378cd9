/* The CUDA decoder's per-layer embeddings (Gemma 4 E2B / E4B: gemma-architecture.md §8) in the
 * step's graph: the step's inputs from the embedding, and each layer's tail after its FFN —
 * one launch (dk_ple_tail) where the gate's and projection's format and shapes allow it, else
 * the residual norm, gate, GeGLU and projection launches, whose post-norm the layer's last
 * residual norm applies. docs/DECODE.md "Per-layer embeddings" has the rounding points. */
#include "cuda_decoder_internal.h"

/* The decoder's work buffers a chain of launches uses (dec_run_mv, the norms), swapped as a
 * whole for a chain on the side stream. */
typedef struct dec_work {
  void *stream;
  uint16_t *xb, *xp;
  float *xs, *pmax, *y;
  int *xexp;
} dec_work;
static dec_work work_swap(accel_decoder *D, dec_work w) {
  const dec_work old = {D->stream, D->xb, D->xp, D->xs, D->pmax, D->y, D->xexp};
  D->stream = w.stream, D->xb = w.xb, D->xp = w.xp, D->xs = w.xs, D->pmax = w.pmax, D->y = w.y, D->xexp = w.xexp;
  return old;
}

/* The step's per-layer embeddings from h (the scaled embedding): xb = bf16 h, the model
 * projection, the token's table row, then D->ple [L·P]. With a side stream all but the first
 * launch run there, in their own buffers, beside layer 0's attention (joined before layer 0's
 * per-layer input: enqueue_body); the first reads h before layer 0 changes it. */
int dec_ple_inputs(accel_decoder *D, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  dec_work saved = {0};
  if (D->side) saved = work_swap(D, (dec_work){D->stream, D->ple_xb, D->ple_xp, D->ple_xs, D->ple_pmax, D->ple_y,
                                               D->ple_xexp});
  int rc = cprof_mark(&D->prof, "per-layer inputs", err) ||
           rt_status(dk_residual_norm(NULL, 1, 0, NULL, D->h, 0, 0.0f, NULL, D->xb, d->hidden, d->eps, D->pmax,
                                      ck_xprep_block(), D->xp, D->xexp, 0, DK_XE_ROWMAX, NULL, 0, D->stream),
                     "per-layer input", err);
  if (!rc && D->side) {
    rc = rt_event_record(D->ev_ple_fork, D->stream, err) || rt_stream_wait_event(D->side, D->ev_ple_fork, err);
    D->stream = D->side;
  }
  rc = rc || dec_run_mv(D, &D->ple_mp, D->xb, D->y, XP_PREMAX, err) ||
       rt_status(ck_embed(D->ple_emb, D->tok, 1, D->ple_row, D->stream), "per-layer embedding gather", err) ||
       rt_status(dk_ple_inputs(D->y, D->ple_mp.ks, D->ple_mp.rows, 0, D->ple_row, D->ple_pnorm, d->n_layers, d->ple_dim,
                               d->ple_model_scale, d->ple_embed_scale, d->ple_mix_scale, d->eps, D->ple, 1, D->stream),
                 "per-layer inputs", err);
  if (D->side) {
    rc = rc || rt_event_record(D->ev_ple_join, D->side, err);
    work_swap(D, saved);
  }
  return rc;
}

/* Layer i's FFN residual from its product fy (fks partial sums frows apart), then its
 * per-layer input: gate on bf16 h, GeGLU with D->ple's row i, projection into D->y. The
 * residual and the GeGLU write the products' activation preps where their formats allow
 * (xmode: two prep launches fewer per layer). */
int dec_ple_layer(accel_decoder *D, int i, const float *fy, int fks, int64_t frows, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const dec_layer *y = &D->ly[i];
  const int P = d->ple_dim, gx = y->pg.xmode, px = y->pp.xmode && P % 32 == 0 ? y->pp.xmode : 0;
  void *st = D->stream;
  return rt_status(dk_residual_norm(fy, fks, frows, y->norms + 3 * (int64_t)d->hidden, D->h, 0, 0.0f, NULL, D->xb,
                                    d->hidden, d->eps, gx ? NULL : D->pmax, ck_xprep_block(), D->xp, D->xexp, gx,
                                    DK_XE_ROWMAX, NULL, 0, st),
                   "FFN residual", err) ||
         cprof_mark(&D->prof, "per-layer input gate", err) ||
         dec_run_mv(D, &y->pg, D->xb, D->y, gx ? XP_DONE : XP_PREMAX, err) ||
         rt_status(dk_ple_gate(D->y, y->pg.ks, y->pg.rows, 0, D->ple + (int64_t)i * P, 0, P, D->gub, 1, D->xp, D->xexp,
                               px, st),
                   "per-layer input gelu", err) ||
         cprof_mark(&D->prof, "per-layer projection", err) ||
         dec_run_mv(D, &y->pp, D->gub, D->y, px ? XP_DONE : XP_FULL, err);
}

/* The one-launch tail serves layer i: its gate and projection one resident weight each, of one
 * layout and shape dk_ple_tail takes. */
int dec_ple_tail_ok(const accel_decoder *D, int i) {
  const accel_model_desc *d = D->d;
  const dec_layer *y = &D->ly[i];
  if (y->pg.n != 1 || y->pp.n != 1 || y->pg.ks < 1 || y->moe) return 0;
  const ck_layout *G = y->pg.L[0], *Q = y->pp.L[0];
  return G->fmt == Q->fmt && G->group_size == Q->group_size && G->scales_dtype == Q->scales_dtype && G->slabs == 1 &&
         Q->slabs == 1 && G->rows == d->ple_dim && G->cols == d->hidden && Q->rows == d->hidden &&
         Q->cols == d->ple_dim &&
         dk_ple_tail_smem(G->fmt, G->group_size, G->scales_dtype == ACCEL_F16, d->hidden, d->ple_dim) > 0;
}

/* Layer i's tail in one launch from its FFN product fy (fks partial sums frows apart): after it
 * h is the layer's output, xb the next norm of it (w_next; the next product next_mv with the
 * prep exponent xe_next). */
int dec_ple_tail(accel_decoder *D, int i, const float *fy, int fks, int64_t frows, const float *w_next,
                 const dec_mv *next_mv, int xe_next, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const dec_layer *y = &D->ly[i];
  const ck_layout *G = y->pg.L[0], *Q = y->pp.L[0];
  const dk_ple_tail_args a = {
      .fmt = G->fmt, .group = G->group_size, .f16 = G->scales_dtype == ACCEL_F16, .y = fy, .ks = fks, .kstride = frows, .w_post = y->norms + 3 * (int64_t)d->hidden, .h = D->h,
      .H = d->hidden, .eps = d->eps, .gw = G->w, .gs = G->s, .ple = D->ple + (int64_t)i * d->ple_dim, .P = d->ple_dim,
      .pw = Q->w, .ps = Q->s, .w_ple = y->ple_norm, .use_scalar = d->has_layer_scalar,
      .scalar = d->layers[i].layer_scalar, .w_next = w_next, .xb = D->xb, .xp = D->xp, .xexp = D->xexp,
      .xmode = next_mv->xmode, .xe_fixed = xe_next, .pmax = D->pmax, .pblock = ck_xprep_block()};
  return rt_status(dk_ple_tail(&a, D->stream), "per-layer tail", err);
}
