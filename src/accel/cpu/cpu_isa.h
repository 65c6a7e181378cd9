/* Internal: the per-ISA kernel table behind cpu_qmatmul. Each ISA file (matvec.c portable,
 * matvec_avx2.c, matvec_avx512.c) fills one; a NULL entry or a *_supports returning 0 means
 * "use the portable kernel" for that spec. */
#ifndef MLXRT_ACCEL_CPU_ISA_H
#define MLXRT_ACCEL_CPU_ISA_H

#include <stdint.h>
#include <string.h>

#include "accel/cpu/cpu_kernels.h"
#include "base/bf16.h"

/* One mat-vec's operands, for the selected expert's slab. */
typedef struct cpu_mv {
  const accel_spec *s;
  const uint8_t *w, *sc, *bi; /* packed rows, scale rows, bias rows (unaligned) */
  size_t wrow, srow;          /* bytes per row of w and of sc/bi */
  const float *x;             /* x as prep_x laid it out */
  const float *xg;            /* Σx per group (affine) */
  float *y;
  /* matvec_multi: vector i of x, xg and y starts ldx, ldxg, ldy floats after vector i - 1 */
  int64_t ldx, ldxg, ldy;
} cpu_mv;

typedef struct cpu_isa_ops {
  const char *name;
  const struct cpu_isa_ops *fallback; /* where unsupported specs go (NULL: portable) */
  int (*mv_supports)(const accel_spec *s);
  /* Lays x (cols floats, natural order) out the way matvec reads it (cols floats). */
  void (*prep_x)(const accel_spec *s, const float *x, float *xp);
  /* y[r] for r in [r0, r1). */
  void (*matvec)(const cpu_mv *a, int64_t r0, int64_t r1);
  /* Optional (NULL: matvec once per vector): matvec for nx vectors of x at once, each row of
   * each y bit for bit what matvec gives for that vector alone (the same operations in the
   * same order per vector), the weights decoded once for all of them. */
  void (*matvec_multi)(const cpu_mv *a, int nx, int64_t r0, int64_t r1);
  int (*tile_supports)(const accel_spec *s);
  /* Like cpu_decode_tile_f32 (rows relative to the slab). */
  void (*decode_tile)(const cpu_mv *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                      float *out, int64_t ldo);
  /* Mat-mat on transposed activations: yt[r·ldyt + i] += Σ_k w[r·ldw + k]·xt[k·npad + i]
   * for r < nr, i < npad (npad: a multiple of gemm_lanes; the padding lanes of xt are 0).
   * Vectorised across rows of x, w broadcast: no reductions and no weight transposes. */
  void (*gemm)(const float *w, int64_t ldw, int64_t nr, const float *xt, int64_t npad, int64_t k,
               float *yt, int64_t ldyt);
  int gemm_lanes;
} cpu_isa_ops;

extern const cpu_isa_ops cpu_ops_scalar;
extern const cpu_isa_ops cpu_ops_avx2;
extern const cpu_isa_ops cpu_ops_avx512;
extern const cpu_isa_ops cpu_ops_avx512bf16;

/* ---- small shared decoders (inline, used by every ISA file) ------------------------------ */
static inline float cpu_ld_f32(const uint8_t *p) {
  float f;
  memcpy(&f, p, 4);
  return f;
}
static inline uint16_t cpu_ld_u16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return h;
}
/* E4M3 as MLX decodes it: (b & 0x7f) << 7 is an f16 whose value ×256 is the magnitude,
 * subnormals included; 0x7F gives 480. A table avoids float-denormal arithmetic. */
extern const float cpu_e4m3_table[256];
static inline float cpu_e4m3(uint8_t b) { return cpu_e4m3_table[b]; }
static inline float cpu_e8m0(uint8_t s) {
  uint32_t u = s ? (uint32_t)s << 23 : 0x00400000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Scale and bias of group g of slab row r (bias 0 for fp modes). */
static inline void cpu_mv_params(const cpu_mv *a, int64_t r, int64_t g, float *sc, float *bi) {
  const accel_spec *s = a->s;
  if (s->mode == ACCEL_MODE_AFFINE) {
    const uint8_t *ps = a->sc + (size_t)r * a->srow, *pb = a->bi + (size_t)r * a->srow;
    if (s->scales_dtype == ACCEL_F32) {
      *sc = cpu_ld_f32(ps + 4 * g);
      *bi = cpu_ld_f32(pb + 4 * g);
    } else if (s->scales_dtype == ACCEL_BF16) {
      *sc = mx_bf16_to_f32(cpu_ld_u16(ps + 2 * g));
      *bi = mx_bf16_to_f32(cpu_ld_u16(pb + 2 * g));
    } else {
      *sc = mx_f16_to_f32(cpu_ld_u16(ps + 2 * g));
      *bi = mx_f16_to_f32(cpu_ld_u16(pb + 2 * g));
    }
    return;
  }
  uint8_t b = a->sc[(size_t)r * a->srow + (size_t)g];
  *sc = s->mode == ACCEL_MODE_NVFP4 ? cpu_e4m3(b) : cpu_e8m0(b);
  *bi = 0.0f;
}

#endif
