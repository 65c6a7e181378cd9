/* The MoE block's kernels (moe_kernels.h): its three norms, the router's top-k and weights,
 * the weighted sum of the experts' outputs with its norm, and the prompt pass's grouping of
 * choices by expert. Each reproduces reference.c moe_block's rounding points: bf16 after every
 * op, float32 reductions; products rounded before an add use __fmul_rn (no FMA the reference
 * does not have). The products themselves are the mat-vec's expert mode (ck_qmv_experts). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ck_block.cuh"
#include "ck_device.cuh"
#include "ck_launch.cuh"
#include "moe_kernels.h"
#include "qkv_post.cuh" /* ysum */

#define MOE_THREADS 256

/* One block per row: the router's and the experts' input norms of the residual (one sum of
 * squares for both); block 0 also zeroes zero[0 … nzero) (the maxima a later product's GeGLU
 * epilogue raises). The step's one row runs over a cluster (moe_cluster.cu). */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_norms_kernel(const float *h, const float *w_router, const float *w_pre2, int H, float eps, uint16_t *xr,
                     uint16_t *xe, float *zero, int nzero) {
  ck_pdl_enter();
  const int64_t t = blockIdx.x;
  const float *hr = h + t * H;
  if (t == 0)
    for (int i = threadIdx.x; i < nzero; i += blockDim.x) zero[i] = 0.0f;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss = fmaf(hr[i], hr[i], ss);
  ss = block_sum(ss);
  const float r = 1.0f / sqrtf(ss / (float)H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float hn = rb(__fmul_rn(hr[i], r));
    xr[t * H + i] = ck_f32_to_bf16(__fmul_rn(hn, w_router[i]));
    xe[t * H + i] = ck_f32_to_bf16(__fmul_rn(hn, w_pre2[i]));
  }
}

static bool prep1_ok(const dk_moe_prep1 &p) {
  return p.xp && p.xexp && (p.xmode == 1 || (p.xmode == 2 && p.e == 0 && p.gs == 0)) && p.e >= -126 && p.e <= 127 &&
         (p.gs == 0 || (p.xs && p.gs % 32 == 0 && p.gs <= 256 && (p.gs & (p.gs - 1)) == 0));
}

extern "C" int dk_moe_norms(const float *h, const float *w_router, const float *w_pre2, int T, int H, float eps,
                            uint16_t *xr, uint16_t *xe, float *zero, int nzero, const dk_moe_preps *preps,
                            void *stream) {
  if (T < 1 || H < 1 || nzero < 0 || (nzero && !zero)) return (int)cudaErrorInvalidValue;
  if (preps && (T != 1 || H % 32 || !dk_moe_fits_cluster(H) || !prep1_ok(preps->router) ||
                !prep1_ok(preps->experts) || (preps->router.gs && H % preps->router.gs) ||
                (preps->experts.gs && H % preps->experts.gs)))
    return (int)cudaErrorInvalidValue;
  if (T == 1 && dk_moe_fits_cluster(H))
    return dk_moe_norms_cluster(h, w_router, w_pre2, H, eps, xr, xe, zero, nzero, preps, stream);
  return (int)ck_launch(moe_norms_kernel, (unsigned)T, MOE_THREADS, 0, (cudaStream_t)stream, h, w_router, w_pre2, H,
                        eps, xr, xe, zero, nzero);
}

/* One warp per row. Each round takes what the reference's scan over the unused experts takes:
 * the first unused one when its score is NaN (nothing compares greater), else the greatest
 * score, the lower index on ties. Without a NaN among the scores (the case of every real step)
 * and E ≤ 512 each lane keeps its experts' scores in registers and a round is one 64-bit max over the warp
 * of (score, −index) keys (−0 counted as +0, as the scan's `>` does); with one, each lane's first
 * unused index and best non-NaN score, reduced over the warp. Lane 0 then makes the weights in
 * k order, as the reference sums them. Dynamic shared memory: E scores, E used flags. */
#define ROUTE_PER_LANE 16 /* E ≤ 512 */
__device__ __forceinline__ unsigned long long route_key(float v, int e) {
  uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* monotonic in v */
  return ((unsigned long long)u << 32) | (uint32_t)(0x7fffffff - e);
}

__global__ void moe_route_kernel(const float *s, int64_t lds, int ks, int64_t kstride, int E, int K, const float *pes,
                                 int *ids, float *wts) {
  ck_pdl_enter();
  CK_DYNAMIC_SHARED(float, sc);
  int *used = reinterpret_cast<int *>(sc + E);
  __shared__ int sel[32];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x;
  bool nan = false;
  for (int e = lane; e < E; e += 32) {
    sc[e] = rb(ysum(s + t * lds + e, ks, kstride));
    used[e] = 0;
    nan |= isnan(sc[e]);
  }
  __syncwarp();
  if (E <= 32 * ROUTE_PER_LANE && !__any_sync(0xffffffffu, nan)) {
    float mine[ROUTE_PER_LANE];
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) mine[j] = lane + 32 * j < E ? sc[lane + 32 * j] : 0.0f;
    unsigned taken = 0; /* bit j: expert lane + 32·j chosen */
    for (int k = 0; k < K; k++) {
      unsigned long long best = 0;
#pragma unroll
      for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const int e = lane + 32 * j;
        if (e < E && !(taken >> j & 1u)) {
          const unsigned long long key = route_key(mine[j], e);
          if (key > best) best = key;
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
        if (other > best) best = other;
      }
      const int c = 0x7fffffff - (int)(uint32_t)best;
      if ((c & 31) == lane) taken |= 1u << (c >> 5);
      if (lane == 0) sel[k] = c;
    }
  } else {
    for (int k = 0; k < K; k++) {
      int first = 0x7fffffff, bi = 0x7fffffff;
      float bv = 0.0f;
      for (int e = lane; e < E; e += 32) {
        if (used[e]) continue;
        if (first == 0x7fffffff) first = e;
        const float v = sc[e];
        if (!isnan(v) && (bi == 0x7fffffff || v > bv)) bv = v, bi = e;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const int f2 = __shfl_xor_sync(0xffffffffu, first, o), i2 = __shfl_xor_sync(0xffffffffu, bi, o);
        const float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
        first = min(first, f2);
        if (i2 != 0x7fffffff && (bi == 0x7fffffff || v2 > bv || (v2 == bv && i2 < bi))) bv = v2, bi = i2;
      }
      if (lane == 0) {
        const int c = isnan(sc[first]) ? first : bi;
        sel[k] = c;
        used[c] = 1;
      }
      __syncwarp();
    }
  }
  __syncwarp();
  if (lane != 0) return;
  float mx = -INFINITY, sum = 0.0f, w[32];
  for (int k = 0; k < K; k++) mx = fmaxf(mx, sc[sel[k]]);
  for (int k = 0; k < K; k++) sum += w[k] = expf(sc[sel[k]] - mx);
  for (int k = 0; k < K; k++) {
    ids[t * K + k] = sel[k];
    wts[t * K + k] = rb(__fmul_rn(rb(__fdiv_rn(w[k], sum)), pes[sel[k]]));
  }
}

extern "C" int dk_moe_route(const float *s, int64_t lds, int ks, int64_t kstride, int T, int E, int top_k,
                            const float *pes, int *ids, float *wts, void *stream) {
  if (T < 1 || E < 1 || top_k < 1 || top_k > 32 || top_k > E || ks < 1) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(moe_route_kernel, (unsigned)T, 32, (size_t)E * 8, (cudaStream_t)stream, s, lds, ks, kstride, E,
                        top_k, pes, ids, wts);
}

/* One block per row: the shared MLP's post-norm and the experts' weighted sum with its norm
 * (both sums of squares in one reduction; the weighted sum kept in out between the passes),
 * then their add. The step's one row runs over a cluster (moe_cluster.cu). */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_combine_kernel(const float *ys, int64_t lds, int ks, int64_t kstride, const float *w_post1, const float *y,
                       int64_t ldy, const int *map, const float *wts, const float *w_post2, int K, int H, float eps,
                       float *out) {
  ck_pdl_enter();
  const int64_t t = blockIdx.x;
  const float *yr = ys + t * lds;
  float *o = out + t * H;
  float ss[2] = {0.0f, 0.0f};
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float a = rb(ysum(yr + i, ks, kstride));
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
      const int64_t r = map ? map[t * K + k] : t * K + k;
      acc += rb(__fmul_rn(wts[t * K + k], rb(y[r * ldy + i])));
    }
    const float v = rb(acc);
    o[i] = v;
    ss[0] = fmaf(a, a, ss[0]);
    ss[1] = fmaf(v, v, ss[1]);
  }
  block_reduce_n<2>(ss, ck_op_add(), 0.0f);
  const float r1 = 1.0f / sqrtf(ss[0] / (float)H + eps), r2 = 1.0f / sqrtf(ss[1] / (float)H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float h1 = rb(__fmul_rn(rb(__fmul_rn(rb(ysum(yr + i, ks, kstride)), r1)), w_post1[i]));
    o[i] = rb(__fadd_rn(h1, rb(__fmul_rn(rb(__fmul_rn(o[i], r2)), w_post2[i]))));
  }
}

extern "C" int dk_moe_combine(const float *ys, int64_t lds, int ks, int64_t kstride, const float *w_post1,
                              const float *y, int64_t ldy, const int *map, const float *wts, const float *w_post2, int T,
                              int top_k, int H, float eps, float *out, void *stream) {
  if (T < 1 || top_k < 1 || H < 1 || ks < 1) return (int)cudaErrorInvalidValue;
  if (T == 1 && !map && dk_moe_fits_cluster(H))
    return dk_moe_combine_cluster(ys, ks, kstride, w_post1, y, ldy, wts, w_post2, top_k, H, eps, out, stream);
  return (int)ck_launch(moe_combine_kernel, (unsigned)T, MOE_THREADS, 0, (cudaStream_t)stream, ys, lds, ks, kstride,
                        w_post1, y, ldy, map, wts, w_post2, top_k, H, eps, out);
}

/* ---- the prompt pass: choices grouped by expert --------------------------------------------- */
extern "C" int dk_moe_items(int T, int top_k, int E) {
  const int n = T * top_k;
  return (n + 7) / 8 + (E < n ? E : n);
}

/* Runs of at most mb work items of one expert (ck_qmm_grouped's blocks): at most this many. */
extern "C" int dk_moe_runs(int T, int top_k, int E, int mb) {
  const int n = T * top_k, used = E < n ? E : n;
  return (dk_moe_items(T, top_k, E) + used * (mb - 1) + mb - 1) / mb;
}

/* One block. Token t's top_k experts are distinct (the route's top-k), so expert e's choices
 * in token order are the set bits of a bitmap over tokens: each choice sets its bit, expert e
 * counts its bits, thread 0 lays the experts' padded row ranges (and runs) out in expert order,
 * and a choice's row within its expert is the number of bits below its token's. */
__global__ void moe_group_kernel(const int *ids, int n, int K, int E, int nw, int nitems, int *item_e, int *src,
                                 int *pos, int mb, int nruns, int *runs) {
  ck_pdl_enter();
  CK_DYNAMIC_SHARED(int, sm);
  int *cnt = sm, *off = cnt + E, *roff = off + E;
  unsigned *bits = reinterpret_cast<unsigned *>(roff + E); /* [E][nw] */
  for (int i = threadIdx.x; i < E * nw; i += blockDim.x) bits[i] = 0u;
  for (int w = threadIdx.x; w < nitems; w += blockDim.x) item_e[w] = -1;
  for (int r = threadIdx.x; r < nitems * 8; r += blockDim.x) src[r] = -1;
  if (runs)
    for (int r = threadIdx.x; r < nruns; r += blockDim.x) runs[2 * r] = runs[2 * r + 1] = 0;
  __syncthreads();
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    const int t = a / K;
    atomicOr(&bits[ids[a] * nw + t / 32], 1u << (t % 32));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int c = 0;
    for (int w = 0; w < nw; w++) c += __popc(bits[e * nw + w]);
    cnt[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0, rat = 0;
    for (int e = 0; e < E; e++) {
      const int items = (cnt[e] + 7) / 8;
      off[e] = at;
      roff[e] = rat;
      at += items;
      rat += (items + mb - 1) / mb;
    }
  }
  __syncthreads();
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    const int e = ids[a], t = a / K;
    const unsigned *be = bits + e * nw;
    int rank = __popc(be[t / 32] & ((1u << (t % 32)) - 1u));
    for (int w = 0; w < t / 32; w++) rank += __popc(be[w]);
    const int row = off[e] * 8 + rank;
    pos[a] = row;
    src[row] = t;
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int items = (cnt[e] + 7) / 8;
    for (int w = off[e]; w < off[e] + items; w++) item_e[w] = e;
    if (runs)
      for (int j = 0; j * mb < items; j++) {
        runs[2 * (roff[e] + j)] = off[e] + j * mb;
        runs[2 * (roff[e] + j) + 1] = items - j * mb < mb ? items - j * mb : mb;
      }
  }
}

static size_t group_smem(int T, int E) { return ((size_t)3 * E + (size_t)E * ((T + 31) / 32)) * sizeof(int); }

extern "C" int dk_moe_group_fits(int T, int E) { return T >= 1 && E >= 1 && group_smem(T, E) <= 48 * 1024; }

extern "C" int dk_moe_group(const int *ids, int T, int top_k, int E, int *item_e, int *src, int *pos, int mb,
                            int *runs, void *stream) {
  const int n = T * top_k;
  if (T < 1 || top_k < 1 || E < 1 || mb < 1 || !dk_moe_group_fits(T, E)) return (int)cudaErrorInvalidValue;
  return (int)ck_launch(moe_group_kernel, 1, MOE_THREADS, group_smem(T, E), (cudaStream_t)stream, ids, n, top_k, E,
                        (T + 31) / 32, dk_moe_items(T, top_k, E), item_e, src, pos, mb, dk_moe_runs(T, top_k, E, mb),
                        runs);
}

/* One warp per row. */
__global__ void moe_gather_kernel(const uint16_t *x, const int *src, int64_t rows, int H, uint16_t *xg) {
  ck_pdl_enter();
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const int s = src[r];
  for (int i = threadIdx.x % 32; i < H; i += 32) xg[r * H + i] = s < 0 ? (uint16_t)0 : x[(int64_t)s * H + i];
}

extern "C" int dk_moe_gather(const uint16_t *x, const int *src, int64_t rows, int H, uint16_t *xg, void *stream) {
  if (rows < 1 || H < 1) return (int)cudaErrorInvalidValue;
  const int per = MOE_THREADS / 32;
  return (int)ck_launch(moe_gather_kernel, (unsigned)((rows + per - 1) / per), MOE_THREADS, 0, (cudaStream_t)stream, x,
                        src, rows, H, xg);
}

CK_TIMELINE_SETTER(ck_tl_moe)
