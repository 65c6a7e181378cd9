/* Blocks whose rotated unit vector lands exactly on a codebook midpoint (the nearest-centroid
 * tie), for tests/test_kv_codec.c and tests/gpu/kv_codec_emulate.cpp. Every value is a power
 * of two, ±1 or 0, so the block is exact in bf16.
 *
 * Value 2p is ±1 and value 2p+1 is 0, so r_2p = fl(c_p·u) and r_2p+1 = fl(s_p·u) with
 * u = fl(±1 / n). The search picks the float t with fl(|coef|·t) = |m|, then n with
 * fl(1/n) = t, then S with fl(√S) = n, and writes S − 1 (exact) as a sum of squares of powers
 * of two: one value 2^(e/2) for a bit 2^e with e even, two values 2^((e−1)/2) side by side
 * (the first two of a lane, added first) for e odd. Every partial sum of the encoder's norm is
 * then a multiple of S's last bit below S, so exact in any order: ‖x‖² = S and n as chosen. */
#ifndef MLXRT_TESTS_KV_CODEC_TIES_H
#define MLXRT_TESTS_KV_CODEC_TIES_H

#include <math.h>
#include <string.h>

#include "accel/kv_codec.h"

/* x[128] with r[2p + odd] == m exactly (m a nonzero midpoint; the coefficient is c_p for odd 0,
 * s_p for odd 1). Returns 1, or 0 when the search finds no such block for this p. */
static int kvc_tie_block(int p, int odd, float m, float *x) {
  const kvc_tables *t = kvc_tables_get();
  const float coef = odd ? t->sin[p] : t->cos[p], ac = fabsf(coef), am = fabsf(m);
  if (!(am < ac) || m == 0.0f) return 0;
  float t0 = (float)((double)am / ac);
  for (int i = 0; i < 4; i++) t0 = nextafterf(t0, 0.0f);
  for (int it = 0; it < 9; it++, t0 = nextafterf(t0, 2.0f)) {
    if (ac * t0 != am) continue;
    float n0 = (float)(1.0 / (double)t0);
    for (int i = 0; i < 4; i++) n0 = nextafterf(n0, 0.0f);
    for (int in = 0; in < 9; in++, n0 = nextafterf(n0, 1e30f)) {
      if (1.0f / n0 != t0) continue;
      float S = (float)((double)n0 * n0);
      for (int i = 0; i < 4; i++) S = nextafterf(S, 0.0f);
      for (int is = 0; is < 9; is++, S = nextafterf(S, 1e30f)) {
        if (sqrtf(S) != n0 || S < 1.0f) continue;
        memset(x, 0, KVC_BLOCK * sizeof *x);
        x[2 * p] = (m > 0) == (coef > 0) ? 1.0f : -1.0f;
        float rest = S - 1.0f;
        int lane = 0;
        for (int e = 30; e >= -149 && rest > 0.0f; e--) {
          const float bit = ldexpf(1.0f, e);
          if (rest < bit) continue;
          rest -= bit;
          if (lane == p / 2) lane++;
          if (lane >= KVC_LANES) return 0;
          if (e % 2 == 0) {
            x[4 * lane] = ldexpf(1.0f, e / 2);
          } else {
            x[4 * lane] = x[4 * lane + 1] = ldexpf(1.0f, (e - 1) / 2);
          }
          lane++;
        }
        return 1;
      }
    }
  }
  return 0;
}

#endif
