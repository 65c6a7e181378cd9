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
#include <string.h>

#include <algorithm>
#include <vector>

#include "emu_attention_ref.h"
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
  int vr = 0;   /* > 0: the cache in the K-from-V layout (kv_layout.h) with vr moved pairs per half */
};

static int run_case(const Case &c) {
  const int nq = c.rep * c.nkv, hd = c.hd, nb = dk_attention_cluster_size(c.wide) * c.nkv;
  const int64_t kvd = (int64_t)c.nkv * hd, slots = c.window > 0 ? ck_ring(c.window) : c.keys;
  const float scale = c.structure ? 1.0f : 1.0f / sqrtf((float)hd);
  std::vector<float> q((size_t)nq * hd);
  std::vector<uint16_t> K((size_t)(slots * kvd)), V((size_t)(slots * kvd));
  for (auto &x : q) x = c.structure ? 0.0f : rb(unit() * 4 - 2);
  /* every slot holds something, also those outside the live range (stale ring entries) */
  for (int64_t sl = 0; sl < slots; sl++)
    for (int64_t i = 0; i < kvd; i++) {
      const int d = (int)(i % hd);
      const int64_t j = c.window > 0 ? sl + ((c.pos - sl) / slots) * slots : sl; /* the slot's newest key */
      K[(size_t)(sl * kvd + i)] = ck_f32_to_bf16(c.structure ? unit() : unit() * 2 - 1);
      V[(size_t)(sl * kvd + i)] = ck_f32_to_bf16(c.structure ? (d == (int)(j % hd) && j <= c.pos ? 1.0f : 0.0f)
                                                             : unit() * 2 - 1);
    }
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
  /* K from V: one array in that layout, each head's row K at the moved dims and V at the others,
   * V's moved dims in the tail; K takes V's values at the unmoved dims, so the direct attention on
   * the plain arrays reads what the kernel reads */
  const dk_kv_layout L = c.vr ? dk_kv_from_v(c.nkv, hd, c.vr) : dk_kv_plain(c.nkv, hd);
  std::vector<uint16_t> C;
  if (c.vr) {
    C.assign((size_t)(slots * L.ps), 0x7fc1); /* NaN where nothing should read */
    for (int64_t sl = 0; sl < slots; sl++)
      for (int g = 0; g < c.nkv; g++)
        for (int d = 0; d < hd; d++) {
          const size_t i = (size_t)(sl * kvd + (int64_t)g * hd + d);
          if (!dk_kv_moved(L, hd, d)) K[i] = V[i];
          C[(size_t)(sl * L.ps + (int64_t)g * hd + d)] = K[i];
          C[(size_t)(sl * L.ps + dk_kv_vcol(L, c.nkv, hd, g, d))] = V[i];
        }
  }
  const int rc = dk_attention_cluster(q.data(), c.vr ? C.data() : K.data(), c.vr ? C.data() : V.data(), nq, c.nkv, hd,
                                      L, scale, &pos, c.window, c.keys, c.wide, att.data(), amax.data(), namax,
                                      bmax.data(), &count, xmode ? &prep : NULL, NULL);
  if (rc) {
    printf("FAIL launch rc=%d (rep %d nkv %d hd %d keys %d)\n", rc, c.rep, c.nkv, hd, c.keys);
    return 1;
  }
  int bad = count != 0; /* the last block leaves the counter clean for the next step */
  double worst = 0;
  for (int h = 0; h < nq; h++) {
    const std::vector<float> ref =
        emu_attention_ref(c.rep, c.nkv, c.hd, c.window, q.data(), K.data(), V.data(), c.pos, scale, h);
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
  printf("%s rep %d nkv %d hd %4d window %4d pos %4d keys %4d %-9s %-16s%s worst %.2e\n", bad ? "FAIL" : "ok  ",
         c.rep, c.nkv, hd, c.window, c.pos, c.keys, c.structure ? "structure" : "values",
         c.wide ? "clusters of 16" : "clusters of 8", c.vr ? " K from V" : "", worst);
  return bad;
}

/* A batched step's rows (dk_attention_cluster_rows): three rows on slots 2, 0, 1 of one array
 * of caches, each at its own position; row z must be, bit for bit, the one-row launch on its
 * slot's cache at its position. */
static int run_rows(int rep, int nkv, int hd, int window, int keys, int wide) {
  const int nq = rep * nkv, R = 3, slot_of[R] = {2, 0, 1}, pos_of[R] = {window > 0 ? 3 * window / 2 : keys - 1, 0, 17};
  const int64_t kvd = (int64_t)nkv * hd, slots = window > 0 ? ck_ring(window) : keys, lane = slots * kvd + 8;
  const float scale = 1.0f / sqrtf((float)hd);
  std::vector<float> q((size_t)(R * nq * hd));
  std::vector<uint16_t> K((size_t)(R * lane)), V((size_t)(R * lane));
  for (auto &x : q) x = rb(unit() * 4 - 2);
  for (auto &x : K) x = ck_f32_to_bf16(unit() * 2 - 1);
  for (auto &x : V) x = ck_f32_to_bf16(unit() * 2 - 1);
  const dk_kv_layout L = dk_kv_plain(nkv, hd);
  std::vector<uint16_t> att((size_t)(R * nq * hd), 0xffff), one((size_t)(nq * hd));
  const dk_rows rw = {slot_of, lane, (int64_t)nq * hd, (int64_t)nq * hd};
  int rc = dk_attention_cluster_rows(q.data(), K.data(), V.data(), nq, nkv, hd, L, scale, pos_of, window, keys, wide,
                                     att.data(), NULL, 0, NULL, NULL, NULL, &rw, R, NULL);
  int bad = rc != 0;
  for (int z = 0; z < R && !rc; z++) {
    int pos = pos_of[z];
    const int64_t off = slot_of[z] * lane;
    std::fill(one.begin(), one.end(), (uint16_t)0xffff);
    rc = dk_attention_cluster(q.data() + (size_t)z * nq * hd, K.data() + off, V.data() + off, nq, nkv, hd, L, scale,
                              &pos, window, keys, wide, one.data(), NULL, 0, NULL, NULL, NULL, NULL);
    if (rc || memcmp(one.data(), att.data() + (size_t)z * nq * hd, one.size() * 2)) {
      printf("  row %d (slot %d, position %d) differs from its one-row launch\n", z, slot_of[z], pos_of[z]);
      bad = 1;
    }
  }
  printf("%s rows: rep %d nkv %d hd %4d window %4d keys %4d, rows on slots 2 0 1\n", bad ? "FAIL" : "ok  ", rep, nkv, hd,
         window, keys);
  return bad;
}

/* --quick (the wide form's default CTest run): every second case (the others report as skipped
 * passes); the full sweep runs under the label emulator-full */
static bool g_quick;
static int run_quick(const Case &c) {
  static int i = 0;
  return g_quick && i++ % 2 ? 0 : run_case(c);
}

int main(int argc, char **argv) {
  g_quick = argc > 1 && !strcmp(argv[1], "--quick");
  if (argc > 1 + g_quick) g_rng = strtoull(argv[1 + g_quick], NULL, 0) | 1;
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
      /* K from V (the 31B's full layer while few keys are live; one-hot V through the tail) */
      {8, 1, 512, 0, 200, 256, true, 0, 64}, {8, 2, 512, 0, 100, 256, false, 0, 64},
      {4, 2, 128, 0, 129, 200, false, 0, 16},
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
  const int rows_bad = run_rows(2, 2, 256, 64, 64, wide) + run_rows(4, 1, 128, 0, 200, wide);
  return emu_run_cases(all, run_quick) || rows_bad;
}
