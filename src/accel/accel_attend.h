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

#endif
