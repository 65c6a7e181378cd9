/* The public handles' insides, shared by the files that implement include/mlxrt.h (api.c,
 * api_tokens.c, generate_core.c, generate.c). Not part of the public API. */
#ifndef MLXRT_MLX_API_INTERNAL_H
#define MLXRT_MLX_API_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "mlx/gen_config.h"
#include "mlx/model.h"
#include "mlx/sampler.h"
#include "mlx/session.h"
#include "mlxrt.h"

struct mlxrt_model {
  mx_model *m;
  accel_backend *b;
  mx_model_stats stats;
  char quant[48];
  mx_gen_config stops; /* generation_config eos ids + the chat turn terminator */
  int end_of_turn_id;  /* the turn terminator's id, -1 without a tokenizer */
};

struct mlxrt_sampler {
  mx_sampler *s;
};

/* A session and the ids its cache holds: ids[0..mx_session_pos) always. */
struct mlxrt_session {
  mlxrt_model *model;
  mx_session *s;
  int32_t *ids; /* capacity entries, allocated with the session */
  mlxrt_session *draft; /* speculative decoding's draft-model session, kept between calls */
};

/* 0 when a batch or a pool of `slots` slots of `capacity` tokens can be made on the model
 * (what: the message's subject), else -1 saying what is out of range. */
int mx_api_check_slots(const mlxrt_model *M, int slots, int64_t capacity, const char *what, mlxrt_error *err);

/* After tokens were fed starting at position pos0 (the call may have stopped part way): records
 * the ones the cache now holds. */
void mx_api_session_track(mlxrt_session *S, const int32_t *tokens, int64_t pos0);

#endif
