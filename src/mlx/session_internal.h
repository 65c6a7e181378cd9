/* The reference path's session state, shared by the session's lifecycle and API (session.c)
 * and the forward pass (reference.c). Not part of the API. */
#ifndef MLXRT_MLX_SESSION_INTERNAL_H
#define MLXRT_MLX_SESSION_INTERNAL_H

#include "mlx/decoder_desc.h"
#include "mlx/session.h"

struct mx_session {
  const mx_model *m;
  accel_backend *b;
  mx_decoder *dec;         /* MLXRT_DECODER=1: the backend's whole-step decoder runs the session */
  struct mx_pool *pool;    /* or a slot of a step pool's decoder does (mx_session_create_pooled) */
  int slot;
  int64_t pos, capacity;
  int64_t kv_hi;           /* 1 + the furthest position written into the KV rings (rewind) */
  int batch;
  int rowwise;             /* this pass's products run row by row (mx_session_feed_rowwise) */
  mx_kv_layer *kv;         /* per layer; used by layers that compute K/V */
  int *feeds_shared;       /* layer is the K/V source of a later KV-shared layer */
  uint16_t **chunk_k, **chunk_v; /* per layer chunk K/V (bf16), kept until the pass ends */
  float **inv_freq;        /* per layer: [head_dim/2], 0 for pass-through pairs */
  float *rope_pos_scale;   /* per layer: positions are multiplied by it (1 but in mlx-cpu linear) */
  float *rope_c, *rope_s;  /* one position's bf16 cos/sin, [max head_dim / 2] each */
  int mlx_cpu;             /* the backend emulates MLX's CPU numerics: RoPE, softmax exp and
                            * the RMSNorm mean follow MLX's CPU too */

  /* the final norm's output rows of the latest feeds, for positions hid_pos0 … hid_pos0+hid_n−1
   * ([batch, hidden]; NULL unless mx_session_keep_hidden asked for them) */
  float *hid;
  int64_t hid_pos0, hid_n;

  /* scratch, sized for `batch` tokens */
  float *h, *x, *q, *k, *v, *att, *o, *g, *u, *t1, *t2, *ple, *scores, *moe;
  int64_t scores_cap;
  uint16_t *xb, *stage_k, *stage_v;
  int64_t max_cols;
};

/* 0, or -1 naming the token outside the vocabulary or the full context. */
int mx_session_check_feed(const mx_session *s, const int32_t *tokens, int64_t n, mlxrt_error *err);
/* n ≤ batch tokens through every layer of the reference path at s->pos (then s->pos += n);
 * logits as mx_session_feed's for this chunk. */
int mx_forward_chunk(mx_session *s, const int32_t *tokens, int64_t n, float *logits, int all_positions,
                     mlxrt_error *err);

/* Where one layer's keys/values for a pass live: positions < pos0 in the cache, later ones in
 * bf16 chunk buffers ck / cv [n, dim]. */
typedef struct mx_kv_view {
  const mx_kv_layer *cache;
  const uint16_t *ck, *cv;
  int64_t pos0;
  int dim;
} mx_kv_view;
/* The reference path's attention of nh query heads of GQA group g (qv: [nh, hd], hd ≤ 1024,
 * RoPE'd) over the keys lo … hi of kv into out [nh, hd] (bf16 values); scores: min(nh, 4) ×
 * (hi − lo + 1) floats of scratch. Each head's result is the same whatever nh. */
void mx_ref_attend_group(const mx_kv_view *kv, const float *qv, int nh, int hd, int g, float scale, int64_t lo,
                         int64_t hi, float *scores, int mlx_cpu, float *out);
/* The reference path's matrix product through the backend (y[n, rows] = bf16(x[n, cols] · Wᵀ),
 * x holding bf16 values) and its GeGLU MLP on rows of `in` into `out`. */
int mx_ref_linear(mx_session *s, const mx_linear *l, int expert, const float *x, int64_t n, float *y,
                  mlxrt_error *err);
int mx_ref_mlp(mx_session *s, const mx_linear *gate, const mx_linear *up, const mx_linear *down, int expert,
               const float *in, int64_t n, float *out, mlxrt_error *err);
/* From now on the session keeps the final norm's output of the rows it computes logits for
 * (a drafter's input: assistant.h). */
int mx_session_keep_hidden(mx_session *s, mlxrt_error *err);
/* The kept final-norm row of position pos ([hidden]), or NULL when the latest feeds did not
 * compute it. */
const float *mx_session_hidden(const mx_session *s, int64_t pos);

#endif
