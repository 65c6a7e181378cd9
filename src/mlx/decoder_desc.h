/* The model side of the whole-step decoder (accel.h "whole-model decode description"): which
 * models a backend decoder can run, and their backend-neutral description. Names no backend. */
#ifndef MLXRT_MLX_DECODER_DESC_H
#define MLXRT_MLX_DECODER_DESC_H

#include "accel/accel.h"
#include "mlx/model.h"

/* NULL when a backend decoder can run m (dense Gemma 3 / Gemma 4: no per-layer embeddings, no
 * MoE, no KV sharing), else a short reason for --verbose ("MoE layers", ...). */
const char *mx_decoder_unsupported_reason(const mx_model *m);
int mx_decoder_supported(const mx_model *m);

/* The description of m, owning its layer array and RoPE tables; it points into m, so m must
 * outlive it, and it must outlive any decoder created from it. NULL with err set when m is
 * not supported. */
typedef struct mx_decoder_desc {
  accel_model_desc d;
  accel_layer_desc *layers;
  float **inv_freq;
  int n_layers;
} mx_decoder_desc;

mx_decoder_desc *mx_decoder_desc_create(const mx_model *m, mlxrt_error *err);
void mx_decoder_desc_free(mx_decoder_desc *dd);

#endif
