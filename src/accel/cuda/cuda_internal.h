/* The CUDA backend's own API beyond the accel_backend table: what the GPU self-test uses to
 * time kernels on device-resident inputs. Not part of the boundary. */
#ifndef MLXRT_CUDA_INTERNAL_H
#define MLXRT_CUDA_INTERNAL_H

#include "accel/accel.h"
#include "kernels.h"
#include "runtime.h"

#if defined(__GNUC__)
#define CUDA_EXPORT __attribute__((visibility("default")))
#else
#define CUDA_EXPORT
#endif

/* The plug-in's entry point (dlsym'd by accel.c). NULL with a message when no device. */
CUDA_EXPORT accel_backend *mlxrt_cuda_backend_create(const accel_options *opt, mlxrt_error *err);

/* Tests: route every later upload through the generic kernel (compares the two paths). */
void cudab_force_generic(accel_backend *b, int on);
/* Uploads (if needed) and returns the resident layout of w. */
const ck_layout *cudab_resident(accel_backend *b, const accel_weight *w, mlxrt_error *err);
void *cudab_stream(accel_backend *b);
const rt_device_info *cudab_device(accel_backend *b);
/* Copies x [n ≤ 8, cols] to the device staging buffer and preps it for L. */
int cudab_stage_x(accel_backend *b, const ck_layout *L, const uint16_t *x, int64_t n,
                  mlxrt_error *err);
/* Launches the product on the staged x (and the prep again when prep != 0); no sync. */
int cudab_launch(accel_backend *b, const ck_layout *L, int expert, int64_t n, int prep,
                 mlxrt_error *err);
/* Bytes currently resident on the device for weights. */
size_t cudab_resident_bytes(accel_backend *b);

#endif
