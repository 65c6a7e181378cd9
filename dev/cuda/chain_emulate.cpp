/* Runs the resident-grid product chain (qmv_chain.cu: ck_chain_run through its real launcher)
 * on host threads — a grid of 3 blocks, each 4 consumer warps and a producer warp, side by side
 * (tests/gpu/emu with EMU_CLUSTER: mbarriers, bulk copies, the consumers' named barrier and the
 * grid barrier emulated) — on small random nvfp4 products in the tile layout, against a float64
 * product computed from that layout on the host. A check of the kernel's logic without a GPU:
 * the stage ring across products (few stages, so it wraps), the producer never waiting for an
 * activation, x read through the L2 or staged with the weights (the producer's pending x parts),
 * the full-stage loop, tiles split over blocks and the last block's fix-up (the per-tile
 * counters reused by later products), a block with no work, stages of one unit.
 *   - every product within 2e-5 of its largest output (float32 sums in another order);
 *   - every next prep bit for bit what the host makes of bf16(y·gain);
 *   - the same bits for y with every configuration (the sums' order depends only on the
 *     layout: the pair index, the warp order, the part order).
 * Build and run from the repository root (also a CTest):
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_CLUSTER -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/chain_emulate.cpp -o /tmp/che -lm
 *   /tmp/che
 */
#include "../../src/accel/cuda/qmv_chain.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "emu_rng.h"

extern "C" int ck_pdl_enabled(void) { return 0; }

#define CH_BLOCKS 3
#define EMU_POOL_CL CH_BLOCKS
#define EMU_POOL_T 160  /* 4 consumer warps + 1 producer warp */
#define EMU_NAMED_T 128 /* the consumers */
#include "emu_cluster_pool.h"

/* a small machine: room for 3 stages per block, so the ring wraps many times */
int emu_dev_attr(cudaDeviceAttr a) { return a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448 : 161280; }

#define XE 12
static uint64_t g_rng = 0x51ed2701f3a5c7b9ull;

struct Prod {
  int rows, cols;
  std::vector<uint8_t> w, s; /* the tile layout: 512 code bytes and 64 scale bytes per unit */
  float gain;
};

/* index of value i in the fragment-ordered prep (prep_store.cuh's layout, written out here) */
static size_t prep_index(int i) {
  const int kk = i & 31, rr = kk & 15;
  return (size_t)((((i >> 5) * 4 + ((rr & 7) >> 1)) * 8) + (kk >> 4) * 4 + (rr >> 3) * 2 + (rr & 1));
}

/* weight (row, k) from the tile layout: the code's fragment position, its sign and magnitude
 * bits, the scale of its 16-group */
static double tile_weight(const Prod &p, int row, int k) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const int nunits = p.cols / 64, tile = row / 16, rr = row % 16, u = k / 64, m = (k % 64) / 16, kk = k % 16;
  int lane, i;
  ck_frag_of(rr, kk, &lane, &i);
  uint32_t word;
  memcpy(&word, p.w.data() + (((size_t)tile * nunits + u) * 32 + lane) * 16 + 4 * m, 4);
  const double v = mag[(word >> ck_fp4_mag_pos(i)) & 7u] * ((word >> ck_fp4_sign_pos(i)) & 1u ? -1.0 : 1.0);
  return v * ck_nv_tile_scale(p.s.data(), tile, nunits, u, rr & 7, rr >> 3, m);
}

static Prod make_prod(int rows, int cols) {
  Prod p;
  p.rows = rows;
  p.cols = cols;
  const size_t units = (size_t)rows / 16 * (cols / 64);
  p.w.resize(units * 512);
  p.s.resize(units * 64);
  for (auto &b : p.w) b = (uint8_t)emu_xorshift64(&g_rng);
  for (auto &b : p.s) b = (uint8_t)emu_xorshift64(&g_rng);
  double ss = 0;
  for (int r = 0; r < rows; r += 7)
    for (int k = 0; k < cols; k += 5) ss += tile_weight(p, r, k) * tile_weight(p, r, k);
  const double n = (double)((rows + 6) / 7) * ((cols + 4) / 5);
  p.gain = (float)(1.0 / sqrt(cols * ss / n));
  return p;
}
static float unit_rand() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-52 - 1.0); }

/* A chain of products and its buffers. Plain: each product's prep from the previous output.
 * With norms: layers of (norm → A, B, norm → C, D) over a residual of H values — the norm
 * steps' inputs made inside the grid from the residual and the previous output. */
struct Chain {
  std::vector<Prod> prods;
  std::vector<int> which;  /* step → product */
  std::vector<char> normed; /* step → a norm step */
  std::vector<std::vector<uint16_t>> xp;
  std::vector<std::vector<float>> y, h, nw;
  std::vector<float> zero;
  std::vector<ck_chain_step> steps;
  int max_cols = 0, max_tiles = 0;

  void build(bool norms) {
    const int nsteps = (int)which.size();
    xp.resize((size_t)nsteps);
    y.resize((size_t)nsteps);
    steps.resize((size_t)nsteps);
    for (int i = 0; i < nsteps; i++) {
      const Prod &p = prods[(size_t)which[(size_t)i]];
      xp[(size_t)i].assign((size_t)p.cols, 0xffff);
      y[(size_t)i].assign((size_t)p.rows, 0.f);
      max_cols = p.cols > max_cols ? p.cols : max_cols;
      max_tiles = p.rows / 16 > max_tiles ? p.rows / 16 : max_tiles;
    }
    const int k0 = prods[(size_t)which[0]].cols;
    if (!norms)
      for (int k = 0; k < k0; k++) xp[0][prep_index(k)] = ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ck_f32_to_bf16(unit_rand())), XE));
    zero.assign((size_t)k0, 0.f);
    h.assign(1, std::vector<float>((size_t)k0));
    for (auto &v : h[0]) v = unit_rand();
    for (int i = 0; i < nsteps; i++) {
      const Prod &p = prods[(size_t)which[(size_t)i]];
      ck_chain_step &st = steps[(size_t)i];
      memset(&st, 0, sizeof st);
      st.w = p.w.data();
      st.s = p.s.data();
      st.tiles = p.rows / 16;
      st.nunits = p.cols / 64;
      st.xp = xp[(size_t)i].data();
      st.y = y[(size_t)i].data();
      const bool next = i + 1 < nsteps && !normed[(size_t)i + 1];
      st.xnext = next ? xp[(size_t)i + 1].data() : NULL;
      st.knext = next ? prods[(size_t)which[(size_t)i + 1]].cols : 0;
      st.gain = p.gain;
      if (normed[(size_t)i]) {
        nw.emplace_back((size_t)p.cols);
        for (auto &v : nw.back()) v = 1.0f + 0.5f * unit_rand();
        h.emplace_back((size_t)p.cols, NAN);
        st.nw = nw.back().data();
        st.yprev = i ? y[(size_t)i - 1].data() : zero.data();
        st.hin = h[h.size() - 2].data();
        st.hout = h.back().data();
      }
    }
    /* (emplace_back may have moved the vectors: point again) */
    for (int i = 0, n = 0; i < nsteps; i++)
      if (normed[(size_t)i]) {
        steps[(size_t)i].nw = nw[(size_t)n].data();
        steps[(size_t)i].hin = h[(size_t)n].data();
        steps[(size_t)i].hout = h[(size_t)n + 1].data();
        n++;
      }
  }
};

int main() {
  /* plain: (rows, cols), each cols ≤ the previous rows; 17 and 18 units make a partial last
   * stage and one-unit pairs, 64 rows (4 tiles against 3 blocks) a split product, 1 unit a
   * one-unit stage; twice, so the split tiles' counters are reused */
  Chain plain, normed;
  const int shapes[][2] = {{1152, 1088}, {64, 1152}, {1088, 64}, {64, 1088}, {1152, 64}};
  for (auto &sh : shapes) plain.prods.push_back(make_prod(sh[0], sh[1]));
  for (int i = 0; i < 10; i++) plain.which.push_back(i % 5), plain.normed.push_back(0);
  plain.build(false);
  /* with norms: H = 128; A and C 128 → 1152 after a norm, B and D 1152 → 128 (split) */
  const int nshapes[][2] = {{1152, 128}, {128, 1152}, {1152, 128}, {128, 1152}};
  for (auto &sh : nshapes) normed.prods.push_back(make_prod(sh[0], sh[1]));
  for (int i = 0; i < 8; i++) normed.which.push_back(i % 4), normed.normed.push_back(i % 2 == 0);
  normed.build(true);
  std::vector<unsigned char> scratch(ck_chain_scratch_bytes(1152 / 16, CH_BLOCKS));
  emu_pool_start();
  struct Case {
    int norms, mode;
    const char *name;
  };
  const Case cases[] = {{0, 32, "x through the L2"},
                        {0, 96, "x through the L2, full-stage loop"},
                        {0, 128, "x staged"},
                        {0, 192, "x staged, full-stage loop"},
                        {0, 144, "x staged, no split"},
                        {1, 32, "norm steps, x through the L2"},
                        {1, 192, "norm steps, x staged, full-stage loop"},
                        {0, 96 | 512 | 1024 | (2 << 12), "x through the L2, full-stage loop, fast barrier, two mma chains, 2 stages in flight"},
                        {1, 32 | 512 | (1 << 12), "norm steps, x through the L2, fast barrier, 1 stage in flight"}};
  std::vector<std::vector<float>> first_y[2];
  return emu_run_cases(cases, [&](const Case &c) {
    Chain &ch = c.norms ? normed : plain;
    const int nsteps = (int)ch.steps.size();
    for (int i = c.norms ? 0 : 1; i < nsteps; i++) std::fill(ch.xp[(size_t)i].begin(), ch.xp[(size_t)i].end(), (uint16_t)0xffff);
    for (auto &v : ch.y) std::fill(v.begin(), v.end(), NAN);
    for (size_t n = 1; n < ch.h.size(); n++) std::fill(ch.h[n].begin(), ch.h[n].end(), NAN);
    std::fill(scratch.begin(), scratch.end(), 0);
    int nst = 0;
    const int e = ck_chain_run(ch.steps.data(), nsteps, ch.max_cols, ch.max_tiles, XE, scratch.data(), CH_BLOCKS,
                               4, 4, 1, c.mode, &nst, NULL);
    if (e) {
      printf("FAIL %s: ck_chain_run returned %d\n", c.name, e);
      return 1;
    }
    int bad = 0;
    double worst = 0, worst_norm = 0;
    for (int i = 0; i < nsteps; i++) {
      const ck_chain_step &st = ch.steps[(size_t)i];
      const Prod &p = ch.prods[(size_t)ch.which[(size_t)i]];
      std::vector<double> xv((size_t)p.cols);
      for (int k = 0; k < p.cols; k++) xv[(size_t)k] = ldexp(ck_f16_to_f32(ch.xp[(size_t)i][prep_index(k)]), -XE);
      if (st.nw) { /* the residual exactly, the input within a bf16 step of a float64 norm */
        double ss = 0;
        int hbad = 0, xbad = 0;
        for (int k = 0; k < p.cols; k++) {
          const float hv = st.hin[k] + st.yprev[k];
          hbad += memcmp(&hv, &st.hout[k], 4) != 0;
          ss += (double)hv * hv;
        }
        const double r = 1.0 / sqrt(ss / p.cols + 1e-6);
        for (int k = 0; k < p.cols; k++) {
          const double want = (double)(st.hin[k] + st.yprev[k]) * r * st.nw[k], d = fabs(xv[(size_t)k] - want);
          worst_norm = fmax(worst_norm, d / fmax(fabs(want), 1e-30));
          xbad += !(d <= fabs(want) * 0x1p-7 + 1e-30);
        }
        if ((hbad || xbad) && bad++ < 4) printf("FAIL %s: norm step %d: %d residual values, %d inputs wrong\n", c.name, i, hbad, xbad);
      }
      double mref = 0, md = 0;
      for (int r = 0; r < p.rows; r++) {
        double ref = 0;
        for (int k = 0; k < p.cols; k++) ref += tile_weight(p, r, k) * xv[(size_t)k];
        mref = fmax(mref, fabs(ref));
        const double d = fabs((double)ch.y[(size_t)i][(size_t)r] - ref);
        md = d == d ? fmax(md, d) : INFINITY;
      }
      const double rel = mref > 0 ? md / mref : md;
      worst = fmax(worst, rel);
      if (!(rel <= 2e-5) && bad++ < 4) printf("FAIL %s: step %d (%dx%d) off by %.3g of its largest output\n", c.name, i, p.rows, p.cols, rel);
      if (st.xnext) {
        int wrong = 0;
        for (int r = 0; r < st.knext; r++)
          wrong += ch.xp[(size_t)i + 1][prep_index(r)] !=
                   ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ck_f32_to_bf16(ch.y[(size_t)i][(size_t)r] * p.gain)), XE));
        if (wrong && bad++ < 4) printf("FAIL %s: step %d wrote %d prep values wrong\n", c.name, i, wrong);
      }
    }
    /* the same bits as the structure's first run (a split changes the sums' order: "no split"
     * is compared with nothing) */
    std::vector<std::vector<float>> &ref_y = first_y[c.norms];
    if (!(c.mode & 16)) {
      if (ref_y.empty()) {
        ref_y = ch.y;
      } else {
        int differ = 0;
        for (int i = 0; i < nsteps; i++)
          differ += memcmp(ref_y[(size_t)i].data(), ch.y[(size_t)i].data(), ch.y[(size_t)i].size() * sizeof(float)) != 0;
        if (differ && bad++ < 4) printf("FAIL %s: %d steps' outputs differ from the first run's bits\n", c.name, differ);
      }
    }
    printf("%s %s: %d stages per block, %d steps, worst %.2e of the largest output", bad ? "FAIL" : "ok  ", c.name, nst,
           nsteps, worst);
    if (c.norms) printf(", norm inputs within %.2e", worst_norm);
    printf("\n");
    return bad ? 1 : 0;
  });
}
