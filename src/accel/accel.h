/* The backend boundary. The model layer (src/mlx) describes weights — it never reads them —
 * and asks a backend for products. A weight is { key, spec, loader }:
 *   key    stable for the life of the model; backends cache uploads/repacks under it;
 *   spec   how the bytes encode the matrix (mode, bits, group size, shape, experts);
 *   loader yields the raw bytes of one part (packed weight, scales, biases) only when the
 *          backend first needs them; on the CPU the yielded pointer is the mmap view itself.
 * Activations cross the boundary as caller-owned buffers; results are written in place. */
#ifndef MLXRT_ACCEL_H
#define MLXRT_ACCEL_H

#include <stddef.h>
#include <stdint.h>

#include "accel/accel_ring.h"
#include "mlxrt.h"

/* ---- weight description ------------------------------------------------------------------ */
typedef enum {
  ACCEL_MODE_DENSE = 0, /* plain matrix in dense_dtype (bf16, f16 or f32) */
  ACCEL_MODE_AFFINE,    /* uint32-packed codes, per-group scale and bias (scales_dtype) */
  ACCEL_MODE_NVFP4,     /* E2M1 codes, E4M3 scale per 16 */
  ACCEL_MODE_MXFP4,     /* E2M1 codes, E8M0 scale per 32 */
  ACCEL_MODE_MXFP8,     /* E4M3 codes, E8M0 scale per 32 */
} accel_mode;

typedef enum { ACCEL_BF16 = 0, ACCEL_F16, ACCEL_F32 } accel_dtype;

typedef enum { ACCEL_PART_WEIGHT = 0, ACCEL_PART_SCALES, ACCEL_PART_BIASES } accel_part;

typedef struct accel_spec {
  accel_mode mode;
  int bits;                 /* 2..8 for affine, 4 for nvfp4/mxfp4, 8 for mxfp8, 16/32 dense */
  int group_size;           /* 32/64/128 affine, 16 nvfp4, 32 mx; 0 for dense */
  accel_dtype dense_dtype;  /* dense weights only */
  accel_dtype scales_dtype; /* affine scales/biases (bf16, f16 or f32) */
  int64_t experts;          /* 0 for a rank-2 weight, E for a stacked [E, rows, cols] weight */
  int64_t rows;             /* output features (N) */
  int64_t cols;             /* input features (K), unpacked */
} accel_spec;

/* Returns a pointer to the bytes of `part` and their count, or NULL with err set. The pointer
 * stays valid for the life of the model (it is an mmap view). It need not be aligned. */
typedef const void *(*accel_loader_fn)(void *ctx, accel_part part, size_t *nbytes,
                                       mlxrt_error *err);

typedef struct accel_weight {
  uint64_t key;
  accel_spec spec;
  accel_loader_fn load;
  void *load_ctx;
  const char *name; /* for messages only */
} accel_weight;

/* Byte counts one part must have for a spec (validation at load time; 0 if the part is
 * absent for that mode). */
size_t accel_part_bytes(const accel_spec *spec, accel_part part);
/* Bytes read to apply the whole weight once (what a mat-vec must stream). */
size_t accel_weight_bytes(const accel_spec *spec);
const char *accel_mode_name(accel_mode mode);
/* 0 when every backend can take the spec (mode, bits, group size, dtypes, shape), else -1
 * with a message naming `name` (the tensor) and the field. */
int accel_spec_check(const accel_spec *spec, const char *name, mlxrt_error *err);

/* ---- whole-model decode description: accel/model_desc.h --------------------------------- */
#include "accel/model_desc.h"

/* ---- backends ----------------------------------------------------------------------------- */
typedef struct accel_backend accel_backend;
/* One task of accel_host_for: task in [0, ntasks), worker in [0, accel_host_workers(b)). */
typedef void (*accel_host_task)(void *ctx, int64_t task, int worker);
/* A backend's whole-model decoder: weights resident, a KV cache that grows up to `capacity`
 * positions. */
typedef struct accel_decoder accel_decoder;
/* A decoder's memory: KV cache bytes held and the positions they back, and the device's bytes
 * in use (the whole process and any other; 0 on a host backend) of its total. */
typedef struct accel_memory {
  uint64_t kv_bytes;
  int64_t kv_positions;
  uint64_t device_used, device_total;
} accel_memory;

/* Sampling on the decoder (decoder_step with sp). The filters act on the untempered
 * distribution and keep a most-probable prefix each (mlx-lm's semantics, as src/mlx/sampler.c);
 * the kept tokens are drawn with weights e^((l - max)/temperature). The exact algorithm, which
 * every backend implements bit for bit, is in src/accel/accel_sample.h. */
typedef struct accel_sample_params {
  float temperature; /* 0 = greedy (the sanitized argmax, lowest id) */
  int top_k;         /* keep the k most probable (ties toward lower ids); 0 or >= vocab = off */
  float top_p;       /* keep while the mass of more probable tokens < top_p; 0 or 1 = off */
  float min_p;       /* keep p >= min_p · p_max; 0 = off */
} accel_sample_params;

struct accel_backend {
  const char *name;
  void *impl;
  /* 1 when the backend's whole-step decoder is its fast path (sessions use it by default); 0
   * when it is the reference path's own math one step at a time (the CPU's: sessions keep the
   * reference path, which batches prompts). */
  int decoder_fast;
  /* Tokens per chunk of the decoder's prompt pass (decoder_step, decoder_slot_prompt with n > 1):
   * a caller that feeds a prompt in pieces of multiples of it from the prompt's start gets the
   * bits of one call. 0: the decoder does not chunk by a fixed size. */
  int decoder_prompt_chunk;
  /* 1 when decoder_batch_step reads each weight once for all its rows, so sequences stepped
   * together outrun as many separate sessions. */
  int decoder_batch_shares_reads;
  /* 1 when products reproduce MLX's CPU kernels bit for bit (MLXRT_NUMERICS=mlx-cpu); the
   * model layer then computes its own MLX-side math (RoPE, softmax exp, RMSNorm mean) the
   * way MLX's CPU does. */
  int mlx_cpu_numerics;
  int verbose; /* accel_options.verbose (set by accel_create): say which path runs what */
  /* accel_options.kv_k (set by accel_create): ACCEL_KV_K_AUTO lets a device decoder keep the
   * full-attention layers' K in the smallest exact-enough form it has (K from V where a layer's
   * K and V share their projection: docs/DECODE.md "The KV cache"); ACCEL_KV_K_BF16 keeps K in
   * bf16 everywhere; ACCEL_KV_K_PLANAR3 / _PLANAR4 compress the full-attention layers' K into
   * the planar3 / planar4 blocks of kv_codec.h (a comparison mode: on real models both lose too
   * much, docs/KV.md). A backend that cannot keep a compressed K (kv_k_planar 0: the CPU, which
   * always keeps bf16) is refused such a request by accel_create. */
  int kv_k;
  int kv_k_planar; /* set by the backend: its whole-step decoder keeps a planar3 / planar4 K */

  /* y[n, rows] = x[n, cols] · Wᵀ, x in bf16, y in float32 (float32 accumulation).
   * expert selects the slab of a stacked weight (-1 or 0 for rank-2). */
  int (*qmatmul)(accel_backend *b, const accel_weight *w, int expert, const uint16_t *x,
                 int64_t n, float *y, mlxrt_error *err);

  /* out[i, cols] = dequantized row ids[i] of W, rounded as mx.dequantize does, as bf16. */
  int (*embed_rows)(accel_backend *b, const accel_weight *w, const int32_t *ids, int64_t n,
                    uint16_t *out, mlxrt_error *err);

  /* GB/s of a streaming read of a buffer much larger than the caches, measured now (the
   * roofline a benchmark compares with). May be NULL: unknown. */
  double (*read_bandwidth)(accel_backend *b);

  /* Optional (NULL: the model layer runs its reference path): a decoder that runs whole
   * steps of a dense model described by `d` (which must outlive it) with its own KV cache of
   * `capacity` positions.
   * decoder_step feeds tokens[0..n) at positions pos..pos+n-1 (positions ≥ pos are
   * forgotten first; 0 ≤ pos, pos + n ≤ capacity; a sliding layer only holds the last
   * sliding_window + ACCEL_RING_SLACK positions (accel_ring.h), so a rewind by more than
   * ACCEL_RING_SLACK + 1 positions into evicted history is the caller's to avoid).
   * logits (may be NULL) receives [vocab] float32 for the last token. token (may be NULL)
   * receives the next token: with sp NULL the greedy argmax (lowest id on ties); otherwise
   * (temperature 0 included: the sanitized argmax) drawn from the last token's logits with sp and the caller's uniform
   * number u in [0, 1) (one draw of the session sampler's stream, so the choice is a
   * deterministic function of logits, sp and u, identical on every backend: accel_sample.h). A
   * step whose logits hold NaN or ±inf fails when a token is asked for, greedy or sampled, with
   * accel_fail_nonfinite's message. One synchronisation per call on a
   * device: only the token id (and the logits when asked) leaves it. */
  accel_decoder *(*decoder_create)(accel_backend *b, const accel_model_desc *d, int64_t capacity,
                                   mlxrt_error *err);
  int (*decoder_step)(accel_decoder *dec, const int32_t *tokens, int64_t n, int64_t pos,
                      const accel_sample_params *sp, double u, float *logits, int32_t *token, mlxrt_error *err);
  void (*decoder_free)(accel_decoder *dec);
  /* Optional: what the decoder holds now (accel_memory). */
  int (*decoder_memory)(accel_decoder *dec, struct accel_memory *m, mlxrt_error *err);
  /* Optional: the bytes of K and V a decode step at position pos reads, the cache as this
   * decoder stores it (every layer's live keys; a KV-shared layer reads its source's). Without
   * it the reference's bf16 K and V are counted. */
  uint64_t (*decoder_kv_read_bytes)(accel_decoder *dec, int64_t pos);

  /* Frees everything cached for this backend. */
  void (*destroy)(accel_backend *b);

  /* Optional (NULL: accel_host_for runs the tasks in turn on the caller): the model layer's host
   * work (attention, elementwise activations) spread over the backend's host threads, returning
   * when every task ran. A task must not call the backend. Concurrent callers take turns. */
  void (*host_for)(accel_backend *b, int64_t ntasks, accel_host_task fn, void *ctx);
  int host_workers; /* (host_for) its threads, the caller's included */

  /* Optional (NULL: not offered): qmatmul whose row i of y is bit for bit what qmatmul gives
   * for row i of x alone (n = 1, a decode step's numerics), the weights read once for all n
   * rows. Speculative decoding verifies drafted tokens with it, so that they are judged on the
   * logits one-token steps would have computed. */
  int (*qmatmul_rowwise)(accel_backend *b, const accel_weight *w, int expert, const uint16_t *x,
                         int64_t n, float *y, mlxrt_error *err);

  /* Optional (NULL: not offered): batched decode on a decoder — many sequences, each in a slot
   * with its own KV cache of the decoder's capacity, stepped together so that each weight is
   * read once for all of them (continuous batching: a slot's sequence may start, stop or be
   * replaced between steps). decoder_batch_init makes `slots` slots once. decoder_slot_prompt
   * is decoder_step's prompt form on slot `slot`'s cache (tokens at pos..pos+n-1; positions
   * ≥ pos forgotten, with decoder_step's ring rule), its logits / token as decoder_step's.
   * decoder_batch_step feeds one token to each of n sequences — row r: tokens[r] at position
   * pos[r] of slot slots[r] (distinct slots) — and writes row r's next token to next[r]: the
   * greedy argmax with sp NULL, else drawn with sp[r] and u[r] as decoder_step draws; logits
   * (may be NULL) receives [n, vocab]. A row's result does not depend on which other rows
   * share the step, their order or its slot; a backend may choose its kernels by n (CUDA: one
   * row, 2-15, 16 and more), so its bits may depend on n. MoE blocks group the rows by expert
   * (there within the tolerance of a prompt pass). The CPU backend runs every
   * row through one pass with row-exact products (qmatmul_rowwise), each row the bits of its
   * slot's decoder_step. One synchronisation per call. The decoder's own sequence
   * (decoder_step) is separate from the slots. Not thread-safe: one caller per decoder. */
  int (*decoder_batch_init)(accel_decoder *dec, int slots, mlxrt_error *err);
  int (*decoder_slot_prompt)(accel_decoder *dec, int slot, const int32_t *tokens, int64_t n, int64_t pos,
                             const accel_sample_params *sp, double u, float *logits, int32_t *token,
                             mlxrt_error *err);
  int (*decoder_batch_step)(accel_decoder *dec, int n, const int *slots, const int32_t *tokens, const int64_t *pos,
                            const accel_sample_params *sp, const double *u, float *logits, int32_t *next,
                            mlxrt_error *err);
};

typedef struct accel_options {
  const char *backend;  /* "auto", "cpu", "cuda"; NULL = $MLXRT_BACKEND or "auto" */
  int threads;          /* CPU worker threads; <= 0 = number of cores */
  int verbose;
  const char *numerics; /* "float32", "mlx-cpu" (CPU only); NULL = $MLXRT_NUMERICS or float32 */
  const char *kv_k;     /* "auto" (NULL), "bf16", "planar3" or "planar4": accel_backend.kv_k */
} accel_options;
enum { ACCEL_KV_K_AUTO = 0, ACCEL_KV_K_BF16 = 1, ACCEL_KV_K_PLANAR3 = 3, ACCEL_KV_K_PLANAR4 = 4 };

/* Creates the backend the options ask for. "auto" picks CUDA when the plug-in loads and a
 * device is present, else the CPU. An explicit "cuda" that cannot load is an error. */
accel_backend *accel_create(const accel_options *opt, mlxrt_error *err);
void accel_destroy(accel_backend *b);
/* fn(ctx, t, worker) for every t in [0, ntasks), on the backend's host threads where it offers
 * them (host_for), else in turn; and how many workers that is (the scratch a caller sizes). */
void accel_host_for(accel_backend *b, int64_t ntasks, accel_host_task fn, void *ctx);
int accel_host_workers(const accel_backend *b);

/* The CPU backend (always linked): threads workers, numerics as accel_options.numerics. */
accel_backend *accel_cpu_create_numerics(int threads, const char *numerics, mlxrt_error *err);
/* accel_cpu_create_numerics with the numerics of $MLXRT_NUMERICS (float32 when unset). */
accel_backend *accel_cpu_create(int threads, mlxrt_error *err);

#endif
