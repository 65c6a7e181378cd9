/* The mat-vec benchmark of mlxrt-cuda-test: a plain streaming read sets the device's read
 * bandwidth, then each format × Gemma 4 31B shape is timed with CUDA events on
 * device-resident x (no copies), rotating over enough weight copies that the set is well
 * past the L2, and reported as GB/s of weight bytes and % of the measured read bandwidth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda_internal.h"
#include "gpu_test_util.h"

#define MB (1024.0 * 1024.0)

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static void die_on(int rc, const mlxrt_error *err) {
  if (rc) {
    printf("bench: %s\n", err->msg);
    exit(1);
  }
}

/* GB/s of the plain read kernel over `bytes` per launch, `iters` back-to-back launches per timed
 * pass rotating over `copies` buffers (so the set can be made larger than the L2); the median
 * of `passes` passes after two warm-up passes. */
static double read_rate(void *stream, int sms, size_t bytes, int copies, int iters, int passes, mlxrt_error *err) {
  const size_t chunk = (bytes + 255) & ~(size_t)255;
  void *buf = NULL, *sink = NULL, *e0 = NULL, *e1 = NULL;
  die_on(rt_malloc(&buf, chunk * (size_t)copies, err), err);
  die_on(rt_malloc(&sink, 16, err), err);
  die_on(rt_memset(buf, 0x5a, chunk * (size_t)copies, stream, err), err);
  die_on(rt_event_create(&e0, err) || rt_event_create(&e1, err), err);
  float t[9];
  for (int r = -2; r < passes; r++) {
    die_on(rt_event_record(e0, stream, err), err);
    for (int i = 0; i < iters; i++)
      die_on(rt_status(ck_read_bw((char *)buf + (size_t)(i % copies) * chunk, bytes, sink, sms, stream),
                       "read kernel", err), err);
    die_on(rt_event_record(e1, stream, err), err);
    float ms;
    die_on(rt_event_ms(e0, e1, &ms, err), err);
    if (r >= 0) t[r] = ms / (float)iters;
  }
  qsort(t, (size_t)passes, sizeof *t, cmp_float);
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  rt_free(buf);
  rt_free(sink);
  return (double)bytes / (t[passes / 2] * 1e-3) / 1e9;
}

/* The device's streaming-read bandwidth: one launch over one buffer of `bytes`, median of 9. */
static double read_bandwidth(void *stream, int sms, size_t bytes, mlxrt_error *err) {
  return read_rate(stream, sms, bytes, 1, 1, 9, err);
}

/* What one launch of `bytes` reaches: back-to-back launches rotating over enough copies that the
 * set is ≥ 4× the L2 (as the mat-vec timings do), median of 5 passes. */
static double read_same_size(int sms, size_t bytes, size_t l2, mlxrt_error *err) {
  accel_options o = {"cuda", 0, 0, NULL, NULL};
  accel_backend *cu = mlxrt_cuda_backend_create(&o, err);
  if (!cu) return 0;
  int copies = (int)((4 * l2 + bytes - 1) / bytes);
  if (copies < 2) copies = 2;
  double gbs = read_rate(cudab_stream(cu), sms, bytes, copies, copies * 8, 5, err);
  accel_destroy(cu);
  return gbs;
}

typedef struct bfmt {
  const char *name;
  accel_spec spec; /* rows/cols filled per shape */
} bfmt;

typedef struct bshape {
  const char *name;
  int64_t rows, cols;
} bshape;

typedef struct brow {
  char fmt[24], shape[32];
  int64_t n;
  double mbytes, us, us_prep, us_pdl, gbs, pct;
} brow;

/* Times one weight format on one shape; returns microseconds per product (median of 5
 * passes, each the mean over a round-robin of `copies` resident copies). */
typedef struct bcfg {
  int warm; /* 1: one copy, launched again and again (weights L2-resident if they fit) */
} bcfg;

static int time_case(const bfmt *f, const bshape *sh, int64_t n, size_t l2, uint64_t *rng,
                     const bcfg *cfg, int ncfg, brow *out, mlxrt_error *err) {
  accel_spec s = f->spec;
  s.rows = sh->rows;
  s.cols = sh->cols;
  size_t wbytes = accel_weight_bytes(&s);
  int copies = (int)((4 * l2 + wbytes - 1) / wbytes);
  if (copies < 1) copies = 1;
  if (copies > 24) copies = 24;
  accel_options o = {"cuda", 0, 0, NULL, NULL};
  accel_backend *cu = mlxrt_cuda_backend_create(&o, err);
  if (!cu) return -1;
  host_weight base;
  if (host_weight_make(&base, &s, 1, f->name, 0, 0, rng)) {
    accel_destroy(cu);
    return mx_fail(err, "out of host memory for %s %s", f->name, sh->name);
  }
  host_weight *cp = calloc((size_t)copies, sizeof *cp);
  const ck_layout **L = calloc((size_t)copies, sizeof *L);
  int rc = -1;
  for (int i = 0; i < copies; i++) {
    host_weight_alias(&cp[i], &base, 1000 + (uint64_t)i);
    L[i] = cudab_resident(cu, &cp[i].w, err);
    if (!L[i]) goto done;
  }
  uint16_t *x = malloc((size_t)(n * s.cols) * 2);
  for (int64_t i = 0; i < n * s.cols; i++)
    x[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
  int bad = cudab_stage_x(cu, L[0], x, n, err);
  free(x);
  if (bad) goto done;
  void *st = cudab_stream(cu), *e0 = NULL, *e1 = NULL;
  if (rt_event_create(&e0, err) || rt_event_create(&e1, err)) goto done;
  int iters = copies * (wbytes > 256 * MB ? 4 : 12);
  for (int ci = 0; ci < ncfg; ci++) {
  const int ncopies = cfg[ci].warm ? 1 : copies;
  /* passes: 0 the product alone; 1 with the x prep; 2 the product alone launched as the
   * decoder launches it, from a captured graph (programmatic dependent launch: each launch's
   * weight prologue may overlap the previous launch's tail) */
  float t[5], tp[5], tq[5];
  for (int pass = 0; pass < (ncfg > 1 ? 1 : 3); pass++) {
    void *graph = NULL;
    if (pass == 2) {
      int bad_capture = rt_graph_begin(st, err);
      for (int i = 0; i < iters && !bad_capture; i++) bad_capture = cudab_launch(cu, L[i % ncopies], -1, n, 0, err);
      if (rt_graph_end(st, &graph, err) || bad_capture) goto done;
    }
    for (int r = -1; r < 5; r++) {
      if (rt_event_record(e0, st, err)) goto done;
      if (graph) {
        if (rt_graph_launch(graph, st, err)) goto done;
      } else {
        for (int i = 0; i < iters; i++)
          if (cudab_launch(cu, L[i % ncopies], -1, n, pass == 1, err)) goto done;
      }
      if (rt_event_record(e1, st, err)) goto done;
      float ms;
      if (rt_event_ms(e0, e1, &ms, err)) goto done;
      if (r >= 0) (pass == 0 ? t : pass == 1 ? tp : tq)[r] = ms * 1000.0f / (float)iters;
    }
    rt_graph_destroy(graph);
  }
  qsort(t, 5, sizeof *t, cmp_float);
  if (ncfg == 1) {
    qsort(tp, 5, sizeof *tp, cmp_float);
    qsort(tq, 5, sizeof *tq, cmp_float);
  }
  brow *o = &out[ci];
  snprintf(o->fmt, sizeof o->fmt, "%s%s", f->name, L[0]->fmt == CK_GENERIC ? "*" : "");
  snprintf(o->shape, sizeof o->shape, "%s", sh->name);
  o->n = n;
  o->mbytes = (double)wbytes / 1e6;
  o->us = t[2];
  o->us_prep = ncfg == 1 ? tp[2] : 0;
  o->us_pdl = ncfg == 1 ? tq[2] : 0;
  o->gbs = (double)wbytes / (t[2] * 1e-6) / 1e9;
  }
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  rc = 0;
done:
  accel_destroy(cu);
  free(L);
  free(cp);
  host_weight_free(&base);
  return rc;
}

/* One format on one shape (for a profiler run): "affine4" or "nvfp4", on the lm_head shape,
 * or with "-down" on 21504->5376. */
int cuda_bench_profile(const char *which) {
  mlxrt_error err = {{0}};
  bfmt f = {"affine4 g64", {ACCEL_MODE_AFFINE, 4, 64, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}};
  if (!strncmp(which, "nvfp4", 5)) {
    bfmt nv = {"nvfp4", {ACCEL_MODE_NVFP4, 4, 16, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}};
    f = nv;
  }
  bshape sh = {"262144x5376 (lm_head)", 262144, 5376};
  if (strstr(which, "-down")) {
    bshape dn = {"21504->5376 (down)", 5376, 21504};
    sh = dn;
  }
  bcfg c = {0};
  brow r;
  uint64_t rng = 42;
  if (time_case(&f, &sh, 1, 64u << 20, &rng, &c, 1, &r, &err)) {
    printf("profile: %s\n", err.msg);
    return 1;
  }
  printf("%s %s: %.2f us\n", f.name, sh.name, r.us);
  return 0;
}

static double pdl_pct(const brow *r, double bw) {
  return r->us_pdl > 0 ? 100.0 * r->mbytes * 1e6 / (r->us_pdl * 1e-6) / 1e9 / bw : 0;
}

int cuda_bench(const char *table_path, int quick) {
  mlxrt_error err = {{0}};
  accel_options o = {"cuda", 0, 0, NULL, NULL};
  accel_backend *cu = mlxrt_cuda_backend_create(&o, &err);
  if (!cu) {
    printf("bench: %s\n", err.msg);
    return 1;
  }
  rt_device_info dev = *cudab_device(cu);
  double bw = read_bandwidth(cudab_stream(cu), dev.sms, (size_t)4 << 30, &err);
  double bw2 = read_bandwidth(cudab_stream(cu), dev.sms, (size_t)1 << 30, &err);
  accel_destroy(cu);
  double spec_bw = dev.mem_bus_bits > 0 ? dev.mem_clock_khz * 1e3 * 2 * dev.mem_bus_bits / 8 / 1e9 : 0;
  printf("\nstreaming read bandwidth: %.0f GB/s over 4 GiB, %.0f GB/s over 1 GiB "
         "(clock×bus figure %.0f GB/s)\n", bw, bw2, spec_bw);

  const bfmt fmts[] = {
      {"affine4 g64", {ACCEL_MODE_AFFINE, 4, 64, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}},
      {"affine8 g64", {ACCEL_MODE_AFFINE, 8, 64, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}},
      {"nvfp4", {ACCEL_MODE_NVFP4, 4, 16, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}},
      {"mxfp4", {ACCEL_MODE_MXFP4, 4, 32, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}},
      {"bf16", {ACCEL_MODE_DENSE, 16, 0, ACCEL_BF16, ACCEL_BF16, 0, 0, 0}},
  };
  const bshape shapes[] = {
      {"5376->8192 (q)", 8192, 5376},   {"5376->4096 (k/v)", 4096, 5376},
      {"8192->5376 (o)", 5376, 8192},   {"5376->21504 (up)", 21504, 5376},
      {"21504->5376 (down)", 5376, 21504}, {"262144x5376 (lm_head)", 262144, 5376},
  };
  int nf = (int)(sizeof fmts / sizeof *fmts), ns = (int)(sizeof shapes / sizeof *shapes);
  brow *rows = calloc((size_t)(nf * ns * 2), sizeof *rows);
  int nr = 0, rc = 0;
  uint64_t rng = 0x1234567887654321ULL;
  printf("\n%-12s %-22s %2s %9s %9s %10s %8s %6s %9s %6s\n", "format", "shape", "n", "MB", "us", "us+prep",
         "GB/s", "%read", "us PDL", "%PDL");
  for (int fi = 0; fi < nf; fi++) {
    for (int si = 0; si < ns; si++) {
      for (int64_t n = 1; n <= 8; n += 7) {
        if (n == 8 && (quick || si != 5)) continue; /* batch 8 only on the lm_head */
        brow *r = &rows[nr];
        bcfg auto_cfg = {0};
        if (time_case(&fmts[fi], &shapes[si], n, dev.l2_bytes, &rng, &auto_cfg, 1, r, &err)) {
          printf("bench %s %s: %s\n", fmts[fi].name, shapes[si].name, err.msg);
          rc = 1;
          continue;
        }
        r->pct = 100.0 * r->gbs / bw;
        printf("%-12s %-22s %2lld %9.1f %9.2f %10.2f %8.0f %5.1f%% %9.2f %5.1f%%\n", r->fmt, r->shape,
               (long long)r->n, r->mbytes, r->us, r->us_prep, r->gbs, r->pct, r->us_pdl, pdl_pct(r, bw));
        nr++;
      }
    }
  }
  /* what bounds the target kernels: the product with one L2-warm copy, and a plain read of the
   * same bytes (rotating over copies past the L2, one launch per copy): what any single launch
   * of that size reaches */
  const bcfg cfgs[] = {{1}};
  const char *cfg_names[] = {"L2-warm copy"};
  const int ncfg = (int)(sizeof cfgs / sizeof *cfgs);
  brow tune[16];
  if (!quick) {
    printf("\nbounds (n = 1): us and %% of read bandwidth\n"
           "%-12s %-22s %16s", "format", "shape", "read, same MB");
    for (int c = 0; c < ncfg; c++) printf(" %16s", cfg_names[c]);
    printf("\n");
    const int tf[] = {0, 2}, ts[] = {0, 2, 3, 4, 5};
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 5; b++) {
        if (time_case(&fmts[tf[a]], &shapes[ts[b]], 1, dev.l2_bytes, &rng, cfgs, ncfg, tune, &err)) {
          printf("tuning: %s\n", err.msg);
          continue;
        }
        const bshape *sh = &shapes[ts[b]];
        accel_spec sp = fmts[tf[a]].spec;
        sp.rows = sh->rows;
        sp.cols = sh->cols;
        double rd = read_same_size(dev.sms, accel_weight_bytes(&sp), dev.l2_bytes, &err);
        printf("%-12s %-22s %7.2f (%4.1f%%)", fmts[tf[a]].name, sh->name,
               (double)accel_weight_bytes(&sp) / (rd * 1e3), 100.0 * rd / bw);
        for (int c = 0; c < ncfg; c++) printf(" %8.2f (%4.1f%%)", tune[c].us, 100.0 * tune[c].gbs / bw);
        printf("\n");
      }
  }
  FILE *f = table_path ? fopen(table_path, "w") : NULL;
  if (f) {
    fprintf(f, "Device: %s (sm_%d%d, %d SMs, L2 %.0f MB). Streaming read: **%.0f GB/s** (4 GiB), "
            "%.0f GB/s (1 GiB).\n\n", dev.name, dev.cc_major, dev.cc_minor, dev.sms,
            (double)dev.l2_bytes / 1e6, bw, bw2);
    fprintf(f, "| format | shape (K->N) | n | weight MB | us | us incl. x prep | GB/s | %% of read BW "
               "| us, PDL launches | %% of read BW, PDL |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++)
      fprintf(f, "| %s | %s | %lld | %.1f | %.2f | %.2f | %.0f | %.1f | %.2f | %.1f |\n", rows[i].fmt,
              rows[i].shape, (long long)rows[i].n, rows[i].mbytes, rows[i].us, rows[i].us_prep,
              rows[i].gbs, rows[i].pct, rows[i].us_pdl, pdl_pct(&rows[i], bw));
    fclose(f);
  }
  /* the acceptance line: affine4 g64 and nvfp4 at n = 1 on the down and lm_head shapes */
  printf("\ntarget (>= 85%% of read bandwidth, n = 1):\n");
  for (int i = 0; i < nr; i++) {
    int target = (!strncmp(rows[i].fmt, "affine4", 7) || !strncmp(rows[i].fmt, "nvfp4", 5)) &&
                 rows[i].n == 1 &&
                 (strstr(rows[i].shape, "(up)") || strstr(rows[i].shape, "down") ||
                  strstr(rows[i].shape, "lm_head"));
    if (!target) continue;
    /* what any one launch of these bytes reaches: a plain read of the same size */
    double same = read_same_size(dev.sms, (size_t)(rows[i].mbytes * 1e6), dev.l2_bytes, &err);
    printf("  %-12s %-22s %6.1f%% %s (launched as the decoder does: %5.1f%% %s; a plain read of the same "
           "bytes, one launch: %5.1f%%)\n", rows[i].fmt, rows[i].shape, rows[i].pct,
           rows[i].pct >= 85.0 ? "MET" : "MISSED", pdl_pct(&rows[i], bw), pdl_pct(&rows[i], bw) >= 85.0 ? "MET" : "MISSED",
           100.0 * same / bw);
  }
  free(rows);
  return rc;
}
