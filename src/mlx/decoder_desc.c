/* accel_model_desc from an mx_model. The values are exactly those the reference path uses
 * (reference.c): float eps and attention scale, the folded norm vectors, and RoPE tables
 * computed with the same expression, so a backend decoder can reproduce its math. */
#include "mlx/decoder_desc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/bf16.h"
#include "base/error.h"

const char *mx_decoder_unsupported_reason(const mx_model *m) {
  const mx_config *c = &m->cfg;
  if (c->family != MX_GEMMA3 && c->family != MX_GEMMA4) return "unknown model family";
  const int ple = c->hidden_size_per_layer_input > 0;
  if (ple && (c->vocab_size_per_layer_input != c->vocab_size || !m->embed_per_layer.present ||
              !m->per_layer_model_proj.present || !m->per_layer_proj_norm.v))
    return "per-layer embeddings of another vocabulary, or without their table, projection or norm";
  if (c->num_heads <= 0) return "no attention heads";
  for (int i = 0; i < m->n_layers; i++) {
    const mx_layer *ly = &m->layers[i];
    const int src = ly->kv_source;
    if (src < 0 || src > i || (src != i && (m->layers[src].kv_source != src || m->layers[src].type != ly->type ||
                                            m->layers[src].head_dim != ly->head_dim ||
                                            m->layers[src].n_kv_heads != ly->n_kv_heads)))
      return "a KV-shared layer whose source is not an earlier layer of its type and shape";
    if (ly->n_kv_heads <= 0 || c->num_heads % ly->n_kv_heads) return "heads not a multiple of KV heads";
    if (ly->head_dim <= 0 || ly->head_dim > 1024 || ly->head_dim % 2) return "head_dim outside [2, 1024] or odd";
    const int own = src == i;
    if (!ly->q_proj.present || (own && !ly->k_proj.present) || !ly->o_proj.present || !ly->gate_proj.present ||
        !ly->up_proj.present || !ly->down_proj.present || (own && !ly->k_eq_v && !ly->v_proj.present))
      return "a layer without the dense projections";
    if (!ly->input_norm.v || !ly->post_attn_norm.v || !ly->pre_ffw_norm.v || !ly->post_ffw_norm.v ||
        !ly->q_norm.v || (own && !ly->k_norm.v))
      return "a layer without the expected norms";
    if (ple && (!ly->ple_gate.present || !ly->ple_proj.present || !ly->post_ple_norm.v))
      return "a layer without its per-layer input gate, projection or norm";
    if (c->enable_moe && (!ly->router_proj.present || !ly->exp_gate.present || !ly->exp_up.present ||
                          !ly->exp_down.present || !ly->router_scale.v || !ly->per_expert_scale.v ||
                          !ly->post_ffw_norm_1.v || !ly->pre_ffw_norm_2.v || !ly->post_ffw_norm_2.v))
      return "an MoE layer without its router, experts or norms";
  }
  if (!m->final_norm.v) return "no final norm";
  return NULL;
}

int mx_decoder_supported(const mx_model *m) { return mx_decoder_unsupported_reason(m) == NULL; }

void mx_decoder_desc_free(mx_decoder_desc *dd) {
  if (!dd) return;
  for (int i = 0; i < dd->n_layers; i++) {
    if (dd->inv_freq) free(dd->inv_freq[i]);
    if (dd->router_norm) free(dd->router_norm[i]);
  }
  free(dd->inv_freq);
  free(dd->router_norm);
  free(dd->layers);
  free(dd);
}

mx_decoder_desc *mx_decoder_desc_create(const mx_model *m, mlxrt_error *err) {
  const char *why = mx_decoder_unsupported_reason(m);
  if (why) {
    mx_fail(err, "%s: the device decoder does not run models with %s", m->path, why);
    return NULL;
  }
  const mx_config *c = &m->cfg;
  int L = m->n_layers;
  mx_decoder_desc *dd = mx_calloc(1, sizeof *dd, err);
  if (!dd) return NULL;
  dd->n_layers = L;
  dd->layers = mx_calloc((size_t)L, sizeof *dd->layers, err);
  dd->inv_freq = mx_calloc((size_t)L, sizeof *dd->inv_freq, err);
  dd->router_norm = mx_calloc((size_t)L, sizeof *dd->router_norm, err);
  if (!dd->layers || !dd->inv_freq || !dd->router_norm) goto fail;
  for (int i = 0; i < L; i++) {
    const mx_layer *ly = &m->layers[i];
    accel_layer_desc *ld = &dd->layers[i];
    /* the reference path's RoPE table: θ^(−2j/D) / factor for live pairs, 0 for the rest */
    const mx_rope *r = mx_config_layer_rope(c, i);
    int dim = ly->head_dim, half = dim / 2, live = c->layer_rope_pairs[i];
    if (!(dd->inv_freq[i] = mx_calloc((size_t)half, sizeof(float), err))) goto fail;
    double factor = r->factor > 0 ? r->factor : 1.0;
    for (int j = 0; j < live && j < half; j++)
      dd->inv_freq[i][j] = (float)(pow(r->theta, -(2.0 * j) / dim) / factor);

    ld->sliding = ly->type == MX_LAYER_SLIDING;
    ld->head_dim = ly->head_dim;
    ld->n_kv_heads = ly->n_kv_heads;
    ld->k_eq_v = ly->k_eq_v;
    ld->intermediate = (int)ly->gate_proj.aw.spec.rows;
    ld->kv_source = ly->kv_source;
    const int own = ly->kv_source == i;
    ld->q = &ly->q_proj.aw;
    ld->k = own ? &ly->k_proj.aw : NULL;
    ld->v = own && !ly->k_eq_v ? &ly->v_proj.aw : NULL;
    ld->o = &ly->o_proj.aw;
    ld->gate = &ly->gate_proj.aw;
    ld->up = &ly->up_proj.aw;
    ld->down = &ly->down_proj.aw;
    ld->input_norm = ly->input_norm.v;
    ld->post_attn_norm = ly->post_attn_norm.v;
    ld->pre_ffw_norm = ly->pre_ffw_norm.v;
    ld->post_ffw_norm = ly->post_ffw_norm.v;
    ld->q_norm = ly->q_norm.v;
    ld->k_norm = own ? ly->k_norm.v : NULL;
    if (c->hidden_size_per_layer_input > 0) {
      ld->ple_gate = &ly->ple_gate.aw;
      ld->ple_proj = &ly->ple_proj.aw;
      ld->post_ple_norm = ly->post_ple_norm.v;
    }
    ld->layer_scalar = ly->layer_scalar;
    ld->inv_freq = dd->inv_freq[i];
    if (c->enable_moe) {
      accel_moe_desc *mo = &ld->moe;
      const int H = c->hidden_size;
      /* the reference path's router weight (moe_block): bf16(scale · float32(H^-½)) */
      const float root = (float)(1.0 / sqrt((double)H));
      if (!(dd->router_norm[i] = mx_calloc((size_t)H, sizeof(float), err))) goto fail;
      for (int j = 0; j < H; j++) dd->router_norm[i][j] = mx_round_bf16(ly->router_scale.v[j] * root);
      mo->experts = c->num_experts;
      mo->top_k = c->top_k_experts;
      mo->intermediate = (int)ly->exp_gate.aw.spec.rows;
      mo->router = &ly->router_proj.aw;
      mo->gate = &ly->exp_gate.aw;
      mo->up = &ly->exp_up.aw;
      mo->down = &ly->exp_down.aw;
      mo->router_norm = dd->router_norm[i];
      mo->per_expert_scale = ly->per_expert_scale.v;
      mo->post_ffw_norm_1 = ly->post_ffw_norm_1.v;
      mo->pre_ffw_norm_2 = ly->pre_ffw_norm_2.v;
      mo->post_ffw_norm_2 = ly->post_ffw_norm_2.v;
    }
  }
  accel_model_desc *d = &dd->d;
  d->family = c->family == MX_GEMMA4 ? 4 : 3;
  d->hidden = c->hidden_size;
  d->n_layers = L;
  d->n_heads = c->num_heads;
  d->vocab = c->vocab_size;
  d->sliding_window = c->sliding_window;
  d->eps = (float)c->rms_norm_eps;
  d->attn_scale = (float)c->attn_scale;
  d->embed_scale = m->embed_scale;
  d->final_softcap = c->final_logit_softcap > 0 ? (float)c->final_logit_softcap : 0.0f;
  d->v_norm = c->family == MX_GEMMA4;
  d->has_layer_scalar = c->has_layer_scalar;
  d->rope_traditional = c->rope_traditional;
  d->embed = &m->embed.aw;
  d->lm_head = m->lm_head.present ? &m->lm_head.aw : &m->embed.aw;
  d->final_norm = m->final_norm.v;
  d->layers = dd->layers;
  if (c->hidden_size_per_layer_input > 0) { /* the reference path's constants (per_layer_inputs) */
    const int P = c->hidden_size_per_layer_input;
    d->ple_dim = P;
    d->ple_embed = &m->embed_per_layer.aw;
    d->ple_model_proj = &m->per_layer_model_proj.aw;
    d->ple_proj_norm = m->per_layer_proj_norm.v;
    d->ple_model_scale = mx_round_bf16((float)(1.0 / sqrt((double)c->hidden_size)));
    d->ple_embed_scale = mx_round_bf16(sqrtf((float)P));
    d->ple_mix_scale = mx_round_bf16((float)(1.0 / sqrt(2.0)));
  }
  return dd;
fail:
  mx_decoder_desc_free(dd);
  return NULL;
}

mx_decoder *mx_decoder_open(const mx_model *m, accel_backend *b, int64_t capacity, int verbose,
                            mlxrt_error *err) {
  err->msg[0] = 0;
  if (!b->decoder_create || !b->decoder_step || !b->decoder_free) {
    if (verbose) fprintf(stderr, "mlxrt: the %s backend has no whole-step decoder: reference path\n", b->name);
    return NULL;
  }
  const char *why = mx_decoder_unsupported_reason(m);
  if (why) {
    if (verbose) fprintf(stderr, "mlxrt: the %s decoder does not run models with %s: reference path\n", b->name, why);
    return NULL;
  }
  mx_decoder *x = mx_calloc(1, sizeof *x, err);
  if (!x) return NULL;
  x->b = b;
  if (!(x->dd = mx_decoder_desc_create(m, err)) || !(x->dec = b->decoder_create(b, &x->dd->d, capacity, err))) {
    mx_decoder_close(x);
    return NULL;
  }
  if (verbose) fprintf(stderr, "mlxrt: whole-step decoder on the %s backend (%lld positions)\n", b->name, (long long)capacity);
  return x;
}

int mx_decoder_feed(mx_decoder *x, const int32_t *tokens, int64_t n, int64_t pos, float *logits,
                    int32_t *next_token, mlxrt_error *err) {
  return x->b->decoder_step(x->dec, tokens, n, pos, NULL, 0.0, logits, next_token, err);
}

void mx_decoder_close(mx_decoder *x) {
  if (!x) return;
  if (x->dec) x->b->decoder_free(x->dec);
  mx_decoder_desc_free(x->dd);
  free(x);
}
