/* Device-side helpers shared by the repack, mat-vec and embedding kernels: format constants,
 * exact scalar decoders (MLX semantics), and the tile layout's index arithmetic. */
#ifndef MLXRT_CK_DEVICE_CUH
#define MLXRT_CK_DEVICE_CUH

#include <stdint.h>

#include "kernels.h"

/* accel.h's enum values, repeated so device code needs no host header. */
enum { CKM_DENSE = 0, CKM_AFFINE = 1, CKM_NVFP4 = 2, CKM_MXFP4 = 3, CKM_MXFP8 = 4 };
enum { CKT_BF16 = 0, CKT_F16 = 1, CKT_F32 = 2 };

/* ---- format constants ------------------------------------------------------------------- */
/* k-values in one lane's 16-byte load (one "chunk"): 32 4-bit codes = 2 rows × 16 k,
 * 16 8-bit codes = 2 rows × 8 k, 8 16-bit values = 2 rows × 4 k. */
__host__ __device__ constexpr int ck_chunk_k(int fmt) {
  return (fmt == CK_AFF4 || fmt == CK_NVFP4 || fmt == CK_MXFP4) ? 64
         : (fmt == CK_AFF8 || fmt == CK_MXFP8)                   ? 32
                                                                 : 16;
}
/* A unit covers whole scale groups and whole 32-k x slices. */
__host__ __device__ constexpr int ck_unit_k_c(int fmt, int gs) {
  return fmt == CK_AFF4 || fmt == CK_AFF8 ? (ck_chunk_k(fmt) > gs ? ck_chunk_k(fmt) : gs)
         : fmt == CK_NVFP4 || fmt == CK_MXFP4 ? 64
         : fmt == CK_MXFP8                    ? 32
                                              : 32;
}
/* Scale bytes per lane-row-pair per unit for the fp formats (two rows: g and g+8). */
__host__ __device__ constexpr int ck_fp_scale_bytes(int fmt) {
  return fmt == CK_NVFP4 ? 8 : fmt == CK_MXFP4 ? 4 : fmt == CK_MXFP8 ? 2 : 0;
}

/* ---- exact scalar conversions ----------------------------------------------------------- */
/* s·2^n with ldexpf's bits: one correctly rounded multiply by an exact power of two (no
 * flush to zero in these kernels), ldexpf itself outside float's normal exponents — one
 * multiply where ldexpf's range split takes ~18 instructions */
__device__ __forceinline__ float ck_scale_pow2(float s, int n) {
  return n >= -126 && n <= 127 ? __fmul_rn(s, __uint_as_float((uint32_t)(n + 127) << 23)) : ldexpf(s, n);
}
__device__ __forceinline__ float ck_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* MLX's RNE (quiet NaN kept). */
__device__ __forceinline__ uint16_t ck_f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float ck_f16_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t ck_f32_to_f16(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

/* E4M3 as MLX decodes it: bias 7, no NaN (0x7F = 480). Exact via float bits. */
__device__ __forceinline__ float ck_e4m3_to_f32(uint32_t b) {
  /* (b & 0x7f) << 20 puts e at the float exponent's low bits and m at the mantissa top:
   * that is the value × 2^-120 for normals and subnormals alike. */
  float v = __uint_as_float((b & 0x7fu) << 20) * 1.329227995784916e36f; /* 2^120 */
  return (b & 0x80u) ? -v : v;
}
/* nvfp4 scales in the tile layout: each E4M3 scale s (0 < s ≤ 120, byte ≤ 0x6F) as the 7-bit
 * code c = bits 26..20 of the float s·2^10, whose exponent field is then 128..143, so the
 * float is (0x40000000 | c << 20) — one mask-and-or per scale. Four codes share a word at
 * bits 20..26, 12..18, 4..10 and 27..31|0..1 (ck_nv_place); a zero scale has code 0 and its
 * group's codes are made ±0 instead (repack.cu), so every product is still exactly ±0. */
#define CK_NV_SCALE_LOG2 10
__device__ __forceinline__ uint32_t ck_nv_code(uint32_t e4m3) {
  if ((e4m3 & 0x7fu) == 0) return 0;
  return (__float_as_uint(ck_e4m3_to_f32(e4m3) * (float)(1 << CK_NV_SCALE_LOG2)) >> 20) & 0x7fu;
}
/* Code q (0..3) of a scale word, placed at bits 20..26. */
__device__ __forceinline__ uint32_t ck_nv_place(uint32_t c, int q) {
  return q == 0 ? c << 20 : q == 1 ? c << 12 : q == 2 ? c << 4 : (c << 27) | (c >> 5);
}
__device__ __forceinline__ uint32_t ck_nv_field(uint32_t w, int q) {
  return q == 0 ? w : q == 1 ? w << 8 : q == 2 ? w << 16 : __funnelshift_l(w, w, 25);
}
/* s·2^10 of scale q of word w */
__device__ __forceinline__ float ck_nv_scale(uint32_t w, int q) {
  return __uint_as_float((ck_nv_field(w, q) & 0x07f00000u) | 0x40000000u);
}

/* The scale of (tile row g + 8·hi, group gu of unit u) from the tile layout (repack.cu), as a
 * float; a zero scale reads back as 2^-9 over codes the repack zeroed. */
__device__ __forceinline__ float ck_nv_tile_scale(const void *s, int64_t tile, int64_t nunits, int64_t u, int g,
                                                  int hi, int gu) {
  uint32_t w = ((const uint32_t *)s)[((tile * nunits + u) * 8 + g) * 2 + (gu >> 1)];
  return ck_nv_scale(w, 2 * hi + (gu & 1)) * (1.0f / (1 << CK_NV_SCALE_LOG2));
}

/* E8M0: 2^(s-127); s = 0 is 2^-127. */
__device__ __forceinline__ float ck_e8m0_to_f32(uint32_t s) {
  return __uint_as_float(s ? (s << 23) : 0x00400000u);
}
__device__ __forceinline__ float ck_fp4_to_f32(uint32_t c) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = mag[c & 7];
  return (c & 8) ? -v : v;
}

/* A 16-bit or 32-bit scale/bias of the given dtype at index i. */
__device__ __forceinline__ float ck_load_param(const void *p, int64_t i, int dt) {
  if (dt == CKT_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == CKT_BF16 ? ck_bf16_to_f32(h) : ck_f16_to_f32(h);
}

/* Code e of one MLX row: little-endian LSB-first bit stream of `bits`-bit codes. */
__device__ __forceinline__ uint32_t ck_raw_code(const uint32_t *row, int bits, int64_t e) {
  int64_t bit = e * bits;
  int64_t word = bit >> 5;
  int off = (int)(bit & 31);
  uint32_t v = row[word] >> off;
  if (off + bits > 32) v |= row[word + 1] << (32 - off);
  return v & ((1u << bits) - 1u);
}

/* ---- the tile layout ------------------------------------------------------------------ */
/* m16n8k16 A fragment: lane (g = lane/4, t = lane%4) holds a_i, i = 0..7, at
 * row g + 8·((i>>1)&1), k 2t + (i&1) + 8·(i>>2); register r = i>>1 holds (a_2r, a_2r+1). */
__device__ __forceinline__ int ck_frag_row(int g, int i) { return g + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int ck_frag_k(int t, int i) { return 2 * t + (i & 1) + 8 * (i >> 2); }

/* Inverse: for row-in-tile rr and k-in-mma kk, the lane and fragment index. */
__device__ __forceinline__ void ck_frag_of(int rr, int kk, int *lane, int *i) {
  int g = rr & 7, hi = rr >> 3, t = (kk & 7) >> 1;
  *lane = g * 4 + t;
  *i = (kk & 1) + 2 * hi + 4 * (kk >> 3);
}

/* Bit position of a_i's code in the 4-bit word of its mma, per format:
 * affine 4-bit: register r = nibbles (r, r+4), so the lop3 with 0x000F000F / 0x00F000F0
 * masks decodes a register; fp4: sign and magnitude placed so an fp16 (sign, e1e0m << 9)
 * pattern (= value · 2^-14) comes out of one or two shift-and-mask steps (docs/CUDA.md). */
__device__ __forceinline__ int ck_aff4_nibble(int i) { return (i >> 1) + 4 * (i & 1); }
__device__ __forceinline__ int ck_fp4_mag_pos(int i) {
  const int base[4] = {9, 6, 3, 0};
  return base[i >> 1] + 16 * (i & 1);
}
__device__ __forceinline__ int ck_fp4_sign_pos(int i) {
  const int base[4] = {15, 12, 13, 14};
  return base[i >> 1] + 16 * (i & 1);
}

#endif
