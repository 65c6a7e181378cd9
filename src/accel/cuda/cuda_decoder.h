/* The CUDA whole-step decoder behind accel.h's decoder_create/step/free. */
#ifndef MLXRT_CUDA_DECODER_H
#define MLXRT_CUDA_DECODER_H

#include "accel/accel.h"

accel_decoder *cuda_decoder_create(accel_backend *b, const accel_model_desc *d, int64_t capacity,
                                   mlxrt_error *err);
int cuda_decoder_step(accel_decoder *dec, const int32_t *tokens, int64_t n, int64_t pos, const accel_sample_params *sp,
                      double u, float *logits, int32_t *token, mlxrt_error *err);
void cuda_decoder_free(accel_decoder *dec);
int cuda_decoder_memory(accel_decoder *dec, accel_memory *m, mlxrt_error *err);
uint64_t cuda_decoder_kv_read_bytes(accel_decoder *dec, int64_t pos);
/* Batched decode (cuda_decoder_batch.c): accel.h's decoder_batch_init / slot_prompt / batch_step. */
int cuda_decoder_batch_init(accel_decoder *dec, int slots, mlxrt_error *err);
int cuda_decoder_slot_prompt(accel_decoder *dec, int slot, const int32_t *tokens, int64_t n, int64_t pos,
                             const accel_sample_params *sp, double u, float *logits, int32_t *token, mlxrt_error *err);
int cuda_decoder_batch_step(accel_decoder *dec, int n, const int *slots, const int32_t *tokens, const int64_t *pos,
                            const accel_sample_params *sp, const double *u, float *logits, int32_t *next,
                            mlxrt_error *err);

#endif
