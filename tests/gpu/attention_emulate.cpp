/* Runs the decode attention of attention.cu (dk_attention: the scores, pv and combine kernels,
 * through their real launcher) on host threads (tests/gpu/emu/cuda_runtime.h), against a
 * direct attention with the same rounding points: a check of the kernels' logic — split
 * ranges, the sliding ring, GQA, empty splits, the last-block and the combine-kernel
 * reductions — on a machine without a GPU. Two kinds of case:
 *   - structure: q = 0 and one-hot V (key j → dim j mod hd), so every p is the same bf16(1/n)
 *     and each output is exactly (number of live keys on that dim) · p: exact equality checks
 *     that every live key is read once and no other;
 *   - values: random q, K, V; each head's output within 1 % of its largest value (sum orders
 *     differ from the direct one, so the bf16 roundings of scores may differ; a misplaced key
 *     or a wrong slot is off by far more).
 * GQA 8 at head dims 256 / 512 with at most 4 KV heads runs the scores with K streamed by bulk
 * copies into tensor-core products, and (deep) p·v with V streamed likewise: both held to the
 * same checks (stale shared memory filled with a NaN pattern, which no used value may read).
 * Over K from V the deep form is one pass (attention_onepass_tma.cuh), held to a direct
 * attention with its own rounding of p: exactly on structure cases, within 1 % on values.
 * The batched step's form (dk_attention_rows: rows over slots of one cache array) runs on the
 * cases of at most 100 keys and 7 splits: a row over this cache gives the bits of the call of its
 * own, a row over another slot at another position its own direct attention.
 * A CTest (a block's threads are fibers that meet at a barrier for every __syncthreads, shuffle
 * and mma: emu_fiber.h). Build and run from the repository root:
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc -Isrc/accel/cuda \
 *       -Iinclude tests/gpu/attention_emulate.cpp -o /tmp/attention_emulate -lm
 *   /tmp/attention_emulate [seed]
 */
#include "../../src/accel/cuda/attention.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iterator>
#include <vector>

#include "emu_rng.h"

#define EMU_STALE_BYTE 0xff /* a NaN pattern in bf16 and float32 */
#define EMU_SMEM_BYTES (227 * 1024) /* the largest a block may take: the bulk-copy passes' 3 stages of
                                      * 16 rows of 4 KB, the one pass's 2 of 5 KB and q */
#include "emu_block_runner.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd() { return emu_xorshift64(&g_rng); }
static float unit() { return (float)((double)(rnd() >> 11) * 0x1p-53); }
static float bf(float x) { return rb(x); }
static uint16_t tob(float x) { return ck_f32_to_bf16(x); }
static float fromb(uint16_t h) { return ck_bf16_to_f32(h); }

struct Case {
  int rep, nkv, hd, window, pos, splits;
  bool structure;
  int min_keys = 1; /* fewest keys per split (the decoder passes MLXRT_ATTN_SPLIT_KEYS, 16 by default) */
  int vr = 0;       /* > 0: the cache in the K-from-V layout (kv_layout.h) with vr moved pairs per half */
};

/* The K-from-V cache of plain K and V (slots rows): each head's row K at the moved dims and V at
 * the others, V's moved dims in the tail; K becomes what the kernels then see as K (V at the
 * unmoved dims), so the direct attention and a plain-layout run read the same values. */
static std::vector<uint16_t> kv_from_v(const Case &c, int64_t slots, std::vector<uint16_t> &K,
                                       const std::vector<uint16_t> &V) {
  const int hd = c.hd;
  const int64_t kvd = (int64_t)c.nkv * hd;
  const dk_kv_layout L = dk_kv_from_v(c.nkv, hd, c.vr);
  std::vector<uint16_t> C((size_t)(slots * L.ps), 0x7fc1); /* NaN: a row element nothing should read */
  for (int64_t sl = 0; sl < slots; sl++)
    for (int g = 0; g < c.nkv; g++)
      for (int d = 0; d < hd; d++) {
        const int64_t i = sl * kvd + (int64_t)g * hd + d;
        if (!dk_kv_moved(L, hd, d)) K[i] = V[i];
        C[(size_t)(sl * L.ps + (int64_t)g * hd + d)] = K[i];
        C[(size_t)(sl * L.ps + dk_kv_vcol(L, c.nkv, hd, g, d))] = V[i];
      }
  return C;
}

/* The direct attention of one query head with the reference path's rounding points; onepass:
 * with the deep contexts' one-pass form's (p = bf16(exp(s − m)), the output divided by the
 * total at the end). */
static void direct(const Case &c, const float *q, const std::vector<uint16_t> &K, const std::vector<uint16_t> &V,
                   float scale, int h, std::vector<float> &out, bool onepass = false) {
  const int hd = c.hd, g = h / c.rep;
  const int64_t kvd = (int64_t)c.nkv * hd;
  const int first = c.window > 0 && c.pos - c.window + 1 > 0 ? c.pos - c.window + 1 : 0;
  std::vector<float> qs(hd), s;
  for (int d = 0; d < hd; d++) qs[d] = scale == 1.0f ? q[(int64_t)h * hd + d] : bf(q[(int64_t)h * hd + d] * bf(scale));
  float m = -INFINITY;
  for (int j = first; j <= c.pos; j++) {
    int64_t sl = c.window > 0 ? j % ck_ring(c.window) : j;
    double acc = 0;
    for (int d = 0; d < hd; d++) acc += (double)qs[d] * fromb(K[sl * kvd + (int64_t)g * hd + d]);
    s.push_back(bf((float)acc));
    m = fmaxf(m, s.back());
  }
  double total = 0;
  for (float v : s) total += exp((double)v - m);
  out.assign(hd, 0.0f);
  std::vector<double> o(hd, 0.0);
  for (int j = first; j <= c.pos; j++) {
    int64_t sl = c.window > 0 ? j % ck_ring(c.window) : j;
    double e = exp((double)s[j - first] - m);
    double p = onepass ? bf((float)e) : bf((float)(e / total));
    for (int d = 0; d < hd; d++) o[d] += p * fromb(V[sl * kvd + (int64_t)g * hd + d]);
  }
  for (int d = 0; d < hd; d++) out[d] = bf(onepass ? (float)(o[d] / total) : (float)o[d]);
}

static int run_case(const Case &c) {
  const int nq = c.rep * c.nkv, hd = c.hd;
  const int64_t kvd = (int64_t)c.nkv * hd, cap = c.pos + 1, slots = c.window > 0 ? ck_ring(c.window) : cap;
  std::vector<float> q((size_t)nq * hd);
  std::vector<uint16_t> K((size_t)(slots * kvd)), V((size_t)(slots * kvd));
  const float scale = c.structure ? 1.0f : 1.0f / sqrtf((float)hd);
  for (auto &x : q) x = c.structure ? 0.0f : bf(unit() * 4 - 2);
  /* every slot holds something, also those outside the window (stale ring entries) */
  for (int64_t sl = 0; sl < slots; sl++)
    for (int64_t i = 0; i < kvd; i++) {
      K[sl * kvd + i] = tob(c.structure ? unit() : unit() * 2 - 1);
      int d = (int)(i % hd);
      /* the key at this slot: the newest position mapping to it (the ring's live one) */
      int64_t j = c.window > 0 ? sl + ((c.pos - sl) / slots) * slots : sl;
      V[sl * kvd + i] = tob(c.structure ? (d == (int)(j % hd) ? 1.0f : 0.0f) : unit() * 2 - 1);
    }
  std::vector<float> scores((size_t)(nq * cap)), smax((size_t)nq * c.splits), ssum((size_t)nq * c.splits);
  std::vector<float> pacc((size_t)nq * c.splits * hd);
  std::vector<unsigned> count((size_t)c.nkv, 0u);
  std::vector<uint16_t> att((size_t)nq * hd, 0xffff);
  int pos = c.pos;
  /* the x-prep maxima (every other case): amax[0] = max |att|, the rest of the namax zeroed,
   * what lies beyond untouched */
  const bool with_amax = (c.pos + c.splits) % 2 == 0;
  const int namax = (nq * hd + 2047) / 2048;
  std::vector<float> amax((size_t)namax + 2, 123.0f);
  float *am = with_amax ? amax.data() : NULL;
  /* K from V: the kernels read one array in that layout; the plain arrays stay the reference's */
  std::vector<uint16_t> C;
  if (c.vr) C = kv_from_v(c, slots, K, V);
  const uint16_t *kc = c.vr ? C.data() : K.data(), *vc = c.vr ? C.data() : V.data();
  const dk_kv_layout L = c.vr ? dk_kv_from_v(c.nkv, hd, c.vr) : dk_kv_plain(c.nkv, hd);
  memset(emu_dyn_smem, 0xff, sizeof emu_dyn_smem);
  int rc = dk_attention(q.data(), kc, vc, nq, c.nkv, hd, L, scale, &pos, c.window, c.splits, c.min_keys, 0, cap,
                        scores.data(), smax.data(), ssum.data(), pacc.data(), count.data(), att.data(), am, namax,
                        NULL);
  if (rc) {
    printf("FAIL launch rc=%d\n", rc);
    return 1;
  }
  int bad = 0;
  /* the deep contexts' form (V streamed by bulk copies into tensor-core p·v, where the shape
   * takes it): rows past the split's keys must be zeroed (stale bytes a NaN pattern) */
  const bool tma = c.rep == 8 && (hd == 256 || hd == 512) && c.nkv <= 4;
  /* with K from V that form is one pass over the rows (attention_onepass_tma.cuh), held to a
   * direct attention with its rounding points */
  const bool onepass = tma && c.vr > 0;
  std::vector<uint16_t> att_pvt;
  if (tma) {
    att_pvt.assign((size_t)nq * hd, 0xffff);
    std::vector<float> amax_pvt((size_t)namax + 2, 123.0f);
    memset(emu_dyn_smem, 0xff, sizeof emu_dyn_smem);
    rc = dk_attention(q.data(), kc, vc, nq, c.nkv, hd, L, scale, &pos, c.window, c.splits, c.min_keys, 1, cap, scores.data(), smax.data(), ssum.data(), pacc.data(), count.data(), att_pvt.data(),
                      with_amax ? amax_pvt.data() : NULL, namax, NULL);
    float mx = 0;
    for (uint16_t b : att_pvt) mx = fmaxf(mx, fabsf(fromb(b)));
    if (rc || (with_amax && amax_pvt[0] != mx)) {
      printf("FAIL deep form: rc %d, x-prep max %g against max |att| %g\n", rc, with_amax ? amax_pvt[0] : 0.0f, mx);
      bad = 1;
    }
  }
  for (unsigned x : count)
    if (x) bad = 1; /* the last block must leave the counter clean for the next step */
  if (c.vr) { /* the layout changes addresses only: the plain arrays of the same values give the same bits */
    for (int deep = 0; deep <= (tma ? 1 : 0); deep++) {
      std::vector<uint16_t> att_plain((size_t)nq * hd, 0xffff);
      std::vector<float> amax_plain((size_t)namax + 2, 123.0f);
      memset(emu_dyn_smem, 0xff, sizeof emu_dyn_smem);
      rc = dk_attention(q.data(), K.data(), V.data(), nq, c.nkv, hd, dk_kv_plain(c.nkv, hd), scale, &pos, c.window,
                        c.splits, c.min_keys, deep, cap, scores.data(), smax.data(), ssum.data(), pacc.data(),
                        count.data(), att_plain.data(), with_amax ? amax_plain.data() : NULL, namax, NULL);
      if (rc || (!(deep && onepass) && att_plain != (deep ? att_pvt : att))) {
        printf("FAIL K from V (%s p·v): rc %d, the bits differ from the plain layout's\n", deep ? "bulk-copy" : "split",
               rc);
        bad = 1;
      }
    }
  }
  /* the batched step's form (dk_attention_rows): two rows over two slots of one array — row 0
   * this cache (slot 1) at pos, row 1 its negation (slot 0) at pos / 2. Row 0 gives the bits of
   * the call above on the register path (on the bulk-copy shapes, within 1 % of the direct
   * attention); row 1 the direct attention of its cache and position (checked below). On the
   * cases of at most 100 keys and 7 splits (the emulation's time) */
  const bool rows_check = c.pos <= 100 && c.splits <= 7;
  std::vector<uint16_t> att_rows((size_t)2 * nq * hd, 0xffff), Kn, Vn;
  Case c1 = c;
  c1.pos = c.pos / 2;
  if (rows_check) {
    const std::vector<uint16_t> &k0 = c.vr ? C : K, &v0 = c.vr ? C : V;
    const int64_t ke = (int64_t)k0.size();
    std::vector<uint16_t> ks((size_t)(2 * ke)), vs((size_t)(2 * ke));
    for (int64_t i = 0; i < ke; i++) {
      ks[(size_t)i] = (uint16_t)(k0[(size_t)i] ^ 0x8000), ks[(size_t)(ke + i)] = k0[(size_t)i];
      vs[(size_t)i] = (uint16_t)(v0[(size_t)i] ^ 0x8000), vs[(size_t)(ke + i)] = v0[(size_t)i];
    }
    Kn = K, Vn = V;
    for (auto &x : Kn) x ^= 0x8000;
    for (auto &x : Vn) x ^= 0x8000;
    std::vector<float> q2((size_t)2 * nq * hd), sc2((size_t)2 * nq * cap), sm2((size_t)2 * nq * c.splits),
        ss2((size_t)2 * nq * c.splits), pa2((size_t)2 * nq * c.splits * hd);
    for (int r = 0; r < 2; r++) std::copy(q.begin(), q.end(), q2.begin() + (size_t)r * nq * hd);
    std::vector<unsigned> cnt2((size_t)2 * nq, 0u);
    const int slot2[2] = {1, 0}, pos2[2] = {c.pos, c1.pos};
    const dk_rows rw = {slot2, ke, (int64_t)nq * hd, (int64_t)nq * hd};
    memset(emu_dyn_smem, 0xff, sizeof emu_dyn_smem);
    rc = dk_attention_rows(q2.data(), ks.data(), c.vr ? ks.data() : vs.data(), nq, c.nkv, hd, L, scale, pos2, c.window,
                           c.splits, c.min_keys, 0, cap, sc2.data(), sm2.data(), ss2.data(), pa2.data(), cnt2.data(),
                           att_rows.data(), NULL, 0, &rw, 2, NULL);
    for (unsigned x : cnt2)
      if (x) rc = rc ? rc : -1;
    if (!rc && !tma && !std::equal(att.begin(), att.end(), att_rows.begin())) rc = -2;
    if (rc) {
      printf("FAIL rows: rc %d (-1: a counter left set; -2: row 0 differs from the call of its own)\n", rc);
      bad = 1;
    }
  }
  std::vector<float> ref, ref1;
  double worst = 0;
  for (int h = 0; h < nq; h++) {
    direct(c, q.data(), K, V, scale, h, ref);
    if (tma) direct(c, q.data(), K, V, scale, h, ref1, onepass);
    float mx = 0;
    for (float v : ref) mx = fmaxf(mx, fabsf(v));
    for (int d = 0; d < hd; d++) {
      float got = fromb(att[(size_t)h * hd + d]);
      double e = fabs((double)got - ref[d]);
      if (c.structure ? got != ref[d] : e > 0.01 * mx + 1e-30) bad = 1;
      const float gr = fromb(att_rows[(size_t)h * hd + d]);
      if (rows_check && tma && !onepass && (c.structure ? gr != ref[d] : fabs((double)gr - ref[d]) > 0.01 * mx + 1e-30)) {
        printf("FAIL rows (register path): head %d dim %d: %g against %g\n", h, d, gr, ref[d]);
        bad = 1;
      }
      if (mx > 0) worst = fmax(worst, e / mx);
      if (!att_pvt.empty()) {
        const float gt = fromb(att_pvt[(size_t)h * hd + d]);
        if (c.structure ? gt != ref1[d] : fabs((double)gt - ref1[d]) > 0.01 * mx + 1e-30) {
          printf("FAIL deep form: head %d dim %d: %g against %g\n", h, d, gt, ref1[d]);
          att_pvt.clear();
          bad = 1;
        }
      }
    }
    if (rows_check) { /* row 1: the negated cache at pos / 2 */
      std::vector<float> r1;
      direct(c1, q.data(), Kn, Vn, scale, h, r1);
      float m1 = 0;
      for (float v : r1) m1 = fmaxf(m1, fabsf(v));
      for (int d = 0; d < hd; d++) {
        const float g1 = fromb(att_rows[(size_t)(nq + h) * hd + d]);
        if (c.structure ? g1 != r1[d] : fabs((double)g1 - r1[d]) > 0.01 * m1 + 1e-30) {
          printf("FAIL rows: row 1 head %d dim %d: %g against %g\n", h, d, g1, r1[d]);
          bad = 1;
          break;
        }
      }
    }
  }
  if (with_amax) {
    float mx = 0;
    for (uint16_t b : att) mx = fmaxf(mx, fabsf(fromb(b)));
    bool ok = amax[0] == mx && amax[(size_t)namax] == 123.0f && amax[(size_t)namax + 1] == 123.0f;
    for (int i = 1; i < namax; i++) ok = ok && amax[(size_t)i] == 0.0f;
    if (!ok) {
      printf("FAIL x-prep maxima: amax[0] %g against max |att| %g (namax %d)\n", amax[0], mx, namax);
      bad = 1;
    }
  }
  /* the output's bits (FNV-1a), so that two builds' logs differ wherever any output bit does:
   * a change meant to keep the same operations in the same order is checked by diffing them */
  uint64_t bits = 0xcbf29ce484222325ULL;
  for (uint16_t b : att) bits = (bits ^ b) * 0x100000001b3ULL;
  char mk[24] = "";
  if (c.min_keys != 1) snprintf(mk, sizeof mk, " min %d", c.min_keys);
  if (c.vr) snprintf(mk + strlen(mk), sizeof mk - strlen(mk), " K-from-V %d", c.vr);
  printf("%s %s%s rep %2d nkv %d hd %4d window %4d pos %5d splits %3d%s %-9s worst %.2e bits %016llx\n",
         bad ? "FAIL" : "ok  ", tma ? "bulk copy" : "registers", rows_check ? " +rows" : "", c.rep, c.nkv, hd, c.window, c.pos, c.splits, mk,
         c.structure ? "structure" : "values", worst, (unsigned long long)bits);
  return bad;
}

int main(int argc, char **argv) {
  /* --quick (the default CTest run): every third case; --sparse (the sanitizer build's run):
   * every ninth, every third of the sliding ones; the full sweep runs under the CTest label
   * emulator-full */
  const bool sparse = argc > 1 && !strcmp(argv[1], "--sparse");
  const bool quick = sparse || (argc > 1 && !strcmp(argv[1], "--quick"));
  const int stride = sparse ? 9 : 3;
  if (argc > 1 + quick) g_rng = strtoull(argv[1 + quick], NULL, 0) | 1;
  int case_index = 0;

  /* the 31B's layers (sliding: 16 KV heads of 256, rep 2, window 1024; full: 4 of 512, rep 8)
   * scaled down in heads, and the other query-group sizes; splits from one to more than keys */
  const Case cases[] = {
      {2, 2, 256, 0, 0, 1, true},      {2, 2, 256, 0, 0, 4, true},     {2, 2, 256, 64, 5, 3, true},
      {2, 2, 256, 64, 63, 4, true},    {2, 2, 256, 64, 64, 5, true},   {2, 2, 256, 64, 200, 16, true},
      {8, 1, 512, 0, 700, 37, true},   {8, 1, 512, 0, 700, 4, true},   {2, 2, 256, 1024, 1500, 32, true},
      {1, 3, 256, 0, 300, 7, true},    {4, 2, 128, 0, 129, 300, true}, {16, 1, 256, 0, 90, 6, true},
      {2, 2, 256, 0, 0, 1, false},     {2, 2, 256, 64, 5, 3, false},   {2, 2, 256, 64, 200, 16, false},
      {8, 1, 512, 0, 700, 37, false},  {8, 1, 512, 0, 700, 2, false},  {2, 2, 256, 1024, 1500, 32, false},
      {1, 3, 256, 0, 300, 7, false},   {4, 2, 128, 0, 129, 300, false}, {16, 1, 256, 0, 90, 6, false},
      {2, 1, 1024, 64, 100, 5, false},
  };
  /* at least 32 keys per split, as the decoder runs it: a session made for a long context at a
   * short position (few live splits of many, through both split reductions). Run after the
   * cases above, so that those draw the same random values as before these were added. */
  const Case min_key_cases[] = {
      {8, 1, 512, 0, 100, 256, true, 32}, {8, 1, 512, 0, 100, 256, false, 32}, {2, 2, 256, 0, 40, 4, true, 32},
      {2, 2, 256, 0, 40, 4, false, 32},   {2, 2, 256, 64, 200, 16, false, 32}, {1, 3, 256, 0, 0, 7, true, 32},
      {2, 2, 256, 1024, 1500, 32, true, 32}, {4, 2, 128, 0, 129, 300, false, 32},
  };
  /* the full layer's 4 KV heads (the bulk-copy scores pass: one block takes all of them), the
   * newest key in a middle stage of its split, and head dim 256 with a ring (after the sets
   * above, so that those draw the same random values as before these were added) */
  const Case tma_cases[] = {
      {8, 4, 512, 0, 300, 7, false}, {8, 4, 256, 0, 100, 5, true}, {8, 2, 256, 64, 200, 3, false},
      {8, 3, 256, 0, 40, 1, false},  {8, 1, 256, 0, 700, 200, false}, /* 176 live splits: two chunks of statistics */
  };
  /* K from V (kv_layout.h): the 31B's full layer (5 KB rows: two bulk-copy stages of p·v), one-hot
   * V through the tail, and the register paths (every run takes these) */
  const Case kfv_cases[] = {
      {8, 4, 512, 0, 300, 7, false, 1, 64}, {8, 1, 512, 0, 700, 37, true, 1, 64},
      {2, 2, 256, 0, 200, 16, false, 1, 32}, {4, 2, 128, 0, 129, 30, true, 1, 16},
      /* the one-pass form: every head of the full layer, the newest key mid-split, two heads, many
       * splits (131 live: the combine's loops past its 128 threads), GQA 8 at head dim 256 */
      {8, 4, 512, 0, 100, 7, true, 1, 64}, {8, 2, 256, 0, 200, 3, false, 1, 32},
      {8, 1, 512, 0, 130, 131, false, 1, 64}, {8, 3, 256, 0, 40, 1, true, 1, 32},
  };
  int fails = 0, n = 0;
#ifdef ATT_EMU_TMA_ONLY /* a quick run of the bulk-copy cases alone (-DATT_EMU_TMA_ONLY) */
  for (int set = 2; set < 3; set++)
#else
  for (int set = 0; set < 3; set++)
#endif
    for (const Case &c : set == 2   ? std::vector<Case>(std::begin(tma_cases), std::end(tma_cases))
                         : set == 1 ? std::vector<Case>(std::begin(min_key_cases), std::end(min_key_cases))
                                    : std::vector<Case>(std::begin(cases), std::end(cases))) {
      const int ci = case_index++;
      if (quick && ci % (c.window > 0 ? 3 : stride)) continue;
      fails += run_case(c);
      n++;
    }
  for (const Case &c : kfv_cases) { /* after the sets above: those draw the values they drew before */
    fails += run_case(c);
    n++;
  }
  printf("%d passed, %d failed\n", n - fails, fails);
  return fails ? 1 : 0;
}
