/* The attention of a GQA group's query heads over cached bf16 keys and values, with MLX's CPU
 * rounding points: q·bf16(scale) → bf16, scores → bf16, softmax in float32 → bf16, Σ p·v →
 * bf16 (docs/NUMERICS.md). Shared by the reference path and the CPU decoder. */
#ifndef MLXRT_ACCEL_ATTEND_H
#define MLXRT_ACCEL_ATTEND_H

#include <stdint.h>

/* Where the key and value of a position live: head-major rows of the layer's KV width. */
typedef struct accel_kv_rows {
  const void *ctx;
  const uint16_t *(*key)(const void *ctx, int64_t pos);
  const uint16_t *(*value)(const void *ctx, int64_t pos);
} accel_kv_rows;

/* nh query heads of group g (qv: [nh, hd], hd ≤ 1024, RoPE'd) over the keys lo … hi into out
 * [nh, hd] (bf16 values). scores: min(nh, 4) × (hi − lo + 1) floats of scratch. mlx_cpu: MLX's
 * own exp (base/mlx_cpu_math.h), else libm's. Each head's result is the same whatever nh. */
void accel_attend_group(const accel_kv_rows *kv, const float *qv, int nh, int hd, int g, float scale, int64_t lo,
                        int64_t hi, float *scores, int mlx_cpu, float *out);
/* The heads accel_attend_group takes per pass (its scratch's multiple). */
#define ACCEL_ATTEND_GROUP 4

/* The attention of `rows` query rows as tasks for a host thread pool: a task is one row's heads
 * h0 … h0 + nh − 1 of KV group g — all of the group's rep heads, or, when the rows' groups are
 * fewer than the workers (a decode step), the group's heads split over them (the same bits:
 * each head's result does not depend on the others). */
typedef struct accel_attend_split {
  int nkv, rep, hc; /* hc: heads per task */
} accel_attend_split;
static inline accel_attend_split accel_attend_split_make(int64_t rows, int nkv, int rep, int workers) {
  accel_attend_split s = {nkv, rep, rep};
  if (rows * nkv < workers && rep > 1) s.hc = (rep + workers - 1) / workers;
  return s;
}
static inline int64_t accel_attend_tasks(const accel_attend_split *s, int64_t rows) {
  return rows * s->nkv * ((s->rep + s->hc - 1) / s->hc);
}
/* The scores scratch one task needs for `keys` keys. */
static inline int64_t accel_attend_scratch(const accel_attend_split *s, int64_t keys) {
  return keys * (s->hc < ACCEL_ATTEND_GROUP ? s->hc : ACCEL_ATTEND_GROUP);
}
/* Task t's row, group, first head and head count; *off: its heads' offset (in heads) in the row */
static inline void accel_attend_task(const accel_attend_split *s, int64_t t, int64_t *row, int *g, int *h0, int *nh,
                                     int *off) {
  const int chunks = (s->rep + s->hc - 1) / s->hc;
  *row = t / ((int64_t)s->nkv * chunks);
  *g = (int)(t / chunks % s->nkv);
  *h0 = (int)(t % chunks) * s->hc;
  *nh = s->rep - *h0 < s->hc ? s->rep - *h0 : s->hc;
  *off = *g * s->rep + *h0;
}

#endif
