/* The public API (include/mlxrt.h) over the model layer. */
#include <stdlib.h>

#include <string.h>

#include "base/error.h"
#include "mlx/api_internal.h"
#include "mlx/decoder_desc.h"
#include "mlx/sampler.h"
#include "mlx/tokenizer.h"

mlxrt_model *mlxrt_model_load(const char *dir, const mlxrt_options *opt, mlxrt_error *err) {
  mlxrt_model *M = mx_calloc(1, sizeof *M, err);
  if (!M) return NULL;
  M->m = mx_model_open(dir, err);
  if (!M->m) {
    free(M);
    return NULL;
  }
  accel_options ao = {0};
  if (opt) {
    ao.backend = opt->backend;
    ao.threads = opt->threads;
    ao.verbose = opt->verbose;
    ao.numerics = opt->numerics;
    ao.kv_k = opt->kv_k;
  }
  /* stop ids: the model's eos ids and the chat turn terminator (what mlxrt_chat stops at) */
  if (mx_gen_config_load(M->m->path, &M->stops, err)) {
    mx_model_close(M->m);
    free(M);
    return NULL;
  }
  M->end_of_turn_id = -1;
  if (M->m->tok) {
    const char *eot = M->m->cfg.family == MX_GEMMA4 ? "<turn|>" : "<end_of_turn>";
    M->end_of_turn_id = mx_tok_token_to_id(M->m->tok, eot, strlen(eot));
    if (mx_gen_config_add_eos(&M->stops, M->end_of_turn_id, err)) {
      mx_model_close(M->m);
      free(M);
      return NULL;
    }
  }
  mx_model_stats_compute(M->m, &M->stats);
  mx_model_quant_label(M->m, M->quant, sizeof M->quant);
  M->b = accel_create(&ao, err);
  if (!M->b) {
    mx_model_close(M->m);
    free(M);
    return NULL;
  }
  return M;
}

void mlxrt_model_free(mlxrt_model *M) {
  if (!M) return;
  accel_destroy(M->b);
  mx_model_close(M->m);
  free(M);
}

int mlxrt_model_vocab_size(const mlxrt_model *M) { return M->m->cfg.vocab_size; }
const char *mlxrt_model_backend_name(const mlxrt_model *M) { return M->b->name; }

mlxrt_session *mlxrt_session_new(mlxrt_model *M, int64_t capacity, mlxrt_error *err) {
  return mlxrt_session_new_ex(M, capacity, 0, err);
}

mlxrt_session *mlxrt_session_new_ex(mlxrt_model *M, int64_t capacity, unsigned flags, mlxrt_error *err) {
  if (M->m->cfg.assistant) {
    mx_fail(err, "%s is a gemma4_assistant (an MTP drafter): it reads the K/V and hidden state of the Gemma 4 "
                 "model it drafts for and runs only as that model's draft model (--draft-model)", M->m->path);
    return NULL;
  }
  mlxrt_session *S = mx_calloc(1, sizeof *S, err);
  if (!S) return NULL;
  S->model = M;
  S->s = mx_session_create_flags(M->m, M->b, capacity, 0,
                                 (flags & MLXRT_SESSION_ALL_POSITIONS) ? MX_SESSION_REFERENCE : 0u, err);
  if (!S->s || !(S->ids = mx_malloc((size_t)mx_session_capacity(S->s) * sizeof *S->ids, err))) {
    mx_session_free(S->s);
    free(S);
    return NULL;
  }
  return S;
}

void mx_api_session_track(mlxrt_session *S, const int32_t *tokens, int64_t pos0) {
  const int64_t pos = mx_session_pos(S->s);
  if (pos > pos0) memcpy(S->ids + pos0, tokens, (size_t)(pos - pos0) * sizeof *tokens);
}

void mlxrt_session_free(mlxrt_session *S) {
  if (!S) return;
  mlxrt_session_free(S->draft);
  mx_session_free(S->s);
  free(S->ids);
  free(S);
}

int mlxrt_session_feed(mlxrt_session *S, const int32_t *tokens, int64_t n, float *logits,
                       int all_positions, mlxrt_error *err) {
  const int64_t pos0 = mx_session_pos(S->s);
  const int rc = mx_session_feed(S->s, tokens, n, logits, all_positions, err);
  mx_api_session_track(S, tokens, pos0);
  return rc;
}

int mlxrt_session_step_greedy(mlxrt_session *S, int32_t token, int32_t *next, mlxrt_error *err) {
  const int64_t pos0 = mx_session_pos(S->s);
  const int rc = mx_session_step_greedy(S->s, token, next, err);
  mx_api_session_track(S, &token, pos0);
  return rc;
}

mlxrt_sampler *mlxrt_sampler_new(const mlxrt_model *M, const mlxrt_gen_params *g, mlxrt_error *err) {
  mx_sampler_params sp;
  mx_sampler_params_default(&sp);
  if (g) mx_gen_params_apply_sampling(g, &sp);
  mlxrt_sampler *S = mx_calloc(1, sizeof *S, err);
  if (!S) return NULL;
  if (!(S->s = mx_sampler_create(&sp, M->m->cfg.vocab_size, err))) {
    free(S);
    return NULL;
  }
  return S;
}

void mlxrt_sampler_free(mlxrt_sampler *S) {
  if (!S) return;
  mx_sampler_free(S->s);
  free(S);
}

int mlxrt_session_step_sample(mlxrt_session *S, int32_t token, mlxrt_sampler *smp, int32_t *next,
                              mlxrt_error *err) {
  mx_sampler_accept(smp->s, token);
  const int64_t pos0 = mx_session_pos(S->s);
  const int rc = mx_session_step_sample(S->s, token, smp->s, next, err);
  mx_api_session_track(S, &token, pos0);
  return rc;
}

int64_t mlxrt_session_position(const mlxrt_session *S) { return mx_session_pos(S->s); }

int mlxrt_session_memory(const mlxrt_session *S, mlxrt_memory *out, mlxrt_error *err) {
  return mx_session_memory(S->s, out, err);
}
void mlxrt_session_reset(mlxrt_session *S) {
  mx_session_rewind(S->s, 0);
  if (S->draft) mx_session_rewind(S->draft->s, 0);
}

int64_t mlxrt_session_rewind(mlxrt_session *S, int64_t pos) {
  if (pos < 0 || pos > mx_session_pos(S->s)) return -1;
  return mx_session_rewind(S->s, pos);
}

const int32_t *mlxrt_session_tokens(const mlxrt_session *S, size_t *n) {
  if (n) *n = (size_t)mx_session_pos(S->s);
  return S->ids;
}

void mlxrt_model_get_info(const mlxrt_model *M, mlxrt_model_info *info) {
  const mx_config *c = &M->m->cfg;
  info->variant = mx_config_variant(c);
  info->model_type = c->model_type;
  info->quant = M->quant;
  info->n_layers = c->num_layers;
  info->hidden_size = c->hidden_size;
  info->vocab_size = c->vocab_size;
  info->sliding_window = c->sliding_window;
  info->params = M->stats.params;
  info->bytes_on_disk = M->stats.bytes_on_disk;
  info->bytes_per_token = M->stats.bytes_per_token;
  info->batched_steps = M->b->decoder_batch_shares_reads && M->b->decoder_batch_init && !M->b->mlx_cpu_numerics &&
                        mx_decoder_supported(M->m);
}

uint64_t mlxrt_model_kv_bytes_per_token(const mlxrt_model *M, int64_t depth) { return mx_model_kv_read_bytes(M->m, depth); }

uint64_t mlxrt_session_kv_read_bytes(const mlxrt_session *S, int64_t depth) {
  return mx_session_kv_read_bytes(S->s, depth);
}

double mlxrt_model_read_bandwidth(mlxrt_model *M) {
  return M->b->read_bandwidth ? M->b->read_bandwidth(M->b) : 0.0;
}
