/* The CPU's streaming-read bandwidth, the roofline every CPU benchmark compares with: all
 * pool threads sum disjoint chunks of a buffer larger than the caches. */
#ifndef MLXRT_ACCEL_CPU_BANDWIDTH_H
#define MLXRT_ACCEL_CPU_BANDWIDTH_H

#include <stddef.h>
#include <stdint.h>

#include "accel/cpu/pool.h"

/* Seconds for one all-threads read pass over buf[0, bytes). */
double cpu_read_pass(cpu_pool *pool, const uint8_t *buf, size_t bytes);
/* GB/s: the median of `runs` passes over a fresh buffer of `bytes` (0 when it cannot be
 * allocated). */
double cpu_read_bandwidth(cpu_pool *pool, size_t bytes, int runs);

#endif
