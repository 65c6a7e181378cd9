/* CPU kernels against golden data made by MLX (scripts/make_quant_fixtures.py):
 *  - cpu_dequantize_row equals mx.dequantize bit for bit, every mode / bits / group / dtype;
 *  - cpu_qmatmul (every ISA this CPU has, n = 1, 3 and 8) agrees with a float64 reference built
 *    from the decoded fields: |y − ref| ≤ 1e-5 · Σ_k |x_k·w_k| (per output);
 *  - and with mx.quantized_matmul within bf16 tolerance: MLX's CPU kernel accumulates in bf16
 *    (every product and partial sum rounded to 8 bits), so we allow
 *    |y − y_mlx| ≤ 2^-6 · Σ|x·w| for bf16/f16 scales and fp modes, 1e-5 · Σ|x·w| for f32
 *    scales and dense (MLX accumulates those in float); the largest ratio is printed;
 *  - cpu_qmatmul_mlx_compat (mlx-cpu numerics) equals mx.quantized_matmul bit for bit, every
 *    format it emulates (bf16-scale affine, nvfp4, mxfp4, mxfp8), n = 1, 3, 8, every ISA.
 * The fixture files are read with a tiny safetensors reader (cJSON for the header). */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "accel/cpu/cpu_kernels.h"
#include "accel/cpu/mlx_compat.h"
#include "base/bf16.h"
#include "base/error.h"
#include "test_util.h"

typedef struct {
  char *buf;
  size_t len;
  cJSON *hdr;
  const char *data;
} st_file;

typedef struct {
  const void *p;
  size_t nbytes;
  char dtype[8];
  int ndim;
  int64_t shape[4];
} st_tensor;

static int st_open(st_file *f, const char *path) {
  mlxrt_error err;
  f->buf = mx_read_file(path, &f->len, &err);
  if (!f->buf || f->len < 8) {
    fprintf(stderr, "cannot read %s: %s\n", path, f->buf ? "too short" : err.msg);
    return -1;
  }
  uint64_t hl;
  memcpy(&hl, f->buf, 8);
  if (hl > f->len - 8) return -1;
  f->hdr = cJSON_ParseWithLength(f->buf + 8, (size_t)hl);
  f->data = f->buf + 8 + hl;
  return f->hdr ? 0 : -1;
}

static void st_close(st_file *f) {
  cJSON_Delete(f->hdr);
  free(f->buf);
}

static int st_get(const st_file *f, const char *name, st_tensor *t) {
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(f->hdr, name);
  if (!e) return -1;
  const cJSON *dt = cJSON_GetObjectItem(e, "dtype"), *sh = cJSON_GetObjectItem(e, "shape"),
              *off = cJSON_GetObjectItem(e, "data_offsets");
  snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
  t->ndim = cJSON_GetArraySize(sh);
  for (int i = 0; i < t->ndim && i < 4; i++) t->shape[i] = (int64_t)cJSON_GetArrayItem(sh, i)->valuedouble;
  size_t a = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, b = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
  t->p = f->data + a;
  t->nbytes = b - a;
  return 0;
}

static accel_dtype dtype_of(const char *s) {
  return !strcmp(s, "BF16") ? ACCEL_BF16 : !strcmp(s, "F16") ? ACCEL_F16 : ACCEL_F32;
}

static float ld_f32(const void *p, int64_t i) {
  float f;
  memcpy(&f, (const char *)p + 4 * i, 4);
  return f;
}

static double max_ratio_mlx_bf16, max_ratio_mlx_f32, max_ratio_ref;

/* One case: dequantization bit-exactness, then products against float64 and MLX. */
static int mlx_compat_checked;

static void check_case(const st_file *f, const char *name) {
  char key[128];
  st_tensor w, sc, bi, deq;
  snprintf(key, sizeof key, "%s.weight", name);
  if (st_get(f, key, &w)) {
    CHECKF(0, "fixture lacks %s", key);
    return;
  }
  cpu_qmat m = {0};
  accel_spec *s = &m.spec;
  int rank3 = w.ndim == 3;
  s->experts = rank3 ? w.shape[0] : 0;
  s->rows = w.shape[w.ndim - 2];
  m.w = w.p;
  int bits = 0, gs = 0;
  if (!strncmp(name, "dense", 5)) {
    s->mode = ACCEL_MODE_DENSE;
    s->dense_dtype = dtype_of(w.dtype);
    s->cols = w.shape[w.ndim - 1];
  } else {
    if (!strcmp(name, "nvfp4") || !strcmp(name, "moe_nvfp4")) s->mode = ACCEL_MODE_NVFP4, bits = 4, gs = 16;
    else if (!strcmp(name, "mxfp4")) s->mode = ACCEL_MODE_MXFP4, bits = 4, gs = 32;
    else if (!strcmp(name, "mxfp8")) s->mode = ACCEL_MODE_MXFP8, bits = 8, gs = 32;
    else {
      s->mode = ACCEL_MODE_AFFINE;
      const char *a = strstr(name, "affine_b");
      CHECK(a && sscanf(a, "affine_b%d_g%d", &bits, &gs) == 2);
    }
    s->bits = bits;
    s->group_size = gs;
    s->cols = w.shape[w.ndim - 1] * 32 / bits;
    snprintf(key, sizeof key, "%s.scales", name);
    CHECK(st_get(f, key, &sc) == 0);
    m.scales = sc.p;
    if (s->mode == ACCEL_MODE_AFFINE) {
      snprintf(key, sizeof key, "%s.biases", name);
      CHECK(st_get(f, key, &bi) == 0);
      m.biases = bi.p;
      s->scales_dtype = dtype_of(sc.dtype);
    }
  }
  mlxrt_error err = {{0}};
  CHECKF(accel_spec_check(s, name, &err) == 0, "%s", err.msg);
  int64_t slabs = rank3 ? s->experts : 1, rows = s->rows, cols = s->cols;
  accel_dtype ddt = cpu_dequant_dtype(s);
  size_t es = ddt == ACCEL_F32 ? 4 : 2;

  /* dequantize: bit for bit (dense has no deq tensor) */
  if (s->mode != ACCEL_MODE_DENSE) {
    snprintf(key, sizeof key, "%s.deq", name);
    CHECK(st_get(f, key, &deq) == 0);
    CHECKF(deq.nbytes == (size_t)(slabs * rows * cols) * es, "%s: deq is %zu bytes", name, deq.nbytes);
    uint8_t *row = malloc((size_t)cols * 4);
    uint16_t *rb = malloc((size_t)cols * 2);
    long mism = 0, mism_bf16 = 0;
    for (int64_t e = 0; e < slabs; e++)
      for (int64_t r = 0; r < rows; r++) {
        const uint8_t *want = (const uint8_t *)deq.p + ((size_t)(e * rows + r) * (size_t)cols) * es;
        cpu_dequantize_row(&m, e, r, row);
        cpu_dequantize_row_bf16(&m, e, r, rb);
        for (int64_t c = 0; c < cols; c++) {
          if (memcmp(row + c * es, want + c * es, es)) mism++;
          float v = ddt == ACCEL_F32 ? ld_f32(want, c)
                    : ddt == ACCEL_BF16 ? mx_bf16_to_f32((uint16_t)(want[2 * c] | want[2 * c + 1] << 8))
                                        : mx_f16_to_f32((uint16_t)(want[2 * c] | want[2 * c + 1] << 8));
          if (rb[c] != mx_f32_to_bf16(v)) mism_bf16++;
        }
      }
    CHECKF(mism == 0, "%s: %ld of %lld dequantized values differ from mx.dequantize", name, mism,
           (long long)(slabs * rows * cols));
    CHECKF(mism_bf16 == 0, "%s: %ld bf16 rows values differ", name, mism_bf16);
    free(row);
    free(rb);
  }

  /* products */
  double tol_mlx = (s->mode == ACCEL_MODE_DENSE ||
                    (s->mode == ACCEL_MODE_AFFINE && s->scales_dtype == ACCEL_F32))
                       ? 1e-5 : 1.0 / 64;
  double *wrow = malloc((size_t)cols * sizeof(double));
  uint8_t *codes = malloc((size_t)cols);
  static const int NS[] = {1, 3, 8}; /* 8 runs the tiled mat-mat path */
  for (int ni = 0; ni < 3; ni++) {
    const int n = NS[ni];
    st_tensor xt, yt;
    snprintf(key, sizeof key, "%s.x%d", name, n);
    CHECK(st_get(f, key, &xt) == 0);
    snprintf(key, sizeof key, "%s.y%d", name, n);
    CHECK(st_get(f, key, &yt) == 0);
    uint16_t *x = malloc((size_t)(n * cols) * 2); /* copy: fixture data is unaligned */
    memcpy(x, xt.p, (size_t)(n * cols) * 2);
    float *y = malloc((size_t)(n * rows) * sizeof(float));
    for (int64_t e = 0; e < slabs; e++) {
      for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_supported((cpu_isa)isa)) continue;
        CHECKF(cpu_qmatmul(NULL, (cpu_isa)isa, &m, e, x, n, y, &err) == 0, "%s", err.msg);
        for (int64_t r = 0; r < rows; r++) {
          if (s->mode == ACCEL_MODE_DENSE) {
            for (int64_t c = 0; c < cols; c++) wrow[c] = cpu_dense_value(&m, e, r, c);
          } else {
            cpu_row_codes(&m, e, r, codes);
            for (int64_t c = 0; c < cols; c++) {
              float scl, bia;
              cpu_group_params(&m, e, r, c / gs, &scl, &bia);
              wrow[c] = (double)scl * cpu_code_value(s, codes[c]) + bia;
            }
          }
          for (int i = 0; i < n; i++) {
            double ref = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
              double t = (double)mx_bf16_to_f32(x[i * cols + c]) * wrow[c];
              ref += t;
              mag += fabs(t);
            }
            double got = y[i * rows + r], d = fabs(got - ref);
            double ratio = mag > 0 ? d / mag : d;
            if (ratio > max_ratio_ref) max_ratio_ref = ratio;
            CHECKF(d <= 1e-5 * mag + 1e-30, "%s isa %s n=%d e=%lld r=%lld: y %.9g ref %.9g (|x·w| %.3g)",
                   name, cpu_isa_name((cpu_isa)isa), n, (long long)e, (long long)r, got, ref, mag);
            double ym = ld_f32(yt.p, (e * n + i) * rows + r), dm = fabs(got - ym);
            double rm = mag > 0 ? dm / mag : dm;
            double *mx_ = tol_mlx < 1e-3 ? &max_ratio_mlx_f32 : &max_ratio_mlx_bf16;
            if (rm > *mx_) *mx_ = rm;
            CHECKF(dm <= tol_mlx * mag + 1e-30, "%s isa %s n=%d r=%lld: y %.9g mlx %.9g (|x·w| %.3g)",
                   name, cpu_isa_name((cpu_isa)isa), n, (long long)r, got, ym, mag);
          }
        }
      }
    }
    /* mlx-cpu numerics: MLX's own bf16 accumulation, bit for bit, on every ISA */
    if (cpu_mlx_compat_supports(s)) {
      for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_supported((cpu_isa)isa)) continue;
        cpu_compat_pack *pack = NULL;
        long differ = 0;
        for (int64_t e = 0; e < slabs; e++) {
          CHECKF(cpu_qmatmul_mlx_compat(NULL, (cpu_isa)isa, &m, &pack, e, x, n, y, &err) == 0, "%s", err.msg);
          for (int64_t i = 0; i < n * rows; i++) {
            float ym = (float)ld_f32(yt.p, e * n * rows + i);
            if (memcmp(&ym, &y[i], 4)) differ++;
          }
        }
        cpu_compat_pack_free(pack);
        mlx_compat_checked++;
        CHECKF(differ == 0, "%s n=%d isa %s: mlx-cpu emulation differs from mx.quantized_matmul in %ld of %lld outputs",
               name, n, cpu_isa_name((cpu_isa)isa), differ, (long long)(slabs * n * rows));
      }
    }
    free(x);
    free(y);
  }
  free(wrow);
  free(codes);
}

static void check_file(const char *file) {
  char path[512];
  snprintf(path, sizeof path, "tests/fixtures/quant/%s.safetensors", file);
  st_file f;
  if (st_open(&f, path)) {
    CHECKF(0, "cannot open %s", path);
    return;
  }
  int cases = 0;
  for (const cJSON *e = f.hdr->child; e; e = e->next) {
    const char *dot = strstr(e->string, ".weight");
    if (!dot || dot[7]) continue;
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(dot - e->string), e->string);
    check_case(&f, name);
    cases++;
  }
  printf("%s: %d cases\n", file, cases);
  CHECK(cases > 0);
  st_close(&f);
}

int main(void) {
  check_file("affine");
  check_file("fp");
  check_file("dense");
  check_file("experts");
  printf("max |y-ref|/sum|x*w|: float64 ref %.3g; MLX bf16-accumulating cases %.3g (tol 2^-6); "
         "MLX float cases %.3g (tol 1e-5)\n",
         max_ratio_ref, max_ratio_mlx_bf16, max_ratio_mlx_f32);
  printf("mlx-cpu emulation (mlx_compat.c) bit for bit against mx.quantized_matmul: %d case x n x ISA runs\n",
         mlx_compat_checked);
  CHECK(mlx_compat_checked > 0);
  TEST_END();
}
