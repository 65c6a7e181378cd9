/* Sampler: see sampler.h for the semantics. The filters are computed without sorting the
 * vocabulary: logits are mapped to order-preserving 32-bit keys and a radix select (three digits
 * of 11/11/10 bits) finds the boundary key of top-k (by count) or of top-p (by probability
 * mass); only the kept tokens are ever listed. */
#include "mlx/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define MAX_WINDOW (1 << 20)

struct mx_sampler {
  mx_sampler_params p;
  int vocab;
  mx_rng rng;
  int *hist;        /* ring buffer of the last repetition_window accepted tokens */
  int hist_len, hist_pos;
  float *work;      /* sanitized, penalized logits */
  float *weight;    /* exp(l - max) for the top-p mass select */
  int *list;        /* tokens inside the radix-select boundary bin */
  int *above;       /* top-k: tokens in the bins above the boundary bin (fewer than k) */
  int *cand;        /* the kept tokens, increasing ids */
  float *cand_w;    /* their weights exp((l - max) / temperature) */
  unsigned char *mark; /* tokens in the repetition window, set only during a pass */
  struct cand_pair *pairs; /* top-k candidates sorted by value for the top-p walk */
};

typedef struct cand_pair {
  float v;
  int i;
} cand_pair;

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
  s->list = s->weight ? mx_malloc(v * sizeof(int), err) : NULL;
  s->above = s->list ? mx_malloc(v * sizeof(int), err) : NULL;
  s->cand = s->above ? mx_malloc(v * sizeof(int), err) : NULL;
  s->mark = s->cand ? mx_calloc(v, 1, err) : NULL;
  s->cand_w = s->mark ? mx_malloc(v * sizeof(float), err) : NULL;
  s->pairs = s->cand_w ? mx_malloc(v * sizeof(cand_pair), err) : NULL;
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
  free(s->list);
  free(s->above);
  free(s->cand);
  free(s->mark);
  free(s->cand_w);
  free(s->pairs);
  free(s->hist);
  free(s);
}

const mx_sampler_params *mx_sampler_get_params(const mx_sampler *s) { return &s->p; }

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

static inline uint32_t key_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline float float_of(uint32_t k) {
  uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
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

/* ---- radix select ------------------------------------------------------------------------
 * Keys are split into digits of 11, 11 and 10 bits. At each level the bins are scanned from the
 * top, adding their totals (token counts, or probability mass) until the bin that reaches the
 * target; the next level looks only inside that bin. The result is the boundary key T with
 *   total(keys > T) < target <= total(keys >= T).
 * When rounding leaves the grand total below the target, the lowest populated bin is taken, so
 * T ends at the smallest key and every token is kept. */

#define D0_SHIFT 21
#define D1_SHIFT 10
#define NB0 2048

/* Returns the bin reaching target; *above grows by the totals of the bins above it. */
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

/* Levels 1 and 2 over the tokens of the chosen top digit (list). weights NULL = counts. */
static uint32_t refine(const float *w, const float *weights, const int *list, int n,
                       uint32_t d0, double target, double *above) {
  double h[NB0];
  memset(h, 0, sizeof h);
  for (int j = 0; j < n; j++)
    h[(key_of(w[list[j]]) >> D1_SHIFT) & 2047u] += weights ? (double)weights[list[j]] : 1.0;
  uint32_t prefix = (d0 << D0_SHIFT) | ((uint32_t)choose_bin(h, 2048, target, above) << D1_SHIFT);
  memset(h, 0, sizeof(double) * 1024);
  for (int j = 0; j < n; j++) {
    uint32_t k = key_of(w[list[j]]);
    if ((k >> D1_SHIFT) == (prefix >> D1_SHIFT))
      h[k & 1023u] += weights ? (double)weights[list[j]] : 1.0;
  }
  return prefix | (uint32_t)choose_bin(h, 1024, target, above);
}

/* ---- sampling --------------------------------------------------------------------------- */

/* Pass 1: sanitized, penalized logits into work[]; returns the argmax (lowest id on ties) and
 * the max; with h0, also counts the tokens per top key digit. */
static int load_logits(mx_sampler *s, const float *logits, float *max_out, double *h0) {
  const mx_sampler_params *p = &s->p;
  const int V = s->vocab, penalize = p->repetition_penalty != 1.0f && s->hist_len > 0;
  const float pen = p->repetition_penalty;
  float *w = s->work;
  if (penalize)
    for (int j = 0; j < s->hist_len; j++) s->mark[s->hist[j]] = 1;
  int arg = 0;
  float m = -INFINITY;
  for (int i = 0; i < V; i++) {
    float x = logits[i];
    if (isnan(x)) x = -INFINITY;
    /* Each distinct token of the window once, as mlx-lm's logits[:, tokens] = ... does. */
    if (penalize && s->mark[i]) x = x > 0.0f ? x / pen : x * pen;
    if (x == 0.0f) x = 0.0f; /* -0 and +0 share one key */
    w[i] = x;
    if (x > m) m = x, arg = i;
    if (h0) h0[key_of(x) >> D0_SHIFT] += 1.0;
  }
  if (penalize)
    for (int j = 0; j < s->hist_len; j++) s->mark[s->hist[j]] = 0;
  *max_out = m;
  return arg;
}

/* Merges two increasing id lists into out; returns the length. */
static int merge_ids(const int *a, int na, const int *b, int nb, int *out) {
  int i = 0, j = 0, n = 0;
  while (i < na && j < nb) out[n++] = a[i] < b[j] ? a[i++] : b[j++];
  while (i < na) out[n++] = a[i++];
  while (j < nb) out[n++] = b[j++];
  return n;
}

/* Top-k (with top-p measured on the whole vocabulary): fills s->cand, returns the count. */
static int select_top_k(mx_sampler *s, double *h0, float m, float thr, int use_top_p) {
  const mx_sampler_params *p = &s->p;
  const int V = s->vocab;
  const float *w = s->work;
  double above = 0.0, z = 0.0;
  const uint32_t d0 = (uint32_t)choose_bin(h0, NB0, (double)p->top_k, &above);
  int n_above = 0, n_list = 0;
  if (use_top_p) { /* the whole vocabulary's mass, for the top-p cut below */
    for (int i = 0; i < V; i++) s->weight[i] = exp_neg(w[i] - m);
    z = sum_floats(s->weight, V);
  }
  for (int i = 0; i < V; i++) {
    uint32_t d = key_of(w[i]) >> D0_SHIFT;
    if (d > d0) s->above[n_above++] = i;
    else if (d == d0) s->list[n_list++] = i;
  }
  const uint32_t t = refine(w, NULL, s->list, n_list, d0, (double)p->top_k, &above);
  int ties = p->top_k - (int)above; /* tokens equal to the boundary that still fit, lowest first */
  int n_in = 0;
  for (int j = 0; j < n_list; j++) {
    uint32_t k = key_of(w[s->list[j]]);
    if (k > t || (k == t && ties-- > 0)) s->list[n_in++] = s->list[j];
  }
  int n = merge_ids(s->above, n_above, s->list, n_in, s->cand);
  if (use_top_p) {
    /* Every token more probable than a top-k token is itself in the top k, so the top-p cut
     * (mass of the strictly more probable tokens < top_p of the whole vocabulary) is found by
     * walking the k candidates from the most probable down. */
    for (int j = 0; j < n; j++) s->pairs[j] = (cand_pair){w[s->cand[j]], s->cand[j]};
    qsort(s->pairs, (size_t)n, sizeof(cand_pair), by_value_desc);
    const double target = (double)p->top_p * z;
    double mass = 0.0;
    float cut = s->pairs[0].v;
    for (int j = 0; j < n; j++) {
      if (s->pairs[j].v < cut) { /* a new, lower value: all the mass so far is above it */
        if (mass >= target) break;
        cut = s->pairs[j].v;
      }
      mass += s->weight[s->pairs[j].i];
    }
    if (cut > thr) thr = cut;
  }
  int kept = 0;
  for (int j = 0; j < n; j++)
    if (w[s->cand[j]] >= thr) s->cand[kept++] = s->cand[j];
  return kept;
}

/* Top-p alone: the boundary by probability mass. Returns the logit threshold. */
static float top_p_threshold(mx_sampler *s, float m) {
  const int V = s->vocab;
  const float *w = s->work;
  float *wt = s->weight;
  double h0[NB0];
  memset(h0, 0, sizeof h0);
  for (int i = 0; i < V; i++) wt[i] = exp_neg(w[i] - m);
  double z = sum_floats(wt, V);
  for (int i = 0; i < V; i++) h0[key_of(w[i]) >> D0_SHIFT] += (double)wt[i];
  const double target = (double)s->p.top_p * z;
  double above = 0.0;
  const uint32_t d0 = (uint32_t)choose_bin(h0, NB0, target, &above);
  int n_list = 0;
  for (int i = 0; i < V; i++)
    if ((key_of(w[i]) >> D0_SHIFT) == d0) s->list[n_list++] = i;
  return float_of(refine(w, wt, s->list, n_list, d0, target, &above));
}

/* Fills s->cand with the kept tokens (increasing ids) and returns their number; greedy keeps
 * the argmax only; -1 when no token is possible. */
static int select_candidates(mx_sampler *s, const float *logits, float *max_out,
                             mlxrt_error *err) {
  const mx_sampler_params *p = &s->p;
  const int V = s->vocab;
  const int use_top_k = p->temperature > 0.0f && p->top_k > 0 && p->top_k < V;
  const int use_top_p = p->temperature > 0.0f && p->top_p > 0.0f && p->top_p < 1.0f;
  double h0[NB0];
  if (use_top_k) memset(h0, 0, sizeof h0);
  float m;
  const int arg = load_logits(s, logits, &m, use_top_k ? h0 : NULL);
  if (m == -INFINITY) {
    mx_fail(err, "sampler: every logit is -inf or NaN, no token can be chosen");
    return -1;
  }
  *max_out = m;
  if (p->temperature == 0.0f) {
    s->cand[0] = arg;
    return 1;
  }
  /* min-p, top-p and top-k each keep a most-probable prefix: one logit threshold, plus the
   * exact count cut of top-k. */
  float thr = p->min_p > 0.0f ? m + logf(p->min_p) : -INFINITY;
  if (use_top_k) return select_top_k(s, h0, m, thr, use_top_p);
  if (use_top_p) {
    float t = top_p_threshold(s, m);
    if (t > thr) thr = t;
  }
  int n = 0;
  for (int i = 0; i < V; i++)
    if (s->work[i] >= thr) s->cand[n++] = i;
  return n;
}

int mx_sampler_candidates(mx_sampler *s, const float *logits, int *ids, mlxrt_error *err) {
  float m;
  int n = select_candidates(s, logits, &m, err);
  if (n > 0) memcpy(ids, s->cand, (size_t)n * sizeof(int));
  return n;
}

int mx_sampler_sample(mx_sampler *s, const float *logits, mlxrt_error *err) {
  float m;
  const int n = select_candidates(s, logits, &m, err);
  if (n <= 0) return -1;
  const int *cand = s->cand;
  if (s->p.temperature == 0.0f) return cand[0];
  /* Draw with weights exp((l - max) / T); the max itself is always a candidate (weight 1). */
  const float inv_t = 1.0f / s->p.temperature;
  const float *w = s->work;
  float *cw = s->cand_w;
  if (n == s->vocab) { /* everything kept: contiguous, so the loop vectorizes */
    for (int i = 0; i < n; i++) cw[i] = exp_neg((w[i] - m) * inv_t);
  } else {
    for (int j = 0; j < n; j++) cw[j] = exp_neg((w[cand[j]] - m) * inv_t);
  }
  const double total = sum_floats(cw, n);
  const double u = mx_rng_uniform(&s->rng) * total;
  double acc = 0.0;
  int last = -1;
  for (int j = 0; j < n; j++) {
    if (cw[j] <= 0.0f) continue;
    acc += cw[j];
    last = j;
    if (u < acc) break;
  }
  return cand[last]; /* last: u rounded to the very top of the range */
}
