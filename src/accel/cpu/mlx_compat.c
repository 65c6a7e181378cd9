#include "accel/cpu/mlx_compat.h"

#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"

#define R mx_round_bf16

int cpu_mlx_compat_supports(const accel_spec *s) {
  return (s->mode == ACCEL_MODE_AFFINE && s->scales_dtype == ACCEL_BF16) || s->mode == ACCEL_MODE_NVFP4 ||
         s->mode == ACCEL_MODE_MXFP4 || s->mode == ACCEL_MODE_MXFP8;
}

int cpu_mlx_compat_from_env(int *on, mlxrt_error *err) {
  const char *e = getenv("MLXRT_NUMERICS");
  *on = 0;
  if (!e || !*e || !strcmp(e, "float32")) return 0;
  if (!strcmp(e, "mlx-cpu")) {
    *on = 1;
    return 0;
  }
  return mx_fail(err, "MLXRT_NUMERICS=%s: expected float32 (default) or mlx-cpu", e);
}

typedef struct {
  const cpu_qmat *m;
  int64_t expert, n;
  const float *x; /* [n, cols] */
  float *y;       /* [n, rows] */
  int64_t chunk;
} compat_job;

static void compat_rows(void *ctx, int64_t t, int worker) {
  (void)worker;
  compat_job *j = ctx;
  const accel_spec *s = &j->m->spec;
  int64_t cols = s->cols, rows = s->rows, gs = s->group_size;
  int64_t r0 = t * j->chunk, r1 = r0 + j->chunk < rows ? r0 + j->chunk : rows;
  uint8_t *codes = malloc((size_t)cols);
  float *w = malloc((size_t)cols * sizeof(float));
  float *scale = malloc((size_t)(cols / gs) * sizeof(float));
  if (!codes || !w || !scale) abort(); /* a few KB; the pool task cannot report */
  for (int64_t r = r0; r < r1; r++) {
    cpu_row_codes(j->m, j->expert, r, codes);
    if (s->mode == ACCEL_MODE_AFFINE) {
      for (int64_t g = 0; g < cols / gs; g++) {
        float sc, bi;
        cpu_group_params(j->m, j->expert, r, g, &sc, &bi);
        for (int64_t k = g * gs; k < (g + 1) * gs; k++) w[k] = R(R(sc * (float)codes[k]) + bi);
      }
      for (int64_t i = 0; i < j->n; i++) {
        const float *x = j->x + i * cols;
        float acc = 0.0f;
        for (int64_t k = 0; k < cols; k++) acc = R(acc + R(x[k] * w[k]));
        j->y[i * rows + r] = acc;
      }
    } else {
      for (int64_t g = 0; g < cols / gs; g++) {
        float bi;
        cpu_group_params(j->m, j->expert, r, g, &scale[g], &bi);
      }
      for (int64_t k = 0; k < cols; k++) w[k] = cpu_code_value(s, codes[k]);
      for (int64_t i = 0; i < j->n; i++) {
        const float *x = j->x + i * cols;
        float acc = 0.0f;
        for (int64_t g = 0; g < cols / gs; g++) {
          float gsum = 0.0f;
          for (int64_t k = g * gs; k < (g + 1) * gs; k++) gsum = R(gsum + R(x[k] * w[k]));
          acc = R(acc + R(scale[g] * gsum));
        }
        j->y[i * rows + r] = acc;
      }
    }
  }
  free(codes);
  free(w);
  free(scale);
}

int cpu_qmatmul_mlx_compat(cpu_pool *pool, const cpu_qmat *m, int64_t expert, const uint16_t *x,
                           int64_t n, float *y, mlxrt_error *err) {
  const accel_spec *s = &m->spec;
  if (!cpu_mlx_compat_supports(s)) return mx_fail(err, "mlx-cpu numerics: %s not emulated", accel_mode_name(s->mode));
  float *xf = mx_malloc((size_t)(n * s->cols) * sizeof(float), err);
  if (!xf) return -1;
  for (int64_t i = 0; i < n * s->cols; i++) xf[i] = mx_bf16_to_f32(x[i]);
  compat_job j = {m, expert, n, xf, y, 16};
  cpu_pool_run(pool, (s->rows + j.chunk - 1) / j.chunk, compat_rows, &j);
  free(xf);
  return 0;
}
