/* The layout of a layer's K/V cache rows, shared by the q/k/v post steps (decode, prompt) and
 * the attention kernels (decode, one-cluster, prompt).
 *
 * Position p's row starts at p·ps elements (bf16). K of KV head g is the hd elements at g·hd.
 *   vr = 0 (plain): V is an array of its own with the same layout, head g at g·hd; ps = nkv·hd.
 *   vr > 0 (K from V): V lives in the K array. On layers whose K and V come from one raw
 *     projection (attention_k_eq_v) with V through the weightless rmsnorm, K before RoPE is
 *     bf16(V·k_norm) exactly, and RoPE moves only the pairs (j, j + hd/2) with j < vr (NeoX
 *     pairing; every later frequency is zero). So head g's hd elements at g·hd hold K at the
 *     moved dims (d mod hd/2 < vr) and V at the others, and after the nkv heads a tail holds V's
 *     moved dims: head g's 2·vr values at nkv·hd + 2·vr·g (dims 0 … vr−1, then hd/2 … hd/2+vr−1).
 *     ps = nkv·(hd + 2·vr). The queries carry k_norm at the unmoved dims (q·k = Σ (q·k_norm)·V
 *     there), so a score reads one hd-element row as on the plain layout, and K's unmoved dims
 *     are never stored: 5/8 of the plain cache's bytes at hd 512, vr 64.
 * vr is a multiple of 8, so a 16-byte chunk of 8 dims is all moved or all unmoved.
 *   kfmt 3 / 4 (compressed K, full-attention layers): K is an array of its own in the planar3 /
 *     planar4 blocks of src/accel/kv_codec.h, kps bytes per position, head g's hd/128 blocks at
 *     g·(hd/128)·block bytes; V is plain (ps = nkv·hd). The q/k/v post steps encode K as they
 *     write it (kv_codec_warp.cuh), and the attention scores against the blocks in the rotated
 *     domain (q rotated once per head). kt: the codec's tables in device memory; kflags: the
 *     device word the encoder ORs KVC_FLAG_* into for a block it cannot store. */
#ifndef MLXRT_CUDA_KV_LAYOUT_H
#define MLXRT_CUDA_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "accel/kv_codec_math.h"

typedef struct dk_kv_layout {
  int64_t ps; /* elements from one position's row to the next (V's, and K's unless kfmt) */
  int vr;     /* moved pairs per half whose V sits in the tail (0: plain) */
  int kfmt;   /* 0: K in bf16 rows as above; 3 / 4: K in planar3 / planar4 blocks */
  int64_t kps; /* bytes from one position's K row to the next (kfmt) */
  const kvc_tables *kt; /* (kfmt) */
  unsigned *kflags;     /* (kfmt) */
} dk_kv_layout;

#ifdef __CUDACC__
#define KVL_HD __host__ __device__ __forceinline__
#else
#define KVL_HD static inline
#endif

/* the plain layout of nkv heads of hd */
KVL_HD dk_kv_layout dk_kv_plain(int nkv, int hd) {
  dk_kv_layout L = {(int64_t)nkv * hd, 0, 0, 0, NULL, NULL};
  return L;
}
/* K from V for nkv heads of hd with vr moved pairs per half */
KVL_HD dk_kv_layout dk_kv_from_v(int nkv, int hd, int vr) {
  dk_kv_layout L = {(int64_t)nkv * (hd + 2 * vr), vr, 0, 0, NULL, NULL};
  return L;
}
/* planar3 (fmt 3) / planar4 (fmt 4) K for nkv heads of hd (a multiple of 128), plain V */
KVL_HD int dk_kv_block_bytes(int fmt) { return fmt == 3 ? KVC_P3_BYTES : fmt == 4 ? KVC_P4_BYTES : 0; }
KVL_HD dk_kv_layout dk_kv_planar(int nkv, int hd, int fmt, const kvc_tables *kt, unsigned *kflags) {
  dk_kv_layout L = {(int64_t)nkv * hd, 0, fmt, (int64_t)nkv * (hd / KVC_BLOCK) * dk_kv_block_bytes(fmt), kt, kflags};
  return L;
}
/* whether dim d of a head is moved by RoPE (K stored; V in the tail) */
KVL_HD int dk_kv_moved(dk_kv_layout L, int hd, int d) {
  const int h = hd / 2, m = d < h ? d : d - h;
  return m < L.vr;
}
/* the element of V's dim d of head g within a position's row */
KVL_HD int64_t dk_kv_vcol(dk_kv_layout L, int nkv, int hd, int g, int d) {
  if (L.vr > 0) {
    const int h = hd / 2, m = d < h ? d : d - h;
    if (m < L.vr) return (int64_t)nkv * hd + (int64_t)2 * L.vr * g + (d < h ? m : L.vr + m);
  }
  return (int64_t)g * hd + d;
}

/* whether kv describes caches kc / vc of nkv heads of hd (a sliding layer's ring: plain) */
KVL_HD int dk_kv_layout_ok(dk_kv_layout L, int nkv, int hd, const void *kc, const void *vc, int window) {
  if (L.kfmt)
    return (L.kfmt == 3 || L.kfmt == 4) && L.vr == 0 && hd % KVC_BLOCK == 0 && L.ps >= (int64_t)nkv * hd &&
           L.kps == (int64_t)nkv * (hd / KVC_BLOCK) * dk_kv_block_bytes(L.kfmt) && L.kt && L.kflags &&
           (!kc || kc != vc) && window == 0;
  if (L.vr == 0) return L.ps >= (int64_t)nkv * hd;
  return L.vr > 0 && L.vr % 8 == 0 && 2 * L.vr < hd && L.ps == (int64_t)nkv * (hd + 2 * L.vr) && kc == vc &&
         window == 0;
}

/* Rows of a batched decode step (cuda_decoder_batch.c): launch z of a kernel that takes them
 * serves row z, one query token of the sequence in cache slot slot[z] at position pos[z]. The
 * row's K/V live at kc/vc + slot[z]·kv (every slot's cache in one array per layer), its inputs
 * and outputs `in` / `out` elements after row z − 1's. slot NULL: one row, nothing moved (the
 * single-sequence step). */
typedef struct dk_rows {
  const int *slot;
  int64_t kv;  /* elements between two slots' caches */
  int64_t in;  /* between two rows' inputs (the q|k|v product; the queries for the attention) */
  int64_t out; /* between two rows' outputs (the queries; the attention's output) */
} dk_rows;

#endif
