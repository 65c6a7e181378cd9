/* Synthetic checkpoints: the plan (synth.c) — which tensors a released Gemma variant has, their
 * shapes and dtypes in a given quantization mode, how they are sharded, and the JSON files — and
 * the writer (synth_writer.c), which generates every byte on the fly from a counter-based hash,
 * so any byte range of any tensor can be produced independently by any thread.
 *
 * Value sizes keep a forward pass through 60 random layers finite: every dequantized weight is
 * about N(0, 0.02)-sized, Gemma 4 norm weights and layer_scalar are near 1, Gemma 3 norm weights
 * near 0 (stored zero-centred). */
#ifndef MLXRT_MLX_SYNTH_H
#define MLXRT_MLX_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "mlxrt.h"
#include "tools_write.h"

/* How one tensor's bytes are produced. */
typedef enum {
  SY_GEN_RANDOM,       /* uniform random bits: E2M1 or affine codes */
  SY_GEN_FP8_CODES,    /* E4M3 bytes with exponent field ≤ 7 (|v| < 2, never 0x7F) */
  SY_GEN_U8_TABLE,     /* each byte drawn from an 8-entry table (E4M3 / E8M0 scales) */
  SY_GEN_AFFINE_SCALE, /* bf16 ±s per group, |s| = half·U(0.75, 1.25) */
  SY_GEN_AFFINE_BIAS,  /* bf16 −s·center of the same group (same key as the scales) */
  SY_GEN_BF16_UNIFORM  /* bf16 center + half·U(−1, 1) per element */
} sy_gen;

typedef struct sy_tensor {
  char *name;
  const char *dtype;   /* "U32", "U8" or "BF16" */
  int ndim;
  int64_t shape[3];
  uint64_t nbytes;
  uint64_t params;     /* logical parameters (mlx-lm get_total_parameters) */
  int shard;
  uint64_t offset;     /* within the shard's data area */
  sy_gen gen;
  uint64_t key;
  float center, half;
  const uint8_t *table;
} sy_tensor;

typedef struct sy_shard {
  char file[64];       /* model.safetensors or model-0000i-of-0000N.safetensors */
  char *header;        /* 8-byte length + JSON, padded so the data starts 64-byte aligned */
  size_t header_len;
  uint64_t data_bytes;
  int *order;          /* tensor indices in data order */
  int n;
} sy_shard;

typedef struct sy_plan {
  char like[32], mode[16];
  int layers;
  sy_tensor *t;
  int nt, cap;
  sy_shard *shards;
  int nshards;
  uint64_t params, data_bytes, file_bytes;
  char *config_json, *generation_json, *index_json;
} sy_plan;

/* Builds the whole plan (nothing written). layers 0 = the preset's count. */
int sy_plan_build(const char *like, const char *mode, int layers, uint64_t seed, sy_plan *p,
                  mlxrt_error *err);
void sy_plan_free(sy_plan *p);

/* Bytes [off, off+len) of tensor t's data. */
void sy_fill(const sy_tensor *t, uint64_t off, size_t len, uint8_t *dst);

/* Shard size limit (mlx-lm MAX_FILE_SIZE_GB = 5). */
#define SY_SHARD_LIMIT ((uint64_t)5 << 30)

#endif
