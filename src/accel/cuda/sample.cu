/* Token selection on the device: src/accel/accel_sample.h's algorithm, bit for bit.
 *
 * Layout: 256 threads per block; thread t of block b owns the E contiguous ids starting at
 * (b·256 + t)·E, E = ceil(V / 65536), so ids run in (block, thread, element) order and there
 * are at most 256 blocks. Each pass ends with the last block to finish (an atomic counter)
 * deciding from the partials every block left in the state:
 *   pass 0          max key and lowest id holding it; top-k count histogram of digit 0;
 *   passes 1..3     top-k count histograms of digits 1, 2 (inside the chosen bins) and top-p
 *                   mass histograms of digits 0, 1, 2 (mass = 2^40-fixed-point weights, exact
 *                   uint64 atomics, so the order of the adds does not matter);
 *   draw            per block: Σ weights of keys above the threshold and the count of ties;
 *                   the last block scans the blocks for the one holding R, then scans it.
 * Passes a selection does not need are not launched (greedy: pass 0 only). Pass 0 also notes the
 * lowest id holding NaN or ±inf (an atomic max of V - id: nothing to do on a finite row), and
 * the selection's last block reports it as ACCEL_TOKEN_NONFINITE. Histograms, the counter and
 * that note are zeroed by the block that consumes them, so the state stays clean between calls. */
#include <cuda_runtime.h>
#include <limits.h>

#include "accel/accel_sample_math.h"
#include "sample_kernels.h"

#define SK_THREADS 256
#define SK_WARPS (SK_THREADS / 32)
#define SK_MAX_BLOCKS 256
#define SK_BINS 2048
#define SK_ALL_TIES 0xFFFFFFFFu

struct sk_state {
  unsigned count;           /* blocks finished in the running pass */
  unsigned mkey;            /* max key */
  int arg;                  /* lowest id holding it */
  unsigned c_prefix;          /* top-k select: threshold bits so far */
  unsigned long long c_above; /* count above them */
  unsigned p_prefix;          /* top-p select: threshold bits so far */
  unsigned long long p_above; /* mass above them */
  unsigned long long tot;     /* Σ mass weights over the vocabulary */
  unsigned bad_rev;           /* V - the lowest id with a NaN or ±inf logit; 0: none (step 0) */
  unsigned hc[SK_BINS];
  unsigned long long hm[SK_BINS];
  unsigned bkey[SK_MAX_BLOCKS];
  int barg[SK_MAX_BLOCKS];
  unsigned long long bsum[SK_MAX_BLOCKS];
  unsigned btie[SK_MAX_BLOCKS];
};

struct sk_args {
  const float *logits;
  int V, E;
  sk_params p;
  int do_max, c_level, m_level; /* level -1: that select does not run in this pass */
  sk_state *st;
  int32_t *out;
};

static __constant__ int SK_SHIFT[3] = {21, 10, 0};
static __constant__ int SK_NB[3] = {2048, 2048, 1024};

/* ---- block helpers (256 threads, integer sums: exact) ------------------------------------ */
template <typename T>
static __device__ T block_excl_scan(T v, T *total) {
  __shared__ T wsum[SK_WARPS];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  T inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    T n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  __syncthreads(); /* wsum may still be read by a previous call */
  if (lane == 31) wsum[w] = inc;
  __syncthreads();
  T before = 0, tot = 0;
  for (int i = 0; i < SK_WARPS; i++) {
    T s = wsum[i];
    if (i < w) before += s;
    tot += s;
  }
  *total = tot;
  return before + inc - v;
}

static __device__ __forceinline__ void better(unsigned &k, int &i, unsigned k2, int i2) {
  if (k2 > k || (k2 == k && i2 < i)) {
    k = k2;
    i = i2;
  }
}

/* Every thread gets the block's (max key, lowest id holding it). */
static __device__ void block_argmax(unsigned &k, int &i) {
  __shared__ unsigned sk[SK_WARPS];
  __shared__ int si[SK_WARPS];
  for (int o = 16; o > 0; o >>= 1) {
    unsigned k2 = __shfl_xor_sync(0xffffffffu, k, o);
    int i2 = __shfl_xor_sync(0xffffffffu, i, o);
    better(k, i, k2, i2);
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sk[w] = k;
    si[w] = i;
  }
  __syncthreads();
  k = sk[0];
  i = si[0];
  for (int j = 1; j < SK_WARPS; j++) better(k, i, sk[j], si[j]);
}

/* Ends a pass: true in the last block to finish (every thread), after which the other
 * blocks' global writes and atomics are visible to it. */
static __device__ bool finish_pass(sk_state *st) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&st->count, 1u) == gridDim.x - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

/* The last block's radix-select step at `level` over the global histogram h (zeroed here):
 * the highest bin whose running total from the top (starting at *above, 0 at level 0) reaches
 * the target (count >= count_target, or (double)mass >= mass_target). The one thread that
 * finds it sets the level's bits of *prefix and *above (reached(total) always holds: the
 * target is at most the total, and a chosen bin's sub-bins sum to it). */
template <typename H>
static __device__ void decide(H *h, int level, bool mass, unsigned long long count_target, double mass_target,
                              unsigned *prefix, unsigned long long *above) {
  const int nb = SK_NB[level], per = nb / SK_THREADS, t = threadIdx.x;
  const unsigned long long above0 = level ? *above : 0ull;
  unsigned long long v[SK_BINS / SK_THREADS], s = 0; /* unrolled: v stays in registers */
#pragma unroll
  for (int j = 0; j < SK_BINS / SK_THREADS; j++) {
    v[j] = 0;
    if (j < per) {
      v[j] = (unsigned long long)__ldcg(h + t * per + j);
      h[t * per + j] = 0;
      s += v[j];
    }
  }
  unsigned long long tot, excl = block_excl_scan<unsigned long long>(s, &tot);
  unsigned long long acc = above0 + (tot - excl - s); /* bins above this thread's range */
  __syncthreads(); /* every thread has read *above before the finder writes it */
  if (mass ? (double)acc >= mass_target : acc >= count_target) return; /* crossed above */
#pragma unroll
  for (int j = SK_BINS / SK_THREADS - 1; j >= 0; j--) {
    if (j >= per) continue;
    const unsigned long long a = acc + v[j];
    if (v[j] && (mass ? (double)a >= mass_target : a >= count_target)) {
      *prefix = (level ? *prefix : 0u) | ((unsigned)(t * per + j) << SK_SHIFT[level]);
      *above = acc;
      return;
    }
    acc = a;
  }
}

static __device__ __forceinline__ bool in_prefix(unsigned k, int level, unsigned prefix) {
  return level == 0 || (k >> SK_SHIFT[level - 1]) == (prefix >> SK_SHIFT[level - 1]);
}

/* ---- the histogram passes -------------------------------------------------------------------- */
__global__ void __launch_bounds__(SK_THREADS) sk_pass_kernel(sk_args a) {
  __shared__ unsigned shc[SK_BINS];
  __shared__ unsigned long long shm[SK_BINS];
  sk_state *st = a.st;
  const int t = threadIdx.x, cl = a.c_level, ml = a.m_level;
  for (int j = t; j < SK_BINS; j += SK_THREADS) {
    if (cl >= 0) shc[j] = 0;
    if (ml >= 0) shm[j] = 0;
  }
  __syncthreads();
  const float m = a.do_max ? 0.0f : spm_unkey(st->mkey);
  const unsigned cpre = st->c_prefix, ppre = st->p_prefix;
  unsigned bk = 0;
  int bi = INT_MAX;
  unsigned long long msum = 0;
  int bad = INT_MAX;
  const int base = (blockIdx.x * SK_THREADS + t) * a.E;
  for (int e = 0; e < a.E; e++) {
    const int i = base + e;
    if (i >= a.V) break;
    const float raw = a.logits[i];
    if (a.do_max && (spm_bits(raw) & 0x7F800000u) == 0x7F800000u && bad == INT_MAX) bad = i;
    const float x = spm_sanitize(raw);
    const unsigned k = spm_key(x);
    if (a.do_max) better(bk, bi, k, i);
    if (cl >= 0 && in_prefix(k, cl, cpre)) atomicAdd(&shc[(k >> SK_SHIFT[cl]) & (unsigned)(SK_NB[cl] - 1)], 1u);
    if (ml >= 0) {
      const unsigned long long w = spm_weight(x, m, 1.0f);
      msum += w;
      if (w && in_prefix(k, ml, ppre)) atomicAdd(&shm[(k >> SK_SHIFT[ml]) & (unsigned)(SK_NB[ml] - 1)], w);
    }
  }
  __syncthreads();
  for (int j = t; j < SK_BINS; j += SK_THREADS) {
    if (cl >= 0 && shc[j]) atomicAdd(&st->hc[j], shc[j]);
    if (ml >= 0 && shm[j]) atomicAdd(&st->hm[j], shm[j]);
  }
  if (ml == 0) {
    unsigned long long bt;
    block_excl_scan<unsigned long long>(msum, &bt);
    if (t == 0 && bt) atomicAdd(&st->tot, bt);
  }
  if (bad != INT_MAX) atomicMax(&st->bad_rev, (unsigned)(a.V - bad)); /* before finish_pass */
  if (a.do_max) {
    block_argmax(bk, bi);
    if (t == 0) {
      st->bkey[blockIdx.x] = bk;
      st->barg[blockIdx.x] = bi;
    }
  }
  if (!finish_pass(st)) return;

  /* the last block */
  if (a.do_max) {
    unsigned k = 0;
    int i = INT_MAX;
    if (t < (int)gridDim.x) {
      k = __ldcg(st->bkey + t);
      i = __ldcg(st->barg + t);
    }
    block_argmax(k, i);
    if (t == 0) {
      st->mkey = k;
      st->arg = i;
      st->tot = 0;
      const unsigned br = __ldcg(&st->bad_rev);
      if (a.p.greedy) {
        *a.out = br ? ACCEL_TOKEN_NONFINITE(a.V - (int)br) : k == SPM_NEG_INF_KEY ? -1 : i;
        st->bad_rev = 0;
      }
    }
  }
  if (cl >= 0) decide<unsigned>(st->hc, cl, false, (unsigned long long)a.p.top_k, 0.0, &st->c_prefix, &st->c_above);
  if (ml >= 0) {
    const double target = (double)a.p.top_p * (double)__ldcg(&st->tot);
    decide<unsigned long long>(st->hm, ml, true, 0ull, target, &st->p_prefix, &st->p_above);
  }
  if (t == 0) st->count = 0;
}

/* ---- the draw ---------------------------------------------------------------------------------- */
/* Kept: key > tau, and the `ties` lowest ids with key == tau (accel_sample.c select_kept). */
static __device__ void kept_threshold(const sk_args &a, float m, unsigned *tau, unsigned *ties) {
  const sk_state *st = a.st;
  unsigned tv = 0;
  if (a.p.use_min_p) tv = spm_key(spm_sanitize(__fadd_rn(m, a.p.log_min_p)));
  if (a.p.use_top_p && st->p_prefix > tv) tv = st->p_prefix;
  *tau = tv;
  *ties = SK_ALL_TIES;
  if (a.p.top_k && st->c_prefix >= tv) {
    *tau = st->c_prefix;
    *ties = (unsigned)((unsigned long long)a.p.top_k - st->c_above);
  }
}

__global__ void __launch_bounds__(SK_THREADS) sk_draw_kernel(sk_args a) {
  sk_state *st = a.st;
  const int t = threadIdx.x;
  const float m = spm_unkey(st->mkey);
  unsigned tau, ties;
  kept_threshold(a, m, &tau, &ties);
  const unsigned long long dtau = spm_weight(spm_unkey(tau), m, a.p.inv_t); /* every tie's weight */
  const int base = (blockIdx.x * SK_THREADS + t) * a.E;
  unsigned long long sa = 0;
  unsigned nt = 0;
  for (int e = 0; e < a.E; e++) {
    const int i = base + e;
    if (i >= a.V) break;
    const float x = spm_sanitize(a.logits[i]);
    const unsigned k = spm_key(x);
    if (k > tau) sa += spm_weight(x, m, a.p.inv_t);
    else if (k == tau) nt++;
  }
  unsigned long long bsa, bnt;
  block_excl_scan<unsigned long long>(sa, &bsa);
  block_excl_scan<unsigned long long>((unsigned long long)nt, &bnt);
  if (t == 0) {
    st->bsum[blockIdx.x] = bsa;
    st->btie[blockIdx.x] = (unsigned)bnt;
  }
  if (!finish_pass(st)) return;

  /* a non-finite row (pass 0's note): no draw */
  __shared__ unsigned s_bad;
  if (t == 0) s_bad = __ldcg(&st->bad_rev);
  __syncthreads();
  if (s_bad) {
    if (t == 0) {
      *a.out = ACCEL_TOKEN_NONFINITE(a.V - (int)s_bad);
      st->bad_rev = 0;
      st->count = 0;
    }
    return;
  }
  /* the last block: each block's kept total, the block holding R, then R inside it */
  const int G = (int)gridDim.x;
  unsigned long long tie_b = 0, sa_b = 0;
  if (t < G) {
    tie_b = __ldcg(st->btie + t);
    sa_b = __ldcg(st->bsum + t);
  }
  unsigned long long all_ties, ties_before = block_excl_scan<unsigned long long>(tie_b, &all_ties);
  unsigned long long kept_b = tie_b;
  if (ties != SK_ALL_TIES) {
    const unsigned long long left = ties > ties_before ? ties - ties_before : 0ull;
    kept_b = left < tie_b ? left : tie_b;
  }
  const unsigned long long bt = sa_b + kept_b * dtau;
  unsigned long long total, before = block_excl_scan<unsigned long long>(bt, &total);
  const unsigned long long r = spm_scale_draw(a.p.x53, total);
  __shared__ int s_blk;
  __shared__ unsigned long long s_before, s_kept;
  if (t == 0) s_blk = -1;
  __syncthreads();
  if (t < G && bt > 0 && before <= r && r - before < bt) {
    s_blk = t;
    s_before = before;
    s_kept = kept_b;
  }
  __syncthreads();
  if (t == 0) {
    st->count = 0;
    if (s_blk < 0) *a.out = -1; /* total 0: every logit -inf or NaN */
  }
  if (s_blk < 0) return;
  /* inside block s_blk: tie ranks, then kept weights, in id order */
  const int cb = (s_blk * SK_THREADS + t) * a.E;
  unsigned long long my_ties = 0;
  for (int e = 0; e < a.E; e++) {
    const int i = cb + e;
    if (i >= a.V) break;
    my_ties += spm_key(spm_sanitize(a.logits[i])) == tau;
  }
  unsigned long long unused, rank0 = block_excl_scan<unsigned long long>(my_ties, &unused);
  unsigned long long sum = 0, rank = rank0;
  for (int e = 0; e < a.E; e++) {
    const int i = cb + e;
    if (i >= a.V) break;
    const float x = spm_sanitize(a.logits[i]);
    const unsigned k = spm_key(x);
    if (k > tau) sum += spm_weight(x, m, a.p.inv_t);
    else if (k == tau && rank++ < s_kept) sum += dtau;
  }
  unsigned long long acc = s_before + block_excl_scan<unsigned long long>(sum, &unused);
  rank = rank0;
  for (int e = 0; e < a.E; e++) {
    const int i = cb + e;
    if (i >= a.V) break;
    const float x = spm_sanitize(a.logits[i]);
    const unsigned k = spm_key(x);
    unsigned long long w = 0;
    if (k > tau) w = spm_weight(x, m, a.p.inv_t);
    else if (k == tau && rank++ < s_kept) w = dtau;
    if (w && acc <= r && r - acc < w) {
      *a.out = i;
      break;
    }
    acc += w;
  }
}

/* ---- launchers ------------------------------------------------------------------------------- */
extern "C" size_t sk_state_bytes(void) { return sizeof(sk_state); }

/* pass i (0..3) of a selection: the levels it runs, or 0 when it is not needed */
static int pass_levels(const sk_params *p, int i, int *cl, int *ml) {
  const bool k = !p->greedy && p->top_k > 0, tp = !p->greedy && p->use_top_p;
  *cl = k && i <= 2 ? i : -1;
  *ml = tp && i >= 1 ? i - 1 : -1;
  return i == 0 || *cl >= 0 || *ml >= 0;
}

extern "C" int sk_launches(const sk_params *p) {
  int n = p->greedy ? 0 : 1, cl, ml;
  for (int i = 0; i < 4; i++) n += pass_levels(p, i, &cl, &ml);
  return n;
}

#ifndef SK_EMULATION /* tests/gpu/sample_emulate.cpp runs the kernels above on host threads */
extern "C" int sk_sample(const float *logits, int V, const sk_params *p, void *state, int32_t *out, void *stream) {
  if (V < 1 || V > (1 << 23)) return (int)cudaErrorInvalidValue;
  sk_args a;
  a.logits = logits;
  a.V = V;
  a.E = (V + SK_THREADS * SK_MAX_BLOCKS - 1) / (SK_THREADS * SK_MAX_BLOCKS);
  a.p = *p;
  a.st = (sk_state *)state;
  a.out = out;
  const int blocks = (V + SK_THREADS * a.E - 1) / (SK_THREADS * a.E);
  cudaStream_t s = (cudaStream_t)stream;
  for (int i = 0; i < 4; i++) {
    if (!pass_levels(p, i, &a.c_level, &a.m_level)) continue;
    a.do_max = i == 0;
    sk_pass_kernel<<<blocks, SK_THREADS, 0, s>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
  }
  if (p->greedy) return 0;
  sk_draw_kernel<<<blocks, SK_THREADS, 0, s>>>(a);
  return (int)cudaGetLastError();
}
#endif
