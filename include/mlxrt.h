/* mlxrt — run MLX-format Gemma 3 / Gemma 4 checkpoints on the CPU and NVIDIA GPUs.
 * The public C API. Every call that can fail takes an mlxrt_error* (may be NULL) and returns
 * NULL or -1 on failure with a one-line message naming the file/tensor/field at fault. */
#ifndef MLXRT_H
#define MLXRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlxrt_error {
  char msg[1024];
} mlxrt_error;

#ifdef __cplusplus
}
#endif

#endif
