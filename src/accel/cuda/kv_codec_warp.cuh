/* One warp encodes one 128-value block of K into the planar3 / planar4 format
 * (src/accel/kv_codec.h): the lane arithmetic of kv_codec_math.h, the two block sums as
 * xor-shuffle reductions in the order the C reference folds its lane sums, so the bytes are the
 * reference's. Used by the encoder kernel (kv_codec.cu) and by the q/k/v post steps that write a
 * compressed K cache (qkv_post.cuh, prefill.cu). */
#ifndef MLXRT_CUDA_KV_CODEC_WARP_CUH
#define MLXRT_CUDA_KV_CODEC_WARP_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "accel/kv_codec_math.h"
#include "ck_device.cuh"

/* Lane l of a whole warp holds values 4l..4l+3 of the block (x: floats holding bf16 values; bad:
 * whether its bf16 inputs held NaN or an infinity). Writes the block's bytes to dst, or (a
 * non-finite block, or one whose corrected norm is beyond fp16) writes nothing and ORs
 * KVC_FLAG_NONFINITE / KVC_FLAG_RANGE into *flags. bits: 3 or 4. planar3: lane l writes qs byte
 * l, even lanes the signs byte l/2 (their own 4 bits and their odd neighbour's); planar4: lane l
 * writes qs bytes 2l and 2l+1. */
static __device__ __forceinline__ void kvc_warp_encode(const kvc_tables *t, int bits, const float x[4], unsigned bad,
                                                       uint8_t *dst, unsigned *flags, int lane) {
  for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xffffffffu, bad, o);
  if (bad) {
    if (lane == 0) atomicOr(flags, KVC_FLAG_NONFINITE);
    return;
  }
  /* lane i + lane i^o: lanes below o add in the reference's fold order, the others the same
   * two values the other way round (the same float), so every lane ends with the same sum */
  float s = kvc_lane_sumsq(x);
  for (int o = 16; o > 0; o >>= 1) s = KVC_ADD(s, __shfl_xor_sync(0xffffffffu, s, o));
  const float n = KVC_SQRT(s);
  int c[4];
  float cs = kvc_lane_codes(t, bits, lane, x, n, c);
  for (int o = 16; o > 0; o >>= 1) cs = KVC_ADD(cs, __shfl_xor_sync(0xffffffffu, cs, o));
  const uint16_t nh = kvc_norm_half(n, cs);
  if (!kvc_half_finite(nh)) { /* the same value in every lane: the whole warp leaves */
    if (lane == 0) atomicOr(flags, KVC_FLAG_RANGE);
    return;
  }
  if (bits == 3) {
    dst[KVC_P3_QS + lane] = kvc_pack3_qs(c);
    const unsigned sg = kvc_pack3_signs(c), other = __shfl_xor_sync(0xffffffffu, sg, 1);
    if (!(lane & 1)) dst[KVC_P3_SIGNS + lane / 2] = (uint8_t)(sg | other << 4);
  } else {
    dst[KVC_P4_QS + 2 * lane] = kvc_pack4(c[0], c[1]);
    dst[KVC_P4_QS + 2 * lane + 1] = kvc_pack4(c[2], c[3]);
    if (lane == 0) dst[KVC_P4_RNORM] = 0, dst[KVC_P4_RNORM + 1] = 0;
  }
  if (lane == 0) dst[0] = (uint8_t)(nh & 0xffu), dst[1] = (uint8_t)(nh >> 8);
}

/* The head vector k[hd] (shared memory, floats; each value is stored as its bf16 rounding, as a
 * bf16 cache would hold it) into its hd / 128 blocks at dst, block b by warp b mod (blockDim / 32):
 * every thread of the block calls it. */
static __device__ __forceinline__ void kvc_encode_head(const kvc_tables *t, int bits, const float *k, int hd,
                                                       uint8_t *dst, unsigned *flags) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int bb = bits == 3 ? KVC_P3_BYTES : KVC_P4_BYTES;
  for (int b = warp; b < hd / KVC_BLOCK; b += nw) {
    float x[4];
    unsigned bad = 0;
    for (int i = 0; i < 4; i++) {
      const uint16_t v = ck_f32_to_bf16(k[b * KVC_BLOCK + 4 * lane + i]);
      bad |= (v & 0x7f80u) == 0x7f80u; /* bf16 NaN or infinity */
      x[i] = ck_bf16_to_f32(v);
    }
    kvc_warp_encode(t, bits, x, bad, dst + (int64_t)b * bb, flags, lane);
  }
}

#endif
