/* Synthetic checkpoint plan: presets with the released dimensions (gemma-architecture.md §3,
 * §10; Gemma 3 270M from its published config), the tensor list mlx-lm's gemma3_text /
 * gemma4_text models hold (flat `model.*` keys), quantized as mlx-lm does (every Linear and
 * embed_tokens whose input width divides the group; Gemma 4's router.proj at affine 8-bit g64
 * through a per-module override), sharding as mlx-lm's make_shards, and the JSON files. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "synth.h"

/* ---- presets ----------------------------------------------------------------------------- */

typedef struct sy_preset {
  const char *name;
  int g4;
  int hidden, layers, inter, heads, kv, head_dim, window, max_pos, vocab;
  /* Gemma 4 */
  int global_head_dim, global_kv; /* global_kv 0 = null (full layers keep kv) */
  int k_eq_v, pattern, ple, kv_shared, double_wide, experts, top_k, moe_inter;
  const char *bidir;              /* use_bidirectional_attention, NULL = null */
  /* Gemma 3 */
  int qpas;
  double linear_factor;           /* rope_scaling linear factor on global layers, 0 = null */
} sy_preset;

static const sy_preset PRESETS[] = {
    /* name             g4 hidden L   inter  h   kv hd   win   maxpos  vocab */
    {"gemma4-31b",      1, 5376, 60, 21504, 32, 16, 256, 1024, 262144, 262144,
     512, 4, 1, 6, 0, 0, 0, 0, 0, 0, "vision", 0, 0},
    {"gemma4-26b-a4b",  1, 2816, 30, 2112, 16, 8, 256, 1024, 262144, 262144,
     512, 2, 1, 6, 0, 0, 0, 128, 8, 704, "vision", 0, 0},
    {"gemma4-e2b",      1, 1536, 35, 6144, 8, 1, 256, 512, 131072, 262144,
     512, 0, 0, 5, 256, 20, 1, 0, 0, 0, NULL, 0, 0},
    {"gemma4-e4b",      1, 2560, 42, 10240, 8, 2, 256, 512, 131072, 262144,
     512, 0, 0, 6, 256, 18, 0, 0, 0, 0, NULL, 0, 0},
    {"gemma4-12b",      1, 3840, 48, 15360, 16, 8, 256, 1024, 131072, 262144,
     512, 1, 1, 6, 0, 0, 0, 0, 0, 0, "vision", 0, 0},
    {"gemma3-270m",     0, 640, 18, 2048, 4, 1, 256, 512, 32768, 262144,
     0, 0, 0, 6, 0, 0, 0, 0, 0, 0, NULL, 256, 0},
    {"gemma3-1b",       0, 1152, 26, 6912, 4, 1, 256, 512, 32768, 262144,
     0, 0, 0, 6, 0, 0, 0, 0, 0, 0, NULL, 256, 0},
    {"gemma3-4b",       0, 2560, 34, 10240, 8, 4, 256, 1024, 131072, 262208,
     0, 0, 0, 6, 0, 0, 0, 0, 0, 0, NULL, 256, 8.0},
    {"gemma3-12b",      0, 3840, 48, 15360, 16, 8, 256, 1024, 131072, 262208,
     0, 0, 0, 6, 0, 0, 0, 0, 0, 0, NULL, 256, 8.0},
    {"gemma3-27b",      0, 5376, 62, 21504, 32, 16, 128, 1024, 131072, 262208,
     0, 0, 0, 6, 0, 0, 0, 0, 0, 0, NULL, 168, 8.0},
};
#define NPRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

const char *mlxrt_synth_presets(void) {
  return "gemma4-31b, gemma4-26b-a4b, gemma4-e2b, gemma4-e4b, gemma4-12b, gemma3-270m, "
         "gemma3-1b, gemma3-4b, gemma3-12b, gemma3-27b";
}

/* ---- modes ------------------------------------------------------------------------------- */

typedef enum { Q_DENSE = 0, Q_AFFINE, Q_NVFP4, Q_MXFP4, Q_MXFP8 } qkind;

typedef struct qspec {
  qkind kind;
  int bits, group;
} qspec;

static const struct {
  const char *name;
  qspec q;
} MODES[] = {
    {"nvfp4", {Q_NVFP4, 4, 16}},   {"mxfp4", {Q_MXFP4, 4, 32}},    {"mxfp8", {Q_MXFP8, 8, 32}},
    {"affine4", {Q_AFFINE, 4, 64}}, {"affine8", {Q_AFFINE, 8, 64}}, {"bf16", {Q_DENSE, 16, 0}},
};

static const char *qmode_name(qkind k) {
  return k == Q_NVFP4 ? "nvfp4" : k == Q_MXFP4 ? "mxfp4" : k == Q_MXFP8 ? "mxfp8" : "affine";
}

/* Scale bytes. Uniform E2M1 codes have rms 2.93, masked E4M3 codes (exponent ≤ 7) about 0.57;
 * the scales bring the dequantized rms to ≈ 0.02. nvfp4: E4M3 subnormals m·2^−9, m = 3..6;
 * mxfp4: E8M0 2^−7 (some 2^−8); mxfp8: E8M0 2^−5 (some 2^−6). */
static const uint8_t NVFP4_SCALES[8] = {0x03, 0x04, 0x04, 0x04, 0x05, 0x05, 0x05, 0x06};
static const uint8_t MXFP4_SCALES[8] = {119, 120, 120, 120, 120, 120, 120, 120};
static const uint8_t MXFP8_SCALES[8] = {121, 122, 122, 122, 122, 122, 122, 122};

#define WEIGHT_RMS 0.02f

/* ---- hashing ----------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return mix64(h ^ mix64(seed + 0x9e3779b97f4a7c15ull));
}

/* ---- plan building ----------------------------------------------------------------------- */

typedef struct builder {
  sy_plan *p;
  const sy_preset *ps;
  qspec q;
  uint64_t seed;
  cJSON *overrides; /* per-module quantization entries, in module order */
  mlxrt_error *err;
  int oom;
} builder;

static sy_tensor *add_tensor(builder *b, const char *name, const char *dtype, int ndim,
                             const int64_t *shape, uint64_t elem_bytes_num, uint64_t elem_div) {
  sy_plan *p = b->p;
  if (b->oom) return NULL;
  if (p->nt == p->cap) {
    int cap = p->cap ? p->cap * 2 : 256;
    sy_tensor *n = realloc(p->t, (size_t)cap * sizeof *n);
    if (!n) {
      b->oom = 1;
      return NULL;
    }
    p->t = n;
    p->cap = cap;
  }
  sy_tensor *t = &p->t[p->nt];
  memset(t, 0, sizeof *t);
  t->name = strdup(name);
  if (!t->name) {
    b->oom = 1;
    return NULL;
  }
  p->nt++;
  t->dtype = dtype;
  t->ndim = ndim;
  uint64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    numel *= (uint64_t)shape[i];
  }
  t->nbytes = numel * elem_bytes_num / elem_div;
  t->key = name_key(b->seed, name);
  return t;
}

/* A float vector (norm weight, scalar): bf16 center ± half. */
static void add_vec(builder *b, const char *name, int64_t n, float center, float half) {
  sy_tensor *t = add_tensor(b, name, "BF16", 1, &n, 2, 1);
  if (!t) return;
  t->gen = SY_GEN_BF16_UNIFORM;
  t->center = center;
  t->half = half;
  t->params = (uint64_t)n;
}

/* Norm weights: Gemma 4 multiplies by w (≈ 1), Gemma 3 by 1 + w (w ≈ 0). */
static void add_norm(builder *b, const char *name, int64_t n) {
  add_vec(b, name, n, b->ps->g4 ? 1.0f : 0.0f, 0.1f);
}

/* A Linear / Embedding / SwitchLinear [E?, rows, cols] in spec q (dense when q is dense or
 * when cols is not a multiple of the group, as mlx-lm's quantize_model skips it). */
static void add_linear_q(builder *b, const char *module, int64_t E, int64_t rows, int64_t cols,
                         qspec q) {
  char name[256];
  int64_t shape[3];
  int nd = 0;
  if (E) shape[nd++] = E;
  shape[nd++] = rows;
  uint64_t slabs = E ? (uint64_t)E : 1;
  uint64_t params = slabs * (uint64_t)rows * (uint64_t)cols;
  if (q.kind == Q_DENSE || cols % q.group) {
    shape[nd] = cols;
    snprintf(name, sizeof name, "%s.weight", module);
    sy_tensor *t = add_tensor(b, name, "BF16", nd + 1, shape, 2, 1);
    if (!t) return;
    t->gen = SY_GEN_BF16_UNIFORM;
    t->half = WEIGHT_RMS * sqrtf(3.0f); /* uniform with rms 0.02 */
    t->params = params;
    return;
  }
  shape[nd] = cols * q.bits / 32;
  snprintf(name, sizeof name, "%s.weight", module);
  sy_tensor *w = add_tensor(b, name, "U32", nd + 1, shape, 4, 1);
  if (!w) return;
  w->gen = q.kind == Q_MXFP8 ? SY_GEN_FP8_CODES : SY_GEN_RANDOM;
  w->params = params;

  shape[nd] = cols / q.group;
  snprintf(name, sizeof name, "%s.scales", module);
  uint64_t module_key = name_key(b->seed, module);
  if (q.kind == Q_AFFINE) {
    /* codes q uniform in [0, 2^b): w = s·q + bias with bias = −s·(2^b − 1)/2 centres them; the
     * code rms about the centre is sqrt((4^b − 1)/12). */
    float center = (float)((1 << q.bits) - 1) / 2.0f;
    float s = WEIGHT_RMS / sqrtf((float)((1u << (2 * q.bits)) - 1) / 12.0f);
    sy_tensor *sc = add_tensor(b, name, "BF16", nd + 1, shape, 2, 1);
    if (!sc) return;
    sc->gen = SY_GEN_AFFINE_SCALE;
    sc->key = module_key;
    sc->half = s;
    sc->center = center;
    snprintf(name, sizeof name, "%s.biases", module);
    sy_tensor *bi = add_tensor(b, name, "BF16", nd + 1, shape, 2, 1);
    if (!bi) return;
    bi->gen = SY_GEN_AFFINE_BIAS;
    bi->key = module_key;
    bi->half = s;
    bi->center = center;
  } else {
    sy_tensor *sc = add_tensor(b, name, "U8", nd + 1, shape, 1, 1);
    if (!sc) return;
    sc->gen = SY_GEN_U8_TABLE;
    sc->table = q.kind == Q_NVFP4 ? NVFP4_SCALES : q.kind == Q_MXFP4 ? MXFP4_SCALES : MXFP8_SCALES;
  }
}

static void add_linear(builder *b, const char *module, int64_t E, int64_t rows, int64_t cols) {
  add_linear_q(b, module, E, rows, cols, b->q);
}

/* Layer plan as config.c derives it from what config.json will say. */
typedef struct layer_plan {
  int full, head_dim, kv, inter, has_kv, k_eq_v;
} layer_plan;

static int layer_is_full(const sy_preset *ps, int i, int n) {
  if (ps->g4 && i == n - 1) return 1; /* HF Gemma4TextConfig forces the last layer full */
  return (i + 1) % ps->pattern == 0;
}

/* KV sharing scaled to n layers: every shared layer needs an earlier unshared one of its type. */
static int kv_shared_for(const sy_preset *ps, int n) {
  if (!ps->kv_shared) return 0;
  int s = n == ps->layers ? ps->kv_shared : (ps->kv_shared * n + ps->layers / 2) / ps->layers;
  for (; s > 0; s--) {
    int first = n - s, ok = first > 0;
    for (int j = first; ok && j < n; j++) {
      int found = 0;
      for (int i = 0; i < first && !found; i++)
        found = layer_is_full(ps, i, n) == layer_is_full(ps, j, n);
      ok = found;
    }
    if (ok) return s;
  }
  return 0;
}

static void plan_layer(const sy_preset *ps, int i, int n, int shared, layer_plan *L) {
  int first = n - shared;
  L->full = layer_is_full(ps, i, n);
  L->has_kv = i < first;
  L->head_dim = ps->g4 && L->full ? ps->global_head_dim : ps->head_dim;
  L->kv = ps->g4 && L->full && ps->k_eq_v && ps->global_kv ? ps->global_kv : ps->kv;
  L->k_eq_v = ps->g4 && ps->k_eq_v && L->full && L->has_kv;
  L->inter = ps->inter * (ps->double_wide && i >= first ? 2 : 1);
}

static void add_layer(builder *b, int i, int n, int shared) {
  const sy_preset *ps = b->ps;
  layer_plan L;
  plan_layer(ps, i, n, shared, &L);
  char m[160];
  int64_t H = ps->hidden, nq = (int64_t)ps->heads * L.head_dim, nkv = (int64_t)L.kv * L.head_dim;
#define P(suffix) (snprintf(m, sizeof m, "model.layers.%d.%s", i, suffix), m)
  add_linear(b, P("self_attn.q_proj"), 0, nq, H);
  if (L.has_kv) {
    add_linear(b, P("self_attn.k_proj"), 0, nkv, H);
    if (!L.k_eq_v) add_linear(b, P("self_attn.v_proj"), 0, nkv, H);
  }
  add_linear(b, P("self_attn.o_proj"), 0, H, nq);
  add_norm(b, P("self_attn.q_norm.weight"), L.head_dim);
  if (L.has_kv) add_norm(b, P("self_attn.k_norm.weight"), L.head_dim);
  add_linear(b, P("mlp.gate_proj"), 0, L.inter, H);
  add_linear(b, P("mlp.up_proj"), 0, L.inter, H);
  add_linear(b, P("mlp.down_proj"), 0, H, L.inter);
  add_norm(b, P("input_layernorm.weight"), H);
  add_norm(b, P("post_attention_layernorm.weight"), H);
  add_norm(b, P("pre_feedforward_layernorm.weight"), H);
  add_norm(b, P("post_feedforward_layernorm.weight"), H);
  if (ps->experts) {
    int64_t E = ps->experts, mi = ps->moe_inter;
    if (b->q.kind != Q_DENSE) {
      /* mlx-lm gemma4_text quant_predicate: router.proj → {"group_size": 64, "bits": 8} */
      cJSON *o = cJSON_CreateObject();
      if (!o || !cJSON_AddNumberToObject(o, "group_size", 64) ||
          !cJSON_AddNumberToObject(o, "bits", 8))
        b->oom = 1;
      cJSON_AddItemToObject(b->overrides, P("router.proj"), o);
      add_linear_q(b, m, 0, E, H, (qspec){Q_AFFINE, 8, 64});
    } else {
      add_linear(b, P("router.proj"), 0, E, H);
    }
    add_vec(b, P("router.scale"), H, 1.0f, 0.1f);
    add_vec(b, P("router.per_expert_scale"), E, 1.0f, 0.1f);
    add_linear(b, P("experts.switch_glu.gate_proj"), E, mi, H);
    add_linear(b, P("experts.switch_glu.up_proj"), E, mi, H);
    add_linear(b, P("experts.switch_glu.down_proj"), E, H, mi);
    add_norm(b, P("post_feedforward_layernorm_1.weight"), H);
    add_norm(b, P("post_feedforward_layernorm_2.weight"), H);
    add_norm(b, P("pre_feedforward_layernorm_2.weight"), H);
  }
  if (ps->ple) {
    add_linear(b, P("per_layer_input_gate"), 0, ps->ple, H);
    add_linear(b, P("per_layer_projection"), 0, H, ps->ple);
    add_norm(b, P("post_per_layer_input_norm.weight"), H);
  }
  if (ps->g4) add_vec(b, P("layer_scalar"), 1, 1.0f, 0.02f);
#undef P
}

/* ---- JSON in Python's json.dump(indent=N) layout ----------------------------------------- */

typedef struct sbuf {
  char *s;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) MX_PRINTF(2, 3);
static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->len + (size_t)n + 1) * 2 + 256;
    char *ns = realloc(b->s, cap);
    if (!ns) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static void py_string(sbuf *b, const char *s) {
  sb_add(b, "\"");
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') sb_add(b, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) sb_add(b, "\\u%04x", (unsigned char)*s);
    else sb_add(b, "%c", *s);
  }
  sb_add(b, "\"");
}

/* Floats are cJSON raw items holding Python's repr ("30.0", "1e-06"); numbers are integers. */
static void py_dump(sbuf *b, const cJSON *v, int indent, int depth) {
  if (cJSON_IsRaw(v)) sb_add(b, "%s", v->valuestring);
  else if (cJSON_IsNumber(v)) sb_add(b, "%.0f", v->valuedouble);
  else if (cJSON_IsString(v)) py_string(b, v->valuestring);
  else if (cJSON_IsTrue(v)) sb_add(b, "true");
  else if (cJSON_IsFalse(v)) sb_add(b, "false");
  else if (cJSON_IsNull(v)) sb_add(b, "null");
  else {
    int obj = cJSON_IsObject(v);
    if (!v->child) {
      sb_add(b, obj ? "{}" : "[]");
      return;
    }
    sb_add(b, obj ? "{" : "[");
    for (const cJSON *c = v->child; c; c = c->next) {
      sb_add(b, "\n%*s", indent * (depth + 1), "");
      if (obj) {
        py_string(b, c->string);
        sb_add(b, ": ");
      }
      py_dump(b, c, indent, depth + 1);
      if (c->next) sb_add(b, ",");
    }
    sb_add(b, "\n%*s%s", indent * depth, "", obj ? "}" : "]");
  }
}

static int cmp_child(const void *a, const void *b) {
  return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Sorts an object's keys (mlx-lm's save_config sorts the top level only). */
static int sort_keys(cJSON *o) {
  int n = cJSON_GetArraySize(o);
  if (n < 2) return 0;
  cJSON **v = malloc((size_t)n * sizeof *v);
  if (!v) return -1;
  int i = 0;
  for (cJSON *c = o->child; c; c = c->next) v[i++] = c;
  qsort(v, (size_t)n, sizeof *v, cmp_child);
  for (i = 0; i < n; i++) {
    v[i]->prev = i ? v[i - 1] : v[n - 1]; /* cJSON: child->prev is the last item */
    v[i]->next = i + 1 < n ? v[i + 1] : NULL;
  }
  o->child = v[0];
  free(v);
  return 0;
}

static char *dump(cJSON *o, int indent) {
  sbuf b = {0};
  py_dump(&b, o, indent, 0);
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

static void add_raw(cJSON *o, const char *k, const char *raw) { cJSON_AddRawToObject(o, k, raw); }

static cJSON *int_list(const int *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  return a;
}

static cJSON *quant_dict(const builder *b) {
  cJSON *q = cJSON_CreateObject();
  if (!q) return NULL;
  cJSON_AddNumberToObject(q, "group_size", b->q.group);
  cJSON_AddNumberToObject(q, "bits", b->q.bits);
  cJSON_AddStringToObject(q, "mode", qmode_name(b->q.kind));
  for (const cJSON *c = b->overrides->child; c; c = c->next)
    cJSON_AddItemToObject(q, c->string, cJSON_Duplicate(c, 1));
  return q;
}

static char *make_config(const builder *b, int n, int shared) {
  const sy_preset *ps = b->ps;
  cJSON *c = cJSON_CreateObject();
  if (!c) return NULL;
  static const int EOS[] = {1, 106};
  cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(
      (const char *[]){ps->g4 ? "Gemma4ForCausalLM" : "Gemma3ForCausalLM"}, 1));
  cJSON_AddFalseToObject(c, "attention_bias");
  cJSON_AddNumberToObject(c, "bos_token_id", 2);
  cJSON_AddItemToObject(c, "eos_token_id", int_list(EOS, 2));
  cJSON_AddNumberToObject(c, "head_dim", ps->head_dim);
  cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
  cJSON_AddNumberToObject(c, "hidden_size", ps->hidden);
  cJSON_AddNumberToObject(c, "intermediate_size", ps->inter);
  cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
  for (int i = 0; lt && i < n; i++)
    cJSON_AddItemToArray(lt, cJSON_CreateString(layer_is_full(ps, i, n) ? "full_attention"
                                                                       : "sliding_attention"));
  cJSON_AddNumberToObject(c, "max_position_embeddings", ps->max_pos);
  cJSON_AddNumberToObject(c, "num_attention_heads", ps->heads);
  cJSON_AddNumberToObject(c, "num_hidden_layers", n);
  cJSON_AddNumberToObject(c, "num_key_value_heads", ps->kv);
  cJSON_AddNumberToObject(c, "pad_token_id", 0);
  add_raw(c, "rms_norm_eps", "1e-06");
  cJSON_AddNumberToObject(c, "sliding_window", ps->window);
  cJSON_AddTrueToObject(c, "tie_word_embeddings");
  cJSON_AddNumberToObject(c, "vocab_size", ps->vocab);
  if (ps->g4) {
    cJSON_AddStringToObject(c, "model_type", "gemma4_text");
    add_raw(c, "attention_dropout", "0.0");
    cJSON_AddBoolToObject(c, "attention_k_eq_v", ps->k_eq_v);
    cJSON_AddStringToObject(c, "dtype", "bfloat16");
    cJSON_AddBoolToObject(c, "enable_moe_block", ps->experts > 0);
    add_raw(c, "final_logit_softcapping", "30.0");
    cJSON_AddNumberToObject(c, "global_head_dim", ps->global_head_dim);
    cJSON_AddNumberToObject(c, "hidden_size_per_layer_input", ps->ple);
    if (ps->experts) {
      cJSON_AddNumberToObject(c, "moe_intermediate_size", ps->moe_inter);
      cJSON_AddNumberToObject(c, "num_experts", ps->experts);
      cJSON_AddNumberToObject(c, "top_k_experts", ps->top_k);
    } else {
      cJSON_AddNullToObject(c, "moe_intermediate_size");
      cJSON_AddNullToObject(c, "num_experts");
      cJSON_AddNullToObject(c, "top_k_experts");
    }
    if (ps->global_kv) cJSON_AddNumberToObject(c, "num_global_key_value_heads", ps->global_kv);
    else cJSON_AddNullToObject(c, "num_global_key_value_heads");
    cJSON_AddNumberToObject(c, "num_kv_shared_layers", shared);
    cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
    cJSON *full = cJSON_AddObjectToObject(rp, "full_attention");
    add_raw(full, "partial_rotary_factor", "0.25");
    add_raw(full, "rope_theta", "1000000.0");
    cJSON_AddStringToObject(full, "rope_type", "proportional");
    cJSON *sl = cJSON_AddObjectToObject(rp, "sliding_attention");
    add_raw(sl, "rope_theta", "10000.0");
    cJSON_AddStringToObject(sl, "rope_type", "default");
    if (ps->bidir) cJSON_AddStringToObject(c, "use_bidirectional_attention", ps->bidir);
    else cJSON_AddNullToObject(c, "use_bidirectional_attention");
    cJSON_AddBoolToObject(c, "use_double_wide_mlp", ps->double_wide);
    cJSON_AddNumberToObject(c, "vocab_size_per_layer_input", ps->vocab);
  } else {
    cJSON_AddStringToObject(c, "model_type", "gemma3_text");
    cJSON_AddNullToObject(c, "attn_logit_softcapping");
    cJSON_AddNullToObject(c, "final_logit_softcapping");
    cJSON_AddNumberToObject(c, "query_pre_attn_scalar", ps->qpas);
    add_raw(c, "rope_local_base_freq", "10000.0");
    if (ps->linear_factor > 0) {
      cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
      char f[32];
      snprintf(f, sizeof f, "%.1f", ps->linear_factor);
      add_raw(rs, "factor", f);
      cJSON_AddStringToObject(rs, "rope_type", "linear");
    } else {
      cJSON_AddNullToObject(c, "rope_scaling");
    }
    add_raw(c, "rope_theta", "1000000.0");
    cJSON_AddNumberToObject(c, "sliding_window_pattern", ps->pattern);
    cJSON_AddStringToObject(c, "torch_dtype", "bfloat16");
  }
  if (b->q.kind != Q_DENSE) {
    cJSON_AddItemToObject(c, "quantization", quant_dict(b));
    cJSON_AddItemToObject(c, "quantization_config", quant_dict(b));
  }
  /* Not read by mlx-lm or mlxrt: says the weights are random, and how to make them again. */
  cJSON *syn = cJSON_AddObjectToObject(c, "mlxrt_synthetic");
  cJSON_AddStringToObject(syn, "like", ps->name);
  cJSON_AddStringToObject(syn, "mode", b->p->mode);
  cJSON_AddNumberToObject(syn, "layers", n);
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)b->seed);
  add_raw(syn, "seed", seed);
  char *s = sort_keys(c) ? NULL : dump(c, 4);
  cJSON_Delete(c);
  return s;
}

static char *make_generation_config(const sy_preset *ps) {
  cJSON *g = cJSON_CreateObject();
  if (!g) return NULL;
  static const int EOS4[] = {1, 106, 50}, EOS3[] = {1, 106};
  cJSON_AddNumberToObject(g, "bos_token_id", 2);
  if (!ps->g4) cJSON_AddStringToObject(g, "cache_implementation", "hybrid");
  cJSON_AddTrueToObject(g, "do_sample");
  cJSON_AddItemToObject(g, "eos_token_id", ps->g4 ? int_list(EOS4, 3) : int_list(EOS3, 2));
  cJSON_AddNumberToObject(g, "pad_token_id", 0);
  if (ps->g4) add_raw(g, "temperature", "1.0");
  cJSON_AddNumberToObject(g, "top_k", 64);
  add_raw(g, "top_p", "0.95");
  char *s = dump(g, 2);
  cJSON_Delete(g);
  return s;
}

/* ---- sharding, headers, index ------------------------------------------------------------ */

static const sy_plan *g_sort_plan; /* qsort has no context argument in C11 */
static int cmp_by_name(const void *a, const void *b) {
  return strcmp(g_sort_plan->t[*(const int *)a].name, g_sort_plan->t[*(const int *)b].name);
}

/* The safetensors header of one shard: sorted keys as MLX (nlohmann) writes them, padded with
 * spaces so the data area starts 64-byte aligned. */
static int make_header(sy_plan *p, sy_shard *s) {
  int *byname = malloc((size_t)(s->n ? s->n : 1) * sizeof *byname);
  if (!byname) return -1;
  memcpy(byname, s->order, (size_t)s->n * sizeof *byname);
  g_sort_plan = p;
  qsort(byname, (size_t)s->n, sizeof *byname, cmp_by_name);
  sbuf b = {0};
  sb_add(&b, "%8s", ""); /* room for the length */
  sb_add(&b, "{\"__metadata__\":{\"format\":\"mlx\"}");
  for (int i = 0; i < s->n; i++) {
    const sy_tensor *t = &p->t[byname[i]];
    sb_add(&b, ",\"%s\":{\"data_offsets\":[%llu,%llu],\"dtype\":\"%s\",\"shape\":[", t->name,
           (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), t->dtype);
    for (int d = 0; d < t->ndim; d++) sb_add(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    sb_add(&b, "]}");
  }
  sb_add(&b, "}");
  while (b.len % 64) sb_add(&b, " ");
  free(byname);
  if (b.oom) {
    free(b.s);
    return -1;
  }
  uint64_t hl = b.len - 8;
  for (int i = 0; i < 8; i++) b.s[i] = (char)(hl >> (8 * i));
  s->header = b.s;
  s->header_len = b.len;
  return 0;
}

static int make_shards(sy_plan *p) {
  /* mlx-lm make_shards: greedy in module order, a new shard when the next tensor would pass
   * the limit. */
  int *shard_of = malloc((size_t)p->nt * sizeof *shard_of);
  if (!shard_of) return -1;
  int ns = 0;
  uint64_t size = 0;
  for (int i = 0; i < p->nt; i++) {
    if (ns == 0 || size + p->t[i].nbytes > SY_SHARD_LIMIT) {
      ns++;
      size = 0;
    }
    shard_of[i] = ns - 1;
    size += p->t[i].nbytes;
  }
  p->shards = calloc((size_t)ns, sizeof *p->shards);
  if (!p->shards) {
    free(shard_of);
    return -1;
  }
  p->nshards = ns;
  int rc = 0;
  for (int s = 0; s < ns && !rc; s++) {
    sy_shard *sh = &p->shards[s];
    if (ns == 1) snprintf(sh->file, sizeof sh->file, "model.safetensors");
    else snprintf(sh->file, sizeof sh->file, "model-%05d-of-%05d.safetensors", s + 1, ns);
    int cnt = 0;
    for (int i = 0; i < p->nt; i++) cnt += shard_of[i] == s;
    sh->order = malloc((size_t)(cnt ? cnt : 1) * sizeof *sh->order);
    if (!sh->order) {
      rc = -1;
      break;
    }
    /* Data order: tensors whose size is a multiple of 64 first (they stay 64-byte aligned),
     * then the small odd-sized vectors. */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < p->nt; i++)
        if (shard_of[i] == s && ((p->t[i].nbytes % 64 != 0) == pass)) {
          sy_tensor *t = &p->t[i];
          t->shard = s;
          t->offset = sh->data_bytes;
          sh->data_bytes += t->nbytes;
          sh->order[sh->n++] = i;
        }
    if (make_header(p, sh)) rc = -1;
    p->data_bytes += sh->data_bytes;
    p->file_bytes += sh->header_len + sh->data_bytes;
  }
  free(shard_of);
  return rc;
}

static char *make_index(const sy_plan *p) {
  int *byname = malloc((size_t)p->nt * sizeof *byname);
  if (!byname) return NULL;
  for (int i = 0; i < p->nt; i++) byname[i] = i;
  g_sort_plan = p;
  qsort(byname, (size_t)p->nt, sizeof *byname, cmp_by_name);
  cJSON *o = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddNumberToObject(md, "total_size", (double)p->data_bytes);
  cJSON_AddNumberToObject(md, "total_parameters", (double)p->params);
  cJSON *wm = cJSON_AddObjectToObject(o, "weight_map");
  for (int i = 0; wm && i < p->nt; i++)
    cJSON_AddStringToObject(wm, p->t[byname[i]].name, p->shards[p->t[byname[i]].shard].file);
  free(byname);
  char *s = dump(o, 4);
  cJSON_Delete(o);
  return s;
}

int sy_plan_build(const char *like, const char *mode, int layers, uint64_t seed, sy_plan *p,
                  mlxrt_error *err) {
  memset(p, 0, sizeof *p);
  const sy_preset *ps = NULL;
  for (int i = 0; i < NPRESETS; i++)
    if (like && !strcmp(like, PRESETS[i].name)) ps = &PRESETS[i];
  if (!ps)
    return mx_fail(err, "unknown model '%.40s' (expected one of %s)", like ? like : "",
                   mlxrt_synth_presets());
  int mi = -1;
  for (int i = 0; i < (int)(sizeof MODES / sizeof MODES[0]); i++)
    if (mode && !strcmp(mode, MODES[i].name)) mi = i;
  if (mi < 0)
    return mx_fail(err,
                   "unknown mode '%.40s' (expected nvfp4, mxfp4, mxfp8, affine4, affine8 or bf16)",
                   mode ? mode : "");
  int n = layers ? layers : ps->layers;
  if (n < 1 || n > 256)
    return mx_fail(err, "layer count %d is out of range (1 to 256)", n);
  snprintf(p->like, sizeof p->like, "%s", ps->name);
  snprintf(p->mode, sizeof p->mode, "%s", MODES[mi].name);
  p->layers = n;

  builder b = {p, ps, MODES[mi].q, seed, cJSON_CreateObject(), err, 0};
  if (!b.overrides) return mx_fail(err, "out of memory planning the checkpoint");
  int shared = kv_shared_for(ps, n);
  int64_t H = ps->hidden;
  add_linear(&b, "model.embed_tokens", 0, ps->vocab, H);
  if (ps->ple) {
    int64_t LP = (int64_t)n * ps->ple;
    add_linear(&b, "model.embed_tokens_per_layer", 0, ps->vocab, LP);
    add_linear(&b, "model.per_layer_model_projection", 0, LP, H);
    add_norm(&b, "model.per_layer_projection_norm.weight", ps->ple);
  }
  for (int i = 0; i < n; i++) add_layer(&b, i, n, shared);
  add_norm(&b, "model.norm.weight", H);
  for (int i = 0; i < p->nt; i++) p->params += p->t[i].params;
  int rc = -1;
  if (!b.oom && !make_shards(p)) {
    p->config_json = make_config(&b, n, shared);
    p->generation_json = make_generation_config(ps);
    p->index_json = make_index(p);
    if (p->config_json && p->generation_json && p->index_json) rc = 0;
  }
  cJSON_Delete(b.overrides);
  if (rc) {
    sy_plan_free(p);
    return mx_fail(err, "out of memory planning the checkpoint");
  }
  return 0;
}

void sy_plan_free(sy_plan *p) {
  for (int i = 0; i < p->nt; i++) free(p->t[i].name);
  free(p->t);
  for (int s = 0; s < p->nshards; s++) {
    free(p->shards[s].header);
    free(p->shards[s].order);
  }
  free(p->shards);
  free(p->config_json);
  free(p->generation_json);
  free(p->index_json);
  memset(p, 0, sizeof *p);
}
