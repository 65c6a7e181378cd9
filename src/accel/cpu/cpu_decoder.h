/* The CPU backend's whole-step decoder (accel.h decoder_create/step/free): the reference
 * path's math (docs/NUMERICS.md) over the backend's own qmatmul and embed_rows, so CI can test
 * the boundary the device decoders implement, bit for bit against src/mlx/reference.c. */
#ifndef MLXRT_ACCEL_CPU_DECODER_H
#define MLXRT_ACCEL_CPU_DECODER_H

#include "accel/accel.h"

/* A prompt's chunk: the reference session's default batch, so the products see its row counts
 * (accel_backend.decoder_prompt_chunk). */
#define CPU_DEC_CHUNK 512

accel_decoder *cpu_decoder_create(accel_backend *b, const accel_model_desc *d, int64_t capacity,
                                  mlxrt_error *err);
/* decoder_step; a sampled step is the step's logits, then accel_sample_ref (the algorithm the
 * device decoders reproduce bit for bit). */
int cpu_decoder_step(accel_decoder *dec, const int32_t *tokens, int64_t n, int64_t pos, const accel_sample_params *sp,
                     double u, float *logits, int32_t *token, mlxrt_error *err);
void cpu_decoder_free(accel_decoder *dec);
int cpu_decoder_memory(accel_decoder *dec, accel_memory *m, mlxrt_error *err);
/* Batched decode (accel.h decoder_batch_*): a decoder of the same model and capacity per slot
 * holds its sequence's caches (grown as the sequence grows); a step runs every row through one
 * pass with row-exact products (qmatmul_rowwise: each weight read once for all rows), each row
 * bit for bit its slot's decoder_step. */
int cpu_decoder_batch_init(accel_decoder *dec, int slots, mlxrt_error *err);
int cpu_decoder_slot_prompt(accel_decoder *dec, int slot, const int32_t *tokens, int64_t n, int64_t pos,
                            const accel_sample_params *sp, double u, float *logits, int32_t *token, mlxrt_error *err);
int cpu_decoder_batch_step(accel_decoder *dec, int n, const int *slots, const int32_t *tokens, const int64_t *pos,
                           const accel_sample_params *sp, const double *u, float *logits, int32_t *next,
                           mlxrt_error *err);

#endif
