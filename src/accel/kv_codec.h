/* The rotor "planar3" / "planar4" K-cache codec (docs/KV.md): each 128-value block of a head
 * vector is L2-normalised, turned by 64 fixed 2×2 Givens rotations (one per adjacent pair),
 * quantized per value to the nearest centroid of a fixed codebook (3 or 4 bits), and stored
 * with one fp16 corrected norm n' = n / ‖C[idx]‖, so that the decoded block has the original
 * length.
 *
 *   angles  θ_p = 2π·u_p, p = 0..63: a 64-bit LCG, state 42, advanced before each draw
 *           (state = state·6364136223846793005 + 1442695040888963407), u = (state >> 11) / 2^53;
 *           cos and sin computed in double, stored as float. One table (kvc_tables_get) serves
 *           the C reference and, uploaded, the CUDA encoder.
 *   encode  n = ‖x‖ (float32, the lane order of kv_codec_math.h); u = x / n (u = 0 when
 *           n ≤ 1e-10); r = R·u with r_2p = c_p·u_2p − s_p·u_2p+1, r_2p+1 = s_p·u_2p + c_p·u_2p+1;
 *           idx_j = the nearest centroid of r_j (a tie takes the lower one); n' as above.
 *   decode  x̂_2p = n'·(c_p·C[i_2p] + s_p·C[i_2p+1]), x̂_2p+1 = n'·(c_p·C[i_2p+1] − s_p·C[i_2p]).
 *   score   q·x̂ = n'·Σ_j (R q)_j·C[idx_j]: q is rotated once per head (kvc_rotate_q), after
 *           which a key costs one lookup and one multiply-add per value.
 *
 * Layouts (kv_codec_math.h): planar3 50 bytes per 128 values, planar4 68 bytes. Head vectors
 * must be whole blocks (head_dim a multiple of 128; Gemma's 256 and 512 are); no padding.
 *
 * Rejected, with an error and the output left as it was: a block holding NaN or an infinity,
 * and a block whose corrected norm n' rounds beyond fp16's largest finite value (65504), which
 * a stored infinity could not decode. A block whose n' is below fp16's normal range (6.1e-5)
 * keeps fewer bits of its norm, and one below 3e-8 decodes as zeros.
 *
 * Thread safety: every function is a pure function of its arguments; the only shared state is
 * the table, built once on first use (pthread_once) and never written again. Any thread may
 * call anything at any time. */
#ifndef MLXRT_ACCEL_KV_CODEC_H
#define MLXRT_ACCEL_KV_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "accel/kv_codec_math.h"
#include "mlxrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KVC_PLANAR3 = 3, KVC_PLANAR4 = 4 } kvc_format; /* the value is the code width */

/* The angles, codebooks and midpoints (built on first use; never NULL). */
const kvc_tables *kvc_tables_get(void);

/* Bytes of one 128-value block (50 or 68), of a head_dim row (0 when head_dim is not a positive
 * multiple of 128), or 0 for an unknown format. */
size_t kvc_block_bytes(kvc_format f);
size_t kvc_row_bytes(kvc_format f, int head_dim);

/* Encodes x[128] into out[kvc_block_bytes(f)]. On failure out is untouched. */
int kvc_encode_block(kvc_format f, const float *x, uint8_t *out, mlxrt_error *err);

/* Encodes one bf16 head vector of head_dim values (a multiple of 128) into
 * out[kvc_row_bytes(f, head_dim)], block by block. Blocks are independent: a rejected block is
 * left as it was, the others are written, and the error names the first rejected block (the
 * CUDA encoder behaves the same way). */
int kvc_encode_row_bf16(kvc_format f, const uint16_t *x, int head_dim, uint8_t *out, mlxrt_error *err);

/* Decodes a block into x[128]. Fails on an unknown format or a non-finite stored norm. */
int kvc_decode_block(kvc_format f, const uint8_t *blk, float *x, mlxrt_error *err);

/* q_rot = R·q per 128-value block (head_dim a multiple of 128): the query side of scoring. */
int kvc_rotate_q(const float *q, int head_dim, float *q_rot, mlxrt_error *err);

/* n'·Σ_j q_rot[j]·C[idx_j] over one block (float32, j ascending, n' applied last); equals
 * dot(q, decode(blk)) up to float rounding. NaN for an unknown format. */
float kvc_dot_rotated(kvc_format f, const float *q_rot, const uint8_t *blk);
/* The same over a row of head_dim / 128 blocks (the blocks' dots summed in order). */
float kvc_dot_rotated_row(kvc_format f, const float *q_rot, int head_dim, const uint8_t *row);

/* The encoder's rotated unit vector r = R·(x / ‖x‖) for a finite x[128] (its intermediate, bit for
 * bit), and ‖x‖ in *norm: for tests that place values exactly on midpoints. */
void kvc_rotated_unit(const float *x, float *r, float *norm);

/* The error for a CUDA encoder's flags word (KVC_FLAG_*): the CPU path's wording. Returns -1, or
 * 0 when flags is 0. */
int kvc_fail_flags(unsigned flags, mlxrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
