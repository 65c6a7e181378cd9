/* A loaded checkpoint: the validated config plus, for every layer, the weights it uses,
 * described for the accel boundary (key + spec + lazy loader) and never read here.
 * Small float vectors (norm weights, scalars) are converted once at load. */
#ifndef MLXRT_MLX_MODEL_H
#define MLXRT_MLX_MODEL_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlx/chat_template_load.h"
#include "mlx/config.h"
#include "mlx/safetensors.h"

/* One matrix the boundary can apply: rank-2 [rows, cols] or stacked [experts, rows, cols]. */
typedef struct mx_linear {
  int present;
  accel_weight aw;
  const st_tensor *weight, *scales, *biases; /* views; scales/biases NULL when dense */
  char name[160];                            /* full tensor prefix, e.g. model.layers.0.mlp.up_proj */
} mx_linear;

/* A float vector from the checkpoint (norm weight, router scale, layer scalar). */
typedef struct mx_vec {
  float *v;
  int n;
} mx_vec;

typedef struct mx_layer {
  mx_layer_type type;
  int head_dim, n_kv_heads, intermediate;
  int kv_source; /* layer whose K/V cache this layer reads (itself unless KV-shared) */
  int has_kv;    /* computes its own K/V */
  int k_eq_v;    /* V is the raw K projection */

  mx_linear q_proj, k_proj, v_proj, o_proj;
  mx_linear gate_proj, up_proj, down_proj;
  mx_vec input_norm, post_attn_norm, pre_ffw_norm, post_ffw_norm, q_norm, k_norm;
  float layer_scalar; /* 1 when absent */

  /* Gemma 4 MoE (26B-A4B) */
  mx_linear router_proj, exp_gate, exp_up, exp_down;
  mx_vec router_scale, per_expert_scale, post_ffw_norm_1, post_ffw_norm_2, pre_ffw_norm_2;

  /* Gemma 4 per-layer embeddings (E2B/E4B) */
  mx_linear ple_gate, ple_proj;
  mx_vec post_ple_norm;
} mx_layer;

typedef struct mx_model {
  char *path; /* the folder as given (any length) */
  mx_config cfg;
  st_archive st;
  uint8_t *used; /* per tensor of st.index: read by the model (the rest must be known extras) */
  struct mx_tokenizer *tok; /* the folder's tokenizer.json, checked at load; NULL without one */
  mx_chat_templates tmpl;   /* the folder's chat template (parsed at load) and token strings */
  char prefix[64]; /* "model." or "language_model.model." */

  mx_linear embed;   /* [vocab, hidden], also the tied output projection */
  mx_linear lm_head; /* untied output projection (present only when not tied) */
  mx_vec final_norm;
  float embed_scale; /* bf16(sqrt(hidden)) */

  /* Gemma 4 PLE */
  mx_linear embed_per_layer, per_layer_model_proj;
  mx_vec per_layer_proj_norm;

  /* gemma4_assistant (cfg.assistant): pre_projection [H, 2·backbone] of (the target's scaled
   * embedding of the last token, its final hidden state), post_projection [backbone, H]; with
   * use_ordered_embeddings the centroids [num_centroids, H] and token_ordering (the vocabulary
   * as num_centroids clusters of vocab / num_centroids ids, a permutation) */
  mx_linear pre_proj, post_proj, centroids;
  int32_t *token_ordering;

  mx_layer *layers;
  int n_layers;

  /* Gemma 3 stores norm weights zero-centred: the (1 + w) is folded in at load, rounded to
   * the weight dtype as mlx-lm computes it. */
  int norm_plus_one;
} mx_model;

/* Opens DIR (config.json + safetensors shards) and validates every tensor's shape and dtype
 * against the config. Nothing is read from the data area except the small float vectors. */
mx_model *mx_model_open(const char *dir, mlxrt_error *err);
void mx_model_close(mx_model *m);

/* Checks at load (model_check.c): every tensor of the checkpoint is used by the model or
 * belongs to a known non-text part (vision/audio towers); a float tensor (norm, scalar,
 * quantization scales/biases) holds only finite values; "hidden_size = 640"-style names for
 * a dimension, for messages. */
int mx_model_check_unused(const mx_model *m, mlxrt_error *err);
/* Token ids of the folder (config.json and generation_config.json eos/bos/pad, every id of
 * tokenizer.json when present) below the embedding's rows; the tokenizer is kept in m->tok. */
int mx_model_check_ids(mx_model *m, mlxrt_error *err);
int mx_check_finite(const mx_model *m, const st_tensor *t, accel_mode mode, mlxrt_error *err);
void mx_dim_field(const mx_config *c, int64_t v, char *buf, size_t n);

/* Accounting for inspect/bench. */
typedef struct mx_model_stats {
  uint64_t params;           /* logical parameter count (packed weights counted unpacked) */
  uint64_t bytes_on_disk;    /* safetensors data of the text model */
  uint64_t bytes_per_token;  /* weights streamed by one decode step (embedding row + all
                                applied matrices + output projection) */
} mx_model_stats;
void mx_model_stats_compute(const mx_model *m, mx_model_stats *s);

/* "affine 4-bit g64", "nvfp4", "bf16"... of the bulk of the weights ("mixed: ..." when the
 * decoder layers disagree). */
void mx_model_quant_label(const mx_model *m, char *buf, size_t n);

/* Calls fn for every linear of the model (for listings and warm-up uploads). */
typedef void (*mx_linear_visit_fn)(const mx_linear *l, void *ctx);
void mx_model_visit_linears(const mx_model *m, mx_linear_visit_fn fn, void *ctx);

#endif
