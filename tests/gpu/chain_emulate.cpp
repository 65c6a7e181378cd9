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

int main() {
  /* (rows, cols): each cols ≤ the previous rows; 17 and 18 units make a partial last stage and
   * one-unit pairs, 64 rows (4 tiles against 3 blocks) a split product, 1 unit a one-unit stage */
  const int shapes[][2] = {{1152, 1088}, {64, 1152}, {1088, 64}, {64, 1088}, {1152, 64}};
  const int nshape = 5, reps = 2, nsteps = nshape * reps;
  std::vector<Prod> prods(nshape);
  for (int j = 0; j < nshape; j++) {
    Prod &p = prods[(size_t)j];
    p.rows = shapes[j][0];
    p.cols = shapes[j][1];
    const size_t units = (size_t)p.rows / 16 * (p.cols / 64);
    p.w.resize(units * 512);
    p.s.resize(units * 64);
    for (auto &b : p.w) b = (uint8_t)emu_xorshift64(&g_rng);
    for (auto &b : p.s) b = (uint8_t)emu_xorshift64(&g_rng);
    double ss = 0;
    for (int r = 0; r < p.rows; r += 7)
      for (int k = 0; k < p.cols; k += 5) ss += tile_weight(p, r, k) * tile_weight(p, r, k);
    const double n = (double)((p.rows + 6) / 7) * ((p.cols + 4) / 5);
    p.gain = (float)(1.0 / sqrt(p.cols * ss / n));
  }
  int max_cols = 0, max_tiles = 0;
  for (auto &p : prods) {
    max_cols = p.cols > max_cols ? p.cols : max_cols;
    max_tiles = p.rows / 16 > max_tiles ? p.rows / 16 : max_tiles;
  }
  /* buffers: every step's input prep and output */
  std::vector<std::vector<uint16_t>> xp((size_t)nsteps);
  std::vector<std::vector<float>> y((size_t)nsteps);
  std::vector<ck_chain_step> steps((size_t)nsteps);
  for (int i = 0; i < nsteps; i++) {
    const Prod &p = prods[(size_t)(i % nshape)];
    xp[(size_t)i].assign((size_t)p.cols, 0);
    y[(size_t)i].assign((size_t)p.rows, 0.f);
  }
  for (int k = 0; k < prods[0].cols; k++) {
    const float v = (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-52 - 1.0);
    xp[0][prep_index(k)] = ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ck_f32_to_bf16(v)), XE));
  }
  for (int i = 0; i < nsteps; i++) {
    const Prod &p = prods[(size_t)(i % nshape)];
    ck_chain_step &st = steps[(size_t)i];
    st.w = p.w.data();
    st.s = p.s.data();
    st.tiles = p.rows / 16;
    st.nunits = p.cols / 64;
    st.xp = xp[(size_t)i].data();
    st.y = y[(size_t)i].data();
    st.xnext = i + 1 < nsteps ? xp[(size_t)i + 1].data() : NULL;
    st.knext = i + 1 < nsteps ? prods[(size_t)((i + 1) % nshape)].cols : 0;
    st.gain = p.gain;
  }
  std::vector<unsigned char> scratch(ck_chain_scratch_bytes(max_tiles, CH_BLOCKS));
  emu_pool_start();
  /* modes: x through the L2; with the full-stage loop; staged x; staged with the full-stage
   * loop; staged without splits */
  struct Case {
    int mode;
    const char *name;
  };
  const Case cases[] = {{32, "x through the L2"},
                        {96, "x through the L2, full-stage loop"},
                        {128, "x staged"},
                        {192, "x staged, full-stage loop"},
                        {144, "x staged, no split"}};
  std::vector<std::vector<float>> first_y;
  int case_no = 0;
  return emu_run_cases(cases, [&](const Case &c) {
    for (int i = 1; i < nsteps; i++) std::fill(xp[(size_t)i].begin(), xp[(size_t)i].end(), (uint16_t)0xffff);
    for (auto &v : y) std::fill(v.begin(), v.end(), NAN);
    std::fill(scratch.begin(), scratch.end(), 0);
    int nst = 0;
    const int e = ck_chain_run(steps.data(), nsteps, max_cols, max_tiles, XE, scratch.data(), CH_BLOCKS, 4, 4, 1, c.mode,
                               &nst, NULL);
    if (e) {
      printf("FAIL %s: ck_chain_run returned %d\n", c.name, e);
      return 1;
    }
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < nsteps; i++) {
      const Prod &p = prods[(size_t)(i % nshape)];
      std::vector<double> xv((size_t)p.cols);
      for (int k = 0; k < p.cols; k++) xv[(size_t)k] = ldexp(ck_f16_to_f32(xp[(size_t)i][prep_index(k)]), -XE);
      double mref = 0, md = 0;
      for (int r = 0; r < p.rows; r++) {
        double ref = 0;
        for (int k = 0; k < p.cols; k++) ref += tile_weight(p, r, k) * xv[(size_t)k];
        mref = fmax(mref, fabs(ref));
        const double d = fabs((double)y[(size_t)i][(size_t)r] - ref);
        md = d == d ? fmax(md, d) : INFINITY;
      }
      const double rel = mref > 0 ? md / mref : md;
      worst = fmax(worst, rel);
      if (!(rel <= 2e-5)) {
        if (bad++ < 4) printf("FAIL %s: step %d (%dx%d) off by %.3g of its largest output\n", c.name, i, p.rows, p.cols, rel);
      }
      if (i + 1 < nsteps) {
        int wrong = 0;
        for (int r = 0; r < steps[(size_t)i].knext; r++)
          wrong += xp[(size_t)i + 1][prep_index(r)] !=
                   ck_f32_to_f16(ldexpf(ck_bf16_to_f32(ck_f32_to_bf16(y[(size_t)i][(size_t)r] * p.gain)), XE));
        if (wrong && bad++ < 4) printf("FAIL %s: step %d wrote %d prep values wrong\n", c.name, i, wrong);
      }
    }
    if (case_no++ == 0) {
      first_y = y;
    } else {
      int differ = 0;
      for (int i = 0; i < nsteps; i++)
        differ += memcmp(first_y[(size_t)i].data(), y[(size_t)i].data(), y[(size_t)i].size() * sizeof(float)) != 0;
      /* a split changes the sums' order: compare only the runs with the same split (all but "no split") */
      if (differ && !(c.mode & 16) && bad++ < 4) printf("FAIL %s: %d steps' outputs differ from the first run's bits\n", c.name, differ);
    }
    printf("%s %s: %d stages per block, %d steps, worst %.2e of the largest output\n", bad ? "FAIL" : "ok  ", c.name, nst,
           nsteps, worst);
    return bad ? 1 : 0;
  });
}
