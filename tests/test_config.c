/* config.json parsing: every Gemma variant's layer plan (checked against mlx-lm's own plan in
 * tests/corpus/config/plans.json), per_layer_config, quantization specs and overrides,
 * generation_config eos ids, a corpus of broken configs with their expected messages, and
 * mutated configs that must never crash. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "mlx/config.h"
#include "test_util.h"

#define CORPUS "tests/corpus/config"

static char *slurp(const char *path) {
  mlxrt_error err;
  size_t n;
  char *t = mx_read_file(path, &n, &err);
  if (!t) fprintf(stderr, "%s\n", err.msg);
  return t;
}

/* Parses tests/corpus/config/good/NAME; returns 0 on success. */
static int parse_good(const char *name, mx_config *cfg) {
  char path[512];
  snprintf(path, sizeof path, CORPUS "/good/%s", name);
  char *t = slurp(path);
  mlxrt_error err = {{0}};
  int rc = t ? mx_config_parse(t, name, cfg, &err) : -1;
  if (rc) fprintf(stderr, "%s: unexpected failure: %s\n", name, err.msg);
  free(t);
  return rc;
}

static int parse_str(const char *json, mx_config *cfg, mlxrt_error *err) {
  return mx_config_parse(json, "config.json", cfg, err);
}

static int rel_close(double a, double b, double tol) {
  return fabs(a - b) <= tol * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* ---- mlx-lm golden plans --------------------------------------------------------------- */

static const cJSON *col(const cJSON *layers, const char *k, int i) {
  return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(layers, k), i);
}

static void check_plan(const char *name, const cJSON *p) {
  mx_config c;
  CHECKF(parse_good(name, &c) == 0, "%s", name);
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(p, "layers");
  int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(layers, "type"));
  CHECKF(c.num_layers == n, "%s: %d layers, mlx-lm %d", name, c.num_layers, n);
  CHECKF(c.vocab_size == cJSON_GetObjectItem(p, "vocab_size")->valueint, "%s vocab %d", name,
         c.vocab_size);
  CHECKF(c.hidden_size == cJSON_GetObjectItem(p, "hidden_size")->valueint, "%s", name);
  CHECKF(c.num_heads == cJSON_GetObjectItem(p, "num_heads")->valueint, "%s", name);
  CHECKF(c.sliding_window == cJSON_GetObjectItem(p, "sliding_window")->valueint, "%s", name);
  const cJSON *sc = cJSON_GetObjectItem(p, "final_logit_softcapping");
  if (sc) CHECKF(c.final_logit_softcap == (cJSON_IsNull(sc) ? 0 : sc->valuedouble), "%s", name);
  const cJSON *ple = cJSON_GetObjectItem(p, "hidden_size_per_layer_input");
  if (ple) CHECKF(c.hidden_size_per_layer_input == ple->valueint, "%s", name);
  const cJSON *moe = cJSON_GetObjectItem(p, "enable_moe");
  if (moe) CHECKF(c.enable_moe == cJSON_IsTrue(moe), "%s", name);
  const cJSON *m = cJSON_GetObjectItem(p, "moe");
  if (m) {
    CHECKF(c.num_experts == cJSON_GetObjectItem(m, "num_experts")->valueint, "%s", name);
    CHECKF(c.moe_intermediate_size == cJSON_GetObjectItem(m, "moe_intermediate_size")->valueint,
           "%s", name);
    CHECKF(c.top_k_experts == cJSON_GetObjectItem(m, "top_k")->valueint, "%s", name);
  }
  int mism = 0;
  for (int i = 0; i < n && i < c.num_layers; i++) {
    int full = strcmp(col(layers, "type", i)->valuestring, "full_attention") == 0;
    const mx_rope *r = mx_config_layer_rope(&c, i);
    int prop = strcmp(col(layers, "rope_kind", i)->valuestring, "proportional") == 0;
    double factor = col(layers, "rope_factor", i)->valuedouble;
    double theta = col(layers, "rope_theta", i)->valuedouble;
    int ok = (c.layer_types[i] == MX_LAYER_FULL) == full &&
             c.layer_head_dim[i] == col(layers, "head_dim", i)->valueint &&
             c.layer_kv_heads[i] == col(layers, "kv_heads", i)->valueint &&
             c.layer_kv_source[i] == col(layers, "kv_source", i)->valueint &&
             c.layer_k_eq_v[i] == cJSON_IsTrue(col(layers, "k_eq_v", i)) &&
             c.layer_intermediate[i] == col(layers, "intermediate", i)->valueint &&
             c.layer_rope_pairs[i] == col(layers, "rope_pairs", i)->valueint &&
             (r->kind == MX_ROPE_PROPORTIONAL) == prop && rel_close(r->factor, factor, 1e-6) &&
             rel_close(r->theta, theta, prop ? 1e-3 : 1e-9) /* prop θ recovered from f32 */ &&
             rel_close(c.attn_scale, col(layers, "scale", i)->valuedouble, 1e-6);
    if (!ok && mism++ < 3)
      fprintf(stderr,
              "%s layer %d: ours type %d hd %d kv %d src %d keqv %d ffn %d pairs %d rope %d "
              "θ %g f %g scale %g\n",
              name, i, c.layer_types[i], c.layer_head_dim[i], c.layer_kv_heads[i],
              c.layer_kv_source[i], c.layer_k_eq_v[i], c.layer_intermediate[i],
              c.layer_rope_pairs[i], r->kind, r->theta, r->factor, c.attn_scale);
  }
  CHECKF(mism == 0, "%s: %d layers differ from mlx-lm's plan", name, mism);
  mx_config_free(&c);
}

static void test_mlx_lm_plans(void) {
  char *t = slurp(CORPUS "/plans.json");
  CHECK(t != NULL);
  if (!t) return;
  cJSON *plans = cJSON_Parse(t);
  CHECK(plans != NULL);
  int files = 0;
  for (const cJSON *p = plans ? plans->child : NULL; p; p = p->next) {
    if (p->string[0] == '_') continue;
    check_plan(p->string, p);
    files++;
  }
  printf("compared %d configs with mlx-lm's layer plans (%s)\n", files,
         cJSON_GetObjectItem(plans, "_generated_by")->valuestring);
  CHECK(files >= 15);
  cJSON_Delete(plans);
  free(t);
}

/* ---- explicit facts per variant -------------------------------------------------------- */

static void test_gemma4_31b(void) {
  mx_config c;
  if (parse_good("gemma4-31b.json", &c)) { CHECK(0); return; }
  CHECK(c.family == MX_GEMMA4 && c.nested && strcmp(c.model_type, "gemma4") == 0);
  CHECK(c.num_layers == 60 && c.hidden_size == 5376 && c.num_heads == 32);
  int full = 0;
  for (int i = 0; i < 60; i++) {
    int want_full = (i + 1) % 6 == 0;
    full += c.layer_types[i] == MX_LAYER_FULL;
    CHECKF((c.layer_types[i] == MX_LAYER_FULL) == want_full, "layer %d", i);
    CHECKF(c.layer_head_dim[i] == (want_full ? 512 : 256), "layer %d", i);
    CHECKF(c.layer_kv_heads[i] == (want_full ? 4 : 16), "layer %d", i);
    CHECKF(c.layer_k_eq_v[i] == want_full, "layer %d", i);
    CHECK(c.layer_kv_source[i] == i && c.layer_intermediate[i] == 21504);
    CHECK(c.layer_rope_pairs[i] == (want_full ? 64 : 128));
  }
  CHECK(full == 10);
  CHECK(c.rope_full.kind == MX_ROPE_PROPORTIONAL && c.rope_full.theta == 1e6 &&
        c.rope_full.partial_rotary == 0.25 && c.rope_full.factor == 1.0);
  CHECK(c.rope_sliding.kind == MX_ROPE_DEFAULT && c.rope_sliding.theta == 1e4);
  CHECK(c.attn_scale == 1.0 && c.final_logit_softcap == 30.0 && c.has_layer_scalar);
  CHECK(c.embed_scale == 73.5f && !c.norm_plus_one && c.tie_word_embeddings);
  CHECK(c.sliding_window == 1024 && c.max_position_embeddings == 262144);
  CHECK(c.hidden_size_per_layer_input == 0 && !c.enable_moe && c.num_kv_shared_layers == 0);
  CHECK(c.n_eos == 2 && c.eos_token_ids[0] == 1 && c.eos_token_ids[1] == 106);
  CHECK(c.bos_token_id == 2);
  CHECK(c.has_quantization && c.qdefault.mode == ACCEL_MODE_AFFINE && c.qdefault.bits == 4 &&
        c.qdefault.group_size == 64);
  CHECK(strcmp(mx_config_variant(&c), "gemma4-31b") == 0);
  mx_config_free(&c);

  /* Flat gemma4_text form, nvfp4. */
  if (parse_good("gemma4-31b-text.json", &c)) { CHECK(0); return; }
  CHECK(!c.nested && c.num_layers == 60 && c.layer_head_dim[59] == 512 && c.layer_kv_heads[59] == 4);
  CHECK(c.qdefault.mode == ACCEL_MODE_NVFP4 && c.qdefault.group_size == 16);
  mx_config_free(&c);
}

static void test_gemma4_small(void) {
  mx_config c;
  /* E2B: (4 sliding + 1 full) × 7, layers 15..34 reuse the K/V of layer 13 (sliding) or 14
   * (full), KV-shared layers have the double-wide MLP. */
  if (parse_good("gemma4-e2b.json", &c)) { CHECK(0); return; }
  CHECK(c.num_layers == 35 && c.first_kv_shared_layer == 15 && c.use_double_wide_mlp);
  CHECK(c.hidden_size_per_layer_input == 256 && c.vocab_size_per_layer_input == 262144);
  for (int i = 0; i < 35; i++) {
    int full = (i + 1) % 5 == 0;
    CHECKF((c.layer_types[i] == MX_LAYER_FULL) == full, "E2B layer %d", i);
    int src = i < 15 ? i : (full ? 14 : 13);
    CHECKF(c.layer_kv_source[i] == src, "E2B layer %d source %d", i, c.layer_kv_source[i]);
    CHECK(c.layer_intermediate[i] == (i < 15 ? 6144 : 12288));
    CHECK(c.layer_kv_heads[i] == 1 && c.layer_head_dim[i] == (full ? 512 : 256));
    CHECK(!c.layer_k_eq_v[i]);
  }
  CHECK(c.embed_scale == 39.25f);
  CHECK(c.qdefault.mode == ACCEL_MODE_MXFP4 && c.qdefault.bits == 4 && c.qdefault.group_size == 32);
  CHECK(strcmp(mx_config_variant(&c), "gemma4-e2b") == 0);
  mx_config_free(&c);

  /* E4B: 18 shared layers of 42, no double-wide, 2 KV heads everywhere (no k_eq_v). */
  if (parse_good("gemma4-e4b.json", &c)) { CHECK(0); return; }
  CHECK(c.first_kv_shared_layer == 24 && !c.use_double_wide_mlp && !c.has_quantization);
  CHECK(c.layer_kv_source[41] == 23 && c.layer_kv_source[40] == 22 && c.layer_kv_source[24] == 22);
  CHECK(c.layer_intermediate[41] == 10240 && c.layer_kv_heads[41] == 2 && c.layer_head_dim[41] == 512);
  mx_config_free(&c);

  /* 26B-A4B: MoE 128 experts top-8 of width 704, shared MLP 2112, full layers 2 KV heads. */
  if (parse_good("gemma4-26b-a4b.json", &c)) { CHECK(0); return; }
  CHECK(c.enable_moe && c.num_experts == 128 && c.top_k_experts == 8 &&
        c.moe_intermediate_size == 704 && c.intermediate_size == 2112);
  CHECK(c.layer_kv_heads[5] == 2 && c.layer_kv_heads[4] == 8 && c.layer_k_eq_v[29]);
  mx_qspec q = mx_config_qspec(&c, "language_model.model.layers.7.router.proj");
  CHECK(q.quantized && q.mode == ACCEL_MODE_AFFINE && q.bits == 8 && q.group_size == 64);
  q = mx_config_qspec(&c, "model.layers.7.router.proj"); /* without the prefix */
  CHECK(q.mode == ACCEL_MODE_AFFINE && q.bits == 8);
  q = mx_config_qspec(&c, "language_model.model.layers.7.mlp.down_proj");
  CHECK(q.quantized && q.mode == ACCEL_MODE_NVFP4 && q.bits == 4 && q.group_size == 16);
  CHECK(c.noverrides == 30);
  mx_config_free(&c);

  /* 12B (gemma4_unified): dense, k_eq_v with 1 global KV head, no PLE/sharing. */
  if (parse_good("gemma4-12b.json", &c)) { CHECK(0); return; }
  CHECK(c.family == MX_GEMMA4 && c.num_layers == 48 && c.layer_kv_heads[5] == 1 &&
        c.layer_kv_heads[0] == 8 && c.layer_k_eq_v[47] && c.hidden_size_per_layer_input == 0);
  CHECK(strcmp(mx_config_variant(&c), "gemma4-12b") == 0);
  mx_config_free(&c);
}

static void test_gemma3(void) {
  mx_config c;
  if (parse_good("gemma3-27b.json", &c)) { CHECK(0); return; }
  CHECK(c.family == MX_GEMMA3 && c.nested && c.num_layers == 62 && c.head_dim == 128);
  CHECK(c.query_pre_attn_scalar == 168 && rel_close(c.attn_scale, 1 / sqrt(168.0), 1e-12));
  CHECK(c.rope_full.kind == MX_ROPE_LINEAR && c.rope_full.factor == 8.0 && c.rope_full.theta == 1e6);
  CHECK(c.rope_sliding.kind == MX_ROPE_DEFAULT && c.rope_sliding.theta == 1e4 &&
        c.rope_sliding.factor == 1.0);
  CHECK(mx_config_layer_rope(&c, 5)->factor == 8.0 && mx_config_layer_rope(&c, 4)->factor == 1.0);
  CHECK(c.norm_plus_one && !c.has_layer_scalar && c.final_logit_softcap == 0 && c.embed_scale == 73.5f);
  CHECK(c.layer_kv_heads[5] == 16 && c.layer_head_dim[5] == 128 && c.vocab_size == 262208);
  CHECK(c.qdefault.mode == ACCEL_MODE_NVFP4);
  mx_config_free(&c);

  /* The same model in transformers-5 form: rope_parameters keyed by layer type. */
  if (parse_good("gemma3-27b-text-rope-parameters.json", &c)) { CHECK(0); return; }
  CHECK(c.rope_full.kind == MX_ROPE_LINEAR && c.rope_full.factor == 8.0 && c.rope_full.theta == 1e6);
  CHECK(c.rope_sliding.kind == MX_ROPE_DEFAULT && c.rope_sliding.theta == 1e4);
  mx_config_free(&c);

  /* 4B omits heads and vocab like the published config: gemma3.py's defaults 8/4 and 262208. */
  if (parse_good("gemma3-4b.json", &c)) { CHECK(0); return; }
  CHECK(c.num_heads == 8 && c.num_kv_heads == 4 && c.vocab_size == 262208 && c.head_dim == 256);
  CHECK(c.sliding_window == 1024 && c.max_position_embeddings == 32768);
  mx_qspec q = mx_config_qspec(&c, "language_model.model.layers.0.mlp.down_proj");
  CHECK(q.quantized && q.bits == 8 && q.group_size == 64 && q.mode == ACCEL_MODE_AFFINE);
  q = mx_config_qspec(&c, "model.layers.0.mlp.down_proj");
  CHECK(q.bits == 8);
  q = mx_config_qspec(&c, "vision_tower.encoder.layers.0.mlp.fc1");
  CHECK(!q.quantized);
  q = mx_config_qspec(&c, "language_model.model.layers.1.mlp.down_proj");
  CHECK(q.quantized && q.bits == 4 && q.group_size == 64);
  mx_config_free(&c);

  if (parse_good("gemma3-270m.json", &c)) { CHECK(0); return; }
  CHECK(c.num_layers == 18 && c.hidden_size == 640 && c.n_eos == 1 && c.eos_token_ids[0] == 1);
  CHECK(c.rope_full.kind == MX_ROPE_DEFAULT && c.rope_full.theta == 1e6);
  CHECK(c.quant_source == MX_QSRC_QUANTIZATION && c.qdefault.bits == 4);
  CHECK(strcmp(mx_config_variant(&c), "gemma3-270m") == 0);
  int full = 0;
  for (int i = 0; i < 18; i++) full += c.layer_types[i] == MX_LAYER_FULL;
  CHECK(full == 3 && c.layer_types[17] == MX_LAYER_FULL);
  mx_config_free(&c);
}

/* transformers 5 writes per_layer_config instead of global_head_dim / num_global_kv_heads;
 * the resolved plan must be the same. */
static void test_per_layer_config(void) {
  static const char *pairs[][2] = {
      {"gemma4-31b-per-layer-config.json", "gemma4-31b.json"},
      {"gemma4-e2b-text-per-layer-config.json", "gemma4-e2b.json"},
      {"gemma4-26b-a4b-text-per-layer-config.json", "gemma4-26b-a4b.json"},
  };
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    mx_config a, b;
    if (parse_good(pairs[k][0], &a)) {
      CHECK(0);
      continue;
    }
    if (parse_good(pairs[k][1], &b)) {
      CHECK(0);
      mx_config_free(&a);
      continue;
    }
    CHECK(a.has_per_layer_config && !b.has_per_layer_config);
    CHECK(a.num_layers == b.num_layers);
    size_t n = (size_t)a.num_layers * sizeof(int);
    CHECKF(!memcmp(a.layer_types, b.layer_types, (size_t)a.num_layers * sizeof a.layer_types[0]) &&
               !memcmp(a.layer_head_dim, b.layer_head_dim, n) &&
               !memcmp(a.layer_kv_heads, b.layer_kv_heads, n) &&
               !memcmp(a.layer_kv_source, b.layer_kv_source, n) &&
               !memcmp(a.layer_intermediate, b.layer_intermediate, n) &&
               !memcmp(a.layer_k_eq_v, b.layer_k_eq_v, n) &&
               !memcmp(a.layer_rope_pairs, b.layer_rope_pairs, n),
           "%s vs %s", pairs[k][0], pairs[k][1]);
    mx_config_free(&a);
    mx_config_free(&b);
  }
}

/* ---- quantization ---------------------------------------------------------------------- */

#define BASE3 "{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":2,"

static void test_quantization(void) {
  mx_config c;
  mlxrt_error err = {{0}};
  /* mode absent → affine; an override without mode stays affine under an nvfp4 default;
   * group_size null → the mode's default; false → float; true → the global spec. */
  const char *j = BASE3
      "\"quantization\":{\"group_size\":16,\"bits\":4,\"mode\":\"nvfp4\","
      "\"model.layers.0.mlp.down_proj\":{\"group_size\":64,\"bits\":8},"
      "\"model.layers.0.mlp.up_proj\":{\"group_size\":null,\"bits\":4,\"mode\":\"mxfp4\"},"
      "\"model.layers.0.mlp.gate_proj\":{\"bits\":6},"
      "\"model.layers.1.mlp.down_proj\":false,"
      "\"model.layers.1.mlp.up_proj\":true,"
      "\"model.embed_tokens\":{\"bits\":3,\"group_size\":32},"
      "\"model.embed_tokens\":{\"bits\":5,\"group_size\":128}}}";
  CHECK_MSG(err, "");
  if (parse_str(j, &c, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    { CHECK(0); return; }
  }
  CHECK(c.qdefault.mode == ACCEL_MODE_NVFP4 && c.noverrides == 7);
  mx_qspec q = mx_config_qspec(&c, "model.layers.0.mlp.down_proj");
  CHECK(q.quantized && q.mode == ACCEL_MODE_AFFINE && q.bits == 8 && q.group_size == 64);
  q = mx_config_qspec(&c, "language_model.model.layers.0.mlp.down_proj");
  CHECK(q.quantized && q.mode == ACCEL_MODE_AFFINE && q.bits == 8);
  q = mx_config_qspec(&c, "model.layers.0.mlp.up_proj");
  CHECK(q.mode == ACCEL_MODE_MXFP4 && q.group_size == 32 && q.bits == 4);
  q = mx_config_qspec(&c, "model.layers.0.mlp.gate_proj");
  CHECK(q.mode == ACCEL_MODE_AFFINE && q.bits == 6 && q.group_size == 64);
  q = mx_config_qspec(&c, "model.layers.1.mlp.down_proj");
  CHECK(!q.quantized);
  q = mx_config_qspec(&c, "model.layers.1.mlp.up_proj");
  CHECK(q.quantized && q.mode == ACCEL_MODE_NVFP4 && q.group_size == 16);
  q = mx_config_qspec(&c, "model.embed_tokens"); /* duplicate key: the last wins */
  CHECK(q.bits == 5 && q.group_size == 128);
  q = mx_config_qspec(&c, "model.layers.1.self_attn.q_proj");
  CHECK(q.quantized && q.mode == ACCEL_MODE_NVFP4 && q.bits == 4 && q.group_size == 16);
  q = mx_config_qspec(&c, "model.layers.0.mlp"); /* prefix of a key is no match */
  CHECK(q.mode == ACCEL_MODE_NVFP4);
  mx_config_free(&c);

  /* No mode → affine; no quantization → not quantized. */
  CHECK(parse_str(BASE3 "\"quantization\":{\"group_size\":32,\"bits\":2}}", &c, &err) == 0);
  CHECK(c.qdefault.mode == ACCEL_MODE_AFFINE && c.qdefault.bits == 2 && c.qdefault.group_size == 32);
  mx_config_free(&c);
  CHECK(parse_str(BASE3 "\"hidden_size\":64}", &c, &err) == 0);
  CHECK(!c.has_quantization && !mx_config_qspec(&c, "model.embed_tokens").quantized);
  mx_config_free(&c);
  /* Every affine bits × group combination is accepted. */
  static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
  for (int b = 0; b < 6; b++)
    for (int g = 0; g < 3; g++) {
      char buf[256];
      snprintf(buf, sizeof buf, BASE3 "\"quantization\":{\"group_size\":%d,\"bits\":%d,"
                                      "\"mode\":\"affine\"}}", groups[g], bits[b]);
      CHECKF(parse_str(buf, &c, &err) == 0 && c.qdefault.bits == bits[b] &&
                 c.qdefault.group_size == groups[g], "%s", err.msg);
      mx_config_free(&c);
    }
  /* mxfp8 */
  CHECK(parse_str(BASE3 "\"quantization\":{\"group_size\":32,\"bits\":8,\"mode\":\"mxfp8\"}}",
                  &c, &err) == 0 && c.qdefault.mode == ACCEL_MODE_MXFP8);
  mx_config_free(&c);

  /* quantization_config is a fallback only. */
  CHECK(parse_str(BASE3 "\"quantization\":{\"group_size\":64,\"bits\":4},"
                        "\"quantization_config\":{\"quant_method\":\"mxfp4\"}}", &c, &err) == 0);
  CHECK(c.quant_source == MX_QSRC_QUANTIZATION && c.qdefault.mode == ACCEL_MODE_AFFINE);
  mx_config_free(&c);
  CHECK(parse_str(BASE3 "\"quantization_config\":{\"quant_method\":\"mxfp4\"}}", &c, &err) == 0);
  CHECK(c.quant_source == MX_QSRC_QUANTIZATION_CONFIG && c.qdefault.mode == ACCEL_MODE_MXFP4 &&
        c.qdefault.group_size == 32 && c.qdefault.bits == 4);
  mx_config_free(&c);
  CHECK(parse_str(BASE3 "\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
                        "\"format\":\"nvfp4-pack-quantized\"}}", &c, &err) == 0);
  CHECK(c.qdefault.mode == ACCEL_MODE_NVFP4 && c.qdefault.group_size == 16 && c.qdefault.bits == 4);
  mx_config_free(&c);
  CHECK(parse_str(BASE3 "\"quantization_config\":{\"group_size\":128,\"bits\":3,"
                        "\"model.layers.0.mlp.up_proj\":false}}", &c, &err) == 0);
  CHECK(c.qdefault.mode == ACCEL_MODE_AFFINE && c.qdefault.bits == 3 && c.noverrides == 1 &&
        !mx_config_qspec(&c, "model.layers.0.mlp.up_proj").quantized);
  mx_config_free(&c);
  /* quantization_config inside text_config (nested) is found too. */
  CHECK(parse_str("{\"model_type\":\"gemma4\",\"text_config\":{\"num_hidden_layers\":6,"
                  "\"num_kv_shared_layers\":0,\"quantization_config\":{\"quant_method\":"
                  "\"mxfp8\"}}}", &c, &err) == 0);
  CHECK(c.qdefault.mode == ACCEL_MODE_MXFP8 && c.nested && c.num_heads == 8 && c.num_kv_heads == 1);
  mx_config_free(&c);

  /* Shapes → spec, as mlx-lm infers it for modules without an override. */
  mx_qspec s;
  CHECK(mx_qspec_from_shapes(0, 5376, 672, 84, "w", &s, &err) == 0 && s.bits == 4 &&
        s.group_size == 64 && s.mode == ACCEL_MODE_AFFINE);
  CHECK(mx_qspec_from_shapes(1, 5376, 672, 336, "w", &s, &err) == 0 && s.mode == ACCEL_MODE_NVFP4);
  CHECK(mx_qspec_from_shapes(1, 5376, 672, 168, "w", &s, &err) == 0 && s.mode == ACCEL_MODE_MXFP4);
  CHECK(mx_qspec_from_shapes(1, 5376, 1344, 168, "w", &s, &err) == 0 && s.mode == ACCEL_MODE_MXFP8);
  CHECK(mx_qspec_from_shapes(0, 96, 9, 3, "w", &s, &err) == 0 && s.bits == 3 && s.group_size == 32);
  CHECK(mx_qspec_from_shapes(1, 5376, 672, 42, "embed", &s, &err) == -1);
  CHECK_MSG(err, "embed: uint8 scales with 4 bits and group size 128 match no fp mode");
  CHECK(mx_qspec_from_shapes(0, 100, 7, 3, "t", &s, &err) == -1);
  CHECK_MSG(err, "t: shapes fit no quantization");
  CHECK(mx_qspec_from_shapes(0, 5376, 588, 84, "q", &s, &err) == -1); /* 3.5 bits */
}

/* ---- small configs: defaults and edge cases -------------------------------------------- */

static void test_defaults(void) {
  mx_config c;
  mlxrt_error err = {{0}};
  /* A bare gemma3_text takes mlx-lm's ModelArgs defaults (the 1B). */
  CHECK(parse_str("{\"model_type\":\"gemma3_text\"}", &c, &err) == 0);
  CHECK(c.hidden_size == 1152 && c.num_layers == 26 && c.intermediate_size == 6912 &&
        c.num_heads == 4 && c.num_kv_heads == 1 && c.head_dim == 256 && c.vocab_size == 262144 &&
        c.sliding_window == 512 && c.max_position_embeddings == 32768 &&
        c.query_pre_attn_scalar == 256 && c.rms_norm_eps == 1e-6);
  CHECK(c.rope_full.theta == 1e6 && c.rope_sliding.theta == 1e4 && c.rope_full.kind == MX_ROPE_DEFAULT);
  CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 1 && c.bos_token_id == 2 && c.tie_word_embeddings);
  CHECK(c.layer_types[5] == MX_LAYER_FULL && c.layer_types[4] == MX_LAYER_SLIDING);
  mx_config_free(&c);
  /* A bare gemma4_text: the E2B-shaped defaults, pattern 5, 20 shared layers, double-wide.
   * (Below, 6-layer gemma4_text configs without layer_types therefore have layer 4 full.) */
  CHECK(parse_str("{\"model_type\":\"gemma4_text\"}", &c, &err) == 0);
  CHECK(c.hidden_size == 1536 && c.num_layers == 35 && c.num_kv_shared_layers == 20 &&
        c.use_double_wide_mlp && c.hidden_size_per_layer_input == 256 &&
        c.final_logit_softcap == 30.0 && c.global_head_dim == 512 && !c.num_global_kv_heads);
  CHECK(c.layer_types[4] == MX_LAYER_FULL && c.layer_types[3] == MX_LAYER_SLIDING &&
        c.layer_kv_source[34] == 14 && c.layer_intermediate[34] == 12288);
  CHECK(c.rope_full.kind == MX_ROPE_PROPORTIONAL && c.rope_full.partial_rotary == 0.25);
  mx_config_free(&c);
  /* gemma4 with no text_config at all: gemma4.py treats it as {}. */
  CHECK(parse_str("{\"model_type\":\"gemma4\",\"text_config\":null}", &c, &err) == 0 &&
        c.num_layers == 35);
  mx_config_free(&c);
  /* null softcap = none; null num_global_key_value_heads = keep num_key_value_heads;
   * null global_head_dim = head_dim (mlx-lm's truthiness test). */
  CHECK(parse_str("{\"model_type\":\"gemma4_text\",\"num_hidden_layers\":6,"
                  "\"num_kv_shared_layers\":0,\"final_logit_softcapping\":null,"
                  "\"global_head_dim\":null,\"attention_k_eq_v\":true,\"num_key_value_heads\":2,"
                  "\"num_global_key_value_heads\":null,\"eos_token_id\":null,"
                  "\"bos_token_id\":null}", &c, &err) == 0);
  CHECK(c.final_logit_softcap == 0 && c.layer_head_dim[4] == 256 && c.layer_kv_heads[4] == 2 &&
        c.layer_k_eq_v[4] && !c.layer_k_eq_v[5] && c.n_eos == 0 && c.bos_token_id == -1);
  mx_config_free(&c);
  /* num_global_key_value_heads only applies with attention_k_eq_v (HF and mlx-lm). */
  CHECK(parse_str("{\"model_type\":\"gemma4_text\",\"num_hidden_layers\":6,"
                  "\"num_kv_shared_layers\":0,\"num_key_value_heads\":4,"
                  "\"num_global_key_value_heads\":1}", &c, &err) == 0);
  CHECK(c.layer_types[4] == MX_LAYER_FULL && c.layer_kv_heads[4] == 4 && !c.layer_k_eq_v[4]);
  mx_config_free(&c);
  /* rope_parameters without a full_attention entry: mlx-lm's {} → default θ 1e4. */
  CHECK(parse_str("{\"model_type\":\"gemma4_text\",\"num_hidden_layers\":6,"
                  "\"num_kv_shared_layers\":0,\"rope_parameters\":{\"sliding_attention\":"
                  "{\"rope_type\":\"default\",\"rope_theta\":5000}}}", &c, &err) == 0);
  CHECK(c.rope_full.kind == MX_ROPE_DEFAULT && c.rope_full.theta == 1e4 &&
        c.rope_sliding.theta == 5000 && c.layer_rope_pairs[4] == 256 &&
        c.layer_rope_pairs[5] == 128);
  mx_config_free(&c);
  /* Proportional with an odd rotated width: int(512·0.3) = 153 dims → 77 live pairs. */
  CHECK(parse_str("{\"model_type\":\"gemma4_text\",\"num_hidden_layers\":6,"
                  "\"num_kv_shared_layers\":0,\"rope_parameters\":{\"full_attention\":"
                  "{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.3,"
                  "\"rope_theta\":1e6,\"factor\":2}}}", &c, &err) == 0);
  CHECK(c.layer_rope_pairs[4] == 77 && c.rope_full.factor == 2);
  mx_config_free(&c);
  /* Gemma 3 rope_scaling with "type" (older spelling) and a pattern of 3. */
  CHECK(parse_str(BASE3 "\"num_hidden_layers\":6,\"sliding_window_pattern\":3,"
                        "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4}}", &c, &err) == 0);
  CHECK(c.rope_full.kind == MX_ROPE_LINEAR && c.rope_full.factor == 4 &&
        c.layer_types[2] == MX_LAYER_FULL && c.layer_types[5] == MX_LAYER_FULL &&
        c.layer_types[3] == MX_LAYER_SLIDING);
  mx_config_free(&c);
  /* Max layers is accepted. */
  CHECK(parse_str(BASE3 "\"num_hidden_layers\":256}", &c, &err) == 0 && c.num_layers == 256);
  mx_config_free(&c);
  /* eos: an int, a list with duplicates, nested top-level ids win over text_config's. */
  CHECK(parse_str(BASE3 "\"eos_token_id\":[1,106,1,50]}", &c, &err) == 0 && c.n_eos == 3 &&
        c.eos_token_ids[2] == 50);
  mx_config_free(&c);
  CHECK(parse_str("{\"model_type\":\"gemma3\",\"eos_token_id\":7,\"text_config\":"
                  "{\"eos_token_id\":9,\"bos_token_id\":5}}", &c, &err) == 0);
  CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 7 && c.bos_token_id == 5);
  mx_config_free(&c);
}

/* ---- broken configs -------------------------------------------------------------------- */

static void test_bad_corpus(void) {
  char *list = slurp(CORPUS "/bad/expected.tsv");
  CHECK(list != NULL);
  if (!list) return;
  int cases = 0;
  char listed[256][96];
  int nlisted = 0;
  for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
    if (!line[0] || line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    CHECKF(tab != NULL, "expected.tsv line without a tab: %s", line);
    if (!tab) continue;
    *tab = 0;
    const char *file = line, *frag = tab + 1;
    if (nlisted < 256) snprintf(listed[nlisted++], 96, "%s", file);
    char path[512];
    snprintf(path, sizeof path, CORPUS "/bad/%s", file);
    size_t n;
    mlxrt_error err = {{0}};
    char *t = mx_read_file(path, &n, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) continue;
    mx_config c;
    int rc = mx_config_parse(t, file, &c, &err);
    CHECKF(rc == -1, "%s parsed but should fail with \"%s\"", file, frag);
    if (rc == 0) mx_config_free(&c);
    CHECKF(rc == -1 && strstr(err.msg, frag) && strncmp(err.msg, file, strlen(file)) == 0,
           "%s: message \"%s\" lacks \"%s\" or the file name", file, err.msg, frag);
    CHECK(c.overrides == NULL && c.num_layers == 0); /* left empty on failure */
    free(t);
    cases++;
  }
  /* Every file in bad/ has an expectation. */
  DIR *d = opendir(CORPUS "/bad");
  CHECK(d != NULL);
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 5, ".json")) continue;
    int found = 0;
    for (int i = 0; i < nlisted; i++) found |= !strcmp(listed[i], e->d_name);
    CHECKF(found, "bad/%s has no line in expected.tsv", e->d_name);
  }
  if (d) closedir(d);
  printf("%d broken configs gave their expected messages\n", cases);
  CHECK(cases >= 50);
  free(list);
}

/* ---- mx_config_load ------------------------------------------------------------------- */

static void write_file(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static void test_load(void) {
  char dir[] = "/tmp/mlxrt_test_config_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  mx_config c;
  mlxrt_error err = {{0}};
  CHECK(mx_config_load(dir, &c, &err) == -1);
  CHECK_MSG(err, "config.json: cannot open");
  write_file(dir, "config.json", BASE3 "\"eos_token_id\":[1,106]}");
  CHECK(mx_config_load(dir, &c, &err) == 0 && c.n_eos == 2);
  mx_config_free(&c);
  write_file(dir, "generation_config.json", "{\"eos_token_id\":[1,106,50],\"top_k\":64}");
  CHECK(mx_config_load(dir, &c, &err) == 0);
  CHECK(c.n_eos == 3 && c.eos_token_ids[0] == 1 && c.eos_token_ids[1] == 106 &&
        c.eos_token_ids[2] == 50);
  mx_config_free(&c);
  write_file(dir, "generation_config.json", "{\"eos_token_id\":107}");
  CHECK(mx_config_load(dir, &c, &err) == 0 && c.n_eos == 3 && c.eos_token_ids[2] == 107);
  mx_config_free(&c);
  write_file(dir, "generation_config.json", "{\"eos_token_id\":\"x\"}");
  CHECK(mx_config_load(dir, &c, &err) == -1);
  CHECK_MSG(err, "generation_config.json: field 'eos_token_id' must be a token id");
  write_file(dir, "generation_config.json", "{\"eos_token_id\":[1,");
  CHECK(mx_config_load(dir, &c, &err) == -1);
  CHECK_MSG(err, "generation_config.json: not a valid JSON object");
  write_file(dir, "config.json", "{\"model_type\":\"gemma5\"}");
  CHECK(mx_config_load(dir, &c, &err) == -1);
  CHECK_MSG(err, "/config.json: unknown model_type \"gemma5\"");
  char p[600];
  snprintf(p, sizeof p, "%s/config.json", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/generation_config.json", dir);
  unlink(p);
  rmdir(dir);
}

/* ---- robustness ------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)rng;
}

/* Truncations and byte mutations of every good config: parse must return 0 or -1 with a
 * message, never crash or leak (ASan build). */
/* transformers' Gemma4AssistantConfig as save_pretrained writes it (the MTP fixture's). */
static void test_assistant(void) {
  mx_config c;
  if (parse_good("gemma4-assistant.json", &c)) return;
  CHECK(c.assistant && c.family == MX_GEMMA4 && c.nested && c.backbone_hidden_size == 128);
  CHECK(c.use_ordered_embeddings && c.num_centroids == 12 && c.centroid_top_k == 4);
  CHECK(c.vocab_size == 384 && c.hidden_size == 96 && c.num_layers == 2 && c.first_kv_shared_layer == 0);
  CHECK(c.layer_kv_source[0] == -1 && c.layer_kv_source[1] == -1 && !c.layer_k_eq_v[1]);
  CHECK(c.layer_head_dim[0] == 16 && c.layer_kv_heads[0] == 2 && c.layer_head_dim[1] == 32 && c.layer_kv_heads[1] == 1);
  CHECK(c.vocab_size_per_layer_input == 0 && c.hidden_size_per_layer_input == 0);
  mx_config_free(&c);
}

static void test_mutations(void) {
  static const char *files[] = {"gemma4-31b.json", "gemma4-e2b.json", "gemma3-4b.json",
                                "gemma4-26b-a4b.json", "gemma4-31b-per-layer-config.json", "gemma4-assistant.json"};
  static const char junk[] = "{}[]\",:0-9.eEtrufalsn \x01\xff";
  int runs = 0, ok = 0;
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    char path[256];
    snprintf(path, sizeof path, CORPUS "/good/%s", files[f]);
    char *t = slurp(path);
    if (!t) continue;
    size_t n = strlen(t);
    char *buf = malloc(n + 1);
    for (size_t cut = 0; cut < n; cut += 1 + n / 400) {
      memcpy(buf, t, cut);
      buf[cut] = 0;
      mx_config c;
      mlxrt_error err = {{0}};
      int rc = mx_config_parse(buf, "m.json", &c, &err);
      CHECK(rc == 0 || (rc == -1 && err.msg[0]));
      ok += rc == 0;
      if (rc == 0) mx_config_free(&c);
      runs++;
    }
    for (int it = 0; it < 600; it++) {
      memcpy(buf, t, n + 1);
      int edits = 1 + next_rand() % 4;
      for (int e = 0; e < edits; e++) buf[next_rand() % n] = junk[next_rand() % (sizeof junk - 1)];
      mx_config c;
      mlxrt_error err = {{0}};
      int rc = mx_config_parse(buf, "m.json", &c, &err);
      CHECK(rc == 0 || (rc == -1 && err.msg[0]));
      if (rc == 0) {
        /* Whatever parsed must be internally consistent. */
        int good = c.num_layers > 0 && c.num_layers <= MX_MAX_LAYERS;
        for (int i = 0; good && i < c.num_layers; i++)
          good = c.layer_kv_heads[i] > 0 && c.num_heads % c.layer_kv_heads[i] == 0 &&
                 (c.assistant ? c.layer_kv_source[i] == -1 : c.layer_kv_source[i] >= 0 && c.layer_kv_source[i] <= i) &&
                 c.layer_head_dim[i] > 0 && c.layer_rope_pairs[i] <= c.layer_head_dim[i] / 2;
        CHECKF(good, "mutated %s parsed into an inconsistent plan", files[f]);
        (void)mx_config_qspec(&c, "language_model.model.layers.0.mlp.down_proj");
        mx_config_free(&c);
        ok++;
      }
      runs++;
    }
    free(buf);
    free(t);
  }
  printf("%d mutated configs parsed without a crash (%d accepted)\n", runs, ok);
}

int main(void) {
  test_assistant();
  test_mlx_lm_plans();
  test_gemma4_31b();
  test_gemma4_small();
  test_gemma3();
  test_per_layer_config();
  test_quantization();
  test_defaults();
  test_bad_corpus();
  test_load();
  test_mutations();
  TEST_END();
}
