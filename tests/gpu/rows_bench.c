/* mlxrt-rows-bench: the batched step's products alone, on the Gemma 4 31B's sliding-layer shapes
 * in nvfp4 (q|k|v, o, gate|up, down; then the full layer's q|k and o and the head, and the sum of
 * a step's products), at B rows: the warpgroup product the step runs (ck_qmm_wg,
 * x laid out by ck_xprep_wg), ck_qmm_rows and the mat-vec's batch kernel (ck_qmv_rows, batches
 * of 8 side by side). Each product is timed in a
 * captured graph (as the decoder launches it: programmatic dependent launch), rotating over
 * enough resident copies that the weights come from memory, median of 5 passes; GB/s of weight
 * bytes against the device's streaming read bandwidth measured in the same run. Before timing,
 * each shape's outputs are checked: the first rows of a B-row product bit-identical to the same
 * rows among ck_qmm_rows_max(), and ck_qmm_wg's within 1e-3 of the largest |y| of ck_qmm_rows'
 * (another summation order). Beside them, as the reference, the one-sequence step's one-row kernel
 * (ck_qmv) on one row, and at 2-8 rows the rows-in-columns kernel (ck_qmv_cols; checked against
 * ck_qmm_rows within 1e-3 of the largest |y|). Then the attention of a sliding and of a full layer at B rows,
 * positions 512–639 (the batched bench's) and for the full layer also 8192–8319: the kernels the
 * batched step runs below 16 rows (the one-launch cluster kernel, dk_attention_cluster_rows, on
 * the ring; the split passes, dk_attention_rows, on the full layer) and the streaming kernel
 * (dk_attention_stream_rows), on the sliding layer also its split form (a cluster of 4 blocks per
 * row and KV head, dk_attention_stream_split_rows), GB/s of the live K and V rows, the rows on
 * other slots each launch so that the cache comes from memory; the streaming kernels' outputs
 * checked against the other kernel's (each head within 1 % of its largest |value|).
 * The batch kernel runs at the k splits the step gives it (ck_qmv_rows_splits), and with --ks
 * also at each of those.
 *   mlxrt-rows-bench [--batch 1,4,16,64] [--ks 1,2,4] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_ring.h"
#include "base/bf16.h"
#include "base/error.h"
#include "cuda_internal.h"
#include "decode_kernels.h"
#include "tuning.h"
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

/* Ends the capture begun on st (rc: the capture's launches' status), then replays the graph six
 * times: the median of the last five, in µs per launch of the iters it holds. */
static int graph_median_us(void *st, int rc, int iters, void *e0, void *e1, float *us, mlxrt_error *err) {
  void *graph = NULL;
  mlxrt_error e2;
  if (rt_graph_end(st, &graph, rc ? &e2 : err) || rc) {
    rt_graph_destroy(graph);
    if (rc) mx_fail(err, "a launch in the graph failed (%d)", rc);
    return 1;
  }
  float t[5];
  for (int r = -1; r < 5; r++) {
    float ms;
    if (rt_event_record(e0, st, err) || rt_graph_launch(graph, st, err) || rt_event_record(e1, st, err) ||
        rt_event_ms(e0, e1, &ms, err)) {
      rt_graph_destroy(graph);
      return 1;
    }
    if (r >= 0) t[r] = ms * 1000.0f / (float)iters;
  }
  rt_graph_destroy(graph);
  qsort(t, 5, sizeof *t, cmp_float);
  *us = t[2];
  return 0;
}

typedef struct shape {
  const char *name;
  int64_t rows, cols;
  int per_step; /* times a step runs it (the 31B: 50 sliding layers, 10 full, the head once) */
  int sliding;  /* one of a sliding layer's four products */
} shape;

/* A layer's attention for the bench: the 31B's sliding layer (32 query heads, 16 KV heads of 256,
 * a ring of 1024, plain K and V; the old kernel the one-launch cluster kernel) or its full layer
 * (4 KV heads of 512, K from V with 64 moved pairs, a capacity of cap positions, rows at
 * positions depth … depth + 127; the old kernel the split passes as the batched step runs them). */
typedef struct att_layer {
  const char *name;
  int nkv, hd, window, vr, depth;
  int64_t cap;
} att_layer;

/* The layer's attention for B rows on S slots, the old kernel against the streaming one: each of
 * ITERS launches in one graph takes rows on other slots, so that the cache comes from memory. */
static int attention_rows(accel_backend *cu, const att_layer *ly, const int *bs, int nb, double bw, int *bad) {
  enum { NQ = 32, S = 64, ITERS = 16 };
  mlxrt_error err = {{0}};
  void *st = cudab_stream(cu);
  const int sms = cudab_device(cu)->sms, NKV = ly->nkv, HD = ly->hd, WIN = ly->window;
  const dk_kv_layout L = ly->vr ? dk_kv_from_v(NKV, HD, ly->vr) : dk_kv_plain(NKV, HD);
  const int64_t slots_per = WIN > 0 ? (int64_t)WIN + ACCEL_RING_SLACK : ly->cap, lane = slots_per * L.ps;
  const int64_t qd = (int64_t)NQ * HD, keys = WIN > 0 ? WIN : ly->cap;
  /* the split passes' shape in the batched step (bt_splits) */
  int splits = (int)((ly->cap + BATCH_SPLIT_KEYS - 1) / BATCH_SPLIT_KEYS), cap_sp = (SPLIT_BLOCKS_PER_SM * sms + NKV - 1) / NKV;
  if (splits > cap_sp) splits = cap_sp;
  if (splits > MAX_SPLITS) splits = MAX_SPLITS;
  uint16_t *kc = NULL, *vc = NULL, *att = NULL, *att2 = NULL;
  float *q = NULL, *scores = NULL, *smax = NULL, *ssum = NULL, *pacc = NULL;
  unsigned *counts = NULL;
  int *slots = NULL, *pos = NULL;
  uint64_t rng = 99;
  const size_t cache = (size_t)(S * lane);
  uint16_t *h = malloc(cache * 2);
  float *hq = malloc((size_t)(S * qd) * 4);
  int *hs = malloc((size_t)ITERS * S * 4), *hp = malloc((size_t)S * 4);
  for (size_t i = 0; i < cache; i++) h[i] = mx_f32_to_bf16((float)(rng_unit(&rng) * 2 - 1));
  for (int64_t i = 0; i < S * qd; i++) hq[i] = (float)(rng_unit(&rng) * 4 - 2);
  for (int z = 0; z < S; z++) hp[z] = ly->depth + (z * 37) % 128;
  TRY(rt_malloc((void **)&kc, cache * 2, &err) || rt_malloc((void **)&att, (size_t)(S * qd) * 2, &err) ||
      rt_malloc((void **)&att2, (size_t)(S * qd) * 2, &err) || rt_malloc((void **)&q, (size_t)(S * qd) * 4, &err) ||
      rt_malloc((void **)&scores, (size_t)(S * NQ * keys) * 4, &err) ||
      rt_malloc((void **)&smax, (size_t)(S * NQ * splits) * 4, &err) ||
      rt_malloc((void **)&ssum, (size_t)(S * NQ * splits) * 4, &err) ||
      rt_malloc((void **)&pacc, (size_t)(S * NQ * splits * HD) * 4, &err) ||
      rt_malloc((void **)&counts, (size_t)(S * NQ) * 4, &err) || rt_memset(counts, 0, (size_t)(S * NQ) * 4, st, &err) ||
      rt_malloc((void **)&slots, (size_t)ITERS * S * 4, &err) || rt_malloc((void **)&pos, (size_t)S * 4, &err) ||
      rt_h2d(kc, h, cache * 2, st, &err));
  vc = kc;
  if (!ly->vr) {
    for (size_t i = 0; i < cache; i++) h[i] = mx_f32_to_bf16((float)(rng_unit(&rng) * 2 - 1));
    TRY(rt_malloc((void **)&vc, cache * 2, &err) || rt_h2d(vc, h, cache * 2, st, &err));
  }
  TRY(rt_h2d(q, hq, (size_t)(S * qd) * 4, st, &err) || rt_h2d(pos, hp, (size_t)S * 4, st, &err) ||
      rt_stream_sync(st, &err));
  const float scale = 1.0f / 16.0f;
  const int split = WIN > 0 && dk_attention_stream_split_fits(NQ, NKV, HD, L, WIN, keys);
  printf("\n%s, positions %d-%d (live K and V bytes; old: %s):\n"
         "| B | old us | GB/s | stream us | GB/s | %% of read | stream / old | split us | split / old |\n"
         "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
         ly->name, ly->depth, ly->depth + 127, WIN > 0 ? "the cluster kernel" : "the split passes");
  uint16_t *o1 = malloc((size_t)(S * qd) * 2), *o2 = malloc((size_t)(S * qd) * 2);
  void *e0 = NULL, *e1 = NULL;
  TRY(rt_event_create(&e0, &err) || rt_event_create(&e1, &err));
#define OLD_ATT(RW)                                                                                                  \
  (WIN > 0 ? dk_attention_cluster_rows(q, kc, vc, NQ, NKV, HD, L, scale, pos, WIN, WIN, 1, att, NULL, 0, NULL, NULL, \
                                       NULL, RW, B, st)                                                              \
           : dk_attention_rows(q, kc, vc, NQ, NKV, HD, L, scale, pos, WIN, splits, BATCH_SPLIT_KEYS, 0, ly->cap,     \
                               scores, smax, ssum, pacc, counts, att, NULL, 0, RW, B, st))
  for (int b = 0; b < nb; b++) {
    const int B = bs[b] < S ? bs[b] : S;
    double bytes = 0;
    for (int i = 0; i < ITERS; i++)
      for (int z = 0; z < B; z++) {
        hs[i * S + z] = (i * B + z) % S;
        const int live = WIN > 0 && hp[z] + 1 > WIN ? WIN : hp[z] + 1; /* row z sits at position hp[z] */
        bytes += (double)live * NKV * (2 * HD + (ly->vr ? 2 * ly->vr - HD : 0)) * 2;
      }
    bytes /= ITERS;
    TRY(rt_h2d(slots, hs, (size_t)ITERS * S * 4, st, &err));
    /* the check: the streaming kernel against the old one on the first launch's rows */
    const dk_rows rw0 = {slots, lane, qd, qd};
    for (int k = 1; k < 2 + split; k++) {
      TRY(rt_status(OLD_ATT(&rw0), "old attention", &err) ||
          rt_status(k == 1 ? dk_attention_stream_rows(q, kc, vc, NQ, NKV, HD, L, scale, pos, WIN, keys, scores, att2, &rw0,
                                                      B, st)
                           : dk_attention_stream_split_rows(q, kc, vc, NQ, NKV, HD, L, scale, pos, WIN, keys, att2, &rw0,
                                                            B, st),
                    "stream", &err) ||
          rt_d2h(o1, att, (size_t)(B * qd) * 2, st, &err) || rt_d2h(o2, att2, (size_t)(B * qd) * 2, st, &err) ||
          rt_stream_sync(st, &err));
      for (int64_t hh = 0; hh < (int64_t)B * NQ; hh++) {
        float mx = 0, worst = 0;
        for (int d = 0; d < HD; d++) mx = fmaxf(mx, fabsf(mx_bf16_to_f32(o1[hh * HD + d])));
        for (int d = 0; d < HD; d++) {
          const float e = fabsf(mx_bf16_to_f32(o2[hh * HD + d]) - mx_bf16_to_f32(o1[hh * HD + d]));
          worst = e > worst || e != e ? (e != e ? INFINITY : e) : worst;
        }
        if (!(worst <= 0.01f * mx)) {
          printf("FAIL %s: B %d, row %d head %d: the %s kernel differs by %g (max |att| %g)\n", ly->name, B,
                 (int)(hh / NQ), (int)(hh % NQ), k == 1 ? "streaming" : "split streaming", worst, mx);
          *bad = 1;
          break;
        }
      }
    }
    float us[3] = {0, 0, 0};
    for (int k = 0; k < 2 + split; k++) {
      int rc = rt_graph_begin(st, &err);
      for (int i = 0; i < ITERS && !rc; i++) {
        const dk_rows rw = {slots + i * S, lane, qd, qd};
        rc = k == 0   ? OLD_ATT(&rw)
             : k == 1 ? dk_attention_stream_rows(q, kc, vc, NQ, NKV, HD, L, scale, pos, WIN, keys, scores, att, &rw, B,
                                                 st)
                      : dk_attention_stream_split_rows(q, kc, vc, NQ, NKV, HD, L, scale, pos, WIN, keys, att, &rw, B,
                                                       st);
      }
      TRY(graph_median_us(st, rc, ITERS, e0, e1, &us[k], &err));
    }
    const double g0 = bytes / (us[0] * 1e-6) / 1e9, g1 = bytes / (us[1] * 1e-6) / 1e9;
    printf("| %d | %.1f | %.0f | %.1f | %.0f | %.1f | %.3f |", B, us[0], g0, us[1], g1, 100.0 * g1 / bw,
           us[1] / us[0]);
    if (split) printf(" %.1f | %.3f |\n", us[2], us[2] / us[0]);
    else printf(" - | - |\n");
  }
#undef OLD_ATT
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  if (vc != kc) rt_free(vc);
  void *dv[] = {kc, att, att2, q, scores, smax, ssum, pacc, counts, slots, pos};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) rt_free(dv[i]);
  free(h);
  free(hq);
  free(hs);
  free(hp);
  free(o1);
  free(o2);
  return 0;
}

/* The largest |Σ_k split k of y − ref| over m outputs (splits m apart); INFINITY for a NaN. */
static double split_sum_worst(const float *ref, const float *y, size_t m, int splits) {
  double worst = 0;
  for (size_t i = 0; i < m; i++) {
    double v = 0;
    for (int k = 0; k < splits; k++) v += y[(size_t)k * m + i];
    const double d = fabs(v - ref[i]);
    if (d != d) return INFINITY;
    if (d > worst) worst = d;
  }
  return worst;
}

int main(int argc, char **argv) {
  const char *blist = "1,4,16,64", *kslist = "";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batch")) blist = argv[i + 1];
    if (!strcmp(argv[i], "--ks")) kslist = argv[i + 1];
  }
  int kss[8], nks = 0; /* --ks: the batch kernel and the rows-in-columns kernel also at these k splits */
  for (const char *p = kslist; *p && nks < 8;) {
    kss[nks] = atoi(p);
    if (kss[nks] < 1 || kss[nks] > 8) {
      printf("rows-bench: --ks entries 1..8\n");
      return 2;
    }
    nks++;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
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
  const shape shapes[] = {{"q|k|v 5376->16384", 16384, 5376, 50, 1},
                          {"o 8192->5376", 5376, 8192, 50, 1},
                          {"gate|up 5376->43008", 43008, 5376, 60, 1},
                          {"down 21504->5376", 5376, 21504, 60, 1},
                          {"full q|k 5376->18432", 18432, 5376, 10, 0},
                          {"full o 16384->5376", 5376, 16384, 10, 0},
                          {"lm_head 5376->262144", 262144, 5376, 1, 0}};
  const int nshape = (int)(sizeof shapes / sizeof shapes[0]), RMAX = ck_qmm_rows_max();
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
  enum { NK = 4 };
  const char *knames[NK] = {"qmv_rows", "qmm_rows", "qmm_wg", "qmv_cols"};
  double step_us[16][NK] = {{0}}; /* [batch][kernel] sum over a sliding layer's four products */
  double all_us[16][NK] = {{0}};  /* [batch][kernel] a step's products: each shape per_step times */
  double one_row_us = 0, one_row_all = 0; /* the one-row kernel's, the same sums */
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
    {
      int64_t wpf = 0, wnc = 0;
      ck_qmm_wg_scratch(L[0], dev.sms, &wpf, &wnc);
      if (wpf > pf) pf = wpf;
      if (wnc > nc) nc = wnc;
    }
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
    /* the batch kernel at the k splits the step gives it, its partial sums added in order,
     * against ck_qmm_rows at each B below ROWS_MIN (another summation order: a tolerance) */
    {
      const size_t n = (size_t)RMAX * (size_t)sh->rows;
      float *h0 = malloc(n * 4), *h1 = malloc(2 * n * 4);
      for (int b = 0; b < nb; b++) {
        const int B = bs[b];
        if (B < 2 || B >= ROWS_MIN) continue;
        const int qks = ck_qmv_rows_splits(L[0], B, 1, dev.sms);
        const size_t m = (size_t)B * (size_t)sh->rows;
        TRY(rt_status(ck_qmm_rows(L[0], B, ks, xp, xs, xexp, y, sh->rows, part, cnt, st), "rows", &err) ||
            rt_d2h(h0, y, m * 4, st, &err) ||
            rt_status(ck_qmv_rows(L[0], zero, 1, B, xp, xs, xexp, y, sh->rows, qks, (int64_t)m, st), "batch kernel",
                      &err) ||
            rt_d2h(h1, y, (size_t)qks * m * 4, st, &err) || rt_stream_sync(st, &err));
        double big = 0, worst = split_sum_worst(h0, h1, m, qks);
        for (size_t i = 0; i < m; i++) big = fmax(big, fabs(h0[i]));
        if (!(worst <= 1e-3 * big)) {
          printf("FAIL %s: %d rows: %s at %d k splits differs from qmm_rows by %.3g (max |y| %.3g)\n", sh->name, B,
                 knames[0], qks, worst, big);
          bad = 1;
        }
        /* the rows-in-columns kernel at its k splits, likewise */
        if (!ck_qmv_cols_supported(L[0], B)) continue;
        const int cks = ck_qmv_cols_splits(L[0], B, dev.sms);
        TRY(rt_status(ck_qmv_cols(L[0], B, xp, xexp, y, sh->rows, cks, (int64_t)m, st), "cols kernel", &err) ||
            rt_d2h(h1, y, (size_t)cks * m * 4, st, &err) || rt_stream_sync(st, &err));
        worst = split_sum_worst(h0, h1, m, cks);
        if (!(worst <= 1e-3 * big)) {
          printf("FAIL %s: %d rows: %s at %d k splits differs from qmm_rows by %.3g (max |y| %.3g)\n", sh->name, B,
                 knames[3], cks, worst, big);
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
              rt_status(ck_qmm_wg(L[0], bs[b], ck_qmm_wg_splits(L[0], bs[b], dev.sms), xw, xexp_w, y, sh->rows, part, cnt, st), "wg", &err) ||
              rt_d2h(h1, y, m * 4, st, &err) || rt_stream_sync(st, &err));
          double big = 0, worst = split_sum_worst(h0, h1, m, 1);
          for (size_t i = 0; i < m; i++) big = fmax(big, fabs(h0[i]));
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
      for (int k = 0; k < NK; k++) { /* 0: the batch kernel, 1: ck_qmm_rows, 2: ck_qmm_wg, 3: ck_qmv_cols */
        const int B = bs[b], nzb = (B + 7) / 8, nbb = B >= 8 ? 8 : B < 2 ? 2 : B, nzq = B >= 8 ? nzb : 1;
        if (k == 3 && !ck_qmv_cols_supported(L[0], B)) continue;
        const int cks = k == 3 ? ck_qmv_cols_splits(L[0], B, dev.sms) : 1;
        /* the batch kernel at the k splits the step takes (ck_qmv_rows_splits) */
        const int qks = ck_qmv_rows_splits(L[0], nbb, nzq, dev.sms);
        const int64_t qstride = (int64_t)nzq * nbb * sh->rows;
        if (k >= 2) TRY(rt_status(ck_xprep_wg(L[0], x, B, xw, xexp_w, pmax, st), "wg prep", &err));
        int rc = rt_graph_begin(st, &err);
        for (int i = 0; i < iters && !rc; i++) {
          const ck_layout *Li = L[i % copies];
          rc = k == 0   ? ck_qmv_rows(Li, zero, nzq, nbb, xp, xs, xexp, y, sh->rows, qks, qstride, st)
               : k == 1 ? ck_qmm_rows(Li, B, ks, xp, xs, xexp, y, sh->rows, part, cnt, st)
               : k == 2 ? ck_qmm_wg(Li, B, ck_qmm_wg_splits(Li, B, dev.sms), xw, xexp_w, y, sh->rows, part, cnt, st)
                        : ck_qmv_cols(Li, B, xp, xexp, y, sh->rows, cks, (int64_t)B * sh->rows, st);
        }
        float us;
        TRY(graph_median_us(st, rc, iters, e0, e1, &us, &err));
        const double gbs = (double)wbytes / (us * 1e-6) / 1e9;
        if (k == 0 || k >= 2)
          printf("| %s | %d | %s (%d k splits) | %.1f | %.0f | %.1f |\n", sh->name, B, knames[k],
                 k == 3 ? cks : k == 2 ? ck_qmm_wg_splits(L[0], B, dev.sms) : qks, us, gbs, 100.0 * gbs / bw);
        else
          printf("| %s | %d | %s | %.1f | %.0f | %.1f |\n", sh->name, B, knames[k], us, gbs, 100.0 * gbs / bw);
        if (sh->sliding) step_us[b][k] += us;
        all_us[b][k] += sh->per_step * (double)us;
        for (int j = 0; (k == 0 || k == 3) && j < nks; j++) { /* --ks (the splits y holds: 2·RMAX rows) */
          const int64_t kst = k ? (int64_t)B * sh->rows : qstride;
          if (kss[j] * kst > 2 * (int64_t)RMAX * sh->rows || kss[j] > L[0]->nunits) continue;
          rc = rt_graph_begin(st, &err);
          for (int i = 0; i < iters && !rc; i++)
            rc = k ? ck_qmv_cols(L[i % copies], B, xp, xexp, y, sh->rows, kss[j], kst, st)
                   : ck_qmv_rows(L[i % copies], zero, nzq, nbb, xp, xs, xexp, y, sh->rows, kss[j], qstride, st);
          TRY(graph_median_us(st, rc, iters, e0, e1, &us, &err));
          const double g2 = (double)wbytes / (us * 1e-6) / 1e9;
          printf("| %s | %d | %s at %d k splits | %.1f | %.0f | %.1f |\n", sh->name, B, knames[k], kss[j], us, g2,
                 100.0 * g2 / bw);
        }
      }
    /* the reference: the one-sequence step's one-row kernel (x prepped once; in the step the
     * producer of x writes its prep) */
    {
      TRY(rt_status(ck_xprep(L[0], x, 1, xp, xs, xexp, pmax, st), "one-row prep", &err));
      int rc = rt_graph_begin(st, &err);
      for (int i = 0; i < iters && !rc; i++) rc = ck_qmv(L[i % copies], 0, x, xp, xs, xexp, 1, y, sh->rows, st);
      float us;
      TRY(graph_median_us(st, rc, iters, e0, e1, &us, &err));
      const double gbs = (double)wbytes / (us * 1e-6) / 1e9;
      printf("| %s | 1 | qmv (one row) | %.1f | %.0f | %.1f |\n", sh->name, us, gbs, 100.0 * gbs / bw);
      if (sh->sliding) one_row_us += us;
      one_row_all += sh->per_step * (double)us;
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
  printf("the one-sequence step's one-row kernel (ck_qmv, 1 row): %.1f us\n", one_row_us);
  printf("\na step's products (50 sliding and 10 full layers, the head), ms:\n| B |");
  for (int k = 0; k < NK; k++) printf(" %s |", knames[k]);
  printf("\n");
  for (int b = 0; b < nb; b++) {
    printf("| %d |", bs[b]);
    for (int k = 0; k < NK; k++) printf(" %.2f |", all_us[b][k] / 1000.0);
    printf("\n");
  }
  printf("the one-row kernel (1 row): %.2f ms\n", one_row_all / 1000.0);
  const att_layer layers[] = {{"the sliding layer's attention", 16, 256, 1024, 0, 512, 0},
                              {"the full layer's attention", 4, 512, 0, 64, 512, 8448},
                              {"the full layer's attention, deep", 4, 512, 0, 64, 8192, 8448}};
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
    if (attention_rows(cu, &layers[i], bs, nb, bw, &bad)) bad = 1;
  accel_destroy(cu);
  printf("rows-bench: %s\n", bad ? "FAIL" : "ok");
  return bad;
}
