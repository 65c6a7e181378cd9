/* Checkpoint → mx_model: finds every tensor the layer plan needs, checks its dtype and shape
 * against the config, and describes each matrix for the accel boundary. Data stays mapped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"
#include "mlx/model.h"
#include "mlx/tokenizer.h"

/* ---- the lazy loader: hands out views of the mapping ------------------------------------- */
static const void *linear_load(void *ctx, accel_part part, size_t *nbytes, mlxrt_error *err) {
  const mx_linear *l = ctx;
  const st_tensor *t = part == ACCEL_PART_WEIGHT ? l->weight
                       : part == ACCEL_PART_SCALES ? l->scales
                                                   : l->biases;
  if (!t) {
    mx_fail(err, "%s: no %s part", l->name,
            part == ACCEL_PART_SCALES ? "scales" : part == ACCEL_PART_BIASES ? "biases" : "weight");
    return NULL;
  }
  if (nbytes) *nbytes = (size_t)t->nbytes;
  return t->data;
}

/* Finds a tensor and records that the model uses it (every other tensor is checked later). */
static const st_tensor *use(mx_model *m, const char *name) {
  int i = st_find_pos(&m->st, name);
  if (i < 0) return NULL;
  m->used[i] = 1;
  return m->st.index[i];
}

static uint64_t fnv1a(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static void shape_str(const st_tensor *t, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

static int check_shape(const mx_model *m, const st_tensor *t, int ndim, const int64_t *want,
                       mlxrt_error *err) {
  int ok = t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
  if (ok) return 0;
  char got[128], exp[128] = "[";
  shape_str(t, got, sizeof got);
  size_t o = 1;
  for (int i = 0; i < ndim; i++)
    o += (size_t)snprintf(exp + o, sizeof exp - o, "%s%lld", i ? ", " : "", (long long)want[i]);
  snprintf(exp + o, sizeof exp - o, "]");
  char why[96] = "";
  for (int i = 0; t->ndim == ndim && i < ndim; i++)
    if (t->shape[i] != want[i]) {
      mx_dim_field(&m->cfg, want[i], why, sizeof why);
      break;
    }
  return mx_fail(err, "%s: tensor '%s' has shape %s, expected %s from config.json%s%s%s", m->path,
                 t->name, got, exp, why[0] ? " (" : "", why, why[0] ? ")" : "");
}

static accel_dtype float_dtype(st_dtype d, int *ok) {
  *ok = 1;
  if (d == ST_BF16) return ACCEL_BF16;
  if (d == ST_F16) return ACCEL_F16;
  if (d == ST_F32) return ACCEL_F32;
  *ok = 0;
  return ACCEL_BF16;
}

/* At the config's quantization the stored widths hold `in` input columns; when that is not
 * the configured width, the config's dimension is what is wrong (a wrong hidden_size can even
 * fit another bit width, so this comes before the shapes pick the quantization). */
static int quant_width_mismatch(const mx_model *m, const char *name, const st_tensor *w,
                                const st_tensor *sc, int64_t cols, mlxrt_error *err) {
  mx_qspec q = mx_config_qspec(&m->cfg, name);
  int64_t pc = w->shape[w->ndim - 1], scc = sc->shape[sc->ndim - 1];
  if (!q.quantized || q.bits <= 0 || q.group_size <= 0 || (pc * 32) % q.bits) return 0;
  int64_t in = pc * 32 / q.bits;
  if (in != scc * q.group_size || in == cols) return 0;
  char why[96], ws[128];
  mx_dim_field(&m->cfg, cols, why, sizeof why);
  shape_str(w, ws, sizeof ws);
  return mx_fail(err, "%s: tensor '%s.weight' %s holds %lld input columns at config.json's %s "
                 "%d-bit group %d: its shape disagrees with config.json %s", m->path, name, ws,
                 (long long)in, accel_mode_name(q.mode), q.bits, q.group_size, why);
}

/* Finds <name>.weight (+ .scales/.biases) and validates it as [experts?, rows, cols]. */
static int load_linear(mx_model *m, const char *name, int64_t experts, int64_t rows, int64_t cols,
                       int required, mx_linear *l, mlxrt_error *err) {
  char key[256];
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  snprintf(key, sizeof key, "%s.weight", name);
  l->weight = use(m, key);
  if (!l->weight) {
    if (!required) return 0;
    return mx_fail(err, "%s: tensor '%s' is missing (expected a %s[%lld, %lld] matrix for this config)",
                   m->path, key, experts ? "stacked " : "", (long long)rows, (long long)cols);
  }
  snprintf(key, sizeof key, "%s.scales", name);
  l->scales = use(m, key);
  snprintf(key, sizeof key, "%s.biases", name);
  l->biases = use(m, key);
  l->present = 1;

  int ndim = experts ? 3 : 2;
  int64_t want[3];
  int o = 0;
  if (experts) want[o++] = experts;
  want[o++] = rows;
  accel_spec *sp = &l->aw.spec;
  sp->experts = experts;
  sp->rows = rows;
  sp->cols = cols;

  if (!l->scales) {
    if (l->biases)
      return mx_fail(err, "%s: tensor '%s.biases' present without '%s.scales'", m->path, name, name);
    int ok;
    sp->mode = ACCEL_MODE_DENSE;
    sp->dense_dtype = float_dtype(l->weight->dtype, &ok);
    sp->bits = sp->dense_dtype == ACCEL_F32 ? 32 : 16;
    if (!ok)
      return mx_fail(err, "%s: tensor '%s.weight' has dtype %s, expected BF16, F16 or F32 (no .scales, so not quantized)",
                     m->path, name, st_dtype_name(l->weight->dtype));
    want[o] = cols;
    if (check_shape(m, l->weight, ndim, want, err)) return -1;
  } else {
    if (l->weight->dtype != ST_U32)
      return mx_fail(err, "%s: tensor '%s.weight' has dtype %s, expected U32 (packed, since '%s.scales' exists)",
                     m->path, name, st_dtype_name(l->weight->dtype), name);
    if (l->weight->ndim != ndim || l->scales->ndim != ndim) {
      char ws[128];
      shape_str(l->weight, ws, sizeof ws);
      return mx_fail(err, "%s: tensor '%s.weight' has shape %s, expected rank %d", m->path, name, ws, ndim);
    }
    /* As mlx-lm: the shapes decide (mode, bits, group); an explicit per-module override in
     * config.json must agree with them. */
    mx_qspec shapes;
    const st_tensor *w = l->weight, *sc = l->scales;
    if (quant_width_mismatch(m, name, w, sc, cols, err)) return -1;
    if (mx_qspec_from_shapes(sc->dtype == ST_U8, cols, w->shape[w->ndim - 1], sc->shape[sc->ndim - 1],
                             name, &shapes, err)) {
      /* The stored widths fit no quantization of the configured input width: most likely the
       * config is wrong, so name the field rather than blame the quantization. */
      char why[96], ws[128], ss[128];
      mx_dim_field(&m->cfg, cols, why, sizeof why);
      shape_str(w, ws, sizeof ws);
      shape_str(sc, ss, sizeof ss);
      return mx_fail(err, "%s: tensor '%s.weight' %s with scales %s does not hold %lld input "
                     "columns at any quantization: its shape disagrees with config.json %s",
                     m->path, name, ws, ss, (long long)cols, why);
    }
    if (mx_check_finite(m, sc, shapes.mode, err) ||
        (l->biases && mx_check_finite(m, l->biases, shapes.mode, err)))
      return -1;
    if (shapes.mode == ACCEL_MODE_AFFINE && !l->biases)
      return mx_fail(err, "%s: tensor '%s.biases' is missing (affine mode needs biases)", m->path, name);
    if (shapes.mode != ACCEL_MODE_AFFINE && l->biases)
      return mx_fail(err, "%s: tensor '%s.biases' present, but U8 scales mean %s, which has no biases",
                     m->path, name, accel_mode_name(shapes.mode));
    mx_qspec q = mx_config_qspec(&m->cfg, name);
    const mx_qspec *d = &m->cfg.qdefault;
    int overridden = q.quantized != d->quantized || q.mode != d->mode || q.bits != d->bits ||
                     q.group_size != d->group_size;
    if (overridden && !q.quantized)
      return mx_fail(err, "%s: tensor '%s.scales' exists but config.json marks '%s' as not quantized",
                     m->path, name, name);
    if (overridden && (q.mode != shapes.mode || q.bits != shapes.bits || q.group_size != shapes.group_size))
      return mx_fail(err, "%s: tensor '%s' is stored as %s %d-bit group %d, but config.json's override says %s %d-bit group %d",
                     m->path, name, accel_mode_name(shapes.mode), shapes.bits, shapes.group_size,
                     accel_mode_name(q.mode), q.bits, q.group_size);
    q = shapes;
    sp->mode = q.mode;
    sp->bits = q.bits;
    sp->group_size = q.group_size;
    want[o] = cols * q.bits / 32;
    if (check_shape(m, l->weight, ndim, want, err)) return -1;
    want[o] = cols / q.group_size;
    if (check_shape(m, l->scales, ndim, want, err)) return -1;
    if (q.mode == ACCEL_MODE_AFFINE) {
      int ok;
      sp->scales_dtype = float_dtype(l->scales->dtype, &ok);
      if (!ok)
        return mx_fail(err, "%s: tensor '%s.scales' has dtype %s, expected BF16, F16 or F32 for affine mode",
                       m->path, name, st_dtype_name(l->scales->dtype));
      if (!l->biases)
        return mx_fail(err, "%s: tensor '%s.biases' is missing (affine mode needs biases)", m->path, name);
      if (l->biases->dtype != l->scales->dtype)
        return mx_fail(err, "%s: tensor '%s.biases' has dtype %s, expected %s like its scales", m->path,
                       name, st_dtype_name(l->biases->dtype), st_dtype_name(l->scales->dtype));
      if (check_shape(m, l->biases, ndim, want, err)) return -1;
    } else {
      if (l->biases)
        return mx_fail(err, "%s: tensor '%s.biases' present, but %s mode has no biases", m->path, name,
                       accel_mode_name(q.mode));
      if (l->scales->dtype != ST_U8)
        return mx_fail(err, "%s: tensor '%s.scales' has dtype %s, expected U8 for %s", m->path, name,
                       st_dtype_name(l->scales->dtype), accel_mode_name(q.mode));
    }
  }
  l->aw.key = fnv1a(fnv1a(1469598103934665603ull, m->path), name);
  l->aw.load = linear_load;
  l->aw.load_ctx = l;
  l->aw.name = l->name;
  return 0;
}

/* Reads a small float vector; `plus_one` folds Gemma 3's (1 + w) in the weight dtype. */
static int load_vec(mx_model *m, const char *name, int64_t n, int required, int plus_one,
                    mx_vec *v, mlxrt_error *err) {
  memset(v, 0, sizeof *v);
  const st_tensor *t = use(m, name);
  if (!t) {
    if (!required) return 0;
    return mx_fail(err, "%s: tensor '%s' is missing (expected a vector of %lld)", m->path, name, (long long)n);
  }
  if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F32)
    return mx_fail(err, "%s: tensor '%s' has dtype %s, expected BF16, F16 or F32", m->path, name,
                   st_dtype_name(t->dtype));
  if (st_numel(t) != n || t->ndim != 1) {
    char got[128];
    shape_str(t, got, sizeof got);
    return mx_fail(err, "%s: tensor '%s' has shape %s, expected [%lld]", m->path, name, got, (long long)n);
  }
  if (mx_check_finite(m, t, ACCEL_MODE_DENSE, err)) return -1;
  v->v = mx_malloc((size_t)n * sizeof(float), err);
  if (!v->v) return -1;
  v->n = (int)n;
  for (int64_t i = 0; i < n; i++) {
    float x;
    uint16_t h;
    if (t->dtype == ST_F32) {
      memcpy(&x, t->data + 4 * i, 4);
      if (plus_one) x = 1.0f + x;
    } else {
      memcpy(&h, t->data + 2 * i, 2);
      if (t->dtype == ST_BF16) {
        x = mx_bf16_to_f32(h);
        if (plus_one) x = mx_round_bf16(1.0f + x);
      } else {
        x = mx_f16_to_f32(h);
        if (plus_one) x = mx_f16_to_f32(mx_f32_to_f16(1.0f + x));
      }
    }
    v->v[i] = x;
  }
  return 0;
}

static void free_vec(mx_vec *v) {
  free(v->v);
  v->v = NULL;
}

/* transformers' masked_embedding.token_ordering: I64 (or I32) ids, each of the vocabulary once. */
static int load_ordering(mx_model *m, const char *name, int64_t V, mlxrt_error *err) {
  const st_tensor *t = use(m, name);
  if (!t) return mx_fail(err, "%s: tensor '%s' is missing (use_ordered_embeddings is true)", m->path, name);
  if ((t->dtype != ST_I64 && t->dtype != ST_I32) || t->ndim != 1 || st_numel(t) != V) {
    char got[128];
    shape_str(t, got, sizeof got);
    return mx_fail(err, "%s: tensor '%s' is %s %s, expected I64 or I32 [%lld]", m->path, name,
                   st_dtype_name(t->dtype), got, (long long)V);
  }
  uint8_t *seen = mx_calloc((size_t)V, 1, err);
  if (!seen || !(m->token_ordering = mx_malloc((size_t)V * sizeof(int32_t), err))) {
    free(seen);
    return -1;
  }
  for (int64_t i = 0; i < V; i++) {
    int64_t id;
    if (t->dtype == ST_I64) {
      memcpy(&id, t->data + 8 * i, 8);
    } else {
      int32_t v32;
      memcpy(&v32, t->data + 4 * i, 4);
      id = v32;
    }
    if (id < 0 || id >= V || seen[id]) {
      free(seen);
      return mx_fail(err, "%s: tensor '%s' entry %lld is %lld: expected each id of the vocabulary (0 to %lld) once",
                     m->path, name, (long long)i, (long long)id, (long long)V - 1);
    }
    seen[id] = 1;
    m->token_ordering[i] = (int32_t)id;
  }
  free(seen);
  return 0;
}

static int load_assistant(mx_model *m, mlxrt_error *err) {
  const mx_config *c = &m->cfg;
  const int64_t H = c->hidden_size, B = c->backbone_hidden_size;
  if (load_linear(m, "pre_projection", 0, H, 2 * B, 1, &m->pre_proj, err) ||
      load_linear(m, "post_projection", 0, B, H, 1, &m->post_proj, err))
    return -1;
  if (!c->use_ordered_embeddings) return 0;
  if (load_linear(m, "masked_embedding.centroids", 0, c->num_centroids, H, 1, &m->centroids, err)) return -1;
  return load_ordering(m, "masked_embedding.token_ordering", c->vocab_size, err);
}

/* ---- layers -------------------------------------------------------------------------------- */
static int load_layer(mx_model *m, int i, mlxrt_error *err) {
  const mx_config *c = &m->cfg;
  mx_layer *L = &m->layers[i];
  char p[160], n[224];
  snprintf(p, sizeof p, "%slayers.%d.", m->prefix, i);
  int64_t H = c->hidden_size;
  int g3 = m->norm_plus_one;

  L->type = c->layer_types[i];
  L->head_dim = c->layer_head_dim[i];
  L->n_kv_heads = c->layer_kv_heads[i];
  L->intermediate = c->layer_intermediate[i];
  L->kv_source = c->layer_kv_source[i];
  L->has_kv = L->kv_source == i;
  L->k_eq_v = c->layer_k_eq_v[i];
  int64_t hd = L->head_dim, nq = c->num_heads, nkv = L->n_kv_heads;

#define LIN(field, suffix, E, R, C, req)                                    \
  do {                                                                      \
    snprintf(n, sizeof n, "%s%s", p, suffix);                               \
    if (load_linear(m, n, E, R, C, req, &L->field, err)) return -1;         \
  } while (0)
#define VEC(field, suffix, N, req, plus)                                    \
  do {                                                                      \
    snprintf(n, sizeof n, "%s%s", p, suffix);                               \
    if (load_vec(m, n, N, req, plus, &L->field, err)) return -1;           \
  } while (0)

  LIN(q_proj, "self_attn.q_proj", 0, nq * hd, H, 1);
  LIN(o_proj, "self_attn.o_proj", 0, H, nq * hd, 1);
  VEC(q_norm, "self_attn.q_norm.weight", hd, 1, g3);
  if (L->has_kv) {
    LIN(k_proj, "self_attn.k_proj", 0, nkv * hd, H, 1);
    if (!L->k_eq_v) LIN(v_proj, "self_attn.v_proj", 0, nkv * hd, H, 1);
    VEC(k_norm, "self_attn.k_norm.weight", hd, 1, g3);
  }
  VEC(input_norm, "input_layernorm.weight", H, 1, g3);
  VEC(post_attn_norm, "post_attention_layernorm.weight", H, 1, g3);
  VEC(pre_ffw_norm, "pre_feedforward_layernorm.weight", H, 1, g3);
  VEC(post_ffw_norm, "post_feedforward_layernorm.weight", H, 1, g3);
  LIN(gate_proj, "mlp.gate_proj", 0, L->intermediate, H, 1);
  LIN(up_proj, "mlp.up_proj", 0, L->intermediate, H, 1);
  LIN(down_proj, "mlp.down_proj", 0, H, L->intermediate, 1);

  L->layer_scalar = 1.0f;
  if (c->has_layer_scalar) {
    mx_vec ls;
    snprintf(n, sizeof n, "%slayer_scalar", p);
    if (load_vec(m, n, 1, 0, 0, &ls, err)) return -1;
    if (ls.v) L->layer_scalar = ls.v[0];
    free_vec(&ls);
  }
  if (c->enable_moe) {
    int64_t E = c->num_experts, mi = c->moe_intermediate_size;
    LIN(router_proj, "router.proj", 0, E, H, 1);
    VEC(router_scale, "router.scale", H, 1, 0);
    VEC(per_expert_scale, "router.per_expert_scale", E, 1, 0);
    LIN(exp_gate, "experts.switch_glu.gate_proj", E, mi, H, 1);
    LIN(exp_up, "experts.switch_glu.up_proj", E, mi, H, 1);
    LIN(exp_down, "experts.switch_glu.down_proj", E, H, mi, 1);
    VEC(post_ffw_norm_1, "post_feedforward_layernorm_1.weight", H, 1, 0);
    VEC(post_ffw_norm_2, "post_feedforward_layernorm_2.weight", H, 1, 0);
    VEC(pre_ffw_norm_2, "pre_feedforward_layernorm_2.weight", H, 1, 0);
  }
  if (c->hidden_size_per_layer_input > 0) {
    int64_t P = c->hidden_size_per_layer_input;
    LIN(ple_gate, "per_layer_input_gate", 0, P, H, 1);
    LIN(ple_proj, "per_layer_projection", 0, H, P, 1);
    VEC(post_ple_norm, "post_per_layer_input_norm.weight", H, 1, 0);
  }
#undef LIN
#undef VEC
  return 0;
}

static void free_layer(mx_layer *L) {
  mx_vec *vs[] = {&L->input_norm, &L->post_attn_norm, &L->pre_ffw_norm, &L->post_ffw_norm,
                  &L->q_norm, &L->k_norm, &L->router_scale, &L->per_expert_scale,
                  &L->post_ffw_norm_1, &L->post_ffw_norm_2, &L->pre_ffw_norm_2, &L->post_ple_norm};
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) free_vec(vs[i]);
}

mx_model *mx_model_open(const char *dir, mlxrt_error *err) {
  mx_model *m = mx_calloc(1, sizeof *m, err);
  if (!m) return NULL;
  if (!(m->path = mx_strdup(dir, err))) {
    free(m);
    return NULL;
  }
  if (mx_config_load(dir, &m->cfg, err)) {
    free(m->path);
    free(m);
    return NULL;
  }
  if (st_open(dir, &m->st, err)) {
    mx_config_free(&m->cfg);
    free(m->path);
    free(m);
    return NULL;
  }
  const mx_config *c = &m->cfg;
  if (!(m->used = mx_calloc((size_t)m->st.ntensors, 1, err))) goto fail;
  if (st_find(&m->st, "language_model.model.embed_tokens.weight"))
    snprintf(m->prefix, sizeof m->prefix, "language_model.model.");
  else if (st_find(&m->st, "model.embed_tokens.weight"))
    snprintf(m->prefix, sizeof m->prefix, "model.");
  else {
    mx_fail(err, "%s: no embedding tensor (expected 'model.embed_tokens.weight' or 'language_model.model.embed_tokens.weight')", dir);
    goto fail;
  }
  m->norm_plus_one = c->norm_plus_one;
  m->embed_scale = c->embed_scale;
  m->n_layers = c->num_layers;
  m->layers = mx_calloc((size_t)m->n_layers, sizeof *m->layers, err);
  if (!m->layers) goto fail;

  char n[224];
  snprintf(n, sizeof n, "%sembed_tokens", m->prefix);
  if (load_linear(m, n, 0, c->vocab_size, c->hidden_size, 1, &m->embed, err)) goto fail;
  snprintf(n, sizeof n, "%snorm.weight", m->prefix);
  if (load_vec(m, n, c->hidden_size, 1, m->norm_plus_one, &m->final_norm, err)) goto fail;
  {
    /* lm_head sits beside the text model: "lm_head" or "language_model.lm_head". Gemma 4
     * follows tie_word_embeddings; mlx-lm's Gemma 3 unties exactly when the tensor exists. */
    const char *pre = strncmp(m->prefix, "language_model.", 15) ? "" : "language_model.";
    snprintf(n, sizeof n, "%slm_head", pre);
    int required = c->family == MX_GEMMA4 && !c->tie_word_embeddings;
    if ((required || c->family == MX_GEMMA3) &&
        load_linear(m, n, 0, c->vocab_size, c->hidden_size, required, &m->lm_head, err))
      goto fail;
  }
  if (c->hidden_size_per_layer_input > 0) {
    int64_t LP = (int64_t)c->num_layers * c->hidden_size_per_layer_input;
    snprintf(n, sizeof n, "%sembed_tokens_per_layer", m->prefix);
    if (load_linear(m, n, 0, c->vocab_size_per_layer_input, LP, 1, &m->embed_per_layer, err)) goto fail;
    snprintf(n, sizeof n, "%sper_layer_model_projection", m->prefix);
    if (load_linear(m, n, 0, LP, c->hidden_size, 1, &m->per_layer_model_proj, err)) goto fail;
    snprintf(n, sizeof n, "%sper_layer_projection_norm.weight", m->prefix);
    if (load_vec(m, n, c->hidden_size_per_layer_input, 1, 0, &m->per_layer_proj_norm, err)) goto fail;
  }
  if (c->assistant && load_assistant(m, err)) goto fail;
  for (int i = 0; i < m->n_layers; i++)
    if (load_layer(m, i, err)) goto fail;
  if (mx_model_check_unused(m, err) || mx_model_check_ids(m, err) ||
      mx_chat_templates_load(dir, &m->tmpl, err))
    goto fail;
  return m;
fail:
  mx_model_close(m);
  return NULL;
}

void mx_model_close(mx_model *m) {
  if (!m) return;
  if (m->layers)
    for (int i = 0; i < m->n_layers; i++) free_layer(&m->layers[i]);
  free(m->layers);
  free_vec(&m->final_norm);
  free_vec(&m->per_layer_proj_norm);
  free(m->token_ordering);
  st_close(&m->st);
  mx_config_free(&m->cfg);
  free(m->used);
  mx_tok_free(m->tok);
  mx_chat_templates_free(&m->tmpl);
  free(m->path);
  free(m);
}

/* ---- accounting ---------------------------------------------------------------------------- */
void mx_model_visit_linears(const mx_model *m, mx_linear_visit_fn fn, void *ctx) {
  const mx_linear *top[] = {&m->embed,    &m->lm_head,   &m->embed_per_layer, &m->per_layer_model_proj,
                            &m->pre_proj, &m->post_proj, &m->centroids};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
    if (top[i]->present) fn(top[i], ctx);
  for (int i = 0; i < m->n_layers; i++) {
    const mx_layer *L = &m->layers[i];
    const mx_linear *ls[] = {&L->q_proj, &L->k_proj, &L->v_proj, &L->o_proj, &L->gate_proj,
                             &L->up_proj, &L->down_proj, &L->router_proj, &L->exp_gate,
                             &L->exp_up, &L->exp_down, &L->ple_gate, &L->ple_proj};
    for (size_t j = 0; j < sizeof ls / sizeof ls[0]; j++)
      if (ls[j]->present) fn(ls[j], ctx);
  }
}

typedef struct {
  const mx_model *m;
  mx_model_stats *s;
} stats_ctx;

static void count_linear(const mx_linear *l, void *vctx) {
  stats_ctx *c = vctx;
  const accel_spec *sp = &l->aw.spec;
  uint64_t slabs = sp->experts > 0 ? (uint64_t)sp->experts : 1;
  uint64_t bytes = accel_weight_bytes(sp);
  c->s->params += slabs * (uint64_t)sp->rows * (uint64_t)sp->cols;
  c->s->bytes_on_disk += bytes;
  const mx_model *m = c->m;
  if (l == &m->embed) {
    /* one row gathered; the whole table again as the tied output projection */
    c->s->bytes_per_token += bytes / (uint64_t)sp->rows;
    if (!m->lm_head.present) c->s->bytes_per_token += bytes;
  } else if (l == &m->embed_per_layer) {
    c->s->bytes_per_token += bytes / (uint64_t)sp->rows;
  } else if (sp->experts > 0) {
    c->s->bytes_per_token += bytes / slabs * (uint64_t)m->cfg.top_k_experts;
  } else {
    c->s->bytes_per_token += bytes;
  }
}

void mx_model_stats_compute(const mx_model *m, mx_model_stats *s) {
  memset(s, 0, sizeof *s);
  stats_ctx c = {m, s};
  mx_model_visit_linears(m, count_linear, &c);
  /* float vectors: norms etc. (counted once, read every token) */
  for (int i = 0; i < m->n_layers; i++) {
    const mx_layer *L = &m->layers[i];
    uint64_t v = (uint64_t)(L->input_norm.n + L->post_attn_norm.n + L->pre_ffw_norm.n +
                            L->post_ffw_norm.n + L->q_norm.n + L->k_norm.n);
    s->params += v;
  }
  s->params += (uint64_t)m->final_norm.n;
}

static void spec_label(const accel_spec *s, char *buf, size_t n) {
  if (s->mode == ACCEL_MODE_DENSE)
    snprintf(buf, n, "%s", s->dense_dtype == ACCEL_BF16 ? "bf16" : s->dense_dtype == ACCEL_F16 ? "f16" : "f32");
  else if (s->mode == ACCEL_MODE_AFFINE)
    snprintf(buf, n, "affine %d-bit g%d", s->bits, s->group_size);
  else
    snprintf(buf, n, "%s", accel_mode_name(s->mode));
}

void mx_model_quant_label(const mx_model *m, char *buf, size_t n) {
  /* the format of the most bytes among the decoder's matrices */
  char best[48] = "", cur[48];
  uint64_t best_bytes = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const mx_linear *l = &m->layers[i].down_proj;
    if (!l->present) continue;
    spec_label(&l->aw.spec, cur, sizeof cur);
    uint64_t b = 0;
    for (int j = 0; j < m->n_layers; j++) {
      char other[48];
      const mx_linear *o = &m->layers[j].down_proj;
      if (!o->present) continue;
      spec_label(&o->aw.spec, other, sizeof other);
      if (!strcmp(other, cur)) b += accel_weight_bytes(&o->aw.spec);
    }
    if (b > best_bytes) {
      best_bytes = b;
      snprintf(best, sizeof best, "%s", cur);
    }
  }
  if (!best[0]) spec_label(&m->embed.aw.spec, best, sizeof best);
  snprintf(buf, n, "%s", best);
}
