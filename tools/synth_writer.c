/* Writes a synthetic checkpoint plan: small JSON files, then every shard's header followed by
 * its data, generated on the fly in large chunks by worker threads that pwrite() them in place
 * (never the whole model in memory). Everything goes into DIR.tmp-synth-PID, which is renamed
 * to DIR at the end; on any failure the temporary files are removed. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/bf16.h"
#include "base/error.h"
#include "synth.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the synthetic writer assembles little-endian words"
#endif

#define CHUNK_BYTES ((size_t)16 << 20)
#define MAX_THREADS 64

/* ---- generation -------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The counter-based stream: word w of a tensor (or element w of a per-element generator). */
static inline uint64_t rnd(uint64_t key, uint64_t w) {
  return mix64(key + (w + 1) * 0x9e3779b97f4a7c15ull);
}

static inline float unit(uint64_t h) { /* [0, 1) from the top 24 bits */
  return (float)(h >> 40) * (1.0f / 16777216.0f);
}

static inline float affine_scale(const sy_tensor *t, uint64_t group) {
  uint64_t h = rnd(t->key, group);
  float s = t->half * (0.75f + 0.5f * unit(h));
  return mx_round_bf16(h & 1 ? -s : s);
}

/* Words [w0, w0 + n) of tensor t into dst (8 bytes each, any alignment). */
static void fill_words(const sy_tensor *t, uint64_t w0, size_t n, uint8_t *dst) {
  uint64_t key = t->key;
  switch (t->gen) {
  case SY_GEN_RANDOM:
    for (size_t i = 0; i < n; i++) {
      uint64_t v = rnd(key, w0 + i);
      memcpy(dst + 8 * i, &v, 8);
    }
    break;
  case SY_GEN_FP8_CODES:
    for (size_t i = 0; i < n; i++) {
      uint64_t v = rnd(key, w0 + i) & 0xbfbfbfbfbfbfbfbfull;
      memcpy(dst + 8 * i, &v, 8);
    }
    break;
  case SY_GEN_U8_TABLE:
    for (size_t i = 0; i < n; i++) {
      uint64_t h = rnd(key, w0 + i), v = 0;
      for (int k = 0; k < 8; k++) v |= (uint64_t)t->table[(h >> (8 * k)) & 7] << (8 * k);
      memcpy(dst + 8 * i, &v, 8);
    }
    break;
  case SY_GEN_AFFINE_SCALE:
  case SY_GEN_AFFINE_BIAS:
    for (size_t i = 0; i < n; i++) {
      uint64_t v = 0;
      for (int k = 0; k < 4; k++) {
        float s = affine_scale(t, 4 * (w0 + i) + (uint64_t)k);
        float x = t->gen == SY_GEN_AFFINE_SCALE ? s : -s * t->center;
        v |= (uint64_t)mx_f32_to_bf16(x) << (16 * k);
      }
      memcpy(dst + 8 * i, &v, 8);
    }
    break;
  case SY_GEN_BF16_UNIFORM: {
    float c = t->center, a = t->half * (1.0f / 32768.0f);
    for (size_t i = 0; i < n; i++) {
      uint64_t h = rnd(key, w0 + i), v = 0;
      for (int k = 0; k < 4; k++) {
        int r = (int)((h >> (16 * k)) & 0xffff) - 32768;
        v |= (uint64_t)mx_f32_to_bf16(c + a * (float)r) << (16 * k);
      }
      memcpy(dst + 8 * i, &v, 8);
    }
    break;
  }
  }
}

void sy_fill(const sy_tensor *t, uint64_t off, size_t len, uint8_t *dst) {
  uint8_t tmp[8];
  while (len > 0 && off % 8) { /* leading partial word */
    fill_words(t, off / 8, 1, tmp);
    size_t k = 8 - off % 8 < len ? 8 - off % 8 : len;
    memcpy(dst, tmp + off % 8, k);
    dst += k, off += k, len -= k;
  }
  size_t whole = len / 8;
  if (whole) fill_words(t, off / 8, whole, dst);
  dst += whole * 8, off += whole * 8, len -= whole * 8;
  if (len) { /* trailing partial word */
    fill_words(t, off / 8, 1, tmp);
    memcpy(dst, tmp, len);
  }
}

/* Bytes [off, off+len) of shard s's data area. */
static void fill_shard(const sy_plan *p, const sy_shard *s, uint64_t off, size_t len,
                       uint8_t *dst) {
  int lo = 0, hi = s->n - 1;
  while (lo < hi) { /* first tensor ending after off (data order = increasing offsets) */
    int mid = (lo + hi) / 2;
    const sy_tensor *t = &p->t[s->order[mid]];
    if (t->offset + t->nbytes <= off) lo = mid + 1;
    else hi = mid;
  }
  uint64_t end = off + len;
  for (int i = lo; i < s->n; i++) {
    const sy_tensor *t = &p->t[s->order[i]];
    if (t->offset >= end) break;
    uint64_t a = t->offset > off ? t->offset : off;
    uint64_t b = t->offset + t->nbytes < end ? t->offset + t->nbytes : end;
    if (b > a) sy_fill(t, a - t->offset, (size_t)(b - a), dst + (a - off));
  }
}

/* ---- threaded writing -------------------------------------------------------------------- */

typedef struct wctx {
  const sy_plan *p;
  const char *dir;
  int *fds;
  uint64_t *first_chunk; /* per shard, plus the total at [nshards] */
  atomic_uint_fast64_t next, done;
  atomic_int failed, running;
  volatile int *cancel;
  pthread_mutex_t mu;
  mlxrt_error err;
} wctx;

static int pwrite_all(int fd, const uint8_t *buf, size_t len, uint64_t off) {
  while (len) {
    ssize_t k = pwrite(fd, buf, len, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return -1;
    }
    buf += k, len -= (size_t)k, off += (uint64_t)k;
  }
  return 0;
}

static void set_failed(wctx *w, const char *file, int e) {
  pthread_mutex_lock(&w->mu);
  if (!atomic_load(&w->failed))
    mx_fail(&w->err, "%s/%s: write failed: %s", w->dir, file, strerror(e));
  atomic_store(&w->failed, 1);
  pthread_mutex_unlock(&w->mu);
}

static void *worker(void *arg) {
  wctx *w = arg;
  const sy_plan *p = w->p;
  uint8_t *buf = malloc(CHUNK_BYTES);
  if (!buf) {
    pthread_mutex_lock(&w->mu);
    if (!atomic_load(&w->failed)) mx_fail(&w->err, "out of memory for a write buffer");
    atomic_store(&w->failed, 1);
    pthread_mutex_unlock(&w->mu);
  }
  uint64_t total = w->first_chunk[p->nshards];
  while (buf && !atomic_load(&w->failed) && !(w->cancel && *w->cancel)) {
    uint64_t c = atomic_fetch_add(&w->next, 1);
    if (c >= total) break;
    int s = 0;
    while (c >= w->first_chunk[s + 1]) s++;
    const sy_shard *sh = &p->shards[s];
    uint64_t off = (c - w->first_chunk[s]) * CHUNK_BYTES;
    size_t len = (size_t)(sh->data_bytes - off < CHUNK_BYTES ? sh->data_bytes - off : CHUNK_BYTES);
    fill_shard(p, sh, off, len, buf);
    if (pwrite_all(w->fds[s], buf, len, sh->header_len + off)) {
      set_failed(w, sh->file, errno);
      break;
    }
    atomic_fetch_add(&w->done, len);
  }
  free(buf);
  atomic_fetch_sub(&w->running, 1);
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int write_small(const char *dir, const char *name, const char *text, mlxrt_error *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return mx_fail(err, "%s: cannot create: %s", path, strerror(errno));
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n; /* no final newline, as Python json.dump */
  if (fclose(f) != 0) ok = 0;
  if (!ok) return mx_fail(err, "%s: write failed: %s", path, strerror(errno));
  return 0;
}

/* Opens every shard, reserves its space (so a full disk fails at once) and writes the header. */
static int open_shards(const sy_plan *p, const char *dir, int *fds, mlxrt_error *err) {
  for (int s = 0; s < p->nshards; s++) {
    const sy_shard *sh = &p->shards[s];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, sh->file);
    fds[s] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fds[s] < 0) return mx_fail(err, "%s: cannot create: %s", path, strerror(errno));
    /* fallocate, not posix_fallocate: where the file system cannot reserve, glibc's fallback
     * would write the whole file once more. */
    int e = fallocate(fds[s], 0, 0, (off_t)(sh->header_len + sh->data_bytes)) ? errno : 0;
    if (e == ENOSPC || e == EFBIG)
      return mx_fail(err, "%s: cannot reserve %.2f GB: %s", path,
                     (double)(sh->header_len + sh->data_bytes) / 1e9, strerror(e));
    if (pwrite_all(fds[s], (const uint8_t *)sh->header, sh->header_len, 0))
      return mx_fail(err, "%s: write failed: %s", path, strerror(errno));
  }
  return 0;
}

static int write_data(const sy_plan *p, const char *dir, const mlxrt_synth_options *o,
                      int *fds, mlxrt_error *err) {
  int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  wctx w;
  memset(&w, 0, sizeof w);
  w.p = p;
  w.dir = dir;
  w.fds = fds;
  w.cancel = o->cancel;
  pthread_mutex_init(&w.mu, NULL);
  uint64_t firsts[p->nshards + 1];
  firsts[0] = 0;
  for (int s = 0; s < p->nshards; s++)
    firsts[s + 1] = firsts[s] + (p->shards[s].data_bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
  w.first_chunk = firsts;
  pthread_t tid[MAX_THREADS];
  int started = 0;
  atomic_store(&w.running, threads);
  double t0 = now_s(), last = t0;
  for (; started < threads; started++)
    if (pthread_create(&tid[started], NULL, worker, &w)) break;
  if (started < threads) atomic_fetch_sub(&w.running, threads - started);
  if (!started) {
    pthread_mutex_destroy(&w.mu);
    return mx_fail(err, "cannot start writer threads");
  }
  while (atomic_load(&w.running) > 0) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double t = now_s();
    if (o->progress && t - last >= 0.5) {
      o->progress(o->progress_user, atomic_load(&w.done), p->data_bytes, t - t0);
      last = t;
    }
  }
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  pthread_mutex_destroy(&w.mu);
  if (atomic_load(&w.failed)) {
    *err = w.err;
    return -1;
  }
  if (o->cancel && *o->cancel) return mx_fail(err, "%s: cancelled", o->out_dir);
  if (!o->no_sync)
    for (int s = 0; s < p->nshards; s++)
      if (fsync(fds[s]))
        return mx_fail(err, "%s/%s: fsync failed: %s", dir, p->shards[s].file, strerror(errno));
  if (o->progress) o->progress(o->progress_user, atomic_load(&w.done), p->data_bytes, now_s() - t0);
  return 0;
}

/* ---- the whole job ----------------------------------------------------------------------- */

static const char *SMALL_FILES[] = {"config.json", "generation_config.json",
                                    "model.safetensors.index.json"};

static void remove_tmp(const sy_plan *p, const char *tmp) {
  char path[4096];
  for (int s = 0; s < p->nshards; s++) {
    snprintf(path, sizeof path, "%s/%s", tmp, p->shards[s].file);
    unlink(path);
  }
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp, SMALL_FILES[i]);
    unlink(path);
  }
  rmdir(tmp);
}

/* 1 when dir exists and is an empty directory, 0 when it does not exist, -1 (err set) else. */
static int check_out_dir(const char *dir, mlxrt_error *err) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT) return 0;
    return mx_fail(err, "%s: %s", dir, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return mx_fail(err, "%s: exists and is not a directory", dir);
  if (rmdir(dir) == 0) { /* empty: take it over (recreated by the final rename) */
    if (mkdir(dir, 0755) == 0) return 1;
    return mx_fail(err, "%s: %s", dir, strerror(errno));
  }
  if (errno == ENOTEMPTY || errno == EEXIST)
    return mx_fail(err, "%s: already exists and is not empty (choose a new directory)", dir);
  return mx_fail(err, "%s: %s", dir, strerror(errno));
}

int mlxrt_synth(const mlxrt_synth_options *o, mlxrt_synth_result *res, mlxrt_error *err) {
  if (res) memset(res, 0, sizeof *res);
  if (!o) return mx_fail(err, "no options");
  if (!o->dry_run && (!o->out_dir || !o->out_dir[0])) return mx_fail(err, "no output directory");
  if (o->layers < 0) return mx_fail(err, "layer count %d is out of range (1 to 256)", o->layers);
  sy_plan p;
  if (sy_plan_build(o->like, o->mode, o->layers, o->seed, &p, err)) return -1;
  if (res) {
    res->layers = p.layers;
    res->shards = p.nshards;
    res->tensors = p.nt;
    res->params = p.params;
    res->bytes = p.file_bytes;
  }
  if (o->dry_run) {
    sy_plan_free(&p);
    return 0;
  }
  size_t dl = strlen(o->out_dir);
  while (dl > 1 && o->out_dir[dl - 1] == '/') dl--;
  char dir[4000], tmp[4096];
  if (dl >= sizeof dir) {
    sy_plan_free(&p);
    return mx_fail(err, "output directory name is too long");
  }
  memcpy(dir, o->out_dir, dl);
  dir[dl] = 0;
  int existed = check_out_dir(dir, err);
  if (existed < 0) {
    sy_plan_free(&p);
    return -1;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp-synth-%ld", dir, (long)getpid());
  if (mkdir(tmp, 0755) != 0) {
    mx_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
    if (existed) rmdir(dir), mkdir(dir, 0755);
    sy_plan_free(&p);
    return -1;
  }
  int *fds = malloc((size_t)p.nshards * sizeof *fds);
  int rc = -1;
  double t0 = now_s();
  if (!fds) {
    mx_fail(err, "out of memory");
    goto done;
  }
  for (int s = 0; s < p.nshards; s++) fds[s] = -1;
  if (write_small(tmp, "config.json", p.config_json, err) ||
      write_small(tmp, "generation_config.json", p.generation_json, err) ||
      write_small(tmp, "model.safetensors.index.json", p.index_json, err) ||
      open_shards(&p, tmp, fds, err) || write_data(&p, tmp, o, fds, err))
    goto done;
  for (int s = 0; s < p.nshards; s++) {
    int bad = close(fds[s]) != 0;
    fds[s] = -1;
    if (bad) {
      mx_fail(err, "%s/%s: close failed: %s", tmp, p.shards[s].file, strerror(errno));
      goto done;
    }
  }
  if (existed) rmdir(dir); /* still empty: nothing else may have appeared meanwhile */
  if (rename(tmp, dir) != 0) {
    mx_fail(err, "%s: cannot move the finished checkpoint into place: %s", dir, strerror(errno));
    if (existed) mkdir(dir, 0755);
    goto done;
  }
  rc = 0;
  if (res) res->seconds = now_s() - t0;
done:
  if (fds)
    for (int s = 0; s < p.nshards; s++)
      if (fds[s] >= 0) close(fds[s]);
  free(fds);
  if (rc) remove_tmp(&p, tmp);
  sy_plan_free(&p);
  return rc;
}
