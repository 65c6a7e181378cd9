/* The generation loop shared by mlxrt_session_generate and mlxrt_chat (generate_core.c). */
#ifndef MLXRT_MLX_GENERATE_CORE_H
#define MLXRT_MLX_GENERATE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "mlx/gen_config.h"
#include "mlx/sampler.h"
#include "mlxrt.h"

typedef struct mx_gen_request {
  const int32_t *prompt;      /* the whole prompt; the session keeps what it shares with it */
  size_t n;
  mx_sampler *smp;            /* the caller's; every prompt and answer token is accepted into it */
  const mx_gen_config *stops; /* ids that end the answer */
  int max_tokens;             /* <= 0: until a stop token or a full context */
  int logprobs, top_logprobs; /* mlxrt_generate_options */
  volatile int *cancel;
  int ignore_stop;
  int skip_special;           /* the text drops special tokens */
  mlxrt_token_fn fn;          /* may be NULL */
  /* may be NULL: receives the bytes the streaming decoder still held when the answer ended on
   * a stop token, a cancel or the callback's request (a last token of max_tokens or a full
   * context carries them itself); they are whole characters or U+FFFD */
  void (*tail)(void *user, const char *text, size_t len);
  void *user;                 /* for fn and tail */
  const mlxrt_spec_options *spec; /* may be NULL: no speculative decoding */
} mx_gen_request;

/* mlxrt_session_generate's semantics with the caller's sampler, stop ids and text mode. */
int mx_generate(mlxrt_session *S, const mx_gen_request *r, mlxrt_gen_stats *st, mlxrt_error *err);

#endif
