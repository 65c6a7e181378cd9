/* mlxrt bench-kernels: CPU quantized mat-vec throughput against the machine's memory
 * bandwidth, measured in the same run. For each format: median time of one y = W·x over
 * several runs, GB/s = bytes of weight + scales + biases streamed / time, and the ratio to
 * (a) memcpy bandwidth (bytes copied per second, buffers larger than the LLC, all threads)
 * and (b) read-only bandwidth (all threads summing a buffer larger than the LLC).
 * "cold" cycles through copies of the matrix totalling > 1.5×LLC, so the weights come
 * from DRAM as in a real model; "hot" repeats one matrix (it may sit in a large LLC).
 * --n N (N > 1) times the mat-mat path instead and reports GFLOP/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/cpu/cpu_bandwidth.h"
#include "accel/cpu/cpu_kernels.h"
#include "base/bf16.h"
#include "cli_args.h"
#include "cli_num.h"
#include "commands.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rs = 0x243f6a8885a308d3ULL;
static uint64_t rnd64(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}

/* ---- memory bandwidth ---------------------------------------------------------------- */
typedef struct {
  uint8_t *dst;
  const uint8_t *src;
  size_t chunk, total;
} bw_job;

static void copy_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  bw_job *j = ctx;
  size_t off = (size_t)t * j->chunk, n = off + j->chunk > j->total ? j->total - off : j->chunk;
  memcpy(j->dst + off, j->src + off, n);
}

/* ---- weights ------------------------------------------------------------------------- */
static int make_weight(cpu_qmat *m, const char *mode, int64_t rows, int64_t cols) {
  memset(m, 0, sizeof *m);
  accel_spec *s = &m->spec;
  s->rows = rows;
  s->cols = cols;
  s->scales_dtype = ACCEL_BF16;
  if (!strcmp(mode, "affine4-g64")) *s = (accel_spec){.mode = ACCEL_MODE_AFFINE, .bits = 4, .group_size = 64};
  else if (!strcmp(mode, "affine8-g64")) *s = (accel_spec){.mode = ACCEL_MODE_AFFINE, .bits = 8, .group_size = 64};
  else if (!strcmp(mode, "affine3-g64")) *s = (accel_spec){.mode = ACCEL_MODE_AFFINE, .bits = 3, .group_size = 64};
  else if (!strcmp(mode, "nvfp4")) *s = (accel_spec){.mode = ACCEL_MODE_NVFP4, .bits = 4, .group_size = 16};
  else if (!strcmp(mode, "mxfp4")) *s = (accel_spec){.mode = ACCEL_MODE_MXFP4, .bits = 4, .group_size = 32};
  else if (!strcmp(mode, "mxfp8")) *s = (accel_spec){.mode = ACCEL_MODE_MXFP8, .bits = 8, .group_size = 32};
  else if (!strcmp(mode, "bf16")) *s = (accel_spec){.mode = ACCEL_MODE_DENSE, .dense_dtype = ACCEL_BF16};
  else return -1;
  s->rows = rows;
  s->cols = cols;
  size_t wb = accel_part_bytes(s, ACCEL_PART_WEIGHT), sb = accel_part_bytes(s, ACCEL_PART_SCALES),
         bb = accel_part_bytes(s, ACCEL_PART_BIASES);
  uint8_t *w = malloc(wb), *sc = sb ? malloc(sb) : NULL, *bi = bb ? malloc(bb) : NULL;
  if (!w || (sb && !sc) || (bb && !bi)) return -2;
  if (s->mode == ACCEL_MODE_DENSE) {
    for (size_t i = 0; i < wb / 2; i++) {
      uint16_t h = mx_f32_to_bf16((float)(int)(rnd64() % 2001 - 1000) * 1e-5f);
      memcpy(w + 2 * i, &h, 2);
    }
  } else {
    for (size_t i = 0; i + 8 <= wb; i += 8) {
      uint64_t v = rnd64();
      memcpy(w + i, &v, 8);
    }
  }
  if (s->mode == ACCEL_MODE_AFFINE) {
    for (size_t i = 0; i < sb / 2; i++) {
      uint16_t a = mx_f32_to_bf16((float)(int)(rnd64() % 200 - 100) * 1e-4f);
      uint16_t b = mx_f32_to_bf16((float)(int)(rnd64() % 200 - 100) * 1e-3f);
      memcpy(sc + 2 * i, &a, 2);
      memcpy(bi + 2 * i, &b, 2);
    }
  } else if (sc) {
    for (size_t i = 0; i < sb; i++)
      sc[i] = s->mode == ACCEL_MODE_NVFP4 ? (uint8_t)(0x20 + rnd64() % 0x20) : (uint8_t)(115 + rnd64() % 10);
  }
  m->w = w;
  m->scales = sc;
  m->biases = bi;
  return 0;
}

static void free_weight(cpu_qmat *m) {
  free((void *)m->w);
  free((void *)m->scales);
  free((void *)m->biases);
}

static void usage(void) {
  fprintf(stdout,
          "usage: mlxrt bench-kernels [-t N] [--rows R --cols C] [--runs K] [--n N] [--hot]\n"
          "       [--modes affine4-g64,nvfp4,affine8-g64,mxfp4,mxfp8,bf16,affine3-g64]\n"
          "  -t N      threads (0, the default: all online cores)\n"
          "  --rows R  1..16777216 (default 21504); --cols C: a multiple of 128 up to 16777216\n"
          "            (default 5376); --runs K: 1..1000 (default 9)\n"
          "  --n N     rows of x, 1..65536 (default 1 = mat-vec; N > 1 times the mat-mat path)\n"
          "  --hot     repeat one matrix instead of cycling copies larger than the LLC\n"
          "  ISA: $MLXRT_CPU_ISA=scalar|avx2|avx512 (default: best available)\n");
}

int cmd_bench_kernels(int argc, char **argv) {
  bench_kernels_args o;
  int pr = bench_kernels_args_parse(&o, argc, argv);
  if (pr == 1) usage();
  if (pr) return pr == 1 ? 0 : 2;
  int threads = o.threads;
  const int runs = o.runs, hot = o.hot;
  const int64_t rows = o.rows, cols = o.cols, n = o.n;
  const char *modes = o.modes;
  mlxrt_error err;
  cpu_isa isa;
  if (cpu_isa_from_env(&isa, &err)) {
    fprintf(stderr, "mlxrt bench-kernels: %s\n", err.msg);
    return 2;
  }
  cpu_pool *pool = cpu_pool_create(threads, &err);
  if (!pool) {
    fprintf(stderr, "mlxrt bench-kernels: %s\n", err.msg);
    return 1;
  }
  threads = cpu_pool_threads(pool);
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t llc = l3 > 0 ? (size_t)l3 : (size_t)32 << 20;
  size_t bwbytes = llc + llc / 4 < ((size_t)256 << 20) ? (size_t)256 << 20 : llc + llc / 4;
  if (bwbytes > ((size_t)1 << 30)) bwbytes = (size_t)1 << 30;
  /* one matrix at bf16 (the widest mode), x, y and the two bandwidth buffers; the cold copies
   * add about 1.5x the LLC */
  double need = (double)rows * (double)cols * 2 + (double)n * (double)(cols * 2 + rows * 4) +
                2.0 * (double)bwbytes + 1.5 * (double)llc;
  char what[96];
  snprintf(what, sizeof what, "--rows %lld --cols %lld --n %lld", (long long)rows, (long long)cols, (long long)n);
  if (cli_check_memory("bench-kernels", what, "the matrices", need)) {
    cpu_pool_destroy(pool);
    return 1;
  }
  printf("bench-kernels: %lld x %lld, threads %d, ISA %s, LLC %.0f MiB, %s weights, n %lld, "
         "median of %d runs\n",
         (long long)rows, (long long)cols, threads, cpu_isa_name(isa), (double)llc / (1 << 20),
         hot ? "hot (one copy)" : "cold (copies > 1.5xLLC)", (long long)n, runs);

  /* memory bandwidth, same run */
  bw_job *bj = calloc(1, sizeof *bj);
  uint8_t *src = malloc(bwbytes), *dst = malloc(bwbytes);
  if (!bj || !src || !dst) {
    fprintf(stderr, "mlxrt bench-kernels: out of memory for the %zu-byte bandwidth buffers\n", bwbytes);
    return 1;
  }
  bj->total = bwbytes;
  bj->chunk = (size_t)4 << 20;
  memset(src, 1, bwbytes);
  memset(dst, 2, bwbytes);
  bj->src = src;
  bj->dst = dst;
  int64_t tasks = (int64_t)((bwbytes + bj->chunk - 1) / bj->chunk);
  printf("memcpy = bytes copied / s and read = bytes summed / s over %zu MiB buffers, all threads,\n"
         "measured between the kernel runs of each mode (same load conditions)\n", bwbytes >> 20);
  printf("%-12s %10s %10s %9s %9s %9s %9s %9s %s\n", "mode", "MB/matvec", "median ms", "GB/s",
         "memcpy", "read", "/memcpy", "/read", n > 1 ? "GFLOP/s" : "");
  fflush(stdout);

  uint16_t *x = malloc((size_t)(n * cols) * 2);
  float *y = malloc((size_t)(n * rows) * sizeof *y);
  for (int64_t i = 0; i < n * cols; i++) x[i] = mx_f32_to_bf16((float)(int)(rnd64() % 2001 - 1000) * 1e-3f);
  char list[256];
  snprintf(list, sizeof list, "%s", modes);
  int rc = 0;
  for (char *save = NULL, *mode = strtok_r(list, ",", &save); mode; mode = strtok_r(NULL, ",", &save)) {
    cpu_qmat ms[64];
    if (make_weight(&ms[0], mode, rows, cols)) {
      fprintf(stderr, "mlxrt bench-kernels: unknown mode '%s' or out of memory\n", mode);
      rc = 2;
      continue;
    }
    size_t bytes = accel_weight_bytes(&ms[0].spec);
    int copies = 1;
    if (!hot && n == 1) {
      copies = (int)((llc + llc / 2) / bytes) + 1;
      if (copies > 64) copies = 64;
      for (int c = 1; c < copies; c++)
        if (make_weight(&ms[c], mode, rows, cols)) {
          copies = c;
          break;
        }
    }
    double t[1000], tc[1000], tr[1000];
    for (int r = -1; r < runs; r++) { /* run -1 warms up */
      if (r >= 0) { /* bandwidth references, interleaved with the kernel runs */
        double t0 = now_s();
        cpu_pool_run(pool, tasks, copy_task, bj);
        tc[r] = now_s() - t0;
        tr[r] = cpu_read_pass(pool, bj->src, bj->total);
      }
      const cpu_qmat *m = &ms[(r + 1) % copies];
      double t0 = now_s();
      if (cpu_qmatmul(pool, isa, m, 0, x, n, y, &err)) {
        fprintf(stderr, "mlxrt bench-kernels: %s\n", err.msg);
        return 1;
      }
      if (r >= 0) t[r] = now_s() - t0;
    }
    double med = median(t, runs), gbs = (double)bytes / med / 1e9;
    double memcpy_gbs = (double)bwbytes / median(tc, runs) / 1e9;
    double read_gbs = (double)bwbytes / median(tr, runs) / 1e9;
    printf("%-12s %10.1f %10.3f %9.2f %9.2f %9.2f %9.2f %9.2f", mode, (double)bytes / 1e6, med * 1e3,
           gbs, memcpy_gbs, read_gbs, gbs / memcpy_gbs, gbs / read_gbs);
    if (n > 1) printf(" %9.1f", 2.0 * (double)n * (double)rows * (double)cols / med / 1e9);
    printf("\n");
    fflush(stdout);
    for (int c = 0; c < copies; c++) free_weight(&ms[c]);
  }
  free(x);
  free(y);
  free(src);
  free(dst);
  free(bj);
  cpu_pool_destroy(pool);
  return rc;
}
