/* config.json → one validated model description (Gemma 3 / Gemma 4, every text variant) plus
 * the quantization spec of each module. */
#ifndef MLXRT_MLX_CONFIG_H
#define MLXRT_MLX_CONFIG_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlxrt.h"

#define MX_MAX_LAYERS 256

typedef enum { MX_GEMMA3 = 3, MX_GEMMA4 = 4 } mx_family;
typedef enum { MX_LAYER_SLIDING = 0, MX_LAYER_FULL = 1 } mx_layer_type;
typedef enum { MX_ROPE_DEFAULT = 0, MX_ROPE_LINEAR, MX_ROPE_PROPORTIONAL } mx_rope_kind;

typedef struct mx_rope {
  mx_rope_kind kind;
  double theta;
  double factor;          /* linear scaling / proportional divisor (1.0 when absent) */
  double partial_rotary;  /* fraction of frequency pairs rotated (1.0 = all) */
} mx_rope;

/* Quantization of one module (or the global default). */
typedef struct mx_qspec {
  int quantized;          /* 0 = left in float (override `false`, or no .scales) */
  accel_mode mode;
  int bits;
  int group_size;
} mx_qspec;

typedef struct mx_qoverride {
  char *path;             /* module path as written in config.json */
  mx_qspec spec;
} mx_qoverride;

typedef struct mx_config {
  char model_type[64];    /* as written: gemma3_text, gemma3, gemma4_text, gemma4 */
  mx_family family;
  int nested;             /* config had text_config */

  int hidden_size, num_layers, intermediate_size, vocab_size;
  int num_heads, num_kv_heads, head_dim;
  int global_head_dim, num_global_kv_heads; /* Gemma 4 full layers (= head_dim/kv if absent) */
  int sliding_window, max_position_embeddings;
  double rms_norm_eps;
  double query_pre_attn_scalar;             /* Gemma 3 (attention scale = its ^-1/2) */
  double final_logit_softcap;               /* 0 = none */
  double attn_logit_softcap;                /* 0 = none */
  int tie_word_embeddings;
  int attention_k_eq_v;                     /* Gemma 4: full layers have no v_proj */
  int use_double_wide_mlp;                  /* Gemma 4 E2B: KV-shared layers use 2× FFN */
  int num_kv_shared_layers;
  int hidden_size_per_layer_input;          /* PLE width, 0 = no PLE */
  int vocab_size_per_layer_input;
  int enable_moe, num_experts, top_k_experts, moe_intermediate_size;
  int has_layer_scalar;                     /* Gemma 4 */

  mx_layer_type layer_types[MX_MAX_LAYERS];
  int layer_head_dim[MX_MAX_LAYERS];        /* per layer, derived */
  int layer_kv_heads[MX_MAX_LAYERS];
  int layer_intermediate[MX_MAX_LAYERS];    /* dense FFN width per layer */
  int layer_kv_source[MX_MAX_LAYERS];       /* layer whose K/V this layer uses (itself if own) */
  mx_rope rope_sliding, rope_full;

  int bos_token_id;
  int eos_token_ids[8];
  int n_eos;

  /* quantization */
  int has_quantization;
  mx_qspec qdefault;
  mx_qoverride *overrides;
  int noverrides;
} mx_config;

/* Parses config.json text; `path` names the file in messages. */
int mx_config_parse(const char *json, const char *path, mx_config *cfg, mlxrt_error *err);
int mx_config_load(const char *dir, mx_config *cfg, mlxrt_error *err);
void mx_config_free(mx_config *cfg);

/* The quantization spec for a module path relative to the text model root, e.g.
 * "model.layers.3.mlp.down_proj" (a "language_model." prefix is accepted and matched both
 * ways). Returns the override when present, else the global default. */
mx_qspec mx_config_qspec(const mx_config *cfg, const char *module_path);

const char *mx_layer_type_name(mx_layer_type t);

#endif
