/* mlxrt-cuda-test: the GPU self-test and benchmark (needs a CUDA device; scripts/gpu_test.sh).
 *
 *   1. the plug-in loads through accel_create("cuda") like the mlxrt binary loads it;
 *   2. every kernel (tensor-core and generic paths, every format, n = 1..13, stacked experts)
 *      against the CPU backend and a float64 reference on fresh random inputs: relative error
 *      max|y - ref| / max|ref| per activation row must be ≤ 1e-3; outputs are poisoned with NaN
 *      first, so an unwritten element fails;
 *   3. embed_rows bit-exact against the CPU backend;
 *   4. the prompt pass's products (prefill.cu, cuda_gemm.c): pf_dequant bit-exact against the
 *      host (rank-2 weights), and the cuBLAS GEMM on it against a host product;
 *   5. error paths (expert range, key reuse, short parts);
 *   6. unless --no-bench: timings on the Gemma 4 31B shapes (cuda_bench.c).
 * Exit status 0 only when every check passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gemm.h"
#include "cuda_internal.h"
#include "gpu_test_util.h"
#include "prefill_kernels.h"

int cuda_bench(const char *table_path, int quick);
int cuda_bench_profile(const char *which);

static int g_checks, g_failed;
static double g_worst;

#define CHECKF(cond, ...)                                                                  \
  do {                                                                                     \
    g_checks++;                                                                            \
    if (!(cond)) {                                                                         \
      g_failed++;                                                                          \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                          \
      printf(__VA_ARGS__);                                                                 \
      printf("\n");                                                                        \
    }                                                                                      \
  } while (0)

static void random_x(uint16_t *x, size_t n, double scale, uint64_t *rng) {
  for (size_t i = 0; i < n; i++) {
    double u = rng_unit(rng) + rng_unit(rng) + rng_unit(rng) - 1.5; /* roughly normal */
    x[i] = mx_f32_to_bf16((float)(u * scale));
  }
}

/* max|y - ref| / max|ref| over one activation row; NaN counts as failure (returns inf). */
static double rel_err_row(const float *y, const double *ref, int64_t rows) {
  double num = 0, den = 0;
  for (int64_t r = 0; r < rows; r++) {
    if (!isfinite(y[r])) return INFINITY;
    double d = fabs((double)y[r] - ref[r]);
    if (d > num) num = d;
    if (fabs(ref[r]) > den) den = fabs(ref[r]);
  }
  return den > 0 ? num / den : num;
}

typedef struct tcase {
  const char *label;
  accel_spec spec;
  int scale_lo, scale_hi;
} tcase;

static const char *dtn(accel_dtype d) { return d == ACCEL_BF16 ? "bf16" : d == ACCEL_F16 ? "f16" : "f32"; }

/* The prompt pass's products on a rank-2 weight: pf_dequant bit-exact against the host (fast
 * layouts: fp and dense formats s·v exactly, affine one rounding of float(s·q) + b; the generic
 * layout goes through ck_embed, so mx.dequantize's rounding), then y[40, rows] from the cuBLAS
 * GEMM on the dequantized weight against a float64 host product of the same bf16 values. */
static void prefill_products(accel_backend *cu, const host_weight *h, const ck_layout *L, const char *label,
                             uint64_t *rng) {
  const accel_spec *s = &h->w.spec;
  const int64_t rows = s->rows, cols = s->cols, n = 40;
  mlxrt_error err = {{0}};
  void *st = cudab_stream(cu), *cb = NULL;
  uint16_t *dw = NULL, *dx = NULL, *w = malloc((size_t)(rows * cols) * 2), *x = malloc((size_t)(n * cols) * 2);
  int32_t *dids = NULL, *ids = malloc((size_t)rows * sizeof(int32_t));
  float *dy = NULL, *y = malloc((size_t)(n * rows) * sizeof(float));
  double *ref = malloc((size_t)(n * rows) * sizeof(double));
  if (!w || !x || !ids || !y || !ref) {
    CHECKF(0, "%s: prefill products: out of host memory", label);
    goto done;
  }
  for (int64_t r = 0; r < rows; r++) ids[r] = (int32_t)r;
  int ok = !rt_malloc((void **)&dw, (size_t)(rows * cols) * 2, &err) &&
           !rt_malloc((void **)&dx, (size_t)(n * cols) * 2, &err) &&
           !rt_malloc((void **)&dids, (size_t)rows * sizeof(int32_t), &err) &&
           !rt_malloc((void **)&dy, (size_t)(n * rows) * sizeof(float), &err) &&
           !rt_h2d(dids, ids, (size_t)rows * sizeof(int32_t), st, &err) &&
           !rt_memset(dw, 0xff, (size_t)(rows * cols) * 2, st, &err) &&
           !rt_status(pf_dequant(L, dids, dw, st), "pf_dequant", &err) &&
           !rt_d2h(w, dw, (size_t)(rows * cols) * 2, st, &err) && !rt_stream_sync(st, &err);
  CHECKF(ok, "%s: pf_dequant failed: %s", label, err.msg);
  if (!ok) goto done;
  size_t bad = 0, first = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols; k++) {
      uint16_t want;
      if (L->fmt == CK_GENERIC) want = ref_embed(h, r, k);
      else if (s->mode == ACCEL_MODE_AFFINE) {
        const uint8_t *wr = (const uint8_t *)h->part[0] + (size_t)r * (size_t)(cols * s->bits / 8);
        size_t G = (size_t)(r * (cols / s->group_size) + k / s->group_size);
        float sc = (float)get_value(h->part[1], G, s->scales_dtype);
        float bi = (float)get_value(h->part[2], G, s->scales_dtype);
        want = mx_f32_to_bf16(sc * (float)ref_code(wr, s->bits, k) + bi);
      } else want = mx_f32_to_bf16((float)ref_weight(h, 0, r, k));
      size_t i = (size_t)(r * cols + k);
      if (w[i] != want && !bad++) first = i;
    }
  CHECKF(bad == 0, "%s: pf_dequant differs from the host in %zu of %lld values (first at row %lld col %lld)",
         label, bad, (long long)(rows * cols), (long long)(first / (size_t)cols), (long long)(first % (size_t)cols));
  random_x(x, (size_t)(n * cols), 1.0, rng);
  for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
  ok = !cg_create(&cb, &err) && !rt_h2d(dx, x, (size_t)(n * cols) * 2, st, &err) &&
       !rt_h2d(dy, y, (size_t)(n * rows) * sizeof(float), st, &err) &&
       !cg_gemm_bf16(cb, st, n, rows, cols, dx, dw, dy, rows, &err) &&
       !rt_d2h(y, dy, (size_t)(n * rows) * sizeof(float), st, &err) && !rt_stream_sync(st, &err);
  CHECKF(ok, "%s: cuBLAS GEMM failed: %s", label, err.msg);
  if (!ok) goto done;
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++) {
      double acc = 0;
      for (int64_t k = 0; k < cols; k++) acc += (double)mx_bf16_to_f32(w[r * cols + k]) * mx_bf16_to_f32(x[i * cols + k]);
      ref[i * rows + r] = acc;
    }
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = rel_err_row(y + i * rows, ref + i * rows, rows);
    if (e > worst) worst = e;
  }
  CHECKF(worst <= 1e-4, "%s: cuBLAS GEMM on the dequantized weight: rel err %.3g > 1e-4", label, worst);
done:
  cg_destroy(cb);
  rt_free(dw);
  rt_free(dx);
  rt_free(dids);
  rt_free(dy);
  free(w);
  free(x);
  free(ids);
  free(y);
  free(ref);
}

/* One case: for each n, x at a few magnitudes, CUDA vs CPU backend vs float64. */
static void run_case(accel_backend *cu, accel_backend *cpu, const tcase *tc, uint64_t key,
                     uint64_t *rng, int expect_fast) {
  host_weight h;
  if (host_weight_make(&h, &tc->spec, key, tc->label, tc->scale_lo, tc->scale_hi, rng)) {
    CHECKF(0, "%s: out of host memory", tc->label);
    return;
  }
  mlxrt_error err = {{0}};
  const ck_layout *L = cudab_resident(cu, &h.w, &err);
  CHECKF(L != NULL, "%s: upload failed: %s", tc->label, err.msg);
  if (!L) {
    host_weight_free(&h);
    return;
  }
  if (expect_fast >= 0)
    CHECKF((L->fmt != CK_GENERIC) == (expect_fast != 0), "%s: expected the %s kernel, got fmt %d",
           tc->label, expect_fast ? "tensor-core" : "generic", L->fmt);
  const accel_spec *s = &tc->spec;
  const int64_t ns[] = {1, 2, 3, 8, 13};
  const double mags[] = {1.0, 3e-3, 700.0};
  int64_t slabs = s->experts > 0 ? s->experts : 1;
  double worst = 0;
  for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
    int64_t n = ns[ni];
    int expert = s->experts > 0 ? (int)(rng_next(rng) % (uint64_t)slabs) : -1;
    uint16_t *x = malloc((size_t)(n * s->cols) * 2);
    float *y = malloc((size_t)(n * s->rows) * 4), *yc = malloc((size_t)(n * s->rows) * 4);
    double *ref = malloc((size_t)(n * s->rows) * sizeof(double));
    random_x(x, (size_t)(n * s->cols), mags[ni % 3], rng);
    for (int64_t i = 0; i < n * s->rows; i++) y[i] = yc[i] = NAN;
    int rc = cu->qmatmul(cu, &h.w, expert, x, n, y, &err);
    CHECKF(rc == 0, "%s n=%lld: cuda qmatmul failed: %s", tc->label, (long long)n, err.msg);
    if (ni == 0) { /* the same product again: bit-identical */
      float *y2 = malloc((size_t)(n * s->rows) * 4);
      int rc3 = cu->qmatmul(cu, &h.w, expert, x, n, y2, &err);
      CHECKF(rc3 == 0 && memcmp(y, y2, (size_t)(n * s->rows) * 4) == 0, "%s: a repeated product differs",
             tc->label);
      free(y2);
    }
    ref_qmatmul(&h, expert < 0 ? 0 : expert, x, n, ref);
    double e64 = 0, ecpu = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = rel_err_row(y + i * s->rows, ref + i * s->rows, s->rows);
      if (e > e64) e64 = e;
    }
    if (cpu) {
      int rc2 = cpu->qmatmul(cpu, &h.w, expert, x, n, yc, &err);
      CHECKF(rc2 == 0, "%s: cpu qmatmul failed: %s", tc->label, err.msg);
      double *rc64 = malloc((size_t)(n * s->rows) * sizeof(double));
      for (int64_t i = 0; i < n * s->rows; i++) rc64[i] = yc[i];
      for (int64_t i = 0; i < n; i++) {
        double e = rel_err_row(y + i * s->rows, rc64 + i * s->rows, s->rows);
        if (e > ecpu) ecpu = e;
      }
      free(rc64);
      CHECKF(ecpu <= 1e-3, "%s n=%lld expert=%d: rel err vs CPU backend %.3g > 1e-3", tc->label,
             (long long)n, expert, ecpu);
    }
    CHECKF(e64 <= 1e-3, "%s n=%lld expert=%d: rel err vs float64 %.3g > 1e-3", tc->label,
           (long long)n, expert, e64);
    if (e64 > worst) worst = e64;
    if (ecpu > worst) worst = ecpu;
    free(x);
    free(y);
    free(yc);
    free(ref);
  }
  if (worst > g_worst) g_worst = worst;
  printf("  %-44s %-11s max rel err %.2e\n", tc->label, L->fmt == CK_GENERIC ? "generic" : "tensor-core", worst);
  if (s->experts == 0) prefill_products(cu, &h, L, tc->label, rng);
  /* embedding rows, bit-exact against the CPU backend and the host reference (rank-2 only) */
  if (s->experts == 0) {
    int32_t ids[5] = {0, (int32_t)(s->rows - 1), (int32_t)(s->rows / 2), 7 % (int32_t)s->rows, 0};
    ids[4] = (int32_t)(rng_next(rng) % (uint64_t)s->rows);
    size_t ob = (size_t)(5 * s->cols);
    uint16_t *a = malloc(ob * 2), *b = malloc(ob * 2);
    memset(a, 0xff, ob * 2);
    int r1 = cu->embed_rows(cu, &h.w, ids, 5, a, &err);
    CHECKF(r1 == 0, "%s: cuda embed_rows failed: %s", tc->label, err.msg);
    for (int i = 0; i < 5; i++)
      for (int64_t k = 0; k < s->cols; k++) b[i * s->cols + k] = ref_embed(&h, ids[i], k);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ob; i++)
      if (a[i] != b[i] && !bad++) first = i;
    CHECKF(bad == 0, "%s: embed_rows differs from the host reference in %zu of %zu values "
           "(first at %zu: %04x vs %04x)", tc->label, bad, ob, first, a[first], b[first]);
    if (cpu) {
      int r2 = cpu->embed_rows(cpu, &h.w, ids, 5, b, &err);
      CHECKF(r2 == 0, "%s: cpu embed_rows failed: %s", tc->label, err.msg);
      bad = 0;
      for (size_t i = 0; i < ob; i++)
        if (a[i] != b[i] && !bad++) first = i;
      CHECKF(bad == 0, "%s: embed_rows differs from the CPU in %zu of %zu values (first at %zu: "
             "%04x vs %04x)", tc->label, bad, ob, first, a[first], b[first]);
    }
    free(a);
    free(b);
  }
  host_weight_free(&h);
}

static accel_spec aff(int bits, int gs, accel_dtype sdt, int64_t rows, int64_t cols, int64_t experts) {
  accel_spec s = {ACCEL_MODE_AFFINE, bits, gs, ACCEL_BF16, sdt, experts, rows, cols};
  return s;
}
static accel_spec fpm(accel_mode m, int64_t rows, int64_t cols, int64_t experts) {
  accel_spec s = {m, m == ACCEL_MODE_MXFP8 ? 8 : 4, m == ACCEL_MODE_NVFP4 ? 16 : 32, ACCEL_BF16,
                  ACCEL_BF16, experts, rows, cols};
  return s;
}
static accel_spec dense(accel_dtype dt, int64_t rows, int64_t cols, int64_t experts) {
  accel_spec s = {ACCEL_MODE_DENSE, dt == ACCEL_F32 ? 32 : 16, 0, dt, ACCEL_BF16, experts, rows, cols};
  return s;
}

static void correctness(accel_backend *cu, accel_backend *cpu, int generic_only, uint64_t *rng) {
  static char labels[256][96];
  int nl = 0;
  uint64_t key = generic_only ? 100000 : 1;
  tcase tc;
#define RUN(spec_, lo_, hi_, fast_, ...)                                                   \
  do {                                                                                     \
    snprintf(labels[nl % 256], sizeof labels[0], __VA_ARGS__);                             \
    tc.label = labels[nl++ % 256];                                                         \
    tc.spec = (spec_);                                                                     \
    tc.scale_lo = (lo_);                                                                   \
    tc.scale_hi = (hi_);                                                                   \
    run_case(cu, cpu, &tc, key++, rng, generic_only ? 0 : (fast_));                         \
  } while (0)
  const int gss[3] = {32, 64, 128};
  const accel_dtype sdts[3] = {ACCEL_BF16, ACCEL_F16, ACCEL_F32};
  for (int b = 2; b <= 8; b++) {
    if (b == 7) continue;
    for (int gi = 0; gi < 3; gi++)
      for (int di = 0; di < 3; di++) {
        int fast = (b == 4 || b == 8) && di < 2;
        RUN(aff(b, gss[gi], sdts[di], 72, 384, 0), 0, 0, fast, "affine%d g%d %s 72x384", b, gss[gi], dtn(sdts[di]));
      }
  }
  /* tile padding, a K the unit does not divide (generic), stacked experts, a real width */
  RUN(aff(4, 64, ACCEL_BF16, 200, 640, 0), 0, 0, 1, "affine4 g64 bf16 200x640");
  RUN(aff(4, 32, ACCEL_BF16, 40, 96, 0), 0, 0, 0, "affine4 g32 bf16 40x96 (K %% 64 != 0)");
  RUN(aff(8, 128, ACCEL_F16, 33, 256, 0), 0, 0, 1, "affine8 g128 f16 33x256");
  RUN(aff(4, 64, ACCEL_BF16, 48, 256, 3), 0, 0, 1, "affine4 g64 bf16 3x48x256 stacked");
  RUN(aff(8, 64, ACCEL_BF16, 48, 256, 4), 0, 0, 1, "affine8 g64 bf16 4x48x256 stacked");
  RUN(aff(3, 64, ACCEL_BF16, 48, 256, 2), 0, 0, 0, "affine3 g64 bf16 2x48x256 stacked");
  RUN(aff(4, 64, ACCEL_BF16, 1000, 5376, 0), 0, 0, 1, "affine4 g64 bf16 1000x5376");
  /* tall matrices: 4096 tiles, many waves of blocks */
  RUN(aff(4, 64, ACCEL_BF16, 65536, 1024, 0), 0, 0, 1, "affine4 g64 bf16 65536x1024");
  RUN(fpm(ACCEL_MODE_NVFP4, 65536, 1024, 0), 0, 0, 1, "nvfp4 65536x1024");
  RUN(fpm(ACCEL_MODE_NVFP4, 72, 384, 0), 0, 0, 1, "nvfp4 72x384");
  RUN(fpm(ACCEL_MODE_NVFP4, 1000, 5376, 0), 0, 0, 1, "nvfp4 1000x5376");
  RUN(fpm(ACCEL_MODE_NVFP4, 72, 384, 0), 0x00, 0x7f, 0, "nvfp4 72x384 scales up to 480 (generic)");
  RUN(fpm(ACCEL_MODE_NVFP4, 72, 384, 0), 0x00, 0x10, 1, "nvfp4 72x384 zero and subnormal scales");
  RUN(fpm(ACCEL_MODE_NVFP4, 72, 384, 0), 0x40, 0x6f, 1, "nvfp4 72x384 scales 2..120");
  RUN(fpm(ACCEL_MODE_NVFP4, 48, 256, 3), 0, 0, 1, "nvfp4 3x48x256 stacked");
  RUN(fpm(ACCEL_MODE_NVFP4, 40, 48, 0), 0, 0, 0, "nvfp4 40x48 (K %% 64 != 0)");
  RUN(fpm(ACCEL_MODE_MXFP4, 72, 384, 0), 0, 0, 1, "mxfp4 72x384");
  RUN(fpm(ACCEL_MODE_MXFP4, 72, 384, 0), 100, 140, 1, "mxfp4 72x384 wide scales");
  RUN(fpm(ACCEL_MODE_MXFP4, 48, 256, 2), 0, 0, 1, "mxfp4 2x48x256 stacked");
  RUN(fpm(ACCEL_MODE_MXFP8, 72, 384, 0), 0, 0, 1, "mxfp8 72x384");
  RUN(fpm(ACCEL_MODE_MXFP8, 48, 256, 2), 0, 0, 1, "mxfp8 2x48x256 stacked");
  RUN(fpm(ACCEL_MODE_MXFP8, 40, 96, 0), 0, 0, 1, "mxfp8 40x96");
  RUN(dense(ACCEL_BF16, 72, 384, 0), 0, 0, 1, "dense bf16 72x384");
  RUN(dense(ACCEL_BF16, 1000, 5376, 0), 0, 0, 1, "dense bf16 1000x5376");
  RUN(dense(ACCEL_BF16, 48, 256, 2), 0, 0, 1, "dense bf16 2x48x256 stacked");
  RUN(dense(ACCEL_F16, 72, 384, 0), 0, 0, 1, "dense f16 72x384");
  RUN(dense(ACCEL_F32, 72, 384, 0), 0, 0, 0, "dense f32 72x384");
  RUN(dense(ACCEL_BF16, 40, 100, 0), 0, 0, 0, "dense bf16 40x100 (K %% 32 != 0)");
#undef RUN
}

static void error_paths(accel_backend *cu, uint64_t *rng) {
  host_weight h;
  accel_spec s = aff(4, 64, ACCEL_BF16, 32, 128, 2);
  host_weight_make(&h, &s, 900001, "stacked.err", 0, 0, rng);
  uint16_t x[128] = {0};
  float y[32];
  mlxrt_error err = {{0}};
  CHECKF(cu->qmatmul(cu, &h.w, 2, x, 1, y, &err) != 0 && strstr(err.msg, "expert 2 out of range"),
         "expert out of range not reported: '%s'", err.msg);
  int32_t id = 0;
  uint16_t row[128];
  err.msg[0] = 0;
  CHECKF(cu->embed_rows(cu, &h.w, &id, 1, row, &err) != 0 && strstr(err.msg, "stacked"),
         "embed from a stacked weight not refused: '%s'", err.msg);
  host_weight other;
  accel_spec s2 = aff(4, 64, ACCEL_BF16, 16, 128, 0);
  host_weight_make(&other, &s2, 900001, "same.key", 0, 0, rng);
  err.msg[0] = 0;
  CHECKF(cu->qmatmul(cu, &other.w, -1, x, 1, y, &err) != 0 && strstr(err.msg, "cache key"),
         "key reuse with another spec not reported: '%s'", err.msg);
  other.w.key = 900002;
  other.bytes[1] -= 2;
  err.msg[0] = 0;
  CHECKF(cu->qmatmul(cu, &other.w, -1, x, 1, y, &err) != 0 && strstr(err.msg, "expected"),
         "short scales part not reported: '%s'", err.msg);
  other.bytes[1] += 2;
  host_weight_free(&other);
  host_weight_free(&h);
  printf("  error paths checked\n");
}

int main(int argc, char **argv) {
  int bench = 1, quick = 0;
  const char *table = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--no-bench")) bench = 0;
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--table") && i + 1 < argc) table = argv[++i];
    else if (!strcmp(argv[i], "--profile") && i + 1 < argc) return cuda_bench_profile(argv[++i]) ? 1 : 0;
    else {
      fprintf(stderr, "usage: mlxrt-cuda-test [--no-bench] [--quick] [--table FILE.md] [--profile affine4|nvfp4[-down]]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  mlxrt_error err = {{0}};
  /* 1. the plug-in as the binary loads it */
  accel_options o = {"cuda", 0, 1, NULL, NULL};
  accel_backend *plug = accel_create(&o, &err);
  CHECKF(plug != NULL, "accel_create(cuda) failed: %s", err.msg);
  if (!plug) {
    printf("%d checks, %d passed, %d failed\n", g_checks, g_checks - g_failed, g_failed);
    return 1;
  }
  CHECKF(!strcmp(plug->name, "cuda"), "plug-in backend is named '%s'", plug->name);
  accel_destroy(plug);

  o.verbose = 0;
  accel_backend *cu = mlxrt_cuda_backend_create(&o, &err);
  CHECKF(cu != NULL, "mlxrt_cuda_backend_create failed: %s", err.msg);
  if (!cu) return 1;
  const rt_device_info *d = cudab_device(cu);
  printf("device: %s, sm_%d%d, %d SMs, L2 %.0f MB, %.1f GB\n", d->name, d->cc_major, d->cc_minor,
         d->sms, (double)d->l2_bytes / 1e6, (double)d->total_mem / 1e9);
  accel_backend *cpu = accel_cpu_create(0, &err);
  if (!cpu) printf("CPU backend unavailable (%s): comparing against float64 only\n", err.msg);

  uint64_t rng = 0x9E3779B97F4A7C15ULL;
  printf("correctness (tensor-core path where the format allows it):\n");
  correctness(cu, cpu, 0, &rng);
  accel_backend *gen = mlxrt_cuda_backend_create(&o, &err);
  CHECKF(gen != NULL, "second backend: %s", err.msg);
  if (gen) {
    cudab_force_generic(gen, 1);
    printf("correctness (generic kernel forced for every format):\n");
    correctness(gen, cpu, 1, &rng);
    accel_destroy(gen);
  }
  error_paths(cu, &rng);
  printf("worst relative error: %.3e (limit 1e-3)\n", g_worst);
  accel_destroy(cu);
  if (cpu) accel_destroy(cpu);
  printf("%d checks, %d passed, %d failed\n", g_checks, g_checks - g_failed, g_failed);
  int rc = g_failed ? 1 : 0;
  if (bench && cuda_bench(table, quick)) rc = 1;
  return rc;
}
