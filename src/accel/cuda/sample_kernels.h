/* Token selection on the device (sample.cu): the algorithm of src/accel/accel_sample.h, bit for
 * bit, over a float32 logits row already on the device; the chosen id is written to a device
 * int32 (ACCEL_TOKEN_NONFINITE(id) when a logit is NaN or ±inf). A few multi-block passes of 256 blocks at most,
 * each finished by its last block (no host sync, no float atomics: every sum is an exact
 * integer). Returns a cudaError_t (0 = ok). */
#ifndef MLXRT_CUDA_SAMPLE_KERNELS_H
#define MLXRT_CUDA_SAMPLE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* accel_sample_plan's fields (accel_sample_plan_make computes them on the host). */
typedef struct sk_params {
  int greedy;
  float inv_t;
  int use_min_p;
  float log_min_p;
  int top_k; /* active top-k or 0 */
  int use_top_p;
  float top_p;
  uint64_t x53;
} sk_params;

/* Bytes of the device state one selection at a time uses (histograms, per-block partials,
 * counters): allocate once and zero it; the passes leave it zeroed again. */
size_t sk_state_bytes(void);
/* Kernel launches of one selection with these parameters (for timing reports). */
int sk_launches(const sk_params *p);

/* *out = the token chosen from logits[V] (V ≤ 2^23) with p. Work is queued on stream. */
int sk_sample(const float *logits, int V, const sk_params *p, void *state, int32_t *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
