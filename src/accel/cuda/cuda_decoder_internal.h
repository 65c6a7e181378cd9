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

#include "tuning.h"

typedef struct dec_mv {
  const ck_layout *L[3]; /* one concatenated weight, or the parts when their formats differ */
  int64_t off[3];        /* row offset of each part's output */
  int n;
  int ks; /* k splits (one fast-format weight only): partial sums at y + s·rows, summed by the consumer */
  int64_t rows;
  int xmode; /* when its input comes from the residual norm: the activation prep that kernel writes
              * (dk_residual_norm's xmode; 0 = the prep runs before the product, from pmax) */
  int fix_e;  /* XP_FIXED's exponent (ck_xprep_fixed), or CK_XE_ROWMAX where the product takes none */
} dec_mv;

typedef struct dec_layer {
  dec_mv qkv, gu, o, down;
  float *norms; /* device: input, post_attn, pre_ffw, post_ffw [H each], q_norm, k_norm [hd each] */
  float *inv_freq;
  uint16_t *kc, *vc;
  int window, splits, hd, nkv, inter;
  int cluster;   /* decode attention in one launch (dk_attention_cluster) in the short-context graph */
  int gu_il;     /* gate|up's rows interleaved by gu_il (for the GeGLU epilogue), else 0 */
  int gu_epi;    /* and GeGLU in its epilogue (ck_qmv_geglu: a fast format, no k split): no geglu kernel */
  int64_t ckeys; /* its key bound there: the layer's keys, at most cluster_keys (the graph's limit) */
  int64_t lkeys; /* > 0: the layer's whole key range (a sliding ring), which the wide one-launch
                  * attention takes in the long-context graphs too */
  int xe_in, xe_ffw; /* fixed prep exponents for x after the input and pre-FFW norms (norm_fixed_exp) */
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
   * the deep contexts' p·v pass (from DEEP_KEYS live keys on) */
  void *g_body[3], *g_head;
  int use_graph, warm_body[3], warm_head;
  int any_cluster; /* some layer can run the one-cluster attention */
  int short_ctx; /* this step's body runs the one-cluster attention (its position is below CLUSTER_KEYS) */
  int deep_ctx;  /* this step's body runs the deep contexts' p·v pass (its live keys exceed DEEP_KEYS) */
  int max_ks; /* largest k split of any mat-vec (the y buffer holds that many partials) */
  int xe_final;     /* the final norm's fixed prep exponent */
  int timeline;     /* this decoder owns the in-graph timeline (MLXRT_CUDA_TIMELINE=1) */
  cprof prof; /* MLXRT_CUDA_PROFILE=1: per-kernel times, graphs off */
  struct dec_prefill *pf; /* the batched prompt pass's buffers and cuBLAS handle */
};

/* allocates count elements of p on the device, or jumps to fail (err set) */
#define DALLOC(p, count)                                                          \
  if (rt_malloc((void **)&(p), (size_t)(count) * sizeof *(p), err)) goto fail

/* The batched prompt pass (cuda_decoder_prefill.c): its buffers (made at creation), freed with
 * the decoder; and a prompt of n tokens fed at positions pos … pos+n-1, leaving D->xb / D->pmax
 * as the head graph expects. */
int dec_prefill_init(accel_decoder *D, mlxrt_error *err);
void dec_prefill_free(accel_decoder *D);
int dec_prefill_run(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, mlxrt_error *err);

#endif
