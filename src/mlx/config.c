/* config.json parsing for Gemma 3 / Gemma 4 (see config.h). Semantics follow mlx-lm 0.32
 * (gemma3_text.py, gemma3.py, gemma4_text.py, gemma4.py, utils.py load_model) and, where mlx-lm
 * has no opinion, transformers 5 (per_layer_config, Gemma 3 rope_parameters). */
#include "mlx/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/bf16.h"
#include "base/error.h"

/* Upper bounds that keep every product the model code forms (heads·head_dim, layers·PLE, …)
 * far inside int range, so a hostile config cannot cause overflow downstream. */
#define MAX_DIM (1 << 20)
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 4096
#define MAX_VOCAB (1 << 24)
#define MAX_EXPERTS 4096

typedef struct pctx {
  const char *path;   /* file name for messages */
  const char *prefix; /* "" or "text_config." */
  mlxrt_error *err;
} pctx;

/* ---- JSON access ----------------------------------------------------------------------- */

/* Python's json keeps the last of duplicate keys; so do we. */
static const cJSON *jget(const cJSON *obj, const char *key) {
  const cJSON *found = NULL;
  if (!cJSON_IsObject(obj)) return NULL;
  for (const cJSON *c = obj->child; c; c = c->next)
    if (c->string && strcmp(c->string, key) == 0) found = c;
  return found;
}

/* A short rendering of a value for messages ("abc" with quotes, 1.5, [..], {..}). */
static void show(const cJSON *v, char *buf, size_t n) {
  if (!v) {
    snprintf(buf, n, "nothing");
    return;
  }
  if (cJSON_IsArray(v)) {
    snprintf(buf, n, "an array");
    return;
  }
  if (cJSON_IsObject(v)) {
    snprintf(buf, n, "an object");
    return;
  }
  if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
    /* cJSON prints an overflowed number (1e999) as null: say what it is */
    snprintf(buf, n, "a number that is not finite (it overflows a double)");
    return;
  }
  char *s = cJSON_PrintUnformatted(v);
  if (!s) {
    snprintf(buf, n, "?");
    return;
  }
  if (strlen(s) > 48) snprintf(buf, n, "%.45s...", s);
  else snprintf(buf, n, "%s", s);
  cJSON_free(s);
}

static int bad(pctx *c, const char *field, const char *expected, const cJSON *v) {
  char got[64];
  show(v, got, sizeof got);
  return mx_fail(c->err, "%s: field '%s%s' must be %s, got %s", c->path, c->prefix, field,
                 expected, got);
}

/* Integer field. Absent → def; null → error unless null_ok (then *out = null_val). */
static int get_int(pctx *c, const cJSON *obj, const char *key, int def, int lo, int hi,
                   int null_ok, int null_val, int *out) {
  const cJSON *v = jget(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (cJSON_IsNull(v) && null_ok) {
    *out = null_val;
    return 0;
  }
  char expected[96];
  if (lo == 1) snprintf(expected, sizeof expected, "a positive integer");
  else if (lo == 0) snprintf(expected, sizeof expected, "a non-negative integer");
  else if (lo == INT_MIN) snprintf(expected, sizeof expected, "an integer");
  else snprintf(expected, sizeof expected, "an integer of at least %d", lo);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo)
    return bad(c, key, expected, v);
  double d = v->valuedouble;
  if (d > hi) {
    size_t l = strlen(expected);
    snprintf(expected + l, sizeof expected - l, " at most %d", hi);
    return bad(c, key, expected, v);
  }
  *out = (int)d;
  return 0;
}

/* Finite float field (> 0 when positive). Absent → def; null → error unless null_ok. */
static int get_num(pctx *c, const cJSON *obj, const char *key, double def, int positive,
                   int null_ok, double null_val, double *out) {
  const cJSON *v = jget(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (cJSON_IsNull(v) && null_ok) {
    *out = null_val;
    return 0;
  }
  const char *expected = positive ? "a positive finite number" : "a finite number";
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || (positive && !(v->valuedouble > 0)))
    return bad(c, key, expected, v);
  *out = v->valuedouble;
  return 0;
}

static int get_bool(pctx *c, const cJSON *obj, const char *key, int def, int *out) {
  const cJSON *v = jget(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(v)) return bad(c, key, "true or false", v);
  *out = cJSON_IsTrue(v);
  return 0;
}

/* ---- model type ------------------------------------------------------------------------ */

typedef struct mtype {
  const char *name;
  mx_family family;
  int nested;
  int assistant;
} mtype;

static const mtype MODEL_TYPES[] = {
    {"gemma3_text", MX_GEMMA3, 0, 0},     {"gemma3", MX_GEMMA3, 1, 0},
    {"gemma4_text", MX_GEMMA4, 0, 0},     {"gemma4", MX_GEMMA4, 1, 0},
    {"gemma4_unified", MX_GEMMA4, 1, 0},  {"gemma4_unified_text", MX_GEMMA4, 0, 0},
    {"gemma4_assistant", MX_GEMMA4, 1, 1},
};

/* ---- RoPE ------------------------------------------------------------------------------ */

/* One rope dict as mlx-lm's initialize_rope reads it: "type" (if truthy) or "rope_type". */
static int parse_rope_dict(pctx *c, const cJSON *d, const char *name, double def_theta,
                           mx_rope *r) {
  char field[96];
  r->kind = MX_ROPE_DEFAULT;
  r->theta = def_theta;
  r->factor = 1.0;
  r->partial_rotary = 1.0;
  if (!d || cJSON_IsNull(d)) return 0;
  if (!cJSON_IsObject(d)) return bad(c, name, "an object", d);
  const cJSON *t = jget(d, "type");
  if (!t || cJSON_IsNull(t) || (cJSON_IsString(t) && !t->valuestring[0])) t = jget(d, "rope_type");
  const char *type = "default";
  if (t && !cJSON_IsNull(t)) {
    snprintf(field, sizeof field, "%s.rope_type", name);
    if (!cJSON_IsString(t)) return bad(c, field, "a string", t);
    type = t->valuestring;
  }
  pctx sub = *c;
  char pfx[128];
  snprintf(pfx, sizeof pfx, "%s%s.", c->prefix, name);
  sub.prefix = pfx;
  if (get_num(&sub, d, "rope_theta", def_theta, 1, 0, 0, &r->theta)) return -1;
  if (strcmp(type, "default") == 0) {
    double prf;
    if (get_num(&sub, d, "partial_rotary_factor", 1.0, 1, 1, 1.0, &prf)) return -1;
    if (prf != 1.0)
      return mx_fail(c->err,
                     "%s: field '%s%s.partial_rotary_factor' is %g, but rope_type \"default\" "
                     "rotates every dimension (use \"proportional\")",
                     c->path, c->prefix, name, prf);
  } else if (strcmp(type, "linear") == 0) {
    if (!jget(d, "factor"))
      return mx_fail(c->err, "%s: field '%s%s.factor' is missing (rope_type \"linear\" needs it)",
                     c->path, c->prefix, name);
    r->kind = MX_ROPE_LINEAR;
    if (get_num(&sub, d, "factor", 1.0, 1, 0, 0, &r->factor)) return -1;
  } else if (strcmp(type, "proportional") == 0) {
    r->kind = MX_ROPE_PROPORTIONAL;
    if (get_num(&sub, d, "factor", 1.0, 1, 1, 1.0, &r->factor)) return -1;
    if (get_num(&sub, d, "partial_rotary_factor", 1.0, 1, 1, 1.0, &r->partial_rotary)) return -1;
    if (r->partial_rotary > 1.0)
      return bad(&sub, "partial_rotary_factor", "in (0, 1]", jget(d, "partial_rotary_factor"));
  } else {
    return mx_fail(c->err,
                   "%s: field '%s%s' has unsupported rope_type \"%.40s\" (expected default, "
                   "linear or proportional)",
                   c->path, c->prefix, name, type);
  }
  return 0;
}

/* Gemma 4: rope_parameters keyed by layer type; a missing type gets mlx-lm's {} (θ 1e4). */
static int parse_rope_g4(pctx *c, const cJSON *tc, mx_config *cfg) {
  const cJSON *rp = jget(tc, "rope_parameters");
  if (!rp || cJSON_IsNull(rp)) {
    cfg->rope_sliding = (mx_rope){MX_ROPE_DEFAULT, 10000.0, 1.0, 1.0};
    cfg->rope_full = (mx_rope){MX_ROPE_PROPORTIONAL, 1000000.0, 1.0, 0.25};
    return 0;
  }
  if (!cJSON_IsObject(rp)) return bad(c, "rope_parameters", "an object keyed by layer type", rp);
  if (jget(rp, "rope_theta") || jget(rp, "rope_type"))
    return mx_fail(c->err,
                   "%s: field '%srope_parameters' must be keyed by layer type "
                   "(sliding_attention / full_attention), not a single rope dict",
                   c->path, c->prefix);
  if (parse_rope_dict(c, jget(rp, "sliding_attention"), "rope_parameters.sliding_attention",
                      10000.0, &cfg->rope_sliding))
    return -1;
  return parse_rope_dict(c, jget(rp, "full_attention"), "rope_parameters.full_attention",
                         10000.0, &cfg->rope_full);
}

/* Gemma 3: mlx-lm reads rope_theta (global), rope_local_base_freq (sliding) and rope_scaling
 * (global only). transformers 5 may save rope_parameters keyed by layer type instead; it is
 * used for whatever the legacy keys leave unsaid. */
static int parse_rope_g3(pctx *c, const cJSON *tc, mx_config *cfg) {
  const cJSON *rp = jget(tc, "rope_parameters");
  if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp))
    return bad(c, "rope_parameters", "an object keyed by layer type", rp);
  if (rp && cJSON_IsNull(rp)) rp = NULL;
  if (parse_rope_dict(c, rp ? jget(rp, "sliding_attention") : NULL,
                      "rope_parameters.sliding_attention", 10000.0, &cfg->rope_sliding))
    return -1;
  if (parse_rope_dict(c, rp ? jget(rp, "full_attention") : NULL, "rope_parameters.full_attention",
                      1000000.0, &cfg->rope_full))
    return -1;
  if (get_num(c, tc, "rope_local_base_freq", cfg->rope_sliding.theta, 1, 0, 0,
              &cfg->rope_sliding.theta))
    return -1;
  double theta;
  if (get_num(c, tc, "rope_theta", cfg->rope_full.theta, 1, 0, 0, &theta)) return -1;
  const cJSON *rs = jget(tc, "rope_scaling");
  if (rs) {
    if (parse_rope_dict(c, rs, "rope_scaling", theta, &cfg->rope_full)) return -1;
    /* rope_scaling never carries the base in mlx-lm; rope_theta does. */
    cfg->rope_full.theta = theta;
  } else {
    cfg->rope_full.theta = theta;
  }
  return 0;
}

/* ---- layer plan ------------------------------------------------------------------------ */

static int parse_layer_types(pctx *c, const cJSON *tc, mx_config *cfg) {
  int n = cfg->num_layers;
  const cJSON *lt = jget(tc, "layer_types");
  const cJSON *pat = jget(tc, "sliding_window_pattern");
  int def_pat = cfg->family == MX_GEMMA3 ? 6 : 5;
  if (get_int(c, tc, "sliding_window_pattern", def_pat, 1, INT_MAX, 0, 0,
              &cfg->sliding_window_pattern))
    return -1;
  int p = cfg->sliding_window_pattern;
  if (lt && !cJSON_IsNull(lt)) {
    if (!cJSON_IsArray(lt)) return bad(c, "layer_types", "an array of layer type names", lt);
    int len = cJSON_GetArraySize(lt);
    if (len != n)
      return mx_fail(c->err,
                     "%s: field '%slayer_types' has %d entries but num_hidden_layers is %d",
                     c->path, c->prefix, len, n);
    int i = 0;
    for (const cJSON *e = lt->child; e; e = e->next, i++) {
      if (cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0)
        cfg->layer_types[i] = MX_LAYER_SLIDING;
      else if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0)
        cfg->layer_types[i] = MX_LAYER_FULL;
      else {
        char got[64];
        show(e, got, sizeof got);
        return mx_fail(c->err,
                       "%s: field '%slayer_types[%d]' is an unknown layer type %s (expected "
                       "\"sliding_attention\" or \"full_attention\")",
                       c->path, c->prefix, i, got);
      }
    }
    /* mlx-lm's Gemma 3 uses only the pattern; refuse a config where the two disagree. */
    if (cfg->family == MX_GEMMA3 && pat) {
      for (i = 0; i < n; i++) {
        mx_layer_type want = (i + 1) % p == 0 ? MX_LAYER_FULL : MX_LAYER_SLIDING;
        if (cfg->layer_types[i] != want)
          return mx_fail(c->err,
                         "%s: field '%slayer_types[%d]' is %s but sliding_window_pattern %d "
                         "makes it %s",
                         c->path, c->prefix, i, mx_layer_type_name(cfg->layer_types[i]), p,
                         mx_layer_type_name(want));
      }
    }
    return 0;
  }
  for (int i = 0; i < n; i++)
    cfg->layer_types[i] = (i + 1) % p == 0 ? MX_LAYER_FULL : MX_LAYER_SLIDING;
  return 0;
}

/* HF `per_layer_config`: {"<layer index, maybe zero-padded>": {attr: value}} overriding the
 * global attributes for that layer. transformers 5 writes it for Gemma 4 instead of
 * global_head_dim / num_global_key_value_heads. */
static int apply_per_layer_config(pctx *c, const cJSON *plc, mx_config *cfg) {
  if (!cJSON_IsObject(plc)) return bad(c, "per_layer_config", "an object keyed by layer index", plc);
  for (const cJSON *e = plc->child; e; e = e->next) {
    const char *k = e->string;
    char *end = NULL;
    long idx = -1;
    if (k && k[0] >= '0' && k[0] <= '9' && strlen(k) <= 9) idx = strtol(k, &end, 10);
    if (idx < 0 || !end || *end || idx >= cfg->num_layers)
      return mx_fail(c->err,
                     "%s: field '%sper_layer_config' has key \"%.40s\", expected a layer index "
                     "in [0, %d)",
                     c->path, c->prefix, k ? k : "", cfg->num_layers);
    char pfx[160];
    snprintf(pfx, sizeof pfx, "%sper_layer_config.%s.", c->prefix, k);
    pctx sub = *c;
    sub.prefix = pfx;
    if (!cJSON_IsObject(e)) return bad(c, "per_layer_config", "an object of objects", e);
    for (const cJSON *a = e->child; a; a = a->next) {
      const char *an = a->string ? a->string : "";
      int *dst;
      int lo = 1, hi;
      if (strcmp(an, "head_dim") == 0) dst = &cfg->layer_head_dim[idx], hi = MAX_HEAD_DIM;
      else if (strcmp(an, "num_key_value_heads") == 0) dst = &cfg->layer_kv_heads[idx], hi = MAX_HEADS;
      else if (strcmp(an, "intermediate_size") == 0) dst = &cfg->layer_intermediate[idx], hi = MAX_DIM;
      else
        return mx_fail(c->err,
                       "%s: field '%s%.40s' is not supported per layer (only head_dim, "
                       "num_key_value_heads, intermediate_size)",
                       c->path, pfx, an);
      if (get_int(&sub, e, an, 0, lo, hi, 0, 0, dst)) return -1;
    }
  }
  return 0;
}

static int derive_layers(pctx *c, const cJSON *tc, mx_config *cfg) {
  int n = cfg->num_layers;
  for (int i = 0; i < n; i++) {
    cfg->layer_head_dim[i] = cfg->head_dim;
    cfg->layer_kv_heads[i] = cfg->num_kv_heads;
    cfg->layer_intermediate[i] = cfg->intermediate_size;
    cfg->layer_kv_source[i] = i;
  }
  const cJSON *plc = jget(tc, "per_layer_config");
  if (plc && !cJSON_IsNull(plc)) {
    cfg->has_per_layer_config = 1;
    if (apply_per_layer_config(c, plc, cfg)) return -1;
    /* If the older keys are present as well they must say the same thing. */
    for (int i = 0; i < n && cfg->family == MX_GEMMA4; i++) {
      if (cfg->layer_types[i] != MX_LAYER_FULL) continue;
      if (jget(tc, "global_head_dim") && cfg->global_head_dim &&
          cfg->layer_head_dim[i] != cfg->global_head_dim)
        return mx_fail(c->err,
                       "%s: field '%sglobal_head_dim' is %d but per_layer_config gives full "
                       "layer %d head_dim %d",
                       c->path, c->prefix, cfg->global_head_dim, i, cfg->layer_head_dim[i]);
      if (cfg->attention_k_eq_v && cfg->num_global_kv_heads &&
          cfg->layer_kv_heads[i] != cfg->num_global_kv_heads)
        return mx_fail(c->err,
                       "%s: field '%snum_global_key_value_heads' is %d but per_layer_config "
                       "gives full layer %d num_key_value_heads %d",
                       c->path, c->prefix, cfg->num_global_kv_heads, i, cfg->layer_kv_heads[i]);
    }
  } else if (cfg->family == MX_GEMMA4) {
    for (int i = 0; i < n; i++) {
      if (cfg->layer_types[i] != MX_LAYER_FULL) continue;
      if (cfg->global_head_dim) cfg->layer_head_dim[i] = cfg->global_head_dim;
      if (cfg->attention_k_eq_v && cfg->num_global_kv_heads)
        cfg->layer_kv_heads[i] = cfg->num_global_kv_heads;
    }
  }

  /* KV sharing (mlx-lm previous_kvs): layers ≥ first reuse the last earlier layer of their type. */
  cfg->first_kv_shared_layer = n;
  if (cfg->assistant) { /* every layer reads the K/V of the model it drafts for */
    if (cfg->num_kv_shared_layers != n)
      return mx_fail(c->err, "%s: field '%snum_kv_shared_layers' is %d but a gemma4_assistant shares every layer (%d)",
                     c->path, c->prefix, cfg->num_kv_shared_layers, n);
    cfg->first_kv_shared_layer = 0;
    for (int j = 0; j < n; j++) cfg->layer_kv_source[j] = -1;
  } else if (cfg->num_kv_shared_layers > 0) {
    int first = n - cfg->num_kv_shared_layers;
    if (first <= 0)
      return mx_fail(c->err,
                     "%s: field '%snum_kv_shared_layers' is %d but must be less than "
                     "num_hidden_layers (%d)%s",
                     c->path, c->prefix, cfg->num_kv_shared_layers, n,
                     jget(tc, "num_kv_shared_layers") ? "" : " (20 is mlx-lm's default when absent)");
    cfg->first_kv_shared_layer = first;
    for (int j = first; j < n; j++) {
      int src = -1;
      for (int i = first - 1; i >= 0 && src < 0; i--)
        if (cfg->layer_types[i] == cfg->layer_types[j]) src = i;
      if (src < 0)
        return mx_fail(c->err,
                       "%s: KV-shared layer %d (%s) has no earlier non-shared %s layer to take "
                       "K/V from (num_kv_shared_layers %d)",
                       c->path, j, mx_layer_type_name(cfg->layer_types[j]),
                       mx_layer_type_name(cfg->layer_types[j]), cfg->num_kv_shared_layers);
      cfg->layer_kv_source[j] = src;
      if (cfg->use_double_wide_mlp) cfg->layer_intermediate[j] *= 2;
    }
  }

  for (int i = 0; i < n; i++) {
    int d = cfg->layer_head_dim[i], kv = cfg->layer_kv_heads[i];
    if (d % 2)
      return mx_fail(c->err, "%s: layer %d head_dim %d must be even (RoPE pairs dimensions)",
                     c->path, i, d);
    if (cfg->num_heads % kv)
      return mx_fail(c->err,
                     "%s: num_attention_heads (%d) is not divisible by the %d key/value heads "
                     "of layer %d (%s)",
                     c->path, cfg->num_heads, kv, i, mx_layer_type_name(cfg->layer_types[i]));
    int s = cfg->layer_kv_source[i];
    if (s >= 0 && s != i && (cfg->layer_head_dim[s] != d || cfg->layer_kv_heads[s] != kv))
      return mx_fail(c->err,
                     "%s: KV-shared layer %d (head_dim %d, %d KV heads) cannot reuse layer %d "
                     "(head_dim %d, %d KV heads)",
                     c->path, i, d, kv, s, cfg->layer_head_dim[s], cfg->layer_kv_heads[s]);
    cfg->layer_k_eq_v[i] =
        cfg->attention_k_eq_v && cfg->layer_types[i] == MX_LAYER_FULL && s == i;
    const mx_rope *r = mx_config_layer_rope(cfg, i);
    int rotated = r->kind == MX_ROPE_PROPORTIONAL ? (int)((double)d * r->partial_rotary) : d;
    cfg->layer_rope_pairs[i] = (rotated + 1) / 2;
  }
  return 0;
}

/* ---- token ids ------------------------------------------------------------------------- */

static int add_eos(pctx *c, mx_config *cfg, const cJSON *v, const char *field) {
  char expected[64];
  snprintf(expected, sizeof expected, "a token id in [0, %d)", cfg->vocab_size);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
      v->valuedouble >= cfg->vocab_size)
    return bad(c, field, expected, v);
  int id = (int)v->valuedouble;
  for (int i = 0; i < cfg->n_eos; i++)
    if (cfg->eos_token_ids[i] == id) return 0;
  if (cfg->n_eos >= MX_MAX_EOS)
    return mx_fail(c->err, "%s: field '%s%s' lists more than %d eos ids", c->path, c->prefix,
                   field, MX_MAX_EOS);
  cfg->eos_token_ids[cfg->n_eos++] = id;
  return 0;
}

static int parse_eos(pctx *c, mx_config *cfg, const cJSON *v) {
  if (!v || cJSON_IsNull(v)) return 0;
  if (cJSON_IsArray(v)) {
    for (const cJSON *e = v->child; e; e = e->next)
      if (add_eos(c, cfg, e, "eos_token_id")) return -1;
    return 0;
  }
  return add_eos(c, cfg, v, "eos_token_id");
}

/* ---- quantization ---------------------------------------------------------------------- */

static int mode_from_name(const char *s, accel_mode *m) {
  static const struct { const char *n; accel_mode m; } T[] = {
      {"affine", ACCEL_MODE_AFFINE}, {"nvfp4", ACCEL_MODE_NVFP4},
      {"mxfp4", ACCEL_MODE_MXFP4},   {"mxfp8", ACCEL_MODE_MXFP8}};
  for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
    if (strcmp(s, T[i].n) == 0) return *m = T[i].m, 0;
  return -1;
}

static void mode_defaults(accel_mode m, int *group, int *bits) {
  switch (m) {
  case ACCEL_MODE_NVFP4: *group = 16, *bits = 4; break;
  case ACCEL_MODE_MXFP4: *group = 32, *bits = 4; break;
  case ACCEL_MODE_MXFP8: *group = 32, *bits = 8; break;
  default: *group = 64, *bits = 4; break;
  }
}

int mx_qspec_check(const mx_qspec *q, const char *what, mlxrt_error *err) {
  int b = q->bits, g = q->group_size;
  switch (q->mode) {
  case ACCEL_MODE_AFFINE:
    if (!(b >= 2 && b <= 8 && b != 7))
      return mx_fail(err, "%s: affine bits must be 2, 3, 4, 5, 6 or 8, got %d", what, b);
    if (g != 32 && g != 64 && g != 128)
      return mx_fail(err, "%s: affine group_size must be 32, 64 or 128, got %d", what, g);
    return 0;
  case ACCEL_MODE_NVFP4:
    if (b != 4 || g != 16)
      return mx_fail(err, "%s: nvfp4 needs bits 4 and group_size 16, got bits %d group_size %d",
                     what, b, g);
    return 0;
  case ACCEL_MODE_MXFP4:
    if (b != 4 || g != 32)
      return mx_fail(err, "%s: mxfp4 needs bits 4 and group_size 32, got bits %d group_size %d",
                     what, b, g);
    return 0;
  case ACCEL_MODE_MXFP8:
    if (b != 8 || g != 32)
      return mx_fail(err, "%s: mxfp8 needs bits 8 and group_size 32, got bits %d group_size %d",
                     what, b, g);
    return 0;
  default:
    return mx_fail(err, "%s: not a quantization mode", what);
  }
}

/* group_size / bits: null (or absent when !required) → the mode's default, as mlx does. */
static int q_int(pctx *c, const cJSON *obj, const char *key, int required, int def, int *out) {
  const cJSON *v = jget(obj, key);
  if (!v) {
    if (required)
      return mx_fail(c->err, "%s: field '%s%s' is missing", c->path, c->prefix, key);
    *out = def;
    return 0;
  }
  return get_int(c, obj, key, def, 1, 1024, 1, def, out);
}

/* A spec dict: {"group_size", "bits", "mode"}; mode absent → affine (even under an nvfp4
 * default), as mlx-lm's to_quantized(**dict) does. */
static int parse_qspec(pctx *c, const cJSON *d, int top, const char *name, mx_qspec *q) {
  const cJSON *m = jget(d, "mode");
  q->quantized = 1;
  q->mode = ACCEL_MODE_AFFINE;
  if (m && !cJSON_IsNull(m)) {
    if (!cJSON_IsString(m) || mode_from_name(m->valuestring, &q->mode))
      return bad(c, "mode", "one of \"affine\", \"nvfp4\", \"mxfp4\", \"mxfp8\"", m);
  }
  int dg, db;
  mode_defaults(q->mode, &dg, &db);
  if (q_int(c, d, "group_size", top, dg, &q->group_size)) return -1;
  if (q_int(c, d, "bits", top, db, &q->bits)) return -1;
  char what[600];
  snprintf(what, sizeof what, "%s: field '%s'", c->path, name);
  return mx_qspec_check(q, what, c->err);
}

static int add_override(pctx *c, mx_config *cfg, const char *path, mx_qspec spec, int *cap) {
  if (cfg->noverrides == *cap) {
    int ncap = *cap ? *cap * 2 : 16;
    mx_qoverride *n = realloc(cfg->overrides, (size_t)ncap * sizeof *n);
    if (!n) return mx_fail(c->err, "%s: out of memory for quantization overrides", c->path);
    cfg->overrides = n;
    *cap = ncap;
  }
  char *p = mx_strdup(path, c->err);
  if (!p) return -1;
  cfg->overrides[cfg->noverrides].path = p;
  cfg->overrides[cfg->noverrides].spec = spec;
  cfg->noverrides++;
  return 0;
}

/* The mlx "quantization" dict (or a plain copy of it under quantization_config). */
static int parse_quantization(pctx *c, const cJSON *q, const char *name, mx_config *cfg) {
  char pfx[64];
  snprintf(pfx, sizeof pfx, "%s.", name);
  pctx qc = *c;
  qc.prefix = pfx;
  if (!cJSON_IsObject(q)) {
    pctx top = *c;
    top.prefix = "";
    return bad(&top, name, "an object", q);
  }
  if (parse_qspec(&qc, q, 1, name, &cfg->qdefault)) return -1;
  int cap = 0;
  for (const cJSON *e = q->child; e; e = e->next) {
    const char *k = e->string ? e->string : "";
    if (!strcmp(k, "group_size") || !strcmp(k, "bits") || !strcmp(k, "mode")) continue;
    mx_qspec spec = {0};
    if (cJSON_IsObject(e)) {
      char ename[560], epfx[564];
      snprintf(ename, sizeof ename, "%s.%.500s", name, k);
      snprintf(epfx, sizeof epfx, "%s.", ename);
      pctx ec = *c;
      ec.prefix = epfx;
      if (parse_qspec(&ec, e, 0, ename, &spec)) return -1;
    } else if (cJSON_IsTrue(e)) {
      spec = cfg->qdefault;
    } else if (cJSON_IsFalse(e)) {
      spec.quantized = 0;
    } else if (strchr(k, '.')) {
      return mx_fail(c->err, "%s: field '%s.%.200s' must be an object, true or false", c->path,
                     name, k);
    } else {
      continue; /* unrelated scalar metadata */
    }
    if (add_override(c, cfg, k, spec, &cap)) return -1;
  }
  cfg->has_quantization = 1;
  return 0;
}

static void set_q(mx_config *cfg, accel_mode m, int group, int bits) {
  cfg->qdefault = (mx_qspec){1, m, bits, group};
  cfg->has_quantization = 1;
}

/* Legacy `quantization_config`, read only when `quantization` is absent (mlx-lm load_model). */
static int parse_quantization_config(pctx *c, const cJSON *qc, mx_config *cfg) {
  pctx top = *c;
  top.prefix = "";
  if (!cJSON_IsObject(qc)) return bad(&top, "quantization_config", "an object", qc);
  const cJSON *qm = jget(qc, "quant_method");
  if (!qm || cJSON_IsNull(qm)) {
    if (jget(qc, "group_size") && jget(qc, "bits"))
      return parse_quantization(c, qc, "quantization_config", cfg);
    return mx_fail(c->err,
                   "%s: field 'quantization_config' has neither quant_method nor "
                   "group_size and bits",
                   c->path);
  }
  if (!cJSON_IsString(qm)) return bad(&top, "quantization_config.quant_method", "a string", qm);
  const char *m = qm->valuestring;
  if (!strcmp(m, "mxfp4")) return set_q(cfg, ACCEL_MODE_MXFP4, 32, 4), 0;
  if (!strcmp(m, "mxfp8")) return set_q(cfg, ACCEL_MODE_MXFP8, 32, 8), 0;
  if (!strcmp(m, "fp8")) {
    const cJSON *sf = jget(qc, "scale_fmt"), *wb = jget(qc, "weight_block_size");
    if (cJSON_IsString(sf) && !strcmp(sf->valuestring, "ue8m0") && cJSON_IsArray(wb) &&
        cJSON_GetArraySize(wb) == 2 && cJSON_IsNumber(wb->child) &&
        wb->child->valuedouble == 32 && cJSON_IsNumber(wb->child->next) &&
        wb->child->next->valuedouble == 32)
      return set_q(cfg, ACCEL_MODE_MXFP8, 32, 8), 0;
    return mx_fail(c->err,
                   "%s: quantization_config quant_method \"fp8\" is supported only with "
                   "scale_fmt \"ue8m0\" and weight_block_size [32, 32] (mxfp8)",
                   c->path);
  }
  if (!strcmp(m, "compressed-tensors")) {
    const cJSON *f = jget(qc, "format");
    const char *fs = cJSON_IsString(f) ? f->valuestring : "";
    if (!strcmp(fs, "nvfp4-pack-quantized")) return set_q(cfg, ACCEL_MODE_NVFP4, 16, 4), 0;
    if (!strcmp(fs, "mxfp4-pack-quantized")) return set_q(cfg, ACCEL_MODE_MXFP4, 32, 4), 0;
    if (!strcmp(fs, "pack-quantized")) return set_q(cfg, ACCEL_MODE_AFFINE, 32, 4), 0;
    char got[64];
    show(f, got, sizeof got);
    return mx_fail(c->err,
                   "%s: field 'quantization_config.format' must be \"nvfp4-pack-quantized\", "
                   "\"mxfp4-pack-quantized\" or \"pack-quantized\" for compressed-tensors, got %s",
                   c->path, got);
  }
  if (!strcmp(m, "modelopt")) {
    const cJSON *s = jget(qc, "quantization");
    if (!cJSON_IsObject(s)) s = qc;
    const cJSON *algo = jget(s, "quant_algo");
    if (!cJSON_IsString(algo) || strcmp(algo->valuestring, "NVFP4"))
      return mx_fail(c->err, "%s: quantization_config modelopt quant_algo must be \"NVFP4\"",
                     c->path);
    pctx sc = top;
    sc.prefix = "quantization_config.";
    int g;
    if (get_int(&sc, s, "group_size", 16, 1, 1024, 1, 16, &g)) return -1;
    set_q(cfg, ACCEL_MODE_NVFP4, g, 4);
    return mx_qspec_check(&cfg->qdefault, "quantization_config (modelopt)", c->err) ? -1 : 0;
  }
  return mx_fail(c->err,
                 "%s: quantization_config quant_method \"%.40s\" is not supported (expected "
                 "mxfp4, mxfp8, fp8 ue8m0, compressed-tensors or modelopt NVFP4; awq/gptq/bitnet "
                 "need repacking)",
                 c->path, m);
}

/* ---- main parse ------------------------------------------------------------------------ */

static int parse_text(pctx *c, const cJSON *root, const cJSON *tc, mx_config *cfg) {
  int g4 = cfg->family == MX_GEMMA4;
  /* mlx-lm ModelArgs defaults; the nested wrappers change vocab and head counts. */
  int def_vocab = cfg->nested ? (g4 ? 262144 : 262208) : 262144;
  int def_heads = cfg->nested ? 8 : (g4 ? 8 : 4);
  int def_kv = cfg->nested ? (g4 ? 1 : 4) : 1;
  if (get_int(c, tc, "hidden_size", g4 ? 1536 : 1152, 1, MAX_DIM, 0, 0, &cfg->hidden_size) ||
      get_int(c, tc, "num_hidden_layers", g4 ? 35 : 26, 1, INT_MAX, 0, 0, &cfg->num_layers) ||
      get_int(c, tc, "intermediate_size", g4 ? 6144 : 6912, 1, MAX_DIM, 0, 0,
              &cfg->intermediate_size) ||
      get_int(c, tc, "num_attention_heads", def_heads, 1, MAX_HEADS, 0, 0, &cfg->num_heads) ||
      get_int(c, tc, "num_key_value_heads", def_kv, 1, MAX_HEADS, 0, 0, &cfg->num_kv_heads) ||
      get_int(c, tc, "head_dim", 256, 1, MAX_HEAD_DIM, 0, 0, &cfg->head_dim) ||
      get_int(c, tc, "sliding_window", 512, 1, INT_MAX, 0, 0, &cfg->sliding_window) ||
      get_int(c, tc, "max_position_embeddings", g4 ? 131072 : 32768, 1, INT_MAX, 0, 0,
              &cfg->max_position_embeddings) ||
      get_num(c, tc, "rms_norm_eps", 1e-6, 1, 0, 0, &cfg->rms_norm_eps))
    return -1;
  if (cfg->nested && !cfg->assistant) {
    /* gemma3.py / gemma4.py overwrite text_config.vocab_size with the top-level value. */
    pctx top = *c;
    top.prefix = "";
    if (get_int(&top, root, "vocab_size", def_vocab, 1, MAX_VOCAB, 0, 0, &cfg->vocab_size))
      return -1;
  } else if (get_int(c, tc, "vocab_size", def_vocab, 1, MAX_VOCAB, 0, 0, &cfg->vocab_size)) {
    return -1;
  }
  if (cfg->num_layers > MX_MAX_LAYERS)
    return mx_fail(c->err, "%s: field '%snum_hidden_layers' is %d, more layers than supported (%d)",
                   c->path, c->prefix, cfg->num_layers, MX_MAX_LAYERS);
  if (get_bool(c, tc, "tie_word_embeddings", 1, &cfg->tie_word_embeddings)) return -1;
  cfg->embed_scale = mx_round_bf16(sqrtf((float)cfg->hidden_size));

  if (!g4) {
    if (get_num(c, tc, "query_pre_attn_scalar", 256, 1, 0, 0, &cfg->query_pre_attn_scalar))
      return -1;
    cfg->attn_scale = 1.0 / sqrt(cfg->query_pre_attn_scalar);
    cfg->norm_plus_one = 1;
    if (parse_layer_types(c, tc, cfg) || parse_rope_g3(c, tc, cfg)) return -1;
  } else {
    cfg->attn_scale = 1.0;
    cfg->has_layer_scalar = 1;
    double cap;
    if (get_num(c, tc, "final_logit_softcapping", 30.0, 1, 1, 0.0, &cap)) return -1;
    cfg->final_logit_softcap = cap;
    if (get_int(c, tc, "global_head_dim", 512, 1, MAX_HEAD_DIM, 1, 0, &cfg->global_head_dim) ||
        get_int(c, tc, "num_global_key_value_heads", 0, 1, MAX_HEADS, 1, 0,
                &cfg->num_global_kv_heads) ||
        get_bool(c, tc, "attention_k_eq_v", 0, &cfg->attention_k_eq_v) ||
        get_bool(c, tc, "use_double_wide_mlp", 1, &cfg->use_double_wide_mlp) ||
        get_int(c, tc, "num_kv_shared_layers", 20, 0, INT_MAX, 0, 0,
                &cfg->num_kv_shared_layers) ||
        get_int(c, tc, "hidden_size_per_layer_input", 256, 0, 65536, 1, 0,
                &cfg->hidden_size_per_layer_input) ||
        get_int(c, tc, "vocab_size_per_layer_input", 262144, 0, MAX_VOCAB, 0, 0,
                &cfg->vocab_size_per_layer_input) ||
        get_bool(c, tc, "enable_moe_block", 0, &cfg->enable_moe) ||
        get_bool(c, tc, "rope_traditional", 0, &cfg->rope_traditional))
      return -1;
    if (cfg->hidden_size_per_layer_input > 0 && cfg->vocab_size_per_layer_input == 0)
      return mx_fail(c->err, "%s: field '%svocab_size_per_layer_input' is 0 but hidden_size_per_layer_input is %d",
                     c->path, c->prefix, cfg->hidden_size_per_layer_input);
    if (cfg->assistant && !jget(tc, "num_kv_shared_layers")) cfg->num_kv_shared_layers = cfg->num_layers;
    if (cfg->assistant && (cfg->hidden_size_per_layer_input || cfg->enable_moe || cfg->use_double_wide_mlp))
      return mx_fail(c->err, "%s: a gemma4_assistant has no per-layer inputs, MoE block or double-wide MLP "
                             "(hidden_size_per_layer_input %d, enable_moe_block %d, use_double_wide_mlp %d)",
                     c->path, cfg->hidden_size_per_layer_input, cfg->enable_moe, cfg->use_double_wide_mlp);
    if (cfg->enable_moe) {
      const char *k[3] = {"num_experts", "top_k_experts", "moe_intermediate_size"};
      int *dst[3] = {&cfg->num_experts, &cfg->top_k_experts, &cfg->moe_intermediate_size};
      int hi[3] = {MAX_EXPERTS, MAX_EXPERTS, MAX_DIM};
      for (int i = 0; i < 3; i++) {
        const cJSON *v = jget(tc, k[i]);
        if (!v || cJSON_IsNull(v))
          return mx_fail(c->err, "%s: field '%s%s' is missing (enable_moe_block is true)",
                         c->path, c->prefix, k[i]);
        if (get_int(c, tc, k[i], 0, 1, hi[i], 0, 0, dst[i])) return -1;
      }
      if (cfg->top_k_experts > cfg->num_experts)
        return mx_fail(c->err, "%s: field '%stop_k_experts' (%d) exceeds num_experts (%d)",
                       c->path, c->prefix, cfg->top_k_experts, cfg->num_experts);
    }
    if (parse_layer_types(c, tc, cfg) || parse_rope_g4(c, tc, cfg)) return -1;
  }
  return derive_layers(c, tc, cfg);
}

/* transformers' Gemma4AssistantConfig: the target's width, and the ordered-embedding head
 * (num_centroids clusters of vocab / num_centroids tokens, the top centroid_intermediate_top_k
 * scored). Defaults are transformers'. */
static int parse_assistant(pctx *c, const cJSON *root, mx_config *cfg) {
  pctx top = *c;
  top.prefix = "";
  const cJSON *b = jget(root, "backbone_hidden_size");
  if (!b) return mx_fail(c->err, "%s: field 'backbone_hidden_size' is missing (the width of the model it drafts for)", c->path);
  if (get_int(&top, root, "backbone_hidden_size", 0, 1, MAX_DIM, 0, 0, &cfg->backbone_hidden_size) ||
      get_bool(&top, root, "use_ordered_embeddings", 0, &cfg->use_ordered_embeddings) ||
      get_int(&top, root, "num_centroids", 2048, 1, MAX_VOCAB, 0, 0, &cfg->num_centroids) ||
      get_int(&top, root, "centroid_intermediate_top_k", 32, 1, MAX_VOCAB, 0, 0, &cfg->centroid_top_k))
    return -1;
  if (cfg->use_ordered_embeddings) {
    if (cfg->vocab_size % cfg->num_centroids)
      return mx_fail(c->err, "%s: field 'num_centroids' is %d, which does not divide the vocabulary of %d", c->path,
                     cfg->num_centroids, cfg->vocab_size);
    if (cfg->centroid_top_k > cfg->num_centroids)
      return mx_fail(c->err, "%s: field 'centroid_intermediate_top_k' (%d) exceeds num_centroids (%d)", c->path,
                     cfg->centroid_top_k, cfg->num_centroids);
  }
  return 0;
}

static int parse_root(const cJSON *root, pctx *c, mx_config *cfg) {
  if (!cJSON_IsObject(root)) return mx_fail(c->err, "%s: top level must be a JSON object", c->path);
  const cJSON *mt = jget(root, "model_type");
  if (!mt) return mx_fail(c->err, "%s: field 'model_type' is missing", c->path);
  if (!cJSON_IsString(mt)) return bad(c, "model_type", "a string", mt);
  const mtype *t = NULL;
  for (size_t i = 0; i < sizeof MODEL_TYPES / sizeof MODEL_TYPES[0]; i++)
    if (strcmp(mt->valuestring, MODEL_TYPES[i].name) == 0) t = &MODEL_TYPES[i];
  if (!t)
    return mx_fail(c->err,
                   "%s: unknown model_type \"%.60s\" (expected gemma3_text, gemma3, gemma4_text, "
                   "gemma4, gemma4_unified or gemma4_assistant)",
                   c->path, mt->valuestring);
  snprintf(cfg->model_type, sizeof cfg->model_type, "%s", t->name);
  cfg->family = t->family;
  cfg->nested = t->nested;
  cfg->assistant = t->assistant;

  const cJSON *tc = root;
  if (t->nested) {
    tc = jget(root, "text_config");
    static const cJSON empty = {.type = cJSON_Object};
    if (!tc || cJSON_IsNull(tc)) {
      if (t->family == MX_GEMMA3)
        return mx_fail(c->err, "%s: field 'text_config' is missing (model_type %s)", c->path,
                       t->name);
      tc = &empty; /* gemma4.py: text_config None → {} */
    }
    if (!cJSON_IsObject(tc)) return bad(c, "text_config", "an object", tc);
    c->prefix = "text_config.";
    const cJSON *tm = jget(tc, "model_type");
    if (tm && !cJSON_IsNull(tm)) {
      int ok = cJSON_IsString(tm) &&
               (t->family == MX_GEMMA3 ? !strcmp(tm->valuestring, "gemma3_text")
                                       : (!strcmp(tm->valuestring, "gemma4_text") ||
                                          !strcmp(tm->valuestring, "gemma4_unified_text")));
      if (!ok)
        return bad(c, "model_type",
                   t->family == MX_GEMMA3 ? "\"gemma3_text\""
                                          : "\"gemma4_text\" or \"gemma4_unified_text\"",
                   tm);
    }
  }
  if (parse_text(c, root, tc, cfg)) return -1;
  if (cfg->assistant && parse_assistant(c, root, cfg)) return -1;

  /* Token ids: top level first (IT checkpoints), then the text config. */
  pctx top = *c;
  top.prefix = "";
  const cJSON *tok_obj = jget(root, "eos_token_id") ? root : tc;
  pctx *tk = tok_obj == root ? &top : c;
  if (!jget(tok_obj, "eos_token_id")) cfg->eos_token_ids[cfg->n_eos++] = 1; /* Gemma <eos> */
  else if (parse_eos(tk, cfg, jget(tok_obj, "eos_token_id"))) return -1;
  tok_obj = jget(root, "bos_token_id") ? root : tc;
  tk = tok_obj == root ? &top : c;
  if (get_int(tk, tok_obj, "bos_token_id", 2, 0, cfg->vocab_size - 1, 1, -1, &cfg->bos_token_id))
    return -1;
  tok_obj = jget(root, "pad_token_id") ? root : tc;
  tk = tok_obj == root ? &top : c;
  if (get_int(tk, tok_obj, "pad_token_id", 0, INT_MIN, INT_MAX, 1, -1, &cfg->pad_token_id))
    return -1;

  if (get_bool(&top, root, "quantize_activations", 0, &cfg->quantize_activations)) return -1;
  const cJSON *q = jget(root, "quantization");
  if (q && !cJSON_IsNull(q)) {
    cfg->quant_source = MX_QSRC_QUANTIZATION;
    return parse_quantization(&top, q, "quantization", cfg);
  }
  const cJSON *qc = jget(root, "quantization_config");
  if (!qc || cJSON_IsNull(qc)) qc = jget(tc, "quantization_config");
  if (qc && !cJSON_IsNull(qc)) {
    cfg->quant_source = MX_QSRC_QUANTIZATION_CONFIG;
    return parse_quantization_config(&top, qc, cfg);
  }
  return 0;
}

int mx_config_parse(const char *json, const char *path, mx_config *cfg, mlxrt_error *err) {
  memset(cfg, 0, sizeof *cfg);
  if (!path) path = "config.json";
  if (!json) return mx_fail(err, "%s: no text", path);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
  if (!root) {
    long at = end ? (long)(end - json) : 0;
    return mx_fail(err, "%s: invalid JSON near byte %ld", path, at);
  }
  pctx c = {path, "", err};
  int rc = parse_root(root, &c, cfg);
  cJSON_Delete(root);
  if (rc) mx_config_free(cfg);
  return rc;
}

int mx_config_load(const char *dir, mx_config *cfg, mlxrt_error *err) {
  memset(cfg, 0, sizeof *cfg);
  size_t n = strlen(dir) + 32;
  char *path = mx_malloc(n, err);
  if (!path) return -1;
  snprintf(path, n, "%s/config.json", dir);
  size_t len;
  char *text = mx_read_file(path, &len, err);
  int rc = -1;
  if (!text) goto out;
  if (strlen(text) != len) {
    mx_fail(err, "%s: contains a NUL byte", path);
    goto out;
  }
  if (mx_config_parse(text, path, cfg, err)) goto out;
  free(text);
  text = NULL;

  /* generation_config.json: its eos ids join the list (mlx-lm prefers them). */
  snprintf(path, n, "%s/generation_config.json", dir);
  struct stat st;
  if (lstat(path, &st) != 0 && errno == ENOENT) {
    rc = 0;
    goto out;
  }
  text = mx_read_file(path, &len, err);
  if (!text) goto fail;
  cJSON *g = strlen(text) == len ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
  if (!g || !cJSON_IsObject(g)) {
    cJSON_Delete(g);
    mx_fail(err, "%s: not a valid JSON object", path);
    goto fail;
  }
  pctx c = {path, "", err};
  int bad_eos = parse_eos(&c, cfg, jget(g, "eos_token_id"));
  cJSON_Delete(g);
  if (bad_eos) goto fail;
  rc = 0;
  goto out;
fail:
  mx_config_free(cfg);
out:
  free(text);
  free(path);
  return rc;
}

void mx_config_free(mx_config *cfg) {
  if (!cfg) return;
  for (int i = 0; i < cfg->noverrides; i++) free(cfg->overrides[i].path);
  free(cfg->overrides);
  memset(cfg, 0, sizeof *cfg);
}

/* ---- lookups --------------------------------------------------------------------------- */

static const mx_qoverride *find_override(const mx_config *cfg, const char *p, size_t n) {
  for (int i = cfg->noverrides - 1; i >= 0; i--) /* last duplicate wins, as in Python */
    if (strlen(cfg->overrides[i].path) == n && memcmp(cfg->overrides[i].path, p, n) == 0)
      return &cfg->overrides[i];
  return NULL;
}

mx_qspec mx_config_qspec(const mx_config *cfg, const char *module_path) {
  static const char LM[] = "language_model.";
  const size_t lm = sizeof LM - 1;
  const mx_qoverride *o = find_override(cfg, module_path, strlen(module_path));
  if (!o && strncmp(module_path, LM, lm) == 0) {
    o = find_override(cfg, module_path + lm, strlen(module_path + lm));
  } else if (!o) {
    for (int i = cfg->noverrides - 1; i >= 0 && !o; i--) {
      const char *p = cfg->overrides[i].path;
      if (strncmp(p, LM, lm) == 0 && strcmp(p + lm, module_path) == 0) o = &cfg->overrides[i];
    }
  }
  if (o) return o->spec;
  mx_qspec q = cfg->qdefault;
  q.quantized = cfg->has_quantization;
  return q;
}

int mx_qspec_from_shapes(int scales_u8, int64_t in_dims, int64_t packed_cols, int64_t scales_cols,
                         const char *name, mx_qspec *out, mlxrt_error *err) {
  if (in_dims <= 0 || packed_cols <= 0 || scales_cols <= 0 || in_dims % scales_cols ||
      (packed_cols * 32) % in_dims)
    return mx_fail(err,
                   "%s: shapes fit no quantization (input features %lld, %lld packed words, "
                   "%lld scale columns)",
                   name, (long long)in_dims, (long long)packed_cols, (long long)scales_cols);
  mx_qspec q = {1, ACCEL_MODE_AFFINE, (int)((packed_cols * 32) / in_dims),
                (int)(in_dims / scales_cols)};
  if (scales_u8) {
    if (q.bits == 4 && q.group_size == 16) q.mode = ACCEL_MODE_NVFP4;
    else if (q.bits == 4 && q.group_size == 32) q.mode = ACCEL_MODE_MXFP4;
    else if (q.bits == 8 && q.group_size == 32) q.mode = ACCEL_MODE_MXFP8;
    else
      return mx_fail(err, "%s: uint8 scales with %d bits and group size %d match no fp mode",
                     name, q.bits, q.group_size);
  }
  if (mx_qspec_check(&q, name, err)) return -1;
  *out = q;
  return 0;
}

const mx_rope *mx_config_layer_rope(const mx_config *cfg, int layer) {
  return cfg->layer_types[layer] == MX_LAYER_FULL ? &cfg->rope_full : &cfg->rope_sliding;
}

const char *mx_layer_type_name(mx_layer_type t) {
  return t == MX_LAYER_FULL ? "full_attention" : "sliding_attention";
}

const char *mx_config_variant(const mx_config *cfg) {
  static const struct { mx_family f; int layers, hidden; const char *name; } V[] = {
      {MX_GEMMA3, 18, 640, "gemma3-270m"},  {MX_GEMMA3, 26, 1152, "gemma3-1b"},
      {MX_GEMMA3, 34, 2560, "gemma3-4b"},   {MX_GEMMA3, 48, 3840, "gemma3-12b"},
      {MX_GEMMA3, 62, 5376, "gemma3-27b"},  {MX_GEMMA4, 35, 1536, "gemma4-e2b"},
      {MX_GEMMA4, 42, 2560, "gemma4-e4b"},  {MX_GEMMA4, 48, 3840, "gemma4-12b"},
      {MX_GEMMA4, 30, 2816, "gemma4-26b-a4b"}, {MX_GEMMA4, 60, 5376, "gemma4-31b"},
  };
  for (size_t i = 0; i < sizeof V / sizeof V[0]; i++)
    if (V[i].f == cfg->family && V[i].layers == cfg->num_layers && V[i].hidden == cfg->hidden_size)
      return V[i].name;
  return cfg->family == MX_GEMMA3 ? "gemma3 (custom)" : "gemma4 (custom)";
}
