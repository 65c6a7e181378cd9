/* The CPU backend: the accel_backend table over cpu_kernels. Weight bytes are the loader's
 * mmap views, fetched once per weight key and checked against the spec's byte counts. */
#include <pthread.h>
#include <stdlib.h>

#include "accel/cpu/cpu_decoder.h"
#include "accel/cpu/cpu_kernels.h"
#include "accel/cpu/cpu_bandwidth.h"
#include "accel/cpu/mlx_compat.h"
#include "base/bf16.h"
#include "base/error.h"

/* A cached weight: heap-allocated, so a pointer to it stays valid while the table grows under
 * another thread. */
typedef struct {
  cpu_qmat m;
  cpu_compat_pack *compat; /* mlx-cpu numerics: the weight re-laid out, built on first use */
} cache_entry;

typedef struct {
  uint64_t key;
  int used;
  cache_entry *e;
} cache_slot;

/* Thread safety: the weight table and the mlx-cpu packs are guarded by `lock`; products run
 * on the shared worker pool, which takes one caller at a time (pool.c). */
typedef struct {
  cpu_pool *pool;
  cpu_isa isa;
  int mlx_compat; /* MLXRT_NUMERICS=mlx-cpu: MLX's CPU bf16 accumulation, for verification */
  pthread_mutex_t lock;
  cache_slot *slots; /* open addressing, power-of-two capacity */
  size_t cap, count;
} cpu_impl;

static size_t slot_of(uint64_t key, size_t cap) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return (size_t)key & (cap - 1);
}

static int cache_grow(cpu_impl *c, mlxrt_error *err) {
  size_t cap = c->cap ? c->cap * 2 : 256;
  cache_slot *s = mx_calloc(cap, sizeof *s, err);
  if (!s) return -1;
  for (size_t i = 0; i < c->cap; i++) {
    if (!c->slots[i].used) continue;
    size_t k = slot_of(c->slots[i].key, cap);
    while (s[k].used) k = (k + 1) & (cap - 1);
    s[k] = c->slots[i];
  }
  free(c->slots);
  c->slots = s;
  c->cap = cap;
  return 0;
}

static const void *load_part(const accel_weight *w, accel_part part, mlxrt_error *err) {
  size_t want = accel_part_bytes(&w->spec, part), got = 0;
  static const char *names[] = {"weight", "scales", "biases"};
  const void *p = w->load(w->load_ctx, part, &got, err);
  if (!p) return NULL;
  if (got != want) {
    mx_fail(err, "%s: %s has %zu bytes, the spec needs %zu", w->name ? w->name : "weight",
            names[part], got, want);
    return NULL;
  }
  return p;
}

/* The weight's cache entry (its decoded description), loading its parts on first use; the
 * caller holds c->lock. */
static cache_entry *get_entry_locked(cpu_impl *c, const accel_weight *w, mlxrt_error *err) {
  if (c->cap) {
    for (size_t k = slot_of(w->key, c->cap); c->slots[k].used; k = (k + 1) & (c->cap - 1))
      if (c->slots[k].key == w->key) return c->slots[k].e;
  }
  const char *name = w->name ? w->name : "weight";
  if (accel_spec_check(&w->spec, name, err)) return NULL;
  if (!w->load) {
    mx_fail(err, "%s: no loader", name);
    return NULL;
  }
  cpu_qmat m = {.spec = w->spec};
  if (!(m.w = load_part(w, ACCEL_PART_WEIGHT, err))) return NULL;
  if (w->spec.mode != ACCEL_MODE_DENSE && !(m.scales = load_part(w, ACCEL_PART_SCALES, err)))
    return NULL;
  if (w->spec.mode == ACCEL_MODE_AFFINE && !(m.biases = load_part(w, ACCEL_PART_BIASES, err)))
    return NULL;
  if ((c->count + 1) * 2 > c->cap && cache_grow(c, err)) return NULL;
  cache_entry *e = mx_calloc(1, sizeof *e, err);
  if (!e) return NULL;
  e->m = m;
  size_t k = slot_of(w->key, c->cap);
  while (c->slots[k].used) k = (k + 1) & (c->cap - 1);
  c->slots[k].used = 1;
  c->slots[k].key = w->key;
  c->slots[k].e = e;
  c->count++;
  return e;
}

static cache_entry *get_entry(cpu_impl *c, const accel_weight *w, mlxrt_error *err) {
  pthread_mutex_lock(&c->lock);
  cache_entry *e = get_entry_locked(c, w, err);
  pthread_mutex_unlock(&c->lock);
  return e;
}

static const cpu_qmat *get_weight(cpu_impl *c, const accel_weight *w, mlxrt_error *err) {
  cache_entry *e = get_entry(c, w, err);
  return e ? &e->m : NULL;
}

static int check_expert(const accel_weight *w, int expert, mlxrt_error *err) {
  int64_t slabs = w->spec.experts > 0 ? w->spec.experts : 1;
  if (expert < -1 || expert >= slabs || (expert == -1 && w->spec.experts > 0))
    return mx_fail(err, "%s: expert %d out of range (weight has %lld)",
                   w->name ? w->name : "weight", expert, (long long)w->spec.experts);
  return 0;
}

static int qmatmul_entry(accel_backend *b, const accel_weight *w, int expert, const uint16_t *x,
                         int64_t n, float *y, int rowwise, mlxrt_error *err) {
  cpu_impl *c = b->impl;
  if (check_expert(w, expert, err)) return -1;
  cache_entry *e = get_entry(c, w, err);
  if (!e) return -1;
  const cpu_qmat *m = &e->m;
  int rc;
  if (c->mlx_compat && cpu_mlx_compat_supports(&m->spec)) {
    /* (the pack is built on first use: the verification mode runs its products one at a time) */
    pthread_mutex_lock(&c->lock);
    rc = cpu_qmatmul_mlx_compat(c->pool, c->isa, m, &e->compat, expert < 0 ? 0 : expert, x, n, y, err);
    pthread_mutex_unlock(&c->lock);
  } else if (rowwise) {
    rc = cpu_qmatmul_rowwise(c->pool, c->isa, m, expert < 0 ? 0 : expert, x, n, y, err);
  } else {
    rc = cpu_qmatmul(c->pool, c->isa, m, expert < 0 ? 0 : expert, x, n, y, err);
  }
  if (rc) return mx_prefix(err, "%s", w->name ? w->name : "weight");
  return 0;
}

static int cpu_qmatmul_entry(accel_backend *b, const accel_weight *w, int expert,
                             const uint16_t *x, int64_t n, float *y, mlxrt_error *err) {
  return qmatmul_entry(b, w, expert, x, n, y, 0, err);
}

/* (MLX's CPU products are row-exact at every n: the emulation's chains do not depend on n) */
static int cpu_qmatmul_rowwise_entry(accel_backend *b, const accel_weight *w, int expert,
                                     const uint16_t *x, int64_t n, float *y, mlxrt_error *err) {
  return qmatmul_entry(b, w, expert, x, n, y, 1, err);
}

static int cpu_embed_rows(accel_backend *b, const accel_weight *w, const int32_t *ids, int64_t n,
                          uint16_t *out, mlxrt_error *err) {
  cpu_impl *c = b->impl;
  const cpu_qmat *m = get_weight(c, w, err);
  if (!m) return -1;
  if (w->spec.experts > 0)
    return mx_fail(err, "%s: embedding rows from a stacked (expert) weight", w->name ? w->name : "weight");
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= w->spec.rows)
      return mx_fail(err, "%s: token id %d out of range [0, %lld)", w->name ? w->name : "weight",
                     (int)ids[i], (long long)w->spec.rows);
    cpu_dequantize_row_bf16(m, 0, ids[i], out + (size_t)i * (size_t)w->spec.cols);
  }
  return 0;
}

/* The roofline for benchmarks: a 512 MiB all-threads read, median of 5. */
static double cpu_backend_read_bandwidth(accel_backend *b) {
  cpu_impl *c = b->impl;
  return cpu_read_bandwidth(c->pool, (size_t)512 << 20, 5);
}

static void cpu_destroy(accel_backend *b) {
  if (!b) return;
  cpu_impl *c = b->impl;
  if (c) {
    cpu_pool_destroy(c->pool);
    for (size_t i = 0; i < c->cap; i++)
      if (c->slots[i].used) {
        cpu_compat_pack_free(c->slots[i].e->compat);
        free(c->slots[i].e);
      }
    free(c->slots);
    pthread_mutex_destroy(&c->lock);
    free(c);
  }
  free(b);
}

static void cpu_host_for(accel_backend *b, int64_t ntasks, accel_host_task fn, void *ctx) {
  cpu_pool_run(((cpu_impl *)b->impl)->pool, ntasks, fn, ctx);
}

accel_backend *accel_cpu_create(int threads, mlxrt_error *err) { return accel_cpu_create_numerics(threads, NULL, err); }

accel_backend *accel_cpu_create_numerics(int threads, const char *numerics, mlxrt_error *err) {
  cpu_isa isa;
  int compat;
  if (cpu_isa_from_env(&isa, err) || cpu_mlx_compat_choose(numerics, &compat, err)) return NULL;
  accel_backend *b = mx_calloc(1, sizeof *b, err);
  cpu_impl *c = b ? mx_calloc(1, sizeof *c, err) : NULL;
  if (!c) {
    free(b);
    return NULL;
  }
  b->impl = c;
  pthread_mutex_init(&c->lock, NULL);
  c->isa = isa;
  c->mlx_compat = compat;
  b->mlx_cpu_numerics = compat;
  if (!(c->pool = cpu_pool_create(threads, err))) {
    cpu_destroy(b);
    return NULL;
  }
  b->name = "cpu";
  b->decoder_prompt_chunk = CPU_DEC_CHUNK;
  b->decoder_batch_shares_reads = 1;
  b->qmatmul = cpu_qmatmul_entry;
  b->qmatmul_rowwise = cpu_qmatmul_rowwise_entry;
  b->embed_rows = cpu_embed_rows;
  b->decoder_create = cpu_decoder_create;
  b->decoder_step = cpu_decoder_step;
  b->decoder_free = cpu_decoder_free;
  b->decoder_memory = cpu_decoder_memory;
  b->decoder_batch_init = cpu_decoder_batch_init;
  b->decoder_slot_prompt = cpu_decoder_slot_prompt;
  b->decoder_batch_step = cpu_decoder_batch_step;
  b->read_bandwidth = cpu_backend_read_bandwidth;
  b->host_for = cpu_host_for;
  b->host_workers = cpu_pool_threads(c->pool);
  b->destroy = cpu_destroy;
  return b;
}
