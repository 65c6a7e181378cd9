/* The decode attention's p·v pass with V streamed by the bulk-copy engine (MLXRT_ATTN_PV=2, kpath
 * bit AT_V_TMA_BIT; GQA 8, head dims 256 and 512, up to 4 KV heads): the scores pass's pipeline
 * (attention_scores_tma.cuh) for V — one block per split takes every KV head, thread 0 keeps
 * AS_NST stages of AS_KEYS whole rows in flight on mbarriers, the first ones issued before the
 * wait, the newest row (written by the q/k/v post step) by plain loads after it. The split
 * passes' p·v kernel reads V with 8-byte loads from its threads and ran at ~2.3 TB/s at 32768
 * keys (57 µs of a full layer's 132, docs/PERF.md session 18).
 *
 * Warp g takes KV head g, all its dims: per 16 keys and 64 dims, four mma.m16n8k16 tiles (rows =
 * dims, columns = the group's 8 heads, k = the 16 keys). Lane (gq, t) reads 16 bytes (dims 8gq …
 * 8gq + 7 of the 64) of keys t, t + 4, t + 8, t + 12 — rows PT_PAD bytes apart beyond their
 * length, so a quarter-warp's 8 reads fall in distinct banks — and byte permutes pair two keys'
 * values of one dim into each A register (row gq ↔ dim 8gq + 2i of tile i, row gq + 8 ↔ the odd
 * one); B pairs the bf16 p of head gq at the same keys, so the k order is permuted alike in A
 * and B. p = bf16(exp(s − M) / total) with each head's M and total over the live splits exactly
 * as the p·v kernel makes them; the lane's scores are loaded PT_LOOK stages ahead. The products
 * are exact; the float32 sums run in the tensor cores' order, so the partial sums are held to the
 * reference's tolerance (attention_emulate), not to the FMA path's bits. The splits are then
 * reduced as the p·v kernel's are: by the last block (up to AT_LAST_BLOCK_SPLITS splits) or by
 * combine_kernel. */

#define PT_PAD 32 /* row padding (bytes): rows t … t + 3 of a quarter-warp 32 bytes apart in the banks */
#define PT_LOOK 2 /* stages of scores loaded ahead */
#define PT_CH 5   /* splits per lane whose statistics are loaded at once (160 per chunk) */
#ifndef PT_EARLY
#define PT_EARLY 1 /* stages issued before the wait */
#endif

__host__ __device__ constexpr size_t pt_row_stride(int nkv, int hd) { return (size_t)nkv * hd * 2 + PT_PAD; }
__host__ __device__ constexpr size_t pt_smem_bytes(int nkv, int hd) {
  return (size_t)AS_NST * AS_KEYS * pt_row_stride(nkv, hd);
}

/* NG: 64-dim groups per head (hd / 64) */
template <int NG>
__global__ void __launch_bounds__(AT_THREADS, 1) pv_tma_kernel(const uint16_t *vc, int nkv, int hd, const int *pos_p,
                                                             int window, at_splits sp, int64_t ctx_cap,
                                                             const float *scores, const float *smax,
                                                             const float *ssum, float *pacc, unsigned *count,
                                                             uint16_t *att, float *amax) {
  constexpr int REP = 8;
  CK_DYNAMIC_SHARED(uint8_t, stage_mem);
  __shared__ uint64_t mbar[AS_NST];
  __shared__ bool last;
  const int s = blockIdx.x, splits = sp.n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const uint32_t rowb = (uint32_t)nkv * hd * 2;
  const size_t rs = pt_row_stride(nkv, hd);
  const int64_t kvd = (int64_t)nkv * hd;
  const bool early = !ck_pdl_early_c;
  int pos = early ? *pos_p : 0, lo = 0, hi = 0;
  if (early) split_range(pos, window, sp, s, &lo, &hi);
  int nst = (hi - lo + AS_KEYS - 1) / AS_KEYS;
  if (threadIdx.x == 0) {
    for (int i = 0; i < AS_NST; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* thread 0: stage st's rows (all but the newest) into slot st % AS_NST */
  auto issue = [&](int st) {
    const int slot = st % AS_NST, j0 = lo + st * AS_KEYS;
    const int n = hi - j0 < AS_KEYS ? hi - j0 : AS_KEYS;
    const int copied = n - (j0 <= pos && pos < j0 + n ? 1 : 0);
    mbar_expect(&mbar[slot], (uint32_t)copied * rowb);
    uint8_t *dst = stage_mem + (size_t)slot * AS_KEYS * rs;
    for (int i = 0; i < n; i++) {
      const int j = j0 + i;
      if (j == pos) continue;
      const int64_t sl = window > 0 ? j % window : j;
      bulk_copy(dst + (size_t)i * rs, vc + sl * kvd, rowb, &mbar[slot]);
    }
  };
  /* PT_EARLY stages before the wait; the rest once this block's statistics and scores loads are
   * issued, so that those queue behind fewer bytes (they come from the scores pass, after the
   * wait, and the whole pass waits for them) */
  int issued = 0;
  if (early && threadIdx.x == 0)
    for (; issued < PT_EARLY && issued < nst; issued++) issue(issued);
  ck_pdl_enter();
  if (!early) {
    pos = *pos_p;
    split_range(pos, window, sp, s, &lo, &hi);
    nst = (hi - lo + AS_KEYS - 1) / AS_KEYS;
  }
  auto issue_rest = [&]() {
    if (threadIdx.x == 0)
      for (; issued < AS_NST && issued < nst; issued++) issue(issued);
  };
  if (lo == hi) return; /* past the live splits (the reductions below read only those) */
  const int live = live_splits(pos, window, sp), nq = REP * nkv;
  const int g = warp;
  const bool active = g < nkv;
  const int hq = g * REP + gq; /* the lane's query head in the B operand */
  const float *srow = scores + (int64_t)hq * ctx_cap;
  /* the lane's scores of stage st: keys t, t + 4, t + 8, t + 12 (−∞ past hi: p = 0) */
  auto load_scores = [&](int st, float (&sc)[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const int j = lo + st * AS_KEYS + t + 4 * k;
      sc[k] = active && st < nst && j < hi ? __ldcg(srow + j) : -INFINITY;
    }
  };
  float look[PT_LOOK + 1][4]; /* [0]: this stage's, [i]: i stages ahead */
#pragma unroll
  for (int i = 0; i <= PT_LOOK; i++) load_scores(i, look[i]);
  /* the group's heads' M and total over the live splits, by warp g alone (no block barrier):
   * lane L takes splits L, L + 32, … in order, as the p·v kernel's warps do, so the same M and
   * total; every load of a chunk of PT_CH splits per lane in flight at once (the p·v kernel's
   * loop waited on them one by one behind the V stream: ~30 % of this kernel at first) */
  float hm = 0.0f, hinv = 0.0f;
  if (active) {
    float m[REP], total[REP];
#pragma unroll
    for (int r = 0; r < REP; r++) m[r] = -INFINITY, total[r] = 0.0f;
    const float *smg = smax + (int64_t)g * REP * splits, *ssg = ssum + (int64_t)g * REP * splits;
    /* chunk c0 of the splits (PT_CH per lane): maxima, and with sums their sums too */
    auto load = [&](int i0, float (&ms)[PT_CH][REP], float (&ls)[PT_CH][REP], bool sums) {
#pragma unroll
      for (int c = 0; c < PT_CH; c++)
#pragma unroll
        for (int r = 0; r < REP; r++) {
          const int i = i0 + 32 * c + lane;
          ms[c][r] = i < live ? __ldcg(smg + r * splits + i) : -INFINITY;
          ls[c][r] = sums && i < live ? __ldcg(ssg + r * splits + i) : 0.0f;
        }
    };
    auto add = [&](const float (&ms)[PT_CH][REP], const float (&ls)[PT_CH][REP]) {
#pragma unroll
      for (int c = 0; c < PT_CH; c++)
#pragma unroll
        for (int r = 0; r < REP; r++)
          if (ms[c][r] > -INFINITY) total[r] += ls[c][r] * expf(__fsub_rn(ms[c][r], m[r]));
    };
    float ms0[PT_CH][REP], ls0[PT_CH][REP]; /* the first chunk, kept: one round trip up to 160 splits */
    load(0, ms0, ls0, true);
    issue_rest();
#pragma unroll
    for (int c = 0; c < PT_CH; c++)
#pragma unroll
      for (int r = 0; r < REP; r++) m[r] = fmaxf(m[r], ms0[c][r]);
    for (int i0 = 32 * PT_CH; i0 < live; i0 += 32 * PT_CH) {
      float ms[PT_CH][REP], ls[PT_CH][REP];
      load(i0, ms, ls, false);
#pragma unroll
      for (int c = 0; c < PT_CH; c++)
#pragma unroll
        for (int r = 0; r < REP; r++) m[r] = fmaxf(m[r], ms[c][r]);
    }
#pragma unroll
    for (int r = 0; r < REP; r++) m[r] = warp_max(m[r]);
    add(ms0, ls0);
    for (int i0 = 32 * PT_CH; i0 < live; i0 += 32 * PT_CH) {
      float ms[PT_CH][REP], ls[PT_CH][REP];
      load(i0, ms, ls, true);
      add(ms, ls);
    }
#pragma unroll
    for (int r = 0; r < REP; r++) {
      total[r] = warp_sum(total[r]);
      if (r == gq) hm = m[r], hinv = __fdiv_rn(1.0f, total[r]);
    }
  }
  issue_rest(); /* (thread 0's warp is active: this is a no-op there) */
  float acc[NG][4][4];
#pragma unroll
  for (int gi = 0; gi < NG; gi++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[gi][i][r] = 0.0f;
  const uint32_t lane_off = (uint32_t)(g * hd + 8 * gq) * 2;
  for (int st = 0; st < nst; st++) {
    const int slot = st % AS_NST, j0 = lo + st * AS_KEYS, n = hi - j0 < AS_KEYS ? hi - j0 : AS_KEYS;
    uint8_t *base = stage_mem + (size_t)slot * AS_KEYS * rs;
    float p[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
      p[k] = look[0][k] == -INFINITY ? 0.0f : rb(__fmul_rn(expf(__fsub_rn(look[0][k], hm)), hinv));
#pragma unroll
    for (int i = 0; i < PT_LOOK; i++)
#pragma unroll
      for (int k = 0; k < 4; k++) look[i][k] = look[i + 1][k];
    load_scores(st + PT_LOOK + 1, look[PT_LOOK]);
    mbar_wait(&mbar[slot], (uint32_t)((st / AS_NST) & 1));
    if (j0 <= pos && pos < j0 + AS_KEYS && pos < hi) { /* the newest row, by plain loads (coherent: L2) */
      const uint4 *src = reinterpret_cast<const uint4 *>(vc + (window > 0 ? pos % window : pos) * kvd);
      uint4 *dst = reinterpret_cast<uint4 *>(base + (size_t)(pos - j0) * rs);
      for (int i = threadIdx.x; i < (int)(rowb / 16); i += blockDim.x) dst[i] = __ldcg(src + i);
      __syncthreads();
    }
    if (active) {
      const uint32_t b0 = bf16_pair(p[0], p[1]), b1 = bf16_pair(p[2], p[3]);
      const uint8_t *rk[4];
#pragma unroll
      for (int k = 0; k < 4; k++) rk[k] = base + (size_t)(t + 4 * k) * rs + lane_off;
#pragma unroll
      for (int gi = 0; gi < NG; gi++) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) /* rows past n are stale: zero (p is 0 there too) */
          v[k] = t + 4 * k < n ? *reinterpret_cast<const uint4 *>(rk[k] + 128 * gi) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const uint32_t w0 = u4_word(v[0], i), w1 = u4_word(v[1], i), w2 = u4_word(v[2], i), w3 = u4_word(v[3], i);
          const uint32_t a[4] = {__byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632),
                                 __byte_perm(w2, w3, 0x5410), __byte_perm(w2, w3, 0x7632)};
          at_mma_bf16(acc[gi][i], a, b0, b1);
        }
      }
    }
    __syncthreads(); /* every warp is done with this slot */
    if (threadIdx.x == 0 && st + AS_NST < nst) {
      fence_proxy_async_smem();
      issue(st + AS_NST);
    }
  }
  /* lane (gq, t) holds heads 2t and 2t + 1 of the group at dims 64gi + 8gq + 2i and + 1 */
  if (active) {
    float *d0p = pacc + ((int64_t)(g * REP + 2 * t) * splits + s) * hd + 8 * gq;
    float *d1p = d0p + (int64_t)splits * hd;
#pragma unroll
    for (int gi = 0; gi < NG; gi++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        *reinterpret_cast<float2 *>(d0p + 64 * gi + 2 * i) = make_float2(acc[gi][i][0], acc[gi][i][2]);
        *reinterpret_cast<float2 *>(d1p + 64 * gi + 2 * i) = make_float2(acc[gi][i][1], acc[gi][i][3]);
      }
  }
  if (splits > AT_LAST_BLOCK_SPLITS) return; /* combine_kernel reduces the splits */
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(count, 1u) == (unsigned)live - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  float vmax = 0.0f;
  for (int i = threadIdx.x; i < nq * hd; i += blockDim.x) {
    const int h = i / hd, d = i - h * hd;
    const uint16_t b = ck_f32_to_bf16(split_sum(pacc + (int64_t)h * splits * hd + d, live, splits, hd));
    att[(int64_t)h * hd + d] = b;
    vmax = fmaxf(vmax, fabsf(ck_bf16_to_f32(b)));
  }
  amax_add(amax, vmax);
  if (threadIdx.x == 0) count[0] = 0;
}
