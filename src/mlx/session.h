/* A reference-path session: a model, the backend that applies its matrices, and a KV cache.
 * Tokens are fed in chunks (prompt batches run as mat-mats); logits come back as float32. */
#ifndef MLXRT_MLX_SESSION_H
#define MLXRT_MLX_SESSION_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlx/kv.h"
#include "mlx/model.h"

typedef struct mx_session mx_session;

/* capacity: most positions the session may hold (0 = the model's max_position_embeddings);
 * batch: most tokens processed in one pass (0 = 512).
 * The backend's whole-step decoder runs the session when the backend offers one as its fast
 * path (every backend but the CPU, whose decoder is this path's math one step at a time), the
 * model is a variant it runs, and the caller does not need every position's logits
 * (MX_SESSION_REFERENCE). Otherwise this reference path runs it, and says so when the backend
 * is verbose. MLXRT_DECODER=1 requires the decoder (an error when it cannot run), =0 forbids it. */
enum { MX_SESSION_REFERENCE = 1 };
mx_session *mx_session_create_flags(const mx_model *m, accel_backend *b, int64_t capacity, int batch,
                                    unsigned flags, mlxrt_error *err);
/* A session on a free slot of a step pool (step_pool.h), of the pool's capacity: its decoder steps
 * batched with the pool's other sessions, its prompts run on the pool's decoder (last logits
 * only, like any decoder session). NULL with err set when every slot is taken. Freeing the
 * session frees the slot. */
struct mx_pool;
mx_session *mx_session_create_pooled(const mx_model *m, accel_backend *b, struct mx_pool *pool, mlxrt_error *err);
/* The session will not step for a while (its answer ended): a pool's batched steps stop waiting
 * for it. Nothing for other sessions. */
void mx_session_idle(mx_session *s);
/* mx_session_create_flags with no flags. */
mx_session *mx_session_create(const mx_model *m, accel_backend *b, int64_t capacity, int batch,
                              mlxrt_error *err);
void mx_session_free(mx_session *s);

/* Feeds n tokens at the current position. logits (may be NULL) receives [n, vocab] when
 * all_positions, else [vocab] for the last token only. */
int mx_session_feed(mx_session *s, const int32_t *tokens, int64_t n, float *logits,
                    int all_positions, mlxrt_error *err);
/* mx_session_feed that stops between batches once *cancel (may be NULL) is non-zero: returns 1
 * then (the batches before it stay fed: mx_session_pos says how far it got), 0 when every token
 * was fed, -1 on error. The batches are those of mx_session_feed; a decoder takes the tokens in
 * one call, so there the flag is looked at before it only. */
int mx_session_feed_cancel(mx_session *s, const int32_t *tokens, int64_t n, float *logits,
                           int all_positions, const volatile int *cancel, mlxrt_error *err);
/* One token in, the greedy next token out (on the device when a decoder runs the session). */
int mx_session_step_greedy(mx_session *s, int32_t token, int32_t *next, mlxrt_error *err);
/* One token in, the next token out, drawn by smp (temperature 0: greedy). When a decoder runs
 * the session, it samples on its device (only the id comes back) unless smp has a repetition
 * penalty (then the logits come back and smp samples on the host). Draws one uniform number of
 * smp's stream per non-greedy step either way; does not call mx_sampler_accept. */
struct mx_sampler;
/* 1 when a backend's whole-step decoder runs the session (its own or a step pool's). */
int mx_session_uses_decoder(const mx_session *s);
int mx_session_step_sample(mx_session *s, int32_t token, struct mx_sampler *smp, int32_t *next,
                           mlxrt_error *err);
int64_t mx_session_pos(const mx_session *s);
int64_t mx_session_capacity(const mx_session *s);
/* The KV cache held and the device's memory in use (mlxrt_session_memory). */
int mx_session_memory(const mx_session *s, mlxrt_memory *out, mlxrt_error *err);
/* The bytes of K and V a decode step at position pos reads: as the reference path keeps them
 * (bf16 K and V of every layer's live keys; a KV-shared layer reads its source's) ... */
uint64_t mx_model_kv_read_bytes(const mx_model *m, int64_t pos);
/* ... or as the session's decoder stores them (accel_backend decoder_kv_read_bytes) */
uint64_t mx_session_kv_read_bytes(const mx_session *s, int64_t pos);
/* A sliding layer's ring holds its window plus this many positions, on the reference path and
 * in a backend's decoder (ACCEL_RING_SLACK, accel_ring.h), so that up to
 * MX_SESSION_REWIND_MAX + 1 positions just fed can always be taken back (drafted tokens a
 * verification rejected; a chat turn re-rendered inside the last answer) without losing history
 * the window still needs. */
#define MX_SESSION_REWIND_MAX 32
/* Forgets positions ≥ pos and returns the position rewound to. Full layers keep what they had;
 * a sliding ring can only be rewound within what it still holds (any position while nothing was
 * evicted, else by at most MX_SESSION_REWIND_MAX + 1 positions from the furthest one written);
 * rewinding into evicted history resets to 0. */
int mx_session_rewind(mx_session *s, int64_t pos);
/* Feeds n tokens (n ≤ the session's batch) and gives every position's logits [n, vocab], each
 * row bit for bit what feeding the tokens one at a time gives: the products run row by row
 * (accel_backend.qmatmul_rowwise), the rest of the pass is row-wise already. This is how
 * drafted tokens are verified. -1 with a message when the session cannot (see
 * mx_session_check_rowwise). */
int mx_session_feed_rowwise(mx_session *s, const int32_t *tokens, int64_t n, float *logits, mlxrt_error *err);
/* 0 when mx_session_feed_rowwise runs on this session; else -1 with why: a backend's
 * whole-step decoder runs it (last logits only), or the backend has no row-exact product. */
int mx_session_check_rowwise(const mx_session *s, mlxrt_error *err);
uint64_t mx_session_kv_bytes(const mx_session *s);

#endif
