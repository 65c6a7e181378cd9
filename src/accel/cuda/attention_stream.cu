/* Decode attention for the many rows of a batched step: one block per row and KV head streaming
 * that row's K rows, then its V rows, through a ring of staged chunks (bulk copies, ST_STAGES
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
 * but its own queries, cache and position. */
#include <atomic>

#include "attention_common.cuh"
#include "qmv_tc.cuh" /* the mbarrier and bulk-copy primitives */

#define ST_THREADS 256
#define ST_WARPS (ST_THREADS / 32)
#define ST_KPI 4                      /* keys per warp and score step */
#define ST_CHUNK (ST_KPI * ST_WARPS)  /* keys per staged chunk: one score step of every warp */
#define ST_STAGES 4                   /* chunks in flight */

/* p·v: a thread takes st_dpt(hd) dims of a group's keys; hd / st_dpt(hd) threads cover a row, so
 * ST_THREADS · st_dpt(hd) / hd groups split each chunk's keys */
__host__ __device__ constexpr int st_dpt(int hd) { return hd >= 32 ? 4 : 2; }
__host__ __device__ constexpr int st_groups(int hd) { return ST_THREADS * st_dpt(hd) / hd; }

/* Dynamic shared memory: the ring [ST_STAGES][ST_CHUNK][hd] bf16 (at the end the groups' p·v
 * partials [groups][REP][hd] floats), then floats q [REP][hd], scores and p [REP][keys], the
 * reductions' [REP][32], 1/total [REP], then the ring's mbarriers. */
__host__ __device__ constexpr size_t st_ring_bytes(int rep, int hd) {
  return (size_t)ST_STAGES * ST_CHUNK * hd * 2 > (size_t)st_groups(hd) * rep * hd * 4
             ? (size_t)ST_STAGES * ST_CHUNK * hd * 2
             : (size_t)st_groups(hd) * rep * hd * 4;
}
__host__ __device__ constexpr size_t st_floats(int rep, int hd, int64_t keys) {
  return (size_t)rep * hd + (size_t)rep * keys + (size_t)rep * 32 + (size_t)rep;
}
__host__ __device__ constexpr size_t st_bar_off(int rep, int hd, int64_t keys) {
  return (st_ring_bytes(rep, hd) + st_floats(rep, hd, keys) * 4 + 7) / 8 * 8;
}
__host__ __device__ constexpr size_t st_smem_bytes(int rep, int hd, int64_t keys) {
  return st_bar_off(rep, hd, keys) + ST_STAGES * 8;
}

/* grid (nkv, rows), ST_THREADS threads: row z's KV head g over the live keys [first, pos] of its
 * slot's cache. Items 0 … nc − 1 are the K chunks, nc … 2·nc − 1 the V chunks; item t goes to
 * stage t % ST_STAGES on its mbarrier's phase (t / ST_STAGES) & 1, and is issued once every warp
 * is done with item t − ST_STAGES. */
template <int REP, int HD>
__global__ void __launch_bounds__(ST_THREADS) stream_attention_kernel(const float *q, const uint16_t *kc,
                                                                      const uint16_t *vc, int64_t ps, float scale,
                                                                      const int *pos_p, int window, int keys,
                                                                      uint16_t *att, dk_rows rw) {
  constexpr int DPT = st_dpt(HD), TPC = HD / DPT, G = st_groups(HD), KPG = ST_CHUNK / G, NP = ST_KPI * REP;
  static_assert(ST_THREADS % TPC == 0 && G <= ST_CHUNK && ST_CHUNK % G == 0, "p·v groups");
  static_assert(NP <= 32, "one transposed warp sum per step");
  const int g = (int)blockIdx.x;
  at_row_move(rw, (int)blockIdx.y, q, kc, vc, pos_p, att);
  CK_DYNAMIC_SHARED(float4, sm4);
  unsigned char *base = reinterpret_cast<unsigned char *>(sm4);
  uint16_t *ring = reinterpret_cast<uint16_t *>(base);
  float *qs = reinterpret_cast<float *>(base + st_ring_bytes(REP, HD)), *sc = qs + REP * HD, *red = sc + (int64_t)REP * keys;
  float *inv = red + REP * 32;
  uint64_t *bar = reinterpret_cast<uint64_t *>(base + st_bar_off(REP, HD, keys));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  /* the position (and the slot) were written by the step's first copy or the last step's end,
   * long complete: the copies of keys before the newest go out before the wait */
  const int pos = *pos_p, first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int n = pos - first + 1, nc = (n + ST_CHUNK - 1) / ST_CHUNK, items = 2 * nc;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST_STAGES; s++) mbar_init(&bar[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  /* item t's rows, one bulk copy per key by warp 0's lanes */
  auto issue = [&](int t) {
    const bool isv = t >= nc;
    const int c = isv ? t - nc : t, j0 = first + c * ST_CHUNK;
    const int cnt = pos + 1 - j0 < ST_CHUNK ? pos + 1 - j0 : ST_CHUNK;
    uint64_t *b = &bar[t % ST_STAGES];
    if (lane == 0) mbar_expect(b, (uint32_t)cnt * HD * 2);
    __syncwarp();
    if (lane < cnt) {
      const int j = j0 + lane;
      const int64_t s = window > 0 ? j % ck_ring(window) : j;
      bulk_copy(ring + ((int64_t)(t % ST_STAGES) * ST_CHUNK + lane) * HD, (isv ? vc : kc) + s * ps + (int64_t)g * HD,
                HD * 2, b);
    }
  };
  const int pre = items < ST_STAGES ? items : ST_STAGES;
  if (warp == 0)
    for (int t = 0; t < pre && t < nc - 1; t++) issue(t);
  ck_pdl_enter(); /* the newest row and the queries are the predecessor's */
  if (warp == 0)
    for (int t = nc - 1 > 0 ? nc - 1 : 0; t < pre; t++) issue(t);

  const float bscale = rb(scale);
  at_stage_q(q, g, REP, HD, scale, bscale, sm4 + st_ring_bytes(REP, HD) / 16);
  __syncthreads();

  /* scores: warp w takes keys 4w … 4w + 3 of each chunk (the cluster kernel's score step) */
  const int pl = lane / (32 / NP), pu = pl / REP, pr = pl % REP, pw = (lane & (32 / NP - 1)) == 0;
  float mxl = -INFINITY;
  for (int c = 0; c < nc; c++) {
    mbar_wait(&bar[c % ST_STAGES], (uint32_t)(c / ST_STAGES) & 1u);
    const int k0 = c * ST_CHUNK + ST_KPI * warp; /* this warp's first key, from `first` */
    if (k0 < n) {
      const uint16_t *stage = ring + (int64_t)(c % ST_STAGES) * ST_CHUNK * HD;
      const uint16_t *kp[ST_KPI];
#pragma unroll
      for (int u = 0; u < ST_KPI; u++) kp[u] = stage + (int64_t)(ST_KPI * warp + (k0 + u < n ? u : 0)) * HD;
      float dk[ST_KPI][REP];
      key_dots<REP, ST_KPI, true>(kp, qs, HD, (HD + 255) / 256, lane, dk);
      const float v = at_step_score<REP, ST_KPI>(dk, lane);
      if (k0 + pu < n) {
        if (pw) sc[(int64_t)pr * keys + k0 + pu] = v;
        mxl = fmaxf(mxl, v);
      }
    }
    __syncthreads(); /* every warp is done with the stage */
    if (warp == 0 && c + ST_STAGES < items) issue(c + ST_STAGES);
  }

  /* the softmax over the row's keys (one block: its max and total are the row's) */
  float mx[REP], sum[REP];
#pragma unroll
  for (int r = 0; r < REP; r++) mx[r] = r == pr ? mxl : -INFINITY;
  block_reduce_n_in<REP>(mx, ck_op_max(), -INFINITY, red);
#pragma unroll
  for (int r = 0; r < REP; r++) {
    sum[r] = 0.0f;
    for (int j = threadIdx.x; j < n; j += ST_THREADS) sum[r] += expf(__fsub_rn(sc[(int64_t)r * keys + j], mx[r]));
  }
  block_reduce_n_in<REP>(sum, ck_op_add(), 0.0f, red);
  if (threadIdx.x < REP) {
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < REP; r++)
      if (r == (int)threadIdx.x) t = sum[r];
    inv[threadIdx.x] = __fdiv_rn(1.0f, t);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < REP * n; i += ST_THREADS) {
    const int r = i / n, j = i - r * n;
    float m = 0.0f;
#pragma unroll
    for (int rr = 0; rr < REP; rr++)
      if (rr == r) m = mx[rr];
    sc[(int64_t)r * keys + j] = rb(__fmul_rn(expf(__fsub_rn(sc[(int64_t)r * keys + j], m)), inv[r]));
  }
  __syncthreads();

  /* Σ p·v: thread t owns dims d0 … d0 + DPT − 1 of group t / TPC's keys (KPG of each chunk) */
  const int grp = (int)threadIdx.x / TPC, d0 = ((int)threadIdx.x % TPC) * DPT;
  float acc[REP][DPT];
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;
  for (int c = 0; c < nc; c++) {
    const int t = nc + c;
    mbar_wait(&bar[t % ST_STAGES], (uint32_t)(t / ST_STAGES) & 1u);
    const uint16_t *stage = ring + (int64_t)(t % ST_STAGES) * ST_CHUNK * HD;
    const int kb = c * ST_CHUNK + grp * KPG; /* the group's first key of the chunk, from `first` */
    float v[KPG][DPT];
#pragma unroll
    for (int u = 0; u < KPG; u++) load_n_shared(stage + (int64_t)(grp * KPG + u) * HD + d0, DPT, v[u]);
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
    if (warp == 0 && t + ST_STAGES < items) issue(t + ST_STAGES);
  }
  /* every copy has landed and been read: the ring holds the groups' partials, added in order */
  float *part = reinterpret_cast<float *>(ring);
#pragma unroll
  for (int r = 0; r < REP; r++)
#pragma unroll
    for (int i = 0; i < DPT; i++) part[((int64_t)grp * REP + r) * HD + d0 + i] = acc[r][i];
  __syncthreads();
  for (int o = threadIdx.x; o < REP * HD; o += ST_THREADS) {
    float s = part[o];
#pragma unroll
    for (int b = 1; b < G; b++) s += part[(int64_t)b * REP * HD + o];
    att[(int64_t)g * REP * HD + o] = ck_f32_to_bf16(s);
  }
}

extern "C" int dk_attention_stream_fits(int nq, int nkv, int hd, dk_kv_layout kv, int window, int64_t keys) {
  const int rep = nkv > 0 ? nq / nkv : 0;
  return nkv > 0 && nq % nkv == 0 && (rep == 1 || rep == 2 || rep == 4 || rep == 8) &&
         (hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256 || hd == 512) && kv.vr == 0 && kv.kfmt == 0 && kv.ps >= (int64_t)nkv * hd &&
         kv.ps % 8 == 0 && keys >= 1 && keys <= (1 << 20) && (window <= 0 || keys >= window) &&
         st_smem_bytes(rep, hd, keys) <= 200 * 1024;
}

template <int REP, int HD>
static cudaError_t launch_stream(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int64_t ps,
                                 float scale, const int *pos, int window, int keys, uint16_t *att, const dk_rows &rw,
                                 int nrows, cudaStream_t st) {
  const size_t smem = st_smem_bytes(REP, HD, keys);
  auto fn = stream_attention_kernel<REP, HD>;
  static std::atomic<size_t> allowed{48 * 1024};
  if (smem > allowed.load()) {
    if (cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return e;
    allowed.store(smem);
  }
  return ck_launch(fn, dim3((unsigned)nkv, (unsigned)nrows), ST_THREADS, smem, st, q, kc, vc, ps, scale, pos, window,
                   keys, att, rw);
}

template <int REP>
static cudaError_t launch_stream_hd(const float *q, const uint16_t *kc, const uint16_t *vc, int nkv, int hd,
                                    int64_t ps, float scale, const int *pos, int window, int keys, uint16_t *att,
                                    const dk_rows &rw, int nrows, cudaStream_t st) {
  if (hd == 16) return launch_stream<REP, 16>(q, kc, vc, nkv, ps, scale, pos, window, keys, att, rw, nrows, st);
  if (hd == 32) return launch_stream<REP, 32>(q, kc, vc, nkv, ps, scale, pos, window, keys, att, rw, nrows, st);
  if (hd == 64) return launch_stream<REP, 64>(q, kc, vc, nkv, ps, scale, pos, window, keys, att, rw, nrows, st);
  if (hd == 128) return launch_stream<REP, 128>(q, kc, vc, nkv, ps, scale, pos, window, keys, att, rw, nrows, st);
  if (hd == 256) return launch_stream<REP, 256>(q, kc, vc, nkv, ps, scale, pos, window, keys, att, rw, nrows, st);
  return launch_stream<REP, 512>(q, kc, vc, nkv, ps, scale, pos, window, keys, att, rw, nrows, st);
}

extern "C" int dk_attention_stream_rows(const float *q, const uint16_t *kc, const uint16_t *vc, int nq, int nkv,
                                        int hd, dk_kv_layout kv, float scale, const int *pos, int window,
                                        int64_t keys, uint16_t *att, const dk_rows *rows, int nrows, void *stream) {
  if (!q || !kc || !vc || !att || !pos || !rows || !rows->slot || nrows < 1 || nrows > 65535 ||
      !dk_attention_stream_fits(nq, nkv, hd, kv, window, keys))
    return (int)cudaErrorInvalidValue;
  const int rep = nq / nkv, k = (int)keys;
  cudaStream_t st = (cudaStream_t)stream;
  switch (rep) {
  case 1: return (int)launch_stream_hd<1>(q, kc, vc, nkv, hd, kv.ps, scale, pos, window, k, att, *rows, nrows, st);
  case 2: return (int)launch_stream_hd<2>(q, kc, vc, nkv, hd, kv.ps, scale, pos, window, k, att, *rows, nrows, st);
  case 4: return (int)launch_stream_hd<4>(q, kc, vc, nkv, hd, kv.ps, scale, pos, window, k, att, *rows, nrows, st);
  default: return (int)launch_stream_hd<8>(q, kc, vc, nkv, hd, kv.ps, scale, pos, window, k, att, *rows, nrows, st);
  }
}
