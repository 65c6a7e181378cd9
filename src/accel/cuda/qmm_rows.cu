/* The batched decode step's product (ck_qmm_rows): up to 64 activation rows (batches of 8, the
 * ck_xprep_batched layout) times one weight, every weight byte read from memory and decoded
 * once for all the rows.
 *
 * A block takes ROWS_TILES 16-row tiles (one per warp) over one k range. Each stage brings SU
 * units of the tiles' codes and scales and the same units of x for every row into shared memory
 * (bulk copies completing on an mbarrier per slot), so x comes from the L2 once per block of
 * tiles rather than once per tile. A warp decodes each A fragment once and issues one mma per
 * batch of 8 rows.
 *
 * nvfp4: the decoded codes are multiplied by their E4M3 scale in fp16 (exact: v·s·2^-7 has at
 * most 7 significant bits and lies in [2^-17, 21], fp16's subnormals included), so a batch's sum
 * stays in the mma accumulator over the whole k range: one mma per batch per 16 k, no float
 * epilogue per group. The other formats apply their scales to float sums per group, as the
 * mat-vec does.
 *
 * The k range is split over several blocks per tile group when the groups alone would not fill
 * the device (ck_qmm_rows_splits: a function of the weight's shape and the SM count, never of the
 * row count). Each block writes its partial sums; the last block of a group to finish (a counter
 * per group, left at zero again) adds the splits in order and writes y. A row's bits therefore do
 * not depend on how many rows the step has, nor on where in the batch the row sits. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "qmv_tc.cuh"
#include "tuning.h"

struct RowsArgs {
  const uint8_t *w, *s; /* repacked codes and scales */
  const uint4 *xp;      /* row r at xp + r·nslices·4 (fragment order), batch b's group sums at */
  const float *xs;      /* xs + b·nslices·8, its exponents at xexp + 8b */
  const int *xexp;
  float *y; /* row r at y + r·ldy */
  int64_t ldy;
  float *part;   /* k splits: split z's sums of row r at part + (z·nr + r)·tiles·16 */
  unsigned *cnt; /* k splits: one counter per tile group, zero between launches */
  int64_t rows, tiles;
  int nunits;
  int64_t nslices;
  int nr, ks; /* rows of x (1..ROWS_MAX), k splits */
};

/* A stage: SU units of each of the block's TPB·MT tiles (codes, then scales), the same units' x
 * for MB batches of 8 rows (XROW bytes apart: padded by 64 so that lanes g and g + 1 read
 * different banks) and their affine group sums. */
template <int FMT, int GS, int TPB, int MT, int MB, int SUX>
struct RowsShape {
  typedef Shape<FMT, GS> S;
  static constexpr int SU = SUX, TB = TPB * MT;
  static constexpr int XROW = SU * S::UK * 2 + 64, XSB = SU * S::GPU * 32;
  static constexpr int W_OFF = 0, S_OFF = TB * SU * S::UNIT_W, X_OFF = S_OFF + TB * SU * S::UNIT_S;
  static constexpr int XS_OFF = X_OFF + MB * 8 * XROW;
  static constexpr int STAGE = XS_OFF + (S::AFF ? MB * XSB : 0);
};

/* One unit of the warp's MT tiles (codes w[j], scale words sc[j]) times the batches b < nrun: x
 * of batch b row g at xl + b·8·XROW (this lane's 16 bytes, the unit's halves 64 bytes apart) —
 * loaded once for the MT tiles — and the affine group sums at xsl + b·XSB. Per (tile, batch) the
 * same operations in the same order whatever MT, MB or the stage's shape. */
template <int FMT, int GS, bool SB_F16, int MB, int MT, int XROW, int XSB>
__device__ __forceinline__ void rows_unit(const uint4 (&w)[MT][Shape<FMT, GS>::CPU],
                                          const uint2 (&sc)[MT][Shape<FMT, GS>::GPU], const uint8_t *xl,
                                          const uint8_t *xsl, int nrun, float (&acc)[MT][MB][4],
                                          float (&tot)[MT][MB][4]) {
  typedef Shape<FMT, GS> S;
  constexpr int MX_OFF = FMT == CK_MXFP4 ? 14 : 8;
#pragma unroll
  for (int h = 0; h < S::MPU / 2; h++) {
    uint4 xv[MB];
#pragma unroll
    for (int b = 0; b < MB; b++)
      if (b < nrun) xv[b] = *reinterpret_cast<const uint4 *>(xl + b * 8 * XROW + h * 64);
#pragma unroll
    for (int mm = 0; mm < 2; mm++) {
      const int m = 2 * h + mm;
#pragma unroll
      for (int j = 0; j < MT; j++) {
        uint32_t a[4];
        decode_a<FMT>(reinterpret_cast<const uint32_t *>(&w[j][0]), m, a);
        if constexpr (FMT == CK_NVFP4) {
          const uint32_t sw = (m >> 1) ? sc[j][0].y : sc[j][0].x;
          const uint32_t s0 = nv_scale_h2(sw, m & 1), s8 = nv_scale_h2(sw, 2 + (m & 1));
          a[0] = h2_mul(a[0], s0);
          a[1] = h2_mul(a[1], s8);
          a[2] = h2_mul(a[2], s0);
          a[3] = h2_mul(a[3], s8);
#pragma unroll
          for (int b = 0; b < MB; b++)
            if (b < nrun) mma16816<false>(acc[j][b], a, mm ? xv[b].z : xv[b].x, mm ? xv[b].w : xv[b].y);
          continue;
        } else {
#pragma unroll
          for (int b = 0; b < MB; b++)
            if (b < nrun) mma16816<FMT == CK_DBF16>(acc[j][b], a, mm ? xv[b].z : xv[b].x, mm ? xv[b].w : xv[b].y);
          if (S::AFF && (m + 1) % S::MPG == 0) {
            const int gl = m / S::MPG;
            float s0, b0f, s8, b8;
            affine_fold<FMT, SB_F16>(sc[j][gl], s0, b0f, s8, b8);
#pragma unroll
            for (int b = 0; b < MB; b++) {
              if (b >= nrun) continue;
              const float2 xsv = reinterpret_cast<const float2 *>(xsl + b * XSB)[gl * 4];
              float(&t4)[4] = tot[j][b];
              float(&a4)[4] = acc[j][b];
              t4[0] = fmaf(s0, a4[0], fmaf(b0f, xsv.x, t4[0]));
              t4[1] = fmaf(s0, a4[1], fmaf(b0f, xsv.y, t4[1]));
              t4[2] = fmaf(s8, a4[2], fmaf(b8, xsv.x, t4[2]));
              t4[3] = fmaf(s8, a4[3], fmaf(b8, xsv.y, t4[3]));
              a4[0] = a4[1] = a4[2] = a4[3] = 0.f;
            }
          }
          if (S::MX && (m + 1) % S::MPG == 0) {
            const int gl = m / S::MPG;
            const uint32_t sx = sc[j][0].x;
            const uint32_t e0 = FMT == CK_MXFP4 ? (sx >> (8 * gl)) & 0xffu : sx & 0xffu;
            const uint32_t e8 = FMT == CK_MXFP4 ? (sx >> (16 + 8 * gl)) & 0xffu : (sx >> 8) & 0xffu;
            const float f0 = __uint_as_float(min(e0 + MX_OFF, 255u) << 23);
            const float f8 = __uint_as_float(min(e8 + MX_OFF, 255u) << 23);
#pragma unroll
            for (int b = 0; b < MB; b++) {
              if (b >= nrun) continue;
              float(&t4)[4] = tot[j][b];
              float(&a4)[4] = acc[j][b];
              t4[0] = fmaf(a4[0], f0, t4[0]);
              t4[1] = fmaf(a4[1], f0, t4[1]);
              t4[2] = fmaf(a4[2], f8, t4[2]);
              t4[3] = fmaf(a4[3], f8, t4[3]);
              a4[0] = a4[1] = a4[2] = a4[3] = 0.f;
            }
          }
        }
      }
    }
  }
}

/* Block (x, z): tiles x·TPB·MT … (MT per warp), k split z. Warp 0 streams the stages (lane 0
 * posts the bytes, the lanes issue the copies: each tile's codes and scales, x of the rows < nr
 * — a partial batch's other rows are never read into a result — and the group sums); each warp
 * multiplies its own tiles' units. */
template <int FMT, int GS, bool SB_F16, int NST, int MB, int TPB, int MT, int SUX>
__global__ void __launch_bounds__(TPB * 32) qmm_rows_kernel(RowsArgs p) {
  typedef Shape<FMT, GS> S;
  typedef RowsShape<FMT, GS, TPB, MT, MB, SUX> Q;
  constexpr int SU = Q::SU, STAGE = Q::STAGE, TB = Q::TB;
  CK_DYNAMIC_SHARED(uint8_t, stage_mem); /* (16-byte aligned: the bulk copies need no more) */
  __shared__ uint64_t mbar[NST];
  __shared__ int last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile0 = (int64_t)blockIdx.x * TB, wtile = tile0 + warp * MT; /* the warp's first tile */
  const int ntl = p.tiles - tile0 < TB ? (int)(p.tiles - tile0) : TB; /* the block's tiles */
  const int kz = blockIdx.y;
  const int ubeg = p.ks == 1 ? 0 : (int)((int64_t)p.nunits * kz / p.ks);
  const int uend = p.ks == 1 ? p.nunits : (int)((int64_t)p.nunits * (kz + 1) / p.ks);
  const int nunits = uend - ubeg, nstages = (nunits + SU - 1) / SU;
  const int nrun = (p.nr + 7) >> 3; /* batches of 8 rows */
  const uint8_t *wsrc = p.w + ((size_t)tile0 * p.nunits + ubeg) * S::UNIT_W;
  const uint8_t *ssrc = p.s + ((size_t)tile0 * p.nunits + ubeg) * S::UNIT_S;

  if (threadIdx.x == 0) {
    for (int i = 0; i < NST; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* stage st → slot st % NST: its weights (W: the tiles' codes and scales, which no earlier
   * kernel writes) and its x part (X); all the slot's bytes are posted with its weights, so its
   * phase cannot complete before the x part issued later lands */
  const int nw = 2 * ntl, nx = p.nr + (S::AFF ? nrun : 0);
  auto issue = [&](int st, bool W, bool X) {
    const int slot = st % NST, u0 = st * SU, nu = nunits - u0 < SU ? nunits - u0 : SU;
    uint8_t *dst = stage_mem + slot * STAGE;
    const uint32_t wb = (uint32_t)(nu * S::UNIT_W), sb = (uint32_t)(nu * S::UNIT_S);
    const uint32_t xb = (uint32_t)(nu * S::UK * 2), xsb = (uint32_t)(nu * S::GPU * 32);
    if (W && lane == 0)
      mbar_expect(&mbar[slot], (uint32_t)ntl * (wb + sb) + (uint32_t)p.nr * xb + (S::AFF ? (uint32_t)nrun * xsb : 0u));
    __syncwarp();
    fence_proxy_async_smem();
    if (W)
      for (int c = lane; c < nw; c += 32) {
        const int w = c >> 1;
        if (!(c & 1))
          bulk_copy(dst + Q::W_OFF + w * SU * S::UNIT_W, wsrc + ((size_t)w * p.nunits + u0) * S::UNIT_W, wb,
                    &mbar[slot]);
        else if (sb)
          bulk_copy(dst + Q::S_OFF + w * SU * S::UNIT_S, ssrc + ((size_t)w * p.nunits + u0) * S::UNIT_S, sb,
                    &mbar[slot]);
      }
    if (X)
      for (int c = lane; c < nx; c += 32) {
        const size_t ug = (size_t)ubeg + u0; /* the stage's first unit in the whole row */
        if (c < p.nr) /* x row r */
          bulk_copy(dst + Q::X_OFF + c * Q::XROW,
                    reinterpret_cast<const uint8_t *>(p.xp) + ((size_t)c * p.nslices * 32 + ug * S::UK) * 2, xb,
                    &mbar[slot]);
        else { /* batch b's group sums */
          const int b = c - p.nr;
          bulk_copy(dst + Q::XS_OFF + b * Q::XSB,
                    reinterpret_cast<const uint8_t *>(p.xs) + ((size_t)b * p.nslices * 8 + ug * S::GPU * 8) * 4, xsb,
                    &mbar[slot]);
        }
      }
  };
  /* the weights' first stages stream during the previous kernel's tail; x after its wait */
  if (warp == 0)
    for (int st = 0; st < NST && st < nstages; st++) issue(st, true, false);
  ck_pdl_enter();
  if (warp == 0)
    for (int st = 0; st < NST && st < nstages; st++) issue(st, false, true);

  float acc[MT][MB][4], tot[MT][MB][4];
#pragma unroll
  for (int j = 0; j < MT; j++)
#pragma unroll
    for (int b = 0; b < MB; b++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[j][b][q] = tot[j][b][q] = 0.f;
  const int sstride = S::AFF ? 8 : ck_fp_scale_bytes(FMT);
  const bool active = warp * MT < ntl; /* (a warp's later tiles past the end compute on stale bytes, unused) */

  for (int st = 0; st < nstages; st++) {
    const int slot = st % NST, u0 = st * SU, nu = nunits - u0 < SU ? nunits - u0 : SU;
    mbar_wait(&mbar[slot], (uint32_t)((st / NST) & 1));
    const uint8_t *base = stage_mem + slot * STAGE;
    if (active)
      for (int ul = 0; ul < nu; ul++) {
        uint4 w[MT][S::CPU];
        uint2 sc[MT][S::GPU];
#pragma unroll
        for (int j = 0; j < MT; j++) {
          const int wt = warp * MT + j; /* the tile's place in the block */
          const uint4 *wsm = reinterpret_cast<const uint4 *>(base + Q::W_OFF + (wt * SU + ul) * S::UNIT_W) + lane;
#pragma unroll
          for (int c = 0; c < S::CPU; c++) w[j][c] = wsm[c * 32];
          const uint8_t *ssm = base + Q::S_OFF + (wt * SU + ul) * S::UNIT_S + g * sstride;
#pragma unroll
          for (int gl = 0; gl < S::GPU; gl++) sc[j][gl] = make_uint2(0, 0);
          if (S::AFF) {
#pragma unroll
            for (int gl = 0; gl < S::GPU; gl++) sc[j][gl] = reinterpret_cast<const uint2 *>(ssm)[gl * 8];
          } else if (FMT == CK_NVFP4) {
            sc[j][0] = *reinterpret_cast<const uint2 *>(ssm);
          } else if (FMT == CK_MXFP4) {
            sc[j][0].x = *reinterpret_cast<const uint32_t *>(ssm);
          } else if (FMT == CK_MXFP8) {
            sc[j][0].x = *reinterpret_cast<const uint16_t *>(ssm);
          }
        }
        const uint8_t *xl = base + Q::X_OFF + g * Q::XROW + ul * S::UK * 2 + t * 16;
        const uint8_t *xsl = base + Q::XS_OFF + ul * S::GPU * 32 + t * 8;
        rows_unit<FMT, GS, SB_F16, MB, MT, Q::XROW, Q::XSB>(w, sc, xl, xsl, nrun, acc, tot);
      }
    __syncthreads(); /* every warp is done with this slot */
    if (warp == 0 && st + NST < nstages) issue(st + NST, true, true);
  }

  /* lane (g, t) holds tile rows (g, g+8) × rows (2t, 2t+1) of each batch; nvfp4's sums carry
   * x's 2^e and the folded scale's 2^7 */
  constexpr int YSH = FMT == CK_NVFP4 ? 7 : 0;
  constexpr bool SUMS = S::POST && FMT != CK_NVFP4; /* the sums are in tot, else in acc */
  const int64_t prow = p.tiles * 16;
  if (active)
#pragma unroll
    for (int j = 0; j < MT; j++)
#pragma unroll
      for (int b = 0; b < MB; b++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          const int64_t tile = wtile + j, row = tile * 16 + g + (q >> 1) * 8;
          const int r = b * 8 + 2 * t + (q & 1);
          if (b >= nrun || r >= p.nr || tile >= p.tiles) continue;
          const float v = SUMS ? tot[j][b][q] : acc[j][b][q];
          if (p.ks == 1) {
            if (row < p.rows) p.y[(int64_t)r * p.ldy + row] = ck_scale_pow2(v, YSH - p.xexp[r]);
          } else {
            p.part[((int64_t)kz * p.nr + r) * prow + row] = v;
          }
        }
  if (p.ks == 1) return;
  /* the last block of the group to finish adds the splits in order */
  if (!split_group_last(&p.cnt[blockIdx.x], p.ks, last)) return;
  if (active)
    for (int j = 0; j < MT; j++)
      for (int r = 2 * t; r < p.nr; r += 8)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          const int rr = r + (q & 1);
          const int64_t tile = wtile + j, row = tile * 16 + g + (q >> 1) * 8;
          if (rr >= p.nr || tile >= p.tiles || row >= p.rows) continue;
          float s = 0.f;
          for (int z = 0; z < p.ks; z++) s += __ldcg(p.part + ((int64_t)z * p.nr + rr) * prow + row);
          p.y[(int64_t)rr * p.ldy + row] = ck_scale_pow2(s, YSH - p.xexp[rr]);
        }
  if (threadIdx.x == 0) p.cnt[blockIdx.x] = 0;
}

/* ---- launcher ---------------------------------------------------------------------------- */
typedef void (*rows_fn)(RowsArgs);

/* The kernel for MB batches of 8 rows: ROWS_TILES warps of one tile each, ROWS_UNITS units per
 * stage, ROWS_STAGES stages in flight (the fastest of six block shapes at 1 to 64 rows, all giving
 * the same bits: docs/BATCH.md). */
template <int FMT, int GS, bool F16, int MB>
static rows_fn rows_k(int *smem) {
  *smem = ROWS_STAGES * RowsShape<FMT, GS, ROWS_TILES, 1, MB, ROWS_UNITS>::STAGE;
  return qmm_rows_kernel<FMT, GS, F16, ROWS_STAGES, MB, ROWS_TILES, 1, ROWS_UNITS>;
}
template <int FMT, int GS, bool F16>
static rows_fn rows_mb(int nr, int *smem) {
  return nr <= 8 ? rows_k<FMT, GS, F16, 1>(smem) : nr <= 16 ? rows_k<FMT, GS, F16, 2>(smem) : rows_k<FMT, GS, F16, ROWS_MAX / 8>(smem);
}
template <int FMT>
static rows_fn rows_affine(int gs, bool f16, int nr, int *smem) {
  if (f16)
    return gs == 32 ? rows_mb<FMT, 32, true>(nr, smem) : gs == 64 ? rows_mb<FMT, 64, true>(nr, smem) : rows_mb<FMT, 128, true>(nr, smem);
  return gs == 32 ? rows_mb<FMT, 32, false>(nr, smem) : gs == 64 ? rows_mb<FMT, 64, false>(nr, smem) : rows_mb<FMT, 128, false>(nr, smem);
}
/* The kernel for nr rows: registers for 1, 2 or ROWS_MAX / 8 batches (the same operations per
 * batch in each). */
static rows_fn rows_pick(const ck_layout *L, int nr, int *smem) {
  const bool f16 = L->scales_dtype == CKT_F16;
  switch (L->fmt) {
  case CK_NVFP4: return rows_mb<CK_NVFP4, 16, false>(nr, smem);
  case CK_AFF4:
  case CK_AFF8:
    if (L->group_size != 32 && L->group_size != 64 && L->group_size != 128) return nullptr;
    return L->fmt == CK_AFF4 ? rows_affine<CK_AFF4>(L->group_size, f16, nr, smem)
                             : rows_affine<CK_AFF8>(L->group_size, f16, nr, smem);
  case CK_MXFP4: return rows_mb<CK_MXFP4, 32, false>(nr, smem);
  case CK_MXFP8: return rows_mb<CK_MXFP8, 32, false>(nr, smem);
  case CK_DBF16: return rows_mb<CK_DBF16, 0, false>(nr, smem);
  case CK_DF16: return rows_mb<CK_DF16, 0, false>(nr, smem);
  }
  return nullptr;
}

static std::mutex rows_memo_lock;
static cudaError_t rows_allow_smem(rows_fn fn, int smem) {
  static struct { rows_fn fn; int smem; } done[128];
  static int ndone;
  std::lock_guard<std::mutex> hold(rows_memo_lock);
  for (int i = 0; i < ndone; i++)
    if (done[i].fn == fn && done[i].smem >= smem) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess && ndone < 128) done[ndone++] = {fn, smem};
  return e;
}

/* The k splits: from the weight's groups of ROWS_TILES tiles and the SM count, never the rows. */
extern "C" int ck_qmm_rows_splits(const ck_layout *L, int sms) {
  const int64_t groups = (L->tiles + ROWS_TILES - 1) / ROWS_TILES;
  int64_t ks = (ROWS_BLOCKS_PER_SM * (int64_t)sms + groups - 1) / groups;
  const int64_t most = L->nunits / ROWS_SPLIT_UNITS;
  if (ks > most) ks = most;
  if (ks > ROWS_MAX_SPLITS) ks = ROWS_MAX_SPLITS;
  return ks < 1 ? 1 : (int)ks;
}

extern "C" int ck_qmm_rows_scratch(const ck_layout *L, int sms, int64_t *part_floats, int64_t *counters) {
  const int ks = ck_qmm_rows_splits(L, sms);
  *part_floats = ks > 1 ? (int64_t)ks * ROWS_MAX * L->tiles * 16 : 0;
  *counters = L->tiles; /* (a counter per block: at most one per tile) */
  return ks;
}

extern "C" int ck_qmm_rows(const ck_layout *L, int nr, int ks, const uint16_t *xp, const float *xs, const int *xexp,
                           float *y, int64_t ldy, float *part, unsigned *cnt, void *stream) {
  int smem = 0;
  rows_fn fn = L->fmt == CK_GENERIC ? nullptr : rows_pick(L, nr, &smem);
  const int64_t groups = (L->tiles + ROWS_TILES - 1) / ROWS_TILES;
  if (!fn || nr < 1 || nr > ROWS_MAX || ks < 1 || ks > L->nunits || L->cols % 32 || groups > 2147483647 ||
      (ks > 1 && (!part || !cnt)) || smem > 227 * 1024)
    return (int)cudaErrorInvalidValue;
  RowsArgs a = {};
  a.w = (const uint8_t *)L->w;
  a.s = (const uint8_t *)L->s;
  a.xp = (const uint4 *)xp;
  a.xs = xs;
  a.xexp = xexp;
  a.y = y;
  a.ldy = ldy;
  a.part = part;
  a.cnt = cnt;
  a.rows = L->rows;
  a.tiles = L->tiles;
  a.nunits = (int)L->nunits;
  a.nslices = L->cols / 32;
  a.nr = nr;
  a.ks = ks;
  if (smem > 48 * 1024) {
    cudaError_t e = rows_allow_smem(fn, smem);
    if (e) return (int)e;
  }
  return (int)ck_launch(fn, dim3((unsigned)groups, (unsigned)ks), ROWS_TILES * 32, smem, (cudaStream_t)stream, a);
}

extern "C" int ck_qmm_rows_max(void) { return ROWS_MAX; }

CK_TIMELINE_SETTER(ck_tl_qmm_rows)
