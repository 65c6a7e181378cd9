/* Device pieces of the tensor-core mat-vec shared by its kernels (qmv_tc.cu: one launch per
 * product; qmv_chain.cu: a resident grid streaming a chain of products): the fragment decode
 * of each format, the mma, a stage's shape, the nvfp4 scale codes, and the mbarrier / bulk-copy
 * primitives (sm_90) — each with its host emulation (tests/gpu/emu) for the checks without a
 * GPU. */
#ifndef MLXRT_QMV_TC_CUH
#define MLXRT_QMV_TC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ck_device.cuh"

/* Streaming 16-byte load that does not displace x from L1. */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
#ifdef CK_EMULATION
  return *p;
#else
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#endif
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#ifdef CK_EMULATION
  if (BF16)
    emu_mma_bf16(c, a, b0, b1);
  else
    emu_mma_f16(c, a, b0, b1);
#else
  if (BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* fp16 constants as pair bits */
#define H2_1024 0x64006400u

/* (a & b) | c in one LOP3 (C would give two: LOP3 takes one immediate). */
__device__ __forceinline__ uint32_t lop3_ao(uint32_t a, uint32_t b, uint32_t c) {
#ifdef CK_EMULATION
  return (a & b) | c;
#else
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#endif
}

/* Decodes the A fragment of mma m of a unit from the unit's words (4 per 16-byte chunk).
 * Affine codes come out as fp16 1024 + q (exact) — for 4-bit, rows g+8 (registers 1, 3) as
 * 1024 + 16·q, which saves the shifts; the offsets and the 16 are taken out once per group
 * through the scale and bias (s/16, b - 64·s; b - 1024·s), a few FMAs per group instead of
 * an fp16 subtraction per register. */
template <int FMT>
__device__ __forceinline__ void decode_a(const uint32_t *wd, int m, uint32_t (&a)[4]) {
  if (FMT == CK_AFF4) { /* register r = nibbles (r, r+4) */
    uint32_t w = wd[m], w8 = w >> 8;
    a[0] = lop3_ao(w, 0x000F000Fu, H2_1024);
    a[1] = lop3_ao(w, 0x00F000F0u, H2_1024);
    a[2] = lop3_ao(w8, 0x000F000Fu, H2_1024);
    a[3] = lop3_ao(w8, 0x00F000F0u, H2_1024);
  } else if (FMT == CK_AFF8) { /* bytes (0,1) and (2,3) of each word under 0x64 */
    uint32_t w0 = wd[2 * m], w1 = wd[2 * m + 1];
    a[0] = __byte_perm(w0, H2_1024, 0x5150);
    a[1] = __byte_perm(w0, H2_1024, 0x5352);
    a[2] = __byte_perm(w1, H2_1024, 0x5150);
    a[3] = __byte_perm(w1, H2_1024, 0x5352);
  } else if (FMT == CK_NVFP4 || FMT == CK_MXFP4) { /* fp16 (sign, e1e0m << 9) = v · 2^-14 */
    /* registers 2 and 3 move magnitude and sign by different shifts: one multiply by
     * 2^6 + 2^2 (2^9 + 2^1) does both, the shifted copies never overlapping (no carries) */
    uint32_t w = wd[m];
    a[0] = w & 0x8E008E00u;
    a[1] = (w << 3) & 0x8E008E00u;
    a[2] = ((w & 0x20382038u) * 68u) & 0x8E008E00u;
    a[3] = ((w & 0x40074007u) * 514u) & 0x8E008E00u;
  } else if (FMT == CK_MXFP8) { /* E4M3 byte → fp16 ((b&0x7f) << 7 | sign << 15) = v · 2^-8 */
    uint32_t w0 = wd[2 * m], w1 = wd[2 * m + 1];
    uint32_t u[4] = {__byte_perm(w0, 0, 0x4140), __byte_perm(w0, 0, 0x4342),
                     __byte_perm(w1, 0, 0x4140), __byte_perm(w1, 0, 0x4342)};
#pragma unroll
    for (int r = 0; r < 4; r++) a[r] = ((u[r] & 0x007F007Fu) << 7) | ((u[r] & 0x00800080u) << 8);
  } else { /* dense 16-bit: the words are the registers */
#pragma unroll
    for (int r = 0; r < 4; r++) a[r] = wd[4 * m + r];
  }
}

/* The column selectors of lane group g: sel[j] = fp16 (1, 1) for column j = g, else (0, 0).
 * Made opaque (volatile) so the compiler keeps them in registers instead of recomputing them. */
__device__ __forceinline__ void col_sel_init(int g, uint32_t (&sel)[8]) {
#pragma unroll
  for (int j = 0; j < 8; j++) {
#ifdef CK_EMULATION
    sel[j] = g == j ? 0x3C003C00u : 0u;
#else
    asm volatile("mov.b32 %0, %1;" : "=r"(sel[j]) : "r"(g == j ? 0x3C003C00u : 0u));
#endif
  }
}
/* x pair times a selector: x, or zeros (of x's signs, which add nothing to the mma's float
 * sums). A multiply on the FMA pipe rather than an AND on the integer pipe, which the decode
 * keeps busy (16 of its ~64 integer instructions per pair of units). Exact for
 * every finite x. */
__device__ __forceinline__ uint32_t col_sel(uint32_t x, uint32_t sel) {
#ifdef CK_EMULATION
  const uint32_t keep = (sel & 0xffffu ? 0xffffu : 0x8000u) | (sel >> 16 ? 0xffff0000u : 0x80000000u);
  return x & keep;
#else
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(sel));
  return d;
#endif
}

/* The four mmas of one unit in the one-row kernels' column-per-group form: mma m's B operand is
 * the lane's x pair kept only for the lane whose column is the mma's (col_sel by sel[m]), so
 * each column of d collects one scale group's sums. */
template <int FMT>
__device__ __forceinline__ void col_unit_mmas(float (&d)[4], const uint32_t (&wd)[4], uint2 xv, const uint32_t *sel) {
#pragma unroll
  for (int m = 0; m < 4; m++) {
    uint32_t a[4];
    decode_a<FMT>(wd, m, a);
    mma16816<false>(d, a, col_sel(xv.x, sel[m]), col_sel(xv.y, sel[m]));
  }
}

/* fp16 pair (h, h) of nvfp4 scale q of word w times 2^7: the scale code c (bits 20..26 of the
 * field, ck_nv_code: s·2^10 = 2^(1 + c/8)·(1 + (c mod 8)/8)) placed as fp16 exponent and
 * mantissa, the exponent biased so that the pair holds s·2^7. */
__device__ __forceinline__ uint32_t nv_scale_h2(uint32_t w, int q) {
  const uint32_t h = ((ck_nv_field(w, q) >> 13) & 0x3F80u) + 0x3400u;
  return h * 0x10001u;
}

/* fp16 pair product (exact where the batched products use it: qmm_rows.cu's comment). */
__device__ __forceinline__ uint32_t h2_mul(uint32_t a, uint32_t b) {
#ifdef CK_EMULATION
  const float a0 = ck_f16_to_f32((uint16_t)a), a1 = ck_f16_to_f32((uint16_t)(a >> 16));
  const float b0 = ck_f16_to_f32((uint16_t)b), b1 = ck_f16_to_f32((uint16_t)(b >> 16));
  return (uint32_t)ck_f32_to_f16(a0 * b0) | (uint32_t)ck_f32_to_f16(a1 * b1) << 16;
#else
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#endif
}

/* The k splits' hand-over (the batched products): once every thread of the block has written its
 * partial sums, true in the block of the group that finishes last (*cnt counts the group's
 * blocks; that block resets it), its reads after the other blocks' writes. last: a __shared__ int. */
__device__ __forceinline__ bool split_group_last(unsigned *cnt, int ks, int &last) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(cnt, 1u) == (unsigned)ks - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  return true;
}

/* Compile-time shape of one format's work. A stage is SU units: about 8 KB of codes plus
 * their scales, copied global → shared by the bulk-copy engine; the kernel's NST stages are in
 * flight. */
template <int FMT, int GS>
struct Shape {
  static constexpr int KC = ck_chunk_k(FMT), UK = ck_unit_k_c(FMT, GS);
  static constexpr int CPU = UK / KC, MPU = UK / 16;
  static constexpr bool AFF = FMT == CK_AFF4 || FMT == CK_AFF8;
  static constexpr bool MX = FMT == CK_MXFP4 || FMT == CK_MXFP8;
  static constexpr bool DENSE = FMT == CK_DBF16 || FMT == CK_DF16;
  static constexpr bool POST = AFF || MX || FMT == CK_NVFP4; /* scales applied to float sums */
  static constexpr int GPU = AFF ? UK / GS : 1; /* affine groups per unit */
  static constexpr int MPG = AFF ? GS / 16 : 2; /* mmas per group (affine, mx) */
  static constexpr int SU = 16 / CPU;           /* units per stage */
  static constexpr int UNIT_W = CPU * 512;      /* code bytes per unit */
  static constexpr int UNIT_S = AFF ? GPU * 64 : DENSE ? 0 : 8 * ck_fp_scale_bytes(FMT);
  static constexpr int STAGE = SU * (UNIT_W + UNIT_S);
  /* with x staged beside the weights (the one-row kernels' XS): row 0 of x for the stage's
   * units, then (affine) the group sums of its groups, all 8 batch rows as xs lays them out */
  static constexpr int STAGE_XB = SU * UK * 2, STAGE_XSB = AFF ? SU * GPU * 32 : 0;
  static constexpr int STAGE_XS = STAGE + STAGE_XB + STAGE_XSB;
};

/* An affine group's scale and bias for the lane's rows g and g+8 (sv: (s, b) pairs, bf16 or
 * fp16), with the decode's offsets folded in: codes entered as 1024 + q, and rows g+8 of
 * 4-bit as 1024 + 16·q, so y += s·Σ + b·Σx with these s and b. */
template <int FMT, bool SB_F16>
__device__ __forceinline__ void affine_fold(uint2 sv, float &s0, float &b0, float &s8, float &b8) {
  if (SB_F16) {
    s0 = ck_f16_to_f32((uint16_t)sv.x);
    b0 = ck_f16_to_f32((uint16_t)(sv.x >> 16));
    s8 = ck_f16_to_f32((uint16_t)sv.y);
    b8 = ck_f16_to_f32((uint16_t)(sv.y >> 16));
  } else {
    s0 = __uint_as_float(sv.x << 16);
    b0 = __uint_as_float(sv.x & 0xffff0000u);
    s8 = __uint_as_float(sv.y << 16);
    b8 = __uint_as_float(sv.y & 0xffff0000u);
  }
  b0 = fmaf(-1024.f, s0, b0);
  if (FMT == CK_AFF4) {
    b8 = fmaf(-64.f, s8, b8);
    s8 *= 0.0625f;
  } else {
    b8 = fmaf(-1024.f, s8, b8);
  }
}

/* s·2^10 of nvfp4 scale q of word w (ck_nv_scale) in one LOP3: e holds 0x40000000. */
__device__ __forceinline__ float nv_scale(uint32_t w, int q, uint32_t e) {
#ifdef CK_EMULATION
  return __uint_as_float((ck_nv_field(w, q) & 0x07f00000u) | e);
#else
  uint32_t d, f = ck_nv_field(w, q);
  asm("lop3.b32 %0, %1, 0x07f00000, %2, 0xEA;" : "=r"(d) : "r"(f), "r"(e));
  return __uint_as_float(d);
#endif
}

template <bool B> struct ck_bool { static constexpr bool value = B; };
template <int N> struct ck_int { static constexpr int value = N; };

/* v, made opaque (a volatile move) so the compiler keeps a loop invariant in a register
 * instead of re-deriving it in the loop */
__device__ __forceinline__ uint32_t ck_opaque(uint32_t v) {
#ifdef CK_EMULATION
  return v;
#else
  uint32_t d;
  asm volatile("mov.b32 %0, %1;" : "=r"(d) : "r"(v));
  return d;
#endif
}

/* ---- mbarrier + bulk copy (sm_90) ---- */
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
#ifdef CK_EMULATION
  return (uint32_t)(uintptr_t)p;
#else
  return (uint32_t)__cvta_generic_to_shared(p);
#endif
}
__device__ __forceinline__ void mbar_init(uint64_t *m, uint32_t count) {
#ifdef CK_EMULATION
  emu_mbar_init(m, count);
#else
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(m)), "r"(count) : "memory");
#endif
}
/* mbarrier inits visible to the async proxy (the bulk copies) */
__device__ __forceinline__ void mbar_init_fence() {
#ifndef CK_EMULATION
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
/* this block's generic-proxy accesses of shared memory ordered before its next bulk copies */
__device__ __forceinline__ void fence_proxy_async_smem() {
#ifndef CK_EMULATION
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect(uint64_t *m, uint32_t bytes) {
#ifdef CK_EMULATION
  emu_mbar_arrive(m, bytes);
#else
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(m)), "r"(bytes)
               : "memory");
#endif
}
/* one arrival (release: this thread's accesses of the guarded memory come before it) */
__device__ __forceinline__ void mbar_arrive(uint64_t *m) {
#ifdef CK_EMULATION
  emu_mbar_arrive(m, 0);
#else
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(m)) : "memory");
#endif
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *m) {
#ifdef CK_EMULATION
  emu_bulk_copy(dst, src, bytes, m);
#else
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(m))
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t *m, uint32_t phase) {
#ifdef CK_EMULATION
  emu_mbar_wait(m, phase);
#else
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_addr(m)), "r"(phase)
                 : "memory");
#endif
}

/* x fragments of one unit (L1-resident: evict_last; the weights never enter L1). */
__device__ __forceinline__ uint4 ld_keep(const uint4 *p) {
#ifdef CK_EMULATION
  return *p;
#else
  uint4 v;
  asm("ld.global.nc.L1::evict_last.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#endif
}
__device__ __forceinline__ uint2 ld_keep2(const uint2 *p) {
#ifdef CK_EMULATION
  return *p;
#else
  uint2 v;
  asm("ld.global.nc.L1::evict_last.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
#endif
}

/* ---- one unit of a 16-row tile in the batch-row form (x row g in column g of the mma) ---- */
/* A unit's operands, loaded before any of them is used (two units are in flight per warp). */
template <int FMT, int GS>
struct UnitRegs {
  typedef Shape<FMT, GS> S;
  uint4 w[S::CPU];
  uint4 x[S::MPU / 2];
  uint2 sc[S::GPU];
  float2 xs[S::AFF ? S::GPU : 1];
};

/* The unit's mmas and its scales' epilogue: acc the raw sums (dense formats end there), tot
 * the scaled sums (formats with scales). */
template <int FMT, int GS, bool SB_F16>
__device__ __forceinline__ void compute_unit(const UnitRegs<FMT, GS> &r, float (&acc)[4],
                                             float (&tot)[4]) {
  typedef Shape<FMT, GS> S;
  constexpr int MX_OFF = FMT == CK_MXFP4 ? 14 : 8; /* undo the decode's 2^-14 / 2^-8 */
  const uint32_t *wd = reinterpret_cast<const uint32_t *>(&r.w[0]);
#pragma unroll
  for (int m = 0; m < S::MPU; m++) {
    const uint4 &xv = r.x[m >> 1];
    uint32_t b0 = (m & 1) ? xv.z : xv.x, b1 = (m & 1) ? xv.w : xv.y;
    uint32_t a[4];
    decode_a<FMT>(wd, m, a);
    if (FMT == CK_NVFP4) { /* one group per mma: its sums times the rows' scales, in float */
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      mma16816<false>(d, a, b0, b1);
      const uint32_t w = (m >> 1) ? r.sc[0].y : r.sc[0].x;
      const float s0 = ck_nv_scale(w, m & 1), s8 = ck_nv_scale(w, 2 + (m & 1));
      tot[0] = fmaf(d[0], s0, tot[0]);
      tot[1] = fmaf(d[1], s0, tot[1]);
      tot[2] = fmaf(d[2], s8, tot[2]);
      tot[3] = fmaf(d[3], s8, tot[3]);
      continue;
    }
    mma16816<FMT == CK_DBF16>(acc, a, b0, b1);
    if (S::AFF && (m + 1) % S::MPG == 0) {
      const int gl = m / S::MPG;
      float s0, b0f, s8, b8;
      affine_fold<FMT, SB_F16>(r.sc[gl], s0, b0f, s8, b8);
      const float2 xsv = r.xs[gl];
      tot[0] = fmaf(s0, acc[0], fmaf(b0f, xsv.x, tot[0]));
      tot[1] = fmaf(s0, acc[1], fmaf(b0f, xsv.y, tot[1]));
      tot[2] = fmaf(s8, acc[2], fmaf(b8, xsv.x, tot[2]));
      tot[3] = fmaf(s8, acc[3], fmaf(b8, xsv.y, tot[3]));
      acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    }
    if (S::MX && (m + 1) % S::MPG == 0) {
      const int gl = m / S::MPG;
      const uint32_t sx = r.sc[0].x;
      uint32_t e0 = FMT == CK_MXFP4 ? (sx >> (8 * gl)) & 0xffu : sx & 0xffu;
      uint32_t e8 = FMT == CK_MXFP4 ? (sx >> (16 + 8 * gl)) & 0xffu : (sx >> 8) & 0xffu;
      float f0 = __uint_as_float(min(e0 + MX_OFF, 255u) << 23);
      float f8 = __uint_as_float(min(e8 + MX_OFF, 255u) << 23);
      tot[0] = fmaf(acc[0], f0, tot[0]);
      tot[1] = fmaf(acc[1], f0, tot[1]);
      tot[2] = fmaf(acc[2], f8, tot[2]);
      tot[3] = fmaf(acc[3], f8, tot[3]);
      acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    }
  }
}

#endif
