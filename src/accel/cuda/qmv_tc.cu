/* The fast quantized mat-vec (1 to 8 activation rows) on tensor cores.
 *
 * One block = one 16-row tile; its W warps split the k-units of that tile (split-K inside the
 * block) and reduce through shared memory at the end. Per unit a lane loads 16-byte chunks of
 * codes already in m16n8k16 fragment order (repack.cu), decodes them to fp16/bf16 pairs with
 * a few integer ops, and issues mma.sync with the activations as the 8-column B operand
 * (rows ≥ nb are zero). Products are exact (integer codes or exact scale·value products times
 * fp16/bf16 x); accumulation is float32. Affine groups use y = Σ_g s_g·Σq·x + b_g·Σx.
 *
 * Activations enter as fp16 scaled by a power of two per row (xprep: max|x| lands in
 * [2^14, 2^15), exact for every bf16 value within 2^29 of the row's maximum), so codes and
 * scales can use fp16's 10-bit mantissa; dense bf16 weights take x as bf16 unchanged. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include <mutex>

#include "ck_launch.cuh"
#include "qmv_tc.cuh"
#include "tuning.h"

struct QmvArgs {
  const uint4 *w;
  const void *s;
  const uint4 *xp;
  const float *xs;
  const int *xexp;
  float *y;
  int64_t rows, ldy;
  int nunits, nb;
  int ksplit;      /* blockIdx.y of ksplit takes units [nunits·y/ksplit, nunits·(y+1)/ksplit) */
  int64_t kstride; /* and writes its partial sums at y + blockIdx.y·kstride */
  int64_t nslices; /* cols / 32: the x layout's row stride in 32-k slices */
  int early; /* weight stages issued before the wait for x's producer (≤ NST) */
  /* GeGLU epilogue (ck_qmv_geglu; one row, no k split): the weight's rows interleaved by 8 —
   * tile t holds gate rows 8t … 8t+7, then up rows 8t … 8t+7 — and instead of y, the tile's 8
   * activations ck_geglu(gate, up) into act[8t …], their max |value| into amax[8t / apblock]
   * (atomically: a max does not depend on the order; amax zeroed beforehand) */
  uint16_t *act;
  float *amax;
  int64_t acts;
  int apblock;
  /* expert mode (ck_qmv_experts; the EXP kernels): block (·, ·, z) multiplies slab zslab[z] of
   * the stacked weight (slabs of w_slab / s_slab bytes; nothing when zslab[z] < 0) with x batch
   * z (xper; else batch 0) — the nb-row prep at xp + z·nb·nslices·4, xs + z·nslices·8,
   * xexp + z·8 — into y + z·zy */
  const int *zslab;
  size_t w_slab, s_slab;
  int64_t zy;
  int xper;
  int64_t amax_z; /* with the GeGLU epilogue: batch z's activations at act + z·acts, maxima at amax + z·amax_z */
  int zfast; /* expert mode with the batches as blockIdx.x and the tiles as blockIdx.z: a tile's
              * batches run side by side, its weights read from memory once (ck_qmv_rows) */
};

#define CK_MAX_WARPS 16

/* Loads unit u: codes wsm (this lane's chunks) and scales ssm (this lane's row pair) from
 * shared memory; x (this lane's batch row g, fragment order) and the group sums from global. */
template <int FMT, int GS>
__device__ __forceinline__ void load_unit(UnitRegs<FMT, GS> &r, const uint4 *wsm, const uint8_t *ssm,
                                          const uint4 *xu, const float2 *xsu, bool xok) {
  typedef Shape<FMT, GS> S;
#pragma unroll
  for (int c = 0; c < S::CPU; c++) r.w[c] = wsm[c * 32];
#pragma unroll
  for (int h = 0; h < S::MPU / 2; h++) r.x[h] = xok ? ld_keep(xu + h * 4) : make_uint4(0, 0, 0, 0);
  if (S::AFF) {
#pragma unroll
    for (int gl = 0; gl < S::GPU; gl++) {
      r.sc[gl] = reinterpret_cast<const uint2 *>(ssm)[gl * 8];
      r.xs[gl] = __ldg(xsu + gl * 4);
    }
  } else if (FMT == CK_NVFP4) {
    r.sc[0] = *reinterpret_cast<const uint2 *>(ssm);
  } else if (FMT == CK_MXFP4) {
    r.sc[0].x = *reinterpret_cast<const uint32_t *>(ssm);
  } else if (FMT == CK_MXFP8) {
    r.sc[0].x = *reinterpret_cast<const uint16_t *>(ssm);
  }
}

/* One block per 16-row tile. Thread 0 streams the tile's codes and scales into NST shared
 * stages with bulk copies completing on mbarriers (all of a stage's bytes in flight at once,
 * no registers held); the W warps split each stage's units (split-K inside the block) and
 * reduce through shared memory at the end.
 *
 * COL (one activation row; nvfp4, and affine 4-bit with groups of 32 or 64): the mma's 8
 * columns carry 8 partial sums instead of 8 rows of x. A warp takes its units in pairs; the B
 * operand of mma j (j < 4: mma j of the first unit, else mma j - 4 of the second) is x in
 * column j and zero elsewhere, so one accumulator ends the pair holding each row's 8 sums
 * apart. Lane (g, t) holds columns 2t and 2t + 1, which always lie in one scale group (of
 * unit t / 2), so it scales its 4 sums with 4 FMAs: for nvfp4 instead of scaling every decoded
 * weight pair in fp16 (16 multiplies and 8 scale extractions per unit), for affine once per
 * pair instead of once per unit, and the bias term b·Σx once per group (with groups of 64 two
 * lanes share a group: the odd one adds none). Lane (g, t) loads only the 8 bytes of x its
 * column needs. */
template <int FMT, int GS, bool SB_F16, int NST, int COL = 0, bool XS = false, bool EXP = false>
__global__ void __launch_bounds__(CK_MAX_WARPS * 32) qmv_tc_kernel(QmvArgs p) {
  typedef Shape<FMT, GS> S;
  /* XS (one-row kernels): x (and the affine group sums) come with each stage's weights through
   * the bulk copy, so a pair waits on shared memory instead of an L1 miss to the L2 */
  static_assert(!XS || COL, "x staging is for the one-row kernels");
  constexpr int STAGE = XS ? S::STAGE_XS : S::STAGE;
  constexpr int XOFF = S::SU * (S::UNIT_W + S::UNIT_S), XSOFF = XOFF + S::STAGE_XB;
#ifdef CK_EMULATION
  uint8_t *stage_mem = emu_dyn_smem;
#else
  extern __shared__ __align__(128) uint8_t stage_mem[];
#endif
  __shared__ uint64_t mbar[NST];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile = EXP && p.zfast ? blockIdx.z : blockIdx.x;
  const int ks = blockIdx.y;
  const int zb = EXP && p.zfast ? blockIdx.x : blockIdx.z; /* the expert mode's batch */
  if (EXP) { /* batch z's activations and outputs (the slab is read after the wait: the router wrote it) */
    const int64_t z = zb, zx = p.xper ? z : 0;
    p.xp += zx * p.nb * p.nslices * 4;
    p.xs += zx * p.nslices * 8;
    p.xexp += zx * 8;
    p.y += z * p.zy;
    if (p.act) p.act += z * p.acts, p.amax += z * p.amax_z;
  }
  /* (without a k split no division: two 64-bit divisions are ~70 of a tile's ~1900 warp
   * instructions on lm_head, by ncu's source counters) */
  const int ubeg = p.ksplit == 1 ? 0 : (int)((int64_t)p.nunits * ks / p.ksplit);
  const int uend = p.ksplit == 1 ? p.nunits : (int)((int64_t)p.nunits * (ks + 1) / p.ksplit);
  const int nunits = uend - ubeg, nstages = (nunits + S::SU - 1) / S::SU;
  const uint8_t *wsrc = (const uint8_t *)p.w + ((size_t)tile * p.nunits + ubeg) * S::UNIT_W;
  const uint8_t *ssrc = (const uint8_t *)p.s + ((size_t)tile * p.nunits + ubeg) * S::UNIT_S;
  /* x in batch-row-major fragment order: [row g][32-k slice][t][16 B] */
  constexpr int XSTEP0 = (S::UK / 32) * 4; /* uint4 of x per unit */
  const uint4 *xrow = p.xp + (size_t)g * p.nslices * 4 + t + (size_t)ubeg * XSTEP0;

  if (threadIdx.x == 0) {
    for (int i = 0; i < NST; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* thread 0: stage st into slot st % NST — its weights (W), its x part (X; XS kernels), or
   * both; a slot's bytes are all expected with its weights, so its phase cannot complete
   * before the x part issued later (after the wait for x's producer) has landed */
  auto issue = [&](int st, bool W, bool X) {
    int slot = st % NST, u0 = st * S::SU;
    int nu = nunits - u0 < S::SU ? nunits - u0 : S::SU;
    uint8_t *dst = stage_mem + slot * STAGE;
    uint32_t wb = (uint32_t)(nu * S::UNIT_W), sb = (uint32_t)(nu * S::UNIT_S);
    uint32_t xb = XS ? (uint32_t)(nu * S::UK * 2) : 0, xsb = XS && S::AFF ? (uint32_t)(nu * S::GPU * 32) : 0;
    if (W) {
      mbar_expect(&mbar[slot], wb + sb + xb + xsb);
      bulk_copy(dst, wsrc + (size_t)u0 * S::UNIT_W, wb, &mbar[slot]);
      if (sb) bulk_copy(dst + S::SU * S::UNIT_W, ssrc + (size_t)u0 * S::UNIT_S, sb, &mbar[slot]);
    }
    if (XS && X) {
      const size_t ug = (size_t)ubeg + u0; /* the stage's first unit in the whole row */
      bulk_copy(dst + XOFF, reinterpret_cast<const uint8_t *>(p.xp) + ug * S::UK * 2, xb, &mbar[slot]);
      if (xsb) bulk_copy(dst + XSOFF, reinterpret_cast<const uint8_t *>(p.xs) + ug * S::GPU * 32, xsb, &mbar[slot]);
    }
  };
  /* expert mode: the slab of this batch; before the wait when its producer completed before
   * this kernel's predecessor passed its own wait (p.early > 0: the caller's promise), else after */
  auto select_slab = [&]() -> bool {
    const int e = p.zslab[zb];
    if (e < 0) return false;
    wsrc += (size_t)e * p.w_slab;
    ssrc += (size_t)e * p.s_slab;
    return true;
  };
  if (EXP && p.early && !select_slab()) return;
  /* the weights depend on no earlier kernel: their first p.early stages are in flight before
   * the wait for the kernel that wrote x (programmatic dependent launch, ck_launch.cuh) */
  if (threadIdx.x == 0)
    for (int st = 0; st < NST && st < p.early && st < nstages; st++) issue(st, true, false);
  ck_pdl_enter();
  if (EXP && !p.early && !select_slab()) return;
  if (threadIdx.x == 0)
    for (int st = 0; st < NST && st < nstages; st++) {
      if (st >= p.early) issue(st, true, true);
      else if (XS) issue(st, false, true);
    }
  /* two accumulator sets: the two units in flight have independent mma chains */
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, tot[4] = {0.f, 0.f, 0.f, 0.f};
  float acc2[4] = {0.f, 0.f, 0.f, 0.f}, tot2[4] = {0.f, 0.f, 0.f, 0.f};
  const int sstride = S::AFF ? 8 : ck_fp_scale_bytes(FMT);
  const bool xok = g < p.nb;
  /* per-unit strides of this warp's pointers (units ul, ul + nw, ... of each stage) */
  constexpr int XSTEP = (S::UK / 32) * 4;    /* uint4 of x per unit */
  constexpr int WSTEP = S::CPU * 32;          /* uint4 of codes per unit */
  const float2 *xs_lane = reinterpret_cast<const float2 *>(p.xs) + t + (size_t)ubeg * S::GPU * 4; /* [group][8 floats] */
  /* COL: lane (g, t) reads x pair (b0, b1) of mma g & 3 of its unit (row 0 of the layout) */
  const uint2 *xcol = reinterpret_cast<const uint2 *>(p.xp + t + (size_t)ubeg * XSTEP0) + ((g & 3) >> 1) * 8 + (g & 1);
  /* loop invariants, made opaque (volatile) so the compiler keeps them in registers instead of
   * recomputing them every pair: the column selectors (col_sel_init), the second unit's
   * offsets of codes / this lane's scale word / this lane's x, and the scales' exponent bits */
  uint32_t colsel[8] = {0, 0, 0, 0, 0, 0, 0, 0}, nv_e = 0;
  int col_w = 0, col_s = 0, col_x = 0, col_soff = 0, col_xs_off = 0, col_gl = 0;
  const float *col_xs = p.xs; /* affine: this lane's group sums (x row 0) at the pair's first unit */
  float col_bw = 1.f;         /* affine: 1 for the lane that adds its group's bias term, else 0 */
  if (COL) {
    col_sel_init(g, colsel);
    col_w = ck_opaque(nw * WSTEP);
    col_s = ck_opaque(t >= 2 ? nw * S::UNIT_S : 0);
    col_x = ck_opaque(g >= 4 ? nw * XSTEP * 2 : 0);
    nv_e = ck_opaque(0x40000000u);
    if (S::AFF) { /* this lane's group: unit t / 2, group (2t mod 4) / MPG of it */
      const int gl = ((2 * t) & 3) / S::MPG;
      col_gl = gl;
      col_soff = gl * 64;
      col_xs = p.xs + ((size_t)ubeg * S::GPU + gl) * 8;
      col_xs_off = ck_opaque(t >= 2 ? nw * S::GPU * 8 : 0);
      col_bw = S::MPG == 4 && (t & 1) ? 0.f : 1.f; /* groups of 64: lanes 2t and 2t+1 share one */
    } else {
      col_soff = (t & 1) * 4;
    }
  }
  /* one pair's arithmetic: units w0 and (if two) w1, x pair xv, the lane's scale word(s) sw
   * and (affine) group sum xsv */
  auto pair_math = [&](const uint4 w0, const uint4 w1, const uint2 xv, const uint2 sw, const float xsv, bool two) {
    const uint32_t wd0[4] = {w0.x, w0.y, w0.z, w0.w}, wd1[4] = {w1.x, w1.y, w1.z, w1.w};
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    col_unit_mmas<FMT>(d, wd0, xv, colsel);
    if (two) col_unit_mmas<FMT>(d, wd1, xv, colsel + 4);
    if (S::AFF) { /* compute_unit's group epilogue, for this lane's group */
      float s0, b0f, s8, b8;
      affine_fold<FMT, SB_F16>(sw, s0, b0f, s8, b8);
      tot[0] = fmaf(s0, d[0], fmaf(b0f, xsv, tot[0]));
      tot[1] = fmaf(s0, d[1], tot[1]);
      tot[2] = fmaf(s8, d[2], fmaf(b8, xsv, tot[2]));
      tot[3] = fmaf(s8, d[3], tot[3]);
    } else {
#pragma unroll
      for (int q = 0; q < 4; q++) tot[q] = fmaf(d[q], nv_scale(sw.x, q, nv_e), tot[q]);
    }
  };
  /* pair I (units 8I + warp and 8I + warp + 4) of a full stage of 4 warps, from the lane's
   * pointers into the stage: codes, x pair, scale word(s), affine group sum — each second
   * unit's offset (col_x, col_s, col_xs_off) already added — so every offset is a constant */
  auto stage_pair = [&](const uint4 *wl, const uint2 *xl, const uint8_t *sl, const float *xsl, auto i_c) {
    constexpr int I = decltype(i_c)::value;
    const uint4 w0 = wl[I * 8 * WSTEP], w1 = wl[(I * 8 + 4) * WSTEP];
    const uint2 xv = xl[I * 8 * XSTEP * 2];
    uint2 sw = make_uint2(0, 0);
    float xsv = 0.f;
    if (S::AFF) {
      sw = *reinterpret_cast<const uint2 *>(sl + I * 8 * S::UNIT_S);
      xsv = xsl[I * 8 * S::GPU * 8] * col_bw;
    } else {
      sw.x = *reinterpret_cast<const uint32_t *>(sl + I * 8 * S::UNIT_S);
    }
    pair_math(w0, w1, xv, sw, xsv, true);
  };
  /* The full stages of the one-row kernels with x staged and 4 warps (the decoder's products):
   * the stage loop unrolled over the NST slots, so that every shared-memory address is a lane
   * register plus a constant. In the loop below the lane offsets, the path's conditions and
   * the slot's base were re-derived every stage (~65 of ~290 warp instructions per stage of
   * two pairs in the SASS); here a stage is its wait, its two pairs, the barrier and thread
   * 0's refill. The same operations in the same order as the loop: the same bits. The stages
   * after the last full round of NST (and a partial one) go through the loop below. */
  int st_begin = 0;
  if (COL && XS && nw == 4) {
    static_assert(S::SU == 16 || !XS, "two pairs of 4 warps per stage");
    static_assert(STAGE % 16 == 0, "slots at 16-byte multiples");
    const int nfull = nunits / S::SU;
    /* this lane's operands in slot 0: codes, x pair (second unit's at col_x), scale word
     * (second unit's at col_s), affine group sum (second unit's at col_xs_off) */
    const uint4 *lw = reinterpret_cast<const uint4 *>(stage_mem) + lane + warp * WSTEP;
    const uint2 *lx = reinterpret_cast<const uint2 *>(stage_mem + XOFF + t * 16 + ((g & 3) >> 1) * 64 + (g & 1) * 8) +
                      (size_t)warp * XSTEP * 2 + col_x;
    const uint8_t *ls = stage_mem + S::SU * S::UNIT_W + g * sstride + warp * S::UNIT_S + col_soff + col_s;
    const float *lxs = reinterpret_cast<const float *>(stage_mem + XSOFF) + (warp * S::GPU + col_gl) * 8 + col_xs_off;
    /* full stage st in slot `slot` (a constant once unrolled) of phase `phase` */
    auto full_stage = [&](const int slot, const uint32_t phase, const int st) {
      mbar_wait(&mbar[slot], phase);
      constexpr int W16 = STAGE / 16, W8 = STAGE / 8, W4 = STAGE / 4;
      const uint4 *wsl = lw + slot * W16;
      const uint2 *xsl2 = lx + slot * W8;
      const uint8_t *ssl = ls + slot * STAGE;
      const float *xssl = lxs + slot * W4;
      stage_pair(wsl, xsl2, ssl, xssl, ck_int<0>());
      stage_pair(wsl, xsl2, ssl, xssl, ck_int<1>());
      __syncthreads(); /* every warp is done with this slot */
      if (threadIdx.x == 0 && st + NST < nstages) {
        fence_proxy_async_smem();
        issue(st + NST, true, true);
      }
    };
    uint32_t phase = 0;
    for (; st_begin + NST <= nfull; st_begin += NST, phase ^= 1u) {
#pragma unroll
      for (int slot = 0; slot < NST; slot++) full_stage(slot, phase, st_begin + slot);
    }
    /* the last full stages, fewer than NST (e.g. the 5th of the 5 full stages of a 5376-wide
     * row with 2 slots), with the same constant addresses instead of the stage loop's
     * per-stage setup */
#pragma unroll
    for (int slot = 0; slot + 1 < NST; slot++) {
      if (st_begin >= nfull) break;
      full_stage(slot, phase, st_begin);
      st_begin++;
    }
  }
  for (int st = st_begin; st < nstages; st++) {
    const int slot = st % NST, u0 = st * S::SU;
    const int nu = nunits - u0 < S::SU ? nunits - u0 : S::SU;
    mbar_wait(&mbar[slot], (uint32_t)((st / NST) & 1));
    const uint8_t *base = stage_mem + slot * STAGE;
    const uint4 *wsm = reinterpret_cast<const uint4 *>(base) + lane + warp * WSTEP;
    const uint8_t *ssm = base + S::SU * S::UNIT_W + g * sstride + warp * S::UNIT_S;
    const uint4 *xu = xrow + (u0 + warp) * XSTEP;
    const float2 *xsu = xs_lane + (u0 + warp) * S::GPU * 4;
    if (COL) {
      /* x and the group sums: the stage's copy (XS; lane (g, t)'s 8 bytes of its unit's x at
       * t·16 + ((g & 3) >> 1)·64 + (g & 1)·8, the same strides as in global memory), or global */
      const uint2 *xc = XS ? reinterpret_cast<const uint2 *>(base + XOFF + t * 16 + ((g & 3) >> 1) * 64 + (g & 1) * 8) +
                                 (size_t)warp * XSTEP * 2
                           : xcol + (size_t)(u0 + warp) * XSTEP * 2;
      const uint8_t *sc = ssm + col_soff;
      const float *xsc = XS ? reinterpret_cast<const float *>(base + XSOFF) + (warp * S::GPU + col_gl) * 8
                            : col_xs + (size_t)(u0 + warp) * S::GPU * 8;
      /* one pair's loads, then its arithmetic; TWO: the second unit is known to exist (a full
       * stage: no selects), else two says whether it does and its reads fall back on the first
       * unit */
      auto pair = [&](auto two_c, bool two_rt) {
        const bool two = decltype(two_c)::value || two_rt;
        const uint4 w0 = wsm[0], w1 = wsm[two ? col_w : 0];
        const uint2 xv = XS ? xc[two ? col_x : 0] : ld_keep2(xc + (two ? col_x : 0));
        uint2 sw = make_uint2(0, 0);
        float xsv = 0.f;
        if (S::AFF) { /* a missing second unit adds no bias term */
          sw = *reinterpret_cast<const uint2 *>(sc + (two ? col_s : 0));
          xsv = (XS ? xsc[two ? col_xs_off : 0] : __ldg(xsc + (two ? col_xs_off : 0))) * (two || t < 2 ? col_bw : 0.f);
        } else {
          sw.x = *reinterpret_cast<const uint32_t *>(sc + (two ? col_s : 0));
        }
        pair_math(w0, w1, xv, sw, xsv, two);
      };
      auto advance = [&]() {
        wsm += 2 * col_w;
        sc += 2 * nw * S::UNIT_S;
        xc += 2 * nw * XSTEP * 2;
        xsc += 2 * nw * S::GPU * 8;
      };
      if (XS && nu == S::SU && nw == 4) {
        /* 4 warps, a full stage: its two pairs per warp unrolled, every offset from the stage's
         * lane pointers a constant (no per-pair address arithmetic or loop) */
        static_assert(S::SU == 16 || !XS, "two pairs of 4 warps per stage");
        const uint2 *xl = xc + col_x;
        const uint8_t *sl = sc + col_s;
        const float *xsl = xsc + col_xs_off;
        stage_pair(wsm, xl, sl, xsl, ck_int<0>());
        stage_pair(wsm, xl, sl, xsl, ck_int<1>());
      } else if (nu == S::SU && S::SU % (2 * nw) == 0) {
        for (int ul = warp; ul < nu; ul += 2 * nw, advance()) pair(ck_bool<true>(), true);
      } else {
        for (int ul = warp; ul < nu; ul += 2 * nw, advance()) pair(ck_bool<false>(), ul + nw < nu);
      }
    } else {
      for (int ul = warp; ul < nu; ul += 2 * nw) {
        UnitRegs<FMT, GS> r0, r1;
#ifdef CK_EMULATION
        r1 = UnitRegs<FMT, GS>{}; /* (the host compiler at -O3 cannot see that r1 is read only when loaded) */
#endif
        const bool two = ul + nw < nu;
        load_unit(r0, wsm, ssm, xu, xsu, xok);
        if (two)
          load_unit(r1, wsm + nw * WSTEP, ssm + nw * S::UNIT_S, xu + nw * XSTEP, xsu + nw * S::GPU * 4, xok);
        compute_unit<FMT, GS, SB_F16>(r0, acc, tot);
        if (two) compute_unit<FMT, GS, SB_F16>(r1, acc2, tot2);
        wsm += 2 * nw * WSTEP;
        ssm += 2 * nw * S::UNIT_S;
        xu += 2 * nw * XSTEP;
        xsu += 2 * nw * S::GPU * 4;
      }
    }
    __syncthreads(); /* every warp is done with this slot */
    if (threadIdx.x == 0 && st + NST < nstages) {
      fence_proxy_async_smem();
      issue(st + NST, true, true);
    }
  }
  if (!S::POST) {
#pragma unroll
    for (int i = 0; i < 4; i++) tot[i] = acc[i] + acc2[i];
  } else {
#pragma unroll
    for (int i = 0; i < 4; i++) tot[i] += tot2[i];
  }
  if (COL) { /* the lane's two columns, then the four lanes of a row: row g in tot[0], g+8 in tot[2] */
    float rg = tot[0] + tot[1], r8 = tot[2] + tot[3];
    rg += __shfl_xor_sync(0xffffffffu, rg, 1);
    r8 += __shfl_xor_sync(0xffffffffu, r8, 1);
    rg += __shfl_xor_sync(0xffffffffu, rg, 2);
    r8 += __shfl_xor_sync(0xffffffffu, r8, 2);
    tot[0] = rg;
    tot[2] = r8;
    tot[1] = tot[3] = 0.f;
  }

  /* lane (g, t) holds rows (g, g+8) × columns (2t, 2t+1); sum the warps' partials (in the
   * stage memory: every stage has been consumed behind the loop's last barrier). */
  float(*red)[32][4] = reinterpret_cast<float(*)[32][4]>(stage_mem);
  __shared__ float fin[16]; /* the GeGLU epilogue's tile outputs */
#pragma unroll
  for (int i = 0; i < 4; i++) red[warp][lane][i] = tot[i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < 128; idx += blockDim.x) {
    int rl = idx >> 3, col = idx & 7;
    int src = (rl & 7) * 4 + (col >> 1), slot = ((rl >> 3) << 1) | (col & 1);
    float s = 0.f;
    if (nw == 4) { /* the decoder's blocks: the same sums, no loop */
#pragma unroll
      for (int w = 0; w < 4; w++) s += red[w][src][slot];
    } else {
      for (int w = 0; w < nw; w++) s += red[w][src][slot];
    }
    int64_t row = tile * 16 + rl;
    /* undo x's 2^e, and for nvfp4 the decode's 2^-14 and the scales' 2^10 */
    constexpr int YSH = FMT == CK_NVFP4 ? 14 - CK_NV_SCALE_LOG2 : 0;
    if (p.act) {
      if (col == 0) fin[rl] = ck_scale_pow2(s, YSH - p.xexp[0]);
    } else if (col < p.nb && row < p.rows) {
      p.y[(int64_t)ks * p.kstride + (int64_t)col * p.ldy + row] = ck_scale_pow2(s, YSH - p.xexp[col]);
    }
  }
  if (p.act) { /* the GeGLU epilogue: the float32 products as dk_geglu reads them from y */
    __syncthreads();
    if (threadIdx.x < 8) {
      const int64_t i = tile * 8 + threadIdx.x;
      float m = 0.0f;
      if (i < p.acts) {
        const uint16_t o = ck_geglu(fin[threadIdx.x], fin[threadIdx.x + 8]);
        p.act[i] = o;
        m = fabsf(ck_bf16_to_f32(o)); /* (NaN: fmaxf below skips it, as geglu's block max does) */
      }
      for (int o = 4; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffu, m, o));
      if (threadIdx.x == 0 && m > 0.0f)
        atomicMax(reinterpret_cast<unsigned *>(p.amax + tile * 8 / p.apblock), __float_as_uint(m));
    }
  }
}

/* ---- launchers ------------------------------------------------------------------------- */
typedef void (*qmv_fn)(QmvArgs);

template <int FMT, int GS>
static constexpr int stage_smem() { return Shape<FMT, GS>::STAGE; }

/* The one-row kernels (nvfp4, affine 4-bit g32/g64) take x staged with the weights. */
static bool one_row_col(const ck_layout *L, int nb) {
  return nb == 1 && (L->fmt == CK_NVFP4 || (L->fmt == CK_AFF4 && L->group_size <= 64));
}
static bool xs_for(const ck_layout *L, int nb) { return one_row_col(L, nb); }

/* Bytes of one stage of the kernels pick() returns; the dynamic shared memory is the stage
 * count times this (≥ 8 KB: it also holds the reduction). */
static int smem_for(const ck_layout *L, int nb) {
  if (xs_for(L, nb))
    return L->fmt == CK_NVFP4 ? Shape<CK_NVFP4, 16>::STAGE_XS
                              : L->group_size == 32 ? Shape<CK_AFF4, 32>::STAGE_XS : Shape<CK_AFF4, 64>::STAGE_XS;
  switch (L->fmt) {
  case CK_AFF4: return L->group_size == 32 ? stage_smem<CK_AFF4, 32>() : L->group_size == 64 ? stage_smem<CK_AFF4, 64>() : stage_smem<CK_AFF4, 128>();
  case CK_AFF8: return L->group_size == 32 ? stage_smem<CK_AFF8, 32>() : L->group_size == 64 ? stage_smem<CK_AFF8, 64>() : stage_smem<CK_AFF8, 128>();
  case CK_NVFP4: return stage_smem<CK_NVFP4, 16>();
  case CK_MXFP4: return stage_smem<CK_MXFP4, 32>();
  case CK_MXFP8: return stage_smem<CK_MXFP8, 32>();
  case CK_DBF16: return stage_smem<CK_DBF16, 0>();
  default: return stage_smem<CK_DF16, 0>();
  }
}

/* COL (one activation row) for affine 4-bit with groups of 32 and 64 (units of 64 k), with x
 * staged (xs) or read from global memory. */
template <int FMT, int NST>
static qmv_fn pick_affine(int gs, bool f16, int nb, bool xs) {
  constexpr int C4 = FMT == CK_AFF4;
  if (C4 && nb == 1 && gs == 32)
    return xs ? (f16 ? qmv_tc_kernel<FMT, 32, true, NST, C4, C4> : qmv_tc_kernel<FMT, 32, false, NST, C4, C4>)
              : (f16 ? qmv_tc_kernel<FMT, 32, true, NST, C4> : qmv_tc_kernel<FMT, 32, false, NST, C4>);
  if (C4 && nb == 1 && gs == 64)
    return xs ? (f16 ? qmv_tc_kernel<FMT, 64, true, NST, C4, C4> : qmv_tc_kernel<FMT, 64, false, NST, C4, C4>)
              : (f16 ? qmv_tc_kernel<FMT, 64, true, NST, C4> : qmv_tc_kernel<FMT, 64, false, NST, C4>);
  switch (gs) {
  case 32: return f16 ? qmv_tc_kernel<FMT, 32, true, NST> : qmv_tc_kernel<FMT, 32, false, NST>;
  case 64: return f16 ? qmv_tc_kernel<FMT, 64, true, NST> : qmv_tc_kernel<FMT, 64, false, NST>;
  case 128: return f16 ? qmv_tc_kernel<FMT, 128, true, NST> : qmv_tc_kernel<FMT, 128, false, NST>;
  }
  return nullptr;
}

template <int NST>
static qmv_fn pick_ns(const ck_layout *L, int nb) {
  bool f16 = L->scales_dtype == CKT_F16, xs = xs_for(L, nb);
  switch (L->fmt) {
  case CK_AFF4: return pick_affine<CK_AFF4, NST>(L->group_size, f16, nb, xs);
  case CK_AFF8: return pick_affine<CK_AFF8, NST>(L->group_size, f16, nb, false);
  case CK_NVFP4:
    return nb != 1 ? qmv_tc_kernel<CK_NVFP4, 16, false, NST>
           : xs    ? qmv_tc_kernel<CK_NVFP4, 16, false, NST, 1, true>
                   : qmv_tc_kernel<CK_NVFP4, 16, false, NST, 1>;
  case CK_MXFP4: return qmv_tc_kernel<CK_MXFP4, 32, false, NST>;
  case CK_MXFP8: return qmv_tc_kernel<CK_MXFP8, 32, false, NST>;
  case CK_DBF16: return qmv_tc_kernel<CK_DBF16, 0, false, NST>;
  case CK_DF16: return qmv_tc_kernel<CK_DF16, 0, false, NST>;
  }
  return nullptr;
}

/* Stages in flight per block (tuning.h): QMV_STAGES_ONE_ROW for the one-row kernels, 3 for
 * nvfp4's batch kernel, 4 otherwise. */
static int stages_for(const ck_layout *L, int nb) {
  return one_row_col(L, nb) ? QMV_STAGES_ONE_ROW : L->fmt == CK_NVFP4 ? QMV_STAGES_NVFP4_BATCH : QMV_STAGES_OTHER;
}

/* nb: activation rows */
static qmv_fn pick(const ck_layout *L, int nb) {
  const int n = stages_for(L, nb);
  return n == 2 ? pick_ns<2>(L, nb) : n == 3 ? pick_ns<3>(L, nb) : pick_ns<4>(L, nb);
}

extern "C" int ck_unit_k(int fmt, int group_size) { return ck_unit_k_c(fmt, group_size); }

extern "C" size_t ck_rep_w_bytes(const ck_layout *L) {
  return (size_t)L->tiles * (size_t)(L->cols / ck_chunk_k(L->fmt)) * 512;
}

extern "C" size_t ck_rep_s_bytes(const ck_layout *L) {
  if (L->fmt == CK_AFF4 || L->fmt == CK_AFF8)
    return (size_t)L->tiles * (size_t)(L->cols / L->group_size) * 64;
  return (size_t)L->tiles * (size_t)L->nunits * 8 * ck_fp_scale_bytes(L->fmt);
}

extern "C" int64_t ck_xp_cols(const ck_layout *L) {
  int uk = ck_unit_k_c(L->fmt, L->group_size);
  return (L->cols + uk - 1) / uk * uk;
}

/* Warps per tile: the block size whose resident blocks cover the tiles in the fullest waves
 * (a partial last wave of long blocks is what costs most on shapes of ~1000 tiles); ties go
 * to 4 warps for many waves and 8 otherwise, the best measured on the H200. Occupancy comes from the runtime, once per
 * kernel and size, memoised under a lock (decoders in several threads share the memo). */
static std::mutex memo_lock;
static int occupancy(qmv_fn fn, int w, int smem) {
  static struct { qmv_fn fn; int w, smem, per_sm; } memo[64];
  static int nmemo;
  std::lock_guard<std::mutex> hold(memo_lock);
  for (int i = 0; i < nmemo; i++)
    if (memo[i].fn == fn && memo[i].w == w && memo[i].smem == smem) return memo[i].per_sm;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, w * 32, smem) != cudaSuccess) {
    cudaGetLastError();
    per_sm = 0;
  }
  if (nmemo < 64) memo[nmemo++] = {fn, w, smem, per_sm};
  return per_sm;
}

/* Lets fn take smem bytes of dynamic shared memory (beyond the default 48 KB), once per
 * kernel and size (under the memo's lock). */
static cudaError_t allow_smem(qmv_fn fn, int smem) {
  static struct { qmv_fn fn; int smem; } done[32];
  static int ndone;
  std::lock_guard<std::mutex> hold(memo_lock);
  for (int i = 0; i < ndone; i++)
    if (done[i].fn == fn && done[i].smem >= smem) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess && ndone < 32) done[ndone++] = {fn, smem};
  return e;
}

/* Warps per tile of the kernels other than the one-row ones (those take 4: on the H200, 4 beat
 * 8 on every 31B shape with x staged, +1 % tg128). */
static int warps_for(const ck_layout *L, qmv_fn fn, int smem, int ksplit) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) sms = 132;
  /* measured in the decoder on the H200 (31B shapes): 4 warps per tile win from ~2000 tiles
   * up (gate|up 43008×5376: 53 vs 70 us at 8), 8 below (q|k|v 16384 rows: 30 vs 33 us) */
  if (L->tiles * ksplit >= 2048 && occupancy(fn, 4, smem) >= 1) return 4;
  int best = 8;
  double best_score = -1;
  /* 16 warps per tile measured slowest on every shape, and its occupancy-based
   * score can still win when few registers are used (the nvfp4 COL kernel: 40 vs 28 us on
   * 21504×5376): 4 or 8 only */
  for (int w = 4; w <= 8; w *= 2) {
    if (w > 4 && w > L->nunits / ksplit) break;
    int per_sm = occupancy(fn, w, smem);
    if (per_sm < 1) continue;
    /* one round: balance over SMs; several: fullness of the last wave */
    double slots = (double)per_sm * sms, waves = (double)(L->tiles * ksplit) / slots;
    double per = (double)(L->tiles * ksplit) / sms;
    double eff = waves <= 1.0 ? per / ceil(per) : waves / ceil(waves);
    /* measured on the H200: 4 warps when the tiles make many waves (lm_head), else 8 */
    double pref = waves > 8.0 ? 4.0 : 8.0;
    double score = eff - 0.02 * fabs(log2((double)w / pref));
    if (score > best_score) {
      best_score = score;
      best = w;
    }
  }
  return best;
}

/* The arguments every launch sets: slab `slab`'s weights, x's prep, the outputs. */
static QmvArgs base_args(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs, const int *xexp, int nb,
                         float *y, int64_t ldy) {
  QmvArgs a = {};
  a.w = (const uint4 *)((const char *)L->w + (size_t)slab * L->w_slab);
  a.s = (const char *)L->s + (size_t)slab * L->s_slab;
  a.xp = (const uint4 *)xp;
  a.xs = xs;
  a.xexp = xexp;
  a.y = y;
  a.rows = L->rows;
  a.ldy = ldy;
  a.nunits = (int)L->nunits;
  a.nslices = L->cols / 32;
  a.nb = nb;
  return a;
}

/* The one-row nvfp4 kernel with one stage (one_row_stages). */
static qmv_fn one_stage_kernel(const ck_layout *L, int nb) {
  return L->fmt == CK_NVFP4 && one_row_col(L, nb) ? qmv_tc_kernel<CK_NVFP4, 16, false, 1, 1, true, false> : nullptr;
}

/* The kernel for nst (1 to 4) stages, or NULL where that count has none. */
static qmv_fn pick_stages(const ck_layout *L, int nb, int nst) {
  switch (nst) {
  case 1: return one_stage_kernel(L, nb);
  case 2: return pick_ns<2>(L, nb);
  case 3: return pick_ns<3>(L, nb);
  case 4: return pick_ns<4>(L, nb);
  }
  return nullptr;
}

/* Resident slots on the device for the kernel of nst stages (0 when unknown). */
static int64_t stage_slots(const ck_layout *L, int nb, int nst) {
  qmv_fn fn = pick_stages(L, nb, nst);
  int sms = 0;
  if (!fn || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return 0;
  const int smem = nst * smem_for(L, nb);
  if (smem > 48 * 1024 && allow_smem(fn, smem) != cudaSuccess) return 0;
  return (int64_t)occupancy(fn, 4, smem) * sms;
}

/* Stages per block of a one-row launch of `blocks` blocks (tuning.h, QMV_STAGES_ONE_ROW): the
 * default count, or one (nvfp4) where the grid then fits one wave of resident blocks and would
 * not with the default — a second wave of a few blocks costs a block's whole latency. */
static int one_row_stages(const ck_layout *L, int nb, int64_t blocks) {
  const int def = QMV_STAGES_ONE_ROW;
  if (!one_stage_kernel(L, nb) || blocks <= stage_slots(L, nb, def)) return def;
  return blocks <= stage_slots(L, nb, 1) ? 1 : def;
}

/* The launch of ck_qmv_split and ck_qmv_geglu (act: the GeGLU epilogue's outputs, or NULL);
 * nst: stages per block (0: the launcher's choice). */
static int qmv_launch(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs, const int *xexp, int nb,
                      float *y, int64_t ldy, int ksplit, int64_t kstride, uint16_t *act, float *amax, int apblock,
                      int nst, void *stream) {
  if (ksplit < 1 || ksplit > L->nunits || nst < 0 || nst > 4) return (int)cudaErrorInvalidValue;
  if (!nst) nst = one_row_col(L, nb) ? one_row_stages(L, nb, L->tiles * ksplit) : stages_for(L, nb);
  qmv_fn fn = pick_stages(L, nb, nst);
  if (!fn) return (int)cudaErrorInvalidValue;
  QmvArgs a = base_args(L, slab, xp, xs, xexp, nb, y, ldy);
  a.early = nst < QMV_EARLY_STAGES ? nst : QMV_EARLY_STAGES;
  a.ksplit = ksplit;
  a.kstride = kstride;
  a.act = act;
  a.amax = amax;
  a.acts = L->rows / 2;
  a.apblock = apblock;
  int smem = nst * smem_for(L, nb);
  if (smem > 48 * 1024) { /* 4 stages of affine 4-bit g32 with x staged: 52 KB */
    cudaError_t e = allow_smem(fn, smem);
    if (e) return (int)e;
  }
  int warps = one_row_col(L, nb) ? 4 : warps_for(L, fn, smem, ksplit);
  return (int)ck_launch(fn, dim3((unsigned)L->tiles, (unsigned)ksplit), warps * 32, smem, (cudaStream_t)stream, a);
}

/* The expert-mode kernels (EXP): the kernels pick() returns for nb rows, at the stage counts
 * stages_for gives. */
template <int FMT, int GS, int NST, int COL = 0, bool XS = false>
static qmv_fn exp_k(bool f16) {
  return f16 ? qmv_tc_kernel<FMT, GS, true, NST, COL, XS, true> : qmv_tc_kernel<FMT, GS, false, NST, COL, XS, true>;
}
template <int FMT>
static qmv_fn exp_affine(int gs, bool f16) {
  return gs == 32 ? exp_k<FMT, 32, QMV_STAGES_OTHER>(f16)
         : gs == 64 ? exp_k<FMT, 64, QMV_STAGES_OTHER>(f16)
                    : exp_k<FMT, 128, QMV_STAGES_OTHER>(f16);
}
static qmv_fn pick_exp(const ck_layout *L, int nb) {
  const bool f16 = L->scales_dtype == CKT_F16;
  constexpr int N1 = QMV_STAGES_ONE_ROW;
  if (one_row_col(L, nb))
    return L->fmt == CK_NVFP4       ? qmv_tc_kernel<CK_NVFP4, 16, false, N1, 1, true, true>
           : L->group_size == 32 ? exp_k<CK_AFF4, 32, N1, 1, true>(f16)
                                 : exp_k<CK_AFF4, 64, N1, 1, true>(f16);
  switch (L->fmt) {
  case CK_NVFP4: return qmv_tc_kernel<CK_NVFP4, 16, false, QMV_STAGES_NVFP4_BATCH, 0, false, true>;
  case CK_AFF4: return exp_affine<CK_AFF4>(L->group_size, f16);
  case CK_AFF8: return exp_affine<CK_AFF8>(L->group_size, f16);
  case CK_MXFP4: return qmv_tc_kernel<CK_MXFP4, 32, false, QMV_STAGES_OTHER, 0, false, true>;
  case CK_MXFP8: return qmv_tc_kernel<CK_MXFP8, 32, false, QMV_STAGES_OTHER, 0, false, true>;
  case CK_DBF16: return qmv_tc_kernel<CK_DBF16, 0, false, QMV_STAGES_OTHER, 0, false, true>;
  case CK_DF16: return qmv_tc_kernel<CK_DF16, 0, false, QMV_STAGES_OTHER, 0, false, true>;
  }
  return nullptr;
}

static int exp_launch(const ck_layout *L, const int *zslab, int nz, const uint16_t *xp, const float *xs,
                      const int *xexp, int nb, int xper, float *y, int64_t ldy, int64_t zy, int ids_ready, uint16_t *act,
                      float *amax, int apblock, int64_t amax_z, void *stream, int zfast = 0, int ksplit = 1,
                      int64_t kstride = 0) {
  qmv_fn fn = L->fmt == CK_GENERIC ? nullptr : pick_exp(L, nb);
  if (!fn || nz < 1 || nb < 1 || nb > 8 || L->cols % 32 || (zfast && L->tiles > 65535) || ksplit < 1 ||
      ksplit > L->nunits || ksplit > 65535)
    return (int)cudaErrorInvalidValue;
  QmvArgs a = base_args(L, 0, xp, xs, xexp, nb, y, ldy);
  a.early = ids_ready ? QMV_EARLY_STAGES : 0;
  a.ksplit = ksplit;
  a.kstride = kstride;
  a.zslab = zslab;
  a.w_slab = L->w_slab;
  a.s_slab = L->s_slab;
  a.zy = zy;
  a.xper = xper;
  a.act = act;
  a.amax = amax;
  a.acts = L->rows / 2;
  a.apblock = apblock;
  a.amax_z = amax_z;
  a.zfast = zfast;
  const int smem = stages_for(L, nb) * smem_for(L, nb);
  if (smem > 48 * 1024) {
    cudaError_t e = allow_smem(fn, smem);
    if (e) return (int)e;
  }
  const dim3 grid = zfast ? dim3((unsigned)nz, (unsigned)ksplit, (unsigned)L->tiles)
                          : dim3((unsigned)L->tiles, (unsigned)ksplit, (unsigned)nz);
  return (int)ck_launch(fn, grid, 4 * 32, smem, (cudaStream_t)stream, a);
}

extern "C" int ck_qmv_rows(const ck_layout *L, const int *zero, int nz, int nb, const uint16_t *xp, const float *xs,
                           const int *xexp, float *y, int64_t ldy, int ksplit, int64_t kstride, void *stream) {
  if (nb < 2) return (int)cudaErrorInvalidValue; /* (one row would take the one-row kernel) */
  if (ksplit > 1 && kstride < (int64_t)nz * nb * ldy) return (int)cudaErrorInvalidValue; /* splits overlapping rows */
  return exp_launch(L, zero, nz, xp, xs, xexp, nb, 1, y, ldy, nb * ldy, 1, NULL, NULL, 0, 0, stream, 1, ksplit,
                    kstride);
}

/* The batch kernel's blocks are a tile's whole k range each: on a product of few tiles (o and
 * down of the 31B: 336 tiles on 132 SMs) they leave most of the resident slots empty and the
 * weight stream short of requests in flight. The k range is split until the blocks fill the
 * resident slots of one wave, each split at least QMV_ROWS_SPLIT_UNITS units long, at most
 * QMV_ROWS_MAX_SPLITS splits. */
extern "C" int ck_qmv_rows_splits(const ck_layout *L, int nb, int nz, int sms) {
  if (L->fmt == CK_GENERIC || nb < 2 || nb > 8 || nz < 1 || sms < 1) return 1;
  qmv_fn fn = pick_exp(L, nb);
  const int smem = stages_for(L, nb) * smem_for(L, nb);
  if (!fn || (smem > 48 * 1024 && allow_smem(fn, smem) != cudaSuccess)) return 1;
  const int64_t slots = (int64_t)occupancy(fn, 4, smem) * sms, blocks = L->tiles * nz;
  int ks = 1;
  while (ks < QMV_ROWS_MAX_SPLITS && blocks * (ks + 1) <= slots && L->nunits / (ks + 1) >= QMV_ROWS_SPLIT_UNITS) ks++;
  return ks;
}

extern "C" int ck_qmv_experts(const ck_layout *L, const int *zslab, int nz, const uint16_t *xp, const float *xs,
                              const int *xexp, int nb, int xper, float *y, int64_t ldy, int64_t zy, int ids_ready,
                              void *stream) {
  return exp_launch(L, zslab, nz, xp, xs, xexp, nb, xper, y, ldy, zy, ids_ready, NULL, NULL, 0, 0, stream);
}

extern "C" int ck_qmv_experts_geglu(const ck_layout *L, const int *zslab, int nz, const uint16_t *xp, const float *xs,
                                    const int *xexp, uint16_t *act, float *amax, int apblock, int64_t amax_z,
                                    int ids_ready, void *stream) {
  if (L->rows % 16 || !act || !amax || apblock < 8 || apblock % 8) return (int)cudaErrorInvalidValue;
  return exp_launch(L, zslab, nz, xp, xs, xexp, 1, 0, NULL, L->rows, 0, ids_ready, act, amax, apblock, amax_z, stream);
}

extern "C" int ck_qmv_occupancy(const ck_layout *L, int nb, int *sms) {
  qmv_fn fn = pick(L, nb);
  if (!fn || cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return 0;
  const int smem = stages_for(L, nb) * smem_for(L, nb);
  if (smem > 48 * 1024 && allow_smem(fn, smem) != cudaSuccess) return 0;
  const int warps = one_row_col(L, nb) ? 4 : warps_for(L, fn, smem, 1);
  return occupancy(fn, warps, smem);
}

extern "C" int ck_qmv_split(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs,
                            const int *xexp, int nb, float *y, int64_t ldy, int ksplit, int64_t kstride,
                            void *stream) {
  return qmv_launch(L, slab, xp, xs, xexp, nb, y, ldy, ksplit, kstride, NULL, NULL, 0, 0, stream);
}

extern "C" int ck_qmv_split_stages(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs,
                                   const int *xexp, int nb, float *y, int64_t ldy, int ksplit, int64_t kstride,
                                   int stages, void *stream) {
  return qmv_launch(L, slab, xp, xs, xexp, nb, y, ldy, ksplit, kstride, NULL, NULL, 0, stages, stream);
}

extern "C" int ck_qmv_geglu(const ck_layout *L, const uint16_t *xp, const float *xs, const int *xexp, uint16_t *act,
                            float *amax, int apblock, void *stream) {
  if (L->fmt == CK_GENERIC || L->rows % 16 || !act || !amax || apblock < 8 || apblock % 8)
    return (int)cudaErrorInvalidValue;
  return qmv_launch(L, 0, xp, xs, xexp, 1, NULL, L->rows, 1, 0, act, amax, apblock, 0, stream);
}

extern "C" int ck_qmv_fast(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs,
                           const int *xexp, int nb, float *y, int64_t ldy, void *stream) {
  return ck_qmv_split(L, slab, xp, xs, xexp, nb, y, ldy, 1, 0, stream);
}

/* ---- bandwidth reference --------------------------------------------------------------- */
#ifndef CK_EMULATION
__global__ void read_bw_kernel(const uint4 *p, size_t n, unsigned *sink) {
  uint32_t acc = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v0 = ld_stream(p + i), v1 = ld_stream(p + i + stride);
    uint4 v2 = ld_stream(p + i + 2 * stride), v3 = ld_stream(p + i + 3 * stride);
    acc ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    acc ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n; i += stride) {
    uint4 v = ld_stream(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicXor(sink, acc); /* practically never: keeps the loads alive */
}

extern "C" int ck_read_bw(const void *buf, size_t nbytes, unsigned *sink, int sms, void *stream) {
  read_bw_kernel<<<sms * 4, 512, 0, (cudaStream_t)stream>>>((const uint4 *)buf, nbytes / 16, sink);
  return (int)cudaGetLastError();
}
#endif

CK_TIMELINE_SETTER(ck_tl_qmv)
