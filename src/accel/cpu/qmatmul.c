/* cpu_qmatmul: ISA choice and the split of one product over the thread pool.
 * n < MV_MAX_N streams each weight row through a fused decode-and-dot kernel once per row of
 * x (bandwidth bound); larger n decodes a tile of weight rows × a chunk of columns to float
 * once and reuses it for every row of x (compute bound), so prompt batches do not re-stream
 * the weights. */
#include <stdlib.h>

#include "accel/cpu/cpu_isa.h"
#include "base/error.h"

enum {
  TILE_ROWS = 64, /* weight rows per mat-mat task */
  TILE_COLS = 512, /* columns decoded at a time: a multiple of every group size */
  /* below this many rows of x, streaming the weights once per row beats decoding tiles */
  MV_MAX_N = 4
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
  case CPU_ISA_AVX512BF16:
    return cpu_isa_supported(CPU_ISA_AVX512) && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512vbmi");
#endif
  default: return 0;
  }
}

cpu_isa cpu_isa_best(void) {
  if (cpu_isa_supported(CPU_ISA_AVX512BF16)) return CPU_ISA_AVX512BF16;
  if (cpu_isa_supported(CPU_ISA_AVX512)) return CPU_ISA_AVX512;
  if (cpu_isa_supported(CPU_ISA_AVX2)) return CPU_ISA_AVX2;
  return CPU_ISA_SCALAR;
}

const char *cpu_isa_name(cpu_isa isa) {
  switch (isa) {
  case CPU_ISA_SCALAR: return "scalar";
  case CPU_ISA_AVX2: return "avx2";
  case CPU_ISA_AVX512: return "avx512";
  case CPU_ISA_AVX512BF16: return "avx512bf16";
  case CPU_ISA_COUNT: break;
  }
  return "?";
}

int cpu_isa_from_env(cpu_isa *out, mlxrt_error *err) {
  const char *e = getenv("MLXRT_CPU_ISA");
  if (!e || !*e || !strcmp(e, "auto")) {
    *out = cpu_isa_best();
    return 0;
  }
  for (int i = CPU_ISA_SCALAR; i < CPU_ISA_COUNT; i++) {
    if (strcmp(e, cpu_isa_name((cpu_isa)i)) != 0) continue;
    if (!cpu_isa_supported((cpu_isa)i))
      return mx_fail(err, "MLXRT_CPU_ISA=%s: this CPU does not support it", e);
    *out = (cpu_isa)i;
    return 0;
  }
  return mx_fail(err, "MLXRT_CPU_ISA=%s: expected scalar, avx2, avx512, avx512bf16 or auto", e);
}

static const cpu_isa_ops *ops_for(cpu_isa isa) {
  return isa == CPU_ISA_AVX512BF16 ? &cpu_ops_avx512bf16
         : isa == CPU_ISA_AVX512   ? &cpu_ops_avx512
         : isa == CPU_ISA_AVX2     ? &cpu_ops_avx2
                                   : &cpu_ops_scalar;
}

/* The first table along the fallback chain that has the kernel for this spec (the portable
 * table has them all). */
static const cpu_isa_ops *next(const cpu_isa_ops *o) { return o->fallback ? o->fallback : &cpu_ops_scalar; }
static const cpu_isa_ops *pick_mv(const cpu_isa_ops *o, const accel_spec *s) {
  while (!(o->mv_supports && o->mv_supports(s))) o = next(o);
  return o;
}
static const cpu_isa_ops *pick_tile(const cpu_isa_ops *o, const accel_spec *s) {
  while (!(o->tile_supports && o->tile_supports(s))) o = next(o);
  return o;
}
static const cpu_isa_ops *pick_gemm(const cpu_isa_ops *o) {
  while (!o->gemm) o = next(o);
  return o;
}

typedef struct {
  cpu_mv mv;
  const cpu_isa_ops *mv_ops, *tile_ops, *gemm_ops;
  int64_t chunk; /* rows per task */
  int nx;        /* rowwise: vectors of x */
  /* mat-mat */
  const float *xt; /* x transposed: cols × npad floats, padding lanes 0 */
  int64_t n, npad;
  float *scratch; /* per worker: a decoded tile and the task's transposed outputs */
  size_t scratch_per_worker;
} job;

static void mv_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  job *j = ctx;
  int64_t r0 = t * j->chunk, r1 = r0 + j->chunk;
  if (r1 > j->mv.s->rows) r1 = j->mv.s->rows;
  j->mv_ops->matvec(&j->mv, r0, r1);
}

/* Row-exact: every vector through the mat-vec kernel; without a multi-vector kernel, blocks
 * of RW_BLOCK weight rows go through it once per vector while they sit in the L1 cache. */
enum { RW_BLOCK = 8, RW_MULTI = 8 /* vectors per multi-vector call */ };
static void rw_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const job *j = ctx;
  int64_t r0 = t * j->chunk, r1 = r0 + j->chunk;
  if (r1 > j->mv.s->rows) r1 = j->mv.s->rows;
  if (j->mv_ops->matvec_multi) {
    for (int i = 0; i < j->nx; i += RW_MULTI) {
      cpu_mv a = j->mv;
      a.x += (size_t)i * (size_t)a.ldx;
      a.xg += (size_t)i * (size_t)a.ldxg;
      a.y += (size_t)i * (size_t)a.ldy;
      j->mv_ops->matvec_multi(&a, j->nx - i < RW_MULTI ? j->nx - i : RW_MULTI, r0, r1);
    }
    return;
  }
  for (int64_t b0 = r0; b0 < r1; b0 += RW_BLOCK) {
    int64_t b1 = b0 + RW_BLOCK < r1 ? b0 + RW_BLOCK : r1;
    for (int i = 0; i < j->nx; i++) {
      cpu_mv a = j->mv;
      a.x += (size_t)i * (size_t)a.ldx;
      a.xg += (size_t)i * (size_t)a.ldxg;
      a.y += (size_t)i * (size_t)a.ldy;
      j->mv_ops->matvec(&a, b0, b1);
    }
  }
}

static void mm_task(void *ctx, int64_t t, int worker) {
  job *j = ctx;
  const accel_spec *s = j->mv.s;
  int64_t r0 = t * j->chunk, r1 = r0 + j->chunk, rows = s->rows, cols = s->cols, npad = j->npad;
  if (r1 > rows) r1 = rows;
  float *tile = j->scratch + (size_t)worker * j->scratch_per_worker;
  float *yt = tile + TILE_ROWS * TILE_COLS; /* (r1 - r0) × npad */
  memset(yt, 0, (size_t)(r1 - r0) * (size_t)npad * sizeof *yt);
  for (int64_t c0 = 0; c0 < cols; c0 += TILE_COLS) {
    int64_t c1 = c0 + TILE_COLS < cols ? c0 + TILE_COLS : cols;
    j->tile_ops->decode_tile(&j->mv, r0, r1, c0, c1, tile, TILE_COLS);
    j->gemm_ops->gemm(tile, TILE_COLS, r1 - r0, j->xt + c0 * npad, npad, c1 - c0, yt, npad);
  }
  for (int64_t i = 0; i < j->n; i++)
    for (int64_t r = r0; r < r1; r++) j->mv.y[i * rows + r] = yt[(r - r0) * npad + i];
}

/* Row i of x (bf16) to float, Σx per group (affine bias term) into xg, and the ISA's layout
 * of x into xp; xf is cols floats of scratch. */
static void prep_row(const accel_spec *s, const cpu_isa_ops *mv_ops, const uint16_t *x, int64_t groups,
                     float *xf, float *xp, float *xg) {
  const int64_t cols = s->cols;
  for (int64_t k = 0; k < cols; k++) xf[k] = mx_bf16_to_f32(x[k]);
  for (int64_t g = 0; g < groups; g++) {
    float acc = 0;
    for (int64_t k = g * s->group_size; k < (g + 1) * s->group_size; k++) acc += xf[k];
    xg[g] = acc;
  }
  mv_ops->prep_x(s, xf, xp);
}

/* The operands of expert's slab; 0, or -1 with err set for a bad call. */
static int setup(const cpu_qmat *m, cpu_isa isa, int64_t expert, job *j, mlxrt_error *err) {
  const accel_spec *s = &m->spec;
  if (accel_spec_check(s, "cpu_qmatmul", err)) return -1;
  if (!cpu_isa_supported(isa)) return mx_fail(err, "cpu_qmatmul: ISA %s not supported here", cpu_isa_name(isa));
  int64_t slabs = s->experts > 0 ? s->experts : 1;
  if (expert < 0 || expert >= slabs)
    return mx_fail(err, "cpu_qmatmul: expert %lld out of range [0, %lld)", (long long)expert,
                   (long long)slabs);
  const int64_t rows = s->rows;
  j->mv.s = s;
  j->mv.wrow = cpu_row_bytes(s);
  j->mv.srow = cpu_scale_row_bytes(s);
  j->mv.w = (const uint8_t *)m->w + (size_t)expert * (size_t)rows * j->mv.wrow;
  j->mv.sc = m->scales ? (const uint8_t *)m->scales + (size_t)expert * (size_t)rows * j->mv.srow : NULL;
  j->mv.bi = m->biases ? (const uint8_t *)m->biases + (size_t)expert * (size_t)rows * j->mv.srow : NULL;
  return 0;
}

int cpu_qmatmul_rowwise(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, int64_t expert,
                        const uint16_t *x, int64_t n, float *y, mlxrt_error *err) {
  job j = {0};
  if (setup(m, isa, expert, &j, err)) return -1;
  if (n <= 1) return n == 1 ? cpu_qmatmul(pool, isa, m, expert, x, n, y, err) : 0;
  const accel_spec *s = &m->spec;
  const int64_t rows = s->rows, cols = s->cols;
  const int64_t groups = s->mode == ACCEL_MODE_DENSE ? 0 : cols / s->group_size;
  /* the kernel cpu_qmatmul's mat-vec path picks, so that the bits are its bits */
  j.mv_ops = pick_mv(ops_for(isa), s);
  float *xf = mx_malloc(((size_t)cols * (size_t)(n + 1) + (size_t)(groups * n)) * sizeof(float), err);
  if (!xf) return -1;
  float *xp = xf + cols, *xg = xp + (size_t)cols * (size_t)n;
  for (int64_t i = 0; i < n; i++)
    prep_row(s, j.mv_ops, x + i * cols, groups, xf, xp + i * cols, xg + i * groups);
  j.mv.x = xp;
  j.mv.xg = xg;
  j.mv.y = y;
  j.mv.ldx = cols;
  j.mv.ldxg = groups;
  j.mv.ldy = rows;
  j.nx = (int)n;
  int threads = cpu_pool_threads(pool);
  int64_t chunk = rows / ((int64_t)threads * 16);
  j.chunk = chunk < RW_BLOCK ? RW_BLOCK : chunk > 128 ? 128 : chunk / RW_BLOCK * RW_BLOCK;
  cpu_pool_run(pool, (rows + j.chunk - 1) / j.chunk, rw_task, &j);
  free(xf);
  return 0;
}

int cpu_qmatmul(cpu_pool *pool, cpu_isa isa, const cpu_qmat *m, int64_t expert,
                const uint16_t *x, int64_t n, float *y, mlxrt_error *err) {
  job j = {0};
  if (setup(m, isa, expert, &j, err)) return -1;
  if (n <= 0) return 0;
  const accel_spec *s = &m->spec;
  int64_t rows = s->rows, cols = s->cols;
  const cpu_isa_ops *ops = ops_for(isa);
  int threads = cpu_pool_threads(pool);
  int64_t groups = s->mode == ACCEL_MODE_DENSE ? 0 : cols / s->group_size;

  if (n < MV_MAX_N) { /* one streamed mat-vec per row of x */
    /* x to float, Σx per group (affine bias term) and the ISA's layout of x */
    float *xf = mx_malloc(((size_t)2 * (size_t)cols + (size_t)groups) * sizeof(float), err);
    if (!xf) return -1;
    float *xp = xf + cols, *xg = xp + cols;
    j.mv_ops = pick_mv(ops, s);
    int64_t chunk = rows / ((int64_t)threads * 16);
    j.chunk = chunk < 8 ? 8 : chunk > 256 ? 256 : chunk; /* many small tasks balance a busy core */
    for (int64_t i = 0; i < n; i++) {
      prep_row(s, j.mv_ops, x + i * cols, groups, xf, xp, xg);
      j.mv.x = xp;
      j.mv.xg = xg;
      j.mv.y = y + i * rows;
      cpu_pool_run(pool, (rows + j.chunk - 1) / j.chunk, mv_task, &j);
    }
    free(xf);
    return 0;
  }

  /* the ISA's gemm runs even where its tile decoder does not cover the format */
  j.tile_ops = pick_tile(ops, s);
  j.gemm_ops = pick_gemm(ops);
  int64_t lanes = j.gemm_ops->gemm_lanes;
  j.n = n;
  j.npad = (n + lanes - 1) / lanes * lanes;
  j.mv.y = y;
  j.chunk = (rows + threads - 1) / threads;
  if (j.chunk > TILE_ROWS) j.chunk = TILE_ROWS;
  j.scratch_per_worker = (size_t)TILE_ROWS * (TILE_COLS + (size_t)j.npad);
  float *xt = mx_malloc((size_t)cols * (size_t)j.npad * sizeof(float), err);
  j.scratch = xt ? mx_malloc((size_t)threads * j.scratch_per_worker * sizeof(float), err) : NULL;
  if (!j.scratch) {
    free(xt);
    return -1;
  }
  /* x transposed to float straight from bf16, in blocks of 64 columns (contiguous reads) */
  for (int64_t k0 = 0; k0 < cols; k0 += 64) {
    int64_t k1 = k0 + 64 < cols ? k0 + 64 : cols;
    for (int64_t i = 0; i < j.npad; i++)
      for (int64_t k = k0; k < k1; k++) xt[k * j.npad + i] = i < n ? mx_bf16_to_f32(x[i * cols + k]) : 0.0f;
  }
  j.xt = xt;
  cpu_pool_run(pool, (rows + j.chunk - 1) / j.chunk, mm_task, &j);
  free(j.scratch);
  free(xt);
  return 0;
}
