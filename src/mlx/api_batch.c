/* Batched decode (mlxrt.h mlxrt_batch_*): the backend's decoder with sequence slots
 * (accel.h decoder_batch_init / slot_prompt / batch_step); this layer keeps each slot's
 * position and checks every request before the backend sees it. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/error.h"
#include "decoder_desc.h"

struct mlxrt_batch {
  mlxrt_model *model;
  mx_decoder *x;
  int slots;
  int64_t capacity;
  int64_t *pos; /* per slot: tokens its sequence holds (0: none) */
  int64_t *rpos;
  accel_sample_params *sp; /* a step's rows' sampling parameters and uniforms */
  double *u;
};

int mx_api_check_slots(const mlxrt_model *M, int slots, int64_t capacity, const char *what, mlxrt_error *err) {
  const int64_t most = M->m->cfg.max_position_embeddings;
  if (slots < 1 || slots > 256) return mx_fail(err, "%s: %d slots (1 to 256)", what, slots);
  if (capacity < 1 || (most > 0 && capacity > most))
    return mx_fail(err, "%s: a capacity of %lld tokens per slot (1 to the model's %lld)", what, (long long)capacity,
                   (long long)most);
  if (M->m->cfg.assistant)
    return mx_fail(err, "%s is a gemma4_assistant (an MTP drafter): it runs only as a draft model", M->m->path);
  if (M->b->mlx_cpu_numerics)
    return mx_fail(err, "%s: it runs the backend's decoder, which does not emulate mlx-cpu numerics", what);
  return 0;
}

mlxrt_batch *mlxrt_batch_new(mlxrt_model *M, int slots, int64_t capacity, mlxrt_error *err) {
  if (mx_api_check_slots(M, slots, capacity, "batched decode", err)) return NULL;
  if (!M->b->decoder_batch_init) {
    mx_fail(err, "batched decode: the %s backend has none (sessions run one sequence each)", M->b->name);
    return NULL;
  }
  mlxrt_batch *B = mx_calloc(1, sizeof *B, err);
  if (!B) return NULL;
  B->model = M;
  B->slots = slots;
  B->capacity = capacity;
  if (!(B->pos = mx_calloc((size_t)slots, sizeof *B->pos, err)) ||
      !(B->rpos = mx_calloc((size_t)slots, sizeof *B->rpos, err)) ||
      !(B->sp = mx_calloc((size_t)slots, sizeof *B->sp, err)) || !(B->u = mx_calloc((size_t)slots, sizeof *B->u, err)))
    goto fail;
  B->x = mx_decoder_open(M->m, M->b, capacity, M->b->verbose, err);
  if (!B->x) {
    if (!err->msg[0]) mx_fail(err, "batched decode: the %s decoder does not run this model", M->b->name);
    goto fail;
  }
  if (M->b->decoder_batch_init(B->x->dec, slots, err)) goto fail;
  return B;
fail:
  mlxrt_batch_free(B);
  return NULL;
}

void mlxrt_batch_free(mlxrt_batch *B) {
  if (!B) return;
  mx_decoder_close(B->x);
  free(B->pos);
  free(B->rpos);
  free(B->sp);
  free(B->u);
  free(B);
}

int mlxrt_batch_prompt(mlxrt_batch *B, int slot, const int32_t *tokens, int64_t n, int32_t *next, mlxrt_error *err) {
  if (slot < 0 || slot >= B->slots) return mx_fail(err, "batched decode: slot %d of %d", slot, B->slots);
  if (n < 1 || n >= B->capacity)
    return mx_fail(err, "batched decode: slot %d: a prompt of %lld tokens (1 to %lld: the capacity leaves room for "
                   "one more)", slot, (long long)n, (long long)B->capacity - 1);
  if (!tokens || !next) return mx_fail(err, "batched decode: slot %d: no tokens or no output", slot);
  B->pos[slot] = 0; /* dropped first: a failed prompt leaves the slot empty */
  const accel_backend *b = B->model->b;
  if (b->decoder_slot_prompt(B->x->dec, slot, tokens, n, 0, NULL, 0.0, NULL, next, err)) return -1;
  B->pos[slot] = n;
  return 0;
}

/* The rows checked (slots holding a sequence with room for one more token), their positions in
 * B->rpos. */
static int check_rows(mlxrt_batch *B, int n, const int *slots, const int32_t *tokens, const int32_t *next,
                      mlxrt_error *err) {
  if (n < 1 || n > B->slots) return mx_fail(err, "batched decode: a step of %d sequences (1 to %d)", n, B->slots);
  if (!slots || !tokens || !next) return mx_fail(err, "batched decode: no slots, tokens or output");
  for (int r = 0; r < n; r++) {
    const int s = slots[r];
    if (s < 0 || s >= B->slots) return mx_fail(err, "batched decode: row %d: slot %d of %d", r, s, B->slots);
    if (B->pos[s] < 1) return mx_fail(err, "batched decode: row %d: slot %d holds no sequence (a prompt first)", r, s);
    if (B->pos[s] >= B->capacity)
      return mx_fail(err, "batched decode: row %d: slot %d is full (%lld tokens)", r, s, (long long)B->capacity);
    B->rpos[r] = B->pos[s];
  }
  return 0;
}

static int step(mlxrt_batch *B, int n, const int *slots, const int32_t *tokens, int sampled, int32_t *next,
                mlxrt_error *err) {
  const accel_backend *b = B->model->b;
  if (b->decoder_batch_step(B->x->dec, n, slots, tokens, B->rpos, sampled ? B->sp : NULL, sampled ? B->u : NULL, NULL,
                            next, err))
    return -1;
  for (int r = 0; r < n; r++) B->pos[slots[r]]++;
  return 0;
}

int mlxrt_batch_step(mlxrt_batch *B, int n, const int *slots, const int32_t *tokens, int32_t *next,
                     mlxrt_error *err) {
  return check_rows(B, n, slots, tokens, next, err) || step(B, n, slots, tokens, 0, next, err) ? -1 : 0;
}

int mlxrt_batch_step_sample(mlxrt_batch *B, int n, const int *slots, const int32_t *tokens,
                            struct mlxrt_sampler *const *samplers, int32_t *next, mlxrt_error *err) {
  if (check_rows(B, n, slots, tokens, next, err)) return -1;
  if (!samplers) return mx_fail(err, "batched decode: no samplers");
  for (int r = 0; r < n; r++) {
    const mx_sampler_params *p = samplers[r] ? mx_sampler_get_params(samplers[r]->s) : NULL;
    if (p && p->repetition_penalty != 1.0f)
      return mx_fail(err, "batched decode: row %d: a repetition penalty needs the logits on the host; the batch draws "
                     "in the backend, from the logits alone", r);
  }
  for (int r = 0; r < n; r++) { /* as mlxrt_session_step_sample on a decoder */
    const mx_sampler_params *p = samplers[r] ? mx_sampler_get_params(samplers[r]->s) : NULL;
    if (samplers[r]) mx_sampler_accept(samplers[r]->s, tokens[r]);
    B->sp[r] = p ? (accel_sample_params){p->temperature, p->top_k, p->top_p, p->min_p} : (accel_sample_params){0};
    B->u[r] = p && p->temperature > 0.0f ? mx_sampler_uniform(samplers[r]->s) : 0.0;
  }
  return step(B, n, slots, tokens, 1, next, err);
}

int64_t mlxrt_batch_position(const mlxrt_batch *B, int slot) {
  return slot >= 0 && slot < B->slots ? B->pos[slot] : 0;
}

int mlxrt_batch_memory(const mlxrt_batch *B, mlxrt_memory *out, mlxrt_error *err) {
  memset(out, 0, sizeof *out);
  accel_backend *b = B->x->b;
  if (!b->decoder_memory) return mx_fail(err, "the %s decoder does not report its memory", b->name);
  accel_memory am;
  if (b->decoder_memory(B->x->dec, &am, err)) return -1;
  *out = (mlxrt_memory){am.kv_bytes, am.kv_positions, am.device_used, am.device_total};
  return 0;
}
