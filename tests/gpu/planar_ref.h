/* The value a tensor-core kernel over a compressed K forms for value v (0..127) of a planar3 /
 * planar4 block in the rotated domain: fp16(n'·fp16(C[code])) (attention_planar.cuh pc_values8),
 * the codes read by the block layout of src/accel/kv_codec.h (planar3: value v's 2-bit part in
 * qs byte v / 4, its sign bit in signs byte v / 8; planar4: two codes a byte, the even value's in
 * the low nibble). The host references of the one pass and the prompt pass's tile kernel score
 * with these values, so their scores round to bf16 where the kernel's do. */
#ifndef MLXRT_TESTS_GPU_PLANAR_REF_H
#define MLXRT_TESTS_GPU_PLANAR_REF_H

#include <stdint.h>

#include "accel/kv_codec.h"
#include "accel/kv_codec_math.h"
#include "base/bf16.h"

static inline float planar_h16(float x) { return mx_f16_to_f32(mx_f32_to_f16(x)); }

static inline float planar_tile_value(int fmt, const uint8_t *blk, int v) {
  const kvc_tables *t = kvc_tables_get();
  int code;
  if (fmt == 3)
    code = ((blk[KVC_P3_QS + v / 4] >> (2 * (v % 4))) & 3) | ((blk[KVC_P3_SIGNS + v / 8] >> (v % 8)) & 1) << 2;
  else
    code = (blk[KVC_P4_QS + v / 2] >> (4 * (v & 1))) & 15;
  const float n = mx_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
  return planar_h16(n * planar_h16(fmt == 3 ? t->cb3[code] : t->cb4[code]));
}

#endif
