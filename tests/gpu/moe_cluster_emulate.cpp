/* Runs the MoE block's one-row cluster kernels of moe_cluster.cu (through their real
 * launchers) on host threads, a cluster's 8 blocks side by side (tests/gpu/emu: EMU_CLUSTER):
 *   - dk_moe_norms_cluster: xr = bf16 rmsnorm(h, w_router), xe = bf16 rmsnorm(h, w_pre2) with the
 *     reference's rounding points, within a bf16 step (the float32 sum of squares is grouped
 *     otherwise), the maxima it zeroes; with preps, the same xr and xe bit for bit, and the
 *     router's and the experts' activation preps bit for bit what ck_xprep_fixed makes of them
 *     (xprep.cu's xfill written out on the host: fragment order, fp16 x·2^e, each 32-slice's
 *     sum in k order and the slices' shuffle tree per group, the other rows' sums and
 *     exponents zero), in every prep form (fp16 with group sums of 32, 64 and 128, fp16 alone,
 *     bf16 as is), stale bytes in the buffers first;
 *   - dk_moe_combine_cluster: bf16(rmsnorm(bf16 Σ partials, w_post1) + rmsnorm(bf16(Σ_k bf16(w_k ·
 *     bf16 y_k)), w_post2)) within two bf16 steps.
 * Hidden sizes from one value per thread to four (8192). A CTest. Build and run from the
 * repository root:
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_CLUSTER -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/moe_cluster_emulate.cpp -o /tmp/mce -lm && /tmp/mce
 */
#include "../../src/accel/cuda/moe_cluster.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "emu_rng.h"

#define EMU_POOL_CL MC_CL
#define EMU_POOL_T MC_BT
#include "emu_cluster_pool.h"

static uint64_t g_rng = 0x3c6ef372fe94f82bull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static float bf(float x) { return ck_bf16_to_f32(ck_f32_to_bf16(x)); }

static int fails;

/* rmsnorm of n values with the reference's rounding points; float64 sum of squares */
static void ref_norm(float *y, const float *x, const float *w, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float r = 1.0f / sqrtf((float)(ss / n) + eps);
  for (int i = 0; i < n; i++) y[i] = bf(bf(x[i] * r) * w[i]);
}
static bool near(float a, float b, float steps) {
  return fabsf(a - b) <= fmaxf(fabsf(a), fabsf(b)) * steps * 0x1p-7f + 1e-30f;
}

/* xprep.cu's xfill for one row of H with exponent e, on the host */
struct Prep {
  std::vector<uint16_t> xp;
  std::vector<float> xs;
  std::vector<int> xexp;
};
static Prep host_prep(const std::vector<uint16_t> &x, int H, int xmode, int gs, int e) {
  Prep p{std::vector<uint16_t>((size_t)H + 64, 0x7777), std::vector<float>((size_t)(H / 32 + 1) * 8, 9.0f),
         std::vector<int>(8, 0)};
  for (int i = 0; i < H; i++) prep_store(p.xp.data(), i, x[(size_t)i], e, xmode);
  p.xexp[0] = e;
  if (gs > 0) {
    const int nsl = H / 32, per = gs / 32;
    std::vector<float> sl((size_t)nsl, 0.0f);
    for (int S = 0; S < nsl; S++)
      for (int k = 0; k < 32; k++) sl[(size_t)S] += ck_f16_to_f32(ck_f32_to_f16(ldexpf(ck_bf16_to_f32(x[(size_t)(S * 32 + k)]), e)));
    for (int o = per >> 1; o > 0; o >>= 1) {
      const std::vector<float> t = sl;
      for (int S = 0; S < nsl; S++) sl[(size_t)S] = t[(size_t)S] + t[(size_t)(S ^ o)];
    }
    for (int S = 0; S < nsl; S += per) {
      p.xs[(size_t)(S / per) * 8] = sl[(size_t)S];
      for (int n = 1; n < 8; n++) p.xs[(size_t)(S / per) * 8 + n] = 0.0f;
    }
  }
  return p;
}

/* modes: 0 no preps; else (router xmode/gs, experts xmode/gs) */
static void check_norms(int H, int with_preps, int xr_mode, int gr, int xe_mode, int ge) {
  const float eps = 1e-6f;
  std::vector<float> h((size_t)H), wr((size_t)H), w2((size_t)H), zero(37, 5.0f);
  for (int i = 0; i < H; i++) h[(size_t)i] = bf((unit() * 2 - 1) * 20), wr[(size_t)i] = bf(unit() * 0.1f), w2[(size_t)i] = bf(unit() * 2);
  std::vector<uint16_t> xr((size_t)H, 0xffff), xe((size_t)H, 0xffff), xr0((size_t)H), xe0((size_t)H);
  int rc = dk_moe_norms_cluster(h.data(), wr.data(), w2.data(), H, eps, xr0.data(), xe0.data(), zero.data(), 37, NULL, NULL);
  int bad = rc != 0;
  for (float z : zero) bad += z != 0.0f;
  std::vector<float> c((size_t)H);
  ref_norm(c.data(), h.data(), wr.data(), H, eps);
  for (int i = 0; i < H; i++) bad += !near(ck_bf16_to_f32(xr0[(size_t)i]), c[(size_t)i], 1);
  ref_norm(c.data(), h.data(), w2.data(), H, eps);
  for (int i = 0; i < H; i++) bad += !near(ck_bf16_to_f32(xe0[(size_t)i]), c[(size_t)i], 1);
  if (with_preps) {
    const int er = xr_mode == 2 ? 0 : 9, ee = xe_mode == 2 ? 0 : 6;
    Prep pr{std::vector<uint16_t>((size_t)H + 64, 0x7777), std::vector<float>((size_t)(H / 32 + 1) * 8, 9.0f),
            std::vector<int>(8, 99)};
    Prep pe = pr;
    const dk_moe_preps pp = {{pr.xp.data(), pr.xs.data(), pr.xexp.data(), xr_mode, gr, er},
                             {pe.xp.data(), pe.xs.data(), pe.xexp.data(), xe_mode, ge, ee}};
    rc = dk_moe_norms_cluster(h.data(), wr.data(), w2.data(), H, eps, xr.data(), xe.data(), NULL, 0, &pp, NULL);
    const Prep wr_ = host_prep(xr, H, xr_mode, gr, er), we_ = host_prep(xe, H, xe_mode, ge, ee);
    const bool xs_r = gr ? pr.xs == wr_.xs : true, xs_e = ge ? pe.xs == we_.xs : true;
    if (rc || xr != xr0 || xe != xe0 || pr.xp != wr_.xp || pe.xp != we_.xp || pr.xexp != wr_.xexp ||
        pe.xexp != we_.xexp || !xs_r || !xs_e) {
      printf("  preps: rc %d%s%s%s%s%s\n", rc, xr != xr0 || xe != xe0 ? ", x differs from the run without" : "",
             pr.xp != wr_.xp ? ", router prep" : "", pe.xp != we_.xp ? ", experts prep" : "",
             pr.xexp != wr_.xexp || pe.xexp != we_.xexp ? ", exponents" : "", !xs_r || !xs_e ? ", group sums" : "");
      bad++;
    }
  }
  fails += bad != 0;
  printf("%s norms H %4d%s", bad ? "FAIL" : "ok  ", H, with_preps ? " with preps:" : "\n");
  if (with_preps) printf(" router xmode %d g%d, experts xmode %d g%d\n", xr_mode, gr, xe_mode, ge);
}

static void check_combine(int H, int K) {
  const float eps = 1e-6f;
  const int ks = 3;
  std::vector<float> ys((size_t)ks * H), w1((size_t)H), w3((size_t)H), yd((size_t)K * H), wts((size_t)K), out((size_t)H);
  for (auto &v : ys) v = (unit() * 2 - 1) * 3;
  for (auto &v : yd) v = (unit() * 2 - 1) * 5;
  for (int i = 0; i < H; i++) w1[(size_t)i] = bf(unit() + 0.5f), w3[(size_t)i] = bf(unit());
  for (auto &w : wts) w = bf(unit());
  const int rc = dk_moe_combine_cluster(ys.data(), ks, H, w1.data(), yd.data(), H, wts.data(), w3.data(), K, H, eps,
                                        out.data(), NULL);
  int bad = rc != 0;
  std::vector<float> a((size_t)H), b((size_t)H), c((size_t)H), acc((size_t)H);
  for (int i = 0; i < H; i++) a[(size_t)i] = bf(ys[(size_t)i] + ys[(size_t)(H + i)] + ys[(size_t)(2 * H + i)]);
  ref_norm(b.data(), a.data(), w1.data(), H, eps);
  for (int i = 0; i < H; i++) {
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += bf(wts[(size_t)k] * bf(yd[(size_t)(k * H + i)]));
    acc[(size_t)i] = bf(s);
  }
  ref_norm(c.data(), acc.data(), w3.data(), H, eps);
  for (int i = 0; i < H; i++) { /* each norm within one bf16 step, then one more rounding: within two */
    const float want = bf(b[(size_t)i] + c[(size_t)i]);
    bad += !(fabsf(out[(size_t)i] - want) <= (fabsf(b[(size_t)i]) + fabsf(c[(size_t)i])) * 0x1p-6f + 1e-30f);
  }
  fails += bad != 0;
  printf("%s combine H %4d top-k %d\n", bad ? "FAIL" : "ok  ", H, K);
}

int main(void) {
  emu_pool_start();
  check_norms(2816, 0, 0, 0, 0, 0);
  check_norms(300, 0, 0, 0, 0, 0);
  check_norms(8192, 0, 0, 0, 0, 0);
  check_norms(2816, 1, 1, 64, 1, 0); /* the 26B-A4B: router affine 8-bit g64, experts nvfp4 */
  check_norms(2816, 1, 1, 32, 1, 64);
  check_norms(2944, 1, 1, 128, 2, 0);
  check_norms(8192, 1, 2, 0, 1, 0); /* more slices than threads: two rounds */
  check_combine(2816, 8);
  check_combine(700, 2);
  check_combine(8192, 8);
  emu_pool_stop();
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
