/* A persistent worker pool: cpu_pool_run hands out task indices 0..ntasks-1 to the workers
 * and the calling thread (dynamic claiming, so a worker slowed by a neighbour on a shared
 * machine takes fewer tasks), and returns when all are done. */
#ifndef MLXRT_ACCEL_CPU_POOL_H
#define MLXRT_ACCEL_CPU_POOL_H

#include <stdint.h>

#include "mlxrt.h"

typedef struct cpu_pool cpu_pool;
/* worker is in [0, threads): the caller is 0; use it to index per-thread scratch. */
typedef void (*cpu_task_fn)(void *ctx, int64_t task, int worker);

/* threads <= 0 means the number of online cores; threads counts the calling thread. */
cpu_pool *cpu_pool_create(int threads, mlxrt_error *err);
void cpu_pool_destroy(cpu_pool *p);
int cpu_pool_threads(const cpu_pool *p);
/* Runs fn(ctx, t, worker) for every t in [0, ntasks). p may be NULL (serial). Not reentrant. */
void cpu_pool_run(cpu_pool *p, int64_t ntasks, cpu_task_fn fn, void *ctx);

#endif
