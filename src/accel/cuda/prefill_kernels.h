/* Launchers of the batched prompt pass (prefill.cu, prefill_attn.cu): the whole-step decoder's
 * kernels for a chunk of T tokens at positions p0..p0+T-1, row-major [T, ...] buffers. Same rounding points as
 * the one-token kernels (docs/NUMERICS.md). Return a cudaError_t (0 = ok). */
#ifndef MLXRT_CUDA_PREFILL_KERNELS_H
#define MLXRT_CUDA_PREFILL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out [L->rows, L->cols] bf16, row-major: the resident weight dequantized (fast formats from
 * the tile layout: affine bf16(s·q + b) with one rounding, fp formats s·v exactly, dense as
 * stored; the generic layout through ck_embed with ids = iota[0..rows)). */
int pf_dequant(const ck_layout *L, const int32_t *iota, uint16_t *out, void *stream);

/* Per row t < T: when y: o = rmsnorm(bf16 y[t·ldy ..], w_post); h = bf16(h + o); when
 * use_scalar h = bf16(h·scalar); then xb[t] = bf16 rmsnorm(h[t], w_next) (w_next NULL:
 * bf16 h[t], no norm). h, xb: [T, H]. */
int pf_norm_rows(const float *y, int64_t ldy, const float *w_post, float *h, int use_scalar, float scalar,
                 const float *w_next, uint16_t *xb, int T, int H, float eps, void *stream);

/* Per token t and head, after the q|k|v product y [T, ldy] = [q nq·hd | k nkv·hd | v nkv·hd]
 * (v = k's rows when k_eq_v): q = rope(rmsnorm(q)) at position p0 + t → q_out [T, nq·hd];
 * k = rope(rmsnorm(k)), v (weightless rmsnorm when v_norm) → kdst / vdst bf16, token t's rows
 * at t·kv.ps in the layout kv (kv_layout.h; K from V: vdst == kdst, and q's unmoved dims carry
 * kn; compressed K: token t's codec blocks at t·kv.kps bytes from kdst); kdst NULL (a KV-shared
 * layer, y = q only): the query heads alone. */
int pf_qkv_post(const float *y, int64_t ldy, int T, int64_t p0, int nq, int nkv, int hd, int k_eq_v,
                const float *qn, const float *kn, const float *inv_freq, int traditional, int v_norm,
                float eps, dk_kv_layout kv, float *q_out, uint16_t *kdst, uint16_t *vdst, void *stream);

/* out [T, inter] = bf16(gelu_approx(bf16 gate) · bf16 up), y [T, 2·inter] = [gate | up], or
 * with il > 0 each token's rows interleaved by il (il of gate, il of up, …). */
int pf_geglu(const float *y, int64_t inter, int T, uint16_t *out, int il, void *stream);

/* Causal attention of T queries (positions p0 + t) over the cache: key j < p0 from kc/vc
 * (slot j % ck_ring(window) when window > 0, else j), key j ≥ p0 from the chunk's kch/vch; rows
 * kv.ps apart in the layout kv (kv_layout.h; K from V: vc == kc, vch == kch);
 * a sliding layer's query at p sees keys p − window < j ≤ p. Rounding: q·bf16(scale) → bf16,
 * scores → bf16, float32 softmax, p → bf16, Σ p·v float32 → bf16. att [T, nq·hd] bf16.
 * Head dims 128, 256 and 512 on an sm_90 device: the warpgroup tensor cores (sm_90a wgmma,
 * prefill_attn_wg.cu); other powers of two up to 512: mma.sync, 64 queries per block, the next
 * K/V tile copied while one computes (prefill_attn.cu); other head dims: a plain kernel (one
 * block per query and head). The score sums are grouped differently in each, so their bits may
 * differ in a bf16 rounding, not their math. */
int pf_attention(const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                 const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                 dk_kv_layout kv, uint16_t *att, void *stream);

/* Over a compressed K (kv.kfmt, kv_layout.h), pf_attention reads every key from the cache — the
 * chunk's own too, which its q/k/v post encoded there, so kch / vch must be the cache's rows at
 * p0. Where the warpgroup kernel runs (head dims 128, 256, 512 on sm_90a) it decodes each key
 * tile to fp16 in the rotated domain and scores it on the tensor cores against the rotated query
 * in fp16 (prefill_attn_wg.cu pw_tile_decode), with the bf16 cache's softmax; elsewhere
 * pf_attention_planar (prefill_attn_planar.cu): one block per KV head and query, its rotated
 * query rows scored against the blocks (attention_planar.cuh), scores → bf16, and an online
 * float32 softmax over tiles of keys (p unrounded, Σ p·v / Σ p → bf16 at the end). Neither keeps
 * chunk × context scores. Head dims multiples of 128 up to 512; no window. */
int pf_attention_planar(const float *q, const uint16_t *kc, const uint16_t *vc, int T, int64_t p0, int nq, int nkv,
                        int hd, float scale, dk_kv_layout kv, uint16_t *att, void *stream);

/* The warpgroup kernel alone (prefill_attn_wg.cu): whether it runs here (head dim 128, 256 or 512 on an
 * sm_90 device, where the sm_90a machine code loads), and its launcher. */
int pf_attention_wg_supported(int hd);
int pf_attention_wg(const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                    const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                    dk_kv_layout kv, uint16_t *att, void *stream);
/* its primitives alone: d1 [64×64] = A·Bᵀ, d2 [64×256] = A·V for bf16 A, B [64×64], V [64×256],
 * row-major (mlxrt-pfattn-bench checks them against the host before the attention) */
int pf_wg_selftest(float *d1, float *d2, const uint16_t *A, const uint16_t *B, const uint16_t *V, void *stream);

/* Sliding layers: the chunk's last min(T, ring) K/V rows → ring slots (p0 + t) % ring, ring = ck_ring(window). */
int pf_kv_commit(const uint16_t *ks, const uint16_t *vs, uint16_t *kc, uint16_t *vc, int T, int64_t p0,
                 int64_t kvd, int window, void *stream);

#ifdef __cplusplus
}
#endif

#endif
