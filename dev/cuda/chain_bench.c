/* mlxrt-chain-bench: the Gemma 4 31B sliding layer's four one-row nvfp4 products (q|k|v
 * 5376→16384, o 8192→5376, gate|up 5376→43008, down 21504→5376) chained over 60 layers, each
 * product's output (times a gain that keeps the values O(1)) the next one's input — the
 * decode step's weight stream without its small kernels. Timed two ways in one run:
 *   - a launch per product and one for the next input's prep, captured in a CUDA graph with
 *     programmatic dependent launch (how the decoder runs its products today);
 *   - one resident grid (ck_chain_run, qmv_chain.cu) whose producer warps stream the weights
 *     without stopping between products, in each configuration of --configs (consumer warps :
 *     producer warps : blocks per SM : mode, ck_chain_run's benchmark modes included).
 * Checks (of the last configuration's run), on fresh random weights and input: every product
 * of the resident chain against the
 * one-launch kernel on the same input (float32, only the summation order differs), every
 * prep it wrote bit for bit against the host's, and the first layer's four products against a
 * float64 product on the host (relative error ≤ 1e-3 of the row's largest value).
 * --norm: an RMS norm of the residual before q|k|v and gate|up — in the resident grid a step
 * of its own (every block makes the input, ck_chain_step's nw), in the baseline a kernel
 * (ck_chain_norm) — the residual checked exactly and the input within a bf16 step of float64.
 *   mlxrt-chain-bench [--layers N] [--distinct D] [--configs W:P:S:M,...] [--reps R] [--no-cpu] [--norm]
 * Exit status 1 when a check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"
#include "cuda_internal.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "qmv_chain.h"
#include "runtime.h"

#define NPROD 4
#define XEXP 12 /* every prep: fp16 x·2^12 (|x| stays below 8) */

static const struct {
  const char *name;
  int64_t rows, cols;
} PROD[NPROD] = {{"q|k|v", 16384, 5376}, {"o", 5376, 8192}, {"gate|up", 43008, 5376}, {"down", 5376, 21504}};

/* a resident-grid run: consumer warps, producer warps, blocks per SM, ck_chain_run's mode */
typedef struct chain_cfg {
  int warps, producers, per_sm, mode;
} chain_cfg;
#define MAX_CFG 16
static const chain_cfg DEFAULT_CFG[] = {{4, 1, 4, 33}, {8, 2, 2, 64}, {4, 1, 4, 96}, {8, 1, 2, 192}, {4, 1, 4, 192}};

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* index of value i in the fragment-ordered prep (prep_store.cuh) */
static size_t prep_index(int64_t i) {
  const int kk = (int)(i & 31), rr = kk & 15;
  return (size_t)((((i >> 5) * 4 + ((rr & 7) >> 1)) * 8) + (kk >> 4) * 4 + (rr >> 3) * 2 + (rr & 1));
}
static uint16_t prep_value(uint16_t bf) { return mx_f32_to_f16(ldexpf(mx_bf16_to_f32(bf), XEXP)); }

/* 1 / (√cols · rms of the weight's values), from a sample: keeps y·gain as large as x */
static float weight_gain(const host_weight *h, uint64_t *rng) {
  const accel_spec *s = &h->w.spec;
  double sum = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n; i++) {
    double w = ref_weight(h, 0, (int64_t)(rng_next(rng) % (uint64_t)s->rows), (int64_t)(rng_next(rng) % (uint64_t)s->cols));
    sum += w * w;
  }
  return (float)(1.0 / sqrt((double)s->cols * sum / n));
}

static int g_fail;
static void check(int ok, const char *what, int step, double v) {
  if (ok) return;
  g_fail++;
  if (g_fail <= 20) printf("FAIL %s at step %d (%.3g)\n", what, step, v);
}

/* --stamps: per kind of round (each product's end, a norm's first and second round), medians over
 * the rounds after the first layer of: the round from block 0 seeing the previous one complete
 * to seeing this one complete; the blocks' work (arrival − that opening: the median block and
 * the last); the arrivals' spread; and the last arrival to block 0 seeing it (the atomics'
 * and the poll's latency). */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n ? v[n / 2] : 0.0;
}
/* the grid-barrier rounds of step p (qmv_chain.cu's norm_rounds, plus the product's) */
static int step_rounds(const ck_chain_step *steps, int p) {
  if (!steps[p].nw) return 1;
  const int fused = p > 0 && steps[p].yprev == steps[p - 1].y && steps[p - 1].tiles * 16 == steps[p].nunits * 64;
  return fused ? 2 : 3;
}
static void print_stamps(const unsigned long long *sh, int nrounds, int G, const ck_chain_step *steps, int nsteps) {
  const unsigned long long *open = sh + (size_t)nrounds * G;
  static const char *const kind_name[2] = {"a norm's sums of squares", "a norm's x"};
  double *v[5];
  for (int m = 0; m < 5; m++) v[m] = calloc((size_t)nrounds, sizeof(double));
  double *w = calloc((size_t)G, sizeof(double));
  if (!v[0] || !v[1] || !v[2] || !v[3] || !v[4] || !w) {
    for (int m = 0; m < 5; m++) free(v[m]);
    free(w);
    printf("stamps: out of host memory\n");
    return;
  }
  printf("\n| barrier round (µs, medians) | rounds | round | median block's work | last block's work | arrival spread | last arrival → seen |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (int kind = 0; kind < 2 + NPROD; kind++) { /* each product's end, then the norms' rounds */
    int n = 0, r = 0;
    for (int p = 0; p < nsteps; p++) {
      const int nr = step_rounds(steps, p); /* a norm step: its one or two rounds, then the product's */
      const int first = r;
      r += nr;
      if (p < NPROD || r > nrounds) continue; /* (the first layer warms up) */
      const int rr = kind < NPROD ? (p % NPROD == kind ? r - 1 : -1)
                     : kind == NPROD ? (nr == 3 ? first : -1) /* the unfused norm's sums of squares */
                                     : (nr > 1 ? r - 2 : -1);   /* a norm's x */
      if (rr < 1) continue;
      unsigned long long lo = ~0ull, hi = 0;
      for (int b = 0; b < G; b++) {
        const unsigned long long t = sh[(size_t)rr * G + b];
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
        w[b] = ((double)t - (double)open[rr - 1]) / 1e3;
      }
      v[0][n] = ((double)open[rr] - (double)open[rr - 1]) / 1e3;
      v[1][n] = median_of(w, G);
      v[2][n] = w[G - 1]; /* (sorted: the last) */
      v[3][n] = (double)(hi - lo) / 1e3;
      v[4][n] = ((double)open[rr] - (double)hi) / 1e3;
      n++;
    }
    if (!n) continue;
    char name[64];
    if (kind < NPROD) snprintf(name, sizeof name, "%s's end", PROD[kind].name);
    else snprintf(name, sizeof name, "%s", kind_name[kind - NPROD]);
    printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name, n, median_of(v[0], n), median_of(v[1], n),
           median_of(v[2], n), median_of(v[3], n), median_of(v[4], n));
  }
  /* the ring's waits per product: a producer waiting for free slots means the consumers hold
   * the step back; a consumer waiting for full ones, the weight stream */
  printf("\n| product (kcycles per step, medians over blocks, then layers) | producer waiting for free slots | consumer waiting for data |\n|---|---:|---:|\n");
  const unsigned long long *pw = sh + (size_t)(nrounds + 1) * G, *cw = sh + (size_t)(2 * nrounds + 1) * G;
  for (int j = 0; j < NPROD; j++) {
    int n = 0;
    for (int p = NPROD + j; p < nsteps && p < nrounds; p += NPROD) {
      for (int b = 0; b < G; b++) w[b] = (double)pw[(size_t)p * G + b] / 1e3;
      v[0][n] = median_of(w, G);
      for (int b = 0; b < G; b++) w[b] = (double)cw[(size_t)p * G + b] / 1e3;
      v[1][n] = median_of(w, G);
      n++;
    }
    if (n) printf("| %s | %.1f | %.1f |\n", PROD[j].name, median_of(v[0], n), median_of(v[1], n));
  }
  for (int m = 0; m < 5; m++) free(v[m]);
  free(w);
}

int main(int argc, char **argv) {
  int layers = 60, distinct = 4, reps = 5, cpu = 1, ncfg = 0, norms = 0, stamps = 0;
  chain_cfg cfg[MAX_CFG];
  for (; ncfg < (int)(sizeof DEFAULT_CFG / sizeof *DEFAULT_CFG); ncfg++) cfg[ncfg] = DEFAULT_CFG[ncfg];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--distinct") && i + 1 < argc) distinct = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-cpu")) cpu = 0;
    else if (!strcmp(argv[i], "--norm")) norms = 1;
    else if (!strcmp(argv[i], "--stamps")) stamps = 1;
    else if (!strcmp(argv[i], "--configs") && i + 1 < argc) {
      ncfg = 0;
      for (char *t = strtok(argv[++i], ","); t && ncfg < MAX_CFG; t = strtok(NULL, ",")) {
        chain_cfg *c = &cfg[ncfg++];
        if (sscanf(t, "%d:%d:%d:%d", &c->warps, &c->producers, &c->per_sm, &c->mode) != 4) ncfg = -100;
      }
    } else {
      fprintf(stderr, "usage: %s [--layers N] [--distinct D] [--configs W:P:S:M,...] [--reps R] [--no-cpu] [--norm] [--stamps]\n",
              argv[0]);
      return 2;
    }
  }
  if (layers < 1 || distinct < 1 || distinct > layers || reps < 1 || reps > 32 || ncfg < 1) {
    fprintf(stderr, "mlxrt-chain-bench: bad arguments\n");
    return 2;
  }
  mlxrt_error err = {{0}};
  accel_options o = {"cuda", 0, 0, NULL, NULL};
  accel_backend *cu = mlxrt_cuda_backend_create(&o, &err);
  if (!cu) {
    printf("mlxrt-chain-bench: no CUDA backend: %s\n", err.msg);
    return 1;
  }
  void *st = cudab_stream(cu);
  const int sms = cudab_device(cu)->sms;
  uint64_t rng = 0x2545F4914F6CDD1Dull;
  const int nsteps = layers * NPROD;
  host_weight *hw = calloc((size_t)distinct * NPROD, sizeof *hw);
  const ck_layout **L = calloc((size_t)distinct * NPROD, sizeof *L);
  float *gain = calloc((size_t)distinct * NPROD, sizeof *gain);
  ck_chain_step *steps = calloc((size_t)nsteps, sizeof *steps);
  uint16_t **xp = calloc((size_t)nsteps + 1, sizeof *xp), **xb = calloc((size_t)nsteps + 1, sizeof *xb);
  float **y = calloc((size_t)nsteps, sizeof *y), **yb = calloc((size_t)nsteps, sizeof *yb);
  /* --norm: the residual (one buffer per norm step and one to start, for the chain and for the
   * baseline), the norm weights, and a zero "previous output" for the first norm */
  const int nnorm = norms ? nsteps / 2 : 0;
  float **hres = calloc((size_t)nnorm + 1, sizeof *hres), **hbase = calloc((size_t)nnorm + 1, sizeof *hbase);
  float *nwd = NULL, *zero = NULL;
  void *steps_dev = NULL, *scratch = NULL, *xexp = NULL, *ychk = NULL, *e0 = NULL, *e1 = NULL, *graph = NULL;
  if (!hw || !L || !gain || !steps || !xp || !xb || !y || !yb) {
    printf("out of host memory\n");
    return 1;
  }
#define TRY(x)                                                                                                         \
  do {                                                                                                                 \
    if (x) {                                                                                                           \
      printf("mlxrt-chain-bench: %s\n", err.msg[0] ? err.msg : #x);                                                    \
      return 1;                                                                                                        \
    }                                                                                                                  \
  } while (0)
  double bytes_layer = 0;
  for (int d = 0; d < distinct; d++)
    for (int j = 0; j < NPROD; j++) {
      accel_spec s = {ACCEL_MODE_NVFP4, 4, 16, ACCEL_BF16, ACCEL_BF16, 0, PROD[j].rows, PROD[j].cols};
      host_weight *h = &hw[d * NPROD + j];
      TRY(host_weight_make(h, &s, 7000 + (uint64_t)(d * NPROD + j), PROD[j].name, 0, 0, &rng));
      L[d * NPROD + j] = cudab_resident(cu, &h->w, &err);
      TRY(!L[d * NPROD + j]);
      gain[d * NPROD + j] = weight_gain(h, &rng);
      if (!d) bytes_layer += (double)accel_weight_bytes(&s);
    }
  int max_cols = 0, max_tiles = 0;
  for (int i = 0; i < nsteps; i++) {
    const int j = i % NPROD, wi = ((i / NPROD) % distinct) * NPROD + j;
    TRY(rt_malloc((void **)&y[i], (size_t)PROD[j].rows * 4, &err) || rt_malloc((void **)&yb[i], (size_t)PROD[j].rows * 4, &err) ||
        rt_malloc((void **)&xp[i], (size_t)PROD[j].cols * 2, &err) || rt_malloc((void **)&xb[i], (size_t)PROD[j].cols * 2, &err));
    steps[i].w = L[wi]->w;
    steps[i].s = L[wi]->s;
    steps[i].tiles = (int)L[wi]->tiles;
    steps[i].nunits = (int)L[wi]->nunits;
    steps[i].gain = gain[wi];
    if (PROD[j].cols > max_cols) max_cols = (int)PROD[j].cols;
    if (L[wi]->tiles > max_tiles) max_tiles = (int)L[wi]->tiles;
  }
  const int64_t H = PROD[0].cols; /* the residual's width (q|k|v's and gate|up's input) */
  if (norms) { /* h0 and the norm weights (1 ± 0.25, so |x| stays below 2^15 / 2^XEXP) on the host */
    float *hh = malloc((size_t)H * 4), *wh = malloc((size_t)H * 4);
    TRY(!hh || !wh);
    for (int64_t k = 0; k < H; k++) hh[k] = (float)(rng_unit(&rng) * 2 - 1), wh[k] = (float)(1.0 + 0.5 * (rng_unit(&rng) - 0.5));
    for (int n = 0; n <= nnorm; n++)
      TRY(rt_malloc((void **)&hres[n], (size_t)H * 4, &err) || rt_malloc((void **)&hbase[n], (size_t)H * 4, &err));
    TRY(rt_malloc((void **)&nwd, (size_t)H * 4, &err) || rt_malloc((void **)&zero, (size_t)H * 4, &err));
    TRY(rt_h2d(hres[0], hh, (size_t)H * 4, st, &err) || rt_h2d(hbase[0], hh, (size_t)H * 4, st, &err) ||
        rt_h2d(nwd, wh, (size_t)H * 4, st, &err) || rt_memset(zero, 0, (size_t)H * 4, st, &err) || rt_stream_sync(st, &err));
    free(hh);
    free(wh);
  }
  for (int i = 0; i < nsteps; i++) {
    const int normed = norms && i % 2 == 0, next_normed = norms && (i + 1) % 2 == 0;
    steps[i].xp = xp[i];
    steps[i].y = y[i];
    steps[i].xnext = i + 1 < nsteps && !next_normed ? xp[i + 1] : NULL;
    steps[i].knext = steps[i].xnext ? (int)PROD[(i + 1) % NPROD].cols : 0;
    if (normed) { /* q|k|v and gate|up: the norm of the residual plus the previous output */
      steps[i].nw = nwd;
      steps[i].yprev = i ? y[i - 1] : zero;
      steps[i].hin = hres[i / 2];
      steps[i].hout = hres[i / 2 + 1];
    }
  }
  /* the first input (without norms): bf16 in [-1, 1), prepped on the host */
  const int64_t k0 = PROD[0].cols;
  uint16_t *x0 = malloc((size_t)k0 * 2), *x0p = malloc((size_t)k0 * 2);
  for (int64_t i = 0; i < k0; i++) {
    x0[i] = mx_f32_to_bf16((float)(rng_unit(&rng) * 2 - 1));
    x0p[prep_index(i)] = prep_value(x0[i]);
  }
  const int xe = XEXP;
  TRY(rt_h2d(xp[0], x0p, (size_t)k0 * 2, st, &err) || rt_h2d(xb[0], x0p, (size_t)k0 * 2, st, &err));
  TRY(rt_malloc(&steps_dev, (size_t)nsteps * sizeof *steps, &err) ||
      rt_malloc(&xexp, 8 * sizeof(int), &err) || rt_malloc(&ychk, 43008 * 4, &err));
  const size_t scratch_bytes = ck_chain_scratch_bytes(max_tiles, 4 * sms);
  TRY(rt_malloc(&scratch, scratch_bytes, &err));
  TRY(rt_h2d(steps_dev, steps, (size_t)nsteps * sizeof *steps, st, &err) || rt_h2d(xexp, &xe, sizeof xe, st, &err));
  TRY(rt_event_create(&e0, &err) || rt_event_create(&e1, &err));
  const double gbw = cu->read_bandwidth ? cu->read_bandwidth(cu) : 0;
  const double total = bytes_layer * layers;
  printf("chain: %d layers × 4 nvfp4 products (%d distinct layers, %.1f MB each)%s, %.2f GB; %d SMs; read bandwidth %.0f GB/s\n",
         layers, distinct, bytes_layer / 1e6, norms ? ", an RMS norm before q|k|v and gate|up" : "", total / 1e9, sms, gbw);
  printf("| chain | stages | µs per layer | GB/s | %% of read BW |\n|---|---:|---:|---:|---:|\n");

  /* the baseline: a launch per product and a prep kernel, one graph, programmatic dependent launch */
  ck_set_pdl(1);
  TRY(rt_graph_begin(st, &err));
  for (int i = 0; i < nsteps; i++) {
    const int j = i % NPROD, wi = ((i / NPROD) % distinct) * NPROD + j;
    if (norms && i % 2 == 0)
      TRY(rt_status(ck_chain_norm(nwd, i ? yb[i - 1] : zero, hbase[i / 2], hbase[i / 2 + 1], xb[i], (int)H, XEXP, st),
                    "ck_chain_norm", &err));
    TRY(rt_status(ck_qmv_fast(L[wi], 0, xb[i], NULL, xexp, 1, yb[i], PROD[j].rows, st), "ck_qmv_fast", &err));
    if (i + 1 < nsteps && !(norms && (i + 1) % 2 == 0))
      TRY(rt_status(ck_chain_prep(yb[i], gain[wi], XEXP, xb[i + 1], (int)PROD[(i + 1) % NPROD].cols, st), "ck_chain_prep", &err));
  }
  TRY(rt_graph_end(st, &graph, &err));
  ck_set_pdl(0);
  float t[32];
  for (int r = -1; r < reps; r++) {
    float ms = 0;
    TRY(rt_event_record(e0, st, &err) || rt_graph_launch(graph, st, &err) || rt_event_record(e1, st, &err) ||
        rt_event_ms(e0, e1, &ms, &err));
    if (r >= 0) t[r] = ms;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_float);
  double us = t[reps / 2] * 1e3 / layers;
  printf("| a launch per product + prep%s kernel (graph, PDL) | 3 | %.2f | %.0f | %.1f %% |\n", norms ? " or norm" : "", us,
         bytes_layer / us / 1e3,
         gbw > 0 ? 100.0 * bytes_layer / us / 1e3 / gbw : 0.0);
  fflush(stdout);

  /* --stamps: every grid-barrier round of the last configuration's last run stamped */
  int nrounds = 0;
  for (int p = 0; p < nsteps; p++) nrounds += step_rounds(steps, p);
  const int sblocks = sms * cfg[ncfg - 1].per_sm;
  unsigned long long *stamps_dev = NULL;
  if (stamps) {
    TRY(rt_malloc((void **)&stamps_dev, (size_t)(3 * nrounds + 1) * sblocks * 8, &err) ||
        rt_memset(stamps_dev, 0, (size_t)(3 * nrounds + 1) * sblocks * 8, st, &err));
    ck_chain_set_stamps(stamps_dev, nrounds);
  }
  /* the resident grid, per configuration (consumer warps : producer warps : blocks per SM :
   * mode); the last run's outputs are checked */
  for (int ci = 0; ci < ncfg; ci++) {
    const chain_cfg *c = &cfg[ci];
    int nst = 0;
    for (int r = -1; r < reps; r++) {
      float ms = 0;
      TRY(rt_memset(scratch, 0, scratch_bytes, st, &err) || rt_event_record(e0, st, &err));
      TRY(rt_status(ck_chain_run(steps_dev, nsteps, max_cols, max_tiles, XEXP, scratch, sms * c->per_sm, c->per_sm, c->warps,
                                 c->producers, c->mode, &nst, st),
                    "ck_chain_run", &err));
      TRY(rt_event_record(e1, st, &err) || rt_stream_sync(st, &err) || rt_event_ms(e0, e1, &ms, &err));
      if (r >= 0) t[r] = ms;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_float);
    us = t[reps / 2] * 1e3 / layers;
    char inflight[48] = "";
    if ((c->mode >> 12) & 7) snprintf(inflight, sizeof inflight, ", %d stage%s in flight", (c->mode >> 12) & 7, ((c->mode >> 12) & 7) > 1 ? "s" : "");
    printf("| resident grid: %d consumer + %d producer warps, %d block%s per SM%s%s%s%s%s%s%s%s%s | %d | %.2f | %.0f | %.1f %% |\n",
           c->warps, c->producers, c->per_sm, c->per_sm > 1 ? "s" : "", c->mode & 1 ? ", arithmetic skipped" : "",
           c->mode & 2 ? ", no grid barrier" : "", c->mode & 16 ? ", no split" : "", c->mode & 32 ? ", x through the L2" : "", c->mode & 64 ? ", full-stage loop" : "", c->mode & 128 ? ", x staged" : "", c->mode & 512 ? ", fast barrier" : "", c->mode & 1024 ? ", two mma chains" : "", inflight, nst, us, bytes_layer / us / 1e3,
           gbw > 0 ? 100.0 * bytes_layer / us / 1e3 / gbw : 0.0);
    fflush(stdout);
  }

  if (stamps) {
    ck_chain_set_stamps(NULL, 0);
    unsigned long long *sh = malloc((size_t)(3 * nrounds + 1) * sblocks * 8);
    TRY(!sh || rt_d2h(sh, stamps_dev, (size_t)(3 * nrounds + 1) * sblocks * 8, st, &err) || rt_stream_sync(st, &err));
    print_stamps(sh, nrounds, sblocks, steps, nsteps);
    free(sh);
    rt_free(stamps_dev);
  }

  /* checks of the last run */
  float *yh = malloc(43008 * 4), *yc = malloc(43008 * 4);
  uint16_t *xh = malloc(21504 * 2), *xn = malloc(21504 * 2), *xbf = malloc(21504 * 2);
  double *yref = malloc(43008 * sizeof(double));
  double worst_gpu = 0, worst_cpu = 0;
  const int checked = !(cfg[ncfg - 1].mode & 3); /* the benchmark modes' results are wrong by design */
  for (int i = 0; i < nsteps * checked; i++) {
    const int j = i % NPROD, wi = ((i / NPROD) % distinct) * NPROD + j;
    const int64_t rows = PROD[j].rows, cols = PROD[j].cols;
    TRY(rt_status(ck_qmv_fast(L[wi], 0, xp[i], NULL, xexp, 1, (float *)ychk, rows, st), "ck_qmv_fast", &err));
    TRY(rt_d2h(yh, y[i], (size_t)rows * 4, st, &err) || rt_d2h(yc, ychk, (size_t)rows * 4, st, &err) ||
        rt_d2h(xh, xp[i], (size_t)cols * 2, st, &err));
    if (steps[i].xnext) TRY(rt_d2h(xn, xp[i + 1], (size_t)PROD[(i + 1) % NPROD].cols * 2, st, &err));
    if (steps[i].nw) { /* a norm step: the residual exactly, the input within a bf16 step of a float64 norm */
      float *hin = malloc((size_t)H * 4), *hout = malloc((size_t)H * 4), *yp = malloc((size_t)H * 4), *wh = malloc((size_t)H * 4);
      TRY(!hin || !hout || !yp || !wh);
      TRY(rt_d2h(hin, steps[i].hin, (size_t)H * 4, st, &err) || rt_d2h(hout, steps[i].hout, (size_t)H * 4, st, &err) ||
          rt_d2h(yp, steps[i].yprev, (size_t)H * 4, st, &err) || rt_d2h(wh, nwd, (size_t)H * 4, st, &err) ||
          rt_stream_sync(st, &err));
      int hbad = 0, xbad = 0;
      double ss = 0;
      for (int64_t k = 0; k < H; k++) {
        const float hv = hin[k] + yp[k];
        hbad += memcmp(&hv, &hout[k], 4) != 0;
        ss += (double)hv * hv;
      }
      const double rr = 1.0 / sqrt(ss / (double)H + 1e-6);
      for (int64_t k = 0; k < H; k++) {
        const double want = (double)(hin[k] + yp[k]) * rr * wh[k];
        const double got = ldexp(mx_f16_to_f32(xh[prep_index(k)]), -XEXP);
        xbad += !(fabs(got - want) <= fabs(want) * 0x1p-7 + 1e-30);
      }
      check(!hbad, "norm step's residual", i, hbad);
      check(!xbad, "norm step's input", i, xbad);
      free(hin);
      free(hout);
      free(yp);
      free(wh);
    }
    TRY(rt_stream_sync(st, &err));
    double mref = 0, md = 0;
    for (int64_t r = 0; r < rows; r++) {
      mref = fmax(mref, fabs(yc[r]));
      md = fmax(md, fabs((double)yh[r] - yc[r]));
    }
    const double rel = mref > 0 ? md / mref : md;
    worst_gpu = fmax(worst_gpu, rel);
    check(rel <= 1e-4 && isfinite(rel), "resident product vs one-launch kernel", i, rel);
    if (steps[i].xnext) { /* the prep it wrote, bit for bit */
      int bad = 0;
      for (int64_t r = 0; r < PROD[(i + 1) % NPROD].cols; r++)
        bad += xn[prep_index(r)] != prep_value(mx_f32_to_bf16(yh[r] * steps[i].gain));
      check(!bad, "next prep", i, bad);
    }
    if (cpu && i < NPROD) { /* float64 on the host, from the same input */
      for (int64_t r = 0; r < cols; r++) xbf[r] = mx_f32_to_bf16(ldexpf(mx_f16_to_f32(xh[prep_index(r)]), -XEXP));
      ref_qmatmul(&hw[wi], 0, xbf, 1, yref);
      double m = 0, d = 0;
      for (int64_t r = 0; r < rows; r++) {
        m = fmax(m, fabs(yref[r]));
        d = fmax(d, fabs(yh[r] - yref[r]));
      }
      const double relc = m > 0 ? d / m : d;
      worst_cpu = fmax(worst_cpu, relc);
      check(relc <= 1e-3 && isfinite(relc), "resident product vs float64 host product", i, relc);
    }
  }
  printf("checks: %d steps against the one-launch kernel (worst %.2e of the row's max), %d against float64 on the host "
         "(worst %.2e), every prep bit for bit: %s\n",
         checked ? nsteps : 0, worst_gpu, cpu && checked ? NPROD : 0, worst_cpu, g_fail ? "FAIL" : checked ? "PASS" : "none (a benchmark mode ran last)");
  free(yh);
  free(yc);
  free(xh);
  free(xn);
  free(xbf);
  free(yref);
  free(x0);
  free(x0p);
  rt_graph_destroy(graph);
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  for (int i = 0; i < nsteps; i++) {
    rt_free(y[i]);
    rt_free(yb[i]);
    rt_free(xp[i]);
    rt_free(xb[i]);
  }
  rt_free(steps_dev);
  rt_free(scratch);
  for (int n = 0; n <= nnorm; n++) {
    rt_free(hres[n]);
    rt_free(hbase[n]);
  }
  rt_free(nwd);
  rt_free(zero);
  free(hres);
  free(hbase);
  rt_free(xexp);
  rt_free(ychk);
  accel_destroy(cu);
  for (int i = 0; i < distinct * NPROD; i++) host_weight_free(&hw[i]);
  free(hw);
  free(L);
  free(gain);
  free(steps);
  free(xp);
  free(xb);
  free(y);
  free(yb);
  return g_fail ? 1 : 0;
}
