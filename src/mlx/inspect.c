/* mlxrt_describe: a human or JSON summary of a checkpoint (what `mlxrt inspect` prints). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/model.h"
#include "mlxrt.h"

/* Groups of tensors that share a quantization: "affine 4-bit g64", "bf16", ... */
typedef struct {
  char label[48];
  int count;
  uint64_t bytes, params;
  char roles[160];
} qgroup;

typedef struct {
  qgroup g[16];
  int n;
} qgroups;

static const char *role_of(const char *name) {
  static const char *roles[] = {"embed_tokens_per_layer", "per_layer", "embed_tokens", "lm_head",
                                "q_proj", "k_proj", "v_proj", "o_proj", "router", "experts",
                                "gate_proj", "up_proj", "down_proj"};
  for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
    if (strstr(name, roles[i])) return roles[i];
  return "other";
}

static void add_to_groups(const mx_linear *l, void *ctx) {
  qgroups *q = ctx;
  const accel_spec *s = &l->aw.spec;
  char label[48];
  if (s->mode == ACCEL_MODE_DENSE)
    snprintf(label, sizeof label, "%s", s->dense_dtype == ACCEL_BF16 ? "bf16" : s->dense_dtype == ACCEL_F16 ? "f16" : "f32");
  else if (s->mode == ACCEL_MODE_AFFINE)
    snprintf(label, sizeof label, "affine %d-bit g%d", s->bits, s->group_size);
  else
    snprintf(label, sizeof label, "%s", accel_mode_name(s->mode));
  int i = 0;
  while (i < q->n && strcmp(q->g[i].label, label)) i++;
  if (i == q->n) {
    if (q->n == 16) return;
    memset(&q->g[i], 0, sizeof q->g[i]);
    snprintf(q->g[i].label, sizeof q->g[i].label, "%s", label);
    q->n++;
  }
  qgroup *g = &q->g[i];
  g->count++;
  g->bytes += accel_weight_bytes(s);
  g->params += (uint64_t)(s->experts ? s->experts : 1) * (uint64_t)s->rows * (uint64_t)s->cols;
  const char *r = role_of(l->name);
  if (!strstr(g->roles, r) && strlen(g->roles) + strlen(r) + 3 < sizeof g->roles) {
    if (g->roles[0]) strcat(g->roles, ", ");
    strcat(g->roles, r);
  }
}

typedef struct {
  char *buf;
  size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) MX_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->cap + (size_t)n + 1) * 2;
    char *nb = realloc(b->buf, cap);
    if (!nb) return;
    b->buf = nb;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static const char *human(uint64_t bytes, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    i++;
  }
  snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
  return buf;
}

static char *describe_text(const mx_model *m, const qgroups *q, const mx_model_stats *st) {
  const mx_config *c = &m->cfg;
  sbuf b = {0};
  char h1[32], h2[32];
  sb_printf(&b, "model      %s (%s, %s)\n", m->path, c->model_type, mx_config_variant(c));
  sb_printf(&b, "tensors    %s* (%d layers, hidden %d, vocab %d)\n", m->prefix, c->num_layers,
            c->hidden_size, c->vocab_size);
  int nslide = 0, nfull = 0;
  for (int i = 0; i < c->num_layers; i++) {
    if (c->layer_types[i] == MX_LAYER_FULL) nfull++;
    else nslide++;
  }
  for (int t = 0; t < 2; t++) {
    int cnt = t ? nfull : nslide;
    if (!cnt) continue;
    int first = -1;
    for (int i = 0; i < c->num_layers; i++)
      if ((int)c->layer_types[i] == t) { first = i; break; }
    const mx_layer *L = &m->layers[first];
    sb_printf(&b, "layers     %-8s x%-3d head_dim %d, %d q heads / %d kv heads%s%s", t ? "full" : "sliding",
              cnt, L->head_dim, c->num_heads, L->n_kv_heads, L->k_eq_v ? ", k_eq_v" : "",
              t ? "" : "");
    if (!t) sb_printf(&b, ", window %d", c->sliding_window);
    const mx_rope *r = t ? &c->rope_full : &c->rope_sliding;
    sb_printf(&b, ", rope %s theta %g", r->kind == MX_ROPE_PROPORTIONAL ? "proportional" : r->kind == MX_ROPE_LINEAR ? "linear" : "default", r->theta);
    if (r->kind == MX_ROPE_LINEAR) sb_printf(&b, " factor %g", r->factor);
    if (r->kind == MX_ROPE_PROPORTIONAL) sb_printf(&b, " partial %g", r->partial_rotary);
    sb_printf(&b, "\n");
  }
  sb_printf(&b, "plan       ");
  for (int i = 0; i < c->num_layers; i++) sb_printf(&b, "%c", c->layer_types[i] == MX_LAYER_FULL ? 'F' : 's');
  sb_printf(&b, "  (s = sliding, F = full)\n");
  if (c->assistant)
    sb_printf(&b, "drafter    an MTP drafter (gemma4_assistant): every layer reads the K/V of the model it drafts "
                  "for (hidden %d); %s head\n", c->backbone_hidden_size,
              c->use_ordered_embeddings ? "ordered-embedding" : "tied");
  else if (c->num_kv_shared_layers)
    sb_printf(&b, "kv-shared  last %d layers reuse earlier K/V\n", c->num_kv_shared_layers);
  if (c->hidden_size_per_layer_input) sb_printf(&b, "ple        per-layer embeddings, width %d\n", c->hidden_size_per_layer_input);
  if (c->enable_moe) sb_printf(&b, "moe        %d experts, top %d, expert FFN %d\n", c->num_experts, c->top_k_experts, c->moe_intermediate_size);
  if (c->final_logit_softcap > 0) sb_printf(&b, "softcap    final logits %g\n", c->final_logit_softcap);
  sb_printf(&b, "quant      %-20s %6s %12s %10s  %s\n", "format", "count", "params", "bytes", "tensors");
  for (int i = 0; i < q->n; i++)
    sb_printf(&b, "           %-20s %6d %12llu %10s  %s\n", q->g[i].label, q->g[i].count,
              (unsigned long long)q->g[i].params, human(q->g[i].bytes, h1, sizeof h1), q->g[i].roles);
  sb_printf(&b, "params     %llu (%.3f B)\n", (unsigned long long)st->params, (double)st->params / 1e9);
  sb_printf(&b, "on disk    %s (matrices)\n", human(st->bytes_on_disk, h1, sizeof h1));
  sb_printf(&b, "per token  %s read per decoded token (weights, excluding KV)\n", human(st->bytes_per_token, h2, sizeof h2));
  return b.buf;
}

static char *describe_json(const mx_model *m, const qgroups *q, const mx_model_stats *st) {
  const mx_config *c = &m->cfg;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", m->path);
  cJSON_AddStringToObject(o, "model_type", c->model_type);
  cJSON_AddNumberToObject(o, "family", c->family);
  cJSON_AddStringToObject(o, "variant", mx_config_variant(c));
  cJSON_AddStringToObject(o, "tensor_prefix", m->prefix);
  cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
  cJSON_AddNumberToObject(o, "num_layers", c->num_layers);
  cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
  cJSON_AddNumberToObject(o, "sliding_window", c->sliding_window);
  cJSON *layers = cJSON_AddArrayToObject(o, "layers");
  for (int i = 0; i < m->n_layers; i++) {
    const mx_layer *L = &m->layers[i];
    cJSON *l = cJSON_CreateObject();
    cJSON_AddStringToObject(l, "type", L->type == MX_LAYER_FULL ? "full" : "sliding");
    cJSON_AddNumberToObject(l, "head_dim", L->head_dim);
    cJSON_AddNumberToObject(l, "kv_heads", L->n_kv_heads);
    cJSON_AddNumberToObject(l, "kv_source", L->kv_source);
    cJSON_AddBoolToObject(l, "k_eq_v", L->k_eq_v);
    cJSON_AddNumberToObject(l, "intermediate", L->intermediate);
    cJSON_AddItemToArray(layers, l);
  }
  cJSON *qa = cJSON_AddArrayToObject(o, "quantization");
  for (int i = 0; i < q->n; i++) {
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "format", q->g[i].label);
    cJSON_AddNumberToObject(g, "count", q->g[i].count);
    cJSON_AddNumberToObject(g, "params", (double)q->g[i].params);
    cJSON_AddNumberToObject(g, "bytes", (double)q->g[i].bytes);
    cJSON_AddStringToObject(g, "tensors", q->g[i].roles);
    cJSON_AddItemToArray(qa, g);
  }
  cJSON_AddNumberToObject(o, "params", (double)st->params);
  cJSON_AddNumberToObject(o, "bytes_on_disk", (double)st->bytes_on_disk);
  cJSON_AddNumberToObject(o, "bytes_per_token", (double)st->bytes_per_token);
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  return s;
}

char *mlxrt_describe(const char *dir, int json, mlxrt_error *err) {
  mx_model *m = mx_model_open(dir, err);
  if (!m) return NULL;
  qgroups q = {0};
  mx_model_visit_linears(m, add_to_groups, &q);
  mx_model_stats st;
  mx_model_stats_compute(m, &st);
  char *s = json ? describe_json(m, &q, &st) : describe_text(m, &q, &st);
  mx_model_close(m);
  if (!s) mx_fail(err, "out of memory describing %s", dir);
  return s;
}
