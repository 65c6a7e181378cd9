/* A sliding layer's ring on the device: window + ACCEL_RING_SLACK slots (accel_ring.h), position
 * j in slot j % ck_ring(window). */
#ifndef MLXRT_CK_RING_CUH
#define MLXRT_CK_RING_CUH

#include "accel/accel_ring.h"

__host__ __device__ constexpr int ck_ring(int window) { return window + ACCEL_RING_SLACK; }

#endif
