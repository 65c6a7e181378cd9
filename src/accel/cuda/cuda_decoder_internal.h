/* The CUDA whole-step decoder's private types, shared by its step (cuda_decoder.c) and its
 * batched prompt pass (cuda_decoder_prefill.c). Not part of the backend boundary. */
#ifndef MLXRT_CUDA_DECODER_INTERNAL_H
#define MLXRT_CUDA_DECODER_INTERNAL_H

#include "accel/accel_sample.h"
#include "base/error.h"
#include "cuda_decoder.h"
#include "cuda_internal.h"
#include "cuda_prof.h"
#include "decode_kernels.h"
#include "sample_kernels.h"

/* tokens copied to all_tokens per host-to-device copy */
#define STAGE_TOKENS 4096

typedef struct dec_mv {
  const ck_layout *L[3]; /* one concatenated weight, or the parts when their formats differ */
  int64_t off[3];        /* row offset of each part's output */
  int n;
  int ks; /* k splits (one fast-format weight only): partial sums at y + s·rows, summed by the consumer */
  int64_t rows;
  int xmode; /* when its input comes from the residual norm: the activation prep that kernel writes
              * (dk_residual_norm's xmode; 0 = the prep runs before the product, from pmax) */
  int stages; /* the mat-vec's stage count for this product (MLXRT_QMV_STAGES_<PRODUCT>), 0: the backend's */
  int warps;  /* its warps per tile (MLXRT_QMV_WARPS_<PRODUCT>: 4 or 8), 0: the backend's */
  int fix_e;  /* XP_FIXED's exponent (ck_xprep_fixed), or CK_XE_ROWMAX where the product takes none */
} dec_mv;

typedef struct dec_layer {
  dec_mv qkv, gu, o, down;
  float *norms; /* device: input, post_attn, pre_ffw, post_ffw [H each], q_norm, k_norm [hd each] */
  float *inv_freq;
  uint16_t *kc, *vc;
  int window, splits, hd, nkv, inter;
  int cluster;   /* decode attention in one launch (dk_attention_cluster) in the short-context graph */
  int gu_il;     /* gate|up's rows interleaved by gu_il (MLXRT_GEGLU_EPI), else 0 */
  int gu_epi;    /* and GeGLU in its epilogue (ck_qmv_geglu: a fast format, no k split): no geglu kernel */
  int64_t ckeys; /* its key bound there: the layer's keys, at most cluster_keys (the graph's limit) */
  int64_t lkeys; /* > 0: the layer's whole key range (a sliding ring), which the staged one-launch
                  * attention takes in the long-context graph too (MLXRT_ATTN_CLUSTER_STAGE bit 1) */
  int xe_in, xe_ffw; /* MLXRT_NORM_FIXEXP: fixed prep exponents for x after the input and pre-FFW norms (norm_fixed_exp) */
} dec_layer;

struct accel_decoder {
  accel_backend *b;
  const accel_model_desc *d;
  void *stream;
  int64_t capacity;
  dec_layer *ly;
  dec_mv head;
  const ck_layout *embed;
  float *final_norm;
  /* work buffers (device) */
  int32_t *all_tokens, *tok, *next;
  int *pos;
  uint16_t *emb, *xb, *attb, *gub;
  float *h, *y, *q, *ylog, *logits;
  uint16_t *xp;
  float *xs, *pmax;
  float *gmax; /* ck_qmv_geglu's maxima for down's activation prep (zeroed by the residual norm before gate|up) */
  int *xexp;
  float *scores, *smax, *ssum, *pacc, *part_v;
  int *part_i;
  unsigned *counts; /* [n_heads] attention + [1] logits */
  void *sk_state;   /* token selection on the device (sample.cu), zeroed once */
  /* pinned host staging */
  int32_t *h_toks;
  int *h_pos;
  int32_t *h_next;
  float *h_logits;
  /* body graphs: [0] the split attention, [1] the one-cluster form, [2] the split attention with
   * the deep contexts' p·v pass (deep_pv, from position deep_keys on) */
  void *g_body[3], *g_head;
  int use_graph, warm_body[3], warm_head;
  int any_cluster; /* some layer can run the one-cluster attention */
  int short_ctx; /* this step's body runs the one-cluster attention (its position is below cluster_keys) */
  int deep_ctx;  /* this step's body runs the p·v pass deep_pv (its live keys exceed deep_keys) */
  int deep_pv;   /* MLXRT_ATTN_PV_DEEP (default 2, as MLXRT_ATTN_PV): the p·v pass at deep contexts */
  int deep_keys; /* MLXRT_ATTN_PV_DEEP_KEYS: the live key count above which it runs */
  int max_ks; /* largest k split of any mat-vec (the y buffer holds that many partials) */
  int use_pdl; /* kernels overlap their predecessor's tail (MLXRT_CUDA_PDL=0: off) */
  int attn_onepass; /* MLXRT_ATTN_ONEPASS=1: the one-pass decode attention (an experiment) */
  int attn_kpath;   /* MLXRT_ATTN_SCORES: how the scores pass reads K (dk_attention's kpath) */
  int attn_pv_tc;   /* MLXRT_ATTN_PV=1: p·v on the tensor cores (kpath bit 4); 2: V streamed by bulk copies (bit 8) */
  int fuse_post;    /* MLXRT_ATTN_FUSE_POST=1: the q/k/v post step inside the scores pass
                     * (dk_attention_post; an experiment, off by default) */
  int geglu_prep;   /* MLXRT_GEGLU_PREP=1: geglu writes down's activation prep itself (dk_geglu_prep;
                     * an experiment, off by default) */
  int norm_fixexp;  /* MLXRT_NORM_FIXEXP (default 1; 0: off): the residual norms write the next product's
                     * prep with an exponent fixed by the norm weight's bound (norm_fixed_exp), no
                     * third exchange — tg128 +1.0 %, the same logits bits (H200, session 12) */
  int xe_final;     /* and the final norm's */
  int attn_fixexp;  /* MLXRT_ATTN_FIXEXP (default 1; 0: off): o's prep with an exponent fixed by the head
                     * dim where V is RMS-normalized (o_fixed_exp): the attention writes no maxima —
                     * tg128 +1.2 % at depth 0, +0.2 % at 32768, the same logits bits (H200, session 13) */
  int attn_oprep;   /* MLXRT_ATTN_OPREP=1: the one-launch attention writes o's activation prep with a
                     * fixed exponent where V rows are RMS-normalized (attn_writes_o_prep) */
  int geglu_epi;    /* MLXRT_GEGLU_EPI (default 1; 0: off): GeGLU in gate|up's epilogue (ck_qmv_geglu) where it
                     * applies — tg128 +0.9 %, the same bits (H200, session 12) */
  int timeline;     /* this decoder owns the in-graph timeline (MLXRT_CUDA_TIMELINE=1) */
  int attn_xmax;    /* MLXRT_ATTN_XMAX (default 1): the attention writes o's x-prep maxima (no max pass); 0: xmax_kernel does */
  int split_keys;   /* decode attention: fewest keys per split (MLXRT_ATTN_SPLIT_KEYS) */
  int attn_cluster; /* MLXRT_ATTN_CLUSTER (default 1): layers whose keys fit one cluster of blocks
                     * run the one-launch attention (dk_attention_cluster) while the position is
                     * below cluster_keys; 0: the split passes always */
  int cluster_keys; /* MLXRT_ATTN_CLUSTER_KEYS: the live key count up to which it does */
  int cluster_post; /* MLXRT_ATTN_CLUSTER_POST=1: the one-launch attention makes the q/k/v post step
                     * itself (dk_attention_cluster_ex; the same bits, one launch fewer per layer;
                     * an experiment, written in session 20, not yet measured) */
  int attn_stage;   /* MLXRT_ATTN_CLUSTER_STAGE (default 11): bit 0 the one-launch attention of the
                     * short-context graph with its K and V rows staged in shared memory; bit 1
                     * the staged form also in the long-context graph, for the layers whose whole
                     * key range fits it (the sliding rings: 1024 keys on the 31B); bit 2 that
                     * form with one buffer, the V rows copied over the K rows after the scores
                     * (dk_set_attn_cluster_stage(2)). With K and V apart a block took 131 KB at
                     * 1024 keys and only 15 of the 16 clusters fitted at once: bits 0-1 lost at
                     * depth 4096 (session 16, 118.9 against 121.3 t/s); with one buffer 45 fit,
                     * the ring takes 16.2 µs alone (25.1), and tg128 at depth 4096 gained 4.8 %
                     * (session 17, docs/PERF.md). The short graph's few keys keep two buffers
                     * (bit 2 there cost 0.6 % at depth 0). Bit 3: the long graph's form with
                     * clusters of 16 blocks, half the keys each (modes 3 and 4): K and V apart
                     * in 66 KB a block, 21 clusters at once; with two buffers (11, the default)
                     * 12.95 µs alone at 1023 keys, tg128 +2.4 % at depth 4096, +2.2 % at 32768
                     * (session 20). Bit 4: the short graph's staged form (bit 0) with clusters
                     * of 16 blocks (an experiment, not yet measured). */
  int early_norm;   /* MLXRT_QMV_EARLY_NORM: weight stages issued before the wait by the products
                     * whose producer wrote their x prep (the residual norm's q|k|v, gate|up and
                     * lm_head; down with MLXRT_GEGLU_PREP); -1 = the backend's count */
  int early_prep;   /* MLXRT_QMV_EARLY_PREP: the same for the products an activation-prep kernel
                     * feeds (o and down; every product of the affine formats); -1 = the backend's */
  cprof prof; /* MLXRT_CUDA_PROFILE=1: per-kernel times, graphs off */
  struct dec_prefill *pf; /* the batched prompt pass's buffers and cuBLAS handle */
};

/* allocates count elements of p on the device, or jumps to fail (err set) */
#define DALLOC(p, count)                                                          \
  if (rt_malloc((void **)&(p), (size_t)(count) * sizeof *(p), err)) goto fail

/* An integer knob from the environment: def when unset, else within [lo, hi] or an error. */
int dec_env_knob(const char *name, int def, int lo, int hi, int *out, mlxrt_error *err);

/* The batched prompt pass (cuda_decoder_prefill.c): on unless MLXRT_CUDA_PREFILL=0; its buffers
 * (made at creation, or on first use), freed with the decoder; and a prompt of n tokens fed at
 * positions pos … pos+n-1, leaving D->xb / D->pmax as the head graph expects. */
int dec_prefill_enabled(void);
int dec_prefill_init(accel_decoder *D, mlxrt_error *err);
void dec_prefill_free(accel_decoder *D);
int dec_prefill_run(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, mlxrt_error *err);

#endif
