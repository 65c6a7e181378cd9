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
  const ck_layout *gu;   /* [E, 2·I, H]: each expert's gate rows, then its up rows */
  const ck_layout *down; /* [E, H, I] */
  float *vec; /* router_norm, post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2 [H each], per_expert_scale [E] */
} dec_moe;

/* One chunk's work buffers (device), for every MoE layer's sizes. */
typedef struct dec_moe_buf {
  int T;      /* rows it holds */
  int nz;     /* activation batches of the expert products: top_k (T = 1), else dk_moe_items */
  float *h1, *scores, *wts, *y, *yd, *out, *xs, *pmax;
  uint16_t *xr, *xe, *xg, *act, *xp;
  int *ids, *xexp, *item_e, *src, *pos, *zeros;
} dec_moe_buf;

static void free_buf(dec_moe_buf *B) {
  if (!B) return;
  void *dev[] = {B->h1, B->scores, B->wts, B->y, B->yd, B->out, B->xs, B->pmax, B->xr, B->xe, B->xg, B->act,
                 B->xp, B->ids, B->xexp, B->item_e, B->src, B->pos, B->zeros};
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
  const accel_weight *gu[2] = {m->gate, m->up};
  if (dec_make_mv(D, &m->router, 1, "router", i, &M->router, err) ||
      !(M->gu = dec_upload_cat(D, gu, 2, 0, "experts' gate|up", i, err)) ||
      !(M->down = cudab_resident(D->b, m->down, err)))
    return -1;
  DALLOC(M->vec, 4 * H + M->E);
  const float *vs[4] = {m->router_norm, m->post_ffw_norm_1, m->pre_ffw_norm_2, m->post_ffw_norm_2};
  for (int k = 0; k < 4; k++)
    if (dec_upload_floats(D, M->vec + k * H, vs[k], H, err)) return -1;
  return dec_upload_floats(D, M->vec + 4 * H, m->per_expert_scale, M->E, err);
fail:
  return -1;
}

int dec_moe_buffers(accel_decoder *D, int T, dec_moe_buf **mb, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int64_t H = d->hidden;
  int64_t E = 0, K = 0, I = 0, rks = 1;
  for (int i = 0; i < d->n_layers; i++) {
    const dec_moe *M = D->ly[i].moe;
    if (!M) continue;
    if (M->E > E) E = M->E;
    if (M->K > K) K = M->K;
    if (M->I > I) I = M->I;
    if (M->router.ks > rks) rks = M->router.ks;
  }
  free_buf(*mb);
  *mb = NULL;
  if (!E) return 0;
  if (T > 1 && (T * K + 2 * E) * (int64_t)sizeof(int) > 48 * 1024)
    return mx_fail(err, "CUDA decoder: MoE prompt chunks of %d tokens × top-k %lld do not fit the grouping kernel", T,
                   (long long)K);
  dec_moe_buf *B = mx_calloc(1, sizeof *B, err);
  if (!B) return -1;
  *mb = B;
  B->T = T;
  B->nz = T == 1 ? (int)K : dk_moe_items(T, (int)K, (int)E);
  const int64_t nb = T == 1 ? 1 : 8, rows = B->nz * nb, Tp = (T + 7) / 8 * 8, maxc = H > I ? H : I;
  const int64_t nblk = (maxc + ck_xprep_block() - 1) / ck_xprep_block();
  const int64_t batches = B->nz > Tp / 8 ? B->nz : Tp / 8;
  DALLOC(B->h1, T * H);
  DALLOC(B->xr, Tp * H);
  DALLOC(B->xe, T * H);
  DALLOC(B->scores, Tp * E * rks);
  DALLOC(B->ids, T * K);
  DALLOC(B->wts, T * K);
  DALLOC(B->y, rows * 2 * I);
  DALLOC(B->act, rows * I);
  DALLOC(B->yd, rows * H);
  DALLOC(B->out, T * H);
  DALLOC(B->xp, batches * nb * maxc);
  DALLOC(B->xs, batches * (maxc / 32 + 1) * 8);
  DALLOC(B->xexp, batches * 8);
  DALLOC(B->pmax, batches * 8 * nblk);
  if (T > 1) {
    DALLOC(B->xg, rows * H);
    DALLOC(B->item_e, B->nz);
    DALLOC(B->src, rows);
    DALLOC(B->pos, T * K);
    DALLOC(B->zeros, Tp / 8);
    if (rt_memset(B->zeros, 0, (size_t)(Tp / 8) * sizeof(int), D->stream, err)) return -1;
  }
  /* the router's padding rows (a prompt's last batch of 8) stay zero */
  return rt_memset(B->xr, 0, (size_t)(Tp * H) * sizeof(uint16_t), D->stream, err) || rt_stream_sync(D->stream, err);
fail:
  return -1;
}

/* y (+ z·zy) = the products of L's slabs zslab[z < nz] with activation batches of nb rows (x:
 * batch z at x + z·nb·cols when xper, else batch 0 for every z), through the expert mode. */
static int experts_mv(accel_decoder *D, dec_moe_buf *B, const ck_layout *L, const int *zslab, int nz,
                      const uint16_t *x, int nb, int xper, float *y, int64_t zy, mlxrt_error *err) {
  void *st = D->stream;
  if (L->fmt == CK_GENERIC)
    return rt_status(ck_qmv_generic_experts(L, zslab, nz, x, xper ? nb * L->cols : 0, nb, y, L->rows, zy, st),
                     "expert mat-vec launch", err);
  const int prep = xper ? ck_xprep_batched(L, x, nb, nz, B->xp, B->xs, B->xexp, B->pmax, st)
                        : ck_xprep(L, x, nb, B->xp, B->xs, B->xexp, B->pmax, st);
  return rt_status(prep, "expert x prep launch", err) ||
         rt_status(ck_qmv_experts(L, zslab, nz, B->xp, B->xs, B->xexp, nb, xper, y, L->rows, zy, st),
                   "expert mat-vec launch", err);
}

int dec_moe_enqueue(accel_decoder *D, int i, dec_moe_buf *B, const float *y, int64_t ldy, int ks, int64_t kstride,
                    const float *h, int T, const float **out, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const dec_moe *M = D->ly[i].moe;
  const int H = d->hidden, E = M->E, K = M->K, I = M->I;
  const float *vec = M->vec;
  void *st = D->stream;
  cprof *P = &D->prof;
  if (!B || T > B->T) return mx_fail(err, "MoE block: %d rows, buffers for %d", T, B ? B->T : 0);
  if (cprof_mark(P, "moe: norms", err) ||
      rt_status(dk_moe_norms(y, ldy, ks, kstride, vec + H, h, vec, vec + 2 * (int64_t)H, T, H, d->eps, B->h1, B->xr,
                             B->xe, st),
                "MoE norms", err) ||
      cprof_mark(P, "moe: router", err))
    return -1;
  /* the router: the step's product (k splits summed by the route kernel); a prompt's rows in
   * batches of 8 through the expert mode, the one weight as slab 0 */
  int rks = 1;
  int64_t rstride = 0;
  if (T == 1) {
    if (dec_run_mv(D, &M->router, B->xr, B->scores, XP_FULL, err)) return -1;
    rks = M->router.ks;
    rstride = M->router.rows;
  } else if (experts_mv(D, B, M->router.L[0], B->zeros, (T + 7) / 8, B->xr, 8, 1, B->scores, 8 * (int64_t)E, err)) {
    return -1;
  }
  if (rt_status(dk_moe_route(B->scores, E, rks, rstride, T, E, K, vec + 4 * (int64_t)H, B->ids, B->wts, st),
                "MoE route", err) ||
      cprof_mark(P, "moe: experts", err))
    return -1;
  /* the experts: one row per choice (the step), or the choices grouped by expert */
  const int *zslab = B->ids;
  const uint16_t *xin = B->xe;
  int nz = K, nb = 1;
  if (T > 1) {
    nz = dk_moe_items(T, K, E);
    nb = 8;
    zslab = B->item_e;
    xin = B->xg;
    if (rt_status(dk_moe_group(B->ids, T, K, E, B->item_e, B->src, B->pos, st), "MoE grouping", err) ||
        rt_status(dk_moe_gather(B->xe, B->src, (int64_t)nz * 8, H, B->xg, st), "MoE gather", err))
      return -1;
  }
  if (experts_mv(D, B, M->gu, zslab, nz, xin, nb, T > 1, B->y, (int64_t)nb * 2 * I, err) ||
      rt_status(dk_geglu(B->y, B->y + I, 1, 0, B->act, (int64_t)nz * nb * I, NULL, ck_xprep_block(), I, st),
                "MoE geglu", err) ||
      experts_mv(D, B, M->down, zslab, nz, B->act, nb, 1, B->yd, (int64_t)nb * H, err) ||
      cprof_mark(P, "moe: combine", err) ||
      rt_status(dk_moe_combine(B->yd, H, T > 1 ? B->pos : NULL, B->wts, B->h1, vec + 3 * (int64_t)H, T, K, H, d->eps,
                               B->out, st),
                "MoE combine", err))
    return -1;
  *out = B->out;
  return 0;
}
