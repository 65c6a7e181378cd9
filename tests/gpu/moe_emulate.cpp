/* Runs the MoE block's kernels of moe.cu (through their real launchers) on host threads
 * (tests/gpu/emu/cuda_runtime.h), against direct computations of reference.c moe_block's math:
 *   - dk_moe_route: the top-k ids of the reference's scan (ties: the lower index; a NaN first
 *     candidate stays; -inf scores) and the weights bf16(bf16(softmax) · per_expert_scale),
 *     bit for bit, with k-split partial sums;
 *   - dk_moe_group / dk_moe_gather: every choice (t, k) in a row of its expert's work items, the
 *     rows of an expert in token order from the item's first row, padding rows −1 and zero,
 *     no row used twice, the item count within dk_moe_items;
 *   - dk_moe_norms and dk_moe_combine: the rounding points of the reference (rmsnorm's
 *     bf16(bf16(x·r)·w), the shared MLP's k-split partial sums, the weighted sum of bf16
 *     products in k order, rounded once), within a bf16 step or two where the float32 sums of
 *     squares are grouped differently; the maxima dk_moe_norms zeroes (the one-block kernels:
 *     the step's cluster forms are moe_cluster_emulate.cpp's).
 * A CTest. Build and run from the repository root:
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc -Isrc/accel/cuda \
 *       -Iinclude tests/gpu/moe_emulate.cpp -o /tmp/moe_emulate -lm && /tmp/moe_emulate
 */
#include "../../src/accel/cuda/moe.cu"

/* the step's cluster forms (moe_cluster.cu) run in their own harness
 * (moe_cluster_emulate.cpp); here every row takes the one-block kernels */
extern "C" int dk_moe_fits_cluster(int) { return 0; }
extern "C" int dk_moe_norms_cluster(const float *, const float *, const float *, int, float, uint16_t *, uint16_t *,
                                    float *, int, const dk_moe_preps *, void *) {
  return (int)cudaErrorInvalidValue;
}
extern "C" int dk_moe_combine_cluster(const float *, int, int64_t, const float *, const float *, int64_t, const float *,
                                      const float *, int, int, float, float *, void *) {
  return (int)cudaErrorInvalidValue;
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "emu_rng.h"

#define EMU_SMEM_BYTES (64 * 1024)
#include "emu_block_runner.h"

static uint64_t g_rng = 0x51ed2701a3b4c5d7ull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static int rnd(int n) { return (int)(emu_xorshift64(&g_rng) % (uint64_t)n); }
static float bf(float x) { return ck_bf16_to_f32(ck_f32_to_bf16(x)); }

static int fails;
#define EXPECT(c, ...)               \
  do {                               \
    if (!(c)) {                      \
      printf("FAIL: " __VA_ARGS__);  \
      printf("\n");                  \
      fails++;                       \
    }                                \
  } while (0)

/* the reference's scan and weights (reference.c moe_block, default numerics) */
static void ref_route(const float *s, int E, int K, const float *pes, int *idx, float *w) {
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int used = 0;
      for (int j = 0; j < k; j++) used |= idx[j] == e;
      if (!used && (best < 0 || s[e] > s[best])) best = e;
    }
    idx[k] = best;
  }
  float mx = -INFINITY, sum = 0.0f;
  for (int k = 0; k < K; k++) mx = fmaxf(mx, s[idx[k]]);
  for (int k = 0; k < K; k++) sum += w[k] = expf(s[idx[k]] - mx);
  for (int k = 0; k < K; k++) w[k] = bf(bf(w[k] / sum) * pes[idx[k]]);
}

static void check_route(int T, int E, int K, int ks, int kind) {
  const int64_t lds = E, kstride = (int64_t)T * E;
  std::vector<float> s((size_t)ks * kstride), pes(E), tot((size_t)T * E), w((size_t)T * K), rw(K);
  std::vector<int> ids((size_t)T * K, -9), ri(K);
  for (int e = 0; e < E; e++) pes[e] = bf(0.5f + unit());
  for (int t = 0; t < T; t++)
    for (int e = 0; e < E; e++) {
      float v = bf((unit() * 2 - 1) * 4);
      if (kind == 1) v = bf((float)rnd(4)); /* many ties */
      if (kind == 2 && e == t % E) v = NAN;  /* a NaN somewhere, sometimes first */
      if (kind == 2 && e % 7 == 3) v = -INFINITY;
      if (kind == 3) v = e % 3 == 0 ? -0.0f : e % 3 == 1 ? 0.0f : -INFINITY; /* ±0 ties, no NaN */
      /* split into ks partials whose float sum is v */
      float acc = 0.0f;
      for (int q = 0; q < ks; q++) {
        const float part = q + 1 < ks ? bf(v * 0.25f) : v - acc;
        s[(size_t)q * kstride + (size_t)t * lds + e] = part;
        acc += part;
      }
      float sum = s[(size_t)t * lds + e];
      for (int q = 1; q < ks; q++) sum += s[(size_t)q * kstride + (size_t)t * lds + e];
      tot[(size_t)t * E + e] = bf(sum);
    }
  int rc = dk_moe_route(s.data(), lds, ks, kstride, T, E, K, pes.data(), ids.data(), w.data(), NULL);
  EXPECT(rc == 0, "route launch rc %d", rc);
  int bad = 0;
  for (int t = 0; t < T; t++) {
    ref_route(&tot[(size_t)t * E], E, K, pes.data(), ri.data(), rw.data());
    for (int k = 0; k < K; k++) {
      const float a = w[(size_t)t * K + k], b = rw[k];
      if (ids[(size_t)t * K + k] != ri[k] || !(a == b || (isnan(a) && isnan(b)))) bad++;
    }
  }
  EXPECT(!bad, "route T %d E %d K %d ks %d kind %d: %d choices differ", T, E, K, ks, kind, bad);
  printf("%s route   T %3d E %3d top-k %2d k-splits %d %s\n", bad ? "FAIL" : "ok  ", T, E, K, ks,
         kind == 0 ? "random" : kind == 1 ? "ties" : kind == 2 ? "NaN, -inf" : "+-0 ties, -inf");
}

static void check_group(int T, int E, int K) {
  std::vector<int> ids((size_t)T * K);
  for (int t = 0; t < T; t++) /* K distinct experts per token, skewed towards a few */
    for (int k = 0; k < K; k++) {
      int e;
      bool again;
      do {
        e = rnd(4) == 0 ? rnd(E) : rnd(E < 5 ? E : 5);
        again = false;
        for (int j = 0; j < k; j++) again |= ids[(size_t)t * K + j] == e;
      } while (again);
      ids[(size_t)t * K + k] = e;
    }
  const int ni = dk_moe_items(T, K, E), H = 40, mb = 1 + rnd(4), nr = dk_moe_runs(T, K, E, mb);
  std::vector<int> item(ni, -7), src((size_t)ni * 8, -7), pos((size_t)T * K, -7), runs((size_t)2 * nr, -7);
  std::vector<uint16_t> x((size_t)T * H), xg((size_t)ni * 8 * H, 0x7777);
  for (size_t i = 0; i < x.size(); i++) x[i] = ck_f32_to_bf16(unit());
  int rc = dk_moe_group(ids.data(), T, K, E, item.data(), src.data(), pos.data(), mb, runs.data(), NULL);
  if (!rc) rc = dk_moe_gather(x.data(), src.data(), (int64_t)ni * 8, H, xg.data(), NULL);
  EXPECT(rc == 0, "group launch rc %d", rc);
  int bad = 0;
  std::vector<int> seen((size_t)ni * 8, 0);
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      const int r = pos[(size_t)t * K + k];
      if (r < 0 || r >= ni * 8 || seen[r]++ || src[r] != t || item[r / 8] != ids[(size_t)t * K + k]) {
        bad++;
        continue;
      }
      for (int i = 0; i < H; i++) bad += xg[(size_t)r * H + i] != x[(size_t)t * H + i];
    }
  for (int r = 0; r < ni * 8; r++) {
    if (!seen[r]) {
      bad += src[r] != -1;
      for (int i = 0; i < H; i++) bad += xg[(size_t)r * H + i] != 0;
    }
    /* within an expert's items: token order, its rows from its first item's first row */
    if (r > 0 && src[r] >= 0 && item[r / 8] == item[(r - 1) / 8] && (r % 8 ? src[r - 1] >= src[r] : 0)) bad++;
    if (r % 8 == 0 && src[r] < 0 && item[r / 8] >= 0) bad++; /* an item of an expert starts with a row */
  }
  /* runs: every item of an expert in exactly one run of at most mb items of that expert, the
   * runs of an expert consecutive, the rest empty */
  std::vector<int> covered(ni, 0);
  for (int j = 0; j < nr; j++) {
    const int i0 = runs[2 * (size_t)j], n = runs[2 * (size_t)j + 1];
    if (n == 0) continue;
    if (n < 0 || n > mb || i0 < 0 || i0 + n > ni) {
      bad++;
      continue;
    }
    for (int k = 0; k < n; k++) bad += item[i0 + k] != item[i0] || item[i0] < 0 || covered[i0 + k]++;
  }
  for (int w = 0; w < ni; w++) bad += item[w] >= 0 && !covered[w];
  EXPECT(!bad, "group T %d E %d K %d: %d mismatches", T, E, K, bad);
  printf("%s group   T %3d E %3d top-k %2d: %d items, runs of %d\n", bad ? "FAIL" : "ok  ", T, E, K, ni, mb);
}

/* rmsnorm of n values with the reference's rounding points; float64 sum of squares */
static void ref_norm(float *y, const float *x, const float *w, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float r = 1.0f / sqrtf((float)(ss / n) + eps);
  for (int i = 0; i < n; i++) y[i] = bf(bf(x[i] * r) * w[i]);
}

/* bf16 values a and b within one bf16 step of each other (the float32 sums of squares group
 * their terms differently from the float64 one) */
static bool near(float a, float b) { return fabsf(a - b) <= fmaxf(fabsf(a), fabsf(b)) * 0x1p-7f + 1e-30f; }

static void check_norms_combine(int T, int H, int K) {
  const float eps = 1e-6f;
  const int ks = 2; /* the shared MLP's output as two k-split partial sums */
  std::vector<float> ys((size_t)ks * T * H), h((size_t)T * H), w1(H), wr(H), w2(H), w3(H), zero(37, 5.0f);
  std::vector<uint16_t> xr((size_t)T * H), xe((size_t)T * H);
  for (size_t i = 0; i < ys.size(); i++) ys[i] = (unit() * 2 - 1) * 3;
  for (size_t i = 0; i < h.size(); i++) h[i] = bf((unit() * 2 - 1) * 20);
  for (int i = 0; i < H; i++) w1[i] = bf(unit() + 0.5f), wr[i] = bf(unit() * 0.1f), w2[i] = bf(unit() * 2), w3[i] = bf(unit());
  int rc = dk_moe_norms(h.data(), wr.data(), w2.data(), T, H, eps, xr.data(), xe.data(), zero.data(), 37, NULL, NULL);
  /* experts' outputs: rows r of yd, choice (t, k) at row map[t·K + k] */
  const int R = T * K + 5;
  std::vector<float> yd((size_t)R * H), wts((size_t)T * K), out((size_t)T * H);
  std::vector<int> map((size_t)T * K);
  for (size_t i = 0; i < yd.size(); i++) yd[i] = (unit() * 2 - 1) * 5;
  for (int a = 0; a < T * K; a++) map[a] = (a * 7 + 3) % R, wts[a] = bf(unit());
  if (!rc)
    rc = dk_moe_combine(ys.data(), H, ks, (int64_t)T * H, w1.data(), yd.data(), H, map.data(), wts.data(), w3.data(), T,
                        K, H, eps, out.data(), NULL);
  EXPECT(rc == 0, "norms/combine launch rc %d", rc);
  int bad = 0;
  for (float z : zero) bad += z != 0.0f;
  std::vector<float> a(H), b(H), c(H), acc(H);
  for (int t = 0; t < T; t++) {
    ref_norm(c.data(), &h[(size_t)t * H], wr.data(), H, eps);
    for (int i = 0; i < H; i++) bad += !near(ck_bf16_to_f32(xr[(size_t)t * H + i]), c[i]);
    ref_norm(c.data(), &h[(size_t)t * H], w2.data(), H, eps);
    for (int i = 0; i < H; i++) bad += !near(ck_bf16_to_f32(xe[(size_t)t * H + i]), c[i]);
    for (int i = 0; i < H; i++) a[i] = bf(ys[(size_t)t * H + i] + ys[(size_t)(T + t) * H + i]);
    ref_norm(b.data(), a.data(), w1.data(), H, eps);
    for (int i = 0; i < H; i++) {
      float s = 0.0f;
      for (int k = 0; k < K; k++) s += bf(wts[(size_t)t * K + k] * bf(yd[(size_t)map[(size_t)t * K + k] * H + i]));
      acc[i] = bf(s);
    }
    ref_norm(c.data(), acc.data(), w3.data(), H, eps);
    /* each norm within one bf16 step, then one more rounding: within two */
    for (int i = 0; i < H; i++) {
      const float got = out[(size_t)t * H + i], want = bf(b[i] + c[i]);
      bad += !(fabsf(got - want) <= (fabsf(b[i]) + fabsf(c[i])) * 0x1p-6f + 1e-30f);
    }
  }
  EXPECT(!bad, "norms/combine T %d H %d K %d: %d values off", T, H, K, bad);
  printf("%s norms + combine T %d H %d top-k %d\n", bad ? "FAIL" : "ok  ", T, H, K);
}

int main(void) {
  check_route(1, 128, 8, 1, 0);
  check_route(5, 128, 8, 3, 0);
  check_route(9, 64, 8, 1, 1);
  check_route(9, 40, 6, 2, 2);
  check_route(3, 8, 8, 1, 2);
  check_route(2, 8, 2, 1, 1);
  check_route(2, 128, 8, 1, 3);
  check_route(1, 512, 8, 2, 0); /* the most experts whose scores stay in registers */
  check_route(1, 600, 8, 1, 1); /* more: the scan over shared memory */
  check_group(1, 8, 2);
  check_group(37, 16, 4);
  check_group(64, 128, 8);
  check_group(512, 128, 8);
  check_norms_combine(1, 704, 8);
  check_norms_combine(3, 300, 2);
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
