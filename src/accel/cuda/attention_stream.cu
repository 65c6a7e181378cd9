/* Decode attention for the many rows of a batched step: one block per row and KV head streaming
 * that row's K rows, then its V rows, through a ring of staged chunks (bulk copies, 2 or 4
 * chunks of ST_CHUNK keys in flight), so that the memory pipe never waits on the block's
 * arithmetic. The one-launch cluster kernel (attention_cluster.cu) suits a few rows: its
 * clusters split a row's keys over 16 blocks, each staging its whole share before any
 * arithmetic and meeting the others at three cluster barriers. With 16 and more rows there are
 * enough (row, KV head) pairs to fill the device without splitting the keys, and a block that
 * keeps copies in flight while it computes reads the rows' K and V at a higher rate.
 *
 * The rounding points are the reference path's, as in attention.cu: q·bf16(scale) → bf16, scores
 * → bf16 (the scores kernel's per-key dot products and warp sums), softmax in float32 with
 * p = bf16(exp(s − M) / total), Σ p·v in float32 → bf16. The p·v sums are grouped by key range
 * (st_groups(hd) groups, each adding its keys in order, the groups added in order): a
 * result may differ from the cluster kernel's in a last bit. A row's result depends on nothing
 * but its own queries, cache and position.
 *
 * The split form (a sliding layer's rows below 16, too few (row, KV head) pairs to fill the
 * device): a cluster of ST_SPLIT blocks per row and KV head, block r streaming chunks r,
 * r + ST_SPLIT, …; each block's maximum and total of exp(s − its max) meet at one cluster barrier
 * (M = the largest, total = Σ l·exp(m − M) in rank order, as the cluster kernel), and the blocks'
 * p·v partials at a second, block r completing its share of the outputs in rank order. */
#include <atomic>

#include "attention_common.cuh"
#include "qmv_tc.cuh" /* the mbarrier and bulk-copy primitives */

#define ST_THREADS 256
#define ST_WARPS (ST_THREADS / 32)
#define ST_KPI 4                     /* keys per warp and score step */
#define ST_CHUNK (ST_KPI * ST_WARPS) /* keys per staged chunk: one score step of every warp */
#define ST_SMEM_SCORES (32 * 1024) /* a row's scores beyond this many bytes live in global scratch */
#define ST_SPLIT 4                 /* the split form's blocks per row and KV head */

#if !defined(CK_EMULATION) || defined(EMU_CLUSTER)
#include <cooperative_groups.h>
#define ST_HAS_SPLIT 1
#else
#define ST_HAS_SPLIT 0 /* (the plain emulation has no clusters) */
#endif

/* p·v: a thread takes st_dpt(hd) dims of a group's keys; hd / st_dpt(hd) threads cover a row, so
 * ST_THREADS · st_dpt(hd) / hd groups split each chunk's keys */
__host__ __device__ constexpr int st_dpt(int hd) { return hd >= 32 ? 4 : 2; }
__host__ __device__ constexpr int st_groups(int hd) { return ST_THREADS * st_dpt(hd) / hd; }

/* The kernel's two forms: plain K and V with the scores in shared memory (the sliding rings), and
 * the full form for K from V or scores in global scratch (a full layer's capacity), whose staged
 * rows are longer (so fewer stages at head dim 512) and whose layout and pitch are run-time. */
__host__ __device__ constexpr int st_stages(int hd, bool full) { return full && hd >= 512 ? 2 : 4; }

/* A launch's shared-memory plan. A staged key row is rl = hd + 2·vr elements: the K row, and for
 * V with K from V (kv_layout.h) the K row (V at the unmoved dims) and the tail of V's moved dims.
 * Dynamic shared memory: the ring [stages][ST_CHUNK][rl] bf16 (at the end the groups' p·v
 * partials [groups][rep][hd] floats), then floats q [rep][hd] (the split form's partials after
 * the scores), the scores and p [rep][keys] unless they live in global scratch, the reductions'
 * [rep][32], 1/total [rep], the split form's exchange [2][rep]; then the mbarriers. */
struct st_plan {
  bool full, gscores;
  int64_t ring, floats_off, bar_off, bytes;
};
static st_plan st_plan_for(int rep, int hd, int vr, int64_t keys) {
  st_plan P;
  P.gscores = (int64_t)rep * keys * 4 > ST_SMEM_SCORES;
  P.full = P.gscores || vr > 0;
  const int64_t stage = (int64_t)ST_CHUNK * (hd + 2 * vr) * 2, part = (int64_t)st_groups(hd) * rep * hd * 4;
  const int stages = st_stages(hd, P.full);
  P.ring = stages * stage > part ? stages * stage : part;
  P.floats_off = P.ring;
  const int64_t floats = (int64_t)rep * hd + (P.gscores ? 0 : (int64_t)rep * keys) + (int64_t)rep * 32 + 3 * rep;
  P.bar_off = (P.floats_off + floats * 4 + 7) / 8 * 8;
  P.bytes = P.bar_off + stages * 8;
  return P;
}

struct StArgs {
  const float *q;
  const uint16_t *kc, *vc; /* with K from V one array: vc == kc */
  int64_t ps;              /* elements between positions' rows */
  int vr;                  /* K from V: moved pairs per half (0: plain) */
  float scale;
  const int *pos;
  int window;
  int64_t keys;  /* the most keys a row sees: the scores' pitch */
  float *gsc;    /* (full form) the scores: row z's head h at gsc + (z·nq + h)·keys (NULL: shared) */
  uint16_t *att;
  dk_rows rw;
  int64_t floats_off, bar_off;
};

/* grid (nkv·CL, rows), ST_THREADS threads: row z's KV head g over the live keys [first, pos] of its
 * slot's cache, with CL > 1 block `rank` of g's cluster over chunks rank, rank + CL, … of them.
 * Items 0 … nc − 1 are the block's K chunks, nc … 2·nc − 1 its V chunks; item t goes to stage
 * t % stages on its mbarrier's phase (t / stages) & 1, and is issued once every warp is done with
 * item t − stages. */
template <int REP, int HD, bool FULL, int CL>
__device__ __forceinline__ void stream_attention_body(const StArgs &a) {
  constexpr int DPT = st_dpt(HD), TPC = HD / DPT, G = st_groups(HD), KPG = ST_CHUNK / G, NP = ST_KPI * REP;
  static_assert(ST_THREADS % TPC == 0 && G <= ST_CHUNK && ST_CHUNK % G == 0, "p·v groups");
  static_assert(NP <= 32, "one transposed warp sum per step");
  static_assert(CL == 1 || !FULL, "the split form is plain");
  constexpr int S = st_stages(HD, FULL);
  const int g = (int)blockIdx.x / CL, rank = (int)blockIdx.x % CL, z = (int)blockIdx.y, nkv = (int)gridDim.x / CL;
  const int vr = FULL ? a.vr : 0;
  const float *q = a.q;
  const uint16_t *kc = a.kc, *vc = a.vc;
  const int *pos_p = a.pos;
  uint16_t *att = a.att;
  at_row_move(a.rw, z, q, kc, vc, pos_p, att);
  const int64_t RL = FULL ? HD + 2 * vr : HD, keys = a.keys;
  CK_DYNAMIC_SHARED(float4, sm4);
  unsigned char *base = reinterpret_cast<unsigned char *>(sm4);
  uint16_t *ring = reinterpret_cast<uint16_t *>(base);
  float *qs = reinterpret_cast<float *>(base + a.floats_off);
  float *gsc = FULL ? a.gsc : NULL;
  float *sc = gsc ? gsc + ((int64_t)z * nkv + g) * REP * keys : qs + REP * HD;
  float *red = qs + REP * HD + (gsc ? 0 : REP * keys), *inv = red + REP * 32;
  uint64_t *bar = reinterpret_cast<uint64_t *>(base + a.bar_off);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  /* the position (and the slot) were written by the step's first copy or the last step's end,
   * long complete: the copies of keys before the newest go out before the wait */
  const int pos = *pos_p, window = a.window, first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int n = pos - first + 1, nall = (n + ST_CHUNK - 1) / ST_CHUNK;
  /* this block's chunks (all of them, or every CL-th from its rank) and item t's chunk */
  const int nc = CL == 1 ? nall : nall > rank ? (nall - rank + CL - 1) / CL : 0, items = 2 * nc;
  auto chunk = [&](int t) { return rank + (t < nc ? t : t - nc) * CL; };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; s++) mbar_init(&bar[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* item t's rows by warp 0's lanes: a bulk copy per key of its K row, and for V its V row or,
   * with K from V, its K row and its tail */
  auto issue = [&](int t) {
    const bool isv = t >= nc;
    const int c = chunk(t), j0 = first + c * ST_CHUNK;
    const int cnt = pos + 1 - j0 < ST_CHUNK ? pos + 1 - j0 : ST_CHUNK;
    uint64_t *b = &bar[t % S];
    const bool tail = isv && vr > 0;
    if (lane == 0) mbar_expect(b, (uint32_t)cnt * (HD + (tail ? 2 * vr : 0)) * 2);
    __syncwarp();
    if (lane < cnt) {
      const int j = j0 + lane;
      const int64_t s = window > 0 ? j % ck_ring(window) : j;
      uint16_t *dst = ring + ((int64_t)(t % S) * ST_CHUNK + lane) * RL;
      bulk_copy(dst, (isv && !tail ? vc : kc) + s * a.ps + (int64_t)g * HD, HD * 2, b);
      if (tail) bulk_copy(dst + HD, kc + s * a.ps + (int64_t)nkv * HD + (int64_t)2 * vr * g, 4 * vr, b);
    }
  };
  const int pre = items < S ? items : S;
  int t0 = 0; /* (warp 0's) */
  if (warp == 0)
    for (; t0 < pre && t0 < nc && chunk(t0) < nall - 1; t0++) issue(t0);
  ck_pdl_enter(); /* the newest row and the queries are the predecessor's */
  if (warp == 0)
    for (; t0 < pre; t0++) issue(t0);

  const float bscale = rb(a.scale);
  at_stage_q(q, g, REP, HD, a.scale, bscale, reinterpret_cast<float4 *>(qs));
  __syncthreads();

  /* scores: warp w takes keys 4w … 4w + 3 of each chunk (the cluster kernel's score step) */
  const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
  float mxl = -INFINITY;
  for (int c = 0; c < nc; c++) {
    mbar_wait(&bar[c % S], (uint32_t)(c / S) & 1u);
    const int k0 = chunk(c) * ST_CHUNK + ST_KPI * warp; /* this warp's first key, from `first` */
    if (k0 < n) {
      const uint16_t *stage = ring + (int64_t)(c % S) * ST_CHUNK * RL;
      const uint16_t *kp[ST_KPI];
#pragma unroll
      for (int u = 0; u < ST_KPI; u++) kp[u] = stage + (int64_t)(ST_KPI * warp + (k0 + u < n ? u : 0)) * RL;
      float dk[ST_KPI][REP];
      key_dots<REP, ST_KPI, true>(kp, qs, HD, (HD + 255) / 256, lane, dk);
      const float v = at_step_score<REP, ST_KPI>(dk, lane);
      if (k0 + pu < n) {
        if (pw) sc[(int64_t)pr * keys + k0 + pu] = v;
        mxl = fmaxf(mxl, v);
      }
    }
    __syncthreads(); /* every warp is done with the stage */
    if (warp == 0 && c + S < items) issue(c + S);
  }

  /* the softmax over the row's keys (one block: its max and total are the row's; split: the
   * cluster's, from each block's) */
  float mx[REP], sum[REP];
#pragma unroll
  for (int r = 0; r < REP; r++) mx[r] = r == pr ? mxl : -INFINITY;
  block_reduce_n_in<REP>(mx, ck_op_max(), -INFINITY, red);
  /* the block's keys: index i < nk, key kj(i) from `first` (past n: none) */
  const int nk = CL == 1 ? n : nc * ST_CHUNK;
  auto kj = [&](int i) { return CL == 1 ? i : chunk(i / ST_CHUNK) * ST_CHUNK + i % ST_CHUNK; };
#pragma unroll
  for (int r = 0; r < REP; r++) {
    sum[r] = 0.0f;
    if (CL == 1 || mx[r] > -INFINITY)
      for (int i = threadIdx.x; i < nk; i += ST_THREADS) {
        const int j = kj(i);
        if (CL == 1 || j < n) sum[r] += expf(__fsub_rn(sc[(int64_t)r * keys + j], mx[r]));
      }
  }
  block_reduce_n_in<REP>(sum, ck_op_add(), 0.0f, red);
#if ST_HAS_SPLIT
  if constexpr (CL > 1) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    float *xch = inv + REP; /* [2][REP]: this block's maxima and totals */
    if (threadIdx.x == 0)
#pragma unroll
      for (int r = 0; r < REP; r++) xch[r] = mx[r], xch[REP + r] = sum[r];
    cl.sync();
    /* each head's M and total over the blocks, in rank order */
    if (threadIdx.x < REP) {
      const int r = (int)threadIdx.x;
      float M = -INFINITY, t = 0.0f;
      for (int b = 0; b < CL; b++) M = fmaxf(M, cl.map_shared_rank(xch, b)[r]);
      for (int b = 0; b < CL; b++) {
        const float mb = cl.map_shared_rank(xch, b)[r], lb = cl.map_shared_rank(xch, b)[REP + r];
        if (mb > -INFINITY) t = fmaf(lb, expf(__fsub_rn(mb, M)), t);
      }
      red[r] = M, inv[r] = __fdiv_rn(1.0f, t);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < REP; r++) mx[r] = red[r];
  }
#endif
  if (CL == 1 && threadIdx.x < REP) {
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < REP; r++)
      if (r == (int)threadIdx.x) t = sum[r];
    inv[threadIdx.x] = __fdiv_rn(1.0f, t);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < REP * nk; i += ST_THREADS) {
    const int r = i / nk, j = kj(i - r * nk);
    if (CL > 1 && j >= n) continue;
    float m = 0.0f;
#pragma unroll
    for (int rr = 0; rr < REP; rr++)
      if (rr == r) m = mx[rr];
    sc[(int64_t)r * keys + j] = rb(__fmul_rn(expf(__fsub_rn(sc[(int64_t)r * keys + j], m)), inv[r]));
  }
  __syncthreads();

  /* Σ p·v: thread t owns dims d0 … d0 + DPT − 1 of group t / TPC's keys (KPG of each chunk), read
   * from the staged V row, or with K from V from the K row (unmoved dims) or the tail (moved) */
  const int grp = (int)threadIdx.x / TPC, d0 = ((int)threadIdx.x % TPC) * DPT;
  int voff = d0;
  if (vr > 0) {
    const int h = HD / 2, m = d0 < h ? d0 : d0 - h;
    if (m < vr) voff = HD + (d0 < h ? m : vr + m);
  }
  float acc[REP][DPT];
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;
  for (int c = 0; c < nc; c++) {
    const int t = nc + c;
    mbar_wait(&bar[t % S], (uint32_t)(t / S) & 1u);
    const uint16_t *stage = ring + (int64_t)(t % S) * ST_CHUNK * RL + voff;
    const int kb = chunk(c) * ST_CHUNK + grp * KPG; /* the group's first key of the chunk, from `first` */
    float v[KPG][DPT];
#pragma unroll
    for (int u = 0; u < KPG; u++) load_n_shared(stage + (int64_t)(grp * KPG + u) * RL, DPT, v[u]);
#pragma unroll
    for (int u = 0; u < KPG; u++) {
      if (kb + u >= n) break;
#pragma unroll
      for (int r = 0; r < REP; r++) {
        const float p = sc[(int64_t)r * keys + kb + u];
#pragma unroll
        for (int i = 0; i < DPT; i++) acc[r][i] = fmaf(p, v[u][i], acc[r][i]);
      }
    }
    __syncthreads();
    if (warp == 0 && t + S < items) issue(t + S);
  }
  /* every copy has landed and been read: the ring holds the groups' partials, added in order */
  float *part = reinterpret_cast<float *>(ring);
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) part[((int64_t)grp * REP + r) * HD + d0 + i] = acc[r][i];
  __syncthreads();
  if constexpr (CL == 1) {
    for (int o = threadIdx.x; o < REP * HD; o += ST_THREADS) {
      float s = part[o];
#pragma unroll
      for (int b = 1; b < G; b++) s += part[(int64_t)b * REP * HD + o];
      att[(int64_t)g * REP * HD + o] = ck_f32_to_bf16(s);
    }
  } else {
#if ST_HAS_SPLIT
    /* the block's partials where q was, then block `rank` completes its share of the outputs,
     * adding the blocks' partials in rank order */
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    for (int o = threadIdx.x; o < REP * HD; o += ST_THREADS) {
      float s = part[o];
#pragma unroll
      for (int b = 1; b < G; b++) s += part[(int64_t)b * REP * HD + o];
      qs[o] = s;
    }
    cl.sync();
    constexpr int PER = (REP * HD + CL - 1) / CL;
    const int o_end = (rank + 1) * PER < REP * HD ? (rank + 1) * PER : REP * HD;
    for (int o = rank * PER + (int)threadIdx.x; o < o_end; o += ST_THREADS) {
      float s = 0.0f;
#pragma unroll
      for (int b = 0; b < CL; b++) s += *cl.map_shared_rank(qs + o, b);
      att[(int64_t)g * REP * HD + o] = ck_f32_to_bf16(s);
    }
    cl.sync(); /* no block leaves while another still reads its partials */
#endif
  }
}

template <int REP, int HD, bool FULL>
__global__ void __launch_bounds__(ST_THREADS) stream_attention_kernel(StArgs a) {
  stream_attention_body<REP, HD, FULL, 1>(a);
}

#if ST_HAS_SPLIT
template <int REP, int HD>
__global__ void __cluster_dims__(ST_SPLIT, 1, 1) __launch_bounds__(ST_THREADS) stream_attention_split_kernel(StArgs a) {
  stream_attention_body<REP, HD, false, ST_SPLIT>(a);
}
#endif

extern "C" int dk_attention_stream_fits(int nq, int nkv, int hd, dk_kv_layout kv, int window, int64_t keys,
                                        int gscores) {
  const int rep = nkv > 0 ? nq / nkv : 0;
  if (!(nkv > 0 && nq % nkv == 0 && (rep == 1 || rep == 2 || rep == 4 || rep == 8) &&
        (hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256 || hd == 512) && kv.kfmt == 0 && kv.vr >= 0 &&
        kv.vr % 8 == 0 && 2 * kv.vr <= hd && (kv.vr == 0 || hd % 16 == 0) &&
        kv.ps >= (int64_t)nkv * (hd + 2 * kv.vr) && kv.ps % 8 == 0 && keys >= 1 && keys <= (1 << 30) &&
        (window <= 0 || keys >= window)))
    return 0;
  const st_plan P = st_plan_for(rep, hd, kv.vr, keys);
  return (!P.gscores || gscores) && P.bytes <= 200 * 1024;
}

template <int REP, int HD, bool FULL>
static cudaError_t launch_stream(const StArgs &a, int nkv, int nrows, size_t smem, cudaStream_t st) {
  auto fn = stream_attention_kernel<REP, HD, FULL>;
  static std::atomic<size_t> allowed{48 * 1024};
  if (smem > allowed.load()) {
    if (cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return e;
    allowed.store(smem);
  }
  return ck_launch(fn, dim3((unsigned)nkv, (unsigned)nrows), ST_THREADS, smem, st, a);
}

#if ST_HAS_SPLIT
template <int REP, int HD>
static cudaError_t launch_split(const StArgs &a, int nkv, int nrows, size_t smem, cudaStream_t st) {
  auto fn = stream_attention_split_kernel<REP, HD>;
  static std::atomic<size_t> allowed{48 * 1024};
  if (smem > allowed.load()) {
    if (cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return e;
    allowed.store(smem);
  }
  return ck_launch(fn, dim3((unsigned)(nkv * ST_SPLIT), (unsigned)nrows), ST_THREADS, smem, st, a);
}
template <int REP>
static cudaError_t launch_split_hd(const StArgs &a, int hd, int nkv, int nrows, size_t smem, cudaStream_t st) {
  switch (hd) {
  case 16: return launch_split<REP, 16>(a, nkv, nrows, smem, st);
  case 32: return launch_split<REP, 32>(a, nkv, nrows, smem, st);
  case 64: return launch_split<REP, 64>(a, nkv, nrows, smem, st);
  case 128: return launch_split<REP, 128>(a, nkv, nrows, smem, st);
  case 256: return launch_split<REP, 256>(a, nkv, nrows, smem, st);
  default: return launch_split<REP, 512>(a, nkv, nrows, smem, st);
  }
}
#endif

template <int REP, bool FULL>
static cudaError_t launch_stream_hd(const StArgs &a, int hd, int nkv, int nrows, size_t smem, cudaStream_t st) {
  switch (hd) {
  case 16: return launch_stream<REP, 16, FULL>(a, nkv, nrows, smem, st);
  case 32: return launch_stream<REP, 32, FULL>(a, nkv, nrows, smem, st);
  case 64: return launch_stream<REP, 64, FULL>(a, nkv, nrows, smem, st);
  case 128: return launch_stream<REP, 128, FULL>(a, nkv, nrows, smem, st);
  case 256: return launch_stream<REP, 256, FULL>(a, nkv, nrows, smem, st);
  default: return launch_stream<REP, 512, FULL>(a, nkv, nrows, smem, st);
  }
}
template <int REP>
static cudaError_t launch_stream_rep(const StArgs &a, bool full, int hd, int nkv, int nrows, size_t smem,
                                     cudaStream_t st) {
  return full ? launch_stream_hd<REP, true>(a, hd, nkv, nrows, smem, st)
              : launch_stream_hd<REP, false>(a, hd, nkv, nrows, smem, st);
}

extern "C" int dk_attention_stream_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv,
                                        int hd, dk_kv_layout kv, float scale, const int *pos, int window,
                                        int64_t keys, float *scores, uint16_t *att, const dk_rows *rows, int nrows,
                                        void *stream) {
  if (!q || !kc || !vc || !att || !pos || !rows || !rows->slot || nrows < 1 || nrows > 65535 ||
      !dk_attention_stream_fits(nq, nkv, hd, kv, window, keys, scores != NULL) || (kv.vr > 0 && vc != kc))
    return (int)cudaErrorInvalidValue;
  const int rep = nq / nkv;
  const st_plan P = st_plan_for(rep, hd, kv.vr, keys);
  StArgs a = {};
  a.q = q, a.kc = kc, a.vc = vc, a.ps = kv.ps, a.vr = kv.vr, a.scale = scale, a.pos = pos, a.window = window;
  a.keys = keys, a.gsc = P.gscores ? scores : NULL, a.att = att, a.rw = *rows;
  a.floats_off = P.floats_off, a.bar_off = P.bar_off;
  cudaStream_t st = (cudaStream_t)stream;
  const size_t smem = (size_t)P.bytes;
  switch (rep) {
  case 1: return (int)launch_stream_rep<1>(a, P.full, hd, nkv, nrows, smem, st);
  case 2: return (int)launch_stream_rep<2>(a, P.full, hd, nkv, nrows, smem, st);
  case 4: return (int)launch_stream_rep<4>(a, P.full, hd, nkv, nrows, smem, st);
  default: return (int)launch_stream_rep<8>(a, P.full, hd, nkv, nrows, smem, st);
  }
}

extern "C" int dk_attention_stream_split_fits(int nq, int nkv, int hd, dk_kv_layout kv, int window, int64_t keys) {
  return ST_HAS_SPLIT && dk_attention_stream_fits(nq, nkv, hd, kv, window, keys, 0) &&
         !st_plan_for(nq / nkv, hd, kv.vr, keys).full;
}

extern "C" int dk_attention_stream_split_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv,
                                              int hd, dk_kv_layout kv, float scale, const int *pos, int window,
                                              int64_t keys, uint16_t *att, const dk_rows *rows, int nrows,
                                              void *stream) {
  if (!q || !kc || !vc || !att || !pos || !rows || !rows->slot || nrows < 1 || nrows > 65535 ||
      (int64_t)nkv * ST_SPLIT > 0x7fffffff || !dk_attention_stream_split_fits(nq, nkv, hd, kv, window, keys))
    return (int)cudaErrorInvalidValue;
#if ST_HAS_SPLIT
  const int rep = nq / nkv;
  const st_plan P = st_plan_for(rep, hd, kv.vr, keys);
  StArgs a = {};
  a.q = q, a.kc = kc, a.vc = vc, a.ps = kv.ps, a.vr = 0, a.scale = scale, a.pos = pos, a.window = window;
  a.keys = keys, a.gsc = NULL, a.att = att, a.rw = *rows;
  a.floats_off = P.floats_off, a.bar_off = P.bar_off;
  cudaStream_t st = (cudaStream_t)stream;
  const size_t smem = (size_t)P.bytes;
  switch (rep) {
  case 1: return (int)launch_split_hd<1>(a, hd, nkv, nrows, smem, st);
  case 2: return (int)launch_split_hd<2>(a, hd, nkv, nrows, smem, st);
  case 4: return (int)launch_split_hd<4>(a, hd, nkv, nrows, smem, st);
  default: return (int)launch_split_hd<8>(a, hd, nkv, nrows, smem, st);
  }
#else
  (void)scale, (void)stream;
  return (int)cudaErrorInvalidValue;
#endif
}

CK_TIMELINE_SETTER(ck_tl_attention_stream)
