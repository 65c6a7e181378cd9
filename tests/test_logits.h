/* Random logits for the sampler tests: Normal(0, sd) from our PRNG (Box-Muller); tie_step > 0
 * rounds each to a multiple of it, which creates equal values. */
#ifndef MLXRT_TEST_LOGITS_H
#define MLXRT_TEST_LOGITS_H

#include <math.h>
#include <stdint.h>

#include "mlx/sampler.h"

static void test_random_logits(float *l, int n, uint64_t seed, float sd, float tie_step) {
  mx_rng r;
  mx_rng_seed(&r, seed);
  for (int i = 0; i < n; i++) {
    double u1 = mx_rng_uniform(&r), u2 = mx_rng_uniform(&r);
    double g = sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
    l[i] = (float)(g * sd);
    if (tie_step > 0.0f) l[i] = roundf(l[i] / tie_step) * tie_step;
  }
}

#endif
