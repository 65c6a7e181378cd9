/* Runs the mat-vec's activation prep of xprep.cu (ck_xprep, ck_xprep_premax, ck_xprep_fixed,
 * through their real launchers) on host threads (tests/gpu/emu/cuda_runtime.h), against a direct
 * prep: fp16 x·2^e in m16n8k16 fragment order (prep_store.cuh's map), the affine formats' group
 * sums of those fp16 values, and xexp — e from the row maximum (max |x·2^e| in [2^14, 2^15)) or
 * given (ck_xprep_fixed: the decoder's bound-derived exponents), dense bf16 as it is. Checked
 * bit for bit, for nvfp4, affine 4-bit g32 / g64 and dense bf16, rows of 64 to 21504 values.
 * And ck_xprep_wg, the warpgroup product's layout of the same values. A CTest. Build and run from the repository root:
 *   g++ -std=c++17 -O2 -pthread -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc -Isrc/accel/cuda \
 *       -Iinclude tests/gpu/xprep_emulate.cpp -o /tmp/xprep_emulate -lm
 */
#include "../../src/accel/cuda/xprep.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "emu_cases.h"
#include "emu_rng.h"
#include "prep_store.cuh"


#define EMU_SMEM_BYTES 1024
#include "emu_block_runner.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }

struct Case {
  int fmt, gs, cols, fixed_e; /* fixed_e: CK_XE_ROWMAX, or the exponent ck_xprep_fixed gets */
};

static const char *fmt_name(int fmt) { return fmt == CK_NVFP4 ? "nvfp4" : fmt == CK_AFF4 ? "affine4" : "bf16"; }

static int run_case(const Case &c) {
  ck_layout L = {};
  L.fmt = c.fmt;
  L.group_size = c.gs;
  L.rows = 16;
  L.cols = c.cols;
  const int cols = c.cols, nblk = (cols + XP_BLOCK - 1) / XP_BLOCK, bf16 = c.fmt == CK_DBF16;
  const int gs = c.fmt == CK_AFF4 ? c.gs : 0;
  /* x over many binades (down to 2^-30 of the largest), signs mixed, a few zeros */
  std::vector<uint16_t> x((size_t)cols);
  for (int i = 0; i < cols; i++) {
    const float v = (unit() * 2 - 1) * ldexpf(1.0f, -(int)(unit() * 30)) * 7.0f;
    x[(size_t)i] = ck_f32_to_bf16(i % 97 == 5 ? 0.0f : v);
  }
  float m = 0;
  for (uint16_t b : x) m = fmaxf(m, fabsf(ck_bf16_to_f32(b)));
  /* the row-maximum prep (ck_xprep: its own maxima), the premax one (maxima given) and, for a
   * fixed exponent, ck_xprep_fixed */
  std::vector<uint16_t> xp1((size_t)cols * 8, 0xffff), xp2 = xp1, xp3 = xp1;
  std::vector<float> xs1((size_t)(cols / 32 + 1) * 8, -7.0f), xs2 = xs1, xs3 = xs1, pmax((size_t)nblk * 8, 0.0f);
  std::vector<int> e1(8, 777), e2 = e1, e3 = e1;
  int rc = ck_xprep(&L, x.data(), 1, xp1.data(), xs1.data(), e1.data(), pmax.data(), NULL);
  std::vector<float> pm2((size_t)nblk, 0.0f);
  for (int b = 0; b < nblk; b++)
    for (int i = b * XP_BLOCK; i < cols && i < (b + 1) * XP_BLOCK; i++)
      pm2[(size_t)b] = fmaxf(pm2[(size_t)b], fabsf(ck_bf16_to_f32(x[(size_t)i])));
  if (!rc) rc = ck_xprep_premax(&L, x.data(), xp2.data(), xs2.data(), e2.data(), pm2.data(), NULL);
  const bool fixed = c.fixed_e != CK_XE_ROWMAX;
  if (!rc && fixed) rc = ck_xprep_fixed(&L, x.data(), xp3.data(), xs3.data(), e3.data(), c.fixed_e, NULL);
  if (rc) {
    printf("FAIL launch rc=%d (%s cols %d)\n", rc, fmt_name(c.fmt), cols);
    return 1;
  }
  /* the direct prep for exponent e */
  auto direct = [&](int e, std::vector<uint16_t> &xp, std::vector<float> &xs) {
    xp.assign((size_t)cols * 8, 0xffff);
    xs.assign((size_t)(cols / 32 + 1) * 8, -7.0f);
    for (int i = 0; i < cols; i++) prep_store(xp.data(), i, x[(size_t)i], e, bf16 ? 2 : 1);
    if (gs)
      for (int g = 0; g < cols / gs; g++) {
        float s = 0; /* the kernel's order: each 32-k slice in order, then the slices' sums by a butterfly */
        std::vector<float> part((size_t)gs / 32, 0.0f);
        for (int sl = 0; sl < gs / 32; sl++)
          for (int k = 0; k < 32; k++) {
            const uint16_t h = ck_f32_to_f16(ldexpf(ck_bf16_to_f32(x[(size_t)(g * gs + sl * 32 + k)]), e));
            part[(size_t)sl] += ck_f16_to_f32(h);
          }
        for (int o = (gs / 32) >> 1; o > 0; o >>= 1)
          for (int sl = 0; sl < gs / 32; sl++)
            if (!(sl & o)) part[(size_t)sl] = part[(size_t)sl] + part[(size_t)(sl | o)];
        s = part[0];
        xs[(size_t)g * 8] = s;
      }
  };
  const int erow = bf16 ? 0 : prep_exp(m, 1);
  std::vector<uint16_t> want;
  std::vector<float> wsum;
  const char *why = NULL;
  direct(erow, want, wsum);
  auto same_sums = [&](const std::vector<float> &got) {
    for (int g = 0; gs && g < cols / gs; g++)
      if (got[(size_t)g * 8] != wsum[(size_t)g * 8]) return false;
    return true;
  };
  if (e1[0] != erow || e2[0] != erow) why = "row exponent";
  else if (xp1 != want || xp2 != want) why = "row-maximum prep";
  else if (!same_sums(xs1) || !same_sums(xs2)) why = "group sums";
  if (!why && fixed) {
    const int ef = bf16 ? 0 : c.fixed_e;
    direct(ef, want, wsum);
    if (e3[0] != ef) why = "fixed exponent";
    else if (xp3 != want) why = "fixed-exponent prep";
    else if (!same_sums(xs3)) why = "fixed-exponent group sums";
  }
  printf("%s %-7s g%-3d cols %5d exponent %s%s%s\n", why ? "FAIL" : "ok  ", fmt_name(c.fmt), c.gs, cols,
         fixed ? "row and fixed" : "row", why ? ": " : "", why ? why : "");
  return why != NULL;
}

/* ck_xprep_rows (batches of 8 rows gathered through a map, −1 a zero row) against
 * ck_xprep_batched of the same rows gathered on the host: the same bytes, sums and exponents. */
static int run_rows_case(const Case &c) {
  ck_layout L = {};
  L.fmt = c.fmt;
  L.group_size = c.gs;
  L.rows = 16;
  L.cols = c.cols;
  const int cols = c.cols, nsrc = 11, nbatch = 3, nblk = (cols + XP_BLOCK - 1) / XP_BLOCK;
  std::vector<uint16_t> x((size_t)nsrc * cols);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = ck_f32_to_bf16((unit() * 2 - 1) * ldexpf(1.0f, -(int)(unit() * 20)) * 3.0f);
  std::vector<int> map((size_t)nbatch * 8);
  for (size_t r = 0; r < map.size(); r++) map[r] = r % 5 == 3 ? -1 : (int)((r * 7) % nsrc);
  map[map.size() - 1] = -1; /* a batch ending in padding, as an expert's last */
  std::vector<uint16_t> xg((size_t)nbatch * 8 * cols, 0);
  for (size_t r = 0; r < map.size(); r++)
    if (map[r] >= 0)
      for (int k = 0; k < cols; k++) xg[r * cols + k] = x[(size_t)map[r] * cols + k];
  const size_t nxs = (size_t)nbatch * (cols / 32) * 8;
  std::vector<uint16_t> xp1((size_t)nbatch * 8 * cols, 0xffff), xp2 = xp1;
  std::vector<float> xs1(nxs, -7.0f), xs2 = xs1, pmax((size_t)nbatch * 8 * nblk, 0.0f);
  std::vector<int> e1((size_t)nbatch * 8, 777), e2 = e1;
  int rc = ck_xprep_batched(&L, xg.data(), 8, nbatch, xp1.data(), xs1.data(), e1.data(), pmax.data(), NULL);
  if (!rc) rc = ck_xprep_rows(&L, x.data(), map.data(), nbatch, xp2.data(), xs2.data(), e2.data(), pmax.data(), NULL);
  const char *why = rc ? "launch" : xp1 != xp2 ? "prep" : e1 != e2 ? "exponents" : NULL;
  for (size_t i = 0; !why && i < nxs; i++)
    if (memcmp(&xs1[i], &xs2[i], 4)) why = "group sums";
  /* ck_xprep_batched_fixed: each row the bytes, sums and exponent of ck_xprep_fixed on it alone */
  const int efix = 11, nsl = cols / 32;
  if (!why && c.fmt != CK_DBF16) {
    std::vector<uint16_t> xpf((size_t)nbatch * 8 * cols, 0xffff), xp0((size_t)cols);
    std::vector<float> xsf(nxs, -7.0f), xs0((size_t)nsl * 8 + 8);
    std::vector<int> ef((size_t)nbatch * 8, 777);
    if (ck_xprep_batched_fixed(&L, xg.data(), 8, nbatch, xpf.data(), xsf.data(), ef.data(), efix, NULL)) why = "fixed launch";
    for (int r = 0; !why && r < nbatch * 8; r++) {
      int e0[8] = {777}; /* (the one-row prep writes the exponents of its 8 batch rows) */
      if (ck_xprep_fixed(&L, xg.data() + (size_t)r * cols, xp0.data(), xs0.data(), e0, efix, NULL)) why = "fixed one-row launch";
      else if (memcmp(xp0.data(), xpf.data() + (size_t)r * cols, (size_t)cols * 2) || ef[(size_t)r] != efix || e0[0] != efix)
        why = "fixed prep";
      for (int g = 0; !why && (c.fmt == CK_AFF4 || c.fmt == CK_AFF8) && g < cols / c.gs; g++)
        if (memcmp(&xs0[(size_t)g * 8], &xsf[(size_t)(r / 8) * nsl * 8 + (size_t)g * 8 + r % 8], 4)) why = "fixed group sums";
    }
  }
  printf("%s %-7s g%-3d cols %5d gathered rows, fixed exponent%s%s\n", why ? "FAIL" : "ok  ", fmt_name(c.fmt), c.gs,
         cols, why ? ": " : "", why ? why : "");
  return why != NULL;
}

/* ck_xprep_wg (the warpgroup product's x: launches of up to 64 rows, each n = wg_rows_n rows in
 * the wgmma B layout, rows past T zero) against a direct layout of the same fp16 values: the same
 * bytes, exponents, and nothing written past the last launch's n rows. efix: ck_xprep_wg_fixed
 * with that exponent for every row. */
static int run_wg_case(int T, int cols, int efix = CK_XE_ROWMAX) {
  ck_layout L = {};
  L.fmt = CK_NVFP4;
  L.group_size = 16;
  L.rows = 16;
  L.cols = cols;
  const int nblk = (cols + XP_BLOCK - 1) / XP_BLOCK, R8 = (T + 7) / 8 * 8, R64 = (T + 63) / 64 * 64;
  std::vector<uint16_t> x((size_t)R8 * cols, 0);
  for (size_t i = 0; i < (size_t)T * cols; i++)
    x[i] = ck_f32_to_bf16((unit() * 2 - 1) * ldexpf(1.0f, -(int)(unit() * 24)) * 5.0f);
  std::vector<uint16_t> xw((size_t)R64 * cols, 0xffff), want = xw;
  std::vector<float> pmax((size_t)R8 * nblk, 0.0f);
  std::vector<int> e((size_t)R64, 777), ewant = e;
  const int last = (T - 1) / 64, rows = 64 * last + wg_rows_n(T - 64 * last);
  for (int r = 0; r < rows; r++) {
    const int c = r / 64, rl = r % 64, n = wg_rows_n(T - 64 * c < 64 ? T - 64 * c : 64);
    float m = 0;
    for (int k = 0; r < T && k < cols; k++) m = fmaxf(m, fabsf(ck_bf16_to_f32(x[(size_t)r * cols + k])));
    const int er = r >= T ? 0 : efix != CK_XE_ROWMAX ? efix : prep_exp(m, 1);
    ewant[(size_t)r] = er;
    for (int k = 0; k < cols; k++)
      want[(size_t)c * 64 * cols + wg_off(n, rl, k) / 2] =
          r < T ? ck_f32_to_f16(ldexpf(ck_bf16_to_f32(x[(size_t)r * cols + k]), er)) : 0;
  }
  const int rc = efix == CK_XE_ROWMAX ? ck_xprep_wg(&L, x.data(), T, xw.data(), e.data(), pmax.data(), NULL)
                                      : ck_xprep_wg_fixed(&L, x.data(), T, xw.data(), e.data(), efix, NULL);
  const char *why = rc ? "launch" : xw != want ? "layout or values" : e != ewant ? "exponents" : NULL;
  printf("%s nvfp4   %3d rows cols %5d, warpgroup layout%s%s%s\n", why ? "FAIL" : "ok  ", T, cols,
         efix == CK_XE_ROWMAX ? "" : ", fixed exponent", why ? ": " : "", why ? why : "");
  return why != NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) g_rng = strtoull(argv[1], NULL, 0) | 1;
  /* |x| < 7 here: the fixed exponents 11 (the bound's) and 5 (far below the row maximum's) */
  const Case cases[] = {
      {CK_NVFP4, 16, 5376, 11},    {CK_NVFP4, 16, 21504, 5},    {CK_NVFP4, 16, 8192, CK_XE_ROWMAX},
      {CK_AFF4, 64, 5376, 11},     {CK_AFF4, 32, 2048, 5},      {CK_AFF4, 64, 64, CK_XE_ROWMAX},
      {CK_DBF16, 0, 5376, 11},     {CK_NVFP4, 16, 64, 11},
  };
  int bad = emu_run_cases(cases, run_case);
  const Case rows[] = {{CK_NVFP4, 16, 2816, 0}, {CK_AFF4, 64, 704, 0}, {CK_AFF4, 32, 2048, 0}, {CK_DBF16, 0, 320, 0}};
  for (const Case &c : rows) bad |= run_rows_case(c);
  /* one launch of n 16 and of n 64; two launches, the second of n 8 */
  bad |= run_wg_case(13, 2816);
  bad |= run_wg_case(40, 192);
  bad |= run_wg_case(70, 1024);
  bad |= run_wg_case(13, 2816, 11);
  bad |= run_wg_case(70, 1024, 5);
  return bad;
}
