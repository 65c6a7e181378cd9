/* Launchers of the MoE block's kernels (moe.cu) for the decoder's step (T = 1) and its prompt
 * pass (T rows), with the reference path's rounding points (reference.c moe_block,
 * docs/NUMERICS.md): activations are float32 arrays holding bf16 values, or bf16 where a
 * product reads them. Return a cudaError_t (0 = ok). */
#ifndef MLXRT_CUDA_MOE_KERNELS_H
#define MLXRT_CUDA_MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* With preps (T = 1, H a multiple of 32; NULL: none), the step's kernel also writes the activation
 * preps of xr (the router's product) and xe (the experts' gate|up), bit for bit what
 * ck_xprep_fixed makes of them: fragment-ordered fp16 x·2^e (xmode 1; with the affine formats'
 * group sums when gs > 0) or bf16 as is (xmode 2, e 0), the exponents of the 8 rows (the one
 * row's e, then zeros) and the other rows' sums zero. Two launches fewer per MoE layer. */
typedef struct dk_moe_prep1 {
  uint16_t *xp;
  float *xs; /* group sums [H / gs][8] (gs > 0) */
  int *xexp; /* [8] */
  int xmode, gs, e;
} dk_moe_prep1;
typedef struct dk_moe_preps {
  dk_moe_prep1 router, experts;
} dk_moe_preps;

/* Per row t < T of the residual h after the attention: xr[t] = bf16 rmsnorm(h[t], w_router),
 * xe[t] = bf16 rmsnorm(h[t], w_pre2); zero[0 … nzero) set to zero (NULL, 0: none). */
int dk_moe_norms(const float *h, const float *w_router, const float *w_pre2, int T, int H, float eps, uint16_t *xr,
                 uint16_t *xe, float *zero, int nzero, const dk_moe_preps *preps, void *stream);

/* The step's one-row forms (moe_cluster.cu), which dk_moe_norms and dk_moe_combine take for
 * T = 1 (combine: map NULL) where dk_moe_fits_cluster(H). */
int dk_moe_fits_cluster(int H);
int dk_moe_norms_cluster(const float *h, const float *w_router, const float *w_pre2, int H, float eps, uint16_t *xr,
                         uint16_t *xe, float *zero, int nzero, const dk_moe_preps *preps, void *stream);
int dk_moe_combine_cluster(const float *ys, int ks, int64_t kstride, const float *w_post1, const float *y, int64_t ldy,
                           const float *wts, const float *w_post2, int top_k, int H, float eps, float *out,
                           void *stream);

/* Per row t < T of router scores s (row t at s + t·lds, ks partial sums kstride apart, float32;
 * rounded to bf16 here): the
 * top_k ids by score (ties and NaN as the reference's scan: the lower index first), then
 * w = bf16(bf16(softmax over the top_k in float32) · pes[id]) → ids / wts [T, top_k]. top_k ≤ 32. */
int dk_moe_route(const float *s, int64_t lds, int ks, int64_t kstride, int T, int E, int top_k, const float *pes,
                 int *ids, float *wts, void *stream);

/* Per row t < T: out[t] = bf16(rmsnorm(bf16 ys[t], w_post1) + rmsnorm(bf16(Σ_k bf16(wts[t,k] ·
 * bf16 y_k)), w_post2)), the sum float32 in k order, where ys[t] is the shared MLP's output (row
 * t at ys + t·lds, ks partial sums kstride apart) and y_k row map[t·top_k + k] of the experts'
 * outputs y (row r at y + r·ldy), or row t·top_k + k when map is NULL. */
int dk_moe_combine(const float *ys, int64_t lds, int ks, int64_t kstride, const float *w_post1, const float *y,
                   int64_t ldy, const int *map, const float *wts, const float *w_post2, int T, int top_k, int H,
                   float eps, float *out, void *stream);

/* The prompt pass's grouping of T·top_k choices ids [T, top_k] by expert, in token order
 * within each expert, each expert's rows padded to a multiple of 8: work item w < nitems
 * (dk_moe_items) holds rows 8w … 8w+7 of expert item_e[w] (−1: none); src[r] is the token of
 * grouped row r (−1: padding); pos[t·top_k + k] the grouped row of choice (t, k). With runs
 * (may be NULL): each expert's items cut into runs of at most mb, run j = items runs[2j] …
 * + runs[2j + 1] (count 0: none) for j < dk_moe_runs (ck_qmm_grouped's blocks). A token's
 * top_k ids are distinct (dk_moe_route's). One block, when dk_moe_group_fits(T, E). */
int dk_moe_items(int T, int top_k, int E);
int dk_moe_group_fits(int T, int E);
int dk_moe_runs(int T, int top_k, int E, int mb);
int dk_moe_group(const int *ids, int T, int top_k, int E, int *item_e, int *src, int *pos, int mb, int *runs,
                 void *stream);

/* xg[r] = x[src[r]] (bf16 rows of H), zeros where src[r] < 0, for r < rows. */
int dk_moe_gather(const uint16_t *x, const int *src, int64_t rows, int H, uint16_t *xg, void *stream);

#ifdef __cplusplus
}
#endif

#endif
