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
  int *list;        /* radix-select survivors, then the candidates */
  float *cand_w;    /* candidate weights exp((l - max) / temperature) */
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
  s->cand_w = s->list ? mx_malloc(v * sizeof(float), err) : NULL;
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

/* ---- order-preserving keys and radix select --------------------------------------------- */

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

typedef struct select_result {
  uint32_t key;  /* boundary key T */
  double above;  /* count or mass of the keys > T */
} select_result;

/* Descending radix select over work[]: the key T with  total(keys > T) < target <= total(keys >=
 * T), where each token counts 1 (weights NULL) or weights[i]. When the whole total is below
 * target (rounding), T is the smallest key, so every token is kept. Uses s->list as scratch. */
static select_result radix_select(mx_sampler *s, const float *weights, double target) {
  static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
  double hist[2048];
  uint32_t prefix = 0, mask = 0;
  double above = 0.0;
  int n_list = 0;
  for (int level = 0; level < 3; level++) {
    const int nb = 1 << bits[level];
    memset(hist, 0, sizeof(double) * (size_t)nb);
    if (level == 0) {
      for (int i = 0; i < s->vocab; i++)
        hist[key_of(s->work[i]) >> shift[0]] += weights ? (double)weights[i] : 1.0;
    } else if (level == 1) {
      /* Second pass over the vocabulary also lists the tokens inside the chosen top digit. */
      for (int i = 0; i < s->vocab; i++) {
        uint32_t k = key_of(s->work[i]);
        if ((k & mask) != prefix) continue;
        s->list[n_list++] = i;
        hist[(k >> shift[1]) & (uint32_t)(nb - 1)] += weights ? (double)weights[i] : 1.0;
      }
    } else {
      for (int j = 0; j < n_list; j++) {
        int i = s->list[j];
        uint32_t k = key_of(s->work[i]);
        if ((k & mask) != prefix) continue;
        hist[(k >> shift[2]) & (uint32_t)(nb - 1)] += weights ? (double)weights[i] : 1.0;
      }
    }
    int chosen = -1, lowest = -1;
    double acc = above;
    for (int b = nb - 1; b >= 0; b--) {
      if (hist[b] > 0.0) lowest = b;
      if (hist[b] > 0.0 && acc + hist[b] >= target) {
        chosen = b;
        break;
      }
      acc += hist[b];
    }
    if (chosen < 0) { /* total below target: descend into the lowest populated bin */
      chosen = lowest >= 0 ? lowest : 0;
      acc -= hist[chosen];
    }
    above = acc;
    prefix |= (uint32_t)chosen << shift[level];
    mask |= (uint32_t)(nb - 1) << shift[level];
  }
  select_result r = {prefix, above};
  return r;
}

/* ---- sampling --------------------------------------------------------------------------- */

/* Fills s->list with the tokens that survive the filters, in increasing id order, and returns
 * their number (1 for greedy: the argmax), or -1 when no token is possible. *max_out gets the
 * largest (penalized) logit. */
static int select_candidates(mx_sampler *s, const float *logits, float *max_out,
                             mlxrt_error *err) {
  const mx_sampler_params *p = &s->p;
  const int V = s->vocab;
  float *w = s->work;
  for (int i = 0; i < V; i++) {
    float x = logits[i];
    w[i] = isnan(x) ? -INFINITY : (x == 0.0f ? 0.0f : x); /* -0 and +0 share one key */
  }
  if (p->repetition_penalty != 1.0f) {
    /* Recomputed from the input, so a token repeated in the window is penalized once. */
    for (int j = 0; j < s->hist_len; j++) {
      int t = s->hist[j];
      float x = isnan(logits[t]) ? -INFINITY : logits[t];
      x = x > 0.0f ? x / p->repetition_penalty : x * p->repetition_penalty;
      w[t] = x == 0.0f ? 0.0f : x;
    }
  }
  int arg = 0;
  float m = w[0];
  for (int i = 1; i < V; i++)
    if (w[i] > m) m = w[i], arg = i;
  if (m == -INFINITY) {
    mx_fail(err, "sampler: every logit is -inf or NaN, no token can be chosen");
    return -1;
  }
  *max_out = m;
  if (p->temperature == 0.0f) {
    s->list[0] = arg;
    return 1;
  }

  /* Keep-threshold on the logit from min-p and top-p (prefix filters of the sorted order). */
  float thr = -INFINITY;
  if (p->min_p > 0.0f) thr = m + logf(p->min_p);
  const int use_top_p = p->top_p > 0.0f && p->top_p < 1.0f;
  const int use_top_k = p->top_k > 0 && p->top_k < V;
  double z = 0.0;
  if (use_top_p) {
    for (int i = 0; i < V; i++) {
      s->weight[i] = expf(w[i] - m);
      z += s->weight[i];
    }
  }
  if (use_top_p && !use_top_k) {
    select_result r = radix_select(s, s->weight, (double)p->top_p * z);
    float t = float_of(r.key);
    if (t > thr) thr = t;
  }

  /* Candidate list in increasing id order. */
  int *cand = s->list;
  int n = 0;
  if (use_top_k) {
    select_result r = radix_select(s, NULL, (double)p->top_k);
    int ties = p->top_k - (int)r.above; /* tokens equal to the boundary that still fit */
    for (int i = 0; i < V; i++) {
      uint32_t k = key_of(w[i]);
      if (k > r.key || (k == r.key && ties-- > 0)) cand[n++] = i;
    }
    if (use_top_p) {
      /* Every token more probable than a top-k token is itself in the top k, so the top-p cut
       * (mass of the strictly more probable tokens < top_p of the whole vocabulary) is found
       * by walking the k candidates from the most probable down. */
      for (int j = 0; j < n; j++) s->pairs[j] = (cand_pair){w[cand[j]], cand[j]};
      qsort(s->pairs, (size_t)n, sizeof(cand_pair), by_value_desc);
      const double target = (double)p->top_p * z;
      double above = 0.0;
      float cut = s->pairs[0].v;
      for (int j = 0; j < n; j++) {
        if (s->pairs[j].v < cut) { /* a new, lower value: all mass before it is above it */
          if (above >= target) break;
          cut = s->pairs[j].v;
        }
        above += s->weight[s->pairs[j].i];
      }
      if (cut > thr) thr = cut;
    }
    int kept = 0;
    for (int j = 0; j < n; j++)
      if (w[cand[j]] >= thr) cand[kept++] = cand[j];
    n = kept;
  } else {
    for (int i = 0; i < V; i++)
      if (w[i] >= thr) cand[n++] = i;
  }

  return n;
}

int mx_sampler_candidates(mx_sampler *s, const float *logits, int *ids, mlxrt_error *err) {
  float m;
  int n = select_candidates(s, logits, &m, err);
  if (n > 0) memcpy(ids, s->list, (size_t)n * sizeof(int));
  return n;
}

int mx_sampler_sample(mx_sampler *s, const float *logits, mlxrt_error *err) {
  float m;
  int n = select_candidates(s, logits, &m, err);
  if (n <= 0) return -1;
  const int *cand = s->list;
  if (s->p.temperature == 0.0f) return cand[0];
  /* Draw with weights exp((l - max) / T); the max itself is always a candidate. */
  const float inv_t = 1.0f / s->p.temperature;
  double total = 0.0;
  for (int j = 0; j < n; j++) {
    s->cand_w[j] = expf((s->work[cand[j]] - m) * inv_t);
    total += s->cand_w[j];
  }
  double u = mx_rng_uniform(&s->rng) * total, acc = 0.0;
  int last = cand[0];
  for (int j = 0; j < n; j++) {
    if (s->cand_w[j] <= 0.0f) continue;
    acc += s->cand_w[j];
    last = cand[j];
    if (u < acc) return cand[j];
  }
  return last; /* u rounded to the very top of the range */
}
