/* Runs the tensor-core mat-vec of qmv_tc.cu (ck_qmv_split through its real launcher, after the
 * upload repack of repack.cu) on host threads (tests/gpu/emu: mbarriers, bulk copies and mma
 * emulated, one block at a time), against a float64 product of the MLX parts the repack read.
 * The kernel's index logic is checked without a GPU, with the stage and warp counts the
 * launcher picks: the one-row kernels (one mma column per scale group, x staged with the
 * weights), the full stages unrolled over the slots and a partial last stage, k splits, a
 * partial last tile, a zero nvfp4 scale, the batch kernel for 2 to 8 rows, affine 4-bit with bf16
 * and f16 scales; and the per-unit kernel of every other fast format (affine 4-bit g128, affine
 * 8-bit, mxfp4, mxfp8, dense bf16 and f16).
 *   - every output within 2e-5 of its row's Σ|w·x| (float32 sums in another order);
 *   - a second run: the same bits; the one-row kernels with 1 (nvfp4), 3 and 4 stages: the same bits.
 * A CTest. Build and run from the repository root:
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc -Isrc/accel/cuda \
 *       -Iinclude tests/gpu/qmv_emulate.cpp -o /tmp/qmv_emulate -lm && /tmp/qmv_emulate
 */
#include "../../src/accel/cuda/qmv_tc.cu"
#include "../../src/accel/cuda/qmv_cols.cu"
#include "../../src/accel/cuda/repack.cu"
#include "../../src/accel/cuda/qmm_grouped.cu"
#include "../../src/accel/cuda/qmm_rows.cu"
#include "../../src/accel/cuda/qmm_wg.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "emu_cases.h"
#include "emu_rng.h"
#include "prep_store.cuh"

#include "emu_block_runner.h"

int emu_dev_attr(cudaDeviceAttr a) {
  return a == cudaDevAttrMultiProcessorCount ? 132 : a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448 : 233472;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32() { return (uint32_t)(emu_xorshift64(&g_rng) >> 17); }
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }

struct Case {
  const char *what;
  int fmt, gs, sdt;    /* format, group size, scale dtype (affine) */
  int rows, cols, nb;  /* product shape, activation rows */
  int ksplit;
  bool zero_scale;     /* nvfp4: one group's scale is 0 */
};

#include "emu_weights.h"

static const char *fmt_name(int fmt) {
  return fmt == CK_NVFP4 ? "nvfp4  " : fmt == CK_AFF4 ? "affine4" : fmt == CK_AFF8 ? "affine8" : fmt == CK_MXFP4 ? "mxfp4  "
         : fmt == CK_MXFP8 ? "mxfp8  " : fmt == CK_DBF16 ? "bf16   " : "f16    ";
}

/* Random x rows (bf16 over a few binades, signs mixed, a few zeros) and their prep as the
 * decoder's kernels write it (prep_store.cuh) for nb rows, with the affine group sums of those
 * fp16 values: into xp / xs / xexp (one nb-row layout). */
static void make_x(const Case &c, int nb, uint16_t *x, uint16_t *xp, float *xs, int *xexp) {
  const bool aff = c.fmt == CK_AFF4 || c.fmt == CK_AFF8;
  for (int b = 0; b < nb; b++) {
    float m = 0;
    for (int i = 0; i < c.cols; i++) {
      const float v = (unit() * 2 - 1) * ldexpf(1.0f, -(int)(unit() * 6));
      x[(size_t)b * c.cols + i] = ck_f32_to_bf16(i % 89 == 7 ? 0.0f : v);
      m = fmaxf(m, fabsf(ck_bf16_to_f32(x[(size_t)b * c.cols + i])));
    }
    const int xmode = c.fmt == CK_DBF16 ? 2 : 1; /* dense bf16 takes x as it is */
    xexp[b] = prep_exp(m, xmode);
    for (int i = 0; i < c.cols; i++) prep_store(xp + (size_t)b * c.cols, i, x[(size_t)b * c.cols + i], xexp[b], xmode);
    if (aff)
      for (int g = 0; g < c.cols / c.gs; g++) {
        float s = 0;
        for (int k = 0; k < c.gs; k++)
          s += ck_f16_to_f32(ck_f32_to_f16(ldexpf(ck_bf16_to_f32(x[(size_t)b * c.cols + g * c.gs + k]), xexp[b])));
        xs[(size_t)g * 8 + b] = s;
      }
  }
}

/* Σ_k W(r, k)·x[k] in float64 and Σ|·| */
static void ref_dot(const Weights &W, int r, const uint16_t *x, double *ref, double *mag) {
  *ref = *mag = 0;
  for (int k = 0; k < W.cols; k++) {
    const double p = W.at(r, k) * (double)ck_bf16_to_f32(x[k]);
    *ref += p;
    *mag += fabs(p);
  }
}

static int run_case(const Case &c) {
  const Weights W = make_weights(c);
  ck_layout L = layout_of(c, 1);
  std::vector<uint8_t> rw(ck_rep_w_bytes(&L), 0x5a), rs(ck_rep_s_bytes(&L), 0x5a);
  L.w = rw.data();
  L.s = rs.data();
  L.w_slab = rw.size();
  L.s_slab = rs.size();
  int rc = repack(&L, W);
  const int64_t xcols = ck_xp_cols(&L);
  std::vector<uint16_t> x((size_t)c.nb * c.cols), xp((size_t)xcols * 8, 0);
  std::vector<float> xs((size_t)(xcols / 32 + 1) * 8, 0.0f);
  std::vector<int> xexp(8, 0);
  make_x(c, c.nb, x.data(), xp.data(), xs.data(), xexp.data());
  const int64_t kstride = (int64_t)c.nb * c.rows;
  std::vector<float> y((size_t)c.ksplit * kstride, NAN);
  if (!rc)
    rc = ck_qmv_split(&L, 0, xp.data(), xs.data(), xexp.data(), c.nb, y.data(), c.rows, c.ksplit, kstride, NULL);
  /* a second run: the same bits */
  std::vector<float> y2(y.size(), NAN);
  if (!rc) rc = ck_qmv_split(&L, 0, xp.data(), xs.data(), xexp.data(), c.nb, y2.data(), c.rows, c.ksplit, kstride, NULL);
  if (rc) {
    printf("FAIL %-34s launch rc=%d\n", c.what, rc);
    return 1;
  }
  double worst = 0;
  int bad = 0;
  /* the one-row kernels with other stage counts (the launcher takes one stage where the grid
   * then fits one wave): the same bits */
  if (c.nb == 1 && (c.fmt == CK_NVFP4 || (c.fmt == CK_AFF4 && c.gs <= 64)))
    for (int nst : {1, 3, 4}) {
      if (nst == 1 && c.fmt != CK_NVFP4) continue;
      std::vector<float> y3(y.size(), NAN);
      const int r3 = ck_qmv_split_stages(&L, 0, xp.data(), xs.data(), xexp.data(), 1, y3.data(), c.rows, c.ksplit,
                                         kstride, nst, NULL);
      if (r3 || memcmp(y3.data(), y.data(), y.size() * sizeof(float))) {
        printf("  %d stages: %s\n", nst, r3 ? "launch refused" : "other bits");
        bad++;
      }
    }
  for (int b = 0; b < c.nb; b++)
    for (int r = 0; r < c.rows; r++) {
      double ref, mag;
      ref_dot(W, r, &x[(size_t)b * c.cols], &ref, &mag);
      double got = 0;
      for (int s = 0; s < c.ksplit; s++) {
        const size_t i = (size_t)s * kstride + (size_t)b * c.rows + r;
        got += (double)y[i];
        if (!(y2[i] == y[i])) bad++;
      }
      const double err = fabs(got - ref) / (mag > 0 ? mag : 1.0);
      if (!(err <= 2e-5)) bad++;
      if (!(err <= worst)) worst = err;
    }
  printf("%s %-38s %s g%-3d %3d x %5d nb %d stages %d ksplit %d: worst %.2e of sum|w.x|\n",
         bad ? "FAIL" : "ok  ", c.what, fmt_name(c.fmt), c.gs, c.rows, c.cols, c.nb, stages_for(&L, c.nb), c.ksplit,
         worst);
  return bad != 0;
}

/* S slabs of random weights W, repacked one by one and stacked into rw / rs, which L points at */
static int make_slabs(const Case &c, int S, ck_layout *L, std::vector<Weights> &W, std::vector<uint8_t> &rw,
                      std::vector<uint8_t> &rs) {
  for (int e = 0; e < S; e++) {
    W.push_back(make_weights(c));
    ck_layout L1 = layout_of(c, 1);
    std::vector<uint8_t> w1(ck_rep_w_bytes(&L1), 0x5a), s1(ck_rep_s_bytes(&L1), 0x5a);
    L1.w = w1.data();
    L1.s = s1.data();
    if (repack(&L1, W.back())) return 1;
    rw.insert(rw.end(), w1.begin(), w1.end());
    rs.insert(rs.end(), s1.begin(), s1.end());
    L->w_slab = w1.size();
    L->s_slab = s1.size();
  }
  L->w = rw.data();
  L->s = rs.data();
  return 0;
}

/* y's batches z < nz (nb rows each, zy apart) against float64 products with slab on[z] (< 0:
 * none, the outputs left NaN) of x batch z (xper; else batch 0); *worst: the largest error */
static int check_batches(const Case &c, const std::vector<Weights> &W, const int *on, int nz, int nb,
                         const std::vector<uint16_t> &x, int xper, const std::vector<float> &y, int64_t zy,
                         double *worst) {
  int bad = 0;
  for (int z = 0; z < nz; z++)
    for (int b = 0; b < nb; b++)
      for (int r = 0; r < c.rows; r++) {
        const float got = y[(size_t)z * zy + (size_t)b * c.rows + r];
        if (on[z] < 0) {
          bad += !isnan(got);
          continue;
        }
        double ref, mag;
        ref_dot(W[on[z]], r, &x[((size_t)(xper ? z : 0) * nb + b) * c.cols], &ref, &mag);
        const double err = fabs((double)got - ref) / (mag > 0 ? mag : 1.0);
        if (!(err <= 2e-5)) bad++;
        if (!(err <= *worst)) *worst = err;
      }
  return bad;
}

/* n batches of nb random rows of x and their preps, in ck_xprep_batched's layout */
struct XBatches {
  std::vector<uint16_t> x, xp;
  std::vector<float> xs;
  std::vector<int> xexp;
  XBatches(const Case &c, int n, int nb)
      : x((size_t)n * nb * c.cols), xp((size_t)n * nb * c.cols, 0), xs((size_t)n * (c.cols / 32) * 8, 0.0f),
        xexp((size_t)n * 8, 0) {
    for (int b = 0; b < n; b++)
      make_x(c, nb, &x[(size_t)b * nb * c.cols], &xp[(size_t)b * nb * c.cols], &xs[(size_t)b * (c.cols / 32) * 8],
             &xexp[(size_t)b * 8]);
  }
};

/* The expert mode (ck_qmv_experts): a weight of 3 slabs, batches z on slabs zslab[z] (−1: no
 * product, its outputs left as they were), x per batch (xper) or batch 0 for all. */
static int run_expert_case(const Case &c, int xper) {
  const int S = 3, nz = 5, zslab[nz] = {2, -1, 0, 2, 1};
  std::vector<Weights> W;
  std::vector<uint8_t> rw, rs;
  ck_layout L = layout_of(c, S);
  if (make_slabs(c, S, &L, W, rw, rs)) return 1;
  const int nb = c.nb, nbx = xper ? nz : 1; /* x batches made */
  XBatches X(c, nbx, nb);
  const std::vector<uint16_t> &x = X.x, &xp = X.xp;
  const std::vector<float> &xs = X.xs;
  const std::vector<int> &xexp = X.xexp;
  const int64_t zy = (int64_t)nb * c.rows + 3;
  std::vector<float> y((size_t)nz * zy, NAN);
  /* (the ids read before or after the kernel's wait: both ways, alternating) */
  int rc = ck_qmv_experts(&L, zslab, nz, xp.data(), xs.data(), xexp.data(), nb, xper, y.data(), c.rows, zy, xper, NULL);
  if (rc) {
    printf("FAIL %-34s expert launch rc=%d\n", c.what, rc);
    return 1;
  }
  double worst = 0;
  int bad = check_batches(c, W, zslab, nz, nb, x, xper, y, zy, &worst);
  printf("%s experts: %-29s %s g%-3d %3d x %5d nb %d, x %s: worst %.2e of sum|w.x|\n", bad ? "FAIL" : "ok  ", c.what,
         fmt_name(c.fmt), c.gs, c.rows, c.cols, nb, xper ? "per batch" : "shared", worst);
  return bad != 0;
}

/* The batched decode's product (ck_qmv_rows): 3 batches of 8 rows on one weight, the batches of
 * a tile side by side (blockIdx.x); against float64 products and, bit for bit, against the
 * expert mode's tile-major order (ck_qmv_experts on slab 0 for every batch); then the first 3
 * rows of batch 1 as one batch of 3 rows (their prep is the first rows' of the 8-row batch): the
 * same bits as in the batch of 8. */
static int run_rows_case(const Case &c) {
  const int nz = 3, nb = 8, zslab[nz] = {0, 0, 0};
  std::vector<Weights> W;
  std::vector<uint8_t> rw, rs;
  ck_layout L = layout_of(c, 1);
  if (make_slabs(c, 1, &L, W, rw, rs)) return 1;
  XBatches X(c, nz, nb);
  const std::vector<uint16_t> &x = X.x, &xp = X.xp;
  const std::vector<float> &xs = X.xs;
  const std::vector<int> &xexp = X.xexp;
  const int64_t zy = (int64_t)nb * c.rows;
  std::vector<float> y((size_t)nz * zy, NAN), ye((size_t)nz * zy, NAN);
  std::vector<float> y3((size_t)3 * c.rows, NAN);
  int rc = ck_qmv_rows(&L, zslab, nz, nb, xp.data(), xs.data(), xexp.data(), y.data(), c.rows, 1, 0, NULL);
  if (!rc) rc = ck_qmv_experts(&L, zslab, nz, xp.data(), xs.data(), xexp.data(), nb, 1, ye.data(), c.rows, zy, 1, NULL);
  if (!rc)
    rc = ck_qmv_rows(&L, zslab, 1, 3, xp.data() + (size_t)nb * c.cols, xs.data() + (size_t)(c.cols / 32) * 8,
                     xexp.data() + 8, y3.data(), c.rows, 1, 0, NULL);
  /* k splits (3, or as many as the units allow): the partial sums split s at s·kstride, added in
   * order against float64; the first 3 rows of batch 1 as a batch of 3 with the same splits: the
   * same bits */
  const int ks = L.nunits < 3 ? (int)L.nunits : 3;
  const int64_t kstride = (int64_t)nz * zy, kstride3 = (int64_t)3 * c.rows;
  std::vector<float> yk((size_t)ks * kstride, NAN), yk3((size_t)ks * kstride3, NAN), ysum((size_t)nz * zy, 0.0f);
  if (!rc) rc = ck_qmv_rows(&L, zslab, nz, nb, xp.data(), xs.data(), xexp.data(), yk.data(), c.rows, ks, kstride, NULL);
  if (!rc)
    rc = ck_qmv_rows(&L, zslab, 1, 3, xp.data() + (size_t)nb * c.cols, xs.data() + (size_t)(c.cols / 32) * 8,
                     xexp.data() + 8, yk3.data(), c.rows, ks, kstride3, NULL);
  if (rc) {
    printf("FAIL %-34s rows launch rc=%d\n", c.what, rc);
    return 1;
  }
  double worst = 0, worst_k = 0;
  int bad = check_batches(c, W, zslab, nz, nb, x, 1, y, zy, &worst);
  const int same = !memcmp(y.data(), ye.data(), y.size() * sizeof(float));
  const int same3 = !memcmp(y3.data(), y.data() + zy, y3.size() * sizeof(float));
  int same3k = 1;
  for (int s = 0; s < ks; s++) {
    for (size_t i = 0; i < ysum.size(); i++) ysum[i] += yk[(size_t)s * kstride + i];
    same3k &= !memcmp(yk3.data() + (size_t)s * kstride3, yk.data() + (size_t)s * kstride + zy, (size_t)kstride3 * 4);
  }
  const int bad_k = check_batches(c, W, zslab, nz, nb, x, 1, ysum, zy, &worst_k);
  printf("%s rows: %-32s %s g%-3d %3d x %5d, 3 batches of 8: worst %.2e of sum|w.x| (%d k splits %.2e), %s, %s%s\n",
         bad || bad_k || !same || !same3 || !same3k ? "FAIL" : "ok  ", c.what, fmt_name(c.fmt), c.gs, c.rows, c.cols,
         worst, ks, worst_k, same ? "the tile-major order's bits" : "OTHER bits than the tile-major order's",
         same3 ? "a batch of 3 the same bits" : "a batch of 3 OTHER bits",
         same3k ? "" : ", a batch of 3 OTHER bits with k splits");
  return bad || bad_k || !same || !same3 || !same3k;
}

/* The batched step's nvfp4 product at 2-8 rows (ck_qmv_cols: the rows in the mma's columns),
 * with c.ksplit k splits: against float64 products (splits added in order), a second run the same
 * bits; the rows in reverse order give each row the same bits; at 4 rows the first 3 alone, and
 * at 8 the first 5, the same bits as among them all (one kernel for 3-4 rows, one for 5-8). */
static int run_cols_case(const Case &c) {
  const Weights W = make_weights(c);
  ck_layout L = layout_of(c, 1);
  std::vector<uint8_t> rw(ck_rep_w_bytes(&L), 0x5a), rs(ck_rep_s_bytes(&L), 0x5a);
  L.w = rw.data();
  L.s = rs.data();
  L.w_slab = rw.size();
  L.s_slab = rs.size();
  if (repack(&L, W) || !ck_qmv_cols_supported(&L, c.nb)) {
    printf("FAIL cols: %-32s repack or an unsupported shape\n", c.what);
    return 1;
  }
  const int nb = c.nb, ks = c.ksplit;
  std::vector<uint16_t> x((size_t)nb * c.cols), xp((size_t)nb * c.cols), xpr((size_t)nb * c.cols);
  std::vector<float> xs((size_t)(c.cols / 32 + 1) * 8, 0.0f);
  std::vector<int> xexp(8, 0), xexpr(8, 0);
  make_x(c, nb, x.data(), xp.data(), xs.data(), xexp.data());
  for (int b = 0; b < nb; b++) { /* the rows reversed */
    memcpy(&xpr[(size_t)(nb - 1 - b) * c.cols], &xp[(size_t)b * c.cols], (size_t)c.cols * 2);
    xexpr[nb - 1 - b] = xexp[b];
  }
  const int64_t kstride = (int64_t)nb * c.rows;
  std::vector<float> y((size_t)ks * kstride, NAN), y2(y.size(), NAN), yr(y.size(), NAN), y3(y.size(), NAN);
  int rc = ck_qmv_cols(&L, nb, xp.data(), xexp.data(), y.data(), c.rows, ks, kstride, NULL);
  if (!rc) rc = ck_qmv_cols(&L, nb, xp.data(), xexp.data(), y2.data(), c.rows, ks, kstride, NULL);
  if (!rc) rc = ck_qmv_cols(&L, nb, xpr.data(), xexpr.data(), yr.data(), c.rows, ks, kstride, NULL);
  const int fewer = nb == 4 ? 3 : nb == 8 ? 5 : 0; /* the same kernel with fewer rows */
  if (!rc && fewer) rc = ck_qmv_cols(&L, fewer, xp.data(), xexp.data(), y3.data(), c.rows, ks, kstride, NULL);
  if (rc) {
    printf("FAIL cols: %-32s launch rc=%d\n", c.what, rc);
    return 1;
  }
  double worst = 0;
  int bad = 0, other = 0;
  for (int b = 0; b < nb; b++)
    for (int r = 0; r < c.rows; r++) {
      double ref, mag, got = 0;
      ref_dot(W, r, &x[(size_t)b * c.cols], &ref, &mag);
      for (int s = 0; s < ks; s++) {
        const size_t i = (size_t)s * kstride + (size_t)b * c.rows + r;
        const size_t ir = (size_t)s * kstride + (size_t)(nb - 1 - b) * c.rows + r;
        got += (double)y[i];
        other += !(y2[i] == y[i]) + !(yr[ir] == y[i]) + (b < fewer && !(y3[i] == y[i]));
      }
      const double err = fabs(got - ref) / (mag > 0 ? mag : 1.0);
      if (!(err <= 2e-5)) bad++;
      if (!(err <= worst)) worst = err;
    }
  printf("%s cols: %-32s %3d x %5d, %d rows, %d k splits: worst %.2e of sum|w.x|, %s\n",
         bad || other ? "FAIL" : "ok  ", c.what, c.rows, c.cols, nb, ks, worst,
         other ? "OTHER bits again, reversed or with fewer rows" : "the same bits again, reversed and with fewer rows");
  return bad || other;
}

/* The batched step's product (ck_qmm_rows): 40 rows (5 batches of 8) with c.ksplit k splits, against
 * float64 products; launched again, the same bits (the split counters were left at zero); the
 * first 13 rows alone (the kernel with registers for 2 batches): the same bits as among 40. */
static int run_qmm_rows_case(const Case &c) {
  const int nz = 5, nb = 8, nr = nz * nb, zslab[nz] = {0, 0, 0, 0, 0};
  std::vector<Weights> W;
  std::vector<uint8_t> rw, rs;
  ck_layout L = layout_of(c, 1);
  if (make_slabs(c, 1, &L, W, rw, rs)) return 1;
  XBatches X(c, nz, nb);
  const int64_t groups = L.tiles;
  std::vector<float> y((size_t)nr * c.rows, NAN), y2(y.size(), NAN), y13((size_t)13 * c.rows, NAN);
  std::vector<float> part((size_t)c.ksplit * nr * L.tiles * 16, NAN);
  std::vector<unsigned> cnt((size_t)groups, 0u);
  int rc = ck_qmm_rows(&L, nr, c.ksplit, X.xp.data(), X.xs.data(), X.xexp.data(), y.data(), c.rows, part.data(),
                       cnt.data(), NULL);
  if (!rc)
    rc = ck_qmm_rows(&L, nr, c.ksplit, X.xp.data(), X.xs.data(), X.xexp.data(), y2.data(), c.rows, part.data(),
                     cnt.data(), NULL);
  if (!rc)
    rc = ck_qmm_rows(&L, 13, c.ksplit, X.xp.data(), X.xs.data(), X.xexp.data(), y13.data(), c.rows, part.data(),
                     cnt.data(), NULL);
  if (rc) {
    printf("FAIL %-34s qmm_rows launch rc=%d\n", c.what, rc);
    return 1;
  }
  double worst = 0;
  int bad = check_batches(c, W, zslab, nz, nb, X.x, 1, y, (int64_t)nb * c.rows, &worst);
  const int again = !memcmp(y.data(), y2.data(), y.size() * sizeof(float));
  const int same13 = !memcmp(y13.data(), y.data(), y13.size() * sizeof(float));
  int zero = 1;
  for (unsigned v : cnt) zero &= v == 0;
  printf("%s qmm_rows: %-28s %s g%-3d %3d x %5d, 40 rows, %d split(s): worst %.2e of sum|w.x|, %s, %s%s\n",
         bad || !again || !same13 || !zero ? "FAIL" : "ok  ", c.what, fmt_name(c.fmt), c.gs, c.rows, c.cols, c.ksplit,
         worst, again ? "again the same bits" : "again OTHER bits",
         same13 ? "13 rows the same bits" : "13 rows OTHER bits", zero ? "" : ", counters NOT back at zero");
  return bad || !again || !same13 || !zero;
}

/* x rows (bf16, exponents xexp per row) in ck_xprep_wg's layout for one launch of nr rows: fp16
 * x·2^e at wg_off(n, r, k), rows n > r ≥ nr zero; rows taken in the order perm[] */
static std::vector<uint16_t> wg_layout(const Case &c, const std::vector<uint16_t> &x, const std::vector<int> &xexp,
                                       const int *perm, int nr) {
  const int n = wg_rows_n(nr);
  std::vector<uint16_t> xw((size_t)n * c.cols, 0);
  for (int r = 0; r < nr; r++)
    for (int k = 0; k < c.cols; k++) {
      const int src = perm[r];
      xw[wg_off(n, r, k) / 2] = ck_f32_to_f16(ldexpf(ck_bf16_to_f32(x[(size_t)src * c.cols + k]), xexp[src]));
    }
  return xw;
}

/* The warpgroup product (ck_qmm_wg, nvfp4): 40 rows (n 64) with c.ksplit k splits against float64
 * products; again with the rows in reverse order: each row the same bits; the counters back at
 * zero; 13 rows (n 16) against float64. */
static int run_qmm_wg_case(const Case &c) {
  const int nz = 5, nb = 8, nr = nz * nb, zslab[nz] = {0, 0, 0, 0, 0};
  std::vector<Weights> W;
  std::vector<uint8_t> rw, rs;
  ck_layout L = layout_of(c, 1);
  if (make_slabs(c, 1, &L, W, rw, rs)) return 1;
  XBatches X(c, nz, nb);
  int fwd[nr], rev[nr];
  for (int r = 0; r < nr; r++) fwd[r] = r, rev[r] = nr - 1 - r;
  std::vector<int> xe_fwd(X.xexp), xe_rev((size_t)nr);
  for (int r = 0; r < nr; r++) xe_rev[r] = X.xexp[rev[r]];
  const std::vector<uint16_t> xf = wg_layout(c, X.x, X.xexp, fwd, nr), xr = wg_layout(c, X.x, X.xexp, rev, nr),
                              x13 = wg_layout(c, X.x, X.xexp, fwd, 13);
  std::vector<float> y((size_t)nr * c.rows, NAN), yr(y.size(), NAN), y13((size_t)nb * 2 * c.rows, NAN);
  std::vector<float> part((size_t)c.ksplit * nr * L.tiles * 16, NAN);
  std::vector<unsigned> cnt((size_t)L.tiles, 0u);
  int rc = ck_qmm_wg(&L, nr, c.ksplit, xf.data(), xe_fwd.data(), y.data(), c.rows, part.data(), cnt.data(), NULL);
  if (!rc)
    rc = ck_qmm_wg(&L, nr, c.ksplit, xr.data(), xe_rev.data(), yr.data(), c.rows, part.data(), cnt.data(), NULL);
  if (!rc)
    rc = ck_qmm_wg(&L, 13, c.ksplit, x13.data(), xe_fwd.data(), y13.data(), c.rows, part.data(), cnt.data(), NULL);
  if (rc) {
    printf("FAIL %-34s qmm_wg launch rc=%d\n", c.what, rc);
    return 1;
  }
  double worst = 0;
  int bad = check_batches(c, W, zslab, nz, nb, X.x, 1, y, (int64_t)nb * c.rows, &worst);
  const int zs[2] = {0, 0};
  for (size_t i = (size_t)13 * c.rows; i < y13.size(); i++) y13[i] = y[i]; /* (rows 13.. not computed) */
  bad += check_batches(c, W, zs, 2, nb, X.x, 1, y13, (int64_t)nb * c.rows, &worst);
  int same = 1;
  for (int r = 0; r < nr; r++)
    same &= !memcmp(&y[(size_t)rev[r] * c.rows], &yr[(size_t)r * c.rows], (size_t)c.rows * sizeof(float));
  int zero = 1;
  for (unsigned v : cnt) zero &= v == 0;
  printf("%s qmm_wg: %-30s %s g%-3d %3d x %5d, 40 and 13 rows, %d split(s): worst %.2e of sum|w.x|, %s%s\n",
         bad || !same || !zero ? "FAIL" : "ok  ", c.what, fmt_name(c.fmt), c.gs, c.rows, c.cols, c.ksplit, worst,
         same ? "reversed rows the same bits" : "reversed rows OTHER bits", zero ? "" : ", counters NOT back at zero");
  return bad || !same || !zero;
}

/* The grouped product (ck_qmm_grouped): a weight of 3 slabs, batches of 8 rows; with runs of
 * one slab (mode 1, as dk_moe_group writes them: a full run, a partial one, a batch on no slab
 * left out, an empty run), or without runs (every batch on slab 0, consecutive runs of 3 batches
 * in mode 0, of one in mode 2). */
static int run_grouped_case(const Case &c, int with_runs) {
  const int S = 3, nz = 8, MB = ck_qmm_group_batches();
  const int item_e[nz] = {2, 2, 2, 2, 2, -1, 0, 1};
  /* runs: items 0-3 (slab 2, full), 4 (slab 2), 6 (slab 0), 7 (slab 1), and an empty one */
  const int runs[] = {0, MB < 4 ? MB : 4, 4, 1, 6, 1, 7, 1, 0, 0};
  const int nruns = 5;
  std::vector<Weights> W;
  std::vector<uint8_t> rw, rs;
  ck_layout L = layout_of(c, S);
  if (make_slabs(c, S, &L, W, rw, rs)) return 1;
  const int nb = 8;
  XBatches X(c, nz, nb);
  const std::vector<uint16_t> &x = X.x, &xp = X.xp;
  const std::vector<float> &xs = X.xs;
  const std::vector<int> &xexp = X.xexp;
  const int64_t zy = (int64_t)nb * c.rows + 3;
  std::vector<float> y((size_t)nz * zy, NAN);
  /* without runs: consecutive runs of 3 batches (the last partial), or of one */
  const int len = with_runs == 2 ? 1 : 3;
  with_runs = with_runs == 1;
  int rc = with_runs ? ck_qmm_grouped(&L, item_e, runs, nruns, nz, 0, xp.data(), xs.data(), xexp.data(), y.data(),
                                      c.rows, zy, NULL)
                     : ck_qmm_grouped(&L, NULL, NULL, 0, nz, len, xp.data(), xs.data(), xexp.data(), y.data(), c.rows,
                                      zy, NULL);
  if (rc) {
    printf("FAIL %-34s grouped launch rc=%d\n", c.what, rc);
    return 1;
  }
  /* the slab each batch ran on (-1: none) */
  int on[nz];
  for (int z = 0; z < nz; z++) on[z] = with_runs ? -1 : 0;
  if (with_runs)
    for (int r = 0; r < nruns; r++)
      for (int k = 0; k < runs[2 * r + 1]; k++) on[runs[2 * r] + k] = item_e[runs[2 * r]];
  double worst = 0;
  int bad = check_batches(c, W, on, nz, nb, x, 1, y, zy, &worst);
  for (int z = 0; z < nz; z++) /* the gap between batches stays untouched */
    for (int k = nb * c.rows; k < zy; k++) bad += !isnan(y[(size_t)z * zy + k]);
  printf("%s grouped: %-29s %s g%-3d %3d x %5d, %s: worst %.2e of sum|w.x|\n", bad ? "FAIL" : "ok  ", c.what,
         fmt_name(c.fmt), c.gs, c.rows, c.cols, with_runs ? "runs" : "one slab", worst);
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc > 1) g_rng = strtoull(argv[1], NULL, 0) | 1;
  const int NV = CK_NVFP4, AF = CK_AFF4, BF = CKT_BF16, F16 = CKT_F16;
  /* 37 units = 2 full stages of 16 and a partial one of 5; 32 units = full stages only; 84
   * units (the 31B's 5376-wide rows) = 5 full stages, one after the last round of 2 slots,
   * and a partial one of 4; 48 units = 3 full stages */
  const Case cases[] = {
      {"one row, 5376 wide: a full stage after the rounds", NV, 16, BF, 40, 64 * 84, 1, 1, false},
      {"one row, 3 full stages, 2 slots", NV, 16, BF, 24, 64 * 48, 1, 1, false},
      {"affine g64, 5376 wide", AF, 64, BF, 24, 64 * 84, 1, 1, false},
      {"one row, partial stage and tile", NV, 16, BF, 40, 64 * 37, 1, 1, false},
      {"one row, full stages, zero scale", NV, 16, BF, 32, 64 * 32, 1, 1, true},
      {"one row, k split 2", NV, 16, BF, 40, 64 * 37, 1, 2, false},
      {"one row, k split 3, 1-unit stage", NV, 16, BF, 24, 64 * 49, 1, 3, false},
      {"two rows (batch kernel)", NV, 16, BF, 40, 64 * 37, 2, 1, false},
      {"affine g64 one row", AF, 64, BF, 40, 64 * 37, 1, 1, false},
      {"affine g32 one row, f16 scales", AF, 32, F16, 40, 64 * 37, 1, 1, false},
      {"affine g64 two rows", AF, 64, BF, 24, 64 * 37, 2, 1, false},
      {"affine g128 one row (per-unit kernel)", AF, 128, BF, 40, 128 * 19, 1, 1, false},
      {"affine 8-bit g64", CK_AFF8, 64, BF, 40, 64 * 37, 1, 1, false},
      {"affine 8-bit g32, f16, three rows", CK_AFF8, 32, F16, 24, 32 * 45, 3, 1, false},
      {"mxfp4 one row", CK_MXFP4, 32, BF, 40, 64 * 37, 1, 1, false},
      {"mxfp4 eight rows, k split 2", CK_MXFP4, 32, BF, 24, 64 * 37, 8, 2, false},
      {"mxfp8 one row", CK_MXFP8, 32, BF, 40, 32 * 45, 1, 1, false},
      {"dense bf16 one row", CK_DBF16, 0, BF, 40, 32 * 45, 1, 1, false},
      {"dense f16 two rows", CK_DF16, 0, BF, 24, 32 * 45, 2, 1, false},
  };
  int bad = emu_run_cases(cases, run_case);
  const Case experts[] = {
      {"one row (x staged)", NV, 16, BF, 40, 64 * 37, 1, 1, false},
      {"affine g64 one row (x staged)", AF, 64, BF, 24, 64 * 20, 1, 1, false},
      {"batches of 8", NV, 16, BF, 24, 64 * 20, 8, 1, false},
      {"affine 8-bit g32, f16", CK_AFF8, 32, F16, 24, 32 * 45, 8, 1, false},
      {"mxfp4 one row", CK_MXFP4, 32, BF, 40, 64 * 9, 1, 1, false},
  };
  for (const Case &c : experts)
    for (int xper = 0; xper < 2; xper++) bad |= run_expert_case(c, xper);
  /* 5 tiles (two blocks, the second with one busy warp) or 3 (a partial tile); 37 units = partial stages */
  const Case grouped[] = {
      {"nvfp4, partial tile", NV, 16, BF, 40, 64 * 37, 8, 1, false},
      {"nvfp4, two blocks", NV, 16, BF, 80, 64 * 11, 8, 1, false},
      {"affine g64", AF, 64, BF, 24, 64 * 20, 8, 1, false},
      {"affine g32, f16 scales", AF, 32, F16, 40, 64 * 9, 8, 1, false},
      {"affine g128", AF, 128, BF, 24, 128 * 5, 8, 1, false},
      {"affine 8-bit g64", CK_AFF8, 64, BF, 40, 64 * 9, 8, 1, false},
      {"affine 8-bit g32, f16", CK_AFF8, 32, F16, 24, 32 * 45, 8, 1, false},
      {"mxfp4", CK_MXFP4, 32, BF, 40, 64 * 9, 8, 1, false},
      {"mxfp8", CK_MXFP8, 32, BF, 24, 32 * 45, 8, 1, false},
      {"dense bf16", CK_DBF16, 0, BF, 40, 32 * 45, 8, 1, false},
      {"dense f16", CK_DF16, 0, BF, 24, 32 * 13, 8, 1, false},
  };
  for (const Case &c : grouped)
    for (int mode = 0; mode < 3; mode++) bad |= run_grouped_case(c, mode);
  /* after the sets above, so that those draw the same random values as before these were added */
  const Case rows[] = {
      {"nvfp4", NV, 16, BF, 40, 64 * 37, 8, 1, false},
      {"affine g64", AF, 64, BF, 24, 64 * 20, 8, 1, false},
      {"affine 8-bit g32, f16", CK_AFF8, 32, F16, 24, 32 * 45, 8, 1, false},
      {"mxfp4", CK_MXFP4, 32, BF, 40, 64 * 9, 8, 1, false},
      {"dense bf16", CK_DBF16, 0, BF, 24, 32 * 13, 8, 1, false},
  };
  for (const Case &c : rows) bad |= run_rows_case(c);
  /* 3 tiles of 37 units (partial stages) or of 84 units (the 31B's 5376-wide rows) */
  const Case cols[] = {
      {"2 rows, partial tile and stage", NV, 16, BF, 40, 64 * 37, 2, 1, false},
      {"2 rows, 3 k splits, zero scale", NV, 16, BF, 48, 64 * 84, 2, 3, true},
      {"4 rows, partial tile and stage", NV, 16, BF, 40, 64 * 37, 4, 1, false},
      {"4 rows, 2 k splits", NV, 16, BF, 48, 64 * 84, 4, 2, false},
      {"8 rows, partial tile and stage", NV, 16, BF, 40, 64 * 37, 8, 1, false},
      {"8 rows, 3 k splits, zero scale", NV, 16, BF, 48, 64 * 84, 8, 3, true},
      {"6 rows", NV, 16, BF, 40, 64 * 20, 6, 1, false},
  };
  for (const Case &c : cols) bad |= run_cols_case(c);
  /* 3 tiles (one block, 3 of its warps busy) or 9 (two blocks); 37 units = partial stages */
  const Case qrows[] = {
      {"nvfp4, partial block, 3 splits", NV, 16, BF, 40, 64 * 37, 8, 3, false},
      {"nvfp4, two blocks, zero scale, 2 splits", NV, 16, BF, 144, 64 * 20, 8, 2, true},
      {"affine g64", AF, 64, BF, 24, 64 * 20, 8, 1, false},
      {"affine g32, f16, 2 splits", AF, 32, F16, 40, 64 * 9, 8, 2, false},
      {"affine g128", AF, 128, BF, 24, 128 * 5, 8, 1, false},
      {"affine 8-bit g32, f16, 3 splits", CK_AFF8, 32, F16, 24, 32 * 45, 8, 3, false},
      {"mxfp4", CK_MXFP4, 32, BF, 40, 64 * 9, 8, 1, false},
      {"mxfp8, 2 splits", CK_MXFP8, 32, BF, 24, 32 * 45, 8, 2, false},
      {"dense bf16", CK_DBF16, 0, BF, 40, 32 * 45, 8, 1, false},
      {"dense f16, 2 splits", CK_DF16, 0, BF, 24, 32 * 13, 8, 2, false},
  };
  for (const Case &c : qrows) bad |= run_qmm_rows_case(c);
  /* 3 tiles (one block, one warpgroup busy), 9 (two blocks, the second's second warpgroup idle),
   * 20 (3 blocks); partial stages */
  const Case qwg[] = {
      {"nvfp4, partial block, 3 splits", NV, 16, BF, 40, 64 * 37, 8, 3, false},
      {"nvfp4, two blocks, zero scale", NV, 16, BF, 144, 64 * 20, 8, 1, true},
      {"nvfp4, three blocks, 2 splits", NV, 16, BF, 320, 64 * 9, 8, 2, false},
  };
  for (const Case &c : qwg) bad |= run_qmm_wg_case(c);
  return bad;
}
