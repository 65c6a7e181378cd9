/* Runs the batched step's streaming decode attention (attention_stream.cu,
 * dk_attention_stream_rows, through its real launcher) on the host, each block's threads as
 * fibers (tests/gpu/emu): a check of the kernel's logic on a machine without a GPU — the ring of
 * staged chunks (K chunks, then V chunks, each stage reused on its mbarrier's next phase, the
 * copies of the keys before the newest issued ahead of the predecessor wait), the sliding ring's
 * slots, GQA, the p·v groups, the K-from-V layout, scores in global scratch, and the rows' slots
 * and positions. Three kinds of case:
 *   - structure: q = 0 and one-hot V (key j → dim j mod hd), so every p is the same bf16(1/n)
 *     and each output is exactly (live keys on that dim) · p: every live key read once, no other;
 *   - values: random q, K, V against a direct attention with the reference path's rounding
 *     points, each head's output within 1 % of its largest value (the sums run in another order
 *     than the direct one's, so a bf16 rounding of a score may differ);
 *   - rows: several rows on permuted slots at their own positions, each bit for bit the same row
 *     launched alone, and the rows reversed giving the same bits.
 * With -DEMU_CLUSTER -DAST_SPLIT (CTest attention_stream_emulate_split) the same checks run the
 * split form (dk_attention_stream_split_rows: a cluster of 4 blocks per row and KV head, the
 * blocks side by side on host threads) on the plain cases.
 * Build and run from the repository root (also a CTest):
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/attention_stream_emulate.cpp -o /tmp/ase -lm
 *   /tmp/ase [seed]
 */
#include "../../src/accel/cuda/attention_stream.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "emu_attention_ref.h"
#include "emu_rng.h"
#ifdef AST_SPLIT
#define EMU_POOL_CL ST_SPLIT
#define EMU_POOL_T ST_THREADS
#include "emu_cluster_pool.h"
/* the split launcher (no global scores: its shapes keep them in shared memory) */
static int launch(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd, dk_kv_layout kv,
                  float scale, const int *pos, int window, int64_t keys, float *, uint16_t *att, const dk_rows *rows,
                  int nrows) {
  return dk_attention_stream_split_rows(q, kc, vc, nq, nkv, hd, kv, scale, pos, window, keys, att, rows, nrows, NULL);
}
#else
#include "emu_cases.h"
#include "emu_block_runner.h"
static int launch(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv, int hd, dk_kv_layout kv,
                  float scale, const int *pos, int window, int64_t keys, float *scores, uint16_t *att,
                  const dk_rows *rows, int nrows) {
  return dk_attention_stream_rows(q, kc, vc, nq, nkv, hd, kv, scale, pos, window, keys, scores, att, rows, nrows, NULL);
}
#endif

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static float fromb(uint16_t h) { return ck_bf16_to_f32(h); }

struct Case {
  int rep, nkv, hd, window, keys; /* keys: the call's key bound (the window, or the capacity) */
  std::vector<int> pos;           /* one row per position, on slots in reverse order */
  bool structure;
  int vr = 0; /* > 0: the cache in the K-from-V layout (kv_layout.h) with vr moved pairs per half */
};

static int run_case(const Case &c) {
  const int nq = c.rep * c.nkv, hd = c.hd, R = (int)c.pos.size();
  const int64_t kvd = (int64_t)c.nkv * hd, slots = c.window > 0 ? ck_ring(c.window) : c.keys;
  const int64_t lane = slots * kvd + 64; /* one slot's cache; 128 bytes between slots' */
  const float scale = c.structure ? 1.0f : 1.0f / sqrtf((float)hd);
  std::vector<float> q((size_t)R * nq * hd);
  std::vector<uint16_t> K((size_t)(R * lane), 0x7fc1), V((size_t)(R * lane), 0x7fc1); /* NaN between slots */
  std::vector<int> slot((size_t)R), pos = c.pos;
  for (int z = 0; z < R; z++) slot[(size_t)z] = R - 1 - z;
  for (auto &x : q) x = c.structure ? 0.0f : rb(unit() * 4 - 2);
  /* every slot of the cache holds something, also those outside the live range (stale ring
   * entries), which must not be read */
  for (int z = 0; z < R; z++) {
    const int64_t off = slot[(size_t)z] * lane;
    for (int64_t sl = 0; sl < slots; sl++)
      for (int64_t i = 0; i < kvd; i++) {
        const int d = (int)(i % hd), p = pos[(size_t)z];
        const int64_t j = c.window > 0 ? sl + ((p - sl) / slots) * slots : sl; /* the slot's newest key */
        K[(size_t)(off + sl * kvd + i)] = ck_f32_to_bf16(c.structure ? unit() : unit() * 2 - 1);
        V[(size_t)(off + sl * kvd + i)] =
            ck_f32_to_bf16(c.structure ? (d == (int)(j % hd) && j <= p ? 1.0f : 0.0f) : unit() * 2 - 1);
      }
  }
  /* K from V: one array in that layout (its own slot pitch), each head's row K at the moved dims
   * and V at the others, V's moved dims in the tail; K takes V's values at the unmoved dims, so
   * the direct attention on the plain arrays reads what the kernel reads */
  const dk_kv_layout L = c.vr ? dk_kv_from_v(c.nkv, hd, c.vr) : dk_kv_plain(c.nkv, hd);
  const int64_t clane = slots * L.ps + 64;
  std::vector<uint16_t> C;
  if (c.vr) {
    C.assign((size_t)(R * clane), 0x7fc1); /* NaN where nothing should read */
    for (int64_t sl = 0; sl < R * slots; sl++) {
      const int64_t zs = sl / slots, ps = sl % slots;
      for (int g = 0; g < c.nkv; g++)
        for (int d = 0; d < hd; d++) {
          const size_t i = (size_t)(zs * lane + ps * kvd + (int64_t)g * hd + d);
          if (!dk_kv_moved(L, hd, d)) K[i] = V[i];
          C[(size_t)(zs * clane + ps * L.ps + (int64_t)g * hd + d)] = K[i];
          C[(size_t)(zs * clane + ps * L.ps + dk_kv_vcol(L, c.nkv, hd, g, d))] = V[i];
        }
    }
  }
  const uint16_t *kc = c.vr ? C.data() : K.data(), *vc = c.vr ? C.data() : V.data();
  const int64_t qd = (int64_t)nq * hd, pitch = c.vr ? clane : lane;
  const dk_rows rw = {slot.data(), pitch, qd, qd};
  std::vector<uint16_t> att((size_t)(R * qd), 0xffff);
  std::vector<float> scores((size_t)(R * nq) * c.keys, NAN);
  int rc = launch(q.data(), kc, vc, nq, c.nkv, hd, L, scale, pos.data(), c.window, c.keys, scores.data(), att.data(),
                  &rw, R);
  if (rc) {
    printf("FAIL launch rc=%d (rep %d nkv %d hd %d keys %d)\n", rc, c.rep, c.nkv, hd, c.keys);
    return 1;
  }
  int bad = 0;
  double worst = 0;
  for (int z = 0; z < R; z++) {
    const int64_t off = slot[(size_t)z] * lane;
    for (int h = 0; h < nq; h++) {
      const std::vector<float> ref =
          emu_attention_ref(c.rep, c.nkv, c.hd, c.window, q.data() + z * qd, K.data() + off, V.data() + off,
                            pos[(size_t)z], scale, h);
      float mx = 0;
      for (float v : ref) mx = fmaxf(mx, fabsf(v));
      for (int d = 0; d < hd; d++) {
        const float got = fromb(att[(size_t)(z * qd + (int64_t)h * hd + d)]);
        const double e = fabs((double)got - ref[(size_t)d]);
        if (c.structure ? got != ref[(size_t)d] : !(e <= 0.01 * mx + 1e-30)) { /* (a NaN fails) */
          if (!bad) printf("  row %d head %d dim %d: %g against %g\n", z, h, d, got, ref[(size_t)d]);
          bad = 1;
        }
        if (mx > 0) worst = fmax(worst, e / mx);
      }
    }
  }
  /* each row alone, on its slot, bit for bit; then the rows reversed */
  std::vector<uint16_t> one((size_t)qd);
  for (int z = 0; z < R && !bad; z++) {
    const dk_rows r1 = {&slot[(size_t)z], pitch, qd, qd};
    std::fill(one.begin(), one.end(), (uint16_t)0xffff);
    rc = launch(q.data() + z * qd, kc, vc, nq, c.nkv, hd, L, scale, &pos[(size_t)z], c.window, c.keys, scores.data(),
                one.data(), &r1, 1);
    if (rc || memcmp(one.data(), att.data() + z * qd, (size_t)qd * 2)) {
      printf("  row %d (slot %d, position %d) differs from its launch alone\n", z, slot[(size_t)z], pos[(size_t)z]);
      bad = 1;
    }
  }
  if (R > 1 && !bad) {
    std::vector<float> qr(q.size());
    std::vector<int> sr((size_t)R), pr((size_t)R);
    for (int z = 0; z < R; z++) {
      const int w = R - 1 - z;
      memcpy(&qr[(size_t)(w * qd)], &q[(size_t)(z * qd)], (size_t)qd * 4);
      sr[(size_t)w] = slot[(size_t)z], pr[(size_t)w] = pos[(size_t)z];
    }
    const dk_rows rr = {sr.data(), pitch, qd, qd};
    std::vector<uint16_t> ar(att.size(), 0xffff);
    rc = launch(qr.data(), kc, vc, nq, c.nkv, hd, L, scale, pr.data(), c.window, c.keys, scores.data(), ar.data(), &rr,
                R);
    for (int z = 0; z < R && !rc; z++)
      if (memcmp(&ar[(size_t)((R - 1 - z) * qd)], &att[(size_t)(z * qd)], (size_t)qd * 2)) {
        printf("  row %d differs with the rows reversed\n", z);
        bad = 1;
      }
    bad |= rc != 0;
  }
  printf("%s rep %d nkv %d hd %4d window %4d keys %4d rows %d (positions %d..%d) %-9s%s%s worst %.2e\n",
         bad ? "FAIL" : "ok  ", c.rep, c.nkv, hd, c.window, c.keys, R, *std::min_element(pos.begin(), pos.end()),
         *std::max_element(pos.begin(), pos.end()), c.structure ? "structure" : "values", c.vr ? " K from V" : "",
         (int64_t)c.rep * c.keys * 4 > 32 * 1024 ? " global scores" : "", worst);
  return bad;
}

int main(int argc, char **argv) {
  if (argc > 1) g_rng = strtoull(argv[1], NULL, 0) | 1;
#ifdef AST_SPLIT
  emu_pool_start();
  /* the sliding layers' shapes (plain rows, scores in shared memory), the 31B's scaled down in
   * heads and keys; positions with fewer chunks than blocks (a block with no keys), chunk counts
   * that do not divide among the blocks, past a wrapped ring */
  const Case cases[] = {
      {2, 2, 256, 64, 64, {0, 200}, true},
      {2, 1, 256, 256, 256, {700}, true},
      {2, 1, 32, 8, 8, {3, 40, 7}, true},
      {4, 1, 16, 8, 8, {0, 50}, true},
      {2, 1, 256, 256, 256, {95, 600}, false},
      {2, 2, 32, 8, 8, {40, 7}, false},
      {4, 1, 16, 8, 8, {0, 50, 9}, false},
      {2, 1, 64, 0, 300, {299, 64}, false},
      {8, 1, 128, 0, 200, {129, 0}, false},
      {1, 3, 128, 0, 400, {300}, false},
  };
  /* refusals: the full form's shapes (K from V, scores beyond shared memory) */
  const int refused = dk_attention_stream_split_fits(16, 2, 512, dk_kv_from_v(2, 512, 64), 0, 1100) ||
                      dk_attention_stream_split_fits(4, 2, 256, dk_kv_plain(2, 256), 0, 5000) ||
                      !dk_attention_stream_split_fits(4, 2, 256, dk_kv_plain(2, 256), 1024, 1024);
  if (refused) printf("FAIL dk_attention_stream_split_fits: a shape the split form cannot run passed, or one it runs did not\n");
  return emu_run_cases(cases, run_case) || refused;
#else
  /* the 31B's sliding layer (rep 2, head dim 256, a ring) scaled down in heads, other group
   * sizes and head dims; positions from the first (one key) past a wrapped ring, chunk counts
   * below, at and above the stages' */
  const Case cases[] = {
      {2, 2, 256, 64, 64, {0, 5, 63, 200}, true},
      {2, 1, 256, 1024, 1024, {1500, 575}, true},
      {8, 1, 512, 0, 700, {100, 31, 32}, true},
      {1, 3, 128, 0, 400, {300}, true},
      {2, 2, 256, 64, 64, {5, 200, 64}, false},
      {2, 1, 256, 1024, 1024, {1500, 575, 127, 128}, false},
      {8, 1, 512, 0, 700, {100, 699}, false},
      {1, 3, 128, 0, 400, {300, 33}, false},
      {4, 2, 128, 0, 200, {129, 0}, false},
      /* the tiny fixtures' head dims (16: two dims per thread in p·v, a key per group) */
      {2, 2, 32, 8, 8, {3, 40, 7}, true},
      {4, 1, 16, 8, 8, {0, 50}, true},
      {2, 2, 32, 8, 8, {3, 40, 7}, false},
      {4, 1, 16, 8, 8, {0, 50, 9}, false},
      {2, 2, 64, 0, 300, {299, 64}, false},
      /* the 31B's full layer (GQA 8, head dim 512, K from V, scores in global scratch) scaled
       * down in heads, and the tiny fixtures' full layers */
      {8, 1, 512, 0, 1100, {575, 1099, 40}, true, 64},
      {8, 2, 512, 0, 1100, {575, 100}, false, 64},
      {4, 2, 128, 0, 3000, {2999, 31}, false, 16},
      {2, 2, 32, 0, 5000, {4000, 7}, false, 8},
      {2, 2, 256, 0, 5000, {1200, 33}, false},
  };
  /* refusals: a layout the kernel does not read, a key bound below the window */
  const int refused = dk_attention_stream_fits(4, 2, 256, dk_kv_plain(2, 256), 1024, 512, 1) ||
                      dk_attention_stream_fits(6, 2, 256, dk_kv_plain(2, 256), 0, 256, 1) ||
                      dk_attention_stream_fits(4, 2, 192, dk_kv_plain(2, 192), 0, 256, 1) ||
                      dk_attention_stream_fits(16, 2, 512, dk_kv_from_v(2, 512, 64), 0, 100000, 0) ||
                      dk_attention_stream_fits(16, 2, 512, dk_kv_from_v(2, 512, 12), 0, 256, 1) ||
                      !dk_attention_stream_fits(16, 2, 512, dk_kv_from_v(2, 512, 64), 0, 100000, 1);
  if (refused) printf("FAIL dk_attention_stream_fits: a shape the kernel cannot run passed, or one it runs did not\n");
  return emu_run_cases(cases, run_case) || refused;
#endif
}
