/* The decode attention of one query head with the reference path's rounding points, for the
 * attention kernels' host emulations: q·bf16(scale) → bf16 (q as it is when scale is 1), scores
 * → bf16, p = bf16(exp(s − M)/Σ), Σ p·v → bf16, the sums in double. K and V: the cache's rows of
 * nkv heads of hd, position j in row j (or, with a window, j % ck_ring(window)); head h reads KV
 * head h / rep over the live keys at pos. Include after the kernel source (rb, ck_ring,
 * ck_bf16_to_f32). */
#ifndef EMU_ATTENTION_REF_H
#define EMU_ATTENTION_REF_H
#include <math.h>
#include <stdint.h>

#include <vector>

static std::vector<float> emu_attention_ref(int rep, int nkv, int hd, int window, const float *q, const uint16_t *K,
                                            const uint16_t *V, int pos, float scale, int h) {
  const int g = h / rep, first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int64_t kvd = (int64_t)nkv * hd;
  auto row = [&](const uint16_t *X, int j) { return X + (window > 0 ? j % ck_ring(window) : j) * kvd + g * hd; };
  std::vector<double> s;
  double m = -INFINITY, total = 0;
  for (int j = first; j <= pos; j++) {
    double a = 0;
    for (int d = 0; d < hd; d++) {
      const float qd = scale == 1.0f ? q[(size_t)h * hd + d] : rb(q[(size_t)h * hd + d] * rb(scale));
      a += (double)qd * ck_bf16_to_f32(row(K, j)[d]);
    }
    s.push_back(rb((float)a));
    m = fmax(m, s.back());
  }
  for (double v : s) total += exp(v - m);
  std::vector<double> o((size_t)hd, 0.0);
  for (int j = first; j <= pos; j++) {
    const double p = rb((float)(exp(s[(size_t)(j - first)] - m) / total));
    for (int d = 0; d < hd; d++) o[(size_t)d] += p * ck_bf16_to_f32(row(V, j)[d]);
  }
  std::vector<float> out((size_t)hd);
  for (int d = 0; d < hd; d++) out[(size_t)d] = rb((float)o[(size_t)d]);
  return out;
}
#endif
