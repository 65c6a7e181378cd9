/* The model description a backend's whole-step decoder receives (accel.h decoder_create):
 * part of the backend boundary, made by src/mlx/decoder_desc.c. */
#ifndef MLXRT_ACCEL_MODEL_DESC_H
#define MLXRT_ACCEL_MODEL_DESC_H

#include <stdint.h>

#include "base/error.h"

typedef struct accel_weight accel_weight;

/* Gemma 4 26B-A4B's MoE block beside the dense (shared) FFN of a layer (gemma-architecture.md
 * §7, reference.c moe_block): out = post_ffw_norm(post_ffw_norm_1(dense FFN of pre_ffw_norm(h))
 * + post_ffw_norm_2(Σ_k w_k · expert_k(pre_ffw_norm_2(h)))), where the router scores
 * router · rmsnorm(h, router_norm), takes the top_k (ties: the lower index), and
 * w_k = bf16(bf16(softmax over the top_k in float32) · per_expert_scale[id_k]). */
typedef struct accel_moe_desc {
  int experts, top_k, intermediate;     /* experts == 0: no MoE block */
  const accel_weight *router;           /* [experts, hidden] */
  const accel_weight *gate, *up, *down; /* stacked: [experts, intermediate, hidden] (gate, up), [experts, hidden, intermediate] */
  const float *router_norm;             /* [hidden]: bf16(router.scale · float32(hidden^-½)), the router input's norm weight */
  const float *per_expert_scale;        /* [experts] */
  const float *post_ffw_norm_1, *pre_ffw_norm_2, *post_ffw_norm_2; /* [hidden] */
} accel_moe_desc;

/* What a backend needs to run a Gemma 3 / Gemma 4 decoder step by itself (dense FFN, or dense
 * + MoE; Gemma 4 E2B/E4B's per-layer embeddings and KV sharing). Backend-neutral: hyper-parameters, the weights as accel_weights, and
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
  accel_moe_desc moe;    /* experts == 0 on dense layers */
  /* KV sharing (gemma-architecture.md §8): the layer whose K/V cache this one attends over —
   * itself, or an earlier layer of the same type, whose cache then holds the positions this
   * layer needs (k, v and k_norm are NULL here: only q is projected) */
  int kv_source;
  /* per-layer embeddings (ple_dim > 0): after the FFN residual, before layer_scalar,
   * h += rmsnorm(ple_proj(bf16(gelu_approx(ple_gate(h)) · ple_l)), post_ple_norm) */
  const accel_weight *ple_gate, *ple_proj; /* [ple_dim, hidden], [hidden, ple_dim] */
  const float *post_ple_norm;              /* [hidden] */
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
  /* per-layer embeddings (Gemma 4 E2B/E4B): ple_dim = P > 0. Per token, with h0 the scaled
   * embedding, ple[L, P] = bf16(bf16(rmsnorm(bf16(bf16(ple_model_proj · h0) · ple_model_scale)
   * per P slice, ple_proj_norm) + bf16(ple_embed[token] · ple_embed_scale)) · ple_mix_scale);
   * layer l takes row l (reference.c per_layer_inputs). */
  int ple_dim;
  const accel_weight *ple_embed;      /* [vocab, n_layers · P] */
  const accel_weight *ple_model_proj; /* [n_layers · P, hidden] */
  const float *ple_proj_norm;         /* [P] */
  float ple_model_scale, ple_embed_scale, ple_mix_scale; /* bf16(hidden^-½), bf16(√P), bf16(2^-½) */
} accel_model_desc;

/* Checks the projection weights of layer i of d: present (k and v unless KV-shared, v unless
 * k_eq_v; the PLE pair when ple_dim > 0), not stacked, and
 * of the shapes its heads, head_dim, hidden size and intermediate size imply; with an MoE
 * block also the router, the stacked experts (top_k in 1..experts) and the MoE vectors. 0, or
 * -1 with a message naming the layer and the weight (both decoders run it). */
int accel_check_layer_weights(const accel_model_desc *d, int i, mlxrt_error *err);
/* The per-layer embedding table and projection of d when ple_dim > 0 (0 otherwise). */
int accel_check_ple(const accel_model_desc *d, mlxrt_error *err);
/* One weight of rows × cols, not stacked ("layer -1" in the message for model-level ones). */
int accel_check_weight(const accel_weight *w, int64_t rows, int64_t cols, const char *what, int layer,
                       mlxrt_error *err);
/* One stacked weight of experts × rows × cols. */
int accel_check_stacked(const accel_weight *w, int64_t experts, int64_t rows, int64_t cols, const char *what, int layer,
                        mlxrt_error *err);

#endif
