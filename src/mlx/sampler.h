/* Token sampling from a logits vector: greedy, temperature, top-k, top-p, min-p and repetition
 * penalty, with a seeded PRNG of our own (xoshiro256**, seeded through splitmix64), so the same
 * seed and the same logits give the same tokens on every machine.
 *
 * Semantics follow mlx-lm (sample_utils.py, make_sampler / make_repetition_penalty):
 *   1. repetition penalty over the last `repetition_window` accepted tokens (prompt and generated):
 *      each distinct token's logit l becomes l / penalty if l > 0, else l * penalty
 *      (llama.cpp's --repeat-penalty is the same formula; its window --repeat-last-n defaults
 *      to 64, mlx-lm's repetition_context_size to 20, ours to 20);
 *   2. temperature == 0: argmax (the lowest id among equal maxima);
 *   3. otherwise the filters run on the untempered distribution p = softmax(l):
 *      top-p keeps a token when the mass of the tokens more probable than it is < top_p
 *      (ties kept together), min-p keeps p >= min_p * p_max, top-k keeps the k most probable
 *      (ties broken toward the lower id); as all three keep a most-probable prefix, their order
 *      does not matter;
 *   4. the kept tokens are drawn with probability proportional to exp(l / temperature).
 * Cost on a 262144-entry vocabulary: a few vectorized linear passes, no full sort (top-k by a
 * thresholded scan and radix select, top-p among the most probable few thousand tokens or by
 * a probability-mass radix select); about 0.3 ms greedy and 1 ms with top-k 64 + top-p 0.95
 * per token on this project's CI-class CPU (see test_sampler's timing lines). */
#ifndef MLXRT_MLX_SAMPLER_H
#define MLXRT_MLX_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "mlxrt.h"

typedef struct mx_sampler_params {
  float temperature;        /* 0 = greedy */
  int top_k;                /* 0 = off */
  float top_p;              /* 1 (or 0) = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off */
  int repetition_window;    /* tokens of history the penalty looks at */
  uint64_t seed;
} mx_sampler_params;

/* temperature 1, every filter off, repetition penalty 1 over a 20-token window, seed 0. */
void mx_sampler_params_default(mx_sampler_params *p);

typedef struct mx_sampler mx_sampler;

/* Validates the parameters (a bad one is named in the message). vocab_size > 0. */
mx_sampler *mx_sampler_create(const mx_sampler_params *p, int vocab_size, mlxrt_error *err);
void mx_sampler_free(mx_sampler *s);

/* Picks the next token from logits[vocab_size] (not modified; NaN counts as -inf). Returns the
 * token id, or -1 with err set when no token is possible (every logit -inf or NaN). Does not
 * record the token: call mx_sampler_accept for it (and for every prompt token). */
int mx_sampler_sample(mx_sampler *s, const float *logits, mlxrt_error *err);

/* The distribution mx_sampler_sample draws from for these logits (repetition penalty, filters,
 * temperature; its current history): probs[vocab_size], 0 for the tokens the filters drop,
 * 1 at the argmax for temperature 0. Returns the number of tokens kept, or -1. Draws nothing. */
int mx_sampler_probs(mx_sampler *s, const float *logits, double *probs, mlxrt_error *err);

/* The tokens the filters keep for these logits (ids[] needs vocab_size entries), in increasing
 * id order; returns their number, or -1. Draws nothing (for tests and diagnostics). */
int mx_sampler_candidates(mx_sampler *s, const float *logits, int *ids, mlxrt_error *err);

/* Records a token in the repetition-penalty history (ids outside the vocab are ignored). */
void mx_sampler_accept(mx_sampler *s, int token);

/* Forgets the history (a new conversation); the random stream continues. */
void mx_sampler_reset(mx_sampler *s);
/* Restarts the random stream from a seed. */
void mx_sampler_seed(mx_sampler *s, uint64_t seed);

const mx_sampler_params *mx_sampler_get_params(const mx_sampler *s);

/* The next uniform number in [0, 1) of the sampler's stream: the one mx_sampler_sample would
 * draw (a decoder that samples on its device gets it as an argument, so the stream stays in
 * step whichever side samples). */
double mx_sampler_uniform(mx_sampler *s);

/* The PRNG alone (exposed for tests): uniform double in [0, 1). */
typedef struct mx_rng {
  uint64_t s[4];
} mx_rng;
void mx_rng_seed(mx_rng *r, uint64_t seed);
uint64_t mx_rng_next(mx_rng *r);
double mx_rng_uniform(mx_rng *r);

#endif
