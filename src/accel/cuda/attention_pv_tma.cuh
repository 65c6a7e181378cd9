/* The decode attention's p·v pass with V streamed by the bulk-copy engine at deep contexts
 * (GQA 8, head dims 256 and 512, up to 4 KV heads): the scores pass's pipeline
 * (attention_scores_tma.cuh) for V — one block per split takes every KV head, thread 0 keeps
 * AS_NST stages of AS_KEYS whole rows in flight on mbarriers, the first ones issued before the
 * wait, the newest row (written by the q/k/v post step) by plain loads after it. The split
 * passes' p·v kernel reads V with 8-byte loads from its threads and runs at ~2.3 TB/s at 32768
 * keys (57 µs of a full layer's 132).
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

/* A stage row is a position's whole row (ps elements; a K-from-V row of 5 KB would take two
 * stages in flight, but those caches take the one-pass form at deep contexts), so the 31B's
 * plain 4 KB rows take three. */
__host__ __device__ constexpr size_t pt_row_stride(int64_t ps) { return (size_t)ps * 2 + PT_PAD; }
__host__ __device__ constexpr int pt_stages(int64_t ps) { return ps * 2 * AS_NST * AS_KEYS <= 200 * 1024 ? AS_NST : 2; }
__host__ __device__ constexpr size_t pt_smem_bytes(int64_t ps) {
  return (size_t)pt_stages(ps) * AS_KEYS * pt_row_stride(ps);
}

/* One stage's Σ p·v into acc: lane (gq, t)'s 16 bytes at goff[gi] of its rows rk — keys t, t + 4,
 * t + 8, t + 12 (rows past n, stale, read as zero: p is 0 there too), b0 / b1 the bf16 p of head
 * gq at those keys. */
template <int NG>
__device__ __forceinline__ void pt_rows_pv(const uint8_t *const (&rk)[4], int t, int n, const uint32_t (&goff)[NG],
                                           uint32_t b0, uint32_t b1, float (&acc)[NG][4][4]) {
#pragma unroll
  for (int gi = 0; gi < NG; gi++) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
      v[k] = t + 4 * k < n ? *reinterpret_cast<const uint4 *>(rk[k] + goff[gi]) : make_uint4(0u, 0u, 0u, 0u);
    at_pv_tiles(v, b0, b1, acc[gi]);
  }
}
/* ... with the stage's rows rs bytes apart from base */
template <int NG>
__device__ __forceinline__ void pt_stage_pv(const uint8_t *base, size_t rs, int t, int n, const uint32_t (&goff)[NG],
                                            uint32_t b0, uint32_t b1, float (&acc)[NG][4][4]) {
  const uint8_t *const rk[4] = {base + (size_t)t * rs, base + (size_t)(t + 4) * rs, base + (size_t)(t + 8) * rs,
                                base + (size_t)(t + 12) * rs};
  pt_rows_pv<NG>(rk, t, n, goff, b0, b1, acc);
}
/* Lane (gq, t)'s accumulators — heads h and h + 1 (h = group's first + 2t) at dims 64gi + 8gq + 2i
 * and + 1 — into split s's partial sums. */
template <int NG>
__device__ __forceinline__ void pt_store_acc(const float (&acc)[NG][4][4], float *pacc, int h, int splits, int s,
                                             int hd, int gq) {
  float *d0p = pacc + ((int64_t)h * splits + s) * hd + 8 * gq, *d1p = d0p + (int64_t)splits * hd;
#pragma unroll
  for (int gi = 0; gi < NG; gi++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      *reinterpret_cast<float2 *>(d0p + 64 * gi + 2 * i) = make_float2(acc[gi][i][0], acc[gi][i][2]);
      *reinterpret_cast<float2 *>(d1p + 64 * gi + 2 * i) = make_float2(acc[gi][i][1], acc[gi][i][3]);
    }
}

/* NG: 64-dim groups per head (hd / 64) */
template <int NG>
__global__ void __launch_bounds__(AT_THREADS, 1) pv_tma_kernel(const uint16_t *vc, int nkv, int hd, dk_kv_layout kv,
                                                             const int *pos_p,
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
  as_pipe pipe = as_make(stage_mem, mbar, pt_row_stride(kv.ps), (uint32_t)kv.ps * 2, kv.ps, pt_stages(kv.ps), vc,
                         window, pos_p, sp);
  /* PT_EARLY stages before the wait; the rest once this block's statistics and scores loads are
   * issued, so that those queue behind fewer bytes (they come from the scores pass, after the
   * wait, and the whole pass waits for them) */
  as_wait(pipe, PT_EARLY, pos_p, sp);
  const int pos = pipe.pos, lo = pipe.lo, hi = pipe.hi, nst = pipe.nst;
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
    as_issue_upto(pipe, pipe.ns);
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
  as_issue_upto(pipe, pipe.ns); /* (thread 0's warp is active: a no-op there) */
  float acc[NG][4][4];
#pragma unroll
  for (int gi = 0; gi < NG; gi++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[gi][i][r] = 0.0f;
  /* the lane's 16 bytes of each 64-dim group gi in a row (kv_layout.h) */
  uint32_t goff[NG];
#pragma unroll
  for (int gi = 0; gi < NG; gi++) goff[gi] = (uint32_t)dk_kv_vcol(kv, nkv, hd, g, 64 * gi + 8 * gq) * 2;
  for (int st = 0; st < nst; st++) {
    const int j0 = lo + st * AS_KEYS, n = hi - j0 < AS_KEYS ? hi - j0 : AS_KEYS;
    float p[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
      p[k] = look[0][k] == -INFINITY ? 0.0f : rb(__fmul_rn(expf(__fsub_rn(look[0][k], hm)), hinv));
#pragma unroll
    for (int i = 0; i < PT_LOOK; i++)
#pragma unroll
      for (int k = 0; k < 4; k++) look[i][k] = look[i + 1][k];
    load_scores(st + PT_LOOK + 1, look[PT_LOOK]);
    const uint8_t *base = as_stage(pipe, st);
    if (active) pt_stage_pv<NG>(base, pipe.rs, t, n, goff, bf16_pair(p[0], p[1]), bf16_pair(p[2], p[3]), acc);
    as_release(pipe, st);
  }
  /* lane (gq, t) holds heads 2t and 2t + 1 of the group */
  if (active) pt_store_acc<NG>(acc, pacc, g * REP + 2 * t, splits, s, hd, gq);
  if (splits > AT_LAST_BLOCK_SPLITS) return; /* combine_kernel reduces the splits */
  at_reduce_last(pacc, count, 0, nq, live, splits, hd, att, amax, &last);
}
