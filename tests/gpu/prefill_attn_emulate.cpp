/* Runs the prompt pass's causal attention (prefill_attn.cu, prefill_attn_wg.cu: each of its
 * three kernels through its real launcher, and pf_attention's own pick) on host threads (tests/gpu/emu/cuda_runtime.h: mma, ldmatrix and
 * cp.async emulated), against a direct attention with the reference path's rounding points:
 * a check of the kernels' logic — fragments, key ranges, the causal mask, the sliding ring,
 * the cache/chunk split at p0, GQA, padding rows — on a machine without a GPU.
 *   - every kernel: each head's output within 1 % of its largest value of the direct one (the
 *     score sums run in another grouping, so a bf16 rounding of a score may differ; a wrong
 *     key, row or fragment is off by far more);
 *   - pf_attention's pick gives the bits of the kernel it picks for the head dim.
 * A CTest (slow: up to 512 host threads meet at a barrier for every mma and ldmatrix).
 * Build and run from the repository root:
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc -Isrc/accel/cuda \
 *       -Iinclude tests/gpu/prefill_attn_emulate.cpp -o /tmp/prefill_attn_emulate -lm
 *   /tmp/prefill_attn_emulate [seed]
 */
#define EMU_WARPS 16
#include "../../src/accel/cuda/prefill_attn.cu"
#include "../../src/accel/cuda/prefill_attn_planar.cu" /* (pf_attention routes a compressed K there) */
#include "../../src/accel/cuda/prefill_attn_wg.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "emu_rng.h"


#include "emu_block_runner.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static float bf(float x) { return rb(x); }

struct Case {
  int hd, T, nq, nkv, window;
  int64_t p0;
  int vr = 0; /* > 0: also run the kernels on the K-from-V layout (kv_layout.h) of the same values */
};

/* The K-from-V array of plain K and V rows (n of them): each head's row K at the moved dims and V
 * at the others, V's moved dims in the tail. */
static std::vector<uint16_t> kv_from_v(const Case &c, int64_t n, const std::vector<uint16_t> &K,
                                       const std::vector<uint16_t> &V) {
  const int hd = c.hd;
  const int64_t kvd = (int64_t)c.nkv * hd;
  const dk_kv_layout L = dk_kv_from_v(c.nkv, hd, c.vr);
  std::vector<uint16_t> C((size_t)(n * L.ps), 0x7fc1); /* NaN where nothing should read */
  for (int64_t r = 0; r < n; r++)
    for (int g = 0; g < c.nkv; g++)
      for (int d = 0; d < hd; d++) {
        const size_t i = (size_t)(r * kvd + (int64_t)g * hd + d);
        C[(size_t)(r * L.ps + (int64_t)g * hd + d)] = K[i];
        C[(size_t)(r * L.ps + dk_kv_vcol(L, c.nkv, hd, g, d))] = V[i];
      }
  return C;
}

/* One query row (token t, head h) of the direct attention, the reference path's rounding. */
static void direct(const Case &c, const std::vector<float> &q, const std::vector<uint16_t> &kc,
                   const std::vector<uint16_t> &vc, const std::vector<uint16_t> &kch, const std::vector<uint16_t> &vch,
                   float scale, int t, int h, float *out) {
  const int hd = c.hd, g = h / (c.nq / c.nkv);
  const int64_t kvd = (int64_t)c.nkv * hd, p = c.p0 + t;
  const int64_t lo = c.window > 0 && p - c.window + 1 > 0 ? p - c.window + 1 : 0;
  auto row = [&](const std::vector<uint16_t> &cache, const std::vector<uint16_t> &chunk, int64_t j) {
    return j >= c.p0 ? &chunk[(size_t)((j - c.p0) * kvd + (int64_t)g * hd)]
                     : &cache[(size_t)((c.window > 0 ? j % ck_ring(c.window) : j) * kvd + (int64_t)g * hd)];
  };
  std::vector<float> qs(hd), s;
  for (int d = 0; d < hd; d++) {
    float v = q[(size_t)t * c.nq * hd + (size_t)h * hd + d];
    qs[d] = scale == 1.0f ? v : bf(v * bf(scale));
  }
  float m = -INFINITY;
  for (int64_t j = lo; j <= p; j++) {
    const uint16_t *k = row(kc, kch, j);
    double acc = 0;
    for (int d = 0; d < hd; d++) acc += (double)qs[d] * ck_bf16_to_f32(k[d]);
    s.push_back(bf((float)acc));
    m = fmaxf(m, s.back());
  }
  double total = 0;
  for (float v : s) total += exp((double)v - m);
  std::vector<double> o(hd, 0.0);
  for (int64_t j = lo; j <= p; j++) {
    const uint16_t *v = row(vc, vch, j);
    double pj = bf((float)(exp((double)s[(size_t)(j - lo)] - m) / total));
    for (int d = 0; d < hd; d++) o[d] += pj * ck_bf16_to_f32(v[d]);
  }
  for (int d = 0; d < hd; d++) out[d] = bf((float)o[d]);
}

/* The kernels: 0 pf_attention's pick, 1 the plain one, 2 mma.sync (head dims 16 … 512, powers of
 * two), 3 the warpgroup one (head dims 128, 256, 512). */
static const char *kind_name(int k) {
  static const char *n[] = {"pf_attention's pick", "plain", "mma.sync, 64 queries", "warpgroup tensor cores (wgmma)"};
  return k >= 0 && k < 4 ? n[k] : "?";
}
static bool kind_runs(int k, int hd) {
  return k == 0 || k == 1 || (k == 2 && (hd & (hd - 1)) == 0 && hd >= 16 && hd <= 512) ||
         (k == 3 && pf_attention_wg_supported(hd));
}
static int launch_kind(int k, const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                       const uint16_t *vch, int T, int64_t p0, int nq, int nkv, int hd, float scale, int window,
                       dk_kv_layout kv, uint16_t *att) {
  if (k == 0) return pf_attention(q, kc, vc, kch, vch, T, p0, nq, nkv, hd, scale, window, kv, att, NULL);
  if (k == 3) return pf_attention_wg(q, kc, vc, kch, vch, T, p0, nq, nkv, hd, scale, window, kv, att, NULL);
  PaArgs a = {q, kc, vc, kch, vch, att, T, nq, nkv, hd, window, p0, scale, kv};
  if (k == 1) return pa_simple_launch(a, NULL);
  switch (hd) {
  case 16: return pa_launch<16>(a, NULL);
  case 32: return pa_launch<32>(a, NULL);
  case 64: return pa_launch<64>(a, NULL);
  case 128: return pa_launch<128>(a, NULL);
  case 256: return pa_launch<256>(a, NULL);
  default: return pa_launch<512>(a, NULL);
  }
}

static int run_case(const Case &c, const int *kinds, int nkinds) {
  const int hd = c.hd, T = c.T;
  const int64_t kvd = (int64_t)c.nkv * hd, qn = (int64_t)c.nq * hd;
  const int64_t slots = c.window > 0 ? ck_ring(c.window) : (c.p0 > 0 ? c.p0 : 1);
  std::vector<float> q((size_t)(T * qn));
  std::vector<uint16_t> kc((size_t)(slots * kvd)), vc((size_t)(slots * kvd)), kch((size_t)(T * kvd)), vch((size_t)(T * kvd));
  const float scale = 1.0f / sqrtf((float)hd);
  for (auto &x : q) x = bf(unit() * 4 - 2);
  for (auto *v : {&kc, &vc, &kch, &vch})
    for (auto &x : *v) x = ck_f32_to_bf16(unit() * 2 - 1);
  /* K from V: K holds V's values at the unmoved dims, as that layout's rows do */
  std::vector<uint16_t> C, Cch;
  const dk_kv_layout plain = dk_kv_plain(c.nkv, hd), L = c.vr ? dk_kv_from_v(c.nkv, hd, c.vr) : plain;
  if (c.vr) {
    for (int64_t i = 0; i < slots * kvd; i++)
      if (!dk_kv_moved(L, hd, (int)(i % hd))) kc[(size_t)i] = vc[(size_t)i];
    for (int64_t i = 0; i < T * kvd; i++)
      if (!dk_kv_moved(L, hd, (int)(i % hd))) kch[(size_t)i] = vch[(size_t)i];
    C = kv_from_v(c, slots, kc, vc);
    Cch = kv_from_v(c, T, kch, vch);
  }
  std::vector<float> ref((size_t)(T * qn));
  for (int t = 0; t < T; t++)
    for (int h = 0; h < c.nq; h++)
      direct(c, q, kc, vc, kch, vch, scale, t, h, &ref[(size_t)(t * qn + (int64_t)h * hd)]);
  int bad = 0;
  std::vector<std::vector<uint16_t>> outs;
  for (int ki = 0; ki < nkinds; ki++) {
    std::vector<uint16_t> att((size_t)(T * qn), 0xffff);
    if (!kind_runs(kinds[ki], hd)) {
      outs.push_back(att);
      continue;
    }
    int e = launch_kind(kinds[ki], q.data(), kc.data(), vc.data(), kch.data(), vch.data(), T, c.p0, c.nq, c.nkv, hd,
                        scale, c.window, plain, att.data());
    if (!e && c.vr) { /* the layout changes addresses only: the same bits from the K-from-V arrays */
      std::vector<uint16_t> att_kfv((size_t)(T * qn), 0xffff);
      e = launch_kind(kinds[ki], q.data(), C.data(), C.data(), Cch.data(), Cch.data(), T, c.p0, c.nq, c.nkv, hd, scale,
                      c.window, L, att_kfv.data());
      if (!e && att_kfv != att) {
        printf("FAIL hd %d T %d p0 %lld, %s: K from V (%d pairs) differs in bits from the plain layout\n", hd, T,
               (long long)c.p0, kind_name(kinds[ki]), c.vr);
        bad = 1;
      }
    }
    if (e) {
      printf("FAIL hd %d T %d p0 %lld window %d: kind %d did not launch (%d)\n", hd, T, (long long)c.p0, c.window,
             kinds[ki], e);
      bad = 1;
      outs.push_back(att);
      continue;
    }
    double worst = 0;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < c.nq; h++) {
        const float *r = &ref[(size_t)(t * qn + (int64_t)h * hd)];
        float mx = 0, err = 0;
        for (int d = 0; d < hd; d++) mx = fmaxf(mx, fabsf(r[d]));
        for (int d = 0; d < hd; d++)
          err = fmaxf(err, fabsf(ck_bf16_to_f32(att[(size_t)(t * qn + (int64_t)h * hd + d)]) - r[d]));
        double rel = mx > 0 ? err / mx : err;
        if (!(rel <= 0.01)) {
          if (!bad) printf("FAIL hd %d T %d p0 %lld window %d, %s: token %d head %d off by %.4f of its range\n", hd, T,
                           (long long)c.p0, c.window, kind_name(kinds[ki]), t, h, rel);
          bad = 1;
        }
        if (rel > worst) worst = rel;
      }
    printf("  hd %3d T %3d p0 %4lld window %3d nq %d nkv %d  %-40s worst %.5f of range%s\n", hd, T, (long long)c.p0,
           c.window, c.nq, c.nkv, kind_name(kinds[ki]), worst, c.vr ? ", K from V the same bits" : "");
    outs.push_back(att);
  }
  /* pf_attention's pick: the bits of the kernel it picks */
  const int picked = kind_runs(3, hd) ? 3 : kind_runs(2, hd) ? 2 : 1;
  for (int ki = 0; ki < nkinds; ki++)
    if (kinds[ki] == picked && outs[(size_t)ki] != outs[0]) {
      printf("FAIL hd %d T %d: pf_attention's output differs in bits from %s\n", hd, T, kind_name(picked));
      bad = 1;
    }
  return bad;
}

int main(int argc, char **argv) {
  /* --quick (the default CTest run): the cases of head dims up to 128 with short chunks;
   * --sparse (the sanitizer build's run): of those, the chunks of at most 33 rows; the full sweep
   * runs under the CTest label emulator-full */
  const bool sparse = argc > 1 && !strcmp(argv[1], "--sparse");
  const bool quick = sparse || (argc > 1 && !strcmp(argv[1], "--quick"));
  const int most_t = sparse ? 33 : 40;
  if (argc > 1 + quick) g_rng = strtoull(argv[1 + quick], NULL, 0) | 1;
  /* the 31B's layer shapes scaled down in heads (sliding: hd 256, GQA 2, window; full: hd 512,
   * GQA 8), small head dims, prompts from the start and after a cached prefix, chunks longer
   * than the window, partial query blocks */
  const Case cases[] = {
      {64, 70, 4, 2, 0, 0},  {64, 40, 4, 1, 0, 37}, {64, 67, 2, 1, 24, 50}, {128, 33, 2, 2, 0, 5},
      {256, 20, 2, 1, 16, 40}, {256, 65, 2, 1, 0, 0}, {512, 18, 8, 1, 0, 30}, {16, 9, 1, 1, 0, 3},
      {128, 40, 2, 1, 48, 70}, /* a ring wider than a key tile, wrapping inside one */
      {512, 20, 8, 1, 0, 140}, {256, 30, 2, 1, 200, 300}, /* whole key tiles of 64 in the cache, in a ring */
  };
  const int kinds[] = {0, 2, 1, 3};
  const int nk = (int)(sizeof kinds / sizeof kinds[0]);
  /* K from V (kv_layout.h), two KV heads (the second one's tail): the full layer's head dim with
   * its 64 moved pairs, GQA 8, after a cached prefix of whole key tiles; hd 256 with 32, GQA 2, a
   * whole key tile of 64 in the cache and one in the chunk (the warpgroup kernel's run copies); a
   * small head dim for the quick run (after the cases above: those draw the values they drew
   * before) */
  const Case kfv_cases[] = {{128, 33, 4, 2, 0, 20, 16}, {512, 20, 16, 2, 0, 70, 64}, {256, 66, 4, 2, 0, 64, 32}};
  int fails = 0, n = 0;
  for (const Case &c : cases) {
    if (quick && (c.hd > 128 || c.T > most_t)) continue;
    fails += run_case(c, kinds, nk);
    n++;
  }
  for (const Case &c : kfv_cases) {
    if (quick && c.hd > 128) continue;
    fails += run_case(c, kinds, nk);
    n++;
  }
  printf("%d cases, %d passed, %d failed\n", n, n - fails, fails);
  return fails ? 1 : 0;
}
