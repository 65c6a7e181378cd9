/* The batched step's nvfp4 product at 2 to 8 rows: the one-row kernel's form (qmv_tc.cu, COL)
 * with the rows in the mma's columns.
 *
 * The one-row kernel gives each of the mma's 8 columns one scale group of a pair of units, so
 * the float sums are scaled once per pair. With R rows (2, 4 or 8) the 8 columns hold R rows ×
 * 8/R groups: column n takes row n / (8/R) of x at group n mod (8/R), so an accumulator covers
 * 8/R of a unit's 4 mmas (R = 2: the whole unit; R = 4: half of it; R = 8: one) before its 4
 * scale FMAs.
 * Every weight byte is read from memory and decoded once for all the rows, as in the batch
 * kernel, but the mmas stay the one-row kernel's 4 per unit (the batch kernel's per-mma scale
 * epilogue is once per 8/R mmas here) and x arrives in shared memory with the weights through
 * the bulk copies (the batch kernel reads it through L1 every unit).
 *
 * One block of 4 warps per 16-row tile and k split; the warps take a stage's 16 units in pairs.
 * Lane (g, t): B column g (row g / (8/R) of x, group g mod (8/R)); accumulator columns 2t and
 * 2t + 1, one x row each for R = 4 and 8, and for R = 2 both of row t / 2. Each column's sums depend
 * only on its own row of x, so a row's bits do not depend on the other rows or its place. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "qmv_tc.cuh"
#include "tuning.h"

struct QmvColsArgs {
  const uint8_t *w, *s; /* the tile layout's codes and scales (repack.cu) */
  const uint8_t *xp;    /* nb rows of x's prep, cols·2 bytes apart (fragment order) */
  const int *xexp;
  float *y;
  int64_t rows, ldy, kstride;
  int64_t xrow; /* bytes between two rows of x */
  int nunits, nb, ksplit, early;
};

typedef Shape<CK_NVFP4, 16> NvS;
#define COLS_WARPS 4
static_assert(NvS::SU == 16 && NvS::CPU == 1 && NvS::MPU == 4, "nvfp4 units of 64 k, 16 per stage");

template <int NST, int R>
__global__ void __launch_bounds__(COLS_WARPS * 32) qmv_cols_kernel(QmvColsArgs p) {
  constexpr int G = 8 / R;                 /* columns (groups) per row in an accumulator */
  constexpr int XB = NvS::SU * NvS::UK * 2; /* one row's x bytes in a stage */
  constexpr int XOFF = NvS::STAGE, STAGE = NvS::STAGE + R * XB;
#ifdef CK_EMULATION
  uint8_t *stage_mem = emu_dyn_smem;
#else
  extern __shared__ __align__(128) uint8_t stage_mem[];
#endif
  __shared__ uint64_t mbar[NST];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x;
  const int ks = blockIdx.y;
  const int ubeg = (int)((int64_t)p.nunits * ks / p.ksplit), uend = (int)((int64_t)p.nunits * (ks + 1) / p.ksplit);
  const int nunits = uend - ubeg, nstages = (nunits + NvS::SU - 1) / NvS::SU;
  const uint8_t *wsrc = p.w + ((size_t)tile * p.nunits + ubeg) * NvS::UNIT_W;
  const uint8_t *ssrc = p.s + ((size_t)tile * p.nunits + ubeg) * NvS::UNIT_S;
  if (threadIdx.x == 0) {
    for (int i = 0; i < NST; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* thread 0: stage st into slot st % NST — its weights (W) and its rows of x (X); all of the
   * slot's bytes are expected with the weights, so its phase cannot complete before the x
   * issued later (after the wait for x's producer) has landed */
  auto issue = [&](int st, bool W, bool X) {
    const int slot = st % NST, u0 = st * NvS::SU, nu = nunits - u0 < NvS::SU ? nunits - u0 : NvS::SU;
    uint8_t *dst = stage_mem + slot * STAGE;
    const uint32_t wb = (uint32_t)(nu * NvS::UNIT_W), sb = (uint32_t)(nu * NvS::UNIT_S), xb = (uint32_t)(nu * NvS::UK * 2);
    if (W) {
      mbar_expect(&mbar[slot], wb + sb + (uint32_t)p.nb * xb);
      bulk_copy(dst, wsrc + (size_t)u0 * NvS::UNIT_W, wb, &mbar[slot]);
      bulk_copy(dst + NvS::SU * NvS::UNIT_W, ssrc + (size_t)u0 * NvS::UNIT_S, sb, &mbar[slot]);
    }
    if (X)
      for (int r = 0; r < p.nb; r++)
        bulk_copy(dst + XOFF + r * XB, p.xp + r * p.xrow + ((size_t)ubeg + u0) * NvS::UK * 2, xb, &mbar[slot]);
  };
  /* the weights depend on no earlier kernel: their first stages are in flight before the wait
   * for the kernel that wrote x (ck_launch.cuh) */
  if (threadIdx.x == 0)
    for (int st = 0; st < NST && st < p.early && st < nstages; st++) issue(st, true, false);
  ck_pdl_enter();
  if (threadIdx.x == 0)
    for (int st = 0; st < NST && st < nstages; st++) issue(st, st >= p.early, true);

  /* column selectors: mma m of an accumulator keeps x in the columns of group m */
  uint32_t sel[G];
#pragma unroll
  for (int m = 0; m < G; m++) sel[m] = ck_opaque(g % G == m ? 0x3C003C00u : 0u);
  const uint32_t nv_e = ck_opaque(0x40000000u);
  /* lane (g, t)'s x: row g / G, the 8 bytes of its mma of the unit (the fragment layout: slice
   * m / 2 at 64 bytes, lane t at 16, half m mod 2 at 8; R = 8: every mma's, per accumulator);
   * rows past nb read as zeros */
  const int xr = g / G;
  const bool xok = xr < p.nb;
  const int xlane = XOFF + xr * XB + t * 16 + (G > 1 ? (g & 1) * 8 : 0) + (R == 2 ? ((g & 3) >> 1) * 64 : 0);
  /* lane t's scale words: R = 2, word t mod 2 (mmas 2(t mod 2), +1); R = 4 and 8, both */
  const int slane = NvS::SU * NvS::UNIT_W + g * 8 + (R == 2 ? (t & 1) * 4 : 0);
  float tot[4] = {0.f, 0.f, 0.f, 0.f};

  /* unit u of the slot at base: its 4 mmas into the column accumulators, each scaled once */
  auto unit = [&](const uint8_t *base, int u) {
    const uint4 wv = *reinterpret_cast<const uint4 *>(base + u * NvS::UNIT_W + lane * 16);
    const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
    const uint8_t *xl = base + xlane + u * NvS::UK * 2;
    const uint8_t *sl = base + slane + u * NvS::UNIT_S;
#pragma unroll
    for (int a = 0; a < 4 / G; a++) { /* R = 2: one accumulator (mmas 0-3); R = 4: two (0-1, 2-3); R = 8: four */
      const int xo = G > 1 ? a * 64 : (a >> 1) * 64 + (a & 1) * 8;
      const uint2 xv = xok ? *reinterpret_cast<const uint2 *>(xl + xo) : make_uint2(0, 0);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < G; j++) {
        uint32_t af[4];
        decode_a<CK_NVFP4>(wd, a * G + j, af);
        if (G > 1)
          mma16816<false>(d, af, col_sel(xv.x, sel[j]), col_sel(xv.y, sel[j]));
        else /* every column its own row: no selection */
          mma16816<false>(d, af, xv.x, xv.y);
      }
      if (G > 1) {
        const uint32_t sw = *reinterpret_cast<const uint32_t *>(sl + a * 4);
#pragma unroll
        for (int q = 0; q < 4; q++) tot[q] = fmaf(d[q], nv_scale(sw, q, nv_e), tot[q]);
      } else { /* group a of tile rows g (fields a mod 2) and g + 8 (2 + a mod 2) in word a / 2 */
        const uint32_t sw = *reinterpret_cast<const uint32_t *>(sl + (a >> 1) * 4);
        const float s0 = nv_scale(sw, a & 1, nv_e), s1 = nv_scale(sw, 2 + (a & 1), nv_e);
        tot[0] = fmaf(d[0], s0, tot[0]), tot[1] = fmaf(d[1], s0, tot[1]);
        tot[2] = fmaf(d[2], s1, tot[2]), tot[3] = fmaf(d[3], s1, tot[3]);
      }
    }
  };
  for (int st = 0; st < nstages; st++) {
    const int slot = st % NST, u0 = st * NvS::SU, nu = nunits - u0 < NvS::SU ? nunits - u0 : NvS::SU;
    mbar_wait(&mbar[slot], (uint32_t)((st / NST) & 1));
    const uint8_t *base = stage_mem + slot * STAGE;
    if (nu == NvS::SU) { /* a full stage: the warp's 4 units unrolled (their loads and mma chains interleave) */
#pragma unroll
      for (int i = 0; i < NvS::SU / COLS_WARPS; i++) unit(base, warp + i * COLS_WARPS);
    } else {
      for (int u = warp; u < nu; u += COLS_WARPS) unit(base, u);
    }
    __syncthreads(); /* every warp is done with this slot */
    if (threadIdx.x == 0 && st + NST < nstages) {
      fence_proxy_async_smem();
      issue(st + NST, true, true);
    }
  }
  /* each x row's sums of tile rows g (tot 0, 1) and g + 8 (tot 2, 3), then the outputs where the
   * reduction below reads column c: lane t = c / 2, slot c mod 2 */
  float rg = tot[0] + tot[1], r8 = tot[2] + tot[3];
  if (R == 8) { /* every column is already its own row's */
  } else if (R == 2) { /* lanes t, t ^ 1 hold row t / 2's other groups */
    rg += __shfl_xor_sync(0xffffffffu, rg, 1);
    r8 += __shfl_xor_sync(0xffffffffu, r8, 1);
    const float rg1 = __shfl_xor_sync(0xffffffffu, rg, 2), r81 = __shfl_xor_sync(0xffffffffu, r8, 2);
    tot[0] = t == 0 ? rg : 0.f, tot[1] = t == 0 ? rg1 : 0.f;
    tot[2] = t == 0 ? r8 : 0.f, tot[3] = t == 0 ? r81 : 0.f;
  } else { /* lane t holds row t: lane c / 2 takes rows 2(c / 2) and 2(c / 2) + 1 */
    const int src = (lane & ~3) | ((2 * t) & 3);
    const float a0 = __shfl_sync(0xffffffffu, rg, src), a1 = __shfl_sync(0xffffffffu, rg, src + 1);
    const float b0 = __shfl_sync(0xffffffffu, r8, src), b1 = __shfl_sync(0xffffffffu, r8, src + 1);
    tot[0] = t < 2 ? a0 : 0.f, tot[1] = t < 2 ? a1 : 0.f;
    tot[2] = t < 2 ? b0 : 0.f, tot[3] = t < 2 ? b1 : 0.f;
  }
  /* the warps' partials, added in warp order (in the stage memory: every stage has been
   * consumed behind the loop's last barrier) */
  float(*red)[32][4] = reinterpret_cast<float(*)[32][4]>(stage_mem);
#pragma unroll
  for (int i = 0; i < 4; i++) red[warp][lane][i] = tot[i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < 16 * R; idx += blockDim.x) {
    const int rl = idx / R, col = idx % R;
    const int src = (rl & 7) * 4 + (col >> 1), slot = ((rl >> 3) << 1) | (col & 1);
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < COLS_WARPS; w++) s += red[w][src][slot];
    const int64_t row = tile * 16 + rl;
    /* undo x's 2^e, the decode's 2^-14 and the scales' 2^10 */
    if (col < p.nb && row < p.rows)
      p.y[(int64_t)ks * p.kstride + (int64_t)col * p.ldy + row] = ck_scale_pow2(s, 14 - CK_NV_SCALE_LOG2 - p.xexp[col]);
  }
}

typedef void (*cols_fn)(QmvColsArgs);
static int cols_r(int nb) { return nb == 2 ? 2 : nb <= 4 ? 4 : 8; }
static cols_fn cols_kernel(int nb) {
  return nb == 2   ? qmv_cols_kernel<QMV_STAGES_ONE_ROW, 2>
         : nb <= 4 ? qmv_cols_kernel<QMV_STAGES_ONE_ROW, 4>
                   : qmv_cols_kernel<QMV_STAGES_ONE_ROW, 8>;
}
static int cols_smem(int nb) { return QMV_STAGES_ONE_ROW * (NvS::STAGE + cols_r(nb) * NvS::SU * NvS::UK * 2); }
/* R = 8's stages take more than the default 48 KiB of dynamic shared memory */
static cudaError_t cols_allow_smem(int nb) {
  return cudaFuncSetAttribute(cols_kernel(nb), cudaFuncAttributeMaxDynamicSharedMemorySize, cols_smem(nb));
}

extern "C" int ck_qmv_cols_supported(const ck_layout *L, int nb) {
  return L->fmt == CK_NVFP4 && nb >= 2 && nb <= 8 && L->cols % NvS::UK == 0 && L->nunits * NvS::UK == L->cols;
}

extern "C" int ck_qmv_cols(const ck_layout *L, int nb, const uint16_t *xp, const int *xexp, float *y, int64_t ldy,
                           int ksplit, int64_t kstride, void *stream) {
  if (!ck_qmv_cols_supported(L, nb) || ksplit < 1 || ksplit > L->nunits || ksplit > 65535 ||
      (ksplit > 1 && kstride < (int64_t)nb * ldy) || ldy < L->rows)
    return (int)cudaErrorInvalidValue;
  QmvColsArgs a = {};
  a.w = (const uint8_t *)L->w;
  a.s = (const uint8_t *)L->s;
  a.xp = (const uint8_t *)xp;
  a.xexp = xexp;
  a.y = y;
  a.rows = L->rows;
  a.ldy = ldy;
  a.kstride = kstride;
  a.xrow = L->cols * 2;
  a.nunits = (int)L->nunits;
  a.nb = nb;
  a.ksplit = ksplit;
  a.early = QMV_EARLY_STAGES;
  if (cudaError_t e = cols_allow_smem(nb)) return (int)e;
  return (int)ck_launch(cols_kernel(nb), dim3((unsigned)L->tiles, (unsigned)ksplit), COLS_WARPS * 32, cols_smem(nb),
                        (cudaStream_t)stream, a);
}

/* The k splits with the least waves of resident blocks × (units per split + a block's fixed
 * cost, QMV_COLS_BLOCK_UNITS), each at least QMV_ROWS_SPLIT_UNITS units, at most
 * QMV_ROWS_MAX_SPLITS: at 8 rows down's 336 tiles in 3 splits take 2 waves of 112 units where 1
 * or 2 splits take 1 wave of 336 or 2 of 168 (tuning.h). */
extern "C" int ck_qmv_cols_splits(const ck_layout *L, int nb, int sms) {
  if (!ck_qmv_cols_supported(L, nb) || sms < 1) return 1;
  int per_sm = 0;
  if (cols_allow_smem(nb) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cols_kernel(nb), COLS_WARPS * 32, cols_smem(nb)) !=
      cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  const int64_t slots = (int64_t)(per_sm > 0 ? per_sm : 1) * sms;
  int best = 1;
  double best_cost = 0;
  for (int ks = 1; ks <= QMV_ROWS_MAX_SPLITS && (ks == 1 || L->nunits / ks >= QMV_ROWS_SPLIT_UNITS); ks++) {
    const int64_t waves = (L->tiles * ks + slots - 1) / slots;
    const double cost = (double)waves * ((double)L->nunits / ks + QMV_COLS_BLOCK_UNITS);
    if (ks == 1 || cost < best_cost) best = ks, best_cost = cost;
  }
  return best;
}

CK_TIMELINE_SETTER(ck_tl_qmv_cols)
