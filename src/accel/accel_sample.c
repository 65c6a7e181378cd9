/* The decoders' token selection on the CPU: accel_sample.h defines the algorithm; this is its
 * plain sequential form (the CUDA kernels in src/accel/cuda/sample.cu compute the same integers
 * with blocks and atomics). Linked into the core library and into the CUDA plug-in (for
 * accel_sample_plan_make). */
#include "accel/accel_sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_sample_math.h"
#include "base/error.h"

int accel_sample_plan_make(const accel_sample_params *sp, int vocab, double u,
                           accel_sample_plan *plan, mlxrt_error *err) {
  if (vocab < 1 || vocab > ACCEL_SAMPLE_MAX_VOCAB)
    return mx_fail(err, "sampling: vocabulary of %d entries, expected 1..%d", vocab, ACCEL_SAMPLE_MAX_VOCAB);
  if (!(sp->temperature >= 0.0f) || !isfinite(sp->temperature))
    return mx_fail(err, "sampling: temperature %g must be a finite number >= 0 (0 = greedy)", sp->temperature);
  if (sp->top_k < 0) return mx_fail(err, "sampling: top_k %d must be >= 0 (0 = off)", sp->top_k);
  if (!(sp->top_p >= 0.0f && sp->top_p <= 1.0f))
    return mx_fail(err, "sampling: top_p %g must be in [0, 1] (1 = off)", sp->top_p);
  if (!(sp->min_p >= 0.0f && sp->min_p <= 1.0f))
    return mx_fail(err, "sampling: min_p %g must be in [0, 1] (0 = off)", sp->min_p);
  if (!isfinite(u)) return mx_fail(err, "sampling: the uniform number %g is not finite", u);
  memset(plan, 0, sizeof *plan);
  plan->greedy = sp->temperature == 0.0f || sp->top_k == 1;
  float inv_t = 1.0f / sp->temperature;
  plan->inv_t = inv_t > FLT_MAX ? FLT_MAX : inv_t; /* a subnormal temperature */
  plan->use_min_p = sp->min_p > 0.0f;
  plan->log_min_p = plan->use_min_p ? logf(sp->min_p) : 0.0f;
  plan->top_k = sp->top_k > 0 && sp->top_k < vocab ? sp->top_k : 0;
  plan->use_top_p = sp->top_p > 0.0f && sp->top_p < 1.0f;
  plan->top_p = sp->top_p;
  const double x = u * 9007199254740992.0; /* 2^53 */
  plan->x53 = x <= 0.0 ? 0 : x >= 9007199254740991.0 ? 9007199254740991ull : (uint64_t)x;
  return 0;
}

/* ---- radix select -------------------------------------------------------------------------- */
static const int SHIFT[3] = {21, 10, 0}, NBINS[3] = {2048, 2048, 1024};

/* The threshold key T of keys (weights w, or counts when w is NULL) with
 *   reached(total(keys > T)) false, reached(total(keys >= T)) true,
 * where reached(a) = a >= count_target (counts) or (double)a >= mass_target (weights);
 * *above = total(keys > T). Each level's bins are scanned from the top; the first whose running
 * total is reached is taken. reached(total of everything) must hold. */
static uint32_t radix_select(const uint32_t *key, const uint64_t *w, int n, uint64_t count_target,
                             double mass_target, uint64_t *above, uint64_t *h) {
  uint32_t prefix = 0;
  uint64_t acc0 = 0;
  for (int level = 0; level < 3; level++) {
    const int nb = NBINS[level], sh = SHIFT[level];
    memset(h, 0, sizeof(uint64_t) * (size_t)nb);
    for (int i = 0; i < n; i++) {
      const uint32_t k = key[i];
      if (level && (k >> SHIFT[level - 1]) != (prefix >> SHIFT[level - 1])) continue;
      h[(k >> sh) & (uint32_t)(nb - 1)] += w ? w[i] : 1u;
    }
    uint64_t acc = acc0;
    for (int b = nb - 1; b >= 0; b--) {
      const uint64_t t = acc + h[b];
      const int reached = w ? (double)t >= mass_target : t >= count_target;
      if (h[b] && reached) {
        prefix |= (uint32_t)b << sh;
        break;
      }
      acc = t;
    }
    acc0 = acc;
  }
  *above = acc0;
  return prefix;
}

/* ---- the selection -------------------------------------------------------------------------- */
typedef struct sel {
  uint32_t *key;
  uint64_t *w;
  float m;
  int32_t argmax;
  uint32_t tau, ties; /* kept: key > tau, and the `ties` lowest ids with key == tau */
} sel;

static void sel_free(sel *s) {
  free(s->key);
  free(s->w);
}

/* Steps 1 and 2 of accel_sample.h. Returns 1 when some token can be chosen, 0 when none, -1. */
static int select_kept(const float *logits, int V, const accel_sample_plan *pl, sel *s, mlxrt_error *err) {
  memset(s, 0, sizeof *s);
  s->key = mx_malloc((size_t)V * sizeof(uint32_t), err);
  s->w = s->key ? mx_malloc((size_t)V * sizeof(uint64_t), err) : NULL;
  uint64_t *h = s->w ? mx_malloc(2048 * sizeof(uint64_t), err) : NULL;
  if (!h) return -1;
  uint32_t mk = 0;
  for (int i = 0; i < V; i++) {
    const uint32_t k = s->key[i] = spm_key(spm_sanitize(logits[i]));
    if (k > mk) {
      mk = k;
      s->argmax = i;
    }
  }
  s->m = spm_unkey(mk);
  if (mk == SPM_NEG_INF_KEY || pl->greedy) { /* greedy: the argmax alone */
    s->tau = mk;
    s->ties = 1;
    free(h);
    return mk != SPM_NEG_INF_KEY;
  }
  uint32_t tau_v = 0; /* value thresholds: min-p, top-p */
  if (pl->use_min_p) tau_v = spm_key(spm_sanitize(s->m + pl->log_min_p));
  if (pl->use_top_p) {
    uint64_t tot = 0, above;
    for (int i = 0; i < V; i++) tot += s->w[i] = spm_weight(spm_unkey(s->key[i]), s->m, 1.0f);
    const uint32_t t = radix_select(s->key, s->w, V, 0, (double)pl->top_p * (double)tot, &above, h);
    if (t > tau_v) tau_v = t;
  }
  s->tau = tau_v;
  s->ties = ACCEL_SAMPLE_ALL_TIES;
  if (pl->top_k) {
    uint64_t above;
    const uint32_t t = radix_select(s->key, NULL, V, (uint64_t)pl->top_k, 0.0, &above, h);
    if (t >= tau_v) { /* top-k binds: its own tie allowance */
      s->tau = t;
      s->ties = (uint32_t)((uint64_t)pl->top_k - above);
    }
  }
  free(h);
  return 1;
}

/* keep[i] for the kept set of s (ties in increasing id order). */
static int mark_kept(const sel *s, int V, unsigned char *keep) {
  uint32_t ties = 0;
  int n = 0;
  for (int i = 0; i < V; i++) {
    const uint32_t k = s->key[i];
    keep[i] = k > s->tau || (k == s->tau && ties++ < s->ties);
    n += keep[i];
  }
  return n;
}

int accel_logits_first_nonfinite(const float *logits, int V) {
  /* branch-free blocks of 64 (vectorizes); the exact id only once one is found */
  for (int b = 0; b < V; b += 64) {
    const int e = b + 64 < V ? b + 64 : V;
    uint32_t any = 0;
    for (int i = b; i < e; i++) any |= (spm_bits(logits[i]) & 0x7F800000u) == 0x7F800000u;
    if (any)
      for (int i = b; i < e; i++)
        if ((spm_bits(logits[i]) & 0x7F800000u) == 0x7F800000u) return i;
  }
  return -1;
}

int accel_fail_nonfinite(mlxrt_error *err, int64_t pos, int id) {
  return mx_fail(err, "the logits after position %lld are not finite (the first NaN or infinity at id %d): "
                      "the model's weights or activations overflowed",
                 (long long)pos, id);
}

int accel_check_step(const int32_t *tokens, int64_t n, int64_t pos, int64_t capacity, int vocab, mlxrt_error *err) {
  if (n <= 0) return mx_fail(err, "decoder: step of %lld tokens", (long long)n);
  if (pos < 0 || pos + n > capacity)
    return mx_fail(err, "decoder: positions %lld..%lld outside the capacity of %lld", (long long)pos,
                   (long long)(pos + n - 1), (long long)capacity);
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return mx_fail(err, "decoder: token id %d at position %lld is outside the vocabulary [0, %d)", tokens[i],
                     (long long)(pos + i), vocab);
  return 0;
}

int accel_sample_ref(const float *logits, int V, const accel_sample_params *sp, double u, int32_t *token,
                     mlxrt_error *err) {
  accel_sample_plan pl;
  sel s;
  if (accel_sample_plan_make(sp, V, u, &pl, err)) return -1;
  const int bad = accel_logits_first_nonfinite(logits, V);
  if (bad >= 0) {
    *token = ACCEL_TOKEN_NONFINITE(bad);
    return 0;
  }
  const int any = select_kept(logits, V, &pl, &s, err);
  if (any <= 0) {
    sel_free(&s);
    return any < 0 ? -1 : mx_fail(err, "sampling: every logit is -inf or NaN, no token can be chosen");
  }
  if (pl.greedy) {
    *token = s.argmax;
    sel_free(&s);
    return 0;
  }
  /* D_i over the kept tokens in increasing id order, then the first running sum > R */
  uint64_t total = 0;
  uint32_t ties = 0;
  for (int i = 0; i < V; i++) {
    const uint32_t k = s.key[i];
    const int kept = k > s.tau || (k == s.tau && ties++ < s.ties);
    s.w[i] = kept ? spm_weight(spm_unkey(k), s.m, pl.inv_t) : 0;
    total += s.w[i];
  }
  const uint64_t r = spm_scale_draw(pl.x53, total); /* total >= 2^40: the maximum weighs 1 */
  uint64_t acc = 0;
  int32_t pick = s.argmax;
  for (int i = 0; i < V; i++) {
    acc += s.w[i];
    if (acc > r) {
      pick = i;
      break;
    }
  }
  *token = pick;
  sel_free(&s);
  return 0;
}

int accel_sample_kept(const float *logits, int V, const accel_sample_params *sp, unsigned char *keep,
                      mlxrt_error *err) {
  accel_sample_plan pl;
  sel s;
  if (accel_sample_plan_make(sp, V, 0.0, &pl, err)) return -1;
  const int any = select_kept(logits, V, &pl, &s, err);
  int n = any < 0 ? -1 : any == 0 ? 0 : mark_kept(&s, V, keep);
  if (any == 0) memset(keep, 0, (size_t)V);
  sel_free(&s);
  return n;
}
