/* Launchers of the whole-step decoder's kernels (decode.cu, attention.cu). Activations are
 * float32 arrays holding bf16 values, or bf16 where a mat-vec reads them; each kernel rounds
 * to bf16 where the reference path does (docs/NUMERICS.md). Positions are read from device
 * memory (*pos) so one captured graph serves every step. Return a cudaError_t (0 = ok). */
#ifndef MLXRT_CUDA_DECODE_KERNELS_H
#define MLXRT_CUDA_DECODE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tok[0] = all_tokens[*pos] (the token of this step). */
int dk_step_begin(const int32_t *all_tokens, const int *pos, int32_t *tok, void *stream);
/* y arguments below may hold the partial sums of a mat-vec split over ks k ranges (ck_qmv_split):
 * y[i] + y[i + kstride] + … in order; ks = 1 for a plain output. */
/* (*pos)++ (the end of one step's layers). */
int dk_step_end(int *pos, void *stream);
/* h[i] = bf16(bf16 e[i] · scale) */
int dk_embed_scale(const uint16_t *e, float *h, int H, float scale, void *stream);
/* The residual join and the next norm, one row of H:
 *   when y: o = rmsnorm(bf16(y), w_post); h = bf16(h + o); when use_scalar: h = bf16(h·scalar)
 *   then xb = bf16 rmsnorm(h, w_next), and when pmax: pmax[b] = max|xb| over each pblock values
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
/* How dk_residual_norm's blocks exchange their sums (residual_norm.cu; the same bits either
 * way): 0 (the kernel's default), each reads the others'; 1, each pushes into every block's
 * shared memory. The decoder sets it from MLXRT_NORM_PUSH, default 1 (tg128 +0.5 % on the
 * H200, session 12). */
void dk_set_norm_push(int on);
/* Per head after the q|k|v product y = [q nq·hd | k nkv·hd | v nkv·hd] (v = k's rows when
 * k_eq_v): q = rope(rmsnorm(q, qn)) → q_out; k = rope(rmsnorm(k, kn)) and v (weightless
 * rmsnorm when v_norm) → the cache slot of *pos (pos % window when window > 0). */
int dk_qkv_post(const float *y, int ks, int64_t kstride, int nq, int nkv, int hd, int k_eq_v, const float *qn, const float *kn,
                const float *inv_freq, int traditional, int v_norm, float eps, const int *pos, int window,
                float *q_out, uint16_t *kc, uint16_t *vc, void *stream);
/* out[i] = bf16(gelu_approx(bf16 g[i]) · bf16 u[i]); when pmax, pmax[b] = max|out| per pblock.
 * il > 0: the rows interleaved by il (u = g + il; value i at (i / il)·2·il + i mod il). */
int dk_geglu(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, float *pmax, int pblock,
             int il, void *stream);
/* dk_geglu that also writes the next product's activation prep (xp, xexp in the xmode of
 * dk_residual_norm: what ck_xprep_premax would make of out, bit for bit) instead of pmax, so
 * no prep kernel runs between them; dk_geglu_prep_ok(n) says whether n values fit its one
 * cluster (n % 32 == 0, n ≤ 24576). */
int dk_geglu_prep_ok(int64_t n);
int dk_geglu_prep(const float *g, const float *u, int ks, int64_t kstride, uint16_t *out, int64_t n, uint16_t *xp,
                  int *xexp, int xmode, void *stream);
/* logits = softcap(bf16 y) (cap 0 = none); *next = argmax (lowest index on ties). part_v /
 * part_i / count: dk_logits_scratch() entries, count zeroed once. */
int dk_logits(const float *y, float *logits, int64_t V, float cap, float *part_v, int *part_i,
              unsigned *count, int32_t *next, void *stream);
int dk_logits_blocks(int64_t V);

/* Decode attention of one query row per head at position *pos over the cache (split over
 * `splits` blocks per head, each with at least min_keys keys — so at short positions only the
 * first few hold keys — then reduced): att[h·hd + d] bf16. kpath (experiments besides 0):
 * bits 0–1 (MLXRT_ATTN_SCORES), how the scores pass reads K — 0 through registers; 1 through
 * a shared-memory ring filled by cp.async (the same bits as 0); 2 into tensor-core fragments;
 * bit 4 (MLXRT_ATTN_PV=1), p·v on the tensor cores. The tensor-core forms take GQA 8 at head
 * dims 256 / 512 (others run the FMA path) and sum in float32 in another order: a result may
 * move by one bf16 step. Scratch: scores[nq·ctx_cap],
 * smax/ssum[nq·splits], pacc[nq·splits·hd], count[nq] (zeroed once). amax (NULL: none): the
 * activation maxima the next product's x prep reads (ck_xprep_premax): amax[0] = max |att|,
 * amax[1..namax) = 0 — the values ck_xprep's max pass would give, without its launch. */
int dk_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                 float scale, const int *pos, int window, int splits, int min_keys, int kpath, int64_t ctx_cap,
                 float *scores, float *smax, float *ssum, float *pacc, unsigned *count, uint16_t *att, float *amax,
                 int namax, void *stream);
/* dk_attention with the q/k/v post step (dk_qkv_post) folded into its scores pass: each live
 * split's block makes its group's q rows from the q|k|v product y itself, and the split
 * holding *pos also that position's K and V (written into kc / vc before it reads its keys),
 * with qkv_post's operations in its order, so the same bits as dk_qkv_post then dk_attention
 * (kpath 0 only) without the kernel between them. y's layout and the fields as dk_qkv_post's
 * arguments; nq must equal the call's. */
typedef struct dk_post {
  const float *y;
  int ks;
  int64_t kstride;
  int nq, k_eq_v;
  const float *qn, *kn, *inv_freq;
  int traditional, v_norm;
  float eps;
} dk_post;
int dk_attention_post(const dk_post *post, uint16_t *kc, uint16_t *vc, int nq, int nkv, int hd, float scale,
                      const int *pos, int window, int splits, int min_keys, int64_t ctx_cap, float *scores,
                      float *smax, float *ssum, float *pacc, unsigned *count, uint16_t *att, float *amax, int namax,
                      void *stream);
/* Decode attention in one launch (attention_cluster.cu) for a key range of at most
 * 8·DK_CLUSTER_MAX_KPB keys — a sliding layer's ring, or a full layer in a session of that
 * capacity: a cluster of 8 blocks per KV head exchanging the softmax's statistics and the p·v
 * partials through distributed shared memory, with dk_attention's rounding points (the sums
 * grouped by block instead of by split). keys: the most keys the call can see (the window, or
 * the capacity). amax as dk_attention's (NULL: none); then bmax [16·nkv] floats and count (one
 * unsigned, zero, left zero) are its scratch. prep (NULL or xp NULL: none): also the next
 * product's activation prep of att with a fixed exponent e (xmode 1: fp16 att·2^e, 2: bf16;
 * fragment order: prep_store.cuh), *xexp = e — for values known to stay below 2^(15−e), as
 * the attention's output does when V rows are RMS-normalized (|att| ≤ max |V| ≤ ~√hd).
 * dk_attention_cluster_fits says whether a shape runs. */
#define DK_CLUSTER_MAX_KPB 256
typedef struct dk_att_prep {
  uint16_t *xp;
  int *xexp;
  int e, xmode;
} dk_att_prep;
int dk_attention_cluster_fits(int nq, int nkv, int hd, int64_t keys); /* in the form dk_set_attn_cluster_stage set */
int dk_attention_cluster_fits_s(int nq, int nkv, int hd, int64_t keys, int stage_mode);
/* The one-launch attention's form for the calls that follow (a launch-time setting, like the
 * mat-vec knobs): 1 = each block's K and V rows copied into its shared memory by the
 * bulk-copy engine, all at once and (rows of earlier positions) before the wait for the
 * predecessor; 2 = the same with one buffer, the K rows and then, after the scores, the V rows
 * (half the shared memory); 0 = read from the cache in rounds; 3 and 4 = the forms of 1 and 2
 * with clusters of 16 blocks (half the keys each). The same results in every form of one
 * cluster size (3 and 4 group the sums by 16 blocks: a result may differ in a last bit). */
void dk_set_attn_cluster_stage(int mode);
/* clusters of the one-launch attention (GQA 2 only; 0 otherwise) the device holds at once */
int dk_attention_cluster_max_clusters(int nq, int nkv, int hd, int64_t keys);
int dk_get_attn_cluster_stage(void);
/* blocks per cluster of the one-launch attention in a stage mode (8; 16 for modes 3 and 4) */
int dk_attention_cluster_size(int stage_mode);
int dk_attention_cluster(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd, float scale,
                         const int *pos, int window, int64_t keys, uint16_t *att, float *amax, int namax, float *bmax,
                         unsigned *count, const dk_att_prep *prep, void *stream);
/* The q/k/v post step made by the one-launch attention itself (an experiment: one launch and one
 * round trip fewer per layer): from the q|k|v product's output y (ks partial sums kstride
 * apart; q heads, then K, then V unless k_eq_v), the q/k rms norms (weights qn, kn), RoPE
 * (inv_freq, traditional), V's weightless norm (v_norm), as qkv_post_kernel makes them (the
 * same bits); the new position's K and V rows are written to kc / vc, the same cache the call
 * reads. The staged forms (stage mode ≥ 1) and head dims up to 512 only
 * (dk_attention_cluster_post_fits); q is then not read (NULL allowed). */
typedef struct dk_att_post {
  const float *y;
  int ks;
  int64_t kstride;
  const float *qn, *kn, *inv_freq;
  int trad, v_norm, k_eq_v;
  float eps;
  uint16_t *kc, *vc;
} dk_att_post;
int dk_attention_cluster_post_fits(int nq, int nkv, int hd, int64_t keys);
int dk_attention_cluster_ex(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                            float scale, const int *pos, int window, int64_t keys, uint16_t *att, float *amax,
                            int namax, float *bmax, unsigned *count, const dk_att_prep *prep, const dk_att_post *post,
                            void *stream);
/* Whether the decode attention prefetches its K and V rows before waiting for its predecessor:
 * dk_attention_cluster's blocks into their L1 (rows of earlier positions), dk_attention's scores
 * and p·v kernels into the L2 (their split's rows); the same results either way. Set by the
 * decoder from MLXRT_ATTN_PREFETCH: on = 1 (its default) the one-launch form only, 2 both, 0
 * neither. The _cluster and _split setters: each form's part alone (dk_set_attn_prefetch,
 * decode.cu, calls both). */
int dk_set_attn_prefetch(int on);
void dk_set_attn_prefetch_cluster(int on);
int dk_set_attn_prefetch_split(int on);
/* How many of its 3 stages the bulk-copy scores pass (dk_attention's kpath 3) issues before
 * waiting for its predecessor (1–3, default 3); the rest follow once its q loads are issued,
 * so that those queue behind fewer bytes. The same results either way (MLXRT_ATTN_TMA_EARLY). */
int dk_set_attn_tma_early(int stages);
/* The same attention in one pass over K and V per split (online softmax; an experiment,
 * MLXRT_ATTN_ONEPASS=1): p is not rounded to bf16, unlike the reference path (attention.cu).
 * smax/ssum/pacc as above; GQA groups of ≤ 4 / 8 / 16 take head dims ≤ 1024 / 512 / 256. */
int dk_attention_onepass(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd,
                         float scale, const int *pos, int window, int splits, int min_keys, float *smax,
                         float *ssum, float *pacc, uint16_t *att, float *amax, int namax, void *stream);
/* 1 when dk_attention_onepass takes query groups of rep heads of dimension hd. */
int dk_attention_onepass_supports(int rep, int hd);

#ifdef __cplusplus
}
#endif

#endif
