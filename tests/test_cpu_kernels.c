/* CPU kernels without MLX: the reference doc's test vectors (§7.1 affine packing, §8.3 fp
 * sample vectors), every ISA this CPU has against a float64 reference and against each other
 * on random weights of every format (odd row counts, column tails, unaligned pointers,
 * stacked experts, 1 and 3 threads, n = 1, 2, 5, 70), the thread pool, and the backend
 * table's loading, embedding gather and error messages. */
#include <stdint.h>

#include "accel/cpu/cpu_isa.h"
#include "accel/cpu/cpu_kernels.h"
#include "base/bf16.h"
#include "base/error.h"
#include "test_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}
static float rnd_normal(void) { /* sum of uniforms: good enough for test data */
  float s = 0;
  for (int i = 0; i < 4; i++) s += (float)(rnd() % 100000) / 100000.0f - 0.5f;
  return s;
}

/* ---- §7.1 affine packing vectors ------------------------------------------------------- */
static void test_affine_vectors(void) {
  struct {
    int bits;
    float scale, bias;
    uint32_t words[6];
    int sign; /* inputs: +(j%m) or -(j%m) */
    int mod;
  } v[] = {
      {4, -1, 15, {0x89abcdef, 0x01234567, 0x89abcdef, 0x01234567}, 1, 16},
      {4, 1, -15, {0x89abcdef, 0x01234567, 0x89abcdef, 0x01234567}, -1, 16},
      {3, -1, 7, {0x77053977, 0x39770539, 0x05397705}, 1, 8},
      {5, -1, 31, {0x75be77df, 0x3a56d7c6, 0x35cf8465, 0xc74254b6, 0x00443214}, 1, 32},
      {6, -31.0f / 63.0f, 31, {0x77e7bf7f, 0xbb6fc73d, 0x863967a6, 0x1661a71e, 0xa30e4125, 0x00210620}, 1, 32},
  };
  for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
    cpu_qmat m = {0};
    m.spec = (accel_spec){.mode = ACCEL_MODE_AFFINE, .bits = v[t].bits, .group_size = 32,
                          .scales_dtype = ACCEL_F32, .rows = 1, .cols = 32};
    /* little-endian words, placed at an odd address to exercise unaligned access */
    uint8_t wb[1 + 24], sb[1 + 4], bb[1 + 4];
    memcpy(wb + 1, v[t].words, 24);
    memcpy(sb + 1, &v[t].scale, 4);
    memcpy(bb + 1, &v[t].bias, 4);
    m.w = wb + 1;
    m.scales = sb + 1;
    m.biases = bb + 1;
    uint8_t codes[32];
    float deq[32];
    cpu_row_codes(&m, 0, 0, codes);
    cpu_dequantize_row(&m, 0, 0, deq);
    int bad_codes = 0, bad_deq = 0;
    for (int j = 0; j < 32; j++) {
      int want = v[t].bits == 6 ? (int)rint((31.0 - j) * 63.0 / 31.0)
                                : (v[t].mod - 1) - j % v[t].mod;
      if (codes[j] != want) bad_codes++;
      float in = (float)(v[t].sign * (j % v[t].mod));
      if (fabsf(deq[j] - in) > (v[t].bits == 6 ? 0.25f : 0.0f)) bad_deq++;
    }
    CHECKF(bad_codes == 0, "§7.1 vector %zu (%d-bit): %d codes differ", t, v[t].bits, bad_codes);
    CHECKF(bad_deq == 0, "§7.1 vector %zu (%d-bit): %d values differ", t, v[t].bits, bad_deq);
  }
}

/* ---- §8.3 fp sample vectors -------------------------------------------------------------- */
static const float FP_IN[32] = {0, .5, 1, 1.5, 2, 3, 4, 6, -.5, -1, -1.5, -2, -3, -4, -6, .1,
                                .3, -.2, .05, .7, -.9, .15, .6, -.45, .8, .25, -.65, .4, .35, -.1, .55, -.33};

static void test_fp_vectors(void) {
  /* nvfp4: exact codes of the first 16 (inputs on the E2M1 grid up to the scale's rounding) */
  uint32_t nw[4] = {0x76543210, 0x0fedcba9, 0xc52e61a3, 0xb5944d36};
  uint8_t ns[2] = {0x05, 0x01};
  cpu_qmat m = {.spec = {.mode = ACCEL_MODE_NVFP4, .bits = 4, .group_size = 16, .rows = 1, .cols = 32},
                .w = nw, .scales = ns};
  uint8_t codes[32];
  uint16_t deq[32];
  float sc, bi;
  cpu_row_codes(&m, 0, 0, codes);
  for (int j = 0; j < 8; j++) CHECK(codes[j] == j);
  for (int j = 8; j < 15; j++) CHECK(codes[j] == j + 1);
  cpu_group_params(&m, 0, 0, 0, &sc, &bi);
  CHECK(sc == 0.009765625f && bi == 0.0f);
  cpu_group_params(&m, 0, 0, 1, &sc, &bi);
  CHECK(sc == 0.001953125f);
  cpu_dequantize_row(&m, 0, 0, deq);
  int bad = 0;
  for (int j = 0; j < 32; j++) {
    float s = j < 16 ? 0.009765625f : 0.001953125f, in = 0.01f * FP_IN[j];
    float got = mx_bf16_to_f32(deq[j]);
    if (got != s * MX_FP4_LUT[codes[j]] || fabsf(got - in) > s * 1.0f + 1e-7f) bad++;
  }
  CHECKF(bad == 0, "§8.3 nvfp4: %d values off", bad);

  /* mxfp4: scale 2^-7; values beyond 6·2^-7 clip to ±6·2^-7 */
  uint32_t mw[4] = {0x77654310, 0x0ffedcb9, 0x920a2091, 0x91011a12};
  uint8_t ms = 0x78;
  cpu_qmat m4 = {.spec = {.mode = ACCEL_MODE_MXFP4, .bits = 4, .group_size = 32, .rows = 1, .cols = 32},
                 .w = mw, .scales = &ms};
  cpu_group_params(&m4, 0, 0, 0, &sc, &bi);
  CHECK(sc == 0x1p-7f);
  cpu_dequantize_row(&m4, 0, 0, deq);
  bad = 0;
  for (int j = 0; j < 32; j++) {
    float in = 0.01f * FP_IN[j], got = mx_bf16_to_f32(deq[j]);
    float clipped = fminf(fmaxf(in, -6 * sc), 6 * sc);
    if (fabsf(got - clipped) > sc * 1.0f + 1e-7f) bad++;
  }
  CHECKF(bad == 0, "§8.3 mxfp4: %d values off", bad);

  /* mxfp8: scale 2^-13, first 16 elements given; E4M3 keeps 3 mantissa bits and saturates
   * at 448 (±0.06 = 491.5·2^-13 clips) */
  uint32_t fw[8] = {0x6f6a6200, 0x7e7a7772, 0xf2efeae2, 0x50fefaf7};
  uint8_t fs = 0x72;
  cpu_qmat m8 = {.spec = {.mode = ACCEL_MODE_MXFP8, .bits = 8, .group_size = 32, .rows = 1, .cols = 32},
                 .w = fw, .scales = &fs};
  cpu_dequantize_row(&m8, 0, 0, deq);
  bad = 0;
  for (int j = 0; j < 16; j++) {
    float in = fminf(fmaxf(0.01f * FP_IN[j], -448 * 0x1p-13f), 448 * 0x1p-13f);
    float got = mx_bf16_to_f32(deq[j]);
    if (fabsf(got - in) > fabsf(in) * 0.0625f + 1e-9f) bad++;
  }
  CHECKF(bad == 0, "§8.3 mxfp8: %d values off", bad);

  /* the fast E4M3 decoder equals the plain one for all 256 bytes (0x7F = 480) */
  bad = 0;
  for (int b = 0; b < 256; b++)
    if (cpu_e4m3((uint8_t)b) != mx_e4m3_to_f32((uint8_t)b)) bad++;
  CHECKF(bad == 0, "%d E4M3 codes decode differently", bad);
  CHECK(cpu_e4m3(0x7f) == 480.0f && cpu_e4m3(0xff) == -480.0f);
  CHECK(cpu_e8m0(0) == 0x1p-127f && cpu_e8m0(127) == 1.0f && cpu_e8m0(130) == 8.0f);
}

/* ---- random weights, every ISA ----------------------------------------------------------- */
typedef struct {
  accel_mode mode;
  int bits, gs;
  accel_dtype dt; /* scales dtype (affine) or dense dtype */
} fmt;

static void fill_scale(uint8_t *p, accel_dtype dt, float v) {
  if (dt == ACCEL_F32) memcpy(p, &v, 4);
  else {
    uint16_t h = dt == ACCEL_BF16 ? mx_f32_to_bf16(v) : mx_f32_to_f16(v);
    memcpy(p, &h, 2);
  }
}

/* Builds a random weight in one malloc'd block, every part at an odd (unaligned) address. */
static uint8_t *make_weight(const fmt *f, int64_t experts, int64_t rows, int64_t cols, cpu_qmat *m) {
  memset(m, 0, sizeof *m);
  accel_spec *s = &m->spec;
  s->mode = f->mode;
  s->bits = f->bits;
  s->group_size = f->gs;
  s->experts = experts;
  s->rows = rows;
  s->cols = cols;
  if (f->mode == ACCEL_MODE_DENSE) s->dense_dtype = f->dt;
  else s->scales_dtype = f->mode == ACCEL_MODE_AFFINE ? f->dt : ACCEL_BF16;
  size_t wb = accel_part_bytes(s, ACCEL_PART_WEIGHT), sb = accel_part_bytes(s, ACCEL_PART_SCALES),
         bb = accel_part_bytes(s, ACCEL_PART_BIASES);
  uint8_t *blk = malloc(wb + sb + bb + 8);
  uint8_t *w = blk + 1, *sc = w + wb + 1, *bi = sc + sb + 1;
  int64_t slabs = experts ? experts : 1, n = slabs * rows * cols;
  if (f->mode == ACCEL_MODE_DENSE) {
    for (int64_t i = 0; i < n; i++) fill_scale(w + i * (f->dt == ACCEL_F32 ? 4 : 2), f->dt, rnd_normal());
  } else {
    for (size_t i = 0; i < wb; i++) w[i] = (uint8_t)rnd();
    int64_t groups = slabs * rows * (cols / f->gs);
    for (int64_t g = 0; g < groups; g++) {
      if (f->mode == ACCEL_MODE_AFFINE) {
        size_t es = f->dt == ACCEL_F32 ? 4 : 2;
        fill_scale(sc + g * es, f->dt, 0.01f * rnd_normal());
        fill_scale(bi + g * es, f->dt, 0.1f * rnd_normal());
      } else if (f->mode == ACCEL_MODE_NVFP4) {
        sc[g] = (uint8_t)(rnd() % 0x60 | (rnd() & 0x80)); /* includes negatives, subnormals */
      } else {
        sc[g] = (uint8_t)(110 + rnd() % 30);
      }
    }
  }
  m->w = w;
  m->scales = f->mode == ACCEL_MODE_DENSE ? NULL : sc;
  m->biases = f->mode == ACCEL_MODE_AFFINE ? bi : NULL;
  return blk;
}

/* float64 product from the decoded fields; also Σ|x·w| per output for the tolerance */
static void reference(const cpu_qmat *m, int64_t e, const uint16_t *x, int64_t n, double *ref,
                      double *mag) {
  const accel_spec *s = &m->spec;
  int64_t rows = s->rows, cols = s->cols;
  double *w = malloc((size_t)cols * sizeof *w);
  uint8_t *codes = malloc((size_t)cols);
  for (int64_t r = 0; r < rows; r++) {
    if (s->mode == ACCEL_MODE_DENSE) {
      for (int64_t c = 0; c < cols; c++) w[c] = cpu_dense_value(m, e, r, c);
    } else {
      cpu_row_codes(m, e, r, codes);
      for (int64_t c = 0; c < cols; c++) {
        float sc, bi;
        cpu_group_params(m, e, r, c / s->group_size, &sc, &bi);
        w[c] = (double)sc * cpu_code_value(s, codes[c]) + bi;
      }
    }
    for (int64_t i = 0; i < n; i++) {
      double a = 0, b = 0;
      for (int64_t c = 0; c < cols; c++) {
        double t = (double)mx_bf16_to_f32(x[i * cols + c]) * w[c];
        a += t;
        b += fabs(t);
      }
      ref[i * rows + r] = a;
      mag[i * rows + r] = b;
    }
  }
  free(w);
  free(codes);
}

static void test_random_formats(cpu_pool *pool3) {
  fmt fmts[40];
  int nf = 0;
  for (int b = 2; b <= 8; b++) {
    if (b == 7) continue;
    for (int gs = 32; gs <= 128; gs *= 2) fmts[nf++] = (fmt){ACCEL_MODE_AFFINE, b, gs, ACCEL_BF16};
  }
  fmts[nf++] = (fmt){ACCEL_MODE_AFFINE, 4, 64, ACCEL_F16};
  fmts[nf++] = (fmt){ACCEL_MODE_AFFINE, 4, 64, ACCEL_F32};
  fmts[nf++] = (fmt){ACCEL_MODE_AFFINE, 8, 32, ACCEL_F16};
  fmts[nf++] = (fmt){ACCEL_MODE_AFFINE, 5, 128, ACCEL_F32};
  fmts[nf++] = (fmt){ACCEL_MODE_NVFP4, 4, 16, ACCEL_BF16};
  fmts[nf++] = (fmt){ACCEL_MODE_MXFP4, 4, 32, ACCEL_BF16};
  fmts[nf++] = (fmt){ACCEL_MODE_MXFP8, 8, 32, ACCEL_BF16};
  fmts[nf++] = (fmt){ACCEL_MODE_DENSE, 16, 0, ACCEL_BF16};
  fmts[nf++] = (fmt){ACCEL_MODE_DENSE, 16, 0, ACCEL_F16};
  fmts[nf++] = (fmt){ACCEL_MODE_DENSE, 32, 0, ACCEL_F32};
  const int64_t ns[] = {1, 2, 5, 70};
  double worst = 0;
  for (int fi = 0; fi < nf; fi++) {
    const fmt *f = &fmts[fi];
    int64_t rows = 37 + fi % 5, experts = fi % 4 == 0 ? 3 : 0;
    int64_t cols = f->mode == ACCEL_MODE_DENSE ? 650 + fi : 640; /* 512-column chunk + tail */
    cpu_qmat m;
    uint8_t *blk = make_weight(f, experts, rows, cols, &m);
    int64_t e = experts ? 2 : 0;
    { /* cpu_decode_tile_f32: rows [1, 4) × the second and third group, from the fields */
      int64_t gs = f->mode == ACCEL_MODE_DENSE ? 16 : f->gs, c0 = gs, c1 = 3 * gs;
      float tile[3 * 256];
      uint8_t *codes = malloc((size_t)cols);
      cpu_decode_tile_f32(&m, e, 1, 4, c0, c1, tile, c1 - c0);
      int bad = 0;
      for (int64_t r = 1; r < 4; r++) {
        if (f->mode != ACCEL_MODE_DENSE) cpu_row_codes(&m, e, r, codes);
        for (int64_t c = c0; c < c1; c++) {
          double want, mag; /* float rounding of s·v and of the sum: relative to |s·v| + |b| */
          if (f->mode == ACCEL_MODE_DENSE) {
            want = mag = cpu_dense_value(&m, e, r, c);
          } else {
            float sc, bi;
            cpu_group_params(&m, e, r, c / gs, &sc, &bi);
            want = (double)sc * cpu_code_value(&m.spec, codes[c]) + bi;
            mag = fabs((double)sc * cpu_code_value(&m.spec, codes[c])) + fabs(bi);
          }
          if (fabs(tile[(r - 1) * (c1 - c0) + c - c0] - want) > 1e-6 * fabs(mag) + 1e-30) bad++;
        }
      }
      CHECKF(bad == 0, "%s b%d: cpu_decode_tile_f32 has %d values off", accel_mode_name(f->mode), f->bits, bad);
      free(codes);
    }
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      int64_t n = ns[k];
      uint16_t *x = malloc((size_t)(n * cols) * 2);
      for (int64_t i = 0; i < n * cols; i++) x[i] = mx_f32_to_bf16(rnd_normal());
      double *ref = malloc((size_t)(n * rows) * sizeof *ref), *mag = malloc((size_t)(n * rows) * sizeof *mag);
      reference(&m, e, x, n, ref, mag);
      float *y = malloc((size_t)(n * rows) * sizeof *y);
      for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_supported((cpu_isa)isa)) continue;
        for (int threaded = 0; threaded < 2; threaded++) {
          mlxrt_error err = {{0}};
          for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
          int rc = cpu_qmatmul(threaded ? pool3 : NULL, (cpu_isa)isa, &m, e, x, n, y, &err);
          CHECKF(rc == 0, "%s", err.msg);
          int bad = 0;
          for (int64_t i = 0; i < n * rows; i++) {
            double d = fabs(y[i] - ref[i]);
            if (!(d <= 1e-5 * mag[i] + 1e-30)) bad++;
            if (mag[i] > 0 && d / mag[i] > worst) worst = d / mag[i];
          }
          CHECKF(bad == 0, "%s b%d g%d dt%d isa %s threads %d n %lld: %d of %lld outputs off",
                 accel_mode_name(f->mode), f->bits, f->gs, (int)f->dt, cpu_isa_name((cpu_isa)isa),
                 threaded ? 3 : 1, (long long)n, bad, (long long)(n * rows));
          /* row-exact: every row of y the bits of that row of x alone */
          float *y1 = malloc((size_t)rows * sizeof *y1);
          for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
          rc = cpu_qmatmul_rowwise(threaded ? pool3 : NULL, (cpu_isa)isa, &m, e, x, n, y, &err);
          CHECKF(rc == 0, "%s", err.msg);
          int diff = 0;
          for (int64_t i = 0; i < n; i++) {
            CHECK(cpu_qmatmul(NULL, (cpu_isa)isa, &m, e, x + i * cols, 1, y1, &err) == 0);
            diff += memcmp(y1, y + i * rows, (size_t)rows * sizeof *y1) != 0;
          }
          CHECKF(diff == 0, "%s b%d g%d dt%d isa %s n %lld: cpu_qmatmul_rowwise differs from one row at a time in %d rows",
                 accel_mode_name(f->mode), f->bits, f->gs, (int)f->dt, cpu_isa_name((cpu_isa)isa), (long long)n, diff);
          free(y1);
        }
      }
      free(x);
      free(ref);
      free(mag);
      free(y);
    }
    free(blk);
  }
  printf("random formats: worst |y-ref|/sum|x*w| = %.3g (limit 1e-5)\n", worst);
}

/* ---- pool -------------------------------------------------------------------------------- */
static void count_task(void *ctx, int64_t t, int worker) {
  int *hits = ctx;
  __atomic_fetch_add(&hits[t], 1 + (worker < 0 || worker >= 3) * 100, __ATOMIC_RELAXED);
}

static void test_pool(cpu_pool *p) {
  CHECK(cpu_pool_threads(p) == 3);
  int hits[1000];
  for (int round = 0; round < 50; round++) {
    memset(hits, 0, sizeof hits);
    cpu_pool_run(p, 1000, count_task, hits);
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += hits[i] != 1;
    CHECKF(bad == 0, "round %d: %d tasks not run exactly once", round, bad);
  }
}

/* ---- backend table ----------------------------------------------------------------------- */
typedef struct {
  cpu_qmat m;
  size_t wrong_scales; /* nonzero: report this size for the scales */
  int calls;
} load_ctx;

static const void *loader(void *ctx, accel_part part, size_t *nbytes, mlxrt_error *err) {
  load_ctx *c = ctx;
  c->calls++;
  *nbytes = accel_part_bytes(&c->m.spec, part);
  if (part == ACCEL_PART_WEIGHT) return c->m.w;
  if (part == ACCEL_PART_SCALES) {
    if (c->wrong_scales) *nbytes = c->wrong_scales;
    return c->m.scales;
  }
  if (!c->m.biases) {
    mx_fail(err, "no biases");
    return NULL;
  }
  return c->m.biases;
}

static void test_backend(void) {
  mlxrt_error err = {{0}};
  accel_backend *b = accel_cpu_create(2, &err);
  CHECKF(b != NULL, "%s", err.msg);
  if (!b) return;
  fmt f = {ACCEL_MODE_AFFINE, 4, 64, ACCEL_BF16};
  load_ctx ctx = {0};
  uint8_t *blk = make_weight(&f, 0, 20, 256, &ctx.m);
  accel_weight w = {.key = 7, .spec = ctx.m.spec, .load = loader, .load_ctx = &ctx, .name = "model.embed_tokens"};
  uint16_t x[256], rows[3 * 256], want[256];
  for (int i = 0; i < 256; i++) x[i] = mx_f32_to_bf16(rnd_normal());
  float y[20], y2[20];
  CHECKF(b->qmatmul(b, &w, -1, x, 1, y, &err) == 0, "%s", err.msg);
  CHECK(cpu_qmatmul(NULL, CPU_ISA_SCALAR, &ctx.m, 0, x, 1, y2, &err) == 0);
  int close = 1;
  for (int r = 0; r < 20; r++) close &= fabsf(y[r] - y2[r]) <= 1e-4f * (1 + fabsf(y2[r]));
  CHECK(close);
  CHECK(b->qmatmul(b, &w, 0, x, 1, y, &err) == 0);
  CHECK(ctx.calls == 3); /* parts loaded once, then cached by key */
  int32_t ids[3] = {19, 0, 7};
  CHECKF(b->embed_rows(b, &w, ids, 3, rows, &err) == 0, "%s", err.msg);
  for (int i = 0; i < 3; i++) {
    cpu_dequantize_row(&ctx.m, 0, ids[i], want);
    CHECK(memcmp(rows + i * 256, want, sizeof want) == 0);
  }
  int32_t bad_id = 20;
  CHECK(b->embed_rows(b, &w, &bad_id, 1, rows, &err) == -1);
  CHECK_MSG(err, "model.embed_tokens");
  CHECK_MSG(err, "token id 20 out of range");
  CHECK(b->qmatmul(b, &w, 1, x, 1, y, &err) == -1);
  CHECK_MSG(err, "expert 1 out of range");
  /* a part of the wrong size is named */
  load_ctx c2 = ctx;
  c2.wrong_scales = 10;
  accel_weight w2 = {.key = 8, .spec = ctx.m.spec, .load = loader, .load_ctx = &c2, .name = "layers.0.q_proj"};
  CHECK(b->qmatmul(b, &w2, -1, x, 1, y, &err) == -1);
  CHECK_MSG(err, "layers.0.q_proj: scales has 10 bytes, the spec needs 160");
  /* an impossible spec is named */
  accel_weight w3 = w2;
  w3.key = 9;
  w3.spec.bits = 7;
  CHECK(b->qmatmul(b, &w3, -1, x, 1, y, &err) == -1);
  CHECK_MSG(err, "layers.0.q_proj: affine bits 7");
  w3.spec = ctx.m.spec;
  w3.spec.mode = ACCEL_MODE_NVFP4;
  w3.spec.group_size = 32;
  CHECK(b->qmatmul(b, &w3, -1, x, 1, y, &err) == -1);
  CHECK_MSG(err, "nvfp4 needs bits 4 and group size 16");
  b->destroy(b);
  free(blk);

  setenv("MLXRT_CPU_ISA", "sse9", 1);
  CHECK(accel_cpu_create(1, &err) == NULL);
  CHECK_MSG(err, "MLXRT_CPU_ISA=sse9");
  setenv("MLXRT_CPU_ISA", "scalar", 1);
  b = accel_cpu_create(1, &err);
  CHECK(b != NULL);
  if (b) b->destroy(b);
  unsetenv("MLXRT_CPU_ISA");
}

int main(void) {
  printf("ISAs here:");
  for (int i = CPU_ISA_SCALAR; i < CPU_ISA_COUNT; i++)
    if (cpu_isa_supported((cpu_isa)i)) printf(" %s", cpu_isa_name((cpu_isa)i));
  printf("\n");
  test_affine_vectors();
  test_fp_vectors();
  mlxrt_error err;
  cpu_pool *pool = cpu_pool_create(3, &err);
  CHECK(pool != NULL);
  test_pool(pool);
  test_random_formats(pool);
  cpu_pool_destroy(pool);
  test_backend();
  TEST_END();
}
