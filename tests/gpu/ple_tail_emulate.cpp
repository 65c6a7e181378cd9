/* Runs the per-layer-embedding layer's one-launch tail (ple_tail.cu: dk_ple_tail, through its
 * launcher) on host threads, a cluster's 8 blocks of 256 threads side by side (tests/gpu/emu:
 * EMU_CLUSTER; the bulk copies, mbarriers and mmas emulated), with weights repacked by
 * repack.cu, against a float64 computation of the unfused chain with its rounding points (the
 * FFN residual norm, the gate product, GeGLU with the per-layer input, the projection, the
 * per-layer residual norm with the layer scalar, the next input norm):
 *   - two runs give the same bits in h, xb, the prep and its exponent (deterministic exchange;
 *     with --quick, the default CTest run, in the first case of the first four only);
 *   - h and xb within two bf16 steps (of the larger term of h's last add) of the direct values
 *     (float32 sums in another order than float64 may move a rounding: in the affine formats,
 *     whose bias terms cancel, that of the projection's bf16 output);
 *   - the prep exactly what prep_store makes of xb with the exponent of max |xb| (or the fixed
 *     exponent given), or without a prep (the affine formats' next product) the maxima of xb
 *     over blocks of 2048 values exactly, nothing else written;
 *   - a shape off the kernel's tiling is refused by the launcher, nothing written.
 * Build and run from the repository root (also a CTest):
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_CLUSTER -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/ple_tail_emulate.cpp -o /tmp/pte -lm
 *   /tmp/pte [seed]
 */
#include "../../src/accel/cuda/ple_tail.cu"
#include "../../src/accel/cuda/repack.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "emu_rng.h"

#define EMU_POOL_CL PT_CL
#define EMU_POOL_T PT_BT
#include "emu_cluster_pool.h"

int emu_dev_attr(cudaDeviceAttr a) { return a == cudaDevAttrMultiProcessorCount ? 132 : 232448; }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32() { return (uint32_t)(emu_xorshift64(&g_rng) >> 17); }
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }

#include "emu_weights.h"

struct Case {
  const char *what;
  int fmt, H, P, ks, use_scalar, with_next, next_xmode, fixed_e;
  bool zero_scale;
  int gs, sdt; /* affine: group size, scales dtype */
};

/* One weight of the case's format (gs: the format's group). */
struct Shape2 {
  int fmt, gs, sdt, rows, cols;
  bool zero_scale;
};
static int fmt_gs(const Case &c) {
  return c.fmt == CK_NVFP4 ? 16 : (c.fmt == CK_MXFP4 || c.fmt == CK_MXFP8) ? 32 : (c.fmt == CK_AFF4 || c.fmt == CK_AFF8) ? c.gs : 0;
}

struct Out {
  std::vector<float> h, pmax;
  std::vector<uint16_t> xb, xp;
  int xexp;
};

/* |a − b| at most two bf16 steps of the largest of |a|, |b| and the term magnitude t */
static bool near_bf16(double a, double b, double t) {
  const double m = fmax(fmax(fabs(a), fabs(b)), fabs(t));
  return fabs(a - b) <= (m > 0 ? 2 * ldexp(1.0, ilogb(m) - 7) : 0.0);
}

static bool g_quick;

static int run_case(const Case &c, bool twice) {
  const int H = c.H, P = c.P;
  const Shape2 sg = {c.fmt, fmt_gs(c), c.sdt, P, H, c.zero_scale}, sp = {c.fmt, fmt_gs(c), c.sdt, H, P, false};
  const Weights Wg = make_weights(sg), Wp = make_weights(sp);
  ck_layout Lg = layout_of(sg, 1), Lp = layout_of(sp, 1);
  /* (room for any format's codes, 2 bytes a value at most, and scales, a quarter byte) */
  std::vector<uint8_t> gw((size_t)P * H * 2), gs((size_t)P * H / 4 + 16), pw((size_t)H * P * 2), ps((size_t)H * P / 4 + 16);
  Lg.w = gw.data(), Lg.s = gs.data(), Lp.w = pw.data(), Lp.s = ps.data();
  if (repack(&Lg, Wg) || repack(&Lp, Wp)) {
    printf("FAIL %s: repack\n", c.what);
    return 1;
  }
  std::vector<float> y((size_t)H * c.ks), h0(H), wpost(H), wple(H), wn(H), ple(P);
  for (auto &v : y) v = (unit() * 2 - 1) * 3.0f;
  for (auto &v : h0) v = rb((unit() * 2 - 1) * 2.0f);
  for (auto &v : wpost) v = rb(unit() * 2);
  for (auto &v : wple) v = rb(unit() * 2);
  for (auto &v : wn) v = rb(unit() * 2);
  for (auto &v : ple) v = rb((unit() * 2 - 1) * 2.0f);
  const float scalar = rb(0.5f + unit()), eps = 1e-6f;
  auto run = [&](Out &o) {
    o.h = h0;
    o.xb.assign((size_t)H, 0xffff);
    o.xp.assign((size_t)H + 32, 0xffff);
    o.xexp = 777;
    o.pmax.assign((size_t)(H + 2047) / 2048 + 1, 123.0f);
    dk_ple_tail_args a = {};
    a.fmt = c.fmt, a.group = fmt_gs(c), a.f16 = c.sdt == CKT_F16, a.y = y.data(), a.ks = c.ks, a.kstride = H, a.w_post = wpost.data(), a.h = o.h.data(), a.H = H;
    a.eps = eps, a.gw = gw.data(), a.gs = gs.data(), a.ple = ple.data(), a.P = P, a.pw = pw.data(), a.ps = ps.data();
    a.w_ple = wple.data(), a.use_scalar = c.use_scalar, a.scalar = scalar, a.w_next = c.with_next ? wn.data() : NULL;
    a.xb = o.xb.data(), a.xp = o.xp.data(), a.xexp = &o.xexp, a.xmode = c.next_xmode;
    a.xe_fixed = c.fixed_e ? 3 : DK_XE_ROWMAX;
    a.pmax = o.pmax.data(), a.pblock = 2048;
    return dk_ple_tail(&a, NULL);
  };
  Out o1, o2;
  if (run(o1) || (twice ? run(o2) : (o2 = o1, 0))) {
    printf("FAIL %s: launch\n", c.what);
    return 1;
  }
  int bad = 0;
  if (o1.h != o2.h || o1.xb != o2.xb || o1.xp != o2.xp || o1.xexp != o2.xexp || o1.pmax != o2.pmax) {
    printf("FAIL %s: two runs differ\n", c.what);
    bad++;
  }
  /* the unfused chain in float64 sums, float32 norms' scalars, bf16 at the chain's points */
  auto rms_r = [&](const std::vector<double> &v) {
    double ss = 0;
    for (double x : v) ss += x * x;
    return 1.0f / sqrtf((float)(ss / H) + eps);
  };
  std::vector<double> yv(H), h1(H), h2(H), mag(H); /* mag: the larger term of h's last add */
  for (int i = 0; i < H; i++) {
    float s = y[i];
    for (int k = 1; k < c.ks; k++) s += y[(size_t)k * H + i];
    yv[i] = rb(s);
  }
  float r = rms_r(yv);
  for (int i = 0; i < H; i++) h1[i] = rb(h0[i] + rb(rb((float)yv[i] * r) * wpost[i]));
  std::vector<float> gv(P);
  for (int j = 0; j < P; j++) {
    double s = 0;
    for (int k = 0; k < H; k++) s += Wg.at(j, k) * h1[k];
    gv[j] = ck_bf16_to_f32(ck_geglu((float)s, ple[j]));
  }
  for (int i = 0; i < H; i++) {
    double s = 0;
    for (int j = 0; j < P; j++) s += Wp.at(i, j) * gv[j];
    yv[i] = rb((float)s);
  }
  r = rms_r(yv);
  for (int i = 0; i < H; i++) {
    float v = rb((float)h1[i] + rb(rb((float)yv[i] * r) * wple[i]));
    mag[i] = fmax(fabs(h1[i]), fabs(rb(rb((float)yv[i] * r) * wple[i])));
    if (c.use_scalar) v = rb(v * scalar), mag[i] *= scalar;
    h2[i] = v;
  }
  r = rms_r(h2);
  int far = 0, moved = 0;
  float m = 0;
  for (int i = 0; i < H; i++) {
    const double xb = c.with_next ? (double)rb(rb((float)h2[i] * r) * wn[i]) : h2[i];
    const double gx = ck_bf16_to_f32(o1.xb[i]);
    /* within two bf16 steps of the larger term of the last add (a rounding moved in a term is a
     * step of that term, many of a small sum's) */
    const double m_xb = c.with_next ? mag[i] * r * wn[i] : mag[i];
    if (!near_bf16(o1.h[i], h2[i], mag[i]) || !near_bf16(gx, xb, m_xb)) {
      if (far++ < 4) printf("  %s: value %d: h %.6g (direct %.6g), xb %.6g (direct %.6g)\n", c.what, i, o1.h[i], h2[i], gx, xb);
    }
    moved += o1.h[i] != (float)h2[i];
    m = fmaxf(m, fabsf((float)gx));
  }
  if (c.next_xmode) {
    const int e = c.fixed_e ? 3 : prep_exp(m, c.next_xmode);
    std::vector<uint16_t> xp((size_t)H + 32, 0xffff);
    for (int i = 0; i < H; i++) prep_store(xp.data(), i, o1.xb[i], e, c.next_xmode);
    if (o1.xexp != e || xp != o1.xp) {
      printf("FAIL %s: the prep (exponent %d, expected %d)\n", c.what, o1.xexp, e);
      bad++;
    }
  } else { /* the maxima per block of 2048 values instead; no prep written */
    std::vector<float> pm(o1.pmax.size(), 0.0f);
    pm.back() = 123.0f;
    for (int i = 0; i < H; i++) pm[(size_t)i / 2048] = fmaxf(pm[(size_t)i / 2048], fabsf(ck_bf16_to_f32(o1.xb[i])));
    bool untouched = o1.xexp == 777;
    for (uint16_t v : o1.xp) untouched &= v == 0xffff;
    if (pm != o1.pmax || !untouched) {
      printf("FAIL %s: the block maxima%s\n", c.what, untouched ? "" : " (and a prep written)");
      bad++;
    }
  }
  if (far || moved > H / 20) {
    printf("FAIL %s: %d values beyond two bf16 steps, %d of %d moved\n", c.what, far, moved, H);
    bad++;
  }
  if (!bad) printf("ok   %-44s H %5d P %4d: %d of %d values of h a rounding away\n", c.what, H, P, moved, H);
  return bad ? 1 : 0;
}

/* shapes off the tiling: refused, nothing written */
static int run_refusals() {
  std::vector<float> h(1000, 1.0f);
  std::vector<uint16_t> xb(1000, 0xffff), xp(1032, 0xffff);
  int xexp = 777, bad = 0;
  const int shapes[][3] = {{CK_NVFP4, 1000, 256}, {CK_NVFP4, 1024, 200}, {CK_GENERIC, 1024, 256},
                           {CK_NVFP4, 1024, 48 * 16}, {CK_DBF16, 2560, 256}}; /* (the last: more shared memory than a block has) */
  for (const auto &s : shapes) {
    dk_ple_tail_args a = {};
    a.fmt = s[0], a.group = 64, a.H = s[1], a.P = s[2], a.ks = 1, a.h = h.data(), a.xb = xb.data(), a.xp = xp.data(), a.xexp = &xexp;
    a.xmode = 1, a.xe_fixed = DK_XE_ROWMAX;
    if (dk_ple_tail(&a, NULL) == 0 || dk_ple_tail_smem(s[0], 64, 0, s[1], s[2])) bad++;
  }
  for (float v : h) bad += v != 1.0f;
  for (uint16_t v : xb) bad += v != 0xffff;
  bad += xexp != 777;
  printf("%s refusals: shapes off the tiling, the generic layout, too large a slice\n", bad ? "FAIL" : "ok  ");
  return bad ? 1 : 0;
}

/* --quick (the default CTest run): the first four cases, the repeat run in the first only */
int main(int argc, char **argv) {
  g_quick = argc > 1 && !strcmp(argv[1], "--quick");
  if (argc > 1 + g_quick) g_rng = strtoull(argv[1 + g_quick], NULL, 0) | 1;
  emu_pool_start();
  static const Case cases[] = {
      {"nvfp4, E2B's shape, 2 k splits, zero scale", CK_NVFP4, 1536, 256, 2, 1, 1, 1, 0, true, 0, 0},
      {"nvfp4, the tiny fixtures' shape (gate in 4 blocks)", CK_NVFP4, 128, 64, 1, 1, 1, 1, 0, false, 0, 0},
      {"affine4 g64, E4B's shape, the next prep's maxima", CK_AFF4, 2560, 256, 1, 1, 1, 0, 0, false, 64, CKT_BF16},
      {"bf16, bf16 prep next, no next norm", CK_DBF16, 1024, 256, 1, 1, 0, 2, 0, false, 0, 0},
      {"nvfp4, E4B's shape, fixed exponent", CK_NVFP4, 2560, 256, 1, 1, 1, 1, 1, false, 0, 0},
      {"mxfp8, 1 gate tile per block, 3 k splits", CK_MXFP8, 1024, 128, 3, 1, 1, 1, 0, false, 0, 0},
      {"mxfp4, 4 gate tiles per block, no scalar", CK_MXFP4, 2048, 512, 1, 0, 1, 1, 0, false, 0, 0},
      {"f16, one projection tile per warp", CK_DF16, 1024, 128, 1, 1, 1, 1, 0, false, 0, 0},
      {"affine8 g32 f16 scales, tiny shape, maxima", CK_AFF8, 128, 64, 2, 1, 1, 0, 0, false, 32, CKT_F16},
      {"affine4 g128, 2 values per thread", CK_AFF4, 4096, 128, 1, 1, 1, 1, 0, false, 128, CKT_BF16},
      {"nvfp4, 2 values per thread", CK_NVFP4, 4096, 128, 1, 1, 1, 1, 0, false, 0, 0},
  };


  int fails = run_refusals(), n = 1;
  for (const Case &c : cases) {
    if (g_quick && n > 4) break;
    fails += run_case(c, !g_quick || n == 1);
    n++;
  }
  emu_pool_stop();
  printf("%d passed, %d failed\n", n - fails, fails);
  return fails ? 1 : 0;
}
