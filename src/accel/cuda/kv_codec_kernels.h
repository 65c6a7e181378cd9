/* The planar3 / planar4 K-cache encoder on the device (kv_codec.cu): bf16 K rows into the
 * blocks of src/accel/kv_codec.h, byte for byte what the C reference writes. Launchers return a
 * cudaError_t as int (0 = ok) and never synchronise. */
#ifndef MLXRT_CUDA_KV_CODEC_KERNELS_H
#define MLXRT_CUDA_KV_CODEC_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the codec's table (kvc_tables_get: the C reference's own) into this module's constant
 * memory on the current device. Once per device, before the first ck_kv_encode there; a launch
 * without it writes nothing and reports KVC_FLAG_NO_TABLES. */
int ck_kv_codec_upload(void *stream);

/* Encodes ntok × nhead bf16 rows of head_dim values (a positive multiple of 128): row (t, h)
 * starts at k + t·k_tok + h·k_head (elements) and its head_dim / 128 blocks are written one
 * after another from out + t·o_tok + h·o_head (bytes). format: 3 (planar3) or 4 (planar4). One
 * warp per block. A block holding NaN or an infinity, or whose corrected norm is beyond fp16,
 * is not written: the kernel ORs KVC_FLAG_NONFINITE / KVC_FLAG_RANGE into *flags (device
 * memory; never cleared here, so one check after many launches is enough) and the caller turns
 * the word into an error with kvc_fail_flags. */
int ck_kv_encode(int format, const uint16_t *k, int ntok, int nhead, int head_dim, int64_t k_tok, int64_t k_head,
                 uint8_t *out, int64_t o_tok, int64_t o_head, unsigned *flags, void *stream);

#ifdef __cplusplus
}
#endif

#endif
