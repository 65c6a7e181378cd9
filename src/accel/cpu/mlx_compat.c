#include "accel/cpu/mlx_compat.h"

#include <stdlib.h>
#include <string.h>

#include "accel/cpu/mlx_compat_kernels.h"
#include "base/bf16.h"
#include "base/error.h"

#define R mx_round_bf16
#define L CPU_COMPAT_LANES

/* A weight decoded once for these kernels (all experts): blocks of 16 rows, k-major. */
struct cpu_compat_pack {
  int64_t blocks; /* per expert: ceil(rows / 16); the padding rows are zero */
  uint16_t *w;    /* [experts][blocks][cols][16] bf16 */
  float *s;       /* fp modes: [experts][blocks][cols/gs][16] group scales; NULL otherwise */
};

int cpu_mlx_compat_supports(const accel_spec *s) {
  return (s->mode == ACCEL_MODE_DENSE && s->dense_dtype == ACCEL_BF16) ||
         (s->mode == ACCEL_MODE_AFFINE && s->scales_dtype == ACCEL_BF16) || s->mode == ACCEL_MODE_NVFP4 ||
         s->mode == ACCEL_MODE_MXFP4 || s->mode == ACCEL_MODE_MXFP8;
}

int cpu_mlx_compat_choose(const char *numerics, int *on, mlxrt_error *err) {
  const int from_env = !numerics || !*numerics;
  const char *e = from_env ? getenv("MLXRT_NUMERICS") : numerics;
  *on = 0;
  if (!e || !*e || !strcmp(e, "float32")) return 0;
  if (!strcmp(e, "mlx-cpu")) {
    *on = 1;
    return 0;
  }
  return mx_fail(err, "%s%s: expected float32 (default) or mlx-cpu", from_env ? "MLXRT_NUMERICS=" : "numerics ", e);
}

/* ---- portable kernels (the definition the SIMD ones reproduce lane for lane) -------------- */
void cpu_compat_dense_scalar(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out) {
  for (int b = 0; b < nblk; b++)
    for (int l = 0; l < L; l++) {
      const uint16_t *wl = w + (int64_t)b * cols * L + l;
      float acc = 0.0f;
      for (int64_t k = 0; k < cols; k++) acc += x[k] * mx_bf16_to_f32(wl[k * L]);
      out[b * L + l] = acc;
    }
}

void cpu_compat_affine_scalar(const uint16_t *w, int nblk, int64_t cols, const float *x, float *out) {
  for (int b = 0; b < nblk; b++)
    for (int l = 0; l < L; l++) {
      const uint16_t *wl = w + (int64_t)b * cols * L + l;
      float acc = 0.0f;
      for (int64_t k = 0; k < cols; k++) acc = R(acc + R(x[k] * mx_bf16_to_f32(wl[k * L])));
      out[b * L + l] = acc;
    }
}

void cpu_compat_fp_scalar(const uint16_t *w, const float *s, int nblk, int64_t cols, int64_t gs,
                          const float *x, float *out) {
  int64_t ng = cols / gs;
  for (int b = 0; b < nblk; b++)
    for (int l = 0; l < L; l++) {
      const uint16_t *wl = w + (int64_t)b * cols * L + l;
      const float *sl = s + (int64_t)b * ng * L + l;
      float acc = 0.0f;
      for (int64_t g = 0; g < ng; g++) {
        float gsum = 0.0f;
        for (int64_t k = g * gs; k < (g + 1) * gs; k++) gsum = R(gsum + R(x[k] * mx_bf16_to_f32(wl[k * L])));
        acc = R(acc + R(sl[g * L] * gsum));
      }
      out[b * L + l] = acc;
    }
}

/* ---- decoding a weight into the pack -------------------------------------------------------- */
typedef struct {
  const cpu_qmat *m;
  cpu_compat_pack *p;
} pack_job;

static void pack_block(void *ctx, int64_t t, int worker) {
  (void)worker;
  pack_job *j = ctx;
  const accel_spec *s = &j->m->spec;
  int64_t cols = s->cols, rows = s->rows, gs = s->mode == ACCEL_MODE_DENSE ? cols : s->group_size, ng = cols / gs;
  int64_t expert = t / j->p->blocks, blk = t % j->p->blocks;
  uint16_t *w = j->p->w + t * cols * L;
  float *sc = j->p->s ? j->p->s + t * ng * L : NULL;
  uint8_t *codes = malloc((size_t)cols);
  if (!codes) abort(); /* a few KB; the pool task cannot report */
  for (int l = 0; l < L; l++) {
    int64_t r = blk * L + l;
    if (r >= rows) continue; /* padding stays zero */
    if (s->mode == ACCEL_MODE_DENSE) {
      for (int64_t k = 0; k < cols; k++) w[k * L + l] = mx_f32_to_bf16(cpu_dense_value(j->m, expert, r, k));
      continue;
    }
    cpu_row_codes(j->m, expert, r, codes);
    for (int64_t g = 0; g < ng; g++) {
      float scale, bias;
      cpu_group_params(j->m, expert, r, g, &scale, &bias);
      if (s->mode == ACCEL_MODE_AFFINE) {
        for (int64_t k = g * gs; k < (g + 1) * gs; k++)
          w[k * L + l] = mx_f32_to_bf16(R(R(scale * (float)codes[k]) + bias));
      } else {
        sc[g * L + l] = scale;
        for (int64_t k = g * gs; k < (g + 1) * gs; k++) w[k * L + l] = mx_f32_to_bf16(cpu_code_value(s, codes[k]));
      }
    }
  }
  free(codes);
}

static cpu_compat_pack *pack_build(cpu_pool *pool, const cpu_qmat *m, mlxrt_error *err) {
  const accel_spec *s = &m->spec;
  int64_t experts = s->experts > 0 ? s->experts : 1;
  cpu_compat_pack *p = mx_calloc(1, sizeof *p, err);
  if (!p) return NULL;
  p->blocks = (s->rows + L - 1) / L;
  size_t nb = (size_t)(experts * p->blocks);
  p->w = mx_calloc(nb * (size_t)s->cols * L, sizeof *p->w, err);
  int fp = s->mode != ACCEL_MODE_AFFINE && s->mode != ACCEL_MODE_DENSE;
  if (p->w && fp) p->s = mx_calloc(nb * (size_t)(s->cols / s->group_size) * L, sizeof *p->s, err);
  if (!p->w || (fp && !p->s)) {
    cpu_compat_pack_free(p);
    return NULL;
  }
  pack_job j = {m, p};
  cpu_pool_run(pool, (int64_t)nb, pack_block, &j);
  return p;
}

void cpu_compat_pack_free(cpu_compat_pack *p) {
  if (!p) return;
  free(p->w);
  free(p->s);
  free(p);
}

/* ---- the product ----------------------------------------------------------------------------- */
typedef struct {
  const accel_spec *spec;
  const cpu_compat_pack *p;
  int64_t expert, n;
  const float *x; /* [n, cols] */
  float *y;       /* [n, rows] */
  cpu_compat_affine_fn affine; /* affine, or dense when the spec is dense */
  cpu_compat_fp_fn fp;
} compat_job;

/* Task t: blocks [4t, 4t + 4) of the expert against every token. */
static void compat_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const compat_job *j = ctx;
  const accel_spec *s = j->spec;
  int64_t cols = s->cols, rows = s->rows, gs = s->mode == ACCEL_MODE_DENSE ? cols : s->group_size;
  int64_t b0 = t * CPU_COMPAT_MAX_BLOCKS;
  int nblk = (int)(j->p->blocks - b0 < CPU_COMPAT_MAX_BLOCKS ? j->p->blocks - b0 : CPU_COMPAT_MAX_BLOCKS);
  int64_t gb = j->expert * j->p->blocks + b0;
  const uint16_t *w = j->p->w + gb * cols * L;
  const float *sc = j->p->s ? j->p->s + gb * (cols / gs) * L : NULL;
  float out[CPU_COMPAT_MAX_BLOCKS * L];
  int64_t r0 = b0 * L, nr = (int64_t)nblk * L;
  if (r0 + nr > rows) nr = rows - r0;
  for (int64_t i = 0; i < j->n; i++) {
    if (sc) j->fp(w, sc, nblk, cols, gs, j->x + i * cols, out);
    else j->affine(w, nblk, cols, j->x + i * cols, out);
    memcpy(j->y + i * rows + r0, out, (size_t)nr * sizeof(float));
  }
}

int cpu_qmatmul_mlx_compat(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, cpu_compat_pack **pack,
                           int64_t expert, const uint16_t *x, int64_t n, float *y, mlxrt_error *err) {
  const accel_spec *s = &m->spec;
  if (!cpu_mlx_compat_supports(s)) return mx_fail(err, "mlx-cpu numerics: %s not emulated", accel_mode_name(s->mode));
  if (!*pack && !(*pack = pack_build(pool, m, err))) return -1;
  float *xf = mx_malloc((size_t)(n * s->cols) * sizeof(float), err);
  if (!xf) return -1;
  for (int64_t i = 0; i < n * s->cols; i++) xf[i] = mx_bf16_to_f32(x[i]);
  compat_job j = {s, *pack, expert, n, xf, y, cpu_compat_affine_scalar, cpu_compat_fp_scalar};
  int dense = s->mode == ACCEL_MODE_DENSE;
  if (isa >= CPU_ISA_AVX512) {
    j.affine = dense ? cpu_compat_dense_avx512 : cpu_compat_affine_avx512;
    j.fp = cpu_compat_fp_avx512;
  } else if (isa == CPU_ISA_AVX2) {
    j.affine = dense ? cpu_compat_dense_avx2 : cpu_compat_affine_avx2;
    j.fp = cpu_compat_fp_avx2;
  } else if (dense) {
    j.affine = cpu_compat_dense_scalar;
  }
  cpu_pool_run(pool, ((*pack)->blocks + CPU_COMPAT_MAX_BLOCKS - 1) / CPU_COMPAT_MAX_BLOCKS, compat_task, &j);
  free(xf);
  return 0;
}
