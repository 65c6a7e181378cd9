/* The decode attention at deep contexts in one pass over a cache that keeps K from V (GQA 8, head
 * dims 256 and 512, up to 4 KV heads): a position's row holds K and V of every KV head
 * (kv_layout.h), so each split's rows are streamed once by the bulk-copy pipeline of
 * attention_scores_tma.cuh, whole rows, and each 16-key stage gives
 * its scores (at_tc_dots, as the scores pass) and, at once, its share of Σ p·v (at_pv_tiles, as
 * the bulk-copy p·v pass), under an online softmax per head. The two-pass form reads every row
 * twice (the scores pass K, the p·v pass V: 8 KB per position and full layer of the 31B in
 * either K layout, against 5 KB once here with K from V); at 261,000 live keys its ten full
 * layers took 7.2 ms of a 13.9 ms step, at ~3.4 TB/s. One pass: tg128 +8.3 % at depth 65536,
 * 92.4 t/s at 262144 (docs/BENCHMARKS.md); the decoder takes it beyond ONEPASS_KEYS (tuning.h).
 *
 * The rounding points differ from the two-pass form's in one place: p is bf16(exp(s − m)) with
 * the split's running max m, where the two-pass rounds bf16(exp(s − M) / total) with the global
 * M and total; a split's sums are rescaled by exp(m_old − m_new) as its max grows, and
 * onepass_combine_kernel weighs the splits by exp(m_s − M) and divides by the total at the end.
 * Scores (bf16), the float32 statistics and the bf16 output are rounded where the two-pass form
 * rounds them. docs/NUMERICS.md states the measured difference.
 *
 * Warp g takes KV head g. Per stage: lane (gq, t) gets the scores of keys gq and gq + 8 for
 * heads 2t and 2t + 1 (the m16n8 accumulator layout), which is also its place in the p·v
 * accumulators (dims × heads), so each lane keeps its two heads' running max (warp-uniform:
 * reduced over gq) and its share of their sums. p goes through 256 bytes of shared memory per
 * warp to become the p·v products' B operand (head gq at keys t, t + 4, t + 8, t + 12). The
 * q fragments (64 registers at head dim 512) live in shared memory, each lane's its own, beside
 * the 128 accumulator registers.
 *
 * Over a compressed K (kv_layout.h kfmt, KF 3 / 4) the rows are V's and each stage also copies
 * its positions' K blocks (op_ring kblk, kps bytes a position); the scores are fp16 tensor-core
 * products in the rotated domain, as the prompt pass's tile kernel forms them (prefill_attn_wg.cu):
 * q rotated once and rounded to fp16 in its fragments, and lane (gq, t) forms its 8 values of a
 * key's 32-dim unit from one code word and four pair-table loads (attention_planar.cuh
 * pc_values8), in the A operand's place of the bf16 rows' 16 bytes. The register path's scores
 * (scores_kernel<REP, KF>: float32 products, one lookup and multiply-add per value and head) are
 * latency-bound: a full layer of the 31B at depth 32768 took 167.6 us there against 100.8 us for
 * K from V's one pass (H100). */

/* The rows stream through a ring of half stages (OP_HALF positions each: a stage's keys 0-7 and
 * 8-15, which are also the halves a lane's keys fall in: gq / gq + 8 for the scores, t, t + 4 /
 * t + 8, t + 12 for p·v), as many as fit beside the q fragments, up to 2·AS_NST. A producer warp
 * beside the AT_THREADS consumers issues the copies: a half is refilled as soon as every active
 * warp has arrived on its empty barrier, so no block barrier per stage and no issuing on a
 * consumer's path (ncu, the 31B's planar3 layer at 262,143 keys, the earlier thread-0 form: 35 %
 * of the warps' stall cycles at the per-stage block barrier, DRAM 75 % busy; this form 437.6 µs
 * against its 516.2, H100). The 31B's planar3 rows (4 KB of V, 800 B of K blocks a position) take
 * five halves, 1.5 stages in flight while one is scored; its K-from-V rows (5 KB) four. */
#define OP_HALF (AS_KEYS / 2)
#define OP_THREADS (AT_THREADS + 32) /* the consumers, then the producer warp */
/* dynamic shared memory allowed: sm_90's 227 KB a block less this kernel's static arrays */
#define OP_SMEM_MAX (227 * 1024 - 2560)

/* shared memory: the halves' rows, then (a compressed K) their K blocks, then each warp's q
 * fragments (lane-private) */
__host__ __device__ constexpr size_t op_q_bytes(int nkv, int hd) { return (size_t)nkv * hd * 16; }
__host__ __device__ constexpr size_t op_half_bytes(int64_t ps, int64_t kps) {
  return (size_t)OP_HALF * (pt_row_stride(ps) + (size_t)kps);
}
__host__ __device__ constexpr int op_halves(int64_t ps, int64_t kps, int nkv, int hd) {
  int n = 2 * AS_NST;
  while (n > 4 && n * op_half_bytes(ps, kps) + op_q_bytes(nkv, hd) > OP_SMEM_MAX) n--;
  return n;
}
__host__ __device__ constexpr size_t op_smem_bytes(int64_t ps, int64_t kps, int nkv, int hd) {
  return (size_t)op_halves(ps, kps, nkv, hd) * op_half_bytes(ps, kps) + op_q_bytes(nkv, hd);
}

/* The ring: half h (positions lo + OP_HALF·h …) in slot h mod nh, its rows rs bytes apart at
 * mem, its K blocks (kps bytes a position, none without a compressed K) at mem2. */
struct op_ring {
  uint8_t *mem, *mem2;
  uint64_t *full, *empty;
  size_t rs;
  uint32_t rowb, kps;
  int nh, window;
  int64_t ps;
  const uint16_t *rows;
  const uint8_t *kblk;
  int pos, lo, hi, nhalf;
};
__device__ __forceinline__ uint8_t *op_rows(const op_ring &r, int h) { return r.mem + (size_t)(h % r.nh) * OP_HALF * r.rs; }
__device__ __forceinline__ const uint8_t *op_kblocks(const op_ring &r, int h) {
  return r.mem2 + (size_t)(h % r.nh) * OP_HALF * r.kps;
}
/* the producer: half h's copies (every row, the newest too: it is issued after the wait for the
 * predecessor that writes it), one arrival with their bytes on its full barrier */
__device__ __forceinline__ void op_issue(const op_ring &r, int h) {
  const int j0 = r.lo + h * OP_HALF, n = r.hi - j0 < OP_HALF ? (r.hi - j0 > 0 ? r.hi - j0 : 0) : OP_HALF;
  uint64_t *bar = &r.full[h % r.nh];
  mbar_expect(bar, (uint32_t)n * (r.rowb + r.kps));
  uint8_t *dst = op_rows(r, h), *dst2 = r.mem2 + (size_t)(h % r.nh) * OP_HALF * r.kps;
  for (int i = 0; i < n; i++) {
    const int j = j0 + i;
    bulk_copy(dst + (size_t)i * r.rs, r.rows + (r.window > 0 ? j % ck_ring(r.window) : j) * r.ps, r.rowb, bar);
    if (r.kps) bulk_copy(dst2 + (size_t)i * r.kps, r.kblk + (int64_t)(j0 + i) * r.kps, r.kps, bar);
  }
}

/* grid (splits), OP_THREADS threads: every KV head of split blockIdx.x. Writes per query head h
 * and live split s: smax[h·splits + s] = m_s (the split's max score), ssum[…] = l_s =
 * Σ exp(s − m_s) and pacc[(h·splits + s)·hd + d] = Σ bf16(exp(s − m_s)) · v_d. NU: 32-dim units
 * per head (hd / 32), NG: 64-dim groups (hd / 64). KF 0: K from V (vc == kc, the rows); 3 / 4: K
 * in planar3 / planar4 blocks at kc, V's rows at vc. */
template <int NU, int NG, int KF>
__global__ void __launch_bounds__(OP_THREADS, 1) onepass_tma_kernel(const float *q, const uint16_t *kc,
                                                                  const uint16_t *vc, int nkv, int hd,
                                                                  dk_kv_layout kv, float scale, const int *pos_p,
                                                                  int window, at_splits sp, float *smax, float *ssum,
                                                                  float *pacc, float *amax, int namax) {
  constexpr int REP = 8, NW = AT_THREADS / 32;
  CK_DYNAMIC_SHARED(uint8_t, smem);
  __shared__ uint64_t full[2 * AS_NST], empty[2 * AS_NST];
  __shared__ uint32_t ptr[NW][AS_KEYS][REP / 2]; /* per warp: p of each key as bf16 pairs of heads */
  __shared__ uint32_t pairs[KF == 3 ? 64 : KF == 4 ? 256 : 1]; /* (KF) pc_stage_pairs */
  const int s = blockIdx.x, splits = sp.n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const int64_t kps = KF ? kv.kps : 0;
  const int nh = op_halves(kv.ps, kps, nkv, hd);
  op_ring r;
  r.rs = pt_row_stride(kv.ps);
  r.mem = smem;
  r.mem2 = smem + (size_t)nh * OP_HALF * r.rs;
  r.full = full, r.empty = empty;
  r.rowb = (uint32_t)kv.ps * 2, r.kps = (uint32_t)kps;
  r.nh = nh, r.window = window;
  r.ps = kv.ps;
  r.rows = vc;
  r.kblk = reinterpret_cast<const uint8_t *>(kc);
  /* the position is the step's, written before the predecessor started (kernels trigger after
   * their wait), so the split is known before the wait */
  r.pos = *pos_p;
  split_range(r.pos, window, sp, s, &r.lo, &r.hi);
  r.nhalf = 2 * ((r.hi - r.lo + AS_KEYS - 1) / AS_KEYS);
  uint4 *qfs = reinterpret_cast<uint4 *>(r.mem2 + (size_t)nh * OP_HALF * kps);
  if (threadIdx.x == 0) {
    for (int i = 0; i < nh; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], nkv);
    mbar_init_fence();
  }
  if (KF) pc_stage_pairs<KF>(kv.kt, pairs); /* (the tables are the session's, written before any step) */
  __syncthreads(); /* the barriers made, the pair table staged: no block barrier after this */
  if (warp == NW) { /* the producer: every row but the newest was written by earlier steps, so the
                     * halves before the one holding it are issued before the wait */
    if (lane == 0 && r.lo < r.hi) {
      int h = 0;
      for (; h < r.nhalf && h < nh && r.lo + (h + 1) * OP_HALF <= r.pos; h++) op_issue(r, h);
      ck_pdl_enter();
      for (; h < r.nhalf; h++) {
        if (h >= nh) mbar_wait(&empty[h % nh], (uint32_t)((h / nh - 1) & 1));
        op_issue(r, h);
      }
    } else {
      ck_pdl_enter();
    }
    return;
  }
  ck_pdl_enter();
  if (amax && blockIdx.x == 0) /* amax_zero over the consumers alone */
    for (int i = threadIdx.x; i < namax; i += AT_THREADS) amax[i] = 0.0f;
  const int lo = r.lo, hi = r.hi, nst = r.nhalf / 2;
  if (lo == hi) return; /* past the live splits: the combine reads only the live ones */
  const int g = warp;
  if (g >= nkv) return;
  uint4 *qf = qfs + (size_t)g * NU * 32 + lane; /* unit u at qf[32u] */
  { /* q's fragments, as the scores pass forms them (KF: rotated, fp16) */
    const float bscale = rb(scale);
    const float *qh = q + ((int64_t)g * REP + gq) * hd + 8 * t;
#pragma unroll 4
    for (int u = 0; u < NU; u++) {
      float4 x0 = __ldcg(reinterpret_cast<const float4 *>(qh + u * 32));
      float4 x1 = __ldcg(reinterpret_cast<const float4 *>(qh + u * 32 + 4));
      if (scale != 1.0f) {
        x0 = make_float4(rb(__fmul_rn(x0.x, bscale)), rb(__fmul_rn(x0.y, bscale)), rb(__fmul_rn(x0.z, bscale)),
                         rb(__fmul_rn(x0.w, bscale)));
        x1 = make_float4(rb(__fmul_rn(x1.x, bscale)), rb(__fmul_rn(x1.y, bscale)), rb(__fmul_rn(x1.z, bscale)),
                         rb(__fmul_rn(x1.w, bscale)));
      }
      if (KF) {
        const float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int pr = ((32 * u + 8 * t + 2 * e) % KVC_BLOCK) / 2;
          float r0, r1;
          kvc_rotate(kv.kt->cos[pr], kv.kt->sin[pr], v[2 * e], v[2 * e + 1], &r0, &r1);
          w[e] = (uint32_t)ck_f32_to_f16(r0) | (uint32_t)ck_f32_to_f16(r1) << 16;
        }
        qf[32 * u] = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
        qf[32 * u] = make_uint4(bf16_pair(x0.x, x0.y), bf16_pair(x0.z, x0.w), bf16_pair(x1.x, x1.y),
                                bf16_pair(x1.z, x1.w));
      }
    }
  }
  /* heads 2t (a) and 2t + 1 (b): running max (the same in every lane of the warp) and this
   * lane's share of Σ exp(s − m) */
  float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
  float acc[NG][4][4];
#pragma unroll
  for (int gi = 0; gi < NG; gi++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int rr = 0; rr < 4; rr++) acc[gi][i][rr] = 0.0f;
  uint32_t goff[NG]; /* the lane's 16 bytes of V in each 64-dim group of a row (kv_layout.h) */
#pragma unroll
  for (int gi = 0; gi < NG; gi++) goff[gi] = (uint32_t)dk_kv_vcol(kv, nkv, hd, g, 64 * gi + 8 * gq) * 2;
  for (int st = 0; st < nst; st++) {
    const int j0 = lo + st * AS_KEYS, n = hi - j0 < AS_KEYS ? hi - j0 : AS_KEYS, h0 = 2 * st, h1 = h0 + 1;
    mbar_wait(&full[h0 % nh], (uint32_t)((h0 / nh) & 1));
    mbar_wait(&full[h1 % nh], (uint32_t)((h1 / nh) & 1));
    const uint8_t *ra0 = op_rows(r, h0), *rb0 = op_rows(r, h1);
    const int ia = gq < n ? gq : 0, ib = gq + 8 < n ? gq : 0;
    const uint8_t *rowb_ = gq + 8 < n ? rb0 : ra0; /* key gq + 8 in the second half (past n: key 0's row) */
    float c[4];
    if constexpr (KF != 0) { /* lane t's 8 values of unit u: chunk 4(u mod 4) + t of block u / 4 */
      constexpr int BB = KF == 3 ? KVC_P3_BYTES : KVC_P4_BYTES;
      const size_t ho = (size_t)g * (hd / KVC_BLOCK) * BB;
      const uint8_t *ka = op_kblocks(r, h0) + (size_t)ia * kps + ho;
      const uint8_t *kb = (gq + 8 < n ? op_kblocks(r, h1) : op_kblocks(r, h0)) + (size_t)ib * kps + ho;
      at_tc_dots<NU, 4, true>(
          [&](int u, uint4 &a, uint4 &b) {
            a = pc_values8<KF>(ka + (u / 4) * BB, 4 * (u % 4) + t, pairs);
            b = pc_values8<KF>(kb + (u / 4) * BB, 4 * (u % 4) + t, pairs);
          },
          [&](int u) { return qf[32 * u]; }, c);
    } else {
      const uint8_t *ra = ra0 + (size_t)ia * r.rs + (size_t)g * hd * 2 + 16 * t;
      const uint8_t *rb8 = rowb_ + (size_t)ib * r.rs + (size_t)g * hd * 2 + 16 * t;
      at_tc_dots<NU, 4>(
          [&](int u, uint4 &a, uint4 &b) {
            a = *reinterpret_cast<const uint4 *>(ra + u * 64);
            b = *reinterpret_cast<const uint4 *>(rb8 + u * 64);
          },
          [&](int u) { return qf[32 * u]; }, c);
    }
    const float s0 = gq < n ? rb(c[0]) : -INFINITY, s1 = gq < n ? rb(c[1]) : -INFINITY;
    const float s2 = gq + 8 < n ? rb(c[2]) : -INFINITY, s3 = gq + 8 < n ? rb(c[3]) : -INFINITY;
    float xa = fmaxf(s0, s2), xb = fmaxf(s1, s3);
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
      xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o));
      xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o));
    }
    const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
    /* a head whose scores so far are all −∞ (or NaN) keeps m = −∞ and adds nothing */
    const float ca = ma == -INFINITY ? 0.0f : expf(__fsub_rn(ma, na));
    const float cb = mb == -INFINITY ? 0.0f : expf(__fsub_rn(mb, nb));
    auto ex = [](float x, float m) { return x == -INFINITY || m == -INFINITY ? 0.0f : expf(__fsub_rn(x, m)); };
    const float p0 = ex(s0, na), p1 = ex(s1, nb), p2 = ex(s2, na), p3 = ex(s3, nb);
    la = fmaf(la, ca, __fadd_rn(p0, p2));
    lb = fmaf(lb, cb, __fadd_rn(p1, p3));
    ma = na, mb = nb;
    if (ca != 1.0f || cb != 1.0f)
#pragma unroll
      for (int gi = 0; gi < NG; gi++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          acc[gi][i][0] *= ca, acc[gi][i][2] *= ca;
          acc[gi][i][1] *= cb, acc[gi][i][3] *= cb;
        }
    /* p transposed through shared memory: written as (key, head pair), read as (head, key) */
    __syncwarp(); /* the previous stage's reads are done */
    ptr[warp][gq][t] = bf16_pair(p0, p1);
    ptr[warp][gq + 8][t] = bf16_pair(p2, p3);
    __syncwarp();
    const uint16_t *pv = reinterpret_cast<const uint16_t *>(&ptr[warp][0][0]); /* [key][head] */
    const uint32_t b0 = (uint32_t)pv[t * REP + gq] | (uint32_t)pv[(t + 4) * REP + gq] << 16;
    const uint32_t b1 = (uint32_t)pv[(t + 8) * REP + gq] | (uint32_t)pv[(t + 12) * REP + gq] << 16;
    /* keys t, t + 4 in the first half, t + 8, t + 12 in the second */
    const uint8_t *const rk[4] = {ra0 + (size_t)t * r.rs, ra0 + (size_t)(t + 4) * r.rs, rb0 + (size_t)t * r.rs,
                                  rb0 + (size_t)(t + 4) * r.rs};
    pt_rows_pv<NG>(rk, t, n, goff, b0, b1, acc);
    __syncwarp(); /* every lane's reads of the two halves are done */
    if (lane == 0) mbar_arrive(&empty[h0 % nh]), mbar_arrive(&empty[h1 % nh]);
  }
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) { /* a butterfly: every lane ends with the same sums */
    la += __shfl_xor_sync(0xffffffffu, la, o);
    lb += __shfl_xor_sync(0xffffffffu, lb, o);
  }
  const int h = g * REP + 2 * t;
  pt_store_acc<NG>(acc, pacc, h, splits, s, hd, gq);
  if (gq == 0) {
    smax[h * splits + s] = ma, ssum[h * splits + s] = la;
    smax[(h + 1) * splits + s] = mb, ssum[(h + 1) * splits + s] = lb;
  }
}

/* grid (nq, ceil(hd / 32)), AT_THREADS threads: head h's live splits merged, out = Σ_s e_s·pacc_s
 * / Σ_s e_s·l_s with e_s = exp(m_s − M), M the max of the m_s (a split whose m_s is −∞ adds
 * nothing); warp w sums splits w, w + 4, … for 32 consecutive dims, the four warps' sums meet in
 * a fixed order. Then att = bf16(out) and the x-prep maxima. */
__global__ void __launch_bounds__(AT_THREADS) onepass_combine_kernel(const float *smax, const float *ssum,
                                                                    const float *pacc, const int *pos_p, int window,
                                                                    at_splits sp, int hd, uint16_t *att, float *amax) {
  ck_pdl_enter();
  constexpr int NW = AT_THREADS / 32;
  __shared__ float part[NW][32];
  const int h = blockIdx.x, w = threadIdx.x >> 5, lane = threadIdx.x & 31, d = blockIdx.y * 32 + lane;
  const int splits = sp.n, live = live_splits(*pos_p, window, sp);
  const float *ms = smax + (int64_t)h * splits, *ls = ssum + (int64_t)h * splits;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < live; i += blockDim.x) m = fmaxf(m, __ldcg(ms + i));
  const float M = block_max(m);
  float tot = 0.0f;
  for (int i = threadIdx.x; i < live; i += blockDim.x) {
    const float mi = __ldcg(ms + i);
    if (mi > -INFINITY) tot += __ldcg(ls + i) * expf(__fsub_rn(mi, M));
  }
  const float total = block_sum(tot);
  float v = 0.0f;
  if (d < hd) {
    const float *src = pacc + (int64_t)h * splits * hd + d;
    for (int i = w; i < live; i += NW) {
      const float mi = __ldcg(ms + i);
      if (mi > -INFINITY) v = fmaf(__ldcg(src + (int64_t)i * hd), expf(__fsub_rn(mi, M)), v);
    }
  }
  part[w][lane] = v;
  __syncthreads();
  float out = 0.0f;
  if (w == 0 && d < hd) {
    float sum = part[0][lane];
#pragma unroll
    for (int k = 1; k < NW; k++) sum += part[k][lane];
    const uint16_t b = ck_f32_to_bf16(M == -INFINITY ? 0.0f : __fdiv_rn(sum, total));
    att[(int64_t)h * hd + d] = b;
    out = ck_bf16_to_f32(b);
  }
  amax_add(amax, out);
}
