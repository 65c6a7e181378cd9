/* PLACEHOLDER until the CPU kernels land. */
#include "accel/accel.h"
#include "base/error.h"
accel_backend *accel_cpu_create(int threads, mlxrt_error *err) {
  (void)threads;
  mx_fail(err, "CPU backend not built yet");
  return NULL;
}
