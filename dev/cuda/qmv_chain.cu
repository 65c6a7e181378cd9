/* A chain of dependent one-row nvfp4 mat-vecs in one resident grid (qmv_chain.h says what and
 * why). The block's share of a step is a contiguous range of its pieces (16-row tiles, or
 * parts of them: chain_split), so its bytes are contiguous in the tile layout (repack.cu) and
 * the producers stream them as one run of stages; consecutive steps' runs follow each other in
 * the ring. The consumers take the stage's unit pairs round-robin over the whole step (a warp's
 * pair index continues across stages and pieces, so no warp idles while others finish one),
 * keep a piece's sums in registers and leave them in shared memory when it ends; after the
 * step, the block adds each row's partial sums in warp order, writes y and the next prep (or
 * the piece's sums, for the tile's last block to add), and arrives at the grid barrier. A norm
 * step's input is made in one or two more barrier rounds (chain_norm_sum, chain_norm_x), each block
 * its slice. The pair's arithmetic is
 * the one-launch kernel's (qmv_tc.cu, COL): the same fragments, one mma column per scale
 * group, the scales applied to float sums. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "prep_store.cuh"
#include "qmv_chain.h"
#include "qmv_tc.cuh"

#define CH_MAX_STAGES 32
#define CH_MAX_PRODUCERS 4
#define CH_MAX_PIECES 64
/* the dynamic shared memory's header: full and empty mbarriers, last, pend, red (the kernel) */
#define CH_HDR 1536
/* a wait that never ends (a bug) traps after CH_SPINS rounds instead of hanging the device
 * (~4 s; the host emulation, ~1000 times slower, relies on its own mbarrier timeout) */
#ifdef CK_EMULATION
#define CH_TRAP() abort()
#define CH_SPINS (1ll << 40)
#else
#define CH_TRAP() asm volatile("trap;")
#define CH_SPINS (1ll << 22)
#endif

typedef Shape<CK_NVFP4, 16> ChS; /* 16 units of 16 rows × 64 k per stage: 8 KB of codes, 1 KB of scales */

struct ChainArgs {
  const ck_chain_step *steps;
  int nsteps, nst, xbytes, ptiles, e;
  int producers; /* producer warps: warp NCW + r issues the stages k with k % producers == r */
  int mode; /* ck_chain_run's */
  unsigned *bar;
  unsigned *count; /* per tile: the pieces done (split steps), back to 0 by the tile's last block */
  float *psum;     /* per piece: its 16 rows' sums (split steps) */
  float *nss;      /* per block: its slice's sum of squares (norm steps) */
  float *tss;      /* per tile of the step before a fused norm: its rows' sum of h² */
  /* (ck_chain_set_stamps; NULL: none) per round r < nstamp: stamps[r·G + b] block b's arrival,
   * stamps[nstamp·G + r] when block 0 saw round r complete (%globaltimer, ns); per step
   * p < nstamp, from stamps + (nstamp + 1)·G: [p·G + b] the cycles block b's first producer
   * waited for free slots, then [(nstamp + p)·G + b] its first consumer warp for full ones */
  unsigned long long *stamps;
  int nstamp;
};

__device__ __forceinline__ long long ch_clock() {
#ifdef CK_EMULATION
  return 0;
#else
  return clock64();
#endif
}

/* (each with its host emulation, tests/gpu/emu: chain_emulate runs the kernel on host threads;
 * mbar_arrive is qmv_tc.cuh's) */
/* the consumer warps' own barrier (the producer warp never joins it) */
__device__ __forceinline__ void consumers_sync(int nthreads) {
#ifdef CK_EMULATION
  (void)nthreads;
  pthread_barrier_wait(&emu_blk->named);
#else
  asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
#endif
}
__device__ __forceinline__ void red_release_add(unsigned *p, unsigned v) {
#ifdef CK_EMULATION
  __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
#else
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
  unsigned v;
#ifdef CK_EMULATION
  v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
  return v;
}

/* Units 2q and 2q+1 (two: the second exists) of a stage whose first unit is unit u0 of the
 * row; x (the whole row's prep) at xsm: in shared memory, or (XG) in global memory, read
 * through the L2 (other blocks wrote it during this launch: an L1 copy could be stale).
 * Lane (g, t) gives column g's x — mma g & 3 of unit 2q + g / 4 — and scales its columns 2t,
 * 2t+1 (unit 2q + t / 2). */
template <bool XG, bool ACC2 = false>
__device__ __forceinline__ void chain_pair(const uint8_t *stage, const uint8_t *xsm, int u0, int q, bool two,
                                           int lane, const uint32_t (&colsel)[8], uint32_t nv_e, float (&tot)[4]) {
  const int g = lane >> 2, t = lane & 3;
  const uint4 *wsm = reinterpret_cast<const uint4 *>(stage) + lane + 2 * q * 32;
  const uint4 w0 = wsm[0], w1 = wsm[two ? 32 : 0];
  const int ux = 2 * q + (two ? g >> 2 : 0), us = 2 * q + (two ? t >> 1 : 0);
  const uint2 *xp = reinterpret_cast<const uint2 *>(xsm + (size_t)(u0 + ux) * 128 + ((g & 3) >> 1) * 64 + t * 16 + (g & 1) * 8);
  const uint2 xv = XG ? __ldcg(xp) : *xp;
  const uint32_t sw =
      *reinterpret_cast<const uint32_t *>(stage + ChS::SU * ChS::UNIT_W + us * ChS::UNIT_S + g * 8 + (t & 1) * 4);
  const uint32_t wd0[4] = {w0.x, w0.y, w0.z, w0.w}, wd1[4] = {w1.x, w1.y, w1.z, w1.w};
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  col_unit_mmas<CK_NVFP4>(d, wd0, xv, colsel);
  if (ACC2) { /* (mode 1024) the second unit on its own accumulator: two chains of 4 mmas instead
               * of one of 8; a lane's columns come from one unit only, so d + d2 adds exact
               * zeros — the same bits */
    float d2[4] = {0.f, 0.f, 0.f, 0.f};
    if (two) col_unit_mmas<CK_NVFP4>(d2, wd1, xv, colsel + 4);
#pragma unroll
    for (int i = 0; i < 4; i++) d[i] += d2[i];
  } else if (two) {
    col_unit_mmas<CK_NVFP4>(d, wd1, xv, colsel + 4);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) tot[i] = fmaf(d[i], nv_scale(sw, i, nv_e), tot[i]);
}

/* A step's work comes in pieces: piece i is part i % split of tile i / split, covering the
 * tile's stages [nst·part/split, nst·(part+1)/split). Products with few tiles (o, down: 336
 * of them against 132 SMs, 2 or 3 per block) are split so every block gets about as much;
 * the last block to finish a tile's pieces adds their sums, in part order. */
__device__ __forceinline__ float chain_balance(int64_t n, int G) {
  const float per = (float)n / (float)G;
  return per / ceilf(per);
}
__device__ __forceinline__ int chain_split(const ck_chain_step &st, int G, int mode) {
  if ((mode & 16) || st.tiles >= 4 * G) return 1;
  const int nstt = (st.nunits + ChS::SU - 1) / ChS::SU;
  int best = 1;
  float score = chain_balance(st.tiles, G);
  for (int sp = 2; sp <= 4 && sp <= nstt; sp++) {
    const float sc = chain_balance((int64_t)st.tiles * sp, G);
    if (sc > score + 0.02f) best = sp, score = sc;
  }
  return best;
}
__device__ __forceinline__ void piece_stages(const ck_chain_step &st, int split, int i, int &tile, int &s0, int &s1) {
  const int nstt = (st.nunits + ChS::SU - 1) / ChS::SU, part = i % split;
  tile = i / split;
  s0 = nstt * part / split;
  s1 = nstt * (part + 1) / split;
}
/* mbar_wait's test without the wait */
__device__ __forceinline__ bool mbar_test(uint64_t *m, uint32_t phase) {
#ifdef CK_EMULATION
  return emu_mbar_test(m, phase);
#else
  uint32_t done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done)
               : "r"(smem_addr(m)), "r"(phase)
               : "memory");
  return done != 0;
#endif
}

/* Where the consumers find x (XM): 0 a copy of the row in shared memory made at each step's
 * start, 1 global memory through the L2 per pair, 2 the stage itself — the producer adds each
 * stage's x part (its units' 2 KB of the prep) once the step's grid barrier has opened. */
template <int XM>
struct ChX {
  static constexpr int STRIDE = XM == 2 ? ChS::STAGE_XS : ChS::STAGE; /* bytes per ring slot */
};

/* The producer of the staged-x form (XM 2, one producer warp): stage k's weights as soon as its
 * slot is free, its x part once its step's input exists (the grid barrier has counted the
 * rounds before it); while it waits for a slot it issues the x parts that have become possible
 * (the consumers of those stages are what frees slots). */
struct ChXProducer {
  const ChainArgs *a;
  uint8_t *ring;
  uint64_t *full;
  int *pneed, *pstep, *pu0, *pnu; /* per slot: the pending stage's rounds, step, first unit, units */
  int kh = 0, hslot = 0;  /* the oldest stage whose x part is not issued, and its slot */
  unsigned seen = 0;      /* the grid barrier's count as last read */
  int G = 1;
  __device__ bool ready(int need) {
    if ((unsigned)(G * need) <= seen) return true;
    seen = ld_acquire(a->bar);
    if ((unsigned)(G * need) > seen) return false;
#ifndef CK_EMULATION
    asm volatile("fence.proxy.async.global;" ::: "memory"); /* other blocks' stores, then our bulk reads */
#endif
    return true;
  }
  __device__ void flush(int k) {
    while (kh < k) {
      if (pnu[hslot]) {
        if (!ready(pneed[hslot])) break;
        const uint8_t *xp = (const uint8_t *)a->steps[pstep[hslot]].xp;
        bulk_copy(ring + (size_t)hslot * ChS::STAGE_XS + ChS::STAGE, xp + (size_t)pu0[hslot] * 128,
                  (uint32_t)(pnu[hslot] * 128), &full[hslot]);
      }
      kh++;
      if (++hslot == a->nst) hslot = 0;
    }
  }
};

/* A norm step's input, in two barrier rounds. First (chain_norm_sum) each block takes its
 * slice of h = hin + yprev: writes it to hout and its sum of squares to nss[b]. Then
 * (chain_norm_x) every block adds the G partial sums alike (the same order everywhere, so the
 * same r in every block) and writes its slice of x = bf16(h · r · nw) as the step's prep xp.
 * (Every block making the whole row from hin and yprev instead read 43 KB per block per pass
 * through the L2 — ~8 µs per norm with 528 blocks, session 14.) Float4 slices; thread tid of
 * the block takes the same indices in both rounds, so it reads back its own h. */
__device__ __forceinline__ void norm_slice(const ck_chain_step &st, int G, int b, int &h0, int &h1) {
  const int K4 = st.nunits * 16;
  h0 = (int)((int64_t)K4 * b / G);
  h1 = (int)((int64_t)K4 * (b + 1) / G);
}
/* the block's sum of the nct threads' v, the warps' sums in order (all threads get it) */
__device__ __forceinline__ float consumers_sum(float v, float *red, int nct) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  consumers_sync(nct);
  float tot = 0.f;
  for (int w = 0; w < nct / 32; w++) tot += red[w];
  return tot;
}
__device__ __forceinline__ void chain_norm_sum(const ck_chain_step &st, const ChainArgs &a, float *red, int nct, int G, int b) {
  int h0, h1;
  norm_slice(st, G, b, h0, h1);
  float ss = 0.f;
  for (int i = h0 + (int)threadIdx.x; i < h1; i += nct) {
    const float4 u = __ldcg(reinterpret_cast<const float4 *>(st.hin) + i), v = __ldcg(reinterpret_cast<const float4 *>(st.yprev) + i);
    const float4 h = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
    reinterpret_cast<float4 *>(st.hout)[i] = h;
    ss = fmaf(h.w, h.w, fmaf(h.z, h.z, fmaf(h.y, h.y, fmaf(h.x, h.x, ss))));
  }
  const float tot = consumers_sum(ss, red, nct);
  if (threadIdx.x == 0) a.nss[b] = tot;
}
/* A norm step whose yprev is the previous step's y (and whose width is its rows) is fused:
 * that step's row writers also write h = hin + y and each tile's sum of h² (chain_out,
 * tile_ss), so the norm needs only chain_norm_x's round — one round fewer (~2.8 µs while the
 * weights stream, session 14). Its sums then come in another order (per tile, then over the
 * tiles). */
__device__ __forceinline__ bool norm_fused(const ChainArgs &a, int p) {
  const ck_chain_step &st = a.steps[p];
  return st.nw && p > 0 && st.yprev == a.steps[p - 1].y && a.steps[p - 1].tiles * 16 == st.nunits * 64;
}
__device__ __forceinline__ int norm_rounds(const ChainArgs &a, int p) {
  return !a.steps[p].nw ? 0 : norm_fused(a, p) ? 1 : 2;
}
__device__ __forceinline__ void chain_norm_x(const ck_chain_step &st, const ChainArgs &a, float *red, int nct, int G, int b,
                                             bool fused) {
  float ss = 0.f;
  if (fused) /* the previous step's tile sums */
    for (int j = (int)threadIdx.x; j < st.nunits * 4; j += nct) ss += __ldcg(a.tss + j);
  else
    for (int j = (int)threadIdx.x; j < G; j += nct) ss += __ldcg(a.nss + j);
  const float tot = consumers_sum(ss, red, nct);
  const float r = 1.0f / sqrtf(tot / (float)(st.nunits * 64) + 1e-6f);
  int h0, h1;
  norm_slice(st, G, b, h0, h1);
  uint16_t *xp = const_cast<uint16_t *>(st.xp);
  for (int i = h0 + (int)threadIdx.x; i < h1; i += nct) {
    /* (fused: h from other blocks, through the L2) */
    const float4 h = __ldcg(reinterpret_cast<const float4 *>(st.hout) + i), w = __ldg(reinterpret_cast<const float4 *>(st.nw) + i);
    prep_store(xp, 4 * i, ck_f32_to_bf16(h.x * r * w.x), a.e, 1);
    prep_store(xp, 4 * i + 1, ck_f32_to_bf16(h.y * r * w.y), a.e, 1);
    prep_store(xp, 4 * i + 2, ck_f32_to_bf16(h.z * r * w.z), a.e, 1);
    prep_store(xp, 4 * i + 3, ck_f32_to_bf16(h.w * r * w.w), a.e, 1);
  }
}

/* Row `row` of a step from its float sum s: y (undoing x's 2^e, the decode's 2^-14 and the
 * scale codes' 2^10) and, where the next step reads it, its prep. */
__device__ __forceinline__ float chain_out(const ck_chain_step &st, int row, float s, int e, const ck_chain_step *nx) {
  const float y = ldexpf(s, 14 - CK_NV_SCALE_LOG2 - e);
  st.y[row] = y;
  if (st.xnext && row < st.knext) prep_store(st.xnext, row, ck_f32_to_bf16(y * st.gain), e, 1);
  if (!nx) return 0.f;
  /* the next step is a fused norm: h = hin + y, and h² for the tile's sum */
  const float h = __ldcg(nx->hin + row) + y;
  nx->hout[row] = h;
  return h * h;
}
/* the sum of a tile's 16 h² (16 consecutive lanes, one per row, every lane of the warp
 * calling), written by the tile's row-0 lane when `write` */
__device__ __forceinline__ void tile_ss(float hh, float *tss, int tile, int r, bool write) {
  for (int o = 8; o > 0; o >>= 1) hh += __shfl_xor_sync(0xffffffffu, hh, o);
  if (write && r == 0) tss[tile] = hh;
}

static_assert(2 * CH_MAX_STAGES * 8 + (CH_MAX_PIECES + 4 * CH_MAX_STAGES + 32) * 4 <= CH_HDR && CH_HDR % 128 == 0,
              "the shared header holds the mbarriers and flags, and keeps the ring aligned");

template <int NCW, int MINB, int XM, int MAXP>
__global__ void __launch_bounds__((NCW + MAXP) * 32, MINB) chain_kernel(ChainArgs a) {
  constexpr bool XG = XM == 1;
  constexpr int STRIDE = ChX<XM>::STRIDE;
  /* all shared state is dynamic (the host emulation runs the blocks side by side): the stages'
   * mbarriers, the split tiles' flags and the pending x parts, then the ring */
  CK_DYNAMIC_SHARED(uint8_t, smem);
  uint64_t *full = reinterpret_cast<uint64_t *>(smem), *empty = full + CH_MAX_STAGES;
  int *last = reinterpret_cast<int *>(empty + CH_MAX_STAGES); /* this block finished the piece's tile */
  int(*pend)[CH_MAX_STAGES] = reinterpret_cast<int(*)[CH_MAX_STAGES]>(last + CH_MAX_PIECES);
  float *red = reinterpret_cast<float *>(pend[4]); /* the norm's warp sums */
  uint8_t *ring = smem + CH_HDR, *xsm = ring + (size_t)a.nst * STRIDE;
  float *part = reinterpret_cast<float *>(xsm + a.xbytes); /* [piece of the block][warp][16 rows] */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = gridDim.x, b = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int i = 0; i < a.nst; i++) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], NCW);
    }
#ifndef CK_EMULATION
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  }
  __syncthreads();

  if (warp >= NCW) { /* a producer: its stages of every step's share, in order, never waiting for x */
    const int r = warp - NCW;
    if (lane == 0) {
      /* stage k's slot and its use count's parity, kept as counters (a division by the runtime
       * stage count per stage costs tens of instructions) */
      int k = 0, slot = 0, phase = 0, mine = 0;
      ChXProducer xq;
      if (XM == 2) {
        xq.a = &a;
        xq.ring = ring;
        xq.full = full;
        xq.pneed = pend[0];
        xq.pstep = pend[1];
        xq.pu0 = pend[2];
        xq.pnu = pend[3];
        xq.G = G;
      }
      int rounds = 0; /* the grid barrier's rounds before step p's input exists */
      /* (mode bits 12-14: M > 0 caps the stages in flight — issued, not yet arrived — at M:
       * stage k waits for stage k - M's arrival; ifslot/ifpha are stage k - M's slot and parity;
       * not with x staged, whose arrivals wait for the producer's own x parts) */
      const int cap = XM == 2 ? 0 : (a.mode >> 12) & 7;
      int ifslot = 0, ifpha = 0;
      long long waited = 0; /* (stamps) cycles spent waiting for free slots in this step */
      for (int p = 0; p < a.nsteps; p++) {
        const ck_chain_step st = a.steps[p];
        const int split = chain_split(st, G, a.mode);
        const int64_t n = (int64_t)st.tiles * split;
        rounds += norm_rounds(a, p);
        for (int i = (int)(n * b / G); i < (int)(n * (b + 1) / G); i++) {
          int tile, s0, s1;
          piece_stages(st, split, i, tile, s0, s1);
          for (int sg = s0; sg < s1; sg++, k++) {
            const int cur = slot, par = phase, ours = mine == r, ifs = ifslot, ifp = ifpha;
            const bool capw = cap && k >= cap;
            if (++slot == a.nst) slot = 0, phase ^= 1;
            if (++mine == a.producers) mine = 0;
            if (capw && ++ifslot == a.nst) ifslot = 0, ifpha ^= 1;
            if (!ours) continue;
            const int u0 = sg * ChS::SU, nu = min(ChS::SU, st.nunits - u0);
            if (XM == 2 && k >= a.nst) { /* (a slot that never frees — a bug — traps, not hangs) */
              for (long long spin = 0; !mbar_test(&empty[cur], (uint32_t)(par ^ 1)); spin++) {
                xq.flush(k);
                if (spin > CH_SPINS) CH_TRAP();
                __nanosleep(20);
              }
            } else if (k >= a.nst) {
              const long long t0 = a.stamps ? ch_clock() : 0;
              mbar_wait(&empty[cur], (uint32_t)(par ^ 1));
              if (a.stamps) waited += ch_clock() - t0;
            }
            if (capw) mbar_wait(&full[ifs], (uint32_t)ifp);
            const size_t unit = (size_t)tile * st.nunits + u0;
            uint8_t *dst = ring + (size_t)cur * STRIDE;
            mbar_expect(&full[cur], (uint32_t)(nu * (ChS::UNIT_W + ChS::UNIT_S + (XM == 2 ? 128 : 0))));
            bulk_copy(dst, (const uint8_t *)st.w + unit * ChS::UNIT_W, (uint32_t)(nu * ChS::UNIT_W), &full[cur]);
            bulk_copy(dst + ChS::SU * ChS::UNIT_W, (const uint8_t *)st.s + unit * ChS::UNIT_S,
                      (uint32_t)(nu * ChS::UNIT_S), &full[cur]);
            if (XM == 2) {
              pend[0][cur] = rounds;
              pend[1][cur] = p;
              pend[2][cur] = u0;
              pend[3][cur] = nu;
              xq.flush(k + 1);
            }
          }
        }
        rounds++;
        if (a.stamps && r == 0 && p < a.nstamp) a.stamps[(size_t)(a.nstamp + 1 + p) * G + b] = (unsigned long long)waited;
        waited = 0;
      }
      if (XM == 2) /* the last stages' x parts */
        for (long long spin = 0; xq.kh < k; spin++) {
          xq.flush(k);
          if (spin > CH_SPINS) CH_TRAP();
          __nanosleep(32);
        }
    }
    return;
  }

  const int nct = NCW * 32, g = lane >> 2;
  uint32_t colsel[8], nv_e;
  col_sel_init(g, colsel);
  nv_e = ck_opaque(0x40000000u);
  int slot = 0, phase = 0; /* the next stage's slot and its use count's parity */
  long long cwaited = 0;    /* (stamps) cycles this thread waited for full slots in this step */
  unsigned rounds = 0;      /* the grid barrier's rounds so far */
  /* after this block's writes, arrive at the grid barrier; then wait for round `rounds` */
  /* (mode 512: the arrival a release reduction — no fence and atomic round trip — and the
   * wait a spin without sleeps) */
  const bool fastbar = (a.mode & 512) != 0;
  auto grid_arrive = [&]() {
    consumers_sync(nct);
    if (threadIdx.x == 0) {
      if (a.stamps && (int)rounds < a.nstamp) a.stamps[(size_t)rounds * G + b] = ck_tl_now();
      if (fastbar) {
        red_release_add(a.bar, 1u);
      } else {
        __threadfence();
        atomicAdd(a.bar, 1u);
      }
    }
    rounds++;
  };
  auto grid_wait = [&]() {
    if (a.mode & 2) return;
    if (threadIdx.x == 0) /* (a barrier that never opens — a bug — ends the launch with an error, not a hang) */
      for (long long spin = 0; ld_acquire(a.bar) < (unsigned)G * rounds; spin++) {
        if (spin > CH_SPINS) CH_TRAP();
        if (!fastbar) __nanosleep(20);
      }
    if (a.stamps && b == 0 && threadIdx.x == 0 && (int)rounds <= a.nstamp) a.stamps[(size_t)a.nstamp * G + rounds - 1] = ck_tl_now();
    consumers_sync(nct);
  };
  for (int p = 0; p < a.nsteps; p++) {
    const ck_chain_step st = a.steps[p];
    const int split = chain_split(st, G, a.mode);
    const int64_t n = (int64_t)st.tiles * split;
    const int i0 = (int)(n * b / G), npc = (int)(n * (b + 1) / G) - i0;
    if (p > 0) grid_wait(); /* every block has written this step's input (or the norm's) */
    if (st.nw) { /* the norm's rounds: the slices' sums of squares (unless fused), then x */
      const bool fused = norm_fused(a, p);
      if (!fused) {
        chain_norm_sum(st, a, red, nct, G, b);
        grid_arrive();
        grid_wait();
      }
      chain_norm_x(st, a, red, nct, G, b, fused);
      grid_arrive();
      grid_wait();
    }
    if (XM == 0) {
      for (int i = threadIdx.x; i < st.nunits * 8; i += nct) /* uint4 of the row's prep */
        reinterpret_cast<uint4 *>(xsm)[i] = __ldcg(reinterpret_cast<const uint4 *>(st.xp) + i);
    }
    for (int i = threadIdx.x; i < npc * NCW * 16; i += nct) part[i] = 0.f;
    consumers_sync(nct);
    int c = 0; /* pairs handed out so far in this step: warp w takes pairs c ≡ w (mod NCW) */
    for (int pl = 0; pl < npc; pl++) {
      int tile, s0, s1;
      piece_stages(st, split, i0 + pl, tile, s0, s1);
      float tot[4] = {0.f, 0.f, 0.f, 0.f};
      bool had = false;
      for (int sg = s0; sg < s1; sg++) {
        const int u0 = sg * ChS::SU, nu = min(ChS::SU, st.nunits - u0), np = (nu + 1) >> 1;
        int q = warp - c % NCW;
        if (q < 0) q += NCW;
        const long long t0 = a.stamps ? ch_clock() : 0;
        mbar_wait(&full[slot], (uint32_t)phase);
        if (a.stamps) cwaited += ch_clock() - t0;
        const uint8_t *stage = ring + (size_t)slot * STRIDE;
        /* x: the stage's part (its first unit is the stage's), the row in global memory, or the
         * row's copy */
        const uint8_t *xsrc = XM == 2 ? stage + ChS::STAGE : XG ? (const uint8_t *)st.xp : xsm;
        const int xu0 = XM == 2 ? 0 : u0;
        if ((a.mode & 64) && nu == ChS::SU && ChS::SU / 2 % NCW == 0) {
          /* a full stage: this warp's pairs q, q + NCW, … all exist (the one-launch kernel's
           * full-stage loop: no per-pair checks) */
          if (a.mode & 1024) {
#pragma unroll
            for (int j = 0; j < ChS::SU / 2 / NCW; j++)
              if (!(a.mode & 1)) chain_pair<XG, true>(stage, xsrc, xu0, q + j * NCW, true, lane, colsel, nv_e, tot);
          } else {
#pragma unroll
            for (int j = 0; j < ChS::SU / 2 / NCW; j++)
              if (!(a.mode & 1)) chain_pair<XG>(stage, xsrc, xu0, q + j * NCW, true, lane, colsel, nv_e, tot);
          }
          had = true;
        } else {
          for (; q < np; q += NCW) {
            if (!(a.mode & 1)) chain_pair<XG>(stage, xsrc, xu0, q, 2 * q + 1 < nu, lane, colsel, nv_e, tot);
            had = true;
          }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
        if (++slot == a.nst) slot = 0, phase ^= 1;
        c += np;
      }
      if (had) { /* the lane's two columns, then the row's four lanes: row g, row g + 8 */
        float rg = tot[0] + tot[1], r8 = tot[2] + tot[3];
        rg += __shfl_xor_sync(0xffffffffu, rg, 1);
        r8 += __shfl_xor_sync(0xffffffffu, r8, 1);
        rg += __shfl_xor_sync(0xffffffffu, rg, 2);
        r8 += __shfl_xor_sync(0xffffffffu, r8, 2);
        if ((lane & 3) == 0) {
          part[(pl * NCW + warp) * 16 + g] = rg;
          part[(pl * NCW + warp) * 16 + g + 8] = r8;
        }
      }
    }
    consumers_sync(nct);
    /* the next step, when it is a fused norm: the row writers make its h and tile sums (the
     * loops below run whole warps, for tile_ss's shuffles) */
    const ck_chain_step *nx = p + 1 < a.nsteps && norm_fused(a, p + 1) ? &a.steps[p + 1] : NULL;
    /* each piece's rows: the warps' sums in warp order; whole tiles give y and the next prep,
     * split ones leave their sums for the tile's last block */
    for (int i0w = 0; i0w < npc * 16; i0w += nct) {
      const int i = i0w + (int)threadIdx.x, pl = i >> 4, r = i & 15;
      float hh = 0.f;
      if (i < npc * 16) {
        float s = 0.f;
        for (int w = 0; w < NCW; w++) s += part[(pl * NCW + w) * 16 + r];
        const int row = (i0 + pl) / split * 16 + r;
        if (split > 1) a.psum[(size_t)(i0 + pl) * 16 + r] = s;
        else hh = chain_out(st, row, s, a.e, nx);
      }
      if (nx && split == 1) tile_ss(hh, a.tss, (i0 + pl) / split, r, i < npc * 16);
    }
    if (split > 1) {
      consumers_sync(nct);
      for (int pl = threadIdx.x; pl < npc; pl += nct) {
        const int tile = (i0 + pl) / split;
        __threadfence();
        last[pl] = atomicAdd(&a.count[tile], 1u) == (unsigned)(split - 1);
        if (last[pl]) {
          a.count[tile] = 0; /* (no other block touches it again before the next step's barrier) */
          __threadfence();
        }
      }
      consumers_sync(nct);
      for (int i0w = 0; i0w < npc * 16; i0w += nct) {
        const int i = i0w + (int)threadIdx.x, pl = i >> 4, r = i & 15, tile = (i0 + pl) / split;
        const bool mine = i < npc * 16 && last[pl];
        float hh = 0.f;
        if (mine) {
          float s = 0.f;
          for (int q = 0; q < split; q++) s += __ldcg(a.psum + ((size_t)tile * split + q) * 16 + r);
          hh = chain_out(st, tile * 16 + r, s, a.e, nx);
        }
        if (nx) tile_ss(hh, a.tss, tile, r, mine);
      }
    }
    if (a.stamps && threadIdx.x == 0 && p < a.nstamp)
      a.stamps[(size_t)(2 * a.nstamp + 1 + p) * G + b] = (unsigned long long)cwaited;
    cwaited = 0;
    grid_arrive();
  }
}

/* The baseline's epilogue kernel: xnext from y, as the chain writes it. */
__global__ void chain_prep_kernel(const float *y, float gain, int e, uint16_t *xnext, int knext) {
  ck_pdl_enter();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < knext; i += gridDim.x * blockDim.x)
    prep_store(xnext, i, ck_f32_to_bf16(y[i] * gain), e, 1);
}

/* The baseline's norm step: one block, the formula of chain_norm_sum and chain_norm_x. */
__global__ void chain_norm_kernel(const float *nw, const float *yprev, const float *hin, float *hout, uint16_t *xout,
                                  int K, int e) {
  ck_pdl_enter();
  __shared__ float part[32];
  float ss = 0.f;
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    const float h = hin[i] + yprev[i];
    hout[i] = h;
    ss = fmaf(h, h, ss);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = 0.f;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += part[w];
  const float r = 1.0f / sqrtf(tot / (float)K + 1e-6f);
  for (int i = threadIdx.x; i < K; i += blockDim.x)
    prep_store(xout, i, ck_f32_to_bf16((hin[i] + yprev[i]) * r * nw[i]), e, 1);
}

extern "C" int ck_chain_norm(const float *nw, const float *yprev, const float *hin, float *hout, uint16_t *xout, int cols,
                             int e, void *stream) {
  if (!nw || !yprev || !hin || !hout || !xout || cols < 64 || cols % 64 || hin == hout) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(chain_norm_kernel, dim3(1), dim3(1024), 0, (cudaStream_t)stream, nw, yprev, hin, hout, xout, cols,
                        e);
}

extern "C" int ck_chain_prep(const float *y, float gain, int e, uint16_t *xnext, int knext, void *stream) {
  const int threads = 256, blocks = (knext + threads - 1) / threads;
  return (int)ck_launch(chain_prep_kernel, dim3((unsigned)blocks), dim3(threads), 0, (cudaStream_t)stream, y, gain, e,
                        xnext, knext);
}

template <int NCW, int MINB, int XM, int MAXP>
static int chain_launch(const ChainArgs &a, int blocks, int per_sm_want, size_t smem, cudaStream_t st) {
  void (*fn)(ChainArgs) = chain_kernel<NCW, MINB, XM, MAXP>;
  if (a.producers > MAXP) return (int)cudaErrorInvalidValue;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e) return (int)e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, (NCW + a.producers) * 32, smem);
  if (e) return (int)e;
  if (per_sm < per_sm_want) return (int)cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks);
  cfg.blockDim = dim3((NCW + a.producers) * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeCooperative; /* every block resident, or the launch fails */
  at[0].val.cooperative = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return (int)cudaLaunchKernelEx(&cfg, fn, a);
}

static unsigned long long *g_stamps;
static int g_nstamp;
extern "C" void ck_chain_set_stamps(unsigned long long *stamps, int rounds) {
  g_stamps = stamps;
  g_nstamp = stamps ? rounds : 0;
}

extern "C" size_t ck_chain_scratch_bytes(int max_tiles, int blocks) {
  return 16 + (size_t)max_tiles * 4 + (size_t)16 * blocks * 16 * sizeof(float) + (size_t)blocks * sizeof(float) +
         (size_t)max_tiles * sizeof(float);
}

extern "C" int ck_chain_run(const ck_chain_step *steps, int nsteps, int max_cols, int max_tiles, int e, void *scratch,
                            int blocks, int per_sm, int warps, int producers, int mode, int *stages, void *stream) {
  if (!steps || nsteps < 1 || max_cols < 64 || max_cols % 64 || max_tiles < 1 || blocks < 1 || !scratch || warps > 32)
    return (int)cudaErrorInvalidValue;
  if (per_sm < 1 || per_sm > 4 || producers < 1 || producers > CH_MAX_PRODUCERS) return (int)cudaErrorInvalidValue;
  /* x: staged (mode 128, one producer warp), through the L2 (mode 32, and always with more than
   * two blocks per SM: no room for a 43 KB copy), or a shared copy */
  const int xm = (mode & 128) ? 2 : (mode & 32) || per_sm > 2 ? 1 : 0;
  if (xm == 2 && producers != 1) return (int)cudaErrorInvalidValue;
  const int stride = xm == 2 ? ChS::STAGE_XS : ChS::STAGE;
  int dev = 0, optin = 0, per_smem = 0;
  cudaError_t ce = cudaGetDevice(&dev);
  if (!ce) ce = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (!ce) ce = cudaDeviceGetAttribute(&per_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (ce) return (int)ce;
  if (per_sm > 1 && per_smem / per_sm - 1024 < optin) optin = per_smem / per_sm - 1024; /* 1 KB per block is the system's */
  ChainArgs a = {};
  a.steps = steps;
  a.nsteps = nsteps;
  a.e = e;
  a.bar = (unsigned *)scratch;
  a.count = (unsigned *)((char *)scratch + 16);
  a.psum = (float *)((char *)scratch + 16 + (size_t)max_tiles * 4);
  a.nss = a.psum + (size_t)16 * blocks * 16;
  a.tss = a.nss + blocks;
  a.mode = mode;
  a.producers = producers;
  a.stamps = g_stamps;
  a.nstamp = g_nstamp;
  a.xbytes = xm ? 0 : max_cols * 2; /* the row's copy */
  a.ptiles = (max_tiles + blocks - 1) / blocks; /* pieces per block: whole tiles, or split ones (< 16 each) */
  if (a.ptiles < 16) a.ptiles = 16;
  if (a.ptiles > CH_MAX_PIECES) return (int)cudaErrorInvalidValue;
  const size_t fixed = (size_t)a.xbytes + (size_t)a.ptiles * warps * 16 * sizeof(float);
  const size_t room = (size_t)optin - CH_HDR - 256;
  if (fixed + 2 * (size_t)stride > room) return (int)cudaErrorInvalidValue;
  a.nst = (int)((room - fixed) / stride);
  if (a.nst > CH_MAX_STAGES) a.nst = CH_MAX_STAGES;
  if (stages) *stages = a.nst;
  const size_t smem = CH_HDR + (size_t)a.nst * stride + fixed;
  cudaStream_t st = (cudaStream_t)stream;
  /* the instances measured (registers bounded for the blocks per SM; three or four blocks per SM
   * with one producer warp) */
  if (per_sm == 4 && warps == 4 && xm)
    return xm == 2 ? chain_launch<4, 4, 2, 1>(a, blocks, per_sm, smem, st) : chain_launch<4, 4, 1, 1>(a, blocks, per_sm, smem, st);
  if (per_sm == 3 && warps == 8 && xm == 1) return chain_launch<8, 3, 1, 1>(a, blocks, per_sm, smem, st);
  if (per_sm == 2 && warps == 8)
    return xm == 2   ? chain_launch<8, 2, 2, 1>(a, blocks, per_sm, smem, st)
           : xm == 1 ? chain_launch<8, 2, 1, CH_MAX_PRODUCERS>(a, blocks, per_sm, smem, st)
                     : chain_launch<8, 2, 0, CH_MAX_PRODUCERS>(a, blocks, per_sm, smem, st);
  if (per_sm == 1 && !xm && (warps == 8 || warps == 16 || warps == 24))
    return warps == 8    ? chain_launch<8, 1, 0, CH_MAX_PRODUCERS>(a, blocks, per_sm, smem, st)
           : warps == 16 ? chain_launch<16, 1, 0, CH_MAX_PRODUCERS>(a, blocks, per_sm, smem, st)
                         : chain_launch<24, 1, 0, CH_MAX_PRODUCERS>(a, blocks, per_sm, smem, st);
  return (int)cudaErrorInvalidValue;
}

