/* What the command line offers beyond the runtime library: writing safetensors files
 * (`mlxrt logits -o`) and synthetic checkpoints (`mlxrt synth`). Tools only: not part of
 * libmlxrt. */
#ifndef MLXRT_TOOLS_WRITE_H
#define MLXRT_TOOLS_WRITE_H

#include <stdint.h>

#include "mlxrt.h"

/* ---- writing tensors ------------------------------------------------------------------------ */
typedef enum { MLXRT_F32 = 0, MLXRT_I32 = 1 } mlxrt_dtype;
typedef struct mlxrt_tensor_out {
  const char *name;
  mlxrt_dtype dtype;
  int ndim;
  int64_t shape[4];
  const void *data;
} mlxrt_tensor_out;
/* Writes a .safetensors file atomically (a temporary file renamed into place), with
 * __metadata__ from the key/value pairs (meta may be NULL). */
int mlxrt_save_safetensors(const char *path, const mlxrt_tensor_out *t, int n,
                           const char *const *meta_kv, int n_meta, mlxrt_error *err);

/* ---- synthetic checkpoints ------------------------------------------------------------------ */
/* Writes an MLX-format checkpoint with random weights of a released model's real shapes (no
 * tokenizer: benchmarks feed token ids). Deterministic from the seed. The output directory must
 * not exist (or be empty); files are written into DIR.tmp-synth-PID and renamed into place at the
 * end, so a failure or cancellation never leaves a partial DIR. */
typedef struct mlxrt_synth_options {
  const char *like;      /* preset, e.g. "gemma4-31b" (see mlxrt_synth_presets) */
  const char *mode;      /* "nvfp4", "mxfp4", "mxfp8", "affine4", "affine8" or "bf16" */
  const char *out_dir;
  int layers;            /* 0 = the preset's count; else keeps the preset's layer pattern */
  uint64_t seed;
  int threads;           /* generator/writer threads; <= 0 = all cores */
  int dry_run;           /* plan only: fills the result, writes nothing */
  int no_sync;           /* skip the final fsync of each shard */
  volatile int *cancel;  /* when set non-zero the write stops and cleans up */
  /* Called about twice a second while writing (may be NULL). */
  void (*progress)(void *user, uint64_t bytes_done, uint64_t bytes_total, double seconds);
  void *progress_user;
} mlxrt_synth_options;

typedef struct mlxrt_synth_result {
  int layers, shards, tensors;
  uint64_t params;       /* as mlx-lm counts them (packed weights unpacked, norms included) */
  uint64_t bytes;        /* all safetensors files, headers included */
  double seconds;        /* writing, fsync included */
} mlxrt_synth_result;

int mlxrt_synth(const mlxrt_synth_options *opt, mlxrt_synth_result *res, mlxrt_error *err);
/* "gemma4-31b, gemma4-26b-a4b, ..." (static string). */
const char *mlxrt_synth_presets(void);

#endif
