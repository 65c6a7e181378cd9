/* Generation settings a model directory carries: stop (eos) ids and sampling defaults, from
 * generation_config.json (optional) and config.json.
 *
 * Stop ids follow mlx-lm (utils.py load): generation_config.json's eos_token_id when it has one,
 * else config.json's (top level, else text_config). Both accept an integer or a list. The caller
 * adds the tokenizer's own eos id with mx_gen_config_add_eos.
 * Sampling fields are recorded only when present; mx_gen_config_apply_sampling copies them onto
 * sampler parameters (do_sample false → greedy; do_sample true without temperature → 1.0, the HF
 * default). Fields that are absent leave the caller's values alone. */
#ifndef MLXRT_MLX_GEN_CONFIG_H
#define MLXRT_MLX_GEN_CONFIG_H

#include "mlx/sampler.h"
#include "mlxrt.h"

#define MX_GEN_MAX_EOS 16

typedef struct mx_gen_config {
  int eos_ids[MX_GEN_MAX_EOS];
  int n_eos;
  int bos_id, pad_id; /* -1 when absent */

  int has_do_sample, do_sample;
  int has_temperature, has_top_k, has_top_p, has_min_p, has_repetition_penalty;
  float temperature, top_p, min_p, repetition_penalty;
  int top_k;
} mx_gen_config;

/* Reads dir/config.json (required) and dir/generation_config.json (used when it exists). */
int mx_gen_config_load(const char *dir, mx_gen_config *out, mlxrt_error *err);

/* The same from the texts (gen_json may be NULL: no generation_config.json). The names are used
 * in messages. */
int mx_gen_config_parse(const char *config_json, const char *gen_json, mx_gen_config *out,
                        mlxrt_error *err);

/* Adds an id to the stop list unless it is there already (ignored when < 0). */
int mx_gen_config_add_eos(mx_gen_config *g, int id, mlxrt_error *err);
int mx_gen_config_is_eos(const mx_gen_config *g, int id);

/* Copies the sampling fields present onto p (see the header comment). */
void mx_gen_config_apply_sampling(const mx_gen_config *g, mx_sampler_params *p);
/* Copies the caller's settings onto p: every field of g that is set (≥ 0; the seed when
 * seed_set) wins over p's. */
void mx_gen_params_apply_sampling(const mlxrt_gen_params *g, mx_sampler_params *p);

#endif
