/* The grouped quantized product of the prompt pass (ck_qmm_grouped): activation batches of 8
 * rows, each on one slab of a stacked weight (the experts chosen by a chunk's tokens, grouped by
 * expert; or every batch on the one slab of a plain weight), on tensor cores.
 *
 * The step's expert mode (qmv_tc.cu) gives each (16-row tile, batch) pair a block that streams
 * the tile's codes, decodes them and multiplies one batch: an expert chosen by 32 tokens of a
 * chunk has its weights decoded 4 times and each batch's x read once per tile. Here a block
 * takes a run of up to QMM_GROUP_BATCHES batches of one slab and QMM_GROUP_TILES tiles (one per
 * warp): each unit's codes are decoded once for the run's batches, and the block's warps read
 * the same x fragments (one L2 read, the other warps' from L1). A warp owns its tile's rows for
 * the whole k range, so no warp reduction follows.
 *
 * Arithmetic per (unit, batch) is the mat-vec's: exact products of decoded codes and fp16 x·2^e
 * (dense bf16: bf16 x), float32 sums, scales applied to the float sums per group (docs/CUDA.md);
 * only the order of the float32 additions differs from the mat-vec's k-split. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "qmv_tc.cuh"
#include "tuning.h"

struct QmmArgs {
  const uint8_t *w, *s; /* slab 0's repacked codes and scales */
  size_t w_slab, s_slab;
  const int *item_e; /* batch i's slab (< 0: none); NULL: slab 0 for every batch */
  const int *runs;   /* run r = batches runs[2r] … + runs[2r+1] (count 0: none); NULL: batches [r·len, r·len + len) */
  int nitems, len;   /* batches and batches per run (runs == NULL; len ≤ MB) */
  const uint4 *xp;   /* batch i at xp + i·8·nslices·4, xs + i·nslices·8 (affine), xexp + i·8 */
  const float *xs;
  const int *xexp;
  float *y; /* batch i row n at y + i·zy + n·ldy */
  int64_t ldy, zy;
  int64_t rows, tiles;
  int nunits;
  int64_t nslices;
};

/* A stage: SU units of each of TPB tiles (codes, then scales), and the same units' x of MB
 * batches (8 rows each, XROW bytes apart: padded by 64 so that lanes g and g + 1 read different
 * banks) with their affine group sums. */
template <int FMT, int GS, int TPB, int MB>
struct QmmShape {
  typedef Shape<FMT, GS> S;
  static constexpr int SU = S::SU / 4 > 0 ? S::SU / 4 : 1;
  static constexpr int XROW = SU * S::UK * 2 + 64, XSB = SU * S::GPU * 32;
  static constexpr int W_OFF = 0, S_OFF = TPB * SU * S::UNIT_W, X_OFF = S_OFF + TPB * SU * S::UNIT_S;
  static constexpr int XS_OFF = X_OFF + MB * 8 * XROW;
  static constexpr int STAGE = XS_OFF + (S::AFF ? MB * XSB : 0);
};

/* One unit of one tile (this lane's codes w and scale words sc) times the run's batches: each
 * mma's A fragment decoded once, then one mma per batch b < nrun (x[b]: the lane's fragments,
 * xs[b]: the affine group sums). */
template <int FMT, int GS, bool SB_F16, int MB>
__device__ __forceinline__ void unit_run(const uint4 (&w)[Shape<FMT, GS>::CPU], const uint2 (&sc)[Shape<FMT, GS>::GPU],
                                         const uint4 (&x)[MB][Shape<FMT, GS>::MPU / 2],
                                         const float2 (&xs)[MB][Shape<FMT, GS>::GPU], int nrun, float (&acc)[MB][4],
                                         float (&tot)[MB][4]) {
  typedef Shape<FMT, GS> S;
  constexpr int MX_OFF = FMT == CK_MXFP4 ? 14 : 8;
  const uint32_t *wd = reinterpret_cast<const uint32_t *>(&w[0]);
#pragma unroll
  for (int m = 0; m < S::MPU; m++) {
    uint32_t a[4];
    decode_a<FMT>(wd, m, a);
    if constexpr (FMT == CK_NVFP4) {
      const uint32_t sw = (m >> 1) ? sc[0].y : sc[0].x;
      const float s0 = ck_nv_scale(sw, m & 1), s8 = ck_nv_scale(sw, 2 + (m & 1));
#pragma unroll
      for (int b = 0; b < MB; b++) {
        if (b >= nrun) continue;
        const uint4 &xv = x[b][m >> 1];
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma16816<false>(d, a, (m & 1) ? xv.z : xv.x, (m & 1) ? xv.w : xv.y);
        tot[b][0] = fmaf(d[0], s0, tot[b][0]);
        tot[b][1] = fmaf(d[1], s0, tot[b][1]);
        tot[b][2] = fmaf(d[2], s8, tot[b][2]);
        tot[b][3] = fmaf(d[3], s8, tot[b][3]);
      }
      continue;
    } else {
#pragma unroll
    for (int b = 0; b < MB; b++) {
      if (b >= nrun) continue;
      const uint4 &xv = x[b][m >> 1];
      mma16816<FMT == CK_DBF16>(acc[b], a, (m & 1) ? xv.z : xv.x, (m & 1) ? xv.w : xv.y);
    }
    if (S::AFF && (m + 1) % S::MPG == 0) {
      const int gl = m / S::MPG;
      float s0, b0f, s8, b8;
      affine_fold<FMT, SB_F16>(sc[gl], s0, b0f, s8, b8);
#pragma unroll
      for (int b = 0; b < MB; b++) {
        if (b >= nrun) continue;
        const float2 xsv = xs[b][gl];
        tot[b][0] = fmaf(s0, acc[b][0], fmaf(b0f, xsv.x, tot[b][0]));
        tot[b][1] = fmaf(s0, acc[b][1], fmaf(b0f, xsv.y, tot[b][1]));
        tot[b][2] = fmaf(s8, acc[b][2], fmaf(b8, xsv.x, tot[b][2]));
        tot[b][3] = fmaf(s8, acc[b][3], fmaf(b8, xsv.y, tot[b][3]));
        acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.f;
      }
    }
    if (S::MX && (m + 1) % S::MPG == 0) {
      const int gl = m / S::MPG;
      const uint32_t sx = sc[0].x;
      const uint32_t e0 = FMT == CK_MXFP4 ? (sx >> (8 * gl)) & 0xffu : sx & 0xffu;
      const uint32_t e8 = FMT == CK_MXFP4 ? (sx >> (16 + 8 * gl)) & 0xffu : (sx >> 8) & 0xffu;
      const float f0 = __uint_as_float(min(e0 + MX_OFF, 255u) << 23);
      const float f8 = __uint_as_float(min(e8 + MX_OFF, 255u) << 23);
#pragma unroll
      for (int b = 0; b < MB; b++) {
        if (b >= nrun) continue;
        tot[b][0] = fmaf(acc[b][0], f0, tot[b][0]);
        tot[b][1] = fmaf(acc[b][1], f0, tot[b][1]);
        tot[b][2] = fmaf(acc[b][2], f8, tot[b][2]);
        tot[b][3] = fmaf(acc[b][3], f8, tot[b][3]);
        acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.f;
      }
    }
    }
  }
}

/* Block (x, r): tiles x·TPB … (one per warp) of run r's slab, times run r's batches. Thread 0
 * streams each stage's SU units of every tile of the block into shared memory (bulk copies on
 * an mbarrier per slot, NST slots); each warp multiplies its own tile's units. */
template <int FMT, int GS, bool SB_F16, int NST, int MB, int TPB>
__global__ void __launch_bounds__(TPB * 32) qmm_grouped_kernel(QmmArgs p) {
  typedef Shape<FMT, GS> S;
  typedef QmmShape<FMT, GS, TPB, MB> Q;
  constexpr int SU = Q::SU, STAGE = Q::STAGE;
  CK_DYNAMIC_SHARED(uint8_t, stage_mem); /* (16-byte aligned: the bulk copies need no more) */
  __shared__ uint64_t mbar[NST];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile0 = (int64_t)blockIdx.x * TPB, tile = tile0 + warp;
  const int ntl = p.tiles - tile0 < TPB ? (int)(p.tiles - tile0) : TPB; /* the block's tiles */
  ck_pdl_enter(); /* the runs and slabs come from the grouping kernel */
  int i0, nrun;
  if (p.runs) {
    i0 = p.runs[2 * blockIdx.y];
    nrun = p.runs[2 * blockIdx.y + 1];
  } else {
    i0 = (int)blockIdx.y * p.len;
    nrun = p.nitems - i0 < p.len ? p.nitems - i0 : p.len;
  }
  if (nrun <= 0) return;
  const int e = p.item_e ? p.item_e[i0] : 0;
  if (e < 0) return;
  const uint8_t *wsrc = p.w + (size_t)e * p.w_slab + (size_t)tile0 * p.nunits * S::UNIT_W;
  const uint8_t *ssrc = p.s + (size_t)e * p.s_slab + (size_t)tile0 * p.nunits * S::UNIT_S;
  const int nunits = p.nunits, nstages = (nunits + SU - 1) / SU;

  if (threadIdx.x == 0) {
    for (int i = 0; i < NST; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* stage st → slot st % NST (Q's layout), by warp 0: lane 0 posts the bytes, then the lanes
   * issue the copies (the tiles' codes and scales, the batches' x rows and group sums) */
  const int ncopy = 2 * ntl + nrun * (8 + (S::AFF ? 1 : 0));
  auto issue = [&](int st) {
    const int slot = st % NST, u0 = st * SU, nu = nunits - u0 < SU ? nunits - u0 : SU;
    uint8_t *dst = stage_mem + slot * STAGE;
    const uint32_t wb = (uint32_t)(nu * S::UNIT_W), sb = (uint32_t)(nu * S::UNIT_S);
    const uint32_t xb = (uint32_t)(nu * S::UK * 2), xsb = (uint32_t)(nu * S::GPU * 32);
    if (lane == 0)
      mbar_expect(&mbar[slot], (uint32_t)ntl * (wb + sb) + (uint32_t)nrun * (8 * xb + (S::AFF ? xsb : 0)));
    __syncwarp();
    fence_proxy_async_smem();
    for (int c = lane; c < ncopy; c += 32) {
      if (c < 2 * ntl) {
        const int w = c >> 1;
        if (!(c & 1))
          bulk_copy(dst + Q::W_OFF + w * SU * S::UNIT_W, wsrc + ((size_t)w * nunits + u0) * S::UNIT_W, wb,
                    &mbar[slot]);
        else if (sb)
          bulk_copy(dst + Q::S_OFF + w * SU * S::UNIT_S, ssrc + ((size_t)w * nunits + u0) * S::UNIT_S, sb,
                    &mbar[slot]);
      } else if (c < 2 * ntl + 8 * nrun) { /* x row r = b·8 + g */
        const int r = c - 2 * ntl;
        bulk_copy(dst + Q::X_OFF + r * Q::XROW,
                  reinterpret_cast<const uint8_t *>(p.xp) + ((size_t)(i0 * 8 + r) * p.nslices * 32 + (size_t)u0 * S::UK) * 2,
                  xb, &mbar[slot]);
      } else { /* batch b's group sums */
        const int b = c - 2 * ntl - 8 * nrun;
        bulk_copy(dst + Q::XS_OFF + b * Q::XSB,
                  reinterpret_cast<const uint8_t *>(p.xs) + ((size_t)(i0 + b) * p.nslices * 8 + (size_t)u0 * S::GPU * 8) * 4,
                  xsb, &mbar[slot]);
      }
    }
  };
  if (warp == 0)
    for (int st = 0; st < NST && st < nstages; st++) issue(st);

  float acc[MB][4], tot[MB][4];
#pragma unroll
  for (int b = 0; b < MB; b++)
#pragma unroll
    for (int q = 0; q < 4; q++) acc[b][q] = tot[b][q] = 0.f;
  constexpr int XSTEP = (S::UK / 32) * 4; /* uint4 of x per unit */
  const int sstride = S::AFF ? 8 : ck_fp_scale_bytes(FMT);
  const bool active = warp < ntl;

  for (int st = 0; st < nstages; st++) {
    const int slot = st % NST, u0 = st * SU, nu = nunits - u0 < SU ? nunits - u0 : SU;
    mbar_wait(&mbar[slot], (uint32_t)((st / NST) & 1));
    const uint8_t *base = stage_mem + slot * STAGE;
    if (active)
      for (int ul = 0; ul < nu; ul++) {
        uint4 w[S::CPU];
        uint2 sc[S::GPU];
        const uint4 *wsm = reinterpret_cast<const uint4 *>(base + Q::W_OFF + (warp * SU + ul) * S::UNIT_W) + lane;
#pragma unroll
        for (int c = 0; c < S::CPU; c++) w[c] = wsm[c * 32];
        const uint8_t *ssm = base + Q::S_OFF + (warp * SU + ul) * S::UNIT_S + g * sstride;
        if (S::AFF) {
#pragma unroll
          for (int gl = 0; gl < S::GPU; gl++) sc[gl] = reinterpret_cast<const uint2 *>(ssm)[gl * 8];
        } else if (FMT == CK_NVFP4) {
          sc[0] = *reinterpret_cast<const uint2 *>(ssm);
        } else if (FMT == CK_MXFP4) {
          sc[0].x = *reinterpret_cast<const uint32_t *>(ssm);
        } else if (FMT == CK_MXFP8) {
          sc[0].x = *reinterpret_cast<const uint16_t *>(ssm);
        }
        uint4 x[MB][S::MPU / 2];
        float2 xs[MB][S::GPU];
#pragma unroll
        for (int b = 0; b < MB; b++) {
          if (b >= nrun) continue;
          /* x in fragment order ([row][32-k slice][t][16 B]) and the group sums */
          const uint4 *xu = reinterpret_cast<const uint4 *>(base + Q::X_OFF + (b * 8 + g) * Q::XROW) + ul * XSTEP + t;
#pragma unroll
          for (int h = 0; h < S::MPU / 2; h++) x[b][h] = xu[h * 4];
          if (S::AFF) {
            const float2 *xsu = reinterpret_cast<const float2 *>(base + Q::XS_OFF + b * Q::XSB) + ul * S::GPU * 4 + t;
#pragma unroll
            for (int gl = 0; gl < S::GPU; gl++) xs[b][gl] = xsu[gl * 4];
          }
        }
        unit_run<FMT, GS, SB_F16, MB>(w, sc, x, xs, nrun, acc, tot);
      }
    __syncthreads(); /* every warp is done with this slot */
    if (warp == 0 && st + NST < nstages) issue(st + NST);
  }
  if (!active) return;
  /* lane (g, t) holds rows (g, g+8) × columns (2t, 2t+1) of each batch */
  constexpr int YSH = FMT == CK_NVFP4 ? 14 - CK_NV_SCALE_LOG2 : 0;
#pragma unroll
  for (int b = 0; b < MB; b++) {
    if (b >= nrun) continue;
    const int i = i0 + b;
    float *yb = p.y + (int64_t)i * p.zy;
    const int *xe = p.xexp + (int64_t)i * 8;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int64_t row = tile * 16 + g + (q >> 1) * 8;
      const int col = 2 * t + (q & 1);
      const float v = S::POST ? tot[b][q] : acc[b][q];
      if (row < p.rows) yb[(int64_t)col * p.ldy + row] = ck_scale_pow2(v, YSH - xe[col]);
    }
  }
}

/* ---- launcher ---------------------------------------------------------------------------- */
typedef void (*qmm_fn)(QmmArgs);
constexpr int QMM_MB = QMM_GROUP_BATCHES, QMM_TPB = QMM_GROUP_TILES, QMM_NST = QMM_GROUP_STAGES;

template <int FMT, int GS, bool F16>
static qmm_fn qmm_k(int *stage) {
  *stage = QmmShape<FMT, GS, QMM_TPB, QMM_MB>::STAGE;
  return qmm_grouped_kernel<FMT, GS, F16, QMM_NST, QMM_MB, QMM_TPB>;
}
template <int FMT>
static qmm_fn qmm_affine(int gs, bool f16, int *stage) {
  if (f16) return gs == 32 ? qmm_k<FMT, 32, true>(stage) : gs == 64 ? qmm_k<FMT, 64, true>(stage) : qmm_k<FMT, 128, true>(stage);
  return gs == 32 ? qmm_k<FMT, 32, false>(stage) : gs == 64 ? qmm_k<FMT, 64, false>(stage) : qmm_k<FMT, 128, false>(stage);
}
static qmm_fn qmm_pick(const ck_layout *L, int *stage) {
  const bool f16 = L->scales_dtype == CKT_F16;
  switch (L->fmt) {
  case CK_NVFP4: return qmm_k<CK_NVFP4, 16, false>(stage);
  case CK_AFF4:
  case CK_AFF8:
    if (L->group_size != 32 && L->group_size != 64 && L->group_size != 128) return nullptr;
    return L->fmt == CK_AFF4 ? qmm_affine<CK_AFF4>(L->group_size, f16, stage)
                             : qmm_affine<CK_AFF8>(L->group_size, f16, stage);
  case CK_MXFP4: return qmm_k<CK_MXFP4, 32, false>(stage);
  case CK_MXFP8: return qmm_k<CK_MXFP8, 32, false>(stage);
  case CK_DBF16: return qmm_k<CK_DBF16, 0, false>(stage);
  case CK_DF16: return qmm_k<CK_DF16, 0, false>(stage);
  }
  return nullptr;
}

extern "C" int ck_qmm_group_batches(void) { return QMM_MB; }

extern "C" int ck_qmm_grouped(const ck_layout *L, const int *item_e, const int *runs, int nruns, int nitems, int len,
                              const uint16_t *xp, const float *xs, const int *xexp, float *y, int64_t ldy, int64_t zy,
                              void *stream) {
  int stage = 0;
  qmm_fn fn = L->fmt == CK_GENERIC ? nullptr : qmm_pick(L, &stage);
  if (!runs && (len < 1 || len > QMM_MB)) return (int)cudaErrorInvalidValue;
  if (!runs) nruns = (nitems + len - 1) / len;
  if (!fn || nruns < 1 || L->cols % 32 || nruns > 65535) return (int)cudaErrorInvalidValue;
  QmmArgs a = {};
  a.w = (const uint8_t *)L->w;
  a.s = (const uint8_t *)L->s;
  a.w_slab = L->w_slab;
  a.s_slab = L->s_slab;
  a.item_e = item_e;
  a.runs = runs;
  a.nitems = nitems;
  a.len = len;
  a.xp = (const uint4 *)xp;
  a.xs = xs;
  a.xexp = xexp;
  a.y = y;
  a.ldy = ldy;
  a.zy = zy;
  a.rows = L->rows;
  a.tiles = L->tiles;
  a.nunits = (int)L->nunits;
  a.nslices = L->cols / 32;
  const int smem = QMM_NST * stage;
  if (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e) return (int)e;
  }
  const unsigned bx = (unsigned)((L->tiles + QMM_TPB - 1) / QMM_TPB);
  return (int)ck_launch(fn, dim3(bx, (unsigned)nruns), QMM_TPB * 32, smem, (cudaStream_t)stream, a);
}

CK_TIMELINE_SETTER(ck_tl_qmm_grouped)
