/* Persistent worker pool. Workers sleep on a condition variable between jobs (no spinning:
 * the machines this runs on are often shared), claim tasks with an atomic counter, and the
 * last one to finish wakes the caller. Callers in several threads take turns: one job at a time
 * (run_mu, uncontended when one thread drives the pool). */
#include "accel/cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

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
  uint64_t generation; /* bumped per job; workers run each generation once */
  int stop;
  int busy; /* workers still inside the current job */
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

static void *worker(void *arg) {
  cpu_pool *p = ((worker_arg *)arg)->p;
  int id = ((worker_arg *)arg)->id;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    drain(p, id);
    pthread_mutex_lock(&p->mu);
    if (--p->busy == 0) pthread_cond_signal(&p->done);
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
  p->stop = 1;
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
  p->busy = p->started;
  p->generation++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  drain(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->run_mu);
}
