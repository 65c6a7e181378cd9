/* mlxrt-rows-bench: the batched step's products alone, on the Gemma 4 31B's sliding-layer shapes
 * in nvfp4 (q|k|v, o, gate|up, down), at B rows: the warpgroup product the step runs (ck_qmm_wg,
 * x laid out by ck_xprep_wg), ck_qmm_rows and the mat-vec's batch kernel (ck_qmv_rows, batches
 * of 8 side by side). Each product is timed in a
 * captured graph (as the decoder launches it: programmatic dependent launch), rotating over
 * enough resident copies that the weights come from memory, median of 5 passes; GB/s of weight
 * bytes against the device's streaming read bandwidth measured in the same run. Before timing,
 * each shape's outputs are checked: the first rows of a B-row product bit-identical to the same
 * rows among ck_qmm_rows_max(), and ck_qmm_wg's within 1e-3 of the largest |y| of ck_qmm_rows'
 * (another summation order).
 *   mlxrt-rows-bench [--batch 1,4,16,64] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"
#include "cuda_internal.h"
#include "gpu_test_util.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

#define TRY(x)                                                                                                     \
  do {                                                                                                             \
    if (x) {                                                                                                       \
      printf("rows-bench: %s (line %d)\n", err.msg, __LINE__);                                                    \
      return 1;                                                                                                    \
    }                                                                                                              \
  } while (0)

typedef struct shape {
  const char *name;
  int64_t rows, cols;
} shape;

int main(int argc, char **argv) {
  const char *blist = "1,4,16,64";
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--batch")) blist = argv[i + 1];
  mlxrt_error err = {{0}};
  accel_options o = {"cuda", 0, 0, NULL, NULL};
  accel_backend *cu = mlxrt_cuda_backend_create(&o, &err);
  if (!cu) {
    printf("rows-bench: %s\n", err.msg);
    return 1;
  }
  void *st = cudab_stream(cu);
  const rt_device_info dev = *cudab_device(cu);
  /* the device's streaming read rate over 4 GiB */
  double bw = 0;
  {
    const size_t bytes = (size_t)4 << 30;
    void *buf = NULL, *sink = NULL, *e0 = NULL, *e1 = NULL;
    TRY(rt_malloc(&buf, bytes, &err) || rt_malloc(&sink, 16, &err) || rt_memset(buf, 0x5a, bytes, st, &err) ||
        rt_event_create(&e0, &err) || rt_event_create(&e1, &err));
    float t[7];
    for (int r = -2; r < 7; r++) {
      TRY(rt_event_record(e0, st, &err) || rt_status(ck_read_bw(buf, bytes, sink, dev.sms, st), "read", &err) ||
          rt_event_record(e1, st, &err));
      float ms;
      TRY(rt_event_ms(e0, e1, &ms, &err));
      if (r >= 0) t[r] = ms;
    }
    qsort(t, 7, sizeof *t, cmp_float);
    bw = (double)bytes / (t[3] * 1e-3) / 1e9;
    rt_free(buf);
    rt_free(sink);
    rt_event_destroy(e0);
    rt_event_destroy(e1);
  }
  printf("device: %d SMs, streaming read %.0f GB/s\n", dev.sms, bw);
  const shape shapes[] = {{"q|k|v 5376->16384", 16384, 5376},
                          {"o 8192->5376", 5376, 8192},
                          {"gate|up 5376->43008", 43008, 5376},
                          {"down 21504->5376", 5376, 21504}};
  const int nshape = 4, RMAX = ck_qmm_rows_max();
  int bs[16], nb = 0;
  for (const char *p = blist; *p && nb < 16;) {
    bs[nb] = atoi(p);
    if (bs[nb] < 1 || bs[nb] > RMAX) {
      printf("rows-bench: --batch entries 1..%d\n", RMAX);
      return 2;
    }
    nb++;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  uint64_t rng = 7;
  enum { NK = 3 };
  const char *knames[NK] = {"qmv_rows", "qmm_rows", "qmm_wg"};
  double step_us[16][NK] = {{0}}; /* [batch][kernel] sum over the four products */
  int bad = 0;
  printf("| product | B | kernel | us | GB/s | %% of read |\n| --- | ---: | --- | ---: | ---: | ---: |\n");
  for (int si = 0; si < nshape; si++) {
    const shape *sh = &shapes[si];
    accel_spec s = {ACCEL_MODE_NVFP4, 4, 16, ACCEL_BF16, ACCEL_BF16, 0, 0, 0};
    s.rows = sh->rows;
    s.cols = sh->cols;
    const size_t wbytes = accel_weight_bytes(&s);
    int copies = (int)((4 * (size_t)dev.l2_bytes + wbytes - 1) / wbytes);
    if (copies < 2) copies = 2;
    if (copies > 24) copies = 24;
    host_weight base;
    if (host_weight_make(&base, &s, 1, sh->name, 0, 0, &rng)) {
      printf("rows-bench: out of host memory\n");
      return 1;
    }
    host_weight *cp = calloc((size_t)copies, sizeof *cp);
    const ck_layout **L = calloc((size_t)copies, sizeof *L);
    for (int i = 0; i < copies; i++) {
      host_weight_alias(&cp[i], &base, 1000 + (uint64_t)i + 100 * (uint64_t)si);
      L[i] = cudab_resident(cu, &cp[i].w, &err);
      TRY(!L[i]);
    }
    /* x: RMAX rows, prepped in batches of 8 */
    const int64_t cols = sh->cols, nz = RMAX / 8;
    uint16_t *hx = malloc((size_t)(RMAX * cols) * 2);
    for (int64_t i = 0; i < RMAX * cols; i++) hx[i] = mx_f32_to_bf16((float)(rng_unit(&rng) * 2 - 1));
    uint16_t *x = NULL, *xp = NULL, *xw = NULL;
    float *xs = NULL, *pmax = NULL, *y = NULL, *part = NULL;
    int *xexp = NULL, *zero = NULL;
    unsigned *cnt = NULL;
    int64_t pf = 0, nc = 0;
    const int ks = ck_qmm_rows_scratch(L[0], dev.sms, &pf, &nc);
    TRY(rt_malloc((void **)&x, (size_t)(RMAX * cols) * 2, &err) || rt_malloc((void **)&xp, (size_t)(RMAX * cols) * 2, &err) ||
        rt_malloc((void **)&xw, (size_t)(RMAX * cols) * 2, &err) ||
        rt_malloc((void **)&xs, (size_t)(nz * (cols / 32) * 8) * 4, &err) ||
        rt_malloc((void **)&xexp, (size_t)RMAX * 4, &err) ||
        rt_malloc((void **)&pmax, (size_t)(nz * (int64_t)ck_xprep_pmax_floats(cols)) * 4, &err) ||
        rt_malloc((void **)&y, (size_t)(RMAX * sh->rows) * 4 * 2, &err) ||
        rt_malloc((void **)&part, (size_t)(pf > 0 ? pf : 1) * 4, &err) ||
        rt_malloc((void **)&cnt, (size_t)nc * 4, &err) || rt_malloc((void **)&zero, (size_t)nz * 4, &err) ||
        rt_memset(cnt, 0, (size_t)nc * 4, st, &err) || rt_memset(zero, 0, (size_t)nz * 4, st, &err) ||
        rt_h2d(x, hx, (size_t)(RMAX * cols) * 2, st, &err));
    free(hx);
    TRY(rt_status(ck_xprep_batched(L[0], x, 8, (int)nz, xp, xs, xexp, pmax, st), "x prep", &err));
    /* bits: B rows' first rows as those rows among RMAX */
    {
      const size_t n = (size_t)RMAX * (size_t)sh->rows;
      float *h0 = malloc(n * 4), *h1 = malloc(n * 4);
      TRY(rt_status(ck_qmm_rows(L[0], RMAX, ks, xp, xs, xexp, y, sh->rows, part, cnt, st), "rows", &err) ||
          rt_d2h(h0, y, n * 4, st, &err) || rt_stream_sync(st, &err));
      for (int b = 0; b < nb; b++) {
        const size_t m = (size_t)bs[b] * (size_t)sh->rows;
        TRY(rt_status(ck_qmm_rows(L[0], bs[b], ks, xp, xs, xexp, y, sh->rows, part, cnt, st), "rows", &err) ||
            rt_d2h(h1, y, m * 4, st, &err) || rt_stream_sync(st, &err));
        if (memcmp(h0, h1, m * 4)) {
          printf("FAIL %s: %d rows: other bits than the same rows among %d\n", sh->name, bs[b], RMAX);
          bad = 1;
        }
      }
      free(h0);
      free(h1);
    }
    /* the warpgroup product against ck_qmm_rows at each B (other summation order: a tolerance) */
    int *xexp_w = NULL;
    TRY(rt_malloc((void **)&xexp_w, (size_t)RMAX * 4, &err));
    {
      const size_t n = (size_t)RMAX * (size_t)sh->rows;
      float *h0 = malloc(n * 4), *h1 = malloc(n * 4);
      for (int b = 0; b < nb; b++) {
        const size_t m = (size_t)bs[b] * (size_t)sh->rows;
        TRY(rt_status(ck_qmm_rows(L[0], bs[b], ks, xp, xs, xexp, y, sh->rows, part, cnt, st), "rows", &err) ||
            rt_d2h(h0, y, m * 4, st, &err) ||
            rt_status(ck_xprep_wg(L[0], x, bs[b], xw, xexp_w, pmax, st), "wg prep", &err));
        {
          TRY(rt_memset(y, 0xff, m * 4, st, &err) ||
              rt_status(ck_qmm_wg(L[0], bs[b], ks, xw, xexp_w, y, sh->rows, part, cnt, st), "wg", &err) ||
              rt_d2h(h1, y, m * 4, st, &err) || rt_stream_sync(st, &err));
          double big = 0, worst = 0;
          for (size_t i = 0; i < m; i++) big = fmax(big, fabs(h0[i]));
          for (size_t i = 0; i < m; i++) {
            const double d = fabs((double)h1[i] - h0[i]);
            worst = d > worst || d != d ? (d != d ? INFINITY : d) : worst;
          }
          if (!(worst <= 1e-3 * big)) {
            printf("FAIL %s: %d rows: %s differs from qmm_rows by %.3g (max |y| %.3g)\n", sh->name, bs[b], knames[2],
                   worst, big);
            bad = 1;
          }
        }
      }
      free(h0);
      free(h1);
    }
    void *e0 = NULL, *e1 = NULL;
    TRY(rt_event_create(&e0, &err) || rt_event_create(&e1, &err));
    const int iters = copies * 4;
    for (int b = 0; b < nb; b++)
      for (int k = 0; k < NK; k++) { /* 0: the mat-vec's batch kernel, 1: ck_qmm_rows, 2..: ck_qmm_wg */
        const int B = bs[b], nzb = (B + 7) / 8, nbb = B >= 8 ? 8 : B < 2 ? 2 : B;
        if (k >= 2) TRY(rt_status(ck_xprep_wg(L[0], x, B, xw, xexp_w, pmax, st), "wg prep", &err));
        void *graph = NULL;
        int rc = rt_graph_begin(st, &err);
        for (int i = 0; i < iters && !rc; i++) {
          const ck_layout *Li = L[i % copies];
          rc = k == 0   ? ck_qmv_rows(Li, zero, B >= 8 ? nzb : 1, nbb, xp, xs, xexp, y, sh->rows, st)
               : k == 1 ? ck_qmm_rows(Li, B, ks, xp, xs, xexp, y, sh->rows, part, cnt, st)
                        : ck_qmm_wg(Li, B, ks, xw, xexp_w, y, sh->rows, part, cnt, st);
        }
        mlxrt_error e2;
        if (rt_graph_end(st, &graph, rc ? &e2 : &err) || rc) {
          rt_graph_destroy(graph);
          TRY(1);
        }
        float t[5];
        for (int r = -1; r < 5; r++) {
          float ms;
          TRY(rt_event_record(e0, st, &err) || rt_graph_launch(graph, st, &err) || rt_event_record(e1, st, &err) ||
              rt_event_ms(e0, e1, &ms, &err));
          if (r >= 0) t[r] = ms * 1000.0f / (float)iters;
        }
        rt_graph_destroy(graph);
        qsort(t, 5, sizeof *t, cmp_float);
        const double gbs = (double)wbytes / (t[2] * 1e-6) / 1e9;
        const char *kname = knames[k];
        printf("| %s | %d | %s | %.1f | %.0f | %.1f |\n", sh->name, B, kname, t[2], gbs, 100.0 * gbs / bw);
        step_us[b][k] += t[2];
      }
    rt_event_destroy(e0);
    rt_event_destroy(e1);
    void *dv[] = {x, xp, xw, xexp_w, xs, pmax, y, part, cnt, xexp, zero};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) rt_free(dv[i]);
    free(L);
    free(cp);
    host_weight_free(&base);
  }
  printf("\nfour products of a sliding layer, us (x 60 layers = ms per step):\n| B |");
  for (int k = 0; k < NK; k++) printf(" %s |", knames[k]);
  printf("\n");
  for (int b = 0; b < nb; b++) {
    printf("| %d |", bs[b]);
    for (int k = 0; k < NK; k++) printf(" %.1f |", step_us[b][k]);
    printf("\n");
  }
  accel_destroy(cu);
  printf("rows-bench: %s\n", bad ? "FAIL" : "ok");
  return bad;
}
