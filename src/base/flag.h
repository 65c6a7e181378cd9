/* A cancel flag that another thread sets (a server's connection, a signal watcher): read and
 * written as a relaxed atomic, so that the reads see the write without a data race. */
#ifndef MLXRT_BASE_FLAG_H
#define MLXRT_BASE_FLAG_H

/* 1 when f is non-NULL and set. */
static inline int mx_flag_get(const volatile int *f) { return f && __atomic_load_n(f, __ATOMIC_RELAXED) != 0; }
static inline void mx_flag_set(volatile int *f) { __atomic_store_n(f, 1, __ATOMIC_RELAXED); }

#endif
