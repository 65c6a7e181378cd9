/* The CUDA backend behind the accel boundary: weight residency keyed by accel_weight.key,
 * staging buffers grown once and reused, and the op entry points. Per qmatmul call: one
 * host→device copy of x, two launches per 8 activation rows, one device→host copy of y and
 * one stream synchronisation; no allocation once the buffers have grown (docs/CUDA.md).
 * Thread safety: one lock per backend serialises the weight cache and the per-product path's
 * staging buffers; decoders (cuda_decoder.c) take it only while they make weights resident, and
 * run their steps on their own streams. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda_decoder.h"
#include "cuda_internal.h"
#include "tuning.h"

/* A resident weight. Heap-allocated so the layout pointer handed out stays valid when the
 * cache table grows (the decoder keeps those pointers for its whole life). */
typedef struct cw_data {
  accel_spec spec;
  ck_layout L;
  size_t bytes;
} cw_data;

typedef struct cw_entry {
  int used;
  uint64_t key;
  cw_data *d;
} cw_entry;

typedef struct cuda_impl {
  rt_device_info dev;
  void *stream;
  cw_entry *tab;
  size_t cap, count;
  size_t resident_bytes;
  /* staging, grown on demand */
  void *d_x, *d_xp, *d_xs, *d_pmax, *d_y, *d_ids, *d_emb, *h_stage;
  size_t d_x_cap, d_xp_cap, d_xs_cap, d_pmax_cap, d_y_cap, d_ids_cap, d_emb_cap, h_stage_cap;
  int *d_xexp;
  int verbose, force_generic;
  pthread_mutex_t lock;
} cuda_impl;

static const char *wname(const accel_weight *w) { return w->name ? w->name : "(unnamed weight)"; }

/* ---- staging -------------------------------------------------------------------------- */
static int grow_dev(void **p, size_t *cap, size_t need, mlxrt_error *err) {
  if (need <= *cap) return 0;
  size_t n = need + need / 2;
  rt_free(*p);
  *p = NULL;
  *cap = 0;
  if (rt_malloc(p, n, err)) return -1;
  *cap = n;
  return 0;
}

static int grow_host(cuda_impl *c, size_t need, mlxrt_error *err) {
  if (need <= c->h_stage_cap) return 0;
  size_t n = need + need / 2;
  rt_host_free(c->h_stage);
  c->h_stage = NULL;
  c->h_stage_cap = 0;
  if (rt_host_alloc(&c->h_stage, n, err)) return -1;
  c->h_stage_cap = n;
  return 0;
}

/* ---- weight table --------------------------------------------------------------------- */
static size_t slot_of(uint64_t key, size_t cap) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return (size_t)key & (cap - 1);
}

static cw_entry *find(cuda_impl *c, uint64_t key) {
  if (!c->cap) return NULL;
  for (size_t i = slot_of(key, c->cap);; i = (i + 1) & (c->cap - 1)) {
    if (!c->tab[i].used) return NULL;
    if (c->tab[i].key == key) return &c->tab[i];
  }
}

static cw_entry *insert(cuda_impl *c, uint64_t key, mlxrt_error *err) {
  if ((c->count + 1) * 2 > c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 64;
    cw_entry *nt = mx_calloc(ncap, sizeof *nt, err);
    if (!nt) return NULL;
    for (size_t i = 0; i < c->cap; i++) {
      if (!c->tab[i].used) continue;
      size_t j = slot_of(c->tab[i].key, ncap);
      while (nt[j].used) j = (j + 1) & (ncap - 1);
      nt[j] = c->tab[i];
    }
    free(c->tab);
    c->tab = nt;
    c->cap = ncap;
  }
  size_t i = slot_of(key, c->cap);
  while (c->tab[i].used) i = (i + 1) & (c->cap - 1);
  c->tab[i].used = 1;
  c->tab[i].key = key;
  c->count++;
  return &c->tab[i];
}

static void free_layout(ck_layout *L) {
  rt_free(L->w);
  rt_free(L->s);
  rt_free(L->b);
  L->w = L->s = L->b = NULL;
}

/* ---- upload --------------------------------------------------------------------------- */
/* Which kernel a spec gets; parts are the loaded host bytes (nvfp4 scales are scanned). */
static int choose_format(const cuda_impl *c, const accel_spec *s, const void *scales,
                         size_t scale_bytes) {
  if (c->force_generic) return CK_GENERIC;
  int uk;
  switch (s->mode) {
  case ACCEL_MODE_DENSE:
    if (s->cols % 32) return CK_GENERIC;
    return s->dense_dtype == ACCEL_BF16 ? CK_DBF16 : s->dense_dtype == ACCEL_F16 ? CK_DF16 : CK_GENERIC;
  case ACCEL_MODE_AFFINE:
    if (s->scales_dtype == ACCEL_F32 || (s->bits != 4 && s->bits != 8)) return CK_GENERIC;
    uk = ck_unit_k(s->bits == 4 ? CK_AFF4 : CK_AFF8, s->group_size);
    if (s->cols % uk) return CK_GENERIC;
    return s->bits == 4 ? CK_AFF4 : CK_AFF8;
  case ACCEL_MODE_NVFP4: {
    if (s->cols % 64) return CK_GENERIC;
    /* the tile layout's 7-bit scale codes cover 0 ≤ s ≤ 120 (E4M3 byte ≤ 0x6F; ck_device.cuh):
     * MLX's quantizer stays far below; anything else takes the generic kernel */
    const uint8_t *p = scales;
    for (size_t i = 0; i < scale_bytes; i++)
      if (p[i] > 0x6F) return CK_GENERIC;
    return CK_NVFP4;
  }
  case ACCEL_MODE_MXFP4:
    return s->cols % 64 ? CK_GENERIC : CK_MXFP4;
  case ACCEL_MODE_MXFP8:
    return s->cols % 32 ? CK_GENERIC : CK_MXFP8;
  }
  return CK_GENERIC;
}

static int upload_part(cuda_impl *c, void **dst, const void *src, size_t n, mlxrt_error *err) {
  if (rt_malloc(dst, n, err)) return -1;
  if (rt_h2d(*dst, src, n, c->stream, err)) return -1;
  return 0;
}

static int upload(cuda_impl *c, const accel_weight *w, cw_data *e, mlxrt_error *err) {
  const accel_spec *s = &w->spec;
  const void *part[3] = {NULL, NULL, NULL};
  size_t want[3];
  for (int p = 0; p < 3; p++) {
    want[p] = accel_part_bytes(s, (accel_part)p);
    if (!want[p]) continue;
    if (!w->load) return mx_fail(err, "%s: no loader for its bytes", wname(w));
    size_t got = 0;
    part[p] = w->load(w->load_ctx, (accel_part)p, &got, err);
    if (!part[p]) return mx_prefix(err, "%s", wname(w));
    if (got != want[p])
      return mx_fail(err, "%s: part %s has %zu bytes, expected %zu for %s %lldx%lld", wname(w),
                     p == 0 ? "weight" : p == 1 ? "scales" : "biases", got, want[p],
                     accel_mode_name(s->mode), (long long)s->rows, (long long)s->cols);
  }
  ck_layout *L = &e->L;
  memset(L, 0, sizeof *L);
  L->fmt = choose_format(c, s, part[1], want[1]);
  L->mode = (int)s->mode;
  L->bits = s->bits;
  L->group_size = s->group_size;
  L->dense_dtype = (int)s->dense_dtype;
  L->scales_dtype = (int)s->scales_dtype;
  L->slabs = s->experts > 0 ? s->experts : 1;
  L->rows = s->rows;
  L->cols = s->cols;
  void *raw[3] = {NULL, NULL, NULL};
  int rc = -1;
  if (L->fmt == CK_GENERIC) {
    for (int p = 0; p < 3; p++)
      if (want[p] && upload_part(c, &raw[p], part[p], want[p], err)) goto fail;
    L->w = raw[0];
    L->s = raw[1];
    L->b = raw[2];
    raw[0] = raw[1] = raw[2] = NULL;
    L->w_slab = want[0] / (size_t)L->slabs;
    L->s_slab = want[1] / (size_t)L->slabs;
    L->b_slab = want[2] / (size_t)L->slabs;
    e->bytes = want[0] + want[1] + want[2];
    if (rt_stream_sync(c->stream, err)) goto fail;
  } else {
    L->tiles = (L->rows + 15) / 16;
    L->nunits = L->cols / ck_unit_k(L->fmt, L->group_size);
    L->w_slab = ck_rep_w_bytes(L);
    L->s_slab = (L->fmt == CK_DBF16 || L->fmt == CK_DF16) ? 0 : ck_rep_s_bytes(L);
    if (rt_malloc(&L->w, L->w_slab * (size_t)L->slabs, err)) goto fail;
    if (L->s_slab && rt_malloc(&L->s, L->s_slab * (size_t)L->slabs, err)) goto fail;
    for (int p = 0; p < 3; p++)
      if (want[p] && upload_part(c, &raw[p], part[p], want[p], err)) goto fail;
    if (rt_status(ck_repack(L, raw[0], raw[1], raw[2], c->stream), "repack kernel launch", err)) goto fail;
    if (rt_stream_sync(c->stream, err)) goto fail;
    e->bytes = (L->w_slab + L->s_slab) * (size_t)L->slabs;
  }
  c->resident_bytes += e->bytes;
  if (c->verbose)
    fprintf(stderr, "mlxrt cuda: uploaded %s (%s %d-bit, %lldx%lld%s, %.1f MB, %s kernel)\n",
            wname(w), accel_mode_name(s->mode), s->bits, (long long)s->rows, (long long)s->cols,
            s->experts > 0 ? " stacked" : "", (double)e->bytes / 1e6,
            L->fmt == CK_GENERIC ? "generic" : "tensor-core");
  rc = 0;
fail:
  for (int p = 0; p < 3; p++) rt_free(raw[p]);
  if (rc) {
    mx_prefix(err, "uploading %s", wname(w));
    free_layout(L);
  }
  return rc;
}

static const ck_layout *resident(cuda_impl *c, const accel_weight *w, mlxrt_error *err) {
  cw_entry *e = find(c, w->key);
  if (e) {
    if (memcmp(&e->d->spec, &w->spec, sizeof w->spec) != 0) {
      mx_fail(err, "%s: cache key %llu already names a weight of another shape or format",
              wname(w), (unsigned long long)w->key);
      return NULL;
    }
    return &e->d->L;
  }
  if (accel_spec_check(&w->spec, wname(w), err)) return NULL;
  cw_data *d = mx_calloc(1, sizeof *d, err);
  if (!d) return NULL;
  d->spec = w->spec;
  if (upload(c, w, d, err)) {
    free(d);
    return NULL;
  }
  e = insert(c, w->key, err);
  if (!e) {
    free_layout(&d->L);
    free(d);
    return NULL;
  }
  e->d = d;
  return &d->L;
}

/* ---- products ------------------------------------------------------------------------- */
static int slab_of(const accel_weight *w, int expert, int64_t *slab, mlxrt_error *err) {
  if (w->spec.experts > 0) {
    if (expert < 0 || expert >= w->spec.experts)
      return mx_fail(err, "%s: expert %d out of range [0, %lld)", wname(w), expert,
                     (long long)w->spec.experts);
    *slab = expert;
  } else {
    if (expert > 0) return mx_fail(err, "%s: expert %d given for a rank-2 weight", wname(w), expert);
    *slab = 0;
  }
  return 0;
}

static int ensure_x_staging(cuda_impl *c, const ck_layout *L, int64_t n, mlxrt_error *err) {
  int64_t kp = ck_xp_cols(L);
  if (grow_dev(&c->d_x, &c->d_x_cap, (size_t)n * (size_t)L->cols * 2, err)) return -1;
  if (grow_dev(&c->d_xp, &c->d_xp_cap, (size_t)kp * 8 * 2, err)) return -1;
  if (grow_dev(&c->d_xs, &c->d_xs_cap, (size_t)(kp / 32 + 1) * 8 * sizeof(float), err)) return -1;
  if (grow_dev(&c->d_pmax, &c->d_pmax_cap, ck_xprep_pmax_floats(L->cols) * sizeof(float), err)) return -1;
  return 0;
}

/* Runs the product on x already at d_x (n rows): prep + kernel per 8 rows. */
static int launch_rows(cuda_impl *c, const ck_layout *L, int64_t slab, int64_t n, int prep,
                       mlxrt_error *err) {
  for (int64_t b0 = 0; b0 < n; b0 += 8) {
    int nb = (int)(n - b0 < 8 ? n - b0 : 8);
    const uint16_t *x = (const uint16_t *)c->d_x + b0 * L->cols;
    if (L->fmt != CK_GENERIC && prep &&
        rt_status(ck_xprep(L, x, nb, c->d_xp, c->d_xs, c->d_xexp, c->d_pmax, c->stream), "x prep launch", err))
      return -1;
    if (rt_status(ck_qmv(L, slab, x, c->d_xp, c->d_xs, c->d_xexp, nb, (float *)c->d_y + b0 * L->rows,
                         L->rows, c->stream),
                  "mat-vec launch", err))
      return -1;
  }
  return 0;
}

static int qmatmul_locked(cuda_impl *c, const accel_weight *w, int expert, const uint16_t *x, int64_t n, float *y,
                          mlxrt_error *err) {
  if (n < 0) return mx_fail(err, "%s: negative row count %lld", wname(w), (long long)n);
  const ck_layout *L = resident(c, w, err);
  if (!L) return -1;
  int64_t slab = 0;
  if (slab_of(w, expert, &slab, err)) return -1;
  if (n == 0) return 0;
  size_t xb = (size_t)n * (size_t)L->cols * 2, yb = (size_t)n * (size_t)L->rows * 4;
  if (ensure_x_staging(c, L, n, err) || grow_dev(&c->d_y, &c->d_y_cap, yb, err) ||
      grow_host(c, xb > yb ? xb : yb, err))
    return mx_prefix(err, "%s", wname(w));
  memcpy(c->h_stage, x, xb);
  if (rt_h2d(c->d_x, c->h_stage, xb, c->stream, err) || launch_rows(c, L, slab, n, 1, err) ||
      rt_d2h(c->h_stage, c->d_y, yb, c->stream, err) || rt_stream_sync(c->stream, err))
    return mx_prefix(err, "%s", wname(w));
  memcpy(y, c->h_stage, yb);
  return 0;
}

static int cuda_qmatmul(accel_backend *b, const accel_weight *w, int expert, const uint16_t *x, int64_t n, float *y,
                        mlxrt_error *err) {
  cuda_impl *c = b->impl;
  pthread_mutex_lock(&c->lock);
  const int rc = qmatmul_locked(c, w, expert, x, n, y, err);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

static int embed_rows_locked(cuda_impl *c, const accel_weight *w, const int32_t *ids, int64_t n, uint16_t *out,
                             mlxrt_error *err) {
  if (w->spec.experts > 0)
    return mx_fail(err, "%s: embedding rows from a stacked (expert) weight", wname(w));
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= w->spec.rows)
      return mx_fail(err, "%s: token id %d out of range [0, %lld)", wname(w), (int)ids[i],
                     (long long)w->spec.rows);
  const ck_layout *L = resident(c, w, err);
  if (!L) return -1;
  if (n <= 0) return 0;
  size_t ib = (size_t)n * 4, ob = (size_t)n * (size_t)L->cols * 2;
  if (grow_dev(&c->d_ids, &c->d_ids_cap, ib, err) || grow_dev(&c->d_emb, &c->d_emb_cap, ob, err) ||
      grow_host(c, ib > ob ? ib : ob, err))
    return mx_prefix(err, "%s", wname(w));
  memcpy(c->h_stage, ids, ib);
  if (rt_h2d(c->d_ids, c->h_stage, ib, c->stream, err) ||
      rt_status(ck_embed(L, c->d_ids, n, c->d_emb, c->stream), "embedding launch", err) ||
      rt_d2h(c->h_stage, c->d_emb, ob, c->stream, err) || rt_stream_sync(c->stream, err))
    return mx_prefix(err, "%s", wname(w));
  memcpy(out, c->h_stage, ob);
  return 0;
}

static int cuda_embed_rows(accel_backend *b, const accel_weight *w, const int32_t *ids, int64_t n, uint16_t *out,
                           mlxrt_error *err) {
  cuda_impl *c = b->impl;
  pthread_mutex_lock(&c->lock);
  const int rc = embed_rows_locked(c, w, ids, n, out, err);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

static void cuda_destroy(accel_backend *b) {
  if (!b) return;
  cuda_impl *c = b->impl;
  if (c) {
    if (c->stream) {
      mlxrt_error ignore;
      rt_stream_sync(c->stream, &ignore);
    }
    for (size_t i = 0; i < c->cap; i++)
      if (c->tab[i].used) {
        free_layout(&c->tab[i].d->L);
        free(c->tab[i].d);
      }
    free(c->tab);
    rt_free(c->d_x);
    rt_free(c->d_xp);
    rt_free(c->d_xs);
    rt_free(c->d_pmax);
    rt_free(c->d_y);
    rt_free(c->d_ids);
    rt_free(c->d_emb);
    rt_free(c->d_xexp);
    rt_host_free(c->h_stage);
    rt_stream_destroy(c->stream);
    pthread_mutex_destroy(&c->lock);
    free(c);
  }
  free(b);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The roofline a benchmark compares with: the median of 7 timed streaming reads of a 2 GiB
 * buffer (far beyond the L2), the same read kernel as mlxrt-cuda-test. 0 when it cannot be
 * measured (not enough free memory, say). */
static double cuda_read_bandwidth(accel_backend *b) {
  cuda_impl *c = b->impl;
  const size_t bytes = (size_t)2 << 30;
  void *buf = NULL, *sink = NULL, *e0 = NULL, *e1 = NULL;
  mlxrt_error err = {{0}};
  double gbs = 0.0;
  float t[7];
  if (rt_malloc(&buf, bytes, &err) || rt_malloc(&sink, 16, &err) || rt_memset(buf, 0x5a, bytes, c->stream, &err) ||
      rt_event_create(&e0, &err) || rt_event_create(&e1, &err))
    goto done;
  for (int r = -2; r < 7; r++) {
    float ms = 0;
    if (rt_event_record(e0, c->stream, &err) ||
        rt_status(ck_read_bw(buf, bytes, (unsigned *)sink, c->dev.sms, c->stream), "read kernel", &err) ||
        rt_event_record(e1, c->stream, &err) || rt_event_ms(e0, e1, &ms, &err))
      goto done;
    if (r >= 0) t[r] = ms;
  }
  qsort(t, 7, sizeof *t, cmp_float);
  gbs = t[3] > 0 ? (double)bytes / (t[3] * 1e-3) / 1e9 : 0.0;
done:
  if (err.msg[0] && c->verbose) fprintf(stderr, "mlxrt cuda: read bandwidth not measured: %s\n", err.msg);
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  rt_free(buf);
  rt_free(sink);
  return gbs;
}

accel_backend *mlxrt_cuda_backend_create(const accel_options *opt, mlxrt_error *err) {
  accel_backend *b = mx_calloc(1, sizeof *b, err);
  cuda_impl *c = mx_calloc(1, sizeof *c, err);
  if (!b || !c) {
    free(b);
    free(c);
    return NULL;
  }
  b->name = "cuda";
  b->impl = c;
  b->decoder_fast = 1;
  b->kv_k_planar = 1;
  b->decoder_prompt_chunk = PF_CHUNK;
  b->decoder_batch_shares_reads = 1;
  pthread_mutex_init(&c->lock, NULL);
  b->qmatmul = cuda_qmatmul;
  b->embed_rows = cuda_embed_rows;
  b->decoder_create = cuda_decoder_create;
  b->decoder_step = cuda_decoder_step;
  b->decoder_batch_init = cuda_decoder_batch_init;
  b->decoder_slot_prompt = cuda_decoder_slot_prompt;
  b->decoder_batch_step = cuda_decoder_batch_step;
  b->decoder_free = cuda_decoder_free;
  b->decoder_memory = cuda_decoder_memory;
  b->decoder_kv_read_bytes = cuda_decoder_kv_read_bytes;
  b->read_bandwidth = cuda_read_bandwidth;
  b->destroy = cuda_destroy;
  c->verbose = opt ? opt->verbose : 0;
  if (rt_device_open(&c->dev, err)) goto fail;
  if (c->dev.cc_major < 9) {
    mx_fail(err, "CUDA device %d (%s) has compute capability %d.%d; this plug-in needs 9.0 or newer",
            c->dev.index, c->dev.name, c->dev.cc_major, c->dev.cc_minor);
    goto fail;
  }
  if (rt_stream_create(&c->stream, err)) goto fail;
  if (rt_malloc((void **)&c->d_xexp, 8 * sizeof(int), err)) goto fail;
  if (c->verbose)
    fprintf(stderr, "mlxrt cuda: device %d %s (sm_%d%d, %d SMs, %.1f GB)\n", c->dev.index,
            c->dev.name, c->dev.cc_major, c->dev.cc_minor, c->dev.sms, (double)c->dev.total_mem / 1e9);
  return b;
fail:
  mx_prefix(err, "CUDA backend");
  cuda_destroy(b);
  return NULL;
}

/* ---- internal API for the GPU self-test ----------------------------------------------- */
void cudab_force_generic(accel_backend *b, int on) { ((cuda_impl *)b->impl)->force_generic = on; }

const ck_layout *cudab_resident(accel_backend *b, const accel_weight *w, mlxrt_error *err) {
  cuda_impl *c = b->impl;
  pthread_mutex_lock(&c->lock);
  const ck_layout *L = resident(c, w, err);
  pthread_mutex_unlock(&c->lock);
  return L;
}

void *cudab_stream(accel_backend *b) { return ((cuda_impl *)b->impl)->stream; }

const rt_device_info *cudab_device(accel_backend *b) { return &((cuda_impl *)b->impl)->dev; }

size_t cudab_resident_bytes(accel_backend *b) { return ((cuda_impl *)b->impl)->resident_bytes; }

int cudab_stage_x(accel_backend *b, const ck_layout *L, const uint16_t *x, int64_t n,
                  mlxrt_error *err) {
  cuda_impl *c = b->impl;
  size_t xb = (size_t)n * (size_t)L->cols * 2;
  if (ensure_x_staging(c, L, n, err) || grow_dev(&c->d_y, &c->d_y_cap, (size_t)n * L->rows * 4, err) ||
      grow_host(c, xb, err))
    return -1;
  memcpy(c->h_stage, x, xb);
  if (rt_h2d(c->d_x, c->h_stage, xb, c->stream, err)) return -1;
  if (L->fmt != CK_GENERIC &&
      rt_status(ck_xprep(L, c->d_x, (int)(n < 8 ? n : 8), c->d_xp, c->d_xs, c->d_xexp, c->d_pmax, c->stream),
                "x prep launch", err))
    return -1;
  return rt_stream_sync(c->stream, err);
}

int cudab_launch(accel_backend *b, const ck_layout *L, int expert, int64_t n, int prep,
                 mlxrt_error *err) {
  cuda_impl *c = b->impl;
  return launch_rows(c, L, expert < 0 ? 0 : expert, n, prep, err);
}
