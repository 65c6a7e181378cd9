/* The planar3 / planar4 K-cache encoder (kv_codec_kernels.h; the format: src/accel/kv_codec.h).
 * One warp per 128-value block, lane l holding values 4l..4l+3 (rotation pairs 2l and 2l+1),
 * through kv_codec_warp.cuh. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "accel/kv_codec.h"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "kv_codec_kernels.h"
#include "kv_codec_warp.cuh"

/* The midpoints are read uniformly by a warp; the angles and squared codes per lane, which
 * serialises those constant reads — acceptable for an encoder that touches each K value once. */
static __constant__ kvc_tables kvc_tab;

#define KVE_WARPS 4

__global__ void __launch_bounds__(KVE_WARPS * 32)
    kv_encode_kernel(int bits, const uint16_t *k, int ntok, int nhead, int nblk, int64_t k_tok, int64_t k_head,
                     uint8_t *out, int64_t o_tok, int64_t o_head, unsigned *flags) {
  ck_pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t w = (int64_t)blockIdx.x * KVE_WARPS + (threadIdx.x >> 5);
  if (w >= (int64_t)ntok * nhead * nblk) return; /* whole warps */
  if (kvc_tab.magic != KVC_TABLES_MAGIC) {
    if (lane == 0) atomicOr(flags, KVC_FLAG_NO_TABLES);
    return;
  }
  const int b = (int)(w % nblk);
  const int64_t row = w / nblk, t = row / nhead;
  const int h = (int)(row % nhead);
  const uint16_t *src = k + t * k_tok + h * k_head + (int64_t)b * KVC_BLOCK + 4 * lane;
  float x[4];
  unsigned bad = 0;
  for (int i = 0; i < 4; i++) {
    const uint16_t v = src[i];
    bad |= (v & 0x7f80u) == 0x7f80u; /* bf16 NaN or infinity */
    x[i] = ck_bf16_to_f32(v);
  }
  kvc_warp_encode(&kvc_tab, bits, x, bad, out + t * o_tok + h * o_head + (int64_t)b * (bits == 3 ? KVC_P3_BYTES : KVC_P4_BYTES),
                  flags, lane);
}

extern "C" int ck_kv_codec_upload(void *stream) {
  return (int)cudaMemcpyToSymbolAsync(kvc_tab, kvc_tables_get(), sizeof(kvc_tables), 0, cudaMemcpyHostToDevice,
                                      (cudaStream_t)stream);
}

extern "C" int ck_kv_encode(int format, const uint16_t *k, int ntok, int nhead, int head_dim, int64_t k_tok,
                            int64_t k_head, uint8_t *out, int64_t o_tok, int64_t o_head, unsigned *flags,
                            void *stream) {
  if ((format != 3 && format != 4) || ntok < 0 || nhead < 1 || head_dim <= 0 || head_dim % KVC_BLOCK || !k || !out ||
      !flags)
    return (int)cudaErrorInvalidValue;
  const int nblk = head_dim / KVC_BLOCK;
  const int64_t warps = (int64_t)ntok * nhead * nblk, grid = (warps + KVE_WARPS - 1) / KVE_WARPS;
  if (grid == 0) return 0;
  if (grid > 0x7fffffff) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(kv_encode_kernel, dim3((unsigned)grid), dim3(KVE_WARPS * 32), 0, (cudaStream_t)stream, format,
                        k, ntok, nhead, nblk, k_tok, k_head, out, o_tok, o_head, flags);
}

CK_TIMELINE_SETTER(ck_tl_kv_codec)
