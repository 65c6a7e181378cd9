/* The CUDA decoder's MoE blocks (Gemma 4 26B-A4B: accel_moe_desc, gemma-architecture.md §7),
 * with reference.c moe_block's math and rounding points, in the step's graph and in the
 * prompt pass.
 *
 * After the shared MLP: its post-norm and the router's and experts' input norms (one kernel),
 * the router's product, top-k and weights (one small kernel: the ids stay on the device), the
 * chosen experts' gate|up products (each expert's gate and up rows concatenated in its slab:
 * one launch), GeGLU, their down products, and the weighted sum with its norm and the add
 * (one kernel). The expert products are the mat-vec's expert mode (ck_qmv_experts): block z
 * reads only slab ids[z], so a step streams only the chosen experts' bytes and no id crosses
 * to the host.
 *
 * Step (T = 1): expert z is activation batch z of one row (gate|up all read the one prep of
 * the experts' input). Prompt pass (T tokens): the T·top_k choices are grouped by expert
 * (dk_moe_group), each expert's rows padded to batches of 8, so each chosen expert's weights
 * are streamed from memory once per chunk (its batches after the first hit the L2); the
 * router's rows go through the same mode as one slab of batches of 8. */
#include <stdlib.h>

#include "cuda_decoder_internal.h"
#include "moe_kernels.h"

typedef struct dec_moe {
  int E, K, I;
  dec_mv router;
  const ck_layout *gu;   /* [E, 2·I, H]: each expert's gate and up rows, interleaved by gu_il (else gate, then up) */
  const ck_layout *down; /* [E, H, I] */
  int gu_il;             /* 8 when I % 8 == 0 */
  int gu_epi;            /* the step's gate|up makes GeGLU in its epilogue (ck_qmv_experts_geglu): a fast format */
  int xe_router, xe_pre2; /* the step's fixed prep exponents of the two input norms (dec_norm_fixed_exp) */
  float *vec; /* router_norm, post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2 [H each], per_expert_scale [E] */
} dec_moe;

/* An activation prep: fragment-ordered x, group sums, exponents (ck_xprep_batched's layout). */
typedef struct moe_prep {
  uint16_t *xp;
  float *xs;
  int *xexp;
} moe_prep;

/* One chunk's work buffers (device), for every MoE layer's sizes. */
typedef struct dec_moe_buf {
  int T;  /* rows it holds */
  int nz; /* activation batches of the expert products: top_k (T = 1), else dk_moe_items */
  moe_prep pr, pg, pd; /* the router's, gate|up's and down's preps */
  float *scores, *wts, *y, *yd, *out, *pmax, *amax;
  uint16_t *xr, *xe, *xg, *act;
  int *ids, *item_e, *src, *pos, *runs, *zeros;
  int nruns; /* the chunk's runs of at most ck_qmm_group_batches() items (dk_moe_runs; the buffer holds T's) */
  int namax; /* floats of amax: the epilogue's maxima, 8·ceil(I / ck_xprep_block()) per batch */
  int ids_next; /* the step's route kernel is the experts' gate|up's predecessor: the ids are read
                   after its wait (no launch between them to have completed the route first) */
} dec_moe_buf;

static void free_buf(dec_moe_buf *B) {
  if (!B) return;
  void *dev[] = {B->pr.xp, B->pr.xs, B->pr.xexp, B->pg.xp, B->pg.xs, B->pg.xexp, B->pd.xp, B->pd.xs, B->pd.xexp,
                 B->scores, B->wts, B->y, B->yd, B->out, B->pmax, B->amax, B->xr, B->xe, B->xg, B->act, B->ids,
                 B->item_e, B->src, B->pos, B->runs, B->zeros};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  free(B);
}

void dec_moe_free(accel_decoder *D) {
  if (D->ly)
    for (int i = 0; i < D->d->n_layers; i++) {
      dec_moe *M = D->ly[i].moe;
      if (!M) continue;
      rt_free(M->vec);
      free(M);
      D->ly[i].moe = NULL;
    }
  free_buf(D->mb);
  free_buf(D->mb_pf);
  D->mb = D->mb_pf = NULL;
}

int dec_moe_layer(accel_decoder *D, int i, mlxrt_error *err) {
  const accel_moe_desc *m = &D->d->layers[i].moe;
  const int64_t H = D->d->hidden;
  if (!m->experts) return 0;
  if (m->top_k > 32) return mx_fail(err, "CUDA decoder: layer %d: top-k %d above 32", i, m->top_k);
  if (!dec_same_format(&m->gate->spec, &m->up->spec))
    return mx_fail(err, "CUDA decoder: layer %d: the experts' gate_proj and up_proj differ in format", i);
  dec_moe *M = mx_calloc(1, sizeof *M, err);
  if (!M) return -1;
  D->ly[i].moe = M;
  M->E = m->experts;
  M->K = m->top_k;
  M->I = m->intermediate;
  M->gu_il = M->I % 8 == 0 ? 8 : 0;
  const accel_weight *gu[2] = {m->gate, m->up};
  if (dec_make_mv(D, &m->router, 1, "router", i, &M->router, err) ||
      !(M->gu = dec_upload_cat(D, gu, 2, M->gu_il, "experts' gate|up", i, err)) ||
      !(M->down = cudab_resident(D->b, m->down, err)))
    return -1;
  M->gu_epi = M->gu_il && M->gu->fmt != CK_GENERIC;
  M->xe_router = dec_norm_fixed_exp(m->router_norm, (int)H);
  M->xe_pre2 = dec_norm_fixed_exp(m->pre_ffw_norm_2, (int)H);
  DALLOC(M->vec, 4 * H + M->E);
  const float *vs[4] = {m->router_norm, m->post_ffw_norm_1, m->pre_ffw_norm_2, m->post_ffw_norm_2};
  for (int k = 0; k < 4; k++)
    if (dec_upload_floats(D, M->vec + k * H, vs[k], H, err)) return -1;
  return dec_upload_floats(D, M->vec + 4 * H, m->per_expert_scale, M->E, err);
fail:
  return -1;
}

static int alloc_prep(moe_prep *p, int64_t batches, int64_t nb, int64_t cols, mlxrt_error *err) {
  DALLOC(p->xp, batches * nb * cols);
  DALLOC(p->xs, batches * (cols / 32 + 1) * 8);
  DALLOC(p->xexp, batches * 8);
  return 0;
fail:
  return -1;
}

int dec_moe_buffers(accel_decoder *D, int T, dec_moe_buf **mb, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int64_t H = d->hidden;
  int64_t E = 0, K = 0, I = 0;
  for (int i = 0; i < d->n_layers; i++) {
    const dec_moe *M = D->ly[i].moe;
    if (!M) continue;
    if (M->E > E) E = M->E;
    if (M->K > K) K = M->K;
    if (M->I > I) I = M->I;
  }
  free_buf(*mb);
  *mb = NULL;
  if (!E) return 0;
  if (T > 1 && !dk_moe_group_fits(T, (int)E))
    return mx_fail(err, "CUDA decoder: MoE prompt chunks of %d tokens × %lld experts do not fit the grouping kernel", T,
                   (long long)E);
  dec_moe_buf *B = mx_calloc(1, sizeof *B, err);
  if (!B) return -1;
  *mb = B;
  B->T = T;
  B->nz = T == 1 ? (int)K : dk_moe_items(T, (int)K, (int)E);
  const int64_t nb = T == 1 ? 1 : 8, rows = B->nz * nb, Tp = (T + 7) / 8 * 8, pb = ck_xprep_block();
  const int64_t maxc = H > I ? H : I;
  B->namax = (int)(B->nz * 8 * ((I + pb - 1) / pb));
  if (alloc_prep(&B->pr, Tp / 8, 8, H, err) || alloc_prep(&B->pg, B->nz, nb, H, err) ||
      alloc_prep(&B->pd, B->nz, nb, I, err))
    return -1;
  DALLOC(B->pmax, (B->nz > Tp / 8 ? B->nz : Tp / 8) * 8 * ((maxc + pb - 1) / pb));
  DALLOC(B->amax, B->namax);
  DALLOC(B->xr, Tp * H);
  DALLOC(B->xe, T * H);
  DALLOC(B->scores, Tp * E);
  DALLOC(B->ids, T * K);
  DALLOC(B->wts, T * K);
  DALLOC(B->y, rows * 2 * I);
  DALLOC(B->act, rows * I);
  DALLOC(B->yd, rows * H);
  DALLOC(B->out, T * H);
  if (T > 1) {
    DALLOC(B->xg, rows * H);
    DALLOC(B->item_e, B->nz);
    DALLOC(B->src, rows);
    DALLOC(B->pos, T * K);
    B->nruns = dk_moe_runs(T, (int)K, (int)E, ck_qmm_group_batches());
    DALLOC(B->runs, 2 * (int64_t)B->nruns);
    DALLOC(B->zeros, Tp / 8);
    if (rt_memset(B->zeros, 0, (size_t)(Tp / 8) * sizeof(int), D->stream, err)) return -1;
  }
  /* the router's padding rows (a prompt's last batch of 8) stay zero */
  return rt_memset(B->xr, 0, (size_t)(Tp * H) * sizeof(uint16_t), D->stream, err) || rt_stream_sync(D->stream, err);
fail:
  return -1;
}

/* y (+ z·zy) = the products of L's slabs zslab[z < nz] with activation batches of nb rows (x:
 * batch z at x + z·nb·cols when xper, else batch 0 for every z), through the expert mode; the
 * prep (fast formats) into p first unless prepped. With grouped (a prompt's batches of 8), the
 * grouped product instead, in runs of one slab: the runs dk_moe_group wrote when runs, else
 * (the router: one small weight, zslab all 0) a block per batch, which spreads its few tiles
 * over more blocks. */
static int experts_mv(accel_decoder *D, dec_moe_buf *B, const moe_prep *p, int prepped, const ck_layout *L,
                      const int *zslab, int nz, const uint16_t *x, int nb, int xper, float *y, int64_t zy, int ready,
                      int grouped, const int *runs, mlxrt_error *err) {
  void *st = D->stream;
  if (L->fmt == CK_GENERIC)
    return rt_status(ck_qmv_generic_experts(L, zslab, nz, x, xper ? nb * L->cols : 0, nb, y, L->rows, zy, st),
                     "expert mat-vec launch", err);
  if (!prepped && rt_status(xper ? ck_xprep_batched(L, x, nb, nz, p->xp, p->xs, p->xexp, B->pmax, st)
                                 : ck_xprep(L, x, nb, p->xp, p->xs, p->xexp, B->pmax, st),
                            "expert x prep launch", err))
    return -1;
  if (grouped)
    return rt_status(ck_qmm_grouped(L, runs ? zslab : NULL, runs, runs ? B->nruns : 0, nz, 1, p->xp, p->xs, p->xexp,
                                    y, L->rows, zy, st),
                     "grouped expert product launch", err);
  /* ready: the slabs' ids come from a kernel that completed before this one's predecessor passed its wait */
  return rt_status(ck_qmv_experts(L, zslab, nz, p->xp, p->xs, p->xexp, nb, xper, y, L->rows, zy, ready, st),
                   "expert mat-vec launch", err);
}

/* One row's prep of x for L: the exponent e fixed by a bound when known, else from x's maximum. */
static int prep_row(accel_decoder *D, dec_moe_buf *B, const moe_prep *p, const ck_layout *L, const uint16_t *x, int e,
                    mlxrt_error *err) {
  if (L->fmt == CK_GENERIC) return 0;
  return rt_status(e != DK_XE_ROWMAX && L->fmt != CK_DBF16 ? ck_xprep_fixed(L, x, p->xp, p->xs, p->xexp, e, D->stream)
                                                           : ck_xprep(L, x, 1, p->xp, p->xs, p->xexp, B->pmax, D->stream),
                   "MoE x prep launch", err);
}

/* The preps dk_moe_norms can write for one row of x into p for L (ck_xprep_fixed's: a fast
 * format with the exponent e fixed by its norm's bound, or dense bf16); 0 where not. */
static int norm_prep1(const moe_prep *p, const ck_layout *L, int e, int64_t H, dk_moe_prep1 *o) {
  if (L->fmt == CK_GENERIC || L->cols != H || H % 32) return 0;
  const int bf16 = L->fmt == CK_DBF16, gs = L->fmt == CK_AFF4 || L->fmt == CK_AFF8 ? L->group_size : 0;
  if (!bf16 && e == DK_XE_ROWMAX) return 0;
  *o = (dk_moe_prep1){p->xp, p->xs, p->xexp, bf16 ? 2 : 1, gs, bf16 ? 0 : e};
  return 1;
}
static int norm_preps(const dec_moe_buf *B, const dec_moe *M, const ck_layout *R, int64_t H, dk_moe_preps *pp) {
  return norm_prep1(&B->pr, R, M->xe_router, H, &pp->router) && norm_prep1(&B->pg, M->gu, M->xe_pre2, H, &pp->experts);
}

int dec_moe_route(accel_decoder *D, int i, dec_moe_buf *B, const float *h, int T, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const dec_moe *M = D->ly[i].moe;
  const int H = d->hidden, E = M->E, K = M->K;
  const float *vec = M->vec;
  const ck_layout *R = M->router.L[0];
  void *st = D->stream;
  cprof *P = &D->prof;
  if (!B || T > B->T) return mx_fail(err, "MoE block: %d rows, buffers for %d", T, B ? B->T : 0);
  /* the step: the norms kernel writes both products' preps where their formats allow */
  dk_moe_preps pp;
  const int fused = T == 1 && norm_preps(B, M, R, H, &pp);
  B->ids_next = fused && D->side;
  if (cprof_mark(P, "moe: norms", err) ||
      rt_status(dk_moe_norms(h, vec, vec + 2 * (int64_t)H, T, H, d->eps, B->xr, B->xe, M->gu_epi ? B->amax : NULL,
                             M->gu_epi ? B->namax : 0, fused ? &pp : NULL, st),
                "MoE norms", err) ||
      cprof_mark(P, "moe: router", err))
    return -1;
  /* the router: one row as a plain product; a prompt's rows in batches of 8 through the expert
   * mode, the one weight as slab 0 */
  if (T == 1 ? (!fused && prep_row(D, B, &B->pr, R, B->xr, M->xe_router, err)) ||
                   rt_status(ck_qmv(R, 0, B->xr, B->pr.xp, B->pr.xs, B->pr.xexp, 1, B->scores, E, st), "router launch",
                             err)
             : experts_mv(D, B, &B->pr, 0, R, B->zeros, (T + 7) / 8, B->xr, 8, 1, B->scores, 8 * (int64_t)E, 1, 1,
                          NULL, err))
    return -1;
  if (cprof_mark(P, "moe: route", err) ||
      rt_status(dk_moe_route(B->scores, E, 1, 0, T, E, K, vec + 4 * (int64_t)H, B->ids, B->wts, st), "MoE route", err))
    return -1;
  /* the experts' input: one prep (the step), or the choices grouped by expert and prepped */
  if (T == 1) return fused ? 0 : prep_row(D, B, &B->pg, M->gu, B->xe, M->xe_pre2, err);
  const int nz = dk_moe_items(T, K, E);
  B->nruns = dk_moe_runs(T, K, E, ck_qmm_group_batches());
  return cprof_mark(P, "moe: grouping", err) ||
         rt_status(dk_moe_group(B->ids, T, K, E, B->item_e, B->src, B->pos, ck_qmm_group_batches(), B->runs, st),
                   "MoE grouping", err) ||
         cprof_mark(P, "moe: experts' prep", err) ||
         (M->gu->fmt == CK_GENERIC
              ? rt_status(dk_moe_gather(B->xe, B->src, (int64_t)nz * 8, H, B->xg, st), "MoE gather", err)
              : rt_status(ck_xprep_rows(M->gu, B->xe, B->src, nz, B->pg.xp, B->pg.xs, B->pg.xexp, B->pmax, st),
                          "expert x prep launch", err));
}

int dec_moe_experts(accel_decoder *D, int i, dec_moe_buf *B, const float *ys, int64_t lds, int ks, int64_t kstride,
                    int T, void *join, const float **out, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const dec_moe *M = D->ly[i].moe;
  const int H = d->hidden, E = M->E, K = M->K, I = M->I, pb = ck_xprep_block();
  const float *vec = M->vec;
  void *st = D->stream;
  const int *zslab = T == 1 ? B->ids : B->item_e;
  const int nz = T == 1 ? K : dk_moe_items(T, K, E), nb = T == 1 ? 1 : 8;
  if (cprof_mark(&D->prof, "moe: experts", err)) return -1;
  if (T == 1 && M->gu_epi) {
    /* gate|up with GeGLU in its epilogue, its maxima for down's prep */
    const int64_t amax_z = 8 * (int64_t)((I + pb - 1) / pb);
    if (rt_status(ck_qmv_experts_geglu(M->gu, zslab, nz, B->pg.xp, B->pg.xs, B->pg.xexp, B->act, B->amax, pb, amax_z,
                                       !B->ids_next, st),
                  "expert gate|up + geglu launch", err) ||
        rt_status(ck_xprep_batched_premax(M->down, B->act, nz, B->pd.xp, B->pd.xs, B->pd.xexp, B->amax, st),
                  "expert x prep launch", err) ||
        experts_mv(D, B, &B->pd, 1, M->down, zslab, nz, B->act, 1, 1, B->yd, H, 1, 0, NULL, err))
      return -1;
  } else if (experts_mv(D, B, &B->pg, 1, M->gu, zslab, nz, T == 1 ? B->xe : B->xg, nb, T > 1, B->y,
                        (int64_t)nb * 2 * I, !B->ids_next, T > 1, B->runs, err) ||
             rt_status(dk_geglu(B->y, B->y + (M->gu_il ? M->gu_il : I), 1, 0, B->act, (int64_t)nz * nb * I, NULL, pb,
                                M->gu_il ? M->gu_il : I, st),
                       "MoE geglu", err) ||
             cprof_mark(&D->prof, "moe: experts' down", err) ||
             experts_mv(D, B, &B->pd, 0, M->down, zslab, nz, B->act, nb, 1, B->yd, (int64_t)nb * H, 1, T > 1,
                        B->runs, err)) {
    return -1;
  }
  if ((join && rt_stream_wait_event(st, join, err)) || cprof_mark(&D->prof, "moe: combine", err) ||
      rt_status(dk_moe_combine(ys, lds, ks, kstride, vec + H, B->yd, H, T > 1 ? B->pos : NULL, B->wts,
                               vec + 3 * (int64_t)H, T, K, H, d->eps, B->out, st),
                "MoE combine", err))
    return -1;
  *out = B->out;
  return 0;
}
