/* The model description a backend's whole-step decoder receives (accel.h decoder_create):
 * part of the backend boundary, made by src/mlx/decoder_desc.c. */
#ifndef MLXRT_ACCEL_MODEL_DESC_H
#define MLXRT_ACCEL_MODEL_DESC_H

#include <stdint.h>

#include "base/error.h"

typedef struct accel_weight accel_weight;

/* What a backend needs to run a dense Gemma 3 / Gemma 4 decoder step by itself (no PLE, no
 * MoE, no KV sharing). Backend-neutral: hyper-parameters, the weights as accel_weights, and
 * small float vectors already in their final form (Gemma 3's 1+w folded in as the reference
 * path folds it). Everything pointed to must outlive the decoder created from it. The math is
 * the reference path's (docs/NUMERICS.md): bf16 activations between ops, float32 reductions. */
typedef struct accel_layer_desc {
  int sliding;      /* 1: attends to the last `sliding_window` positions; 0: full attention */
  int head_dim;     /* 256 or 512 on the released models */
  int n_kv_heads;
  int k_eq_v;       /* V is the raw K projection (v is NULL) */
  int intermediate; /* FFN width */
  const accel_weight *q, *k, *v, *o, *gate, *up, *down;
  /* [hidden]: input, post-attention, pre-FFN, post-FFN norms; [head_dim]: q and k norms */
  const float *input_norm, *post_attn_norm, *pre_ffw_norm, *post_ffw_norm, *q_norm, *k_norm;
  float layer_scalar; /* h *= layer_scalar at the end of the layer when has_layer_scalar */
  const float *inv_freq; /* [head_dim/2] RoPE inverse frequencies; 0 = pass-through pair */
} accel_layer_desc;

typedef struct accel_model_desc {
  int family;          /* 3 = Gemma 3, 4 = Gemma 4 */
  int hidden, n_layers, n_heads, vocab;
  int sliding_window;  /* ring size of sliding layers */
  float eps;           /* RMSNorm epsilon */
  float attn_scale;    /* query scale before q·k (1 for Gemma 4) */
  float embed_scale;   /* bf16(√hidden) */
  float final_softcap; /* 0 = none */
  int v_norm;          /* weightless RMSNorm on V per head (Gemma 4) */
  int has_layer_scalar;
  int rope_traditional; /* pairs (2j, 2j+1) instead of (j, j + D/2) */
  const accel_weight *embed;   /* [vocab, hidden]: gathered rows × embed_scale */
  const accel_weight *lm_head; /* output projection (== embed when tied) */
  const float *final_norm;     /* [hidden] */
  const accel_layer_desc *layers;
} accel_model_desc;

/* Checks the projection weights of layer i of d: present (v unless k_eq_v), not stacked, and
 * of the shapes its heads, head_dim, hidden size and intermediate size imply. 0, or -1 with a
 * message naming the layer and the weight (both decoders run it). */
int accel_check_layer_weights(const accel_model_desc *d, int i, mlxrt_error *err);
/* One weight of rows × cols, not stacked ("layer -1" in the message for model-level ones). */
int accel_check_weight(const accel_weight *w, int64_t rows, int64_t cols, const char *what, int layer,
                       mlxrt_error *err);

#endif
