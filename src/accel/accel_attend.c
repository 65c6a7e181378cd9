/* The attention of a GQA group's query heads over cached bf16 keys and values with MLX's CPU
 * rounding points (docs/NUMERICS.md): the one implementation under the reference path
 * (src/mlx/reference.c) and the CPU backend's decoder (cpu/cpu_decoder.c). */
#include "accel/accel_attend.h"

#include <math.h>
#include <string.h>

#include "base/bf16.h"
#include "base/mlx_cpu_math.h"

/* The scores of KEY_BLOCK consecutive keys for nh query heads at once. The keys are converted
 * once for the heads that share them (a GQA group), then each score is a lane of a 16-float
 * vector with AVX-512 (one register), else of two 8-float ones (GNU vector extensions): lane l
 * adds q_d·k_d over d in order, one rounded product and one rounded sum per step as the one-key
 * loop does (ISO C: no contraction into fused multiply-adds), so every score is that loop's
 * bits whatever the vector width; the lanes are independent chains where the one-key loop waits
 * on each sum. */
#define KEY_BLOCK 16
#define GROUP_MAX ACCEL_ATTEND_GROUP /* heads per pass: the scratch below stays at 96 KiB of stack */
typedef float key_vec __attribute__((vector_size(64)));
typedef float key_half __attribute__((vector_size(32)));
#define AI static inline __attribute__((always_inline))
AI void key_block_load(const accel_kv_rows *kv, int hd, int g, int64_t j, float *kt) {
  for (int l = 0; l < KEY_BLOCK; l++) {
    const uint16_t *kk = kv->key(kv->ctx, j + l) + g * hd;
    for (int d = 0; d < hd; d++) kt[d * KEY_BLOCK + l] = mx_bf16_to_f32(kk[d]);
  }
}
/* Without AVX-512 a 16-float vector is two registers that the compiler moves through the stack
 * (the AVX2 prompt pass spent 30 % of its time here, 17 % with the halves); there the block is
 * two 8-key halves, eight chains for four heads. */
AI void key_block_dots8(const float *kt, const float *qs, int nh, int hd, float *out, int64_t ld) {
  int h = 0;
  for (; h + 4 <= nh; h += 4) {
    const float *q0 = qs + h * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    key_half a0l = {0}, a1l = {0}, a2l = {0}, a3l = {0}, a0h = {0}, a1h = {0}, a2h = {0}, a3h = {0};
    for (int d = 0; d < hd; d++) {
      key_half kl, kh;
      memcpy(&kl, kt + d * KEY_BLOCK, sizeof kl);
      memcpy(&kh, kt + d * KEY_BLOCK + 8, sizeof kh);
      a0l = a0l + q0[d] * kl, a0h = a0h + q0[d] * kh;
      a1l = a1l + q1[d] * kl, a1h = a1h + q1[d] * kh;
      a2l = a2l + q2[d] * kl, a2h = a2h + q2[d] * kh;
      a3l = a3l + q3[d] * kl, a3h = a3h + q3[d] * kh;
    }
    const key_half *res[8] = {&a0l, &a0h, &a1l, &a1h, &a2l, &a2h, &a3l, &a3h};
    for (int i = 0; i < 8; i++) memcpy(out + (h + i / 2) * ld + (i % 2) * 8, res[i], sizeof a0l);
  }
  for (; h < nh; h++) {
    const float *q = qs + h * hd;
    key_half al = {0}, ah = {0};
    for (int d = 0; d < hd; d++) {
      key_half kl, kh;
      memcpy(&kl, kt + d * KEY_BLOCK, sizeof kl);
      memcpy(&kh, kt + d * KEY_BLOCK + 8, sizeof kh);
      al = al + q[d] * kl, ah = ah + q[d] * kh;
    }
    memcpy(out + h * ld, &al, sizeof al);
    memcpy(out + h * ld + 8, &ah, sizeof ah);
  }
}
AI void key_block_dots(const accel_kv_rows *kv, const float *qs, int nh, int hd, int g, int64_t j, float *out,
                       int64_t ld, int wide) {
  float kt[1024 * KEY_BLOCK]; /* the block's keys, dims outer */
  key_block_load(kv, hd, g, j, kt);
  if (!wide) {
    key_block_dots8(kt, qs, nh, hd, out, ld);
    return;
  }
  int h = 0;
  for (; h + 4 <= nh; h += 4) { /* four heads: four independent chains per key */
    const float *q0 = qs + h * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    key_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int d = 0; d < hd; d++) {
      key_vec k;
      memcpy(&k, kt + d * KEY_BLOCK, sizeof k);
      a0 = a0 + q0[d] * k;
      a1 = a1 + q1[d] * k;
      a2 = a2 + q2[d] * k;
      a3 = a3 + q3[d] * k;
    }
    memcpy(out + h * ld, &a0, sizeof a0);
    memcpy(out + (h + 1) * ld, &a1, sizeof a1);
    memcpy(out + (h + 2) * ld, &a2, sizeof a2);
    memcpy(out + (h + 3) * ld, &a3, sizeof a3);
  }
  for (; h < nh; h++) {
    const float *q = qs + h * hd;
    key_vec a = {0};
    for (int d = 0; d < hd; d++) {
      key_vec k;
      memcpy(&k, kt + d * KEY_BLOCK, sizeof k);
      a = a + q[d] * k;
    }
    memcpy(out + h * ld, &a, sizeof a);
  }
}

/* MLX's sdpa on the CPU: q·bf16(scale) → bf16, scores → bf16, softmax in float32 → bf16,
 * Σ p·v → bf16. MLX's softmax takes its own exp (base/mlx_cpu_math.h), libm's expf differs
 * in the last bit now and then: mlx-cpu numerics use MLX's, the default libm's. Each head's
 * arithmetic is its own; heads of one group only share the conversion of their keys and values. */
/* Compiled for AVX-512, AVX2 and the baseline, chosen at load time: the same operations in
 * wider registers, so the same bits. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
attend_heads(const accel_kv_rows *kv, const float *qv, int nh, int hd, int g, float scale, int64_t lo, int64_t hi,
             float *scores, int mlx_cpu, float *out) {
  const float bscale = mx_round_bf16(scale);
  const int64_t n = hi - lo + 1;
  float qs[GROUP_MAX * 1024], acc[GROUP_MAX * 1024], vf[1024];
  for (int i = 0; i < nh * hd; i++) qs[i] = scale == 1.0f ? qv[i] : mx_round_bf16(qv[i] * bscale);
  int64_t j = lo;
  const int wide = __builtin_cpu_supports("avx512f"); /* (true in the AVX-512 clone alone) */
  for (; j + KEY_BLOCK - 1 <= hi; j += KEY_BLOCK) key_block_dots(kv, qs, nh, hd, g, j, scores + (j - lo), n, wide);
  for (; j <= hi; j++) {
    const uint16_t *kk = kv->key(kv->ctx, j) + g * hd;
    for (int h = 0; h < nh; h++) {
      float dot = 0.0f;
      for (int d = 0; d < hd; d++) dot += qs[h * hd + d] * mx_bf16_to_f32(kk[d]);
      scores[h * n + (j - lo)] = dot;
    }
  }
  float inv[GROUP_MAX];
  for (int h = 0; h < nh; h++) {
    float *sc = scores + h * n, mx = -INFINITY, sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
      sc[i] = mx_round_bf16(sc[i]);
      if (sc[i] > mx) mx = sc[i];
    }
    for (int64_t i = 0; i < n; i++) {
      const float e = mlx_cpu ? mx_mlxcpu_expf(sc[i] - mx) : expf(sc[i] - mx);
      sc[i] = e;
      sum += e;
    }
    inv[h] = 1.0f / sum;
  }
  memset(acc, 0, (size_t)(nh * hd) * sizeof(float));
  for (j = lo; j <= hi; j++) {
    const uint16_t *vv = kv->value(kv->ctx, j) + g * hd;
    for (int d = 0; d < hd; d++) vf[d] = mx_bf16_to_f32(vv[d]);
    for (int h = 0; h < nh; h++) {
      const float pr = mx_round_bf16(scores[h * n + (j - lo)] * inv[h]);
      float *a = acc + h * hd;
      for (int d = 0; d < hd; d++) a[d] += pr * vf[d];
    }
  }
  for (int i = 0; i < nh * hd; i++) out[i] = mx_round_bf16(acc[i]);
}

void accel_attend_group(const accel_kv_rows *kv, const float *qv, int nh, int hd, int g, float scale, int64_t lo,
                         int64_t hi, float *scores, int mlx_cpu, float *out) {
  for (int h0 = 0; h0 < nh; h0 += GROUP_MAX) {
    const int k = nh - h0 < GROUP_MAX ? nh - h0 : GROUP_MAX;
    attend_heads(kv, qv + (int64_t)h0 * hd, k, hd, g, scale, lo, hi, scores, mlx_cpu, out + (int64_t)h0 * hd);
  }
}

