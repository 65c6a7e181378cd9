/* Sampler: see sampler.h for the semantics. Nothing sorts the vocabulary:
 *  - logits become order-preserving 32-bit keys; a radix select (digits of 11/11/10 bits) finds
 *    a boundary key by count (k-th largest) or by probability mass (top-p);
 *  - top-k scans the vocabulary once against a rising threshold, buffering only the tokens above
 *    it and re-selecting when the buffer fills (about k·log(V/k) tokens are ever buffered);
 *  - top-p first tries the 256, then the 2048 most probable tokens (enough for a peaked
 *    distribution) and falls back to the mass radix select over the whole vocabulary;
 *  - the draw finds its block of 1024 candidates from block sums, then scans that block.
 * The loops over the vocabulary are written so that the compiler vectorizes them (integer
 * selects on the float bits; the default -ftrapping-math blocks if-conversion of float ones). */
#include "mlx/sampler.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define MAX_WINDOW (1 << 20)
#define TOP_P_FAST 256 /* top-p tries this many (then 8x) most probable tokens first */
#define BLOCK 1024     /* draw block */

typedef struct cand_pair {
  float v;
  int i;
} cand_pair;

struct mx_sampler {
  mx_sampler_params p;
  int vocab;
  mx_rng rng;
  int *hist;        /* ring buffer of the last repetition_window accepted tokens */
  int hist_len, hist_pos;
  float *work;      /* sanitized, penalized logits */
  float *weight;    /* exp(l - max), for top-p */
  int *buf;         /* top-k buffer / radix-select list */
  int *cand;        /* the kept tokens, increasing ids (unfilled when all) */
  int n_cand, all;  /* all: every token kept, cand[i] would be i */
  float *cand_w;    /* their weights exp((l - max) / temperature) */
  double *block_sum;
  cand_pair *pairs; /* candidates sorted by value, for the top-p walk */
  double hist4[4][2048]; /* top-p: interleaved top-digit histograms */
};

static int by_value_desc(const void *a, const void *b) {
  const cand_pair *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? 1 : -1;
  return (x->i > y->i) - (x->i < y->i);
}
/* ---- PRNG: xoshiro256** seeded by splitmix64 --------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void mx_rng_seed(mx_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mx_rng_next(mx_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double mx_rng_uniform(mx_rng *r) { return (double)(mx_rng_next(r) >> 11) * 0x1.0p-53; }

/* ---- parameters ------------------------------------------------------------------------- */

void mx_sampler_params_default(mx_sampler_params *p) {
  memset(p, 0, sizeof *p);
  p->temperature = 1.0f;
  p->top_k = 0;
  p->top_p = 1.0f;
  p->min_p = 0.0f;
  p->repetition_penalty = 1.0f;
  p->repetition_window = 20;
  p->seed = 0;
}

static int check_params(const mx_sampler_params *p, int vocab, mlxrt_error *err) {
  if (vocab <= 0) return mx_fail(err, "sampler: vocab size %d must be positive", vocab);
  if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
    return mx_fail(err, "sampler: temperature %g must be a finite number >= 0", p->temperature);
  if (p->top_k < 0) return mx_fail(err, "sampler: top_k %d must be >= 0 (0 = off)", p->top_k);
  if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
    return mx_fail(err, "sampler: top_p %g must be in [0, 1] (1 = off)", p->top_p);
  if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
    return mx_fail(err, "sampler: min_p %g must be in [0, 1] (0 = off)", p->min_p);
  if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
    return mx_fail(err, "sampler: repetition_penalty %g must be a finite number > 0 (1 = off)",
                   p->repetition_penalty);
  if (p->repetition_window < 0 || p->repetition_window > MAX_WINDOW)
    return mx_fail(err, "sampler: repetition_window %d must be in [0, %d]", p->repetition_window,
                   MAX_WINDOW);
  return 0;
}

mx_sampler *mx_sampler_create(const mx_sampler_params *p, int vocab_size, mlxrt_error *err) {
  if (check_params(p, vocab_size, err)) return NULL;
  mx_sampler *s = mx_calloc(1, sizeof *s, err);
  if (!s) return NULL;
  s->p = *p;
  s->vocab = vocab_size;
  size_t v = (size_t)vocab_size;
  s->work = mx_malloc(v * sizeof(float), err);
  s->weight = s->work ? mx_malloc(v * sizeof(float), err) : NULL;
  s->buf = s->weight ? mx_malloc(v * sizeof(int), err) : NULL;
  s->cand = s->buf ? mx_malloc(v * sizeof(int), err) : NULL;
  s->cand_w = s->cand ? mx_malloc(v * sizeof(float), err) : NULL;
  s->block_sum = s->cand_w ? mx_malloc((v / BLOCK + 1) * sizeof(double), err) : NULL;
  s->pairs = s->block_sum ? mx_malloc(v * sizeof(cand_pair), err) : NULL;
  s->hist = s->pairs && p->repetition_window > 0
                ? mx_malloc((size_t)p->repetition_window * sizeof(int), err)
                : NULL;
  if (!s->pairs || (p->repetition_window > 0 && !s->hist)) {
    mx_sampler_free(s);
    return NULL;
  }
  mx_rng_seed(&s->rng, p->seed);
  return s;
}

void mx_sampler_free(mx_sampler *s) {
  if (!s) return;
  free(s->work);
  free(s->weight);
  free(s->buf);
  free(s->cand);
  free(s->cand_w);
  free(s->block_sum);
  free(s->pairs);
  free(s->hist);
  free(s);
}

const mx_sampler_params *mx_sampler_get_params(const mx_sampler *s) { return &s->p; }

double mx_sampler_uniform(mx_sampler *s) { return mx_rng_uniform(&s->rng); }

void mx_sampler_accept(mx_sampler *s, int token) {
  if (token < 0 || token >= s->vocab || s->p.repetition_window == 0) return;
  s->hist[s->hist_pos] = token;
  s->hist_pos = (s->hist_pos + 1) % s->p.repetition_window;
  if (s->hist_len < s->p.repetition_window) s->hist_len++;
}

void mx_sampler_reset(mx_sampler *s) { s->hist_len = s->hist_pos = 0; }

void mx_sampler_seed(mx_sampler *s, uint64_t seed) {
  s->p.seed = seed;
  mx_rng_seed(&s->rng, seed);
}

/* ---- order-preserving keys, exp, sums ------------------------------------------------------ */

/* Unsigned order of the keys = numeric order of the floats (-0 must be made +0 first). */
static inline uint32_t key_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u ^ ((0u - (u >> 31)) | 0x80000000u);
}

static inline float float_of(uint32_t k) {
  uint32_t u = k ^ ((0u - ((~k) >> 31)) | 0x80000000u);
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* e^x for x <= 0 (x = -inf gives 0), branch-free so loops over it vectorize: Cody-Waite range
 * reduction and the classic degree-6 minimax polynomial (relative error ~1e-7), 2^n built in the
 * exponent bits; below -87 (under the normal range) the result is 0. The clamp is done on the
 * bits (for x <= 0, x < -87 exactly when its bits exceed those of -87.0f): float compares and
 * selects are not if-converted under the default -ftrapping-math. */
static inline float exp_neg(float x) {
  uint32_t xb;
  memcpy(&xb, &x, sizeof xb);
  const uint32_t under = 0u - (uint32_t)(xb > 0xC2AE0000u); /* all ones below -87 */
  xb = (xb & ~under) | (0xC2AE0000u & under);
  float xc;
  memcpy(&xc, &xb, sizeof xc);
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest, |t| < 2^22 */
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t sbits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &sbits, sizeof scale);
  const float y = p * scale;
  uint32_t yb;
  memcpy(&yb, &y, sizeof yb);
  yb &= ~under;
  float out;
  memcpy(&out, &yb, sizeof out);
  return out;
}

/* Sum in double with independent accumulators (a plain loop is one long dependency chain). */
static double sum_floats(const float *a, int n) {
  double acc[8] = {0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += (double)a[i + j];
  for (; i < n; i++) acc[0] += (double)a[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ---- radix select over a list of tokens ------------------------------------------------
 * At each level the bins of one key digit are scanned from the top, adding their totals (token
 * counts, or probability mass) until the bin that reaches the target; the next level looks only
 * inside that bin. The result is the boundary key T with
 *   total(keys > T) < target <= total(keys >= T),
 * and *above = total(keys > T). When rounding leaves the grand total below the target, the
 * lowest populated bin is taken, so T ends at the smallest key and every token is kept. */

static const int SHIFT[3] = {21, 10, 0}, BITS[3] = {11, 11, 10};

static int choose_bin(const double *h, int nb, double target, double *above) {
  double acc = *above;
  int lowest = 0;
  for (int b = nb - 1; b >= 0; b--) {
    if (h[b] <= 0.0) continue;
    if (acc + h[b] >= target) {
      *above = acc;
      return b;
    }
    acc += h[b];
    lowest = b;
  }
  *above = acc - h[lowest];
  return lowest;
}

/* list == NULL: every token 0..n-1. weights == NULL: count tokens. Levels from `level` on,
 * with the digits above it already fixed in prefix (and *above their total). */
static uint32_t radix_select(const float *w, const float *weights, const int *list, int n,
                             int level, uint32_t prefix, double target, double *above) {
  double h[2048];
  for (; level < 3; level++) {
    const int nb = 1 << BITS[level];
    const uint32_t hi = level ? prefix >> SHIFT[level - 1] : 0;
    memset(h, 0, sizeof(double) * (size_t)nb);
    for (int j = 0; j < n; j++) {
      const int i = list ? list[j] : j;
      const uint32_t k = key_of(w[i]);
      if (level && (k >> SHIFT[level - 1]) != hi) continue;
      h[(k >> SHIFT[level]) & (uint32_t)(nb - 1)] += weights ? (double)weights[i] : 1.0;
    }
    prefix |= (uint32_t)choose_bin(h, nb, target, above) << SHIFT[level];
  }
  return prefix;
}

/* ---- the filters ------------------------------------------------------------------------ */

/* Sanitized, penalized logits into work[]; returns the argmax (lowest id among equal maxima)
 * and the max through *max_out. */
static int load_logits(mx_sampler *s, const float *logits, float *max_out) {
  const int V = s->vocab;
  float *w = s->work;
  const uint32_t *in = (const uint32_t *)(const void *)logits;
  uint32_t *out = (uint32_t *)(void *)w;
  for (int i = 0; i < V; i++) {
    uint32_t u = in[i];
    const uint32_t nan = 0u - (uint32_t)((u & 0x7FFFFFFFu) > 0x7F800000u);
    const uint32_t negz = 0u - (uint32_t)(u == 0x80000000u);
    u = (u & ~nan) | (0xFF800000u & nan); /* NaN -> -inf */
    out[i] = u & ~negz;                    /* -0 -> +0: one key for zero */
  }
  const float pen = s->p.repetition_penalty;
  if (pen != 1.0f) /* recomputed from the input: a token repeated in the window counts once */
    for (int j = 0; j < s->hist_len; j++) {
      const int t = s->hist[j];
      float x = isnan(logits[t]) ? -INFINITY : logits[t];
      x = x > 0.0f ? x / pen : x * pen;
      w[t] = x == 0.0f ? 0.0f : x;
    }
  /* Max over the keys as signed integers (vectorizes, unlike a float max under strict IEEE). */
  int32_t ms = INT32_MIN;
  for (int i = 0; i < V; i++) {
    const int32_t k = (int32_t)(key_of(w[i]) ^ 0x80000000u);
    ms = k > ms ? k : ms;
  }
  const uint32_t mk = (uint32_t)ms ^ 0x80000000u;
  const float m = float_of(mk);
  /* First id holding the max: find its block of 64 with a branch-free test, then the id. */
  int arg = 0;
  for (int b = 0; b < V; b += 64) {
    const int end = b + 64 < V ? b + 64 : V;
    int hit = 0;
    for (int i = b; i < end; i++) hit |= key_of(w[i]) == mk;
    if (hit) {
      arg = b;
      while (key_of(w[arg]) != mk) arg++;
      break;
    }
  }
  *max_out = m;
  return arg;
}

/* The k most probable tokens (ties toward lower ids) into s->buf, increasing ids; returns k. */
static int top_k_ids(mx_sampler *s, int k) {
  const int V = s->vocab;
  const float *w = s->work;
  int *buf = s->buf;
  const int cap = 4 * k + 1024 < V ? 4 * k + 1024 : V;
  uint32_t tau = 0; /* buffer keys > tau; every real key is > 0 (-inf's key is 0x007FFFFF) */
  int n = 0;
  for (int i = 0; i < V; i++) {
    if ((i & 63) == 0 && i + 64 <= V) { /* skip a block of 64 below the threshold at once */
      int any = 0;
      for (int j = i; j < i + 64; j++) any |= key_of(w[j]) > tau;
      if (!any) {
        i += 63;
        continue;
      }
    }
    if (key_of(w[i]) <= tau) continue;
    buf[n++] = i;
    if (n < cap || n <= k) continue;
    /* Full: keep exactly the current top k. Later tokens equal to the new tau have larger ids
     * than the ties kept, so they could never be chosen: "> tau" stays right. */
    double above = 0.0;
    tau = radix_select(w, NULL, buf, n, 0, 0, (double)k, &above);
    int ties = k - (int)above, m = 0;
    for (int j = 0; j < n; j++) {
      const uint32_t kk = key_of(w[buf[j]]);
      if (kk > tau || (kk == tau && ties-- > 0)) buf[m++] = buf[j];
    }
    n = m;
  }
  if (n > k) {
    double above = 0.0;
    const uint32_t t = radix_select(w, NULL, buf, n, 0, 0, (double)k, &above);
    int ties = k - (int)above, m = 0;
    for (int j = 0; j < n; j++) {
      const uint32_t kk = key_of(w[buf[j]]);
      if (kk > t || (kk == t && ties-- > 0)) buf[m++] = buf[j];
    }
    n = m;
  }
  return n;
}

/* Sorts ids[0..n) (the n most probable tokens) by value, descending, and walks them while the
 * mass of the strictly more probable tokens stays below target. Returns the smallest kept
 * value, or NAN when these tokens do not settle it (too little mass, or ties that may go on
 * past them), so that every token >= the returned value is among ids. */
static float top_p_walk(mx_sampler *s, const int *ids, int n, double target) {
  for (int j = 0; j < n; j++) s->pairs[j] = (cand_pair){s->work[ids[j]], ids[j]};
  qsort(s->pairs, (size_t)n, sizeof(cand_pair), by_value_desc);
  double mass = 0.0;
  float cut = s->pairs[0].v;
  for (int j = 0; j < n; j++) {
    if (s->pairs[j].v < cut) { /* a new, lower value: all the mass so far is above it */
      if (mass >= target) return cut;
      cut = s->pairs[j].v;
    }
    mass += s->weight[s->pairs[j].i];
  }
  /* Reached only at the end: the last value's ties may continue outside these tokens. */
  return mass >= target && n == s->vocab ? cut : NAN;
}

/* The top-p boundary by a mass radix select over the whole vocabulary: the top digit with four
 * interleaved histograms (a single one serializes on repeated bins), then the tokens of the
 * chosen bin are listed and the two lower digits resolved over that list. */
static float top_p_full(mx_sampler *s, double target) {
  const int V = s->vocab;
  const float *w = s->work, *wt = s->weight;
  double (*h)[2048] = s->hist4;
  memset(h, 0, sizeof s->hist4);
  int i = 0;
  for (; i + 4 <= V; i += 4)
    for (int q = 0; q < 4; q++) h[q][key_of(w[i + q]) >> SHIFT[0]] += (double)wt[i + q];
  for (; i < V; i++) h[0][key_of(w[i]) >> SHIFT[0]] += (double)wt[i];
  for (int b = 0; b < 2048; b++) h[0][b] += (h[1][b] + h[2][b]) + h[3][b];
  double above = 0.0;
  const uint32_t d0 = (uint32_t)choose_bin(h[0], 2048, target, &above);
  int n = 0;
  for (i = 0; i < V; i++) { /* branch-free listing: the bin may hold a large share */
    s->buf[n] = i;
    n += (key_of(w[i]) >> SHIFT[0]) == d0;
  }
  return float_of(radix_select(w, wt, s->buf, n, 1, d0 << SHIFT[0], target, &above));
}

/* Fills s->cand / s->n_cand with the kept tokens (increasing ids); greedy keeps the argmax.
 * Returns -1 when no token is possible. *max_out gets the largest (penalized) logit. */
static int select_candidates(mx_sampler *s, const float *logits, float *max_out,
                             mlxrt_error *err) {
  const mx_sampler_params *p = &s->p;
  const int V = s->vocab;
  const float *w = s->work;
  float m;
  s->all = 0;
  const int arg = load_logits(s, logits, &m);
  if (m == -INFINITY) {
    mx_fail(err, "sampler: every logit is -inf or NaN, no token can be chosen");
    return -1;
  }
  *max_out = m;
  if (p->temperature == 0.0f) {
    s->cand[0] = arg;
    return s->n_cand = 1;
  }
  const int use_top_k = p->top_k > 0 && p->top_k < V;
  const int use_top_p = p->top_p > 0.0f && p->top_p < 1.0f;
  /* min-p, top-p and top-k each keep a most-probable prefix: one logit threshold, plus the
   * exact count cut of top-k. */
  float thr = p->min_p > 0.0f ? m + logf(p->min_p) : -INFINITY;
  double target = 0.0;
  if (use_top_p) { /* top-p is measured on the whole vocabulary */
    for (int i = 0; i < V; i++) s->weight[i] = exp_neg(w[i] - m);
    target = (double)p->top_p * sum_floats(s->weight, V);
  }
  if (use_top_k) {
    /* Every token more probable than a top-k token is itself in the top k, so the top-p cut
     * is found among the k. */
    const int n = top_k_ids(s, p->top_k);
    if (use_top_p) {
      const float cut = top_p_walk(s, s->buf, n, target);
      if (cut > thr) thr = cut; /* NAN (not reached within the k): no cut */
    }
    int kept = 0;
    for (int j = 0; j < n; j++)
      if (w[s->buf[j]] >= thr) s->cand[kept++] = s->buf[j];
    return s->n_cand = kept;
  }
  if (use_top_p) {
    /* Most nuclei are small: try the 256, then the 2048 most probable tokens; the kept ones
     * are then among those already listed. */
    for (int k = TOP_P_FAST; k <= 8 * TOP_P_FAST && k < V; k *= 8) {
      const int n = top_k_ids(s, k);
      const float cut = top_p_walk(s, s->buf, n, target);
      if (isnan(cut)) continue;
      const float t = cut > thr ? cut : thr;
      int kept = 0;
      for (int j = 0; j < n; j++)
        if (w[s->buf[j]] >= t) s->cand[kept++] = s->buf[j];
      return s->n_cand = kept;
    }
    const float cut = top_p_full(s, target);
    if (cut > thr) thr = cut;
  }
  if (thr == -INFINITY) { /* no filter: every token, without listing them */
    s->all = 1;
    return s->n_cand = V;
  }
  int n = 0;
  for (int i = 0; i < V; i++) { /* branch-free: a flat distribution keeps a large share */
    s->cand[n] = i;
    n += w[i] >= thr;
  }
  return s->n_cand = n;
}

int mx_sampler_candidates(mx_sampler *s, const float *logits, int *ids, mlxrt_error *err) {
  float m;
  int n = select_candidates(s, logits, &m, err);
  if (n > 0 && s->all)
    for (int i = 0; i < n; i++) ids[i] = i;
  else if (n > 0)
    memcpy(ids, s->cand, (size_t)n * sizeof(int));
  return n;
}

/* The draw weights of the n candidates into s->cand_w and their block sums; returns the total.
 * Weights exp((l - max) / T); the max itself is a candidate (weight 1), so total >= 1. */
static double draw_weights(mx_sampler *s, int n, float m) {
  const int *cand = s->cand;
  float inv_t = 1.0f / s->p.temperature;
  if (inv_t > FLT_MAX) inv_t = FLT_MAX; /* a subnormal temperature: 0 * inf would be NaN */
  const float *w = s->work;
  float *cw = s->cand_w;
  if (s->all) /* everything kept: contiguous, the loop vectorizes */
    for (int i = 0; i < n; i++) cw[i] = exp_neg((w[i] - m) * inv_t);
  else
    for (int j = 0; j < n; j++) cw[j] = exp_neg((w[cand[j]] - m) * inv_t);
  const int nblocks = (n + BLOCK - 1) / BLOCK;
  double total = 0.0;
  for (int b = 0; b < nblocks; b++) {
    const int len = b == nblocks - 1 ? n - b * BLOCK : BLOCK;
    total += s->block_sum[b] = sum_floats(cw + (size_t)b * BLOCK, len);
  }
  return total;
}

int mx_sampler_probs(mx_sampler *s, const float *logits, double *probs, mlxrt_error *err) {
  float m;
  const int n = select_candidates(s, logits, &m, err);
  if (n <= 0) return -1;
  memset(probs, 0, (size_t)s->vocab * sizeof *probs);
  if (s->p.temperature == 0.0f) {
    probs[s->cand[0]] = 1.0;
    return 1;
  }
  const double total = draw_weights(s, n, m);
  for (int j = 0; j < n; j++) probs[s->all ? j : s->cand[j]] = (double)s->cand_w[j] / total;
  return n;
}

int mx_sampler_sample(mx_sampler *s, const float *logits, mlxrt_error *err) {
  float m;
  const int n = select_candidates(s, logits, &m, err);
  if (n <= 0) return -1;
  const int *cand = s->cand;
  if (s->p.temperature == 0.0f) return cand[0];
  const float *cw = s->cand_w;
  const double total = draw_weights(s, n, m);
  const int nblocks = (n + BLOCK - 1) / BLOCK;
  const double u = mx_rng_uniform(&s->rng) * total;
  double acc = 0.0;
  int b = 0;
  while (b < nblocks - 1 && acc + s->block_sum[b] <= u) acc += s->block_sum[b++];
  int last = -1;
  const int end = b == nblocks - 1 ? n : (b + 1) * BLOCK;
  for (int j = b * BLOCK; j < end; j++) {
    if (cw[j] <= 0.0f) continue;
    acc += cw[j];
    last = j;
    if (u < acc) break;
  }
  if (last < 0) /* rounding put u past a block whose weights are all 0: take the last weight */
    for (int j = n - 1; j >= 0 && last < 0; j--)
      if (cw[j] > 0.0f) last = j;
  return s->all ? last : cand[last];
}
