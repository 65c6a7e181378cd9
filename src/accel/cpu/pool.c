/* Persistent worker pool. Workers claim tasks with an atomic counter. Between jobs a worker
 * first watches for the next one for up to POOL_SPIN_NS, then sleeps on a condition variable;
 * the caller likewise watches for the workers' end of a job before it sleeps. A decode step is
 * a chain of jobs of a few hundred microseconds each, and a wake-up through the kernel takes
 * tens of them: each one left a core idle at the start and the end of every job. The spin is
 * bounded, so a pool with nothing to do sleeps (the machines this runs on are often shared).
 * Callers in several threads take turns: one job at a time (run_mu, uncontended when one thread
 * drives the pool). */
#include "accel/cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_RELAX() _mm_pause()
#else
#define POOL_RELAX() ((void)0)
#endif

#include "base/error.h"

typedef struct {
  cpu_pool *p;
  int id;
} worker_arg;

struct cpu_pool {
  int threads; /* including the caller */
  pthread_t *tids;
  worker_arg *args;
  int started; /* workers actually created */
  pthread_mutex_t run_mu; /* held by the caller for a whole job */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  atomic_uint_fast64_t generation; /* bumped per job (under mu); workers run each generation once */
  atomic_int stop;
  atomic_int busy; /* workers still inside the current job */
  /* current job */
  cpu_task_fn fn;
  void *ctx;
  int64_t ntasks;
  atomic_int_fast64_t next;
};

static void drain(cpu_pool *p, int worker) {
  for (;;) {
    int64_t t = atomic_fetch_add(&p->next, 1);
    if (t >= p->ntasks) break;
    p->fn(p->ctx, t, worker);
  }
}

/* How long a thread watches for the other side before it sleeps: several jobs' worth */
#define POOL_SPIN_NS 50000

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Whether done(p, arg) became true within POOL_SPIN_NS (the clock read every 64 rounds). */
static int spin_until(cpu_pool *p, int (*done)(cpu_pool *, uint64_t), uint64_t arg) {
  int64_t end = 0;
  for (unsigned i = 0;; i++) {
    if (done(p, arg)) return 1;
    if ((i & 63) == 0) {
      const int64_t t = now_ns();
      if (!end) end = t + POOL_SPIN_NS;
      else if (t > end) return 0;
    }
    POOL_RELAX();
  }
}
static int new_job(cpu_pool *p, uint64_t seen) {
  return atomic_load_explicit(&p->generation, memory_order_acquire) != seen ||
         atomic_load_explicit(&p->stop, memory_order_relaxed);
}
static int job_done(cpu_pool *p, uint64_t unused) {
  (void)unused;
  return atomic_load_explicit(&p->busy, memory_order_acquire) == 0;
}

static void *worker(void *arg) {
  cpu_pool *p = ((worker_arg *)arg)->p;
  int id = ((worker_arg *)arg)->id;
  uint64_t seen = 0;
  for (;;) {
    spin_until(p, new_job, seen);
    pthread_mutex_lock(&p->mu);
    while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (atomic_load(&p->stop)) break;
    seen = atomic_load(&p->generation);
    pthread_mutex_unlock(&p->mu);
    drain(p, id);
    /* the last one out wakes a caller that went to sleep; under mu, so that a caller between its
     * check of busy and its wait cannot miss the signal */
    if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

cpu_pool *cpu_pool_create(int threads, mlxrt_error *err) {
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  if (threads > 1024) threads = 1024;
  cpu_pool *p = mx_calloc(1, sizeof *p, err);
  if (!p) return NULL;
  p->threads = threads;
  pthread_mutex_init(&p->run_mu, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->next, 0);
  atomic_init(&p->generation, 0);
  atomic_init(&p->stop, 0);
  atomic_init(&p->busy, 0);
  if (threads > 1) {
    p->tids = mx_calloc((size_t)threads - 1, sizeof *p->tids, err);
    p->args = p->tids ? mx_calloc((size_t)threads - 1, sizeof *p->args, err) : NULL;
    if (!p->args) {
      cpu_pool_destroy(p);
      return NULL;
    }
    for (int i = 0; i < threads - 1; i++) {
      p->args[i].p = p;
      p->args[i].id = i + 1;
      if (pthread_create(&p->tids[i], NULL, worker, &p->args[i]) != 0) {
        mx_fail(err, "CPU backend: cannot start worker thread %d of %d", i + 1, threads - 1);
        cpu_pool_destroy(p);
        return NULL;
      }
      p->started++;
    }
  }
  return p;
}

void cpu_pool_destroy(cpu_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->tids[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->run_mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  free(p->tids);
  free(p->args);
  free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p ? p->threads : 1; }

void cpu_pool_run(cpu_pool *p, int64_t ntasks, cpu_task_fn fn, void *ctx) {
  if (ntasks <= 0) return;
  if (!p || p->started == 0 || ntasks == 1) {
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_mutex_lock(&p->run_mu);
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->ntasks = ntasks;
  atomic_store(&p->next, 0);
  atomic_store(&p->busy, p->started);
  /* the job's fields are published by this release (a spinning worker's acquire) and by mu */
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  drain(p, 0);
  if (!spin_until(p, job_done, 0)) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&p->run_mu);
}
