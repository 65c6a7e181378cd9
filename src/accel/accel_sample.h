/* Token selection for the whole-step decoders (accel.h decoder_step with sampling parameters), defined exactly so
 * that the CPU (accel_sample_ref, below) and the device (src/accel/cuda/sample.cu) pick the same
 * token from the same float32 logits, parameters and uniform number u.
 *
 *  0. A row holding NaN or ±inf fails, greedy or sampled, on every backend: the weights or
 *     activations overflowed and no choice from it means anything. The selection reports the
 *     token ACCEL_TOKEN_NONFINITE(lowest such id) (accel_sample_math.h); the decoders turn it
 *     into accel_fail_nonfinite's error, the one message of every path.
 *  1. Sanitize (a no-op after step 0; it keeps the keys total): NaN → -inf, -0 → +0, +inf → FLT_MAX. key(x) = the float's order-preserving
 *     32-bit key (accel_sample_math.h). m = max, a = lowest id holding it. m = -inf: no token.
 *     temperature 0 or top_k 1: the token is a (greedy).
 *  2. Filters on the untempered distribution, each keeping a prefix of the order
 *     (value descending, id ascending); the kept set is their intersection:
 *       top-k (0 < k < V): the first k of that order (ties toward lower ids);
 *       min-p (0 < min_p <= 1): x >= m + logf(min_p) (float32 add);
 *       top-p (0 < top_p < 1): with E_i = w(x_i, 1) (below) and TOT = Σ E_i over the whole
 *         vocabulary, keep i when (double)Σ_{x_j > x_i} E_j < (double)top_p · (double)TOT.
 *     Each is found as a threshold key by a radix select over the keys (digits of 11/11/10
 *     bits; the bins are scanned from the top and the first bin whose running total reaches the
 *     target is taken; counts for top-k, E sums for top-p). The result is a key τ and a tie
 *     allowance t: kept = { key > τ } ∪ { the t lowest ids with key == τ } (t = all except when
 *     top-k's own threshold is the binding one).
 *  3. Draw: D_i = w(x_i, inv_t) for the kept tokens, inv_t = 1/temperature (float32, clamped
 *     to FLT_MAX); TOTD = Σ D_i; R = floor(X · TOTD / 2^53) with X = (uint64)(u · 2^53); the
 *     token is the lowest kept id whose running sum (in increasing id order) exceeds R.
 *  w(x, s) = trunc(2^40 · e^((x - m)·s)), e^ by accel_sample_math.h's spm_exp_neg (the same
 *  polynomial as src/mlx/sampler.c), 0 for -inf. Sums are exact uint64 integers, so their order
 *  does not matter (the device adds them with atomics and block scans).
 *
 * Compared with mx_sampler (src/mlx/sampler.c), the kept sets and the draw are the same
 * definitions; the differences are numeric only: masses and draw weights in 2^-40 fixed point
 * (a token below 2^-40 of the maximum's weight never counts or wins; mx_sampler sums floats in
 * double), R = floor(u · TOTD) instead of comparing u · total in double, +inf logits clamped to
 * FLT_MAX, and no repetition penalty (a session with one samples on the host). One uniform per
 * sample, as mx_sampler draws, so a session's random stream stays in step on either path. */
#ifndef MLXRT_ACCEL_SAMPLE_H
#define MLXRT_ACCEL_SAMPLE_H

#include <stdint.h>

#include "accel/accel.h"
#include "accel/accel_sample_math.h" /* ACCEL_TOKEN_NONFINITE */

#define ACCEL_SAMPLE_MAX_VOCAB (1 << 23) /* keeps Σ of 2^40-scaled weights below 2^64 */
#define ACCEL_SAMPLE_ALL_TIES 0xFFFFFFFFu

/* The host-side scalars of one selection, computed once here for every backend (so the float
 * divisions and logf are the same on all of them). */
typedef struct accel_sample_plan {
  int greedy;       /* temperature 0 or top_k 1: the argmax (lowest id), u unused */
  float inv_t;      /* 1/temperature, at most FLT_MAX */
  int use_min_p;
  float log_min_p;  /* logf(min_p) */
  int top_k;        /* active top-k, else 0 */
  int use_top_p;
  float top_p;
  uint64_t x53;     /* u · 2^53, < 2^53 */
} accel_sample_plan;

/* Validates sp (temperature >= 0 and finite, top_k >= 0, top_p and min_p in [0, 1]), vocab in
 * [1, ACCEL_SAMPLE_MAX_VOCAB] and u (finite; clamped into [0, 1)). */
int accel_sample_plan_make(const accel_sample_params *sp, int vocab, double u,
                           accel_sample_plan *plan, mlxrt_error *err);

/* The selection on the CPU: *token from logits[vocab], ACCEL_TOKEN_NONFINITE(id) for a row with
 * a non-finite logit (step 0; returns 0). */
int accel_sample_ref(const float *logits, int vocab, const accel_sample_params *sp, double u,
                     int32_t *token, mlxrt_error *err);

/* The lowest id whose logit is NaN or ±inf, or -1 when the row is finite. */
int accel_logits_first_nonfinite(const float *logits, int vocab);

/* The error for a non-finite logits row, the same from every path (host or device, greedy or
 * sampled): pos is the position of the token whose logits they are. Returns -1. */
int accel_fail_nonfinite(mlxrt_error *err, int64_t pos, int id);

/* The decoders' check of decoder_step's input, the same message from every backend: n > 0
 * tokens, positions pos … pos+n−1 inside [0, capacity), every id inside [0, vocab). Returns -1
 * with err set, else 0. */
int accel_check_step(const int32_t *tokens, int64_t n, int64_t pos, int64_t capacity, int vocab, mlxrt_error *err);

/* The kept set of the same selection (keep[vocab] = 0/1; draws nothing): for tests. Returns the
 * number kept, or -1. */
int accel_sample_kept(const float *logits, int vocab, const accel_sample_params *sp,
                      unsigned char *keep, mlxrt_error *err);

#endif
