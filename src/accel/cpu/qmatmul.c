/* cpu_qmatmul: ISA choice and the split of one product over the thread pool.
 * n == 1 streams each weight row once through a fused decode-and-dot kernel (bandwidth
 * bound); n > 1 decodes a tile of weight rows × a chunk of columns to float once and reuses
 * it for every row of x (compute bound), so prompt batches do not re-stream the weights. */
#include <stdlib.h>

#include "accel/cpu/cpu_isa.h"
#include "base/error.h"

enum {
  TILE_ROWS = 64, /* weight rows per mat-mat task */
  TILE_COLS = 512 /* columns decoded at a time: a multiple of every group size */
};

int cpu_isa_supported(cpu_isa isa) {
  switch (isa) {
  case CPU_ISA_SCALAR: return 1;
#if defined(__x86_64__) || defined(__i386__)
  case CPU_ISA_AVX2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  case CPU_ISA_AVX512:
    return cpu_isa_supported(CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
#endif
  default: return 0;
  }
}

cpu_isa cpu_isa_best(void) {
  if (cpu_isa_supported(CPU_ISA_AVX512)) return CPU_ISA_AVX512;
  if (cpu_isa_supported(CPU_ISA_AVX2)) return CPU_ISA_AVX2;
  return CPU_ISA_SCALAR;
}

const char *cpu_isa_name(cpu_isa isa) {
  switch (isa) {
  case CPU_ISA_SCALAR: return "scalar";
  case CPU_ISA_AVX2: return "avx2";
  case CPU_ISA_AVX512: return "avx512";
  }
  return "?";
}

int cpu_isa_from_env(cpu_isa *out, mlxrt_error *err) {
  const char *e = getenv("MLXRT_CPU_ISA");
  if (!e || !*e || !strcmp(e, "auto")) {
    *out = cpu_isa_best();
    return 0;
  }
  for (int i = CPU_ISA_SCALAR; i <= CPU_ISA_AVX512; i++) {
    if (strcmp(e, cpu_isa_name((cpu_isa)i)) != 0) continue;
    if (!cpu_isa_supported((cpu_isa)i))
      return mx_fail(err, "MLXRT_CPU_ISA=%s: this CPU does not support it", e);
    *out = (cpu_isa)i;
    return 0;
  }
  return mx_fail(err, "MLXRT_CPU_ISA=%s: expected scalar, avx2, avx512 or auto", e);
}

static const cpu_isa_ops *ops_for(cpu_isa isa) {
  return isa == CPU_ISA_AVX512 ? &cpu_ops_avx512
         : isa == CPU_ISA_AVX2 ? &cpu_ops_avx2
                               : &cpu_ops_scalar;
}

typedef struct {
  cpu_mv mv;
  const cpu_isa_ops *mv_ops, *tile_ops, *gemm_ops;
  int64_t chunk; /* rows per task */
  /* mat-mat */
  const float *x; /* n × cols floats */
  int64_t n;
  float *scratch; /* threads × TILE_ROWS × TILE_COLS */
} job;

static void mv_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  job *j = ctx;
  int64_t r0 = t * j->chunk, r1 = r0 + j->chunk;
  if (r1 > j->mv.s->rows) r1 = j->mv.s->rows;
  j->mv_ops->matvec(&j->mv, r0, r1);
}

static void mm_task(void *ctx, int64_t t, int worker) {
  job *j = ctx;
  const accel_spec *s = j->mv.s;
  int64_t r0 = t * j->chunk, r1 = r0 + j->chunk, rows = s->rows, cols = s->cols;
  if (r1 > rows) r1 = rows;
  float *tile = j->scratch + (size_t)worker * TILE_ROWS * TILE_COLS;
  float *y = j->mv.y + r0;
  for (int64_t i = 0; i < j->n; i++)
    for (int64_t r = 0; r < r1 - r0; r++) y[i * rows + r] = 0.0f;
  for (int64_t c0 = 0; c0 < cols; c0 += TILE_COLS) {
    int64_t c1 = c0 + TILE_COLS < cols ? c0 + TILE_COLS : cols;
    j->tile_ops->decode_tile(&j->mv, r0, r1, c0, c1, tile, TILE_COLS);
    j->gemm_ops->gemm(tile, TILE_COLS, r1 - r0, j->x + c0, cols, j->n, c1 - c0, y, rows);
  }
}

int cpu_qmatmul(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, int64_t expert,
                const uint16_t *x, int64_t n, float *y, mlxrt_error *err) {
  const accel_spec *s = &m->spec;
  if (cpu_spec_check(s, "cpu_qmatmul", err)) return -1;
  if (!cpu_isa_supported(isa)) return mx_fail(err, "cpu_qmatmul: ISA %s not supported here", cpu_isa_name(isa));
  int64_t slabs = s->experts > 0 ? s->experts : 1;
  if (expert < 0 || expert >= slabs)
    return mx_fail(err, "cpu_qmatmul: expert %lld out of range [0, %lld)", (long long)expert,
                   (long long)slabs);
  if (n <= 0) return 0;
  int64_t rows = s->rows, cols = s->cols;
  const cpu_isa_ops *ops = ops_for(isa);
  job j = {0};
  j.mv.s = s;
  j.mv.wrow = cpu_row_bytes(s);
  j.mv.srow = cpu_scale_row_bytes(s);
  j.mv.w = (const uint8_t *)m->w + (size_t)expert * (size_t)rows * j.mv.wrow;
  j.mv.sc = m->scales ? (const uint8_t *)m->scales + (size_t)expert * (size_t)rows * j.mv.srow : NULL;
  j.mv.bi = m->biases ? (const uint8_t *)m->biases + (size_t)expert * (size_t)rows * j.mv.srow : NULL;
  int threads = cpu_pool_threads(pool);
  int64_t groups = s->mode == ACCEL_MODE_DENSE ? 0 : cols / s->group_size;

  /* x to float once; the n = 1 path also needs Σx per group and the ISA's layout */
  float *xf = mx_malloc(((size_t)n * (size_t)cols + (size_t)cols + (size_t)groups) * sizeof(float), err);
  if (!xf) return -1;
  for (int64_t i = 0; i < n * cols; i++) xf[i] = mx_bf16_to_f32(x[i]);

  if (n == 1) {
    float *xp = xf + cols, *xg = xp + cols;
    for (int64_t g = 0; g < groups; g++) {
      float acc = 0;
      for (int64_t k = g * s->group_size; k < (g + 1) * s->group_size; k++) acc += xf[k];
      xg[g] = acc;
    }
    j.mv_ops = ops->mv_supports && ops->mv_supports(s) ? ops : &cpu_ops_scalar;
    j.mv_ops->prep_x(s, xf, xp);
    j.mv.x = xp;
    j.mv.xg = xg;
    j.mv.y = y;
    /* many small tasks: the pool balances them when a core is busy with other work */
    int64_t chunk = rows / ((int64_t)threads * 16);
    j.chunk = chunk < 8 ? 8 : chunk > 256 ? 256 : chunk;
    cpu_pool_run(pool, (rows + j.chunk - 1) / j.chunk, mv_task, &j);
    free(xf);
    return 0;
  }

  /* the ISA's gemm runs even where its tile decoder does not cover the format */
  j.tile_ops = ops->tile_supports && ops->tile_supports(s) ? ops : &cpu_ops_scalar;
  j.gemm_ops = ops->gemm ? ops : &cpu_ops_scalar;
  j.x = xf;
  j.n = n;
  j.mv.y = y;
  j.chunk = (rows + threads - 1) / threads;
  if (j.chunk > TILE_ROWS) j.chunk = TILE_ROWS;
  j.scratch = mx_malloc((size_t)threads * TILE_ROWS * TILE_COLS * sizeof(float), err);
  if (!j.scratch) {
    free(xf);
    return -1;
  }
  cpu_pool_run(pool, (rows + j.chunk - 1) / j.chunk, mm_task, &j);
  free(j.scratch);
  free(xf);
  return 0;
}
