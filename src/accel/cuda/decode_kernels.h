/* Launchers of the whole-step decoder's kernels (decode.cu, attention.cu). Activations are
 * float32 arrays holding bf16 values, or bf16 where a mat-vec reads them; each kernel rounds
 * to bf16 where the reference path does (docs/NUMERICS.md). Positions are read from device
 * memory (*pos) so one captured graph serves every step. Return a cudaError_t (0 = ok). */
#ifndef MLXRT_CUDA_DECODE_KERNELS_H
#define MLXRT_CUDA_DECODE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y arguments below may hold the partial sums of a mat-vec split over ks k ranges (ck_qmv_split):
 * y[i] + y[i + kstride] + … in order; ks = 1 for a plain output. */
/* (*pos)++ (the end of one step's layers). */
int dk_step_end(int *pos, void *stream);
/* h[i] = bf16(bf16 e[i] · scale) */
int dk_embed_scale(const uint16_t *e, float *h, int H, float scale, void *stream);
/* The residual join and the next norm, one row of H:
 *   when y: o = rmsnorm(bf16(y), w_post); h = bf16(h + o); when use_scalar: h = bf16(h·scalar)
 *   then xb = bf16 rmsnorm(h, w_next) (w_next NULL: xb = bf16 h, no norm), and when pmax: pmax[b] = max|xb| over each pblock values
 *   (what ck_xprep_premax reads). xmode also writes the next mat-vec's activation prep for one
 *   row, bit-identical to ck_xprep: 1 = fp16 scaled by 2^xexp[0] (formats without group sums),
 *   2 = bf16 as is (dense bf16), both in fragment order at xp; 0 = none. xe_fixed: DK_XE_ROWMAX,
 *   or the exponent to use instead of the row maximum's (no pmax then; the caller's bound must
 *   keep |xb|·2^xe_fixed below 2^15, and xexp gets it). zero[0 … nzero) is set to zero after
 *   the wait (the maxima a later ck_qmv_geglu raises; NULL, 0: none). */
#define DK_XE_ROWMAX (-1000)
int dk_residual_norm(const float *y, int ks, int64_t kstride, const float *w_post, float *h, int use_scalar, float scalar,
                     const float *w_next, uint16_t *xb, int H, float eps, float *pmax, int pblock,
                     uint16_t *xp, int *xexp, int xmode, int xe_fixed, float *zero, int nzero, void *stream);
/* The same for T rows (the batched step): row t's y at y + t·ldy (its ks k splits kstride
 * apart, added in order), its h, xb and prep (xmode as above, the exponent from the row's
 * maximum) at t·H, its exponent at xexp[t]; a cluster per row, so each row's bits are its launch
 * alone's. xmode 3: the prep ck_xprep_wg makes of xb for the warpgroup product (fp16 x·2^e in
 * launches of 64 rows, H a multiple of 64), bit for bit, except that the rows past T of the last
 * launch are left as they are (the product never writes their columns). No maxima, no scratch
 * to clear. H must fit (dk_residual_norm_rows_fits: at most 16384 values, a multiple of 32). */
int dk_residual_norm_rows(const float *y, int ks, int64_t kstride, int64_t ldy, const float *w_post, float *h,
                          int use_scalar, float scalar, const float *w_next, uint16_t *xb, int H, float eps, uint16_t *xp,
                          int *xexp, int xmode, int T, void *stream);
int dk_residual_norm_rows_fits(int H);
/* Per head after the q|k|v product y = [q nq·hd | k nkv·hd | v nkv·hd] (v = k's rows when
 * k_eq_v): q = rope(rmsnorm(q, qn)) → q_out; k = rope(rmsnorm(k, kn)) and v (weightless
 * rmsnorm when v_norm) → the cache slot of *pos (pos % ck_ring(window) when window > 0, accel_ring.h)
 * in the layout kv (kv_layout.h; K from V: vc == kc, k_eq_v, v_norm, NeoX RoPE, no window, and q's
 * unmoved dims carry kn). kc NULL (a KV-shared layer, y = q only): the query heads alone. */
int dk_qkv_post(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd, int k_eq_v, const float *qn, const float *kn,
                const float *inv_freq, int traditional, int v_norm, float eps, const int *pos, int window,
                dk_kv_layout kv, float *q_out, uint16_t *kc, uint16_t *vc, void *stream);
/* The same for the nrows rows of a batched step (kv_layout.h dk_rows: row z's product at
 * y + z·in, its queries to q_out + z·out, its position pos[z], its K/V into slot slot[z]'s
 * cache; ks = 1). rows NULL, nrows 1: dk_qkv_post. */
int dk_qkv_post_rows(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd, int k_eq_v, const float *qn,
                     const float *kn, const float *inv_freq, int traditional, int v_norm, float eps, const int *pos,
                     int window, dk_kv_layout kv, float *q_out, uint16_t *kc, uint16_t *vc, const dk_rows *rows,
                     int nrows, void *stream);
/* out[i] = bf16(gelu_approx(bf16 g[i]) · bf16 u[i]); when pmax, pmax[b] = max|out| per pblock.
 * il > 0: the rows interleaved by il (u = g + il; value i at (i / il)·2·il + i mod il). */
int dk_geglu(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, float *pmax, int pblock,
             int il, void *stream);
/* Per-layer embeddings (Gemma 4 E2B/E4B; accel_model_desc ple_*), for T tokens: y the
 * per_layer_model_projection product [T, ldy] (ks partial sums kstride apart when T = 1), erow
 * the tokens' table rows [T, L·P] bf16, w the P norm weights: per slice l of token t,
 * out[t, l·P + j] = bf16(bf16(rmsnorm(bf16(bf16 y · ms), w) + bf16(erow · es)) · mix). */
int dk_ple_inputs(const float *y, int ks, int64_t kstride, int64_t ldy, const uint16_t *erow, const float *w,
                  int L, int P, float ms, float es, float mix, float eps, float *out, int T, void *stream);
/* A layer's gate on its per-layer input: out[t·P + j] = bf16(gelu_approx(bf16 g[t·ldg + j]) · ple[t·ldp + j])
 * (g: the per_layer_input_gate product, ks partial sums kstride apart; P ≤ 2048). xmode (T = 1,
 * P a multiple of 32): also the next mat-vec's activation prep of out, as dk_residual_norm
 * writes it (no maxima: the row is one block's); 0: none. */
int dk_ple_gate(const float *g, int ks, int64_t kstride, int64_t ldg, const float *ple, int64_t ldp, int P,
                uint16_t *out, int T, uint16_t *xp, int *xexp, int xmode, void *stream);
/* A per-layer-embedding layer's tail in one launch (ple_tail.cu): the FFN residual
 * (h += bf16 rmsnorm(bf16 y, w_post), y with ks partial sums kstride apart), the gate product
 * of bf16 h, out = dk_ple_gate's GeGLU with ple [P], the projection product of out, the residual
 * h += bf16 rmsnorm(bf16 proj, w_ple) (times scalar when use_scalar), then xb = bf16
 * rmsnorm(h, w_next) (w_next NULL: bf16 h) and its prep as dk_residual_norm writes it (xmode 1
 * or 2, xe_fixed or DK_XE_ROWMAX), or with xmode 0 its maxima pmax over blocks of pblock values
 * (at most 8). The gate [P, H] and the projection [H, P] are repacked
 * weights of one layout (gw/gs, pw/ps: codes and scales, kernels.h): fmt a ck_format, group its
 * group size and f16 whether its scales are f16 (affine formats; else ignored). */
typedef struct dk_ple_tail_args {
  int fmt, group, f16;
  const float *y;
  int ks;
  int64_t kstride;
  const float *w_post;
  float *h;
  int H;
  float eps;
  const uint8_t *gw, *gs;
  const float *ple;
  int P;
  const uint8_t *pw, *ps;
  const float *w_ple;
  int use_scalar;
  float scalar;
  const float *w_next;
  uint16_t *xb, *xp;
  int *xexp;
  int xmode, xe_fixed;
  float *pmax;
  int pblock;
} dk_ple_tail_args;
/* The dynamic shared memory one block of dk_ple_tail takes for this layout and these shapes, 0
 * where it does not serve them (shapes off its tiling, slices beyond the limit). */
#define DK_PLE_TAIL_SMEM_MAX (227 * 1024)
int dk_ple_tail_smem(int fmt, int gs, int f16, int H, int P);
int dk_ple_tail(const dk_ple_tail_args *a, void *stream);
/* logits = softcap(bf16 y) (cap 0 = none); *next = argmax (lowest index on ties), or
 * ACCEL_TOKEN_NONFINITE(id) when a logit is NaN or ±inf (id the lowest such). part_v / part_i:
 * dk_logits_blocks() entries; count and bad_rev: one word each, zeroed once (the kernel leaves
 * them zero). */
int dk_logits(const float *y, float *logits, int64_t V, float cap, float *part_v, int *part_i,
              unsigned *count, unsigned *bad_rev, int32_t *next, void *stream);
int dk_logits_blocks(int64_t V);

/* Decode attention of one query row per head at position *pos over the cache in the layout kv
 * (kv_layout.h; K from V: vc == kc and q's unmoved dims carry k_norm) (split over
 * `splits` blocks per head, each with at least min_keys keys — so at short positions only the
 * first few hold keys — then reduced): att[h·hd + d] bf16. GQA 8 at head dims 256 / 512 with at
 * most 4 KV heads streams K by bulk copies into tensor-core scores (float32 sums in another
 * order than the register path's: a score may move by one bf16 step), and with deep also V into
 * tensor-core p·v. Scratch: scores[nq·ctx_cap], smax/ssum[nq·splits], pacc[nq·splits·hd],
 * count[nq] (zeroed once). amax (NULL: none): the activation maxima the next product's x prep
 * reads (ck_xprep_premax): amax[0] = max |att|, amax[1..namax) = 0 — the values ck_xprep's max
 * pass would give, without its launch. */
int dk_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd, dk_kv_layout kv,
                 float scale, const int *pos, int window, int splits, int min_keys, int deep, int64_t ctx_cap,
                 float *scores, float *smax, float *ssum, float *pacc, unsigned *count, uint16_t *att, float *amax,
                 int namax, void *stream);
/* The same for the nrows rows of a batched step (kv_layout.h dk_rows: row z's queries at
 * q + z·in, its output at att + z·out, its position pos[z], slot slot[z]'s cache), on the
 * register path (the bulk-copy forms take one row), with no amax and no `deep`; the scratch
 * holds nrows rows' worth (scores nrows·nq·ctx_cap, smax/ssum nrows·nq·splits, pacc
 * nrows·nq·splits·hd, count nrows·nq). rows NULL, nrows 1: dk_attention. */
int dk_attention_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd, dk_kv_layout kv,
                      float scale, const int *pos, int window, int splits, int min_keys, int deep, int64_t ctx_cap,
                      float *scores, float *smax, float *ssum, float *pacc, unsigned *count, uint16_t *att, float *amax,
                      int namax, const dk_rows *rows, int nrows, void *stream);
/* Whether dk_attention with `deep` takes one pass over the rows (attention_onepass_tma.cuh) for
 * this shape and layout: GQA 8 at head dims 256 / 512 with at most 4 KV heads, over K from V or a
 * compressed K whose position rows are whole 16-byte units (else `deep` streams V alone). */
int dk_attention_onepass(int nq, int nkv, int hd, dk_kv_layout kv);
/* Decode attention in one launch (attention_cluster.cu) for a key range of at most
 * cluster·DK_CLUSTER_MAX_KPB keys — a sliding layer's ring, or a full layer while few keys are
 * live: a cluster of 8 blocks per KV head (wide: 16, half the keys each) exchanging the
 * softmax's statistics and the p·v partials through distributed shared memory, each block's K
 * and V rows staged in its shared memory by the bulk-copy engine, with dk_attention's rounding
 * points (the sums grouped by block instead of by split). keys: the most keys the call can see
 * (the window, or the graph's bound). amax as dk_attention's (NULL: none); then bmax
 * [16·nkv] floats and count (one unsigned, zero, left zero) are its scratch. prep (NULL or xp
 * NULL: none): also the next product's activation prep of att with a fixed exponent e (xmode 1:
 * fp16 att·2^e, 2: bf16; fragment order: prep_store.cuh), *xexp = e — for values known to stay
 * below 2^(15−e), as the attention's output does when V rows are RMS-normalized
 * (|att| ≤ max |V| ≤ ~√hd). dk_attention_cluster_fits says whether a shape runs. */
#define DK_CLUSTER_MAX_KPB 256
typedef struct dk_att_prep {
  uint16_t *xp;
  int *xexp;
  int e, xmode;
} dk_att_prep;
int dk_attention_cluster_fits(int nq, int nkv, int hd, int64_t keys, int wide);
/* blocks per cluster: 8, or 16 when wide */
int dk_attention_cluster_size(int wide);
/* clusters of the one-launch attention (GQA 2 only; 0 otherwise) the device holds at once */
int dk_attention_cluster_max_clusters(int nq, int nkv, int hd, int64_t keys, int wide);
int dk_attention_cluster(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                         dk_kv_layout kv, float scale,
                         const int *pos, int window, int64_t keys, int wide, uint16_t *att, float *amax, int namax,
                         float *bmax, unsigned *count, const dk_att_prep *prep, void *stream);
/* The same for the nrows rows of a batched step (kv_layout.h dk_rows: row z's queries at
 * q + z·in, its output at att + z·out, its position pos[z], slot slot[z]'s cache), a cluster per
 * row and KV head, without amax or prep. rows NULL, nrows 1: dk_attention_cluster. A row's
 * result does not depend on the other rows. */
int dk_attention_cluster_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                              dk_kv_layout kv, float scale, const int *pos, int window, int64_t keys, int wide,
                              uint16_t *att, float *amax, int namax, float *bmax, unsigned *count,
                              const dk_att_prep *prep, const dk_rows *rows, int nrows, void *stream);

/* Decode attention for the nrows rows of a batched step (attention_stream.cu; rows as
 * dk_attention_cluster_rows'): a block per row and KV head streams the row's live K rows, then
 * its V rows, through stages of 32 keys copied ahead of the arithmetic, with dk_attention's
 * rounding points (the p·v sums grouped by key range). Plain or K-from-V bf16 rows (no
 * compressed K). keys: the most keys a row can see (the window, or the capacity); a row's scores
 * stay in shared memory up to 32 KB, beyond that in scores (row z's query head h at
 * scores + (z·nq + h)·keys floats; NULL: such shapes refused). dk_attention_stream_fits says
 * whether a shape runs (gscores: whether scores will be given). A row's result does not depend on
 * the other rows. */
int dk_attention_stream_fits(int nq, int nkv, int hd, dk_kv_layout kv, int window, int64_t keys, int gscores);
int dk_attention_stream_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                             dk_kv_layout kv, float scale, const int *pos, int window, int64_t keys, float *scores,
                             uint16_t *att, const dk_rows *rows, int nrows, void *stream);
/* The same with each row and KV head split over a cluster of 4 blocks (few rows: 4× the blocks),
 * plain bf16 rows with the scores in shared memory only (dk_attention_stream_split_fits). Its
 * p·v sums and softmax total are grouped by the blocks' key ranges: a row's bits differ from the
 * unsplit launch's, and still depend on nothing but the row. */
int dk_attention_stream_split_fits(int nq, int nkv, int hd, dk_kv_layout kv, int window, int64_t keys);
int dk_attention_stream_split_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                                   dk_kv_layout kv, float scale, const int *pos, int window, int64_t keys,
                                   uint16_t *att, const dk_rows *rows, int nrows, void *stream);

#ifdef __cplusplus
}
#endif

#endif
