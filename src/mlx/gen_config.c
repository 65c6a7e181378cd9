/* generation_config.json / config.json → stop ids and sampling defaults (see gen_config.h). */
#include "mlx/gen_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"

static const char *const CONFIG_NAME = "config.json";
static const char *const GEN_NAME = "generation_config.json";

/* A non-negative integer that fits an int, given as a JSON number. */
static int as_token_id(const cJSON *v, int *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0.0 && d <= 2147483647.0) || d != floor(d)) return 0;
  *out = (int)d;
  return 1;
}

/* eos_token_id: an id or a list of ids (null or absent: *found = 0). */
static int read_eos(const cJSON *obj, const char *file, mx_gen_config *g, int *found,
                    mlxrt_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "eos_token_id");
  *found = 0;
  if (!v || cJSON_IsNull(v)) return 0;
  int id;
  if (as_token_id(v, &id)) {
    *found = 1;
    return mx_gen_config_add_eos(g, id, err) ? mx_prefix(err, "%s", file) : 0;
  }
  if (!cJSON_IsArray(v))
    return mx_fail(err, "%s: field eos_token_id: expected an integer or a list of integers", file);
  const cJSON *it;
  int i = 0;
  cJSON_ArrayForEach(it, v) {
    if (!as_token_id(it, &id))
      return mx_fail(err, "%s: field eos_token_id[%d]: expected a non-negative integer", file, i);
    if (mx_gen_config_add_eos(g, id, err)) return mx_prefix(err, "%s", file);
    i++;
  }
  *found = i > 0;
  return 0;
}

/* Optional integer id field (bos_token_id, pad_token_id); keeps *out when absent or null. */
static int read_id(const cJSON *obj, const char *name, const char *file, int *out,
                   mlxrt_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!as_token_id(v, out))
    return mx_fail(err, "%s: field %s: expected a non-negative integer", file, name);
  return 0;
}

/* Optional number in [lo, hi]; range is the wording for the message. */
static int read_number(const cJSON *obj, const char *name, const char *file, double lo, double hi,
                       const char *range, int *has, float *out, mlxrt_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
    return mx_fail(err, "%s: field %s: expected a number %s", file, name, range);
  *has = 1;
  *out = (float)v->valuedouble;
  return 0;
}

static int parse_generation(const cJSON *gen, mx_gen_config *g, int *found_eos,
                            mlxrt_error *err) {
  const char *f = GEN_NAME;
  if (!cJSON_IsObject(gen)) return mx_fail(err, "%s: expected a JSON object", f);
  if (read_eos(gen, f, g, found_eos, err)) return -1;
  if (read_id(gen, "bos_token_id", f, &g->bos_id, err)) return -1;
  if (read_id(gen, "pad_token_id", f, &g->pad_id, err)) return -1;
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(gen, "do_sample");
  if (ds && !cJSON_IsNull(ds)) {
    if (!cJSON_IsBool(ds)) return mx_fail(err, "%s: field do_sample: expected true or false", f);
    g->has_do_sample = 1;
    g->do_sample = cJSON_IsTrue(ds);
  }
  if (read_number(gen, "temperature", f, 0.0, 1e30, ">= 0", &g->has_temperature,
                  &g->temperature, err) ||
      read_number(gen, "top_p", f, 0.0, 1.0, "in [0, 1]", &g->has_top_p, &g->top_p, err) ||
      read_number(gen, "min_p", f, 0.0, 1.0, "in [0, 1]", &g->has_min_p, &g->min_p, err) ||
      read_number(gen, "repetition_penalty", f, 1e-30, 1e30, "> 0", &g->has_repetition_penalty,
                  &g->repetition_penalty, err))
    return -1;
  const cJSON *tk = cJSON_GetObjectItemCaseSensitive(gen, "top_k");
  if (tk && !cJSON_IsNull(tk)) {
    int k;
    if (!as_token_id(tk, &k))
      return mx_fail(err, "%s: field top_k: expected a non-negative integer", f);
    g->has_top_k = 1;
    g->top_k = k;
  }
  return 0;
}

int mx_gen_config_parse(const char *config_json, const char *gen_json, mx_gen_config *out,
                        mlxrt_error *err) {
  memset(out, 0, sizeof *out);
  out->bos_id = out->pad_id = -1;
  int found_gen_eos = 0, rc = -1;
  /* trailing bytes after the value are corruption, as everywhere else */
  cJSON *cfg = cJSON_ParseWithOpts(config_json, NULL, 1), *gen = NULL;
  if (!cfg || !cJSON_IsObject(cfg)) {
    mx_fail(err, "%s: not a valid JSON object", CONFIG_NAME);
    goto done;
  }
  if (gen_json) {
    gen = cJSON_ParseWithOpts(gen_json, NULL, 1);
    if (!gen) {
      mx_fail(err, "%s: not valid JSON", GEN_NAME);
      goto done;
    }
    if (parse_generation(gen, out, &found_gen_eos, err)) goto done;
  }
  /* config.json: its ids are used only where generation_config.json gave none. */
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
  const cJSON *scopes[2] = {cfg, cJSON_IsObject(text) ? text : NULL};
  for (int s = 0; s < 2 && scopes[s]; s++) {
    if (!found_gen_eos && out->n_eos == 0) {
      int found;
      if (read_eos(scopes[s], CONFIG_NAME, out, &found, err)) goto done;
    }
    if (out->bos_id < 0 && read_id(scopes[s], "bos_token_id", CONFIG_NAME, &out->bos_id, err))
      goto done;
    if (out->pad_id < 0 && read_id(scopes[s], "pad_token_id", CONFIG_NAME, &out->pad_id, err))
      goto done;
  }
  rc = 0;
done:
  cJSON_Delete(cfg);
  cJSON_Delete(gen);
  return rc;
}

/* Reads dir/name; a NUL byte inside would hide the rest of the text from the JSON parser. */
static char *read_json(const char *dir, const char *name, int optional, int *absent,
                       mlxrt_error *err) {
  char *path = mx_path_join(dir, name, err);
  if (!path) return NULL;
  struct stat st;
  char *text = NULL;
  size_t len = 0;
  *absent = optional && lstat(path, &st) != 0 && errno == ENOENT;
  if (!*absent && (text = mx_read_file(path, &len, err)) && strlen(text) != len) {
    mx_fail(err, "%s: contains a NUL byte at offset %zu", path, strlen(text));
    free(text);
    text = NULL;
  }
  free(path);
  return text;
}

int mx_gen_config_load(const char *dir, mx_gen_config *out, mlxrt_error *err) {
  int absent;
  char *cfg = read_json(dir, CONFIG_NAME, 0, &absent, err);
  if (!cfg) return -1;
  char *gen = read_json(dir, GEN_NAME, 1, &absent, err);
  if (!gen && !absent) {
    free(cfg);
    return -1;
  }
  int rc = mx_gen_config_parse(cfg, gen, out, err);
  if (rc) mx_prefix(err, "%s", dir);
  free(cfg);
  free(gen);
  return rc;
}

int mx_gen_config_add_eos(mx_gen_config *g, int id, mlxrt_error *err) {
  if (id < 0 || mx_gen_config_is_eos(g, id)) return 0;
  if (g->n_eos == MX_GEN_MAX_EOS)
    return mx_fail(err, "field eos_token_id: more than %d stop ids", MX_GEN_MAX_EOS);
  g->eos_ids[g->n_eos++] = id;
  return 0;
}

int mx_gen_config_is_eos(const mx_gen_config *g, int id) {
  for (int i = 0; i < g->n_eos; i++)
    if (g->eos_ids[i] == id) return 1;
  return 0;
}

void mx_gen_config_apply_sampling(const mx_gen_config *g, mx_sampler_params *p) {
  if (g->has_temperature) p->temperature = g->temperature;
  if (g->has_do_sample) {
    if (!g->do_sample) p->temperature = 0.0f;
    else if (!g->has_temperature) p->temperature = 1.0f;
  }
  if (g->has_top_k) p->top_k = g->top_k;
  if (g->has_top_p) p->top_p = g->top_p;
  if (g->has_min_p) p->min_p = g->min_p;
  if (g->has_repetition_penalty) p->repetition_penalty = g->repetition_penalty;
}

void mx_gen_params_apply_sampling(const mlxrt_gen_params *g, mx_sampler_params *p) {
  if (g->temperature >= 0) p->temperature = g->temperature;
  if (g->top_k >= 0) p->top_k = g->top_k;
  if (g->top_p >= 0) p->top_p = g->top_p;
  if (g->min_p >= 0) p->min_p = g->min_p;
  if (g->repetition_penalty >= 0) p->repetition_penalty = g->repetition_penalty;
  if (g->repetition_window >= 0) p->repetition_window = g->repetition_window;
  if (g->seed_set) p->seed = g->seed;
}
