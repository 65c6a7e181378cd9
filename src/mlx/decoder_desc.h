/* The model side of the whole-step decoder (accel.h "whole-model decode description"): which
 * models a backend decoder can run, and their backend-neutral description. Names no backend. */
#ifndef MLXRT_MLX_DECODER_DESC_H
#define MLXRT_MLX_DECODER_DESC_H

#include "accel/accel.h"
#include "mlx/model.h"

/* NULL when a backend decoder can run m (every Gemma 3 / Gemma 4 text model: dense, MoE,
 * per-layer embeddings, KV sharing), else a short reason for --verbose. */
const char *mx_decoder_unsupported_reason(const mx_model *m);
int mx_decoder_supported(const mx_model *m);

/* The description of m, owning its layer array, RoPE tables and router norm weights; it points into m, so m must
 * outlive it, and it must outlive any decoder created from it. NULL with err set when m is
 * not supported. */
typedef struct mx_decoder_desc {
  accel_model_desc d;
  accel_layer_desc *layers;
  float **inv_freq;
  float **router_norm; /* MoE layers: [hidden] */
  int n_layers;
} mx_decoder_desc;

mx_decoder_desc *mx_decoder_desc_create(const mx_model *m, mlxrt_error *err);
void mx_decoder_desc_free(mx_decoder_desc *dd);

/* The pair a session keeps: the description and the backend's decoder made from it.
 * mx_decoder_open returns NULL with err->msg empty when the backend offers no decoder or the
 * model is not supported (with verbose, the reason goes to stderr), NULL with err set on a
 * real failure. mx_decoder_feed is decoder_step: tokens at pos..pos+n-1, logits (may be NULL)
 * of the last token, next_token (may be NULL) its greedy argmax. */
typedef struct mx_decoder {
  accel_backend *b;
  mx_decoder_desc *dd;
  accel_decoder *dec;
} mx_decoder;

mx_decoder *mx_decoder_open(const mx_model *m, accel_backend *b, int64_t capacity, int verbose,
                            mlxrt_error *err);
int mx_decoder_feed(mx_decoder *x, const int32_t *tokens, int64_t n, int64_t pos, float *logits,
                    int32_t *next_token, mlxrt_error *err);
void mx_decoder_close(mx_decoder *x);

#endif
