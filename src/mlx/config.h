/* config.json → one validated model description (Gemma 3 / Gemma 4, every text variant) plus
 * the quantization spec of each module.
 *
 * Accepted model_type values: gemma3_text, gemma3 (text_config), gemma4_text, gemma4
 * (text_config), gemma4_unified / gemma4_unified_text (the 12B, which mlx-lm runs as gemma4),
 * and gemma4_assistant (text_config; transformers' MTP drafter for a Gemma 4 model).
 * Absent keys take mlx-lm 0.32's ModelArgs defaults. Everything per layer is resolved here, so
 * the model code reads layer_* arrays and never re-derives the layer plan. */
#ifndef MLXRT_MLX_CONFIG_H
#define MLXRT_MLX_CONFIG_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlxrt.h"

#define MX_MAX_LAYERS 256
#define MX_MAX_EOS 16

typedef enum { MX_GEMMA3 = 3, MX_GEMMA4 = 4 } mx_family;
typedef enum { MX_LAYER_SLIDING = 0, MX_LAYER_FULL = 1 } mx_layer_type;
typedef enum { MX_ROPE_DEFAULT = 0, MX_ROPE_LINEAR, MX_ROPE_PROPORTIONAL } mx_rope_kind;

/* RoPE of one layer type. For every kind the live frequencies of a layer with head dim D are
 *   inv_freq_j = θ^(−2j/D) / factor   for j < layer_rope_pairs[l], and 0 for the other pairs,
 * with rotate-half pairing (j, j + D/2) unless rope_traditional. For "linear" dividing the
 * frequencies by factor is the same as dividing positions by it. */
typedef struct mx_rope {
  mx_rope_kind kind;
  double theta;
  double factor;          /* linear scaling / proportional divisor (1.0 when absent) */
  double partial_rotary;  /* proportional: fraction of the head dim rotated; 1.0 otherwise */
} mx_rope;

/* Quantization of one module (or the global default). */
typedef struct mx_qspec {
  int quantized;          /* 0 = left in float (override `false`, or no quantization at all) */
  accel_mode mode;        /* AFFINE, NVFP4, MXFP4 or MXFP8 when quantized */
  int bits;
  int group_size;
} mx_qspec;

typedef struct mx_qoverride {
  char *path;             /* module path as written in config.json */
  mx_qspec spec;
} mx_qoverride;

typedef enum { MX_QSRC_NONE = 0, MX_QSRC_QUANTIZATION, MX_QSRC_QUANTIZATION_CONFIG } mx_qsource;

typedef struct mx_config {
  char model_type[64];      /* top-level model_type as written */
  mx_family family;
  int nested;               /* text fields came from text_config */
  /* gemma4_assistant (an MTP drafter, src/mlx/assistant.h): every layer reads the K/V of the
   * model it drafts for (layer_kv_source −1); its input is that model's embedding of the last
   * token beside its final hidden state (backbone_hidden_size wide) */
  int assistant, backbone_hidden_size;
  int use_ordered_embeddings, num_centroids, centroid_top_k; /* the ordered-embedding head */

  int hidden_size, num_layers, intermediate_size, vocab_size;
  int num_heads, num_kv_heads, head_dim;    /* the global (sliding-layer) values */
  int global_head_dim;      /* Gemma 4 full-layer head dim as configured (0 = none/Gemma 3) */
  int num_global_kv_heads;  /* Gemma 4, 0 = null/absent (then full layers keep num_kv_heads) */
  int sliding_window, max_position_embeddings;
  double rms_norm_eps;
  double query_pre_attn_scalar;   /* Gemma 3 (256 default); 0 for Gemma 4 */
  double attn_scale;              /* derived: Gemma 3 q.p.a.s.^-1/2, Gemma 4 1.0 */
  float embed_scale;              /* derived: sqrt(hidden_size) rounded to bf16 */
  int norm_plus_one;              /* derived: Gemma 3 RMSNorm is x·(1+w), Gemma 4 x·w */
  double final_logit_softcap;     /* 0 = none (Gemma 3 always 0, as in mlx-lm) */
  double attn_logit_softcap;      /* always 0: neither mlx-lm model applies one */
  int tie_word_embeddings;        /* default 1; Gemma 3 mlx-lm really decides by lm_head presence */
  int attention_k_eq_v;           /* Gemma 4: full layers have no v_proj (see layer_k_eq_v) */
  int use_double_wide_mlp;        /* Gemma 4: KV-shared layers use 2× FFN (see layer_intermediate) */
  int num_kv_shared_layers;       /* Gemma 4 */
  int first_kv_shared_layer;      /* derived: num_layers − num_kv_shared_layers (num_layers if 0) */
  int hidden_size_per_layer_input;/* PLE width, 0 = no PLE */
  int vocab_size_per_layer_input;
  int enable_moe, num_experts, top_k_experts, moe_intermediate_size;
  int has_layer_scalar;           /* Gemma 4: every layer ends with h *= layer_scalar */
  int rope_traditional;           /* Gemma 4 `rope_traditional` (default false): pairs (2j, 2j+1) */
  int sliding_window_pattern;     /* as configured (or default); informational */
  int has_per_layer_config;       /* the HF `per_layer_config` overrides were applied */

  /* Per layer, fully resolved (index = layer). */
  mx_layer_type layer_types[MX_MAX_LAYERS];
  int layer_head_dim[MX_MAX_LAYERS];
  int layer_kv_heads[MX_MAX_LAYERS];
  int layer_intermediate[MX_MAX_LAYERS];    /* dense (shared, for MoE) FFN width */
  int layer_kv_source[MX_MAX_LAYERS];       /* layer whose K/V this layer uses (itself if own) */
  int layer_k_eq_v[MX_MAX_LAYERS];          /* this layer computes K/V and has no v_proj */
  int layer_rope_pairs[MX_MAX_LAYERS];      /* live frequency pairs (head_dim/2 unless partial) */
  mx_rope rope_sliding, rope_full;

  int bos_token_id;               /* -1 = null */
  int pad_token_id;               /* -1 = null */
  int eos_token_ids[MX_MAX_EOS];  /* config.json eos_token_id (int or list), then the new ids
                                     of generation_config.json (mx_config_load) */
  int n_eos;

  /* quantization */
  int has_quantization;           /* a quantization spec exists (see quant_source) */
  mx_qsource quant_source;
  int quantize_activations;       /* top-level "quantize_activations": true (QQLinear) */
  mx_qspec qdefault;              /* global spec; quantized = has_quantization */
  mx_qoverride *overrides;        /* per-module entries, in file order */
  int noverrides;
} mx_config;

/* Parses config.json text; `path` names the file in messages. On failure cfg is left empty
 * (safe to free) and err holds "<path>: <what>". */
int mx_config_parse(const char *json, const char *path, mx_config *cfg, mlxrt_error *err);
/* Reads DIR/config.json, then DIR/generation_config.json when present (its eos_token_id ids
 * are appended to the eos list, duplicates dropped). */
int mx_config_load(const char *dir, mx_config *cfg, mlxrt_error *err);
void mx_config_free(mx_config *cfg);

/* The quantization spec for a module path, e.g. "model.layers.3.mlp.down_proj" or
 * "language_model.model.layers.3.mlp.down_proj": an exact override first, then the override
 * spelled with / without the "language_model." prefix, else the global default. Whether the
 * module is really quantized is decided by the presence of `<path>.scales`. */
mx_qspec mx_config_qspec(const mx_config *cfg, const char *module_path);

/* Infers (mode, bits, group) from a quantized tensor's shapes as mlx-lm 0.32 does for modules
 * without an override: scales_u8 = scales dtype is uint8 (fp modes), in_dims = unpacked input
 * features, packed_cols = weight.shape[-1] (uint32 words), scales_cols = scales.shape[-1].
 * Returns -1 with err set ("<name>: ...") when the shapes fit no valid mode. */
int mx_qspec_from_shapes(int scales_u8, int64_t in_dims, int64_t packed_cols, int64_t scales_cols,
                         const char *name, mx_qspec *out, mlxrt_error *err);

/* Validates a (mode, bits, group_size) triple; `what` names it in the message. */
int mx_qspec_check(const mx_qspec *q, const char *what, mlxrt_error *err);

const mx_rope *mx_config_layer_rope(const mx_config *cfg, int layer);
const char *mx_layer_type_name(mx_layer_type t);
/* "gemma4-31b", "gemma3-270m", … when the dimensions match a released variant, else
 * "gemma4 (custom)" / "gemma3 (custom)". */
const char *mx_config_variant(const mx_config *cfg);

#endif
