/* A step pool: one backend decoder with sequence slots (accel.h decoder_batch_*) shared by
 * sessions that run in different threads, each session owning a slot. A one-token step of a
 * session joins the pool's next batched step; the step runs when every sequence of the
 * previous step has come back with its next token or has left, or after POOL_WAIT_NS, so
 * sessions decoding at the same time read each weight once per step for all of them. Prompts
 * run on the same decoder one piece (the backend's prompt chunk) at a time, taking turns with
 * the steps, so that a long prompt slows the others' steps without stopping them.
 * Every function here is safe to call from any thread; one slot is used by one thread at a
 * time. Names no backend. */
#ifndef MLXRT_MLX_STEP_POOL_H
#define MLXRT_MLX_STEP_POOL_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlx/model.h"

typedef struct mx_pool mx_pool;

/* A decoder of `slots` slots of `capacity` positions each on backend b. NULL with err set when
 * the backend has no batched decode or does not run m. */
mx_pool *mx_pool_create(const mx_model *m, accel_backend *b, int slots, int64_t capacity, mlxrt_error *err);
/* Frees the decoder; every slot must have been released. */
void mx_pool_free(mx_pool *p);
int mx_pool_slots(const mx_pool *p);
int64_t mx_pool_capacity(const mx_pool *p);

/* A free slot (its sequence empty), or -1 when all are taken. */
int mx_pool_acquire(mx_pool *p);
/* The slot's sequence leaves the batch and the slot is free again. */
void mx_pool_release(mx_pool *p, int slot);

/* tokens[0..n) at positions pos..pos+n-1 of the slot's sequence (positions ≥ pos forgotten
 * first, decoder_step's ring rule), in pieces taking turns with the batched steps; the
 * sequence leaves the batch first. logits / next: of the last token, as decoder_step gives them
 * (sp NULL: greedy). *cancel (may be NULL) non-zero stops between pieces: returns 1 and *done
 * says how many tokens were fed; 0 when all were, -1 with err. */
int mx_pool_feed(mx_pool *p, int slot, const int32_t *tokens, int64_t n, int64_t pos, const accel_sample_params *sp,
                 double u, float *logits, int32_t *next, const volatile int *cancel, int64_t *done,
                 mlxrt_error *err);
/* One token at position pos of the slot's sequence, in the next batched step: next receives
 * the token drawn with sp and u (sp NULL: greedy), logits (may be NULL) its [vocab] logits. */
int mx_pool_step(mx_pool *p, int slot, int32_t token, int64_t pos, const accel_sample_params *sp, double u,
                 float *logits, int32_t *next, mlxrt_error *err);
/* The slot's sequence will not step again soon: the next batched step does not wait for it. */
void mx_pool_leave(mx_pool *p, int slot);
/* Since the pool was made: batched steps, the rows they stepped, prompt pieces fed; and the
 * rows waiting for the next step now. */
typedef struct mx_pool_stats {
  int64_t steps, rows, prompt_pieces, waiting;
} mx_pool_stats;
/* hold non-zero: no batched step starts (the rows gather) until a call with 0; prompts still
 * run. Lets a caller start sequences in one step (tests/gpu/batch_test.c). */
void mx_pool_hold(mx_pool *p, int hold);
void mx_pool_get_stats(mx_pool *p, mx_pool_stats *st);
/* The decoder's memory (accel_memory), for every slot together. */
int mx_pool_memory(mx_pool *p, accel_memory *m, mlxrt_error *err);

#endif
