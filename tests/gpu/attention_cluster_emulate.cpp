/* Runs the one-launch decode attention of attention_cluster.cu (dk_attention_cluster, through
 * its real launcher) on host threads, a cluster's 8 blocks side by side (tests/gpu/emu:
 * EMU_CLUSTER, the cluster barrier and distributed shared memory emulated): a check of the
 * kernel's logic — each block's share of the keys, the sliding ring, GQA, blocks with no keys,
 * the statistics and partials exchanged between blocks, the output slices, the x-prep maxima
 * and the counter left at zero — on a machine without a GPU. Three kinds of case:
 *   - structure: q = 0 and one-hot V (key j → dim j mod hd), so every p is the same bf16(1/n)
 *     and each output is exactly (live keys on that dim) · p: every live key read once, no other;
 *   - values: random q, K, V against a direct attention with the reference path's rounding
 *     points; each head's output within 1 % of its largest value (the sums run in another
 *     order than the direct one's, so a bf16 rounding of a score may differ);
 *   - post: the kernel with the q/k/v post step inside (random q|k|v product, k splits, the
 *     ring, k = v, v_norm, traditional and partial RoPE) against qkv_post.cu's kernel followed
 *     by the kernel without it: the output, the maxima and both caches bit for bit.
 * Build and run from the repository root (also a CTest):
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_CLUSTER -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/attention_cluster_emulate.cpp -o /tmp/ace -lm
 *   /tmp/ace [seed]
 */
#include "../../src/accel/cuda/attention_cluster.cu"
#include "../../src/accel/cuda/qkv_post.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "emu_rng.h"

extern "C" int ck_pdl_enabled(void) { return 0; }

#define EMU_POOL_CL AC_CL
#define EMU_POOL_T AT_THREADS
#include "emu_cluster_pool.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static float fromb(uint16_t h) { return ck_bf16_to_f32(h); }

struct Case {
  int rep, nkv, hd, window, pos, keys; /* keys: the call's key bound (the window, or the capacity) */
  bool structure;
};

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
  const int nq = c.rep * c.nkv, hd = c.hd, nb = AC_CL * c.nkv;
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
  std::vector<uint16_t> att((size_t)nq * hd, 0xffff);
  const int namax = (nq * hd + 2047) / 2048;
  std::vector<float> amax((size_t)namax + 2, 123.0f), bmax((size_t)nb, -1.0f);
  unsigned count = 0;
  int pos = c.pos;
  const int rc = dk_attention_cluster(q.data(), NULL, K.data(), V.data(), nq, c.nkv, hd, scale, &pos, c.window, c.keys,
                                      att.data(), amax.data(), namax, bmax.data(), &count, NULL);
  if (rc) {
    printf("FAIL launch rc=%d (rep %d nkv %d hd %d keys %d)\n", rc, c.rep, c.nkv, hd, c.keys);
    return 1;
  }
  int bad = count != 0; /* the last block leaves the counter clean for the next step */
  double worst = 0;
  for (int h = 0; h < nq; h++) {
    const std::vector<float> ref = direct(c, q, K, V, scale, h);
    float mx = 0;
    for (float v : ref) mx = fmaxf(mx, fabsf(v));
    for (int d = 0; d < hd; d++) {
      const float got = fromb(att[(size_t)h * hd + d]);
      const double e = fabs((double)got - ref[(size_t)d]);
      if (c.structure ? got != ref[(size_t)d] : e > 0.01 * mx + 1e-30) {
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
  printf("%s rep %d nkv %d hd %4d window %4d pos %4d keys %4d %-9s worst %.2e\n", bad ? "FAIL" : "ok  ", c.rep, c.nkv,
         hd, c.window, c.pos, c.keys, c.structure ? "structure" : "values", worst);
  return bad;
}

struct PostCase {
  int rep, nkv, hd, window, pos, keys, ks, k_eq_v, v_norm, trad, partial;
  bool scaled;
};

/* The post step inside the kernel against qkv_post_kernel then the kernel without it. */
static int run_post_case(const PostCase &c) {
  const int nq = c.rep * c.nkv, hd = c.hd, nb = AC_CL * c.nkv, heads = nq + c.nkv;
  const int64_t kvd = (int64_t)c.nkv * hd, slots = c.window > 0 ? c.window : c.keys;
  const int64_t rows = (int64_t)nq * hd + (c.k_eq_v ? 1 : 2) * kvd, kstride = rows + 8;
  const float scale = c.scaled ? 1.0f / sqrtf((float)hd) : 1.0f, eps = 1e-6f;
  std::vector<float> y((size_t)(kstride * c.ks)), qn((size_t)hd), kn((size_t)hd), fr((size_t)hd / 2);
  for (auto &x : y) x = unit() * 4 - 2;
  for (auto &x : qn) x = rb(unit() * 2);
  for (auto &x : kn) x = rb(unit() * 2);
  for (int j = 0; j < hd / 2; j++) /* partial: the upper frequencies zero (proportional partial RoPE) */
    fr[(size_t)j] = c.partial && j >= hd / 8 ? 0.0f : powf(10000.0f, -2.0f * (float)j / (float)hd);
  std::vector<uint16_t> K0((size_t)(slots * kvd)), V0((size_t)(slots * kvd));
  for (auto &x : K0) x = ck_f32_to_bf16(unit() * 2 - 1);
  for (auto &x : V0) x = ck_f32_to_bf16(unit() * 2 - 1);
  const dk_post pp = {y.data(), c.ks, kstride, nq, c.k_eq_v, qn.data(), kn.data(), fr.data(), c.trad, c.v_norm, eps};
  const int namax = (nq * hd + 2047) / 2048;
  int pos = c.pos;
  struct Out {
    std::vector<uint16_t> K, V, att;
    std::vector<float> amax, bmax;
    unsigned count = 0;
  } ref, got;
  for (Out *o : {&ref, &got}) {
    o->K = K0, o->V = V0;
    o->att.assign((size_t)nq * hd, 0xffff);
    o->amax.assign((size_t)namax, 123.0f);
    o->bmax.assign((size_t)nb, -1.0f);
  }
  /* the reference: qkv_post_kernel over its heads (a grid padded to whole clusters; the
   * padding blocks do nothing), then the kernel reading q */
  std::vector<float> q((size_t)nq * hd, NAN);
  float *qd = q.data();
  uint16_t *rk = ref.K.data(), *rv = ref.V.data();
  const std::function<void()> post_body = [&]() {
    if ((int)blockIdx.x < heads)
      qkv_post_kernel(y.data(), c.ks, kstride, nq, c.nkv, hd, c.k_eq_v, qn.data(), kn.data(), fr.data(), c.trad,
                      c.v_norm, eps, &pos, c.window, qd, rk, rv);
  };
  int rc = emu_run_grid(dim3((unsigned)((heads + AC_CL - 1) / AC_CL * AC_CL)), dim3(QP_T), (size_t)(hd + 32) * 4,
                        post_body);
  rc = rc ? rc
          : dk_attention_cluster(q.data(), NULL, rk, rv, nq, c.nkv, hd, scale, &pos, c.window, c.keys, ref.att.data(),
                                 ref.amax.data(), namax, ref.bmax.data(), &ref.count, NULL);
  rc = rc ? rc
          : dk_attention_cluster(NULL, &pp, got.K.data(), got.V.data(), nq, c.nkv, hd, scale, &pos, c.window, c.keys,
                                 got.att.data(), got.amax.data(), namax, got.bmax.data(), &got.count, NULL);
  if (rc) {
    printf("FAIL post launch rc=%d (rep %d nkv %d hd %d keys %d)\n", rc, c.rep, c.nkv, hd, c.keys);
    return 1;
  }
  int nd = 0;
  for (size_t i = 0; i < ref.att.size(); i++) nd += ref.att[i] != got.att[i];
  const bool kv_same = ref.K == got.K && ref.V == got.V, kv_moved = ref.K != K0 && ref.V != V0;
  const int bad = nd || !kv_same || !kv_moved || ref.amax != got.amax || got.count || ref.count;
  printf("%s post rep %d nkv %d hd %4d window %4d pos %4d keys %4d ks %d%s%s%s%s%s: %d outputs differ%s%s%s\n",
         bad ? "FAIL" : "ok  ", c.rep, c.nkv, hd, c.window, c.pos, c.keys, c.ks, c.k_eq_v ? " k=v" : "",
         c.v_norm ? " v_norm" : "", c.trad ? " trad" : "", c.partial ? " partial" : "", c.scaled ? " scaled" : "", nd,
         kv_same ? "" : ", caches differ", kv_moved ? "" : ", no new row", ref.amax != got.amax ? ", maxima differ" : "");
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
  };
  int fails = 0, n = 0;
  for (const Case &c : cases) {
    fails += run_case(c);
    n++;
  }
  /* the post step: the 31B's two layer shapes scaled down, the new position in the first, a
   * middle and the last block, the ring wrapped, k splits, k = v, v_norm, RoPE variants */
  const PostCase posts[] = {
      {2, 2, 256, 64, 0, 64, 1, 0, 1, 0, 0, true},    {2, 2, 256, 64, 5, 64, 1, 0, 1, 0, 0, true},
      {2, 2, 256, 64, 63, 64, 2, 0, 0, 1, 0, true},   {2, 2, 256, 64, 200, 64, 1, 0, 1, 0, 1, true},
      {8, 1, 512, 0, 100, 700, 1, 1, 1, 0, 1, true},  {8, 1, 512, 0, 0, 700, 3, 1, 0, 0, 0, false},
      {4, 2, 128, 0, 129, 200, 1, 0, 0, 1, 0, true},  {1, 3, 128, 0, 300, 400, 2, 0, 1, 0, 0, false},
      {2, 1, 256, 1024, 1500, 1024, 1, 0, 1, 0, 0, true},
  };
  for (const PostCase &c : posts) {
    fails += run_post_case(c);
    n++;
  }
  emu_pool_stop();
  printf("%d passed, %d failed\n", n - fails, fails);
  return fails ? 1 : 0;
}
