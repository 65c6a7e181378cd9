/* Runs the one-launch decode attention of attention_cluster.cu (dk_attention_cluster, through
 * its real launcher) on host threads, a cluster's 8 blocks side by side (tests/gpu/emu:
 * EMU_CLUSTER, the cluster barrier and distributed shared memory emulated): a check of the
 * kernel's logic — each block's share of the keys, the sliding ring, GQA, blocks with no keys,
 * the statistics and partials exchanged between blocks, the output slices, the x-prep maxima,
 * o's activation prep with a fixed exponent (xmode 1 and 2 by turns, bit for bit what
 * prep_store makes of the output) and the counter left at zero — on a machine without a GPU.
 * Two kinds of case:
 *   - structure: q = 0 and one-hot V (key j → dim j mod hd), so every p is the same bf16(1/n)
 *     and each output is exactly (live keys on that dim) · p: every live key read once, no other;
 *   - values: random q, K, V against a direct attention with the reference path's rounding
 *     points; each head's output within 1 % of its largest value (the sums run in another
 *     order than the direct one's, so a bf16 rounding of a score may differ).
 * With the q/k/v post step inside (dk_att_post), random q|k|v partial sums: the cache's new row
 * within a bf16 step of a host post step and every other byte untouched (nothing written for a
 * KV-shared layer), the output against the direct attention on the host's q rows.
 * Every case runs with clusters of 8 blocks; built with -DACE_WIDE, with clusters of 16 (the
 * wide form the decoder runs on the sliding rings).
 * Build and run from the repository root (also a CTest):
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_CLUSTER -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/attention_cluster_emulate.cpp -o /tmp/ace -lm
 *   /tmp/ace [seed]
 */
#include "../../src/accel/cuda/attention_cluster.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "emu_rng.h"

/* ACE_WIDE: the form with clusters of 16 blocks, run by a pool as wide */
#ifdef ACE_WIDE
#define EMU_POOL_CL (2 * AC_CL)
#else
#define EMU_POOL_CL AC_CL
#endif
#define EMU_POOL_T AT_THREADS
#include "emu_cluster_pool.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static float fromb(uint16_t h) { return ck_bf16_to_f32(h); }

struct Case {
  int rep, nkv, hd, window, pos, keys; /* keys: the call's key bound (the window, or the capacity) */
  bool structure;
  int wide = 0; /* clusters of 16 blocks */
  /* the q/k/v post step inside the launch (dk_att_post): 1 writing the new position's K and V,
   * 2 a KV-shared layer (the cache as it is); with k_eq_v, v_norm, traditional RoPE */
  int post = 0, keqv = 0, vnorm = 0, trad = 0;
};

/* qp_head on the host: rmsnorm(rb(Σ partials)) · w, then RoPE of each live frequency, with the
 * kernel's rounding points (the sum of squares in another order: a value may move by one
 * bf16 step) */
static std::vector<float> host_head(const float *src, int ks, int64_t kstride, int hd, const float *w,
                                    const float *fr, float eps, int pos, int trad) {
  std::vector<float> yv((size_t)hd), sv((size_t)hd);
  double ss = 0;
  for (int i = 0; i < hd; i++) {
    float v = src[i];
    for (int s = 1; s < ks; s++) v += src[i + (int64_t)s * kstride];
    yv[(size_t)i] = rb(v);
    ss += (double)yv[(size_t)i] * yv[(size_t)i];
  }
  const float r = 1.0f / sqrtf((float)ss / (float)hd + eps);
  for (int i = 0; i < hd; i++) sv[(size_t)i] = rb(rb(yv[(size_t)i] * r) * w[i]);
  for (int j = 0; j < hd / 2; j++) rope_pair(sv.data(), j, hd / 2, fr[j], (float)pos, trad);
  return sv;
}

/* two bf16 values at most one step apart */
static bool near_bf16(uint16_t a, uint16_t b) { return a == b || (a ^ b) < 0x8000 && (a > b ? a - b : b - a) <= 1; }

/* Head h's output with the reference path's rounding points: q·bf16(scale) → bf16, scores →
 * bf16, p = bf16(exp(s − M)/Σ), Σ p·v → bf16 (sums in double). */
static std::vector<float> direct(const Case &c, const std::vector<float> &q, const std::vector<uint16_t> &K,
                                 const std::vector<uint16_t> &V, float scale, int h) {
  const int hd = c.hd, g = h / c.rep, first = c.window > 0 && c.pos - c.window + 1 > 0 ? c.pos - c.window + 1 : 0;
  const int64_t kvd = (int64_t)c.nkv * hd;
  auto row = [&](const std::vector<uint16_t> &X, int j) { return &X[(c.window > 0 ? j % c.window : j) * kvd + g * hd]; };
  std::vector<double> s;
  double m = -INFINITY, total = 0;
  for (int j = first; j <= c.pos; j++) {
    double a = 0;
    for (int d = 0; d < hd; d++) {
      const float qd = scale == 1.0f ? q[(size_t)h * hd + d] : rb(q[(size_t)h * hd + d] * rb(scale));
      a += (double)qd * fromb(row(K, j)[d]);
    }
    s.push_back(rb((float)a));
    m = fmax(m, s.back());
  }
  for (double v : s) total += exp(v - m);
  std::vector<double> o((size_t)hd, 0.0);
  for (int j = first; j <= c.pos; j++) {
    const double p = rb((float)(exp(s[(size_t)(j - first)] - m) / total));
    for (int d = 0; d < hd; d++) o[(size_t)d] += p * fromb(row(V, j)[d]);
  }
  std::vector<float> out((size_t)hd);
  for (int d = 0; d < hd; d++) out[(size_t)d] = rb((float)o[(size_t)d]);
  return out;
}

static int run_case(const Case &c) {
  const int nq = c.rep * c.nkv, hd = c.hd, nb = dk_attention_cluster_size(c.wide) * c.nkv;
  const int64_t kvd = (int64_t)c.nkv * hd, slots = c.window > 0 ? c.window : c.keys;
  const float scale = c.structure ? 1.0f : 1.0f / sqrtf((float)hd);
  std::vector<float> q((size_t)nq * hd);
  std::vector<uint16_t> K((size_t)(slots * kvd)), V((size_t)(slots * kvd));
  for (auto &x : q) x = c.structure ? 0.0f : rb(unit() * 4 - 2);
  /* every slot holds something, also those outside the live range (stale ring entries) */
  for (int64_t sl = 0; sl < slots; sl++)
    for (int64_t i = 0; i < kvd; i++) {
      const int d = (int)(i % hd);
      const int64_t j = c.window > 0 ? sl + ((c.pos - sl) / c.window) * c.window : sl; /* the slot's newest key */
      K[(size_t)(sl * kvd + i)] = ck_f32_to_bf16(c.structure ? unit() : unit() * 2 - 1);
      V[(size_t)(sl * kvd + i)] = ck_f32_to_bf16(c.structure ? (d == (int)(j % hd) && j <= c.pos ? 1.0f : 0.0f)
                                                             : unit() * 2 - 1);
    }
  /* the post step's inputs (a q|k|v product in two partial sums) and what it must make */
  const int ks = 2;
  const int64_t rows = (int64_t)nq * hd + (c.keqv ? 1 : 2) * kvd, kstride = rows + 3;
  std::vector<float> y, qn((size_t)hd), kn((size_t)hd), fr((size_t)hd / 2);
  std::vector<uint16_t> Kwant = K, Vwant = V;
  const float eps = 1e-6f;
  if (c.post) {
    y.resize((size_t)(ks * kstride));
    for (auto &x : y) x = unit() * 2 - 1;
    for (int i = 0; i < hd; i++) qn[(size_t)i] = 0.5f + unit(), kn[(size_t)i] = 0.5f + unit();
    for (int j = 0; j < hd / 2; j++) fr[(size_t)j] = j < hd / 8 ? powf(1e4f, -2.0f * (float)j / (float)hd) : 0.0f;
    for (int h = 0; h < nq; h++) {
      const std::vector<float> qh = host_head(&y[(size_t)h * hd], ks, kstride, hd, qn.data(), fr.data(), eps, c.pos, c.trad);
      for (int d = 0; d < hd; d++) q[(size_t)h * hd + d] = qh[(size_t)d];
    }
    const int64_t sl = c.window > 0 ? c.pos % c.window : c.pos;
    for (int g = 0; c.post == 1 && g < c.nkv; g++) {
      const float *kr = &y[(size_t)(nq * hd + g * hd)], *vr = c.keqv ? kr : kr + kvd;
      const std::vector<float> kh = host_head(kr, ks, kstride, hd, kn.data(), fr.data(), eps, c.pos, c.trad);
      double s2 = 0;
      std::vector<float> v((size_t)hd);
      for (int i = 0; i < hd; i++) {
        v[(size_t)i] = rb(vr[i] + vr[i + kstride]);
        s2 += (double)v[(size_t)i] * v[(size_t)i];
      }
      const float rv = c.vnorm ? 1.0f / sqrtf((float)s2 / (float)hd + eps) : 1.0f;
      for (int i = 0; i < hd; i++) {
        Kwant[(size_t)(sl * kvd + g * hd + i)] = ck_f32_to_bf16(kh[(size_t)i]);
        Vwant[(size_t)(sl * kvd + g * hd + i)] = ck_f32_to_bf16(c.vnorm ? v[(size_t)i] * rv : v[(size_t)i]);
      }
    }
    /* stale bytes where the kernel must write */
    for (int64_t i = 0; c.post == 1 && i < kvd; i++) K[(size_t)(sl * kvd + i)] = V[(size_t)(sl * kvd + i)] = 0x7fc1;
  }
  const dk_att_post post = {y.data(), ks, kstride, c.keqv, c.trad, c.vnorm, eps, qn.data(), kn.data(), fr.data(),
                            c.post == 1 ? K.data() : NULL, c.post == 1 ? V.data() : NULL};
  std::vector<uint16_t> att((size_t)nq * hd, 0xffff);
  const int namax = (nq * hd + 2047) / 2048;
  std::vector<float> amax((size_t)namax + 2, 123.0f), bmax((size_t)nb, -1.0f);
  unsigned count = 0;
  int pos = c.pos;
  /* o's prep (xmode 1 and 2 by turns) where the output is whole 32-value slices: |att| ≤ 1 here */
  static int turn;
  const int xmode = (nq * hd) % 32 ? 0 : 1 + (turn++ & 1), e = xmode == 1 ? 13 : 0;
  std::vector<uint16_t> xp((size_t)nq * hd + 32, 0xffff);
  int xexp = 777;
  const dk_att_prep prep = {xp.data(), &xexp, e, xmode};
  const int rc = dk_attention_cluster(c.post ? NULL : q.data(), K.data(), V.data(), nq, c.nkv, hd, scale, &pos, c.window,
                                      c.keys, c.wide, att.data(), amax.data(), namax, bmax.data(), &count,
                                      xmode ? &prep : NULL, c.post ? &post : NULL, NULL);
  if (rc) {
    printf("FAIL launch rc=%d (rep %d nkv %d hd %d keys %d)\n", rc, c.rep, c.nkv, hd, c.keys);
    return 1;
  }
  int bad = count != 0; /* the last block leaves the counter clean for the next step */
  if (c.post) { /* the cache: the new row as the post step makes it, every other byte as it was */
    int nk = 0;
    for (size_t i = 0; i < K.size(); i++) nk += !near_bf16(K[i], Kwant[i]) || !near_bf16(V[i], Vwant[i]);
    if (nk) {
      printf("  cache: %d values other than the post step's\n", nk);
      bad = 1;
    }
    if (c.post == 1) { /* the attention runs on the written cache, and direct() below reads it */
      Kwant = K;
      Vwant = V;
    }
  }
  double worst = 0;
  for (int h = 0; h < nq; h++) {
    const std::vector<float> ref = direct(c, q, Kwant, Vwant, scale, h);
    float mx = 0;
    for (float v : ref) mx = fmaxf(mx, fabsf(v));
    for (int d = 0; d < hd; d++) {
      const float got = fromb(att[(size_t)h * hd + d]);
      const double e = fabs((double)got - ref[(size_t)d]);
      if (c.structure ? got != ref[(size_t)d] : !(e <= 0.01 * mx + 1e-30)) { /* (a NaN fails) */
        if (!bad) printf("  head %d dim %d: %g against %g\n", h, d, got, ref[(size_t)d]);
        bad = 1;
      }
      if (mx > 0) worst = fmax(worst, e / mx);
    }
  }
  float m = 0;
  for (uint16_t b : att) m = fmaxf(m, fabsf(fromb(b)));
  bool ok = amax[0] == m && amax[(size_t)namax] == 123.0f && amax[(size_t)namax + 1] == 123.0f;
  for (int i = 1; i < namax; i++) ok = ok && amax[(size_t)i] == 0.0f;
  if (!ok) {
    printf("  x-prep maxima: amax[0] %g against max |att| %g (namax %d)\n", amax[0], m, namax);
    bad = 1;
  }
  if (xmode) {
    std::vector<uint16_t> want((size_t)nq * hd + 32, 0xffff);
    for (int i = 0; i < nq * hd; i++) prep_store(want.data(), i, att[(size_t)i], e, xmode);
    if (xexp != e || want != xp) {
      printf("  o's prep (xmode %d): exponent %d against %d%s\n", xmode, xexp, e, want != xp ? ", values differ" : "");
      bad = 1;
    }
  }
  printf("%s rep %d nkv %d hd %4d window %4d pos %4d keys %4d %-9s %-16s%s worst %.2e\n", bad ? "FAIL" : "ok  ", c.rep,
         c.nkv, hd, c.window, c.pos, c.keys, c.structure ? "structure" : "values",
         c.wide ? "clusters of 16" : "clusters of 8",
         c.post == 1 ? " post" : c.post == 2 ? " post (shared KV)" : "", worst);
  return bad;
}


int main(int argc, char **argv) {
  if (argc > 1) g_rng = strtoull(argv[1], NULL, 0) | 1;
  emu_pool_start();

  /* the 31B's sliding layer (rep 2, head dim 256, a ring) and full layer (rep 8, 512) scaled
   * down in heads, and other group sizes and head dims; positions from the first (seven
   * blocks without keys) to a wrapped ring, key bounds up to 8 · 256 */
  const Case cases[] = {
      {2, 2, 256, 64, 0, 64, true},     {2, 2, 256, 64, 5, 64, true},      {2, 2, 256, 64, 63, 64, true},
      {2, 2, 256, 64, 200, 64, true},   {2, 1, 256, 1024, 1500, 1024, true}, {8, 1, 512, 0, 100, 700, true},
      {1, 3, 128, 0, 300, 400, true},   {4, 2, 128, 0, 129, 200, true},    {2, 2, 256, 64, 5, 64, false},
      {2, 2, 256, 64, 200, 64, false},  {2, 1, 256, 1024, 1500, 1024, false}, {8, 1, 512, 0, 100, 700, false},
      {1, 3, 128, 0, 300, 400, false},  {4, 2, 128, 0, 129, 200, false},   {2, 1, 64, 0, 2047, 2048, false},
      /* the post step inside: a ring with V norm, k_eq_v with GQA 8, a KV-shared layer,
       * traditional RoPE, the first position */
      {2, 2, 256, 64, 200, 64, false, 0, 1, 0, 1, 0},   {8, 1, 512, 0, 100, 700, false, 0, 1, 1, 1, 0},
      {4, 2, 128, 0, 129, 200, false, 0, 2, 0, 1, 0},   {1, 3, 128, 0, 300, 400, false, 0, 1, 0, 0, 1},
      {2, 2, 256, 64, 0, 64, false, 0, 1, 0, 1, 0},
  };
  /* the rows staged in shared memory by bulk copies (the newest row by plain loads) */
  constexpr size_t NC = sizeof cases / sizeof cases[0];
  Case all[NC];
#ifdef ACE_WIDE
  const int wide = 1;
#else
  const int wide = 0;
#endif
  for (size_t i = 0; i < NC; i++) all[i] = cases[i], all[i].wide = wide;
  return emu_run_cases(all, run_case);
}
