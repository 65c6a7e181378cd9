/* A chain of dependent one-row nvfp4 mat-vecs run by one resident grid (qmv_chain.cu): the
 * experiment behind the persistent decode kernel (docs/PERF.md, session 13). Step p reads the
 * activation prep x_p that step p-1 wrote, writes y_p = W_p·x_p (float32) and the next
 * step's prep from bf16(y_p·gain_p). One to four blocks per SM: in each, producer warps
 * stream the block's share of every step's weights, step after step, through a ring of
 * shared-memory stages — they never wait for an activation — while the consumer warps wait
 * for each step's input at a grid barrier. So the weight stream does not stop between steps,
 * as it must between launches. Four blocks per SM with the full-stage loop (mode 96) ran the
 * 31B layer's four products in 87.0 µs per layer against 95.2 for a launch per product with
 * its prep kernels; with the two residual norms as steps 103.4–104.7 against 107.6–107.9 —
 * each grid-barrier round costs ~3.3 µs while the weights stream (docs/PERF.md, sessions 13
 * and 14); not yet used by the decoder. */
#ifndef MLXRT_QMV_CHAIN_H
#define MLXRT_QMV_CHAIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ck_chain_step {
  const void *w, *s;  /* the weight's repacked codes and scales (ck_layout w / s, nvfp4) */
  int tiles, nunits;  /* rows / 16, cols / 64 */
  const uint16_t *xp; /* this step's input prep: cols values in fragment order (prep_store) */
  float *y;           /* rows outputs */
  uint16_t *xnext;    /* the next step's prep of bf16(y[i]·gain) for i < knext (NULL: none) */
  int knext;
  float gain;
  /* a norm step (nw non-NULL) makes its input: the RMS norm of the residual h = hin + yprev
   * (cols values), x = bf16(h · 1/√(mean h² + 1e-6) · nw), written as the prep xp (an output
   * here), h to hout (≠ hin) — in two more rounds of the grid barrier, each block its slice,
   * or one when yprev is the previous step's y and cols its rows (the previous step's row
   * writers then make h and each tile's sum of h²): the decoder's residual norm as a step of
   * the grid instead of a launch (hin, yprev, nw, hout 16-byte aligned) */
  const float *nw, *yprev, *hin;
  float *hout;
} ck_chain_step;

/* Runs nsteps steps (an array in device memory) in one cooperative launch of `blocks` blocks
 * (per_sm = 1 to 4 per SM, sharing its shared memory) with `warps` consumer warps and
 * `producers` producer warps each — the instances built: one block per SM with 8, 16 or 24
 * consumer warps, two with 8, three with 8 and four with 4 (one producer warp for three or
 * four) — every prep with the fixed
 * exponent e (fp16 x·2^e; the caller keeps |x|·2^e below 2^15). max_cols and max_tiles
 * bound the steps' cols and tiles. scratch (ck_chain_scratch_bytes) must be zero at the start:
 * the grid barrier's counter, per-tile counters and partial sums of the steps whose tiles are
 * split over blocks (those with fewer tiles than 4 per block, e.g. o and down), the norms'
 * partial sums of squares (per block, or per tile of the step before a fused norm). The
 * stages in
 * flight per block are what the shared memory leaves; *stages gets their number.
 * mode 0 is the chain; benchmark modes (bits 0, 1: wrong results) say what each part costs:
 * bit 0 the consumers skip the arithmetic (the weight stream alone), bit 1 they skip the grid
 * barrier; bit 4 (same results) no tile is split (bit 3, waits that sleep, measured no gain
 * and went); bit 5 (same results; always with three or four blocks
 * per SM) the consumers read x through the L2 instead of a shared copy; bit 6 (same results)
 * full stages run a loop with every pair known to exist; bit 7 (same results; one producer
 * warp, two or four blocks per SM) x staged with the weights: the producer adds each stage's
 * x part once the step's barrier has opened; bit 9 (same results) the grid barrier's arrival a
 * release reduction, its wait a spin without sleeps; bit 10 (same bits) two mma chains per pair
 * in the full-stage loop; bits 12-14 (same results; not with bit 7) M > 0 caps each block's
 * stages in flight (issued, not arrived) at M. A cudaError_t as int. */
size_t ck_chain_scratch_bytes(int max_tiles, int blocks);
/* Benchmark instrumentation for the following ck_chain_run calls (NULL: off): the grid
 * barrier's first `rounds` rounds stamped with %globaltimer (ns) — stamps[r·blocks + b] when
 * block b arrives at round r, stamps[rounds·blocks + r] when block 0 sees round r complete;
 * then per step p < rounds the cycles (clock64) block b's first producer warp waited for free
 * ring slots, at [(rounds + 1 + p)·blocks + b], and its first consumer thread for full ones,
 * at [(2·rounds + 1 + p)·blocks + b]; (3·rounds + 1)·blocks values in device memory. A step
 * is one round, a norm step two or three. */
void ck_chain_set_stamps(unsigned long long *stamps, int rounds);
int ck_chain_run(const ck_chain_step *steps, int nsteps, int max_cols, int max_tiles, int e, void *scratch, int blocks,
                 int per_sm, int warps, int producers, int mode, int *stages, void *stream);
/* The same step's epilogue as a kernel of its own (the launch-per-product baseline): xnext
 * from y, as ck_chain_run writes it. Launched with ck_launch (programmatic dependent launch
 * when on). */
int ck_chain_prep(const float *y, float gain, int e, uint16_t *xnext, int knext, void *stream);
/* A norm step's input as a kernel of its own (one block; the baseline): hout and the prep of
 * x into xout, by the formula of ck_chain_step (the sum of squares in another order). */
int ck_chain_norm(const float *nw, const float *yprev, const float *hin, float *hout, uint16_t *xout, int cols, int e,
                  void *stream);

#ifdef __cplusplus
}
#endif
#endif
