/* The decode attention's scores pass with K streamed by the bulk-copy engine
 * (GQA 8, head dims 256 and 512, up to 4 KV heads): one block per split
 * takes every KV head of its keys, so a key's row — all the heads' K, nkv·hd·2 bytes — is one
 * contiguous copy, and thread 0 keeps AS_NST stages of AS_KEYS rows in flight on mbarriers
 * (the mat-vec's pipeline, qmv_tc.cu). The split passes' scores kernel reads K with loads from
 * its warps, 8 KB per warp in flight, and runs at ~2 TB/s at 32768 keys (65 µs of a full
 * layer's 132 µs); here one block per SM holds up to 192 KB in flight.
 *
 * The scores are tensor-core products (at_tc_keys): warp g
 * takes KV head g; per 16 keys lane (gq, t) forms the A operand of keys gq and gq + 8 from its
 * 16 bytes at dims 32u + 8t of each 32-dim unit u (now from shared memory), the B operand is
 * the group's eight q rows in the same permuted k order (held in registers), two accumulator
 * chains added at the end: exact products, float32 sums in the tensor cores' order, so a score
 * may differ from the register path's in its last bf16 bit (attention_emulate holds both to a
 * float64 attention). The split's Σ exp(s − max) is not a second pass over the
 * stored scores: each lane keeps its two heads' running max m and l = Σ exp(s − m) as the scores
 * come (l rescaled by exp(m_old − m_new) when the max grows), and each warp merges its lanes'
 * (m, l) by a butterfly — the sum in another order and with those rescalings, so within a few
 * float32 ulps of a second pass's sum. Measured (ncu, 32767 keys, 132 splits): a second pass — the block's own scores
 * read back from the L2 behind the other blocks' streams, two 32-head block reductions from a
 * cold instruction cache — takes ~30 % of the kernel, the q fragments' 16 dependent loads ~23 %.
 *
 * Rows sit AS_PAD bytes apart beyond their length in shared memory (one copy per row), so the
 * 8 rows a quarter-warp reads fall in different banks. The newest row, which the predecessor
 * (the q/k/v post step) writes, is not copied: the block loads it with plain loads once that
 * kernel has completed; every other row was written by earlier steps, so the first stages'
 * copies are issued before the wait. */

#define AS_KEYS 16 /* rows per stage: one m16 tile of keys per warp */
#define AS_NST 3   /* stages in flight */
#ifndef AS_PAD
#define AS_PAD 64 /* row padding in shared memory (bytes): rows 16 banks apart */
#endif
#define AS_MAX_NKV 4

/* shared memory of the pass: AS_NST stages of AS_KEYS padded rows */
__host__ __device__ constexpr size_t as_row_stride(int nkv, int hd) { return (size_t)nkv * hd * 2 + AS_PAD; }
__host__ __device__ constexpr size_t as_smem_bytes(int nkv, int hd) {
  return (size_t)AS_NST * AS_KEYS * as_row_stride(nkv, hd);
}

/* One score s into a running max m and l = Σ exp(x − m) (l rescaled when the max grows). */
__device__ __forceinline__ void as_online(float &m, float &l, float s) {
  const float n = fmaxf(m, s);
  l = fmaf(l, expf(__fsub_rn(m, n)), expf(__fsub_rn(s, n)));
  m = n;
}
/* (m, l) merged with another lane's (m2, l2) — symmetric, so both lanes of a butterfly agree;
 * a side without scores (m = −∞) adds nothing */
__device__ __forceinline__ void as_merge(float &m, float &l, float m2, float l2) {
  const float n = fmaxf(m, m2);
  if (n == -INFINITY) return;
  const float a = m == -INFINITY ? 0.0f : __fmul_rn(l, expf(__fsub_rn(m, n)));
  const float b = m2 == -INFINITY ? 0.0f : __fmul_rn(l2, expf(__fsub_rn(m2, n)));
  l = __fadd_rn(a, b);
  m = n;
}

/* The bulk-copy passes' pipeline (this pass's K, attention_pv_tma.cuh's V): ns ≤ AS_NST stages
 * in flight of AS_KEYS rows (the first rowb bytes of a position's row: every KV head of a key)
 * rs bytes apart in shared memory, positions ps elements apart in the cache (kv_layout.h), over
 * the block's split [lo, hi) at position pos (nst stages). */
struct as_pipe {
  uint8_t *mem;
  uint64_t *mbar;
  size_t rs;
  uint32_t rowb;
  int64_t ps;
  int ns;
  const uint16_t *cache;
  int window;
  bool early; /* the position read before the wait: it is the step's, long complete, unless
               * kernels trigger before they wait */
  int pos, lo, hi, nst;
  int issued; /* stages issued so far (thread 0's count) */
  /* a second array copied beside the rows on the same barriers (NULL: none): position j's rowb2
   * bytes at rows2 + j·rowb2 into mem2, AS_KEYS·rowb2 bytes a stage, unpadded (a compressed K's
   * blocks beside plain V rows; no ring) */
  const uint8_t *rows2;
  uint8_t *mem2;
  uint32_t rowb2;
};
__device__ __forceinline__ void as_range(as_pipe &p, const int *pos_p, at_splits sp) {
  p.pos = *pos_p;
  split_range(p.pos, p.window, sp, (int)blockIdx.x, &p.lo, &p.hi);
  p.nst = (p.hi - p.lo + AS_KEYS - 1) / AS_KEYS;
}
/* the pipeline of block blockIdx.x's split, its mbarriers made by thread 0 (every thread passes
 * a barrier after) */
__device__ __forceinline__ as_pipe as_make(uint8_t *mem, uint64_t *mbar, size_t rs, uint32_t rowb, int64_t ps, int ns,
                                           const uint16_t *cache, int window, const int *pos_p, at_splits sp) {
  as_pipe p = {mem, mbar, rs, rowb, ps, ns, cache, window, true, 0, 0, 0, 0, 0, NULL, NULL, 0};
  if (p.early) as_range(p, pos_p, sp);
  if (threadIdx.x == 0) {
    for (int i = 0; i < AS_NST; i++) mbar_init(&p.mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  return p;
}
/* thread 0: stage st into slot st % ns, all rows but the newest (pos, which the predecessor
 * writes: as_stage loads it) */
__device__ __forceinline__ void as_issue(const as_pipe &p, int st) {
  const int slot = st % p.ns, j0 = p.lo + st * AS_KEYS;
  const int n = p.hi - j0 < AS_KEYS ? p.hi - j0 : AS_KEYS;
  const int copied = n - (j0 <= p.pos && p.pos < j0 + n ? 1 : 0);
  mbar_expect(&p.mbar[slot], (uint32_t)copied * (p.rowb + p.rowb2));
  uint8_t *dst = p.mem + (size_t)slot * AS_KEYS * p.rs;
  for (int i = 0; i < n; i++) {
    const int j = j0 + i;
    if (j == p.pos) continue;
    const int64_t sl = p.window > 0 ? j % ck_ring(p.window) : j;
    bulk_copy(dst + (size_t)i * p.rs, p.cache + sl * p.ps, p.rowb, &p.mbar[slot]);
    if (p.rows2)
      bulk_copy(p.mem2 + ((size_t)slot * AS_KEYS + i) * p.rowb2, p.rows2 + (int64_t)j * p.rowb2, p.rowb2, &p.mbar[slot]);
  }
}
/* thread 0: the stages up to the n-th (of the first ns) not issued yet */
__device__ __forceinline__ void as_issue_upto(as_pipe &p, int n) {
  if (threadIdx.x == 0)
    for (; p.issued < n && p.issued < p.ns && p.issued < p.nst; p.issued++) as_issue(p, p.issued);
}
/* the wait for the predecessor, with `early` stages issued before it where the split is known
 * (the rest: as_issue_upto(p, AS_NST) later); the split read after it where it was not */
__device__ __forceinline__ void as_wait(as_pipe &p, int early, const int *pos_p, at_splits sp) {
  if (p.early) as_issue_upto(p, early);
  ck_pdl_enter();
  if (!p.early) as_range(p, pos_p, sp);
}
/* stage st's slot once its copies have landed, with the newest row (if the stage holds it) by
 * plain loads — coherent, through the L2: the predecessor wrote it — and a block barrier */
__device__ __forceinline__ uint8_t *as_stage(const as_pipe &p, int st) {
  const int slot = st % p.ns, j0 = p.lo + st * AS_KEYS;
  uint8_t *base = p.mem + (size_t)slot * AS_KEYS * p.rs;
  mbar_wait(&p.mbar[slot], (uint32_t)((st / p.ns) & 1));
  if (j0 <= p.pos && p.pos < j0 + AS_KEYS && p.pos < p.hi) {
    const uint4 *src = reinterpret_cast<const uint4 *>(p.cache + (p.window > 0 ? p.pos % ck_ring(p.window) : p.pos) * p.ps);
    uint4 *dst = reinterpret_cast<uint4 *>(base + (size_t)(p.pos - j0) * p.rs);
    for (int i = threadIdx.x; i < (int)(p.rowb / 16); i += blockDim.x) dst[i] = __ldcg(src + i);
    if (p.rows2) {
      const uint4 *src2 = reinterpret_cast<const uint4 *>(p.rows2 + (int64_t)p.pos * p.rowb2);
      uint4 *dst2 = reinterpret_cast<uint4 *>(p.mem2 + ((size_t)slot * AS_KEYS + (p.pos - j0)) * p.rowb2);
      for (int i = threadIdx.x; i < (int)(p.rowb2 / 16); i += blockDim.x) dst2[i] = __ldcg(src2 + i);
    }
    __syncthreads();
  }
  return base;
}
/* after every warp is done with stage st: thread 0 refills its slot with stage st + ns */
__device__ __forceinline__ void as_release(const as_pipe &p, int st) {
  __syncthreads();
  if (threadIdx.x == 0 && st + p.ns < p.nst) {
    fence_proxy_async_smem();
    as_issue(p, st + p.ns);
  }
}


template <int NU>
__global__ void __launch_bounds__(AT_THREADS, 1) scores_tma_kernel(const float *q, const uint16_t *kc, int nkv, int hd,
                                                                dk_kv_layout kv, float scale, const int *pos_p, int window,
                                                                at_splits sp, int64_t ctx_cap, float *scores,
                                                                float *smax, float *ssum, float *amax, int namax) {
  constexpr int REP = 8;
  CK_DYNAMIC_SHARED(uint8_t, stage_mem);
  __shared__ uint64_t mbar[AS_NST];
  const int s = blockIdx.x, splits = sp.n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  as_pipe pipe = as_make(stage_mem, mbar, as_row_stride(nkv, hd), (uint32_t)nkv * hd * 2, kv.ps, AS_NST, kc, window,
                         pos_p, sp);
  as_wait(pipe, AS_NST, pos_p, sp); /* the rest of the first stages once q's loads are issued */
  amax_zero(amax, namax);
  const int lo = pipe.lo, hi = pipe.hi, nst = pipe.nst;
  if (lo == hi) return; /* past the live splits: nothing reads this split's results */
  /* warp g's B fragments (KV head g's eight q rows, scores_kernel's order: unit u, lane L: the
   * bf16 pairs of head L / 4 at dims 32u + 8(L % 4) …), from q as at_stage_q stages it */
  const int g = warp;
  const bool active = g < nkv;
  const float bscale = rb(scale);
  uint4 qf[NU];
  if (active) {
    /* every unit's loads in flight at once (one at a time, each waited behind the K stream the
     * early copies started: ~23 % of the kernel; eight at a time, two round trips: ~22 %) */
    const float *qh = q + ((int64_t)g * REP + gq) * hd + 8 * t;
    float4 xv[2 * NU];
#pragma unroll
    for (int u = 0; u < NU; u++) {
      xv[2 * u] = __ldcg(reinterpret_cast<const float4 *>(qh + u * 32));
      xv[2 * u + 1] = __ldcg(reinterpret_cast<const float4 *>(qh + u * 32 + 4));
    }
    as_issue_upto(pipe, AS_NST); /* (thread 0's warp is active) */
#pragma unroll
    for (int u = 0; u < NU; u++) {
      float4 x0 = xv[2 * u], x1 = xv[2 * u + 1];
      if (scale != 1.0f) {
        x0 = make_float4(rb(__fmul_rn(x0.x, bscale)), rb(__fmul_rn(x0.y, bscale)), rb(__fmul_rn(x0.z, bscale)),
                         rb(__fmul_rn(x0.w, bscale)));
        x1 = make_float4(rb(__fmul_rn(x1.x, bscale)), rb(__fmul_rn(x1.y, bscale)), rb(__fmul_rn(x1.z, bscale)),
                         rb(__fmul_rn(x1.w, bscale)));
      }
      qf[u] = make_uint4(bf16_pair(x0.x, x0.y), bf16_pair(x0.z, x0.w), bf16_pair(x1.x, x1.y), bf16_pair(x1.z, x1.w));
    }
  }
  float *sa = scores + (int64_t)(g * REP + 2 * t) * ctx_cap, *sb = sa + ctx_cap;
  /* the lane's running softmax statistics of heads 2t (a) and 2t + 1 (b) */
  float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
  for (int st = 0; st < nst; st++) {
    const int j0 = lo + st * AS_KEYS;
    const uint8_t *base = as_stage(pipe, st);
    if (active) {
      const int ka = j0 + gq, kb = ka + 8, ia = ka < hi ? ka - j0 : 0, ib = kb < hi ? kb - j0 : 0;
      const uint8_t *ra = base + (size_t)ia * pipe.rs + (size_t)g * hd * 2 + 16 * t;
      const uint8_t *rb8 = base + (size_t)ib * pipe.rs + (size_t)g * hd * 2 + 16 * t;
      at_tc_keys<NU>(
          [&](int u, uint4 &a, uint4 &b) {
            a = *reinterpret_cast<const uint4 *>(ra + u * 64);
            b = *reinterpret_cast<const uint4 *>(rb8 + u * 64);
          },
          [&](int u) { return qf[u]; }, ka, kb, hi, sa, sb, [&](float x, float y) {
            as_online(ma, la, x);
            as_online(mb, lb, y);
          });
    }
    as_release(pipe, st);
  }
  /* the warp's lanes merged over gq (a butterfly: every lane ends with the same values); lane
   * (0, t) writes heads 2t and 2t + 1 */
  if (!active) return;
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    as_merge(ma, la, __shfl_xor_sync(0xffffffffu, ma, o), __shfl_xor_sync(0xffffffffu, la, o));
    as_merge(mb, lb, __shfl_xor_sync(0xffffffffu, mb, o), __shfl_xor_sync(0xffffffffu, lb, o));
  }
  if (gq == 0) {
    const int h = g * REP + 2 * t;
    smax[h * splits + s] = ma, ssum[h * splits + s] = la;
    smax[(h + 1) * splits + s] = mb, ssum[(h + 1) * splits + s] = lb;
  }
}
