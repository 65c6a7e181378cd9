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
  struct dec_moe *moe; /* the MoE block beside the FFN (cuda_decoder_moe.c), or NULL */
  int own;   /* computes its K/V; else (KV sharing) kc/vc are its source layer's, q|k|v is q alone */
  rt_vmem kvm[2]; /* an owning full-attention layer's K and V (kc, vc): growable by pages; with
                   * K from V one array (kvm[1] unused, vc == kc) */
  dk_kv_layout kv; /* the layout of kc / vc (kv_layout.h) */
  int onepass;     /* its cache is a full layer's that the deep contexts read in one pass (dk_attention_onepass) */
  int feeds; /* later layers read its cache (the prompt pass commits a ring's chunk after them) */
  dec_mv pg, pp;   /* per-layer embeddings: per_layer_input_gate, per_layer_projection */
  float *ple_norm; /* device: post_per_layer_input_norm [H] */
} dec_layer;

struct accel_decoder {
  accel_backend *b;
  const accel_model_desc *d;
  void *stream;
  /* MoE models: a second stream for the shared MLP, forked after the attention residual and
   * joined before the experts' combine (events fork / join), so that its products run beside
   * the router's and the experts' chain; NULL while profiling (one stream, in order) */
  void *side, *ev_fork, *ev_join;
  void *ev_ple_fork, *ev_ple_join; /* the per-layer inputs on the side stream (E2B/E4B) */
  int64_t capacity;
  /* the K/V pages: every growable buffer backs positions [0, kv_positions); kv_bytes: device
   * bytes of K/V held (the pages and the sliding rings) */
  int64_t kv_positions;
  size_t kv_bytes;
  dec_layer *ly;
  dec_mv head;
  const ck_layout *embed;
  float *final_norm;
  /* work buffers (device) */
  int32_t *all_tokens, *tok, *next;
  int *pos;
  uint16_t *xb, *attb, *gub;
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
  /* body graphs: [0] the split attention, [1] the one-cluster form, [2] the split attention in the
   * deep contexts' forms on every layer (more than DEEP_KEYS live keys), [3] on the one-pass layers
   * alone (more than ONEPASS_KEYS) */
  void *g_body[4], *g_head;
  int use_graph, warm_body[4], warm_head;
  int any_cluster; /* some layer can run the one-cluster attention */
  int any_onepass; /* some layer's deep contexts take the one pass (dec_layer onepass) */
  /* a compressed K cache (--kv-k planar3 / planar4, kv_layout.h kfmt): the codec's tables on the
   * device, the encoder's flags word (read back with each step's token) and its pinned copy */
  int any_planar;
  kvc_tables *kvc_tab;
  unsigned *kvc_flags, *h_kflags;
  int short_ctx; /* this step's body runs the one-cluster attention (its position is below CLUSTER_KEYS) */
  /* this step's body runs the deep contexts' attention (dk_attention's `deep`): 0 nowhere, 1 on the
   * one-pass layers (their live keys exceed ONEPASS_KEYS), 2 on every layer (DEEP_KEYS) */
  int deep_ctx;
  int max_ks; /* largest k split of any mat-vec (the y buffer holds that many partials) */
  int xe_final;     /* the final norm's fixed prep exponent */
  int timeline;     /* this decoder owns the in-graph timeline (MLXRT_CUDA_TIMELINE=1) */
  cprof prof; /* MLXRT_CUDA_PROFILE=1: per-kernel times, graphs off */
  struct dec_prefill *pf; /* the batched prompt pass's buffers and cuBLAS handle */
  struct dec_batch *bt;   /* batched decode: the sequences' slots and the step's buffers (cuda_decoder_batch.c) */
  struct dec_moe_buf *mb, *mb_pf; /* the MoE blocks' work buffers: the step's (one token) and the prompt pass's */
  /* per-layer embeddings (d->ple_dim > 0): per_layer_model_projection, the table, the
   * projection's norm [P], the step's inputs [L·P] and its token's table row [L·P] bf16 */
  dec_mv ple_mp;
  const ck_layout *ple_emb;
  float *ple_pnorm, *ple;
  uint16_t *ple_row;
  /* the per-layer inputs' own work buffers, for their run on the side stream beside layer 0:
   * bf16 h, its prep, the model projection's partial sums */
  uint16_t *ple_xb, *ple_xp;
  float *ple_xs, *ple_pmax, *ple_y;
  int *ple_xexp;
};

/* a and b can be one concatenated weight: the same format and columns, stacked alike */
int dec_same_format(const accel_spec *a, const accel_spec *b);
/* The product of ws[0..n) (one concatenated weight where the formats agree), made resident;
 * its k split and activation prep chosen (cuda_decoder.c). */
int dec_make_mv(accel_decoder *D, const accel_weight *const *ws, int n, const char *what, int layer, dec_mv *mv,
                mlxrt_error *err);
/* The parts ws[0..n) of one format (stacked alike, or not) uploaded as one weight of their rows
 * concatenated, within each expert's slab for stacked parts (rows interleaved by il when il > 0). */
const ck_layout *dec_upload_cat(accel_decoder *D, const accel_weight *const *ws, int n, int il, const char *what,
                                int layer, mlxrt_error *err);
/* y = x · Wᵀ for every part of mv (device x bf16, y float32). premax: XP_PREMAX: x's producer
 * already wrote the block maxima the activation prep needs into D->pmax; XP_DONE: it wrote the
 * prep itself (mv->xmode); XP_FIXED: the prep kernel with mv->fix_e, no maxima. */
enum { XP_FULL = 0, XP_PREMAX = 1, XP_DONE = 2, XP_FIXED = 3 };
int dec_run_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, float *y, int premax, mlxrt_error *err);
/* n floats to the device (synchronised) */
int dec_upload_floats(accel_decoder *D, float *dst, const float *src, int64_t n, mlxrt_error *err);

/* allocates count elements of p on the device, or jumps to fail (err set) */
#define DALLOC(p, count)                                                          \
  if (rt_malloc((void **)&(p), (size_t)(count) * sizeof *(p), err)) goto fail

/* The batched prompt pass (cuda_decoder_prefill.c): its buffers (made at creation), freed with
 * the decoder; and a prompt of n tokens fed at positions pos … pos+n-1, leaving D->xb / D->pmax
 * as the head graph expects. */
int dec_prefill_init(accel_decoder *D, mlxrt_error *err);
void dec_prefill_free(accel_decoder *D);
/* A batched step's product scratch: x prepared in batches of 8 rows (ck_xprep_batched) and the
 * expert mode's slab list of zeros (ck_qmv_rows), sized for the batch's rows. */
typedef struct dec_row_prep {
  uint16_t *xp;
  float *xs, *pmax;
  int *xexp;
  const int *zero; /* the expert mode's slab list of zeros (ck_qmv_rows) */
  int sms;       /* the device's SMs: with a weight's shape they decide its k splits */
  int cc_major, cc_minor; /* the device's compute capability (ck_qmm_wg_supported) */
  float *part;   /* the k splits' partial sums (ck_qmm_rows) */
  unsigned *cnt; /* and their counters, zero between products */
} dec_row_prep;
/* Rows through the products and per-layer inputs, shared by the prompt pass and the batched
 * decode (cuda_decoder_prefill.c): their buffers (h [T, H], y, ple [T, L·P], xb, gub, ple_rows
 * [T, L·P]), their token ids (device), and (rowexact, the batched decode) the scratch of products
 * whose rows' bits do not depend on the batch (dec_rows_mv). */
typedef struct dec_rows {
  float *h, *y, *ple;
  uint16_t *xb, *gub, *ple_rows, *emb;
  const int32_t *tok;
  const dec_row_prep *rowexact;
} dec_rows;
/* The rows' scaled embeddings into h (emb: the gathered rows), their per-layer inputs, and
 * layer 0's input norm into xb. */
int dec_rows_embed(accel_decoder *D, const dec_rows *R, int T, mlxrt_error *err);
/* k splits of a product whose consumer adds them (dec_rows_mv): the floats y holds, then the
 * splits written and the floats between them */
typedef struct dec_ksplit {
  int64_t cap;
  int n;
  int64_t stride;
} dec_ksplit;
int dec_rows_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, int T, float *y, int64_t ldy,
                const dec_row_prep *rowexact, int xready, dec_ksplit *ks, mlxrt_error *err);
int dec_rows_xmode(const dec_mv *mv, int T, const dec_row_prep *rowexact);

int dec_rows_ple_inputs(accel_decoder *D, const dec_rows *R, int T, mlxrt_error *err);
int dec_rows_ple_layer(accel_decoder *D, const dec_rows *R, int i, const float *fy, int T, mlxrt_error *err);
/* the most tokens of one chunk (the rows of the MoE blocks' prompt buffers, D->mb_pf) */
int dec_prefill_rows(const accel_decoder *D);
int dec_prefill_run(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, mlxrt_error *err);

/* The body of a one-token step at pos (its token written to the history first) through
 * graphs[4] / warm[4], one per attention depth class: the decoder's own (g_body), or a batch
 * slot's, captured while the layers' caches point at that slot's. */
int dec_body_step(accel_decoder *D, int32_t token, int64_t pos, void **graphs, int *warm, mlxrt_error *err);
/* The device's selection for sp, u (cuda_decoder.c): *sample = 0 without sp or want_token;
 * fails before anything is enqueued. */
int dec_sample_plan(accel_decoder *D, const accel_sample_params *sp, double u, int want_token, int *sample,
                    sk_params *kp, mlxrt_error *err);
/* After the prompt pass or the body: the head, the selection, the id (and logits) copied back,
 * one synchronisation (pos_last names the position in errors). */
int dec_head_select(accel_decoder *D, int64_t pos_last, int sample, const sk_params *kp, float *logits,
                    int32_t *token, mlxrt_error *err);
/* The batched decode's slots and buffers, freed with the decoder (cuda_decoder_batch.c). */
void dec_batch_free(accel_decoder *D);
size_t dec_batch_kv_bytes(const accel_decoder *D); /* the batch slots' K/V pages held (0: no batch) */

/* The activation-prep exponent fixed by the bound of a norm's output (cuda_decoder.c:
 * |x| ≤ √H·max|w|), or DK_XE_ROWMAX where w has no finite positive maximum. */
int dec_norm_fixed_exp(const float *w, int H);

/* Per-layer embeddings (cuda_decoder_ple.c). dec_ple_inputs: the step's inputs from h (the
 * scaled embedding) into D->ple. dec_ple_layer: layer i's FFN residual from its product fy (fks
 * partial sums frows apart), then its gate, GeGLU and projection into D->y (the layer's last
 * residual norm follows). dec_ple_tail: all of that and the last residual norm in one launch,
 * where dec_ple_tail_ok says it serves the layer (next_mv: the product the next norm feeds). */
int dec_ple_inputs(accel_decoder *D, mlxrt_error *err);
int dec_ple_layer(accel_decoder *D, int i, const float *fy, int fks, int64_t frows, mlxrt_error *err);
int dec_ple_tail_ok(const accel_decoder *D, int i);
int dec_ple_tail(accel_decoder *D, int i, const float *fy, int fks, int64_t frows, const float *w_next,
                 const dec_mv *next_mv, int xe_next, mlxrt_error *err);

/* The MoE blocks (cuda_decoder_moe.c). dec_moe_layer: layer i's router, experts and vectors
 * made resident (D->ly[i].moe), at creation. dec_moe_buffers: the work buffers for chunks of
 * up to T tokens (T = 1: the step's), after every layer. For T tokens whose residuals after
 * the attention are h: dec_moe_route before the shared MLP (norms, router, top-k, the experts'
 * input prep: none of it touches what the shared MLP uses), dec_moe_experts after it, with its
 * down product ys (row t at ys + t·lds, ks partial sums kstride apart): the chosen experts and
 * the block's output into *out ([T, H]: what the FFN residual norm takes as its product); join
 * (an event, or NULL) is waited for before the combine reads ys. */
int dec_moe_layer(accel_decoder *D, int i, mlxrt_error *err);
int dec_moe_buffers(accel_decoder *D, int T, struct dec_moe_buf **mb, mlxrt_error *err);
int dec_moe_route(accel_decoder *D, int i, struct dec_moe_buf *mb, const float *h, int T, mlxrt_error *err);
int dec_moe_experts(accel_decoder *D, int i, struct dec_moe_buf *mb, const float *ys, int64_t lds, int ks,
                    int64_t kstride, int T, void *join, const float **out, mlxrt_error *err);
void dec_moe_free(accel_decoder *D);

#endif
