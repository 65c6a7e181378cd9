/* The batched decode step's nvfp4 product on the warpgroup tensor cores (ck_qmm_wg, sm_90a):
 * up to 64 rows of x times one weight, each weight byte read from memory and decoded once for
 * all the rows.
 *
 * A block is two warpgroups, 8 tiles of 16 weight rows (one per warp) over one k range. Each
 * stage brings SU units (64 k each) of the tiles' codes and scales, and the same k of every row
 * of x, into shared memory by bulk copies completing on an mbarrier per slot. x arrives already
 * in the wgmma B operand's layout (ck_xprep_wg: K-major, 128-byte swizzle), one copy per stage.
 * A warp decodes its tile's A fragments into registers — the mma.sync m16n8k16 A layout, which
 * is the register A operand of wgmma for its 16 rows of the warpgroup's 64 — with the E4M3 scale
 * folded into the fp16 values (exact, as in qmm_rows.cu), and the warpgroup issues one
 * m64nNk16 per 16 k, N = the rows rounded up to 8, 16, 32 or 64; the tensor cores read x from
 * shared memory themselves and run while the warps decode the next unit (two register sets of
 * A fragments, alternating). The sums stay in the accumulator over the whole k range.
 *
 * The k splits are ck_qmm_rows_splits' (the same 8 tiles per block); the last block of a group
 * adds the splits in order. A row's bits depend on N (the row count's bucket), never on the other
 * rows' values or the row's place among them: each row is a column of its own. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "ck_mma.cuh"
#include "ck_wgmma.cuh"
#include "qmv_tc.cuh"
#include "tuning.h"

struct WgArgs {
  const uint8_t *w, *s; /* repacked codes and scales */
  const uint8_t *x;     /* unit u of x (N rows, ck_xprep_wg's layout) at x + u·N·128 */
  const int *xexp;
  float *y; /* row r at y + r·ldy */
  int64_t ldy;
  float *part;   /* k splits: split z's sums of row r at part + (z·nr + r)·tiles·16 */
  unsigned *cnt; /* k splits: one counter per tile group, zero between launches */
  int64_t rows, tiles;
  int nunits;
  int nr, ks;
};

/* A stage: x of SU units (N rows × 128 bytes each, 1024-byte aligned for the swizzle atoms),
 * then the 8 tiles' codes (512 bytes a unit) and scales (64). */
template <int N, int SU, int TBX>
struct WgShape {
  static constexpr int TB = TBX, UW = 512, US = 64, XB = N * 128;
  static constexpr int X_OFF = 0, W_OFF = SU * XB, S_OFF = W_OFF + TB * SU * UW;
  static constexpr int STAGE = (S_OFF + TB * SU * US + 1023) / 1024 * 1024;
};

/* The four A fragments (16 k each) of one unit of the lane's tile: codes wv, scale words sc. */
__device__ __forceinline__ void wg_decode_unit(uint4 wv, uint2 sc, uint32_t (&a)[4][4]) {
  const uint32_t *wd = reinterpret_cast<const uint32_t *>(&wv);
#pragma unroll
  for (int m = 0; m < 4; m++) {
    decode_a<CK_NVFP4>(wd, m, a[m]);
    const uint32_t sw = (m >> 1) ? sc.y : sc.x;
    const uint32_t s0 = nv_scale_h2(sw, m & 1), s8 = nv_scale_h2(sw, 2 + (m & 1));
    a[m][0] = h2_mul(a[m][0], s0);
    a[m][1] = h2_mul(a[m][1], s8);
    a[m][2] = h2_mul(a[m][2], s0);
    a[m][3] = h2_mul(a[m][3], s8);
  }
}

/* One unit: the warpgroup's 4 wgmma over x of the unit at x_s (shared-window address). */
template <int N>
__device__ __forceinline__ void wg_unit_mma(float (&acc)[N / 2], const uint32_t (&a)[4][4], uint32_t x_s) {
  wg_fence();
#pragma unroll
  for (int m = 0; m < 4; m++) wg_mma_rs_f16<N>(acc, a[m], wg_desc(x_s + (uint32_t)m * 32u, 16), 1);
  wg_commit();
}
__device__ __forceinline__ void wg_pin_unit(const uint32_t (&a)[4][4]) {
#pragma unroll
  for (int m = 0; m < 4; m++) wg_pin_a(a[m]);
}

/* Block (x, z): tiles x·8 … x·8 + 7 (warp w: tile w), k split z. Warp 0 streams the stages. */
template <int N, int SU, int NST, int TBX, int MINB = 1>
__global__ void __launch_bounds__(TBX * 32, MINB) qmm_wg_kernel(WgArgs p) {
  typedef WgShape<N, SU, TBX> Q;
  constexpr int TB = Q::TB, STAGE = Q::STAGE;
  CK_DYNAMIC_SHARED(uint8_t, raw);
  __shared__ uint64_t mbar[NST];
  __shared__ int last;
  const uint32_t raw_s = ck_smem_off(raw);
  uint8_t *stage_mem = raw + (((raw_s + 1023u) & ~1023u) - raw_s);
  const uint32_t stage_s = ck_smem_off(stage_mem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile0 = (int64_t)blockIdx.x * TB, wtile = tile0 + warp;
  const int ntl = p.tiles - tile0 < TB ? (int)(p.tiles - tile0) : TB;
  const int kz = blockIdx.y;
  const int ubeg = p.ks == 1 ? 0 : (int)((int64_t)p.nunits * kz / p.ks);
  const int uend = p.ks == 1 ? p.nunits : (int)((int64_t)p.nunits * (kz + 1) / p.ks);
  const int nunits = uend - ubeg, nstages = (nunits + SU - 1) / SU;
  const uint8_t *wsrc = p.w + ((size_t)tile0 * p.nunits + ubeg) * Q::UW;
  const uint8_t *ssrc = p.s + ((size_t)tile0 * p.nunits + ubeg) * Q::US;

  if (threadIdx.x == 0) {
    for (int i = 0; i < NST; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* stage st → slot st % NST; all the slot's bytes are posted with its weights, so its phase
   * cannot complete before the x part issued later lands */
  auto issue = [&](int st, bool W, bool X) {
    const int slot = st % NST, u0 = st * SU, nu = nunits - u0 < SU ? nunits - u0 : SU;
    uint8_t *dst = stage_mem + slot * STAGE;
    const uint32_t wb = (uint32_t)(nu * Q::UW), sb = (uint32_t)(nu * Q::US), xb = (uint32_t)(nu * Q::XB);
    if (W && lane == 0) mbar_expect(&mbar[slot], (uint32_t)ntl * (wb + sb) + xb);
    __syncwarp();
    fence_proxy_async_smem();
    if (W)
      for (int c = lane; c < 2 * ntl; c += 32) {
        const int w = c >> 1;
        if (!(c & 1))
          bulk_copy(dst + Q::W_OFF + w * SU * Q::UW, wsrc + ((size_t)w * p.nunits + u0) * Q::UW, wb, &mbar[slot]);
        else
          bulk_copy(dst + Q::S_OFF + w * SU * Q::US, ssrc + ((size_t)w * p.nunits + u0) * Q::US, sb, &mbar[slot]);
      }
    if (X && lane == 0) bulk_copy(dst + Q::X_OFF, p.x + (size_t)(ubeg + u0) * Q::XB, xb, &mbar[slot]);
  };
  /* the weights' first stages stream during the previous kernel's tail; x after its wait */
  if (warp == 0)
    for (int st = 0; st < NST && st < nstages; st++) issue(st, true, false);
  ck_pdl_enter();
  if (warp == 0)
    for (int st = 0; st < NST && st < nstages; st++) issue(st, false, true);

  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; i++) acc[i] = 0.f;
  /* a warpgroup runs while any of its tiles is live (its warps issue each wgmma together; a
   * warp's tile past the end computes on stale bytes, unused) */
  const bool active = (warp & ~3) < ntl;
  uint32_t a0[4][4], a1[4][4];
  wg_pin(acc);
  for (int st = 0; st < nstages; st++) {
    const int slot = st % NST, u0 = st * SU, nu = nunits - u0 < SU ? nunits - u0 : SU;
    mbar_wait(&mbar[slot], (uint32_t)((st / NST) & 1));
    const uint8_t *base = stage_mem + slot * STAGE;
    const uint32_t xs = stage_s + slot * STAGE + Q::X_OFF;
    if (active) {
#pragma unroll
      for (int ul = 0; ul < SU; ul++) {
        if (ul >= nu) break;
        const uint4 wv = reinterpret_cast<const uint4 *>(base + Q::W_OFF + (warp * SU + ul) * Q::UW)[lane];
        const uint2 sc = *reinterpret_cast<const uint2 *>(base + Q::S_OFF + (warp * SU + ul) * Q::US + g * 8);
        /* (the set decoded into was last read by the unit before the previous one: waited for) */
        if (ul & 1) {
          wg_decode_unit(wv, sc, a1);
          wg_unit_mma<N>(acc, a1, xs + (uint32_t)(ul * Q::XB));
          wg_wait<1>();
          wg_pin_unit(a0);
        } else {
          wg_decode_unit(wv, sc, a0);
          wg_unit_mma<N>(acc, a0, xs + (uint32_t)(ul * Q::XB));
          wg_wait<1>();
          wg_pin_unit(a1);
        }
      }
      wg_wait<0>();
      wg_pin(acc);
      wg_pin_unit(a0);
      wg_pin_unit(a1);
    }
    __syncthreads(); /* every warpgroup is done with this slot */
    if (warp == 0 && st + NST < nstages) issue(st + NST, true, true);
  }

  /* thread (warp, g, t) holds tile rows g, g + 8 × x rows 8j + 2t, 8j + 2t + 1; the sums carry
   * x's 2^e and the folded scale's 2^7 */
  const int64_t prow = p.tiles * 16;
  if (active)
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
      const int64_t row = wtile * 16 + g + 8 * ((i >> 1) & 1);
      const int r = 8 * (i >> 2) + 2 * t + (i & 1);
      if (r >= p.nr || wtile >= p.tiles) continue;
      if (p.ks == 1) {
        if (row < p.rows) p.y[(int64_t)r * p.ldy + row] = ck_scale_pow2(acc[i], 7 - p.xexp[r]);
      } else {
        p.part[((int64_t)kz * p.nr + r) * prow + row] = acc[i];
      }
    }
  if (p.ks == 1) return;
  /* the last block of the group to finish adds the splits in order */
  if (!split_group_last(&p.cnt[blockIdx.x], p.ks, last)) return;
  if (wtile < p.tiles)
    for (int i = lane; i < 16 * p.nr; i += 32) {
      const int r = i >> 4;
      const int64_t row = wtile * 16 + (i & 15);
      if (row >= p.rows) continue;
      float s = 0.f;
      for (int z = 0; z < p.ks; z++) s += __ldcg(p.part + ((int64_t)z * p.nr + r) * prow + row);
      p.y[(int64_t)r * p.ldy + row] = ck_scale_pow2(s, 7 - p.xexp[r]);
    }
  if (threadIdx.x == 0) p.cnt[blockIdx.x] = 0;
}


/* ---- launcher ---------------------------------------------------------------------------- */
typedef void (*wg_fn)(WgArgs);

/* The kernel for n rows: WG_TILES tiles per block, WG_STAGES stages of WG_UNITS units; up to 16
 * rows registers for 3 blocks per SM (docs/BATCH.md). */
template <int N>
static wg_fn wg_k(int *smem) {
  *smem = WG_STAGES * WgShape<N, WG_UNITS, WG_TILES>::STAGE + 1024;
  return qmm_wg_kernel<N, WG_UNITS, WG_STAGES, WG_TILES, N <= 16 ? WG_BLOCKS_SMALL : 1>;
}
static wg_fn wg_pick(int n, int *smem) {
  return n == 8 ? wg_k<8>(smem) : n == 16 ? wg_k<16>(smem) : n == 32 ? wg_k<32>(smem) : wg_k<64>(smem);
}

/* Once per kernel: its shared-memory allowance set, and the blocks of it resident per SM (the
 * occupancy calculator; 1 where it cannot say). */
static std::mutex wg_memo_lock;
static cudaError_t wg_ready(wg_fn fn, int smem, int *per_sm) {
  static wg_fn done[4];
  static int per[4], ndone;
  std::lock_guard<std::mutex> hold(wg_memo_lock);
  for (int i = 0; i < ndone; i++)
    if (done[i] == fn) {
      if (per_sm) *per_sm = per[i];
      return cudaSuccess;
    }
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e) return e;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, WG_TILES * 32, (size_t)smem) != cudaSuccess || n < 1)
    n = 1;
  if (ndone < 4) {
    done[ndone] = fn;
    per[ndone++] = n;
  }
  if (per_sm) *per_sm = n;
  return cudaSuccess;
}

/* k splits of L's product at nr rows: as many as keep its blocks within one round of the
 * resident slots, each split at least ROWS_SPLIT_UNITS units, at most ROWS_MAX_SPLITS. A second
 * round costs more than the slots it fills: the 31B's full q|k at 16 rows took 41.6 µs in 5
 * splits against 40.3 in 2, its head 413.4 in 3 against 328.9 in 1 (H100). */
extern "C" int ck_qmm_wg_splits(const ck_layout *L, int nr, int sms) {
  int smem = 0;
  const wg_fn fn = wg_pick(wg_rows_n(nr < 1 ? 1 : nr > 64 ? 64 : nr), &smem);
  int per_sm = 1;
  if (wg_ready(fn, smem, &per_sm)) per_sm = 1;
  const int64_t slots = (int64_t)per_sm * (sms < 1 ? 1 : sms);
  const int64_t groups = (L->tiles + WG_TILES - 1) / WG_TILES;
  int64_t ks = slots / groups;
  const int64_t most = L->nunits / ROWS_SPLIT_UNITS;
  if (ks > most) ks = most;
  if (ks > ROWS_MAX_SPLITS) ks = ROWS_MAX_SPLITS;
  return ks < 1 ? 1 : (int)ks;
}

/* The scratch ck_qmm_wg needs at its splits for any row count up to 64. */
extern "C" void ck_qmm_wg_scratch(const ck_layout *L, int sms, int64_t *part_floats, int64_t *counters) {
  int64_t p = 0;
  for (int n = 8; n <= 64; n *= 2) {
    const int ks = ck_qmm_wg_splits(L, n, sms);
    if (ks > 1 && (int64_t)ks * n * L->tiles * 16 > p) p = (int64_t)ks * n * L->tiles * 16;
  }
  *part_floats = p;
  *counters = L->tiles;
}

/* nvfp4 weights on a device with wgmma (sm_90a machine code: the PTX for newer GPUs has none). */
extern "C" int ck_qmm_wg_supported(const ck_layout *L, int cc_major, int cc_minor) {
  return L->fmt == CK_NVFP4 && cc_major == 9 && cc_minor == 0 && L->cols % 64 == 0;
}

extern "C" int ck_qmm_wg(const ck_layout *L, int nr, int ks, const uint16_t *xw, const int *xexp, float *y,
                         int64_t ldy, float *part, unsigned *cnt, void *stream) {
  const int64_t groups = (L->tiles + WG_TILES - 1) / WG_TILES;
  if (L->fmt != CK_NVFP4 || nr < 1 || nr > 64 || ks < 1 || ks > L->nunits || L->cols % 64 || groups > 2147483647 ||
      (ks > 1 && (!part || !cnt)))
    return (int)cudaErrorInvalidValue;
  int smem = 0;
  wg_fn fn = wg_pick(wg_rows_n(nr), &smem);
  WgArgs a = {};
  a.w = (const uint8_t *)L->w;
  a.s = (const uint8_t *)L->s;
  a.x = (const uint8_t *)xw;
  a.xexp = xexp;
  a.y = y;
  a.ldy = ldy;
  a.part = part;
  a.cnt = cnt;
  a.rows = L->rows;
  a.tiles = L->tiles;
  a.nunits = (int)L->nunits;
  a.nr = nr;
  a.ks = ks;
  cudaError_t e = wg_ready(fn, smem, NULL);
  if (e) return (int)e;
  return (int)ck_launch(fn, dim3((unsigned)groups, (unsigned)ks), WG_TILES * 32, smem, (cudaStream_t)stream, a);
}

CK_TIMELINE_SETTER(ck_tl_qmm_wg)
