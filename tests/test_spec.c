/* Speculative decoding (mlxrt_spec_options) on the tiny fixture checkpoints (random weights,
 * vocabulary 384, sliding windows of 8 to 16), each given a tokenizer (model_dir.h):
 *  - prompt lookup's n-gram matcher on hand-made contexts;
 *  - the rejection rule against the exact distribution it must produce, on small vocabularies;
 *  - row-exact feeds: every row of a batched verification bit for bit a one-token step's logits,
 *    on every fixture, with the default and the mlx-cpu numerics;
 *  - greedy: the speculative token streams (and logprobs, and the ids the session holds after)
 *    equal plain greedy decoding over many prompts and draft sizes, with prompt lookup, with the
 *    model as its own draft (every draft accepted) and with another fixture as the draft
 *    (nearly every draft rejected); the answers are long enough for the sliding rings to wrap
 *    many times between rejections;
 *  - sampled: the joint distribution of the first three tokens drawn with speculation (lookup
 *    and draft model; temperature, top-k, top-p and a repetition penalty) against the exact one
 *    computed from the model's logits, by chi-square (fixed seeds; a generous threshold, and a
 *    check that a wrong distribution fails it);
 *  - the Gemma 4 MTP drafter (tests/fixtures/mtp, made by scripts/make_assistant_fixture.py
 *    with transformers' Gemma4AssistantForCausalLM for the gemma4-dense-bf16 and
 *    gemma4-e2b-bf16 fixtures): its drafts pass by pass, its first pass's logits, and a whole
 *    greedy generation's tokens and acceptance pattern against transformers'; what it refuses;
 *  - the options' errors, and a session run by a whole-step decoder refused by name.
 * Under the sanitizers the sampled part draws a fifth as many tokens (the same code paths for
 * the sanitizers to check); the distribution's test with its full power runs in the plain build. */
#include <math.h>
#include <stdint.h>
#include <time.h>

#include "mlx/api_internal.h"
#include "mlx/assistant.h"
#include "mlx/safetensors.h"
#include "mlx/sampler.h"
#include "mlx/session.h"
#include "mlx/spec_lookup.h"
#include "mlx/spec_rule.h"
#include "mlxrt.h"
#include "test_util.h"
#include "model_dir.h"

#define FIXTURES MLXRT_SOURCE_DIR "/tests/fixtures/models"
#define TOKENIZER MLXRT_SOURCE_DIR "/tests/fixtures/tokenizer/small-a.json"
#define OTHER_TOKENIZER MLXRT_SOURCE_DIR "/tests/fixtures/tokenizer/small-b.json"
#define MTP_DIR MLXRT_SOURCE_DIR "/tests/fixtures/mtp/gemma4-assistant-bf16"
#define MTP_E2B_DIR MLXRT_SOURCE_DIR "/tests/fixtures/mtp/gemma4-e2b-assistant-bf16"
#define V 384

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* ---- the n-gram matcher ---------------------------------------------------------------------- */
static void test_lookup(void) {
  int32_t d[8];
  /* "a b c d | a b" → the trigram's shorter match "a b" recurs at 0: draft c d a b ... */
  const int32_t c1[] = {1, 2, 3, 4, 1, 2};
  CHECK(mx_lookup_draft(c1, 6, 3, 2, d) == 2 && d[0] == 3 && d[1] == 4);
  /* the most recent occurrence wins: "x 5 7 ... x 5 9 ... x 5" drafts 9 */
  const int32_t c2[] = {8, 5, 7, 0, 8, 5, 9, 0, 8, 5};
  CHECK(mx_lookup_draft(c2, 10, 3, 1, d) == 1 && d[0] == 9);
  /* the longest n-gram first: "1 2 3" occurs once followed by 4, "2 3" later by 6 */
  const int32_t c3[] = {1, 2, 3, 4, 2, 3, 6, 1, 2, 3};
  CHECK(mx_lookup_draft(c3, 10, 3, 1, d) == 1 && d[0] == 4);
  CHECK(mx_lookup_draft(c3, 10, 2, 1, d) == 1 && d[0] == 6); /* bigrams only: the later "2 3" */
  /* past the context's end the period repeats: "7 8 9 7 8 9 7" drafts 8 9 7 8 9 */
  const int32_t c4[] = {7, 8, 9, 7, 8, 9, 7};
  CHECK(mx_lookup_draft(c4, 7, 3, 5, d) == 5 && d[0] == 8 && d[1] == 9 && d[2] == 7 && d[3] == 8 && d[4] == 9);
  /* a run of one token drafts more of it */
  const int32_t c5[] = {4, 4};
  CHECK(mx_lookup_draft(c5, 2, 3, 3, d) == 3 && d[0] == 4 && d[1] == 4 && d[2] == 4);
  /* nothing recurs; too short; nothing asked */
  const int32_t c6[] = {1, 2, 3, 4, 5};
  CHECK(mx_lookup_draft(c6, 5, 3, 4, d) == 0);
  CHECK(mx_lookup_draft(c6, 1, 3, 4, d) == 0);
  CHECK(mx_lookup_draft(c1, 6, 3, 0, d) == 0);
  /* unigram fallback: the last token alone recurs */
  const int32_t c7[] = {9, 3, 1, 2, 9};
  CHECK(mx_lookup_draft(c7, 5, 3, 2, d) == 2 && d[0] == 3 && d[1] == 1);
  /* against a brute force on random contexts over a small alphabet */
  for (int trial = 0; trial < 2000; trial++) {
    int32_t ctx[40], want[6] = {0};
    const int n = 2 + (int)(rnd() % 38), g = 1 + (int)(rnd() % 4), k = 1 + (int)(rnd() % 6);
    for (int i = 0; i < n; i++) ctx[i] = (int32_t)(rnd() % 4);
    int have = 0;
    for (int len = g < n - 1 ? g : n - 1; len >= 1 && !have; len--)
      for (int e = n - 1; e >= len && !have; e--) {
        int same = 1;
        for (int i = 0; i < len; i++) same &= ctx[e - len + i] == ctx[n - len + i];
        if (!same) continue;
        have = 1;
        for (int m = 0; m < k; m++) want[m] = e + m < n ? ctx[e + m] : want[e + m - n];
      }
    const int got = mx_lookup_draft(ctx, (size_t)n, g, k, d);
    CHECKF(got == (have ? k : 0) && (!have || !memcmp(d, want, (size_t)k * sizeof *d)), "trial %d", trial);
  }
}

/* ---- the rejection rule ----------------------------------------------------------------------- */
/* out(y) = Σ_x q(x) [a(x) δ(y, x) + (1 − a(x)) r_x(y) / R_x] must be p(y) for every y. */
static void test_rule(void) {
  double worst = 0;
  for (int trial = 0; trial < 500; trial++) {
    const int n = 2 + (int)(rnd() % 9);
    double p[10], q[10], r[10], out[10] = {0}, sp = 0, sq = 0;
    for (int i = 0; i < n; i++) {
      p[i] = rnd() % 4 == 0 ? 0.0 : (double)(rnd() % 1000 + 1); /* filtered tokens: p = 0 */
      q[i] = rnd() % 5 == 0 ? 0.0 : (double)(rnd() % 1000 + 1);
      sp += p[i];
      sq += q[i];
    }
    if (sp == 0 || sq == 0) continue;
    for (int i = 0; i < n; i++) p[i] /= sp, q[i] /= sq;
    for (int x = 0; x < n; x++) { /* a draft model's q */
      if (q[x] == 0) continue;
      const double a = mx_spec_accept_prob(p, q, x);
      CHECK(a >= 0 && a <= 1);
      out[x] += q[x] * a;
      const double R = mx_spec_residual(p, q, n, x, r);
      if (a < 1) {
        CHECK(R > 0);
        for (int y = 0; y < n; y++) out[y] += q[x] * (1 - a) * r[y] / R;
      }
    }
    for (int y = 0; y < n; y++) worst = fmax(worst, fabs(out[y] - p[y]));
    for (int x = 0; x < n; x++) { /* prompt lookup: a point mass at x, whatever x is */
      double o[10] = {0};
      const double a = mx_spec_accept_prob(p, NULL, x);
      o[x] += a;
      const double R = mx_spec_residual(p, NULL, n, x, r);
      CHECK(r[x] == 0);
      if (a < 1)
        for (int y = 0; y < n; y++) o[y] += (1 - a) * r[y] / R;
      for (int y = 0; y < n; y++) worst = fmax(worst, fabs(o[y] - p[y]));
    }
  }
  CHECKF(worst < 1e-12, "the rule's output distribution is off the target's by %g", worst);
  /* the draw: u falls on the running sums, zero weights never chosen */
  const double w[5] = {0, 2, 0, 1, 1};
  CHECK(mx_spec_draw(w, 5, 4, 0.0) == 1 && mx_spec_draw(w, 5, 4, 0.49) == 1 && mx_spec_draw(w, 5, 4, 0.5) == 3);
  CHECK(mx_spec_draw(w, 5, 4, 0.76) == 4 && mx_spec_draw(w, 5, 4.5, 0.999) == 4 && mx_spec_draw(w, 5, 0, 0.5) == -1);
}

/* ---- fixture folders ------------------------------------------------------------------------ */
typedef struct fixture {
  char dir[256];
  mlxrt_model *m;
} fixture;

static int open_fixture(fixture *f, const char *name, const char *tokenizer) {
  char src[512];
  snprintf(src, sizeof src, "%s/%s", FIXTURES, name);
  snprintf(f->dir, sizeof f->dir, "/tmp/mlxrt_spec_XXXXXX");
  mlxrt_error err = {{0}};
  if (make_model_dir(f->dir, src, tokenizer)) return -1;
  mlxrt_options o = {"cpu", 1, 0, NULL, NULL}; /* (tiny matrices: a pool would only wait) */
  f->m = mlxrt_model_load(f->dir, &o, &err);
  CHECKF(f->m != NULL, "%s: %s", name, err.msg);
  return f->m ? 0 : -1;
}

static void close_fixture(fixture *f) {
  mlxrt_model_free(f->m);
  remove_model_dir(f->dir);
}

/* ---- row-exact feeds -------------------------------------------------------------------------- */
static void check_rowwise(const char *dir, const char *numerics) {
  mlxrt_error err = {{0}};
  mlxrt_options o = {"cpu", 1, 0, numerics, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &o, &err);
  CHECKF(m != NULL, "%s", err.msg);
  if (!m) return;
  mlxrt_session *a = mlxrt_session_new(m, 256, &err), *b = mlxrt_session_new(m, 256, &err);
  int32_t t[60];
  for (int i = 0; i < 60; i++) t[i] = (int32_t)(3 + rnd() % 380);
  static float rows[12 * V], one[V];
  int diff = 0;
  /* at depths inside and past the sliding windows, after a rewind */
  for (int depth = 5; depth <= 45; depth += 20) {
    CHECK(mlxrt_session_feed(a, t, depth, NULL, 0, &err) == 0);
    CHECK(mx_session_feed_rowwise(a->s, t + depth, 12, rows, &err) == 0);
    CHECK(mlxrt_session_rewind(a, depth + 3) == depth + 3);
    CHECK(mx_session_feed_rowwise(a->s, t + depth + 3, 9, rows + 3 * V, &err) == 0);
    CHECK(mlxrt_session_feed(b, t, depth, NULL, 0, &err) == 0);
    for (int i = 0; i < 12; i++) {
      CHECK(mlxrt_session_feed(b, t + depth + i, 1, one, 0, &err) == 0);
      diff += memcmp(one, rows + i * V, sizeof one) != 0;
    }
    mlxrt_session_reset(a);
    mlxrt_session_reset(b);
  }
  CHECKF(diff == 0, "%s (%s): %d rows of a row-exact feed differ from one-token steps", dir,
         numerics ? numerics : "float32", diff);
  mlxrt_session_free(a);
  mlxrt_session_free(b);
  mlxrt_model_free(m);
}

static void test_rowwise(void) {
  DIR *d = opendir(FIXTURES);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.' || !strchr(e->d_name, '-')) continue;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, e->d_name);
    check_rowwise(dir, NULL);
    if (n % 4 == 0) check_rowwise(dir, "mlx-cpu");
    n++;
  }
  if (d) closedir(d);
  CHECKF(n >= 20, "only %d fixture folders", n);
  printf("row-exact feeds: %d fixtures\n", n);
}

/* ---- greedy: the same tokens ----------------------------------------------------------------- */
#define MAXT 200
typedef struct run {
  int32_t ids[MAXT];
  float lp[MAXT];
  int n;
} run;

static int on_token(void *user, const mlxrt_token_info *t) {
  run *r = user;
  if (r->n < MAXT) {
    r->ids[r->n] = t->id;
    r->lp[r->n] = t->logprob;
  }
  r->n++;
  return 0;
}

static int generate(mlxrt_model *m, const int32_t *p, size_t n, int max, float temp, uint64_t seed,
                    const mlxrt_spec_options *spec, int logprobs, run *r, mlxrt_gen_stats *st, int32_t *held,
                    size_t *n_held) {
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(m, 1024, &err);
  mlxrt_generate_options o;
  mlxrt_generate_options_default(&o);
  o.gen.temperature = temp;
  o.gen.seed = seed;
  o.gen.seed_set = 1;
  o.gen.max_tokens = max;
  o.ignore_stop = 1;
  o.logprobs = logprobs;
  if (spec) o.spec = *spec;
  memset(r, 0, sizeof *r);
  int rc = s ? mlxrt_session_generate(s, p, n, &o, on_token, r, st, &err) : -1;
  CHECKF(rc == 0, "generate: %s", err.msg);
  if (held && s) {
    const int32_t *h = mlxrt_session_tokens(s, n_held);
    memcpy(held, h, *n_held * sizeof *h);
  }
  mlxrt_session_free(s);
  return rc;
}

/* A prompt: random, or a pattern repeated with noise (so that n-grams recur). */
static size_t make_prompt(int32_t *p, int kind) {
  size_t n = 0;
  p[n++] = 2;
  if (kind % 2 == 0) {
    const size_t len = 10 + rnd() % 50;
    while (n < len) p[n++] = (int32_t)(8 + rnd() % 330);
    return n;
  }
  int32_t pat[9];
  const int plen = 2 + (int)(rnd() % 8);
  for (int i = 0; i < plen; i++) pat[i] = (int32_t)(8 + rnd() % 330);
  const size_t len = 20 + rnd() % 60;
  for (; n < len; n++) p[n] = rnd() % 9 == 0 ? (int32_t)(8 + rnd() % 330) : pat[n % (size_t)plen];
  return n;
}

static void test_greedy(void) {
  /* (pairs: 0 and 1 are one model in two formats, a near draft for each other) */
  const char *names[] = {"gemma3-text-bf16", "gemma3-text-affine4-g64", "gemma4-dense-nvfp4", "gemma4-e2b-affine8-g32",
                         "gemma4-moe-mxfp4", "gemma3-nested-affine4-g64"};
  const int nf = (int)(sizeof names / sizeof names[0]);
  fixture f[6];
  for (int i = 0; i < nf; i++)
    if (open_fixture(&f[i], names[i], TOKENIZER)) return;
  mlxrt_error aerr = {{0}};
  mlxrt_options ao = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *mtp = mlxrt_model_load(MTP_DIR, &ao, &aerr); /* drafts for the gemma4-dense fixtures */
  CHECKF(mtp != NULL, "%s", aerr.msg);
  int64_t mtp_drafted = 0, mtp_accepted = 0;
  int64_t self_drafted = 0, self_accepted = 0, other_drafted = 0, other_accepted = 0, lookup_drafted = 0,
          lookup_accepted = 0, tokens = 0;
  static int32_t held_a[1024], held_b[1024];
  for (int fi = 0; fi < nf; fi++) {
    mlxrt_model *m = f[fi].m, *other = f[(fi + 2) % nf].m; /* another model */
    for (int pi = 0; pi < 6; pi++) {
      int32_t p[100];
      const size_t n = make_prompt(p, pi);
      const int max = pi == 5 ? 1 + (int)(rnd() % 3) : 64 + (int)(rnd() % 48);
      run plain, sp;
      mlxrt_gen_stats st;
      size_t na = 0, nb = 0;
      if (generate(m, p, n, max, 0, 0, NULL, 1, &plain, &st, held_a, &na)) continue;
      tokens += plain.n;
      const mlxrt_spec_options variants[] = {
          {MLXRT_SPEC_LOOKUP, 0, 0, NULL},    {MLXRT_SPEC_LOOKUP, 1, 1, NULL}, {MLXRT_SPEC_LOOKUP, 4, 2, NULL},
          {MLXRT_SPEC_LOOKUP, 32, 8, NULL},   {MLXRT_SPEC_DRAFT, 0, 0, m},     {MLXRT_SPEC_DRAFT, 7, 0, m},
          {MLXRT_SPEC_DRAFT, 3, 0, other},    {MLXRT_SPEC_DRAFT, 5, 0, f[fi ^ 1].m}, {MLXRT_SPEC_DRAFT, 4, 0, mtp}};
      for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        if (variants[vi].draft_model == mtp && (!mtp || strcmp(names[fi], "gemma4-dense-nvfp4"))) continue;
        if (generate(m, p, n, max, 0, 0, &variants[vi], 1, &sp, &st, held_b, &nb)) continue;
        int same = sp.n == plain.n && !memcmp(sp.ids, plain.ids, (size_t)(sp.n < MAXT ? sp.n : MAXT) * sizeof *sp.ids) &&
                   !memcmp(sp.lp, plain.lp, (size_t)(sp.n < MAXT ? sp.n : MAXT) * sizeof *sp.lp);
        CHECKF(same, "%s prompt %d variant %zu: the speculative tokens differ from plain greedy", names[fi], pi, vi);
        CHECKF(na == nb && !memcmp(held_a, held_b, na * sizeof *held_a),
               "%s prompt %d variant %zu: the session holds other ids after (%zu vs %zu)", names[fi], pi, vi, nb, na);
        CHECK(st.spec_accepted <= st.spec_drafted && st.spec_passes <= st.spec_drafted);
        const mlxrt_spec_options *v = &variants[vi];
        if (v->mode == MLXRT_SPEC_LOOKUP) lookup_drafted += st.spec_drafted, lookup_accepted += st.spec_accepted;
        else if (v->draft_model == m) {
          self_drafted += st.spec_drafted, self_accepted += st.spec_accepted;
          CHECKF(st.spec_accepted == st.spec_drafted, "%s: the model as its own draft: %lld of %lld accepted",
                 names[fi], (long long)st.spec_accepted, (long long)st.spec_drafted);
        } else if (v->draft_model == other) other_drafted += st.spec_drafted, other_accepted += st.spec_accepted;
        else if (v->draft_model == mtp) mtp_drafted += st.spec_drafted, mtp_accepted += st.spec_accepted;
      }
    }
  }
  printf("greedy: %lld tokens per variant; accepted: lookup %lld/%lld, self-draft %lld/%lld, other fixture as draft "
         "%lld/%lld, MTP drafter (gemma4-dense-nvfp4) %lld/%lld\n",
         (long long)tokens, (long long)lookup_accepted, (long long)lookup_drafted, (long long)self_accepted,
         (long long)self_drafted, (long long)other_accepted, (long long)other_drafted, (long long)mtp_accepted,
         (long long)mtp_drafted);
  CHECK(mtp_drafted > 100 && mtp_accepted > 0);
  mlxrt_model_free(mtp);
  CHECK(self_drafted > 1000 && lookup_drafted > 1000 && other_drafted > 1000);
  CHECKF(other_accepted * 5 < other_drafted, "another fixture's drafts: %lld of %lld accepted (rejections expected)",
         (long long)other_accepted, (long long)other_drafted);
  CHECK(lookup_accepted > 0 && lookup_accepted < lookup_drafted);
  for (int i = 0; i < nf; i++) close_fixture(&f[i]);
}

/* ---- sampled: the distribution ---------------------------------------------------------------- */
/* The first three tokens' joint distribution: its support (at most 8^3 triples with top-k 8). */
#define MAXCELLS 1024
typedef struct joint {
  int32_t t[MAXCELLS][3];
  double p[MAXCELLS];
  int n;
} joint;

/* The exact probability of every first three tokens (t0, t1, t2) the model draws after the
 * prompt with these settings: the sampler's own distributions (mx_sampler_probs), history and all. */
static void exact_joint(mlxrt_model *m, const int32_t *p, size_t n, const mx_sampler_params *sp, joint *j) {
  mlxrt_error err = {{0}};
  mx_sampler *smp = mx_sampler_create(sp, V, &err);
  mlxrt_session *s = mlxrt_session_new(m, 256, &err);
  static float lg[V];
  static double p0[V], p1[V], p2[V];
  j->n = 0;
  CHECK(mlxrt_session_feed(s, p, (int64_t)n, lg, 0, &err) == 0);
  for (size_t i = 0; i < n; i++) mx_sampler_accept(smp, p[i]);
  mx_sampler_probs(smp, lg, p0, &err);
  for (int a = 0; a < V; a++) {
    if (p0[a] == 0) continue;
    for (int b = 0; b < V; b++) {
      /* the history and the cache as they stand after prompt, a (and b) */
      mx_sampler_reset(smp);
      for (size_t i = 0; i < n; i++) mx_sampler_accept(smp, p[i]);
      mx_sampler_accept(smp, a);
      mlxrt_session_rewind(s, (int64_t)n);
      int32_t ta = a;
      CHECK(mlxrt_session_feed(s, &ta, 1, lg, 0, &err) == 0);
      mx_sampler_probs(smp, lg, p1, &err);
      if (p1[b] == 0) continue;
      int32_t tb = b;
      CHECK(mlxrt_session_feed(s, &tb, 1, lg, 0, &err) == 0);
      mx_sampler_accept(smp, b);
      mx_sampler_probs(smp, lg, p2, &err);
      for (int c = 0; c < V; c++)
        if (p2[c] > 0 && j->n < MAXCELLS) {
          j->t[j->n][0] = a, j->t[j->n][1] = b, j->t[j->n][2] = c;
          j->p[j->n++] = p0[a] * p1[b] * p2[c];
        }
    }
  }
  CHECK(j->n < MAXCELLS);
  mlxrt_session_free(s);
  mx_sampler_free(smp);
}

/* Pearson's statistic of the draws against j: cells expecting < 5 pooled, and draws outside the
 * support with them (expecting 0); *df out. */
static double chi_square(const joint *j, const int32_t (*draws)[3], int total, int *df) {
  static int count[MAXCELLS];
  memset(count, 0, sizeof count);
  int outside = 0;
  for (int i = 0; i < total; i++) {
    int c = 0;
    while (c < j->n && memcmp(j->t[c], draws[i], sizeof j->t[c])) c++;
    if (c < j->n) count[c]++;
    else outside++;
  }
  double stat = 0, pool_e = 0, pool_o = outside;
  int k = 0;
  for (int c = 0; c < j->n; c++) {
    const double e = j->p[c] * total;
    if (e < 5) {
      pool_e += e;
      pool_o += count[c];
      continue;
    }
    stat += (count[c] - e) * (count[c] - e) / e;
    k++;
  }
  stat += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1 ? pool_e : 1);
  *df = k;
  return stat;
}

static int passes(double stat, int df) { return stat < df + 6.0 * sqrt(2.0 * df) + 10.0; }

/* The first three tokens of N generations (seeds 1000, 1001, ...) with these sampler settings
 * and speculation; how many came back whole. */
static int draw_first3(mlxrt_model *m, const int32_t *p, size_t n, const mx_sampler_params *sp,
                       const mlxrt_spec_options *spec, int N, int32_t (*draws)[3], int64_t *drafted, int64_t *accepted) {
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(m, 256, &err);
  mlxrt_generate_options o;
  mlxrt_generate_options_default(&o);
  o.gen.temperature = sp->temperature, o.gen.top_k = sp->top_k, o.gen.top_p = sp->top_p;
  o.gen.min_p = 0, o.gen.repetition_penalty = sp->repetition_penalty;
  o.gen.max_tokens = 4; /* (drafts for the second and the third token: 4 - 0 - 2) */
  o.gen.seed_set = 1;
  o.ignore_stop = 1;
  o.spec = *spec;
  int got = 0;
  for (int i = 0; s && i < N; i++) {
    run r;
    mlxrt_gen_stats gs;
    memset(&r, 0, sizeof r);
    o.gen.seed = 1000 + (uint64_t)i;
    if (mlxrt_session_generate(s, p, n, &o, on_token, &r, &gs, &err) || r.n != 4) {
      CHECKF(0, "generate: %s", err.msg);
      break;
    }
    memcpy(draws[got++], r.ids, sizeof draws[0]);
    *drafted += gs.spec_drafted, *accepted += gs.spec_accepted;
  }
  mlxrt_session_free(s);
  return got;
}

static void test_sampled(void) {
  fixture f, g, h;
  if (open_fixture(&f, "gemma3-text-bf16", TOKENIZER) || open_fixture(&g, "gemma3-text-affine4-g64", TOKENIZER) ||
      open_fixture(&h, "gemma4-dense-bf16", TOKENIZER))
    return;
  /* the model's own greedy continuation of a start, then the start again: prompt lookup drafts
   * that continuation, which the model often samples */
  int32_t p[32] = {2, 40, 41, 42};
  run cont;
  mlxrt_gen_stats cs;
  if (generate(f.m, p, 4, 10, 0, 0, NULL, 0, &cont, &cs, NULL, NULL)) return;
  memcpy(p + 4, cont.ids, 10 * sizeof *p);
  p[14] = 40, p[15] = 41, p[16] = 42;
  const size_t n = 17;
  struct setting {
    float temp, top_p, penalty;
    int top_k;
  } settings[] = {{1.0f, 1.0f, 1.0f, 6}, {0.7f, 0.9f, 1.5f, 8}};
  enum { N = TEST_SANITIZED ? 400 : 2000 };
  static joint exact, wrong;
  static int32_t draws[N][3];
  for (size_t si = 0; si < sizeof settings / sizeof settings[0]; si++) {
    const struct setting *st = &settings[si];
    mx_sampler_params sp;
    mx_sampler_params_default(&sp);
    sp.temperature = st->temp, sp.top_k = st->top_k, sp.top_p = st->top_p, sp.repetition_penalty = st->penalty;
    exact_joint(f.m, p, n, &sp, &exact);
    /* plain; lookup; the model as its own draft (q = p: all kept); its 4-bit copy (q near p:
     * both branches of the rule); an unrelated model (q far from p: rejections) */
    const mlxrt_spec_options variants[] = {{MLXRT_SPEC_OFF, 0, 0, NULL},
                                           {MLXRT_SPEC_LOOKUP, 2, 0, NULL},
                                           {MLXRT_SPEC_DRAFT, 2, 0, f.m},
                                           {MLXRT_SPEC_DRAFT, 2, 0, g.m},
                                           {MLXRT_SPEC_DRAFT, 2, 0, h.m}};
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
      int64_t drafted = 0, accepted = 0;
      const int got = draw_first3(f.m, p, n, &sp, &variants[vi], N, draws, &drafted, &accepted);
      int df;
      const double x2 = chi_square(&exact, (const int32_t(*)[3])draws, got, &df);
      printf("sampled: setting %zu variant %zu: %d cells, chi-square %.1f, df %d (limit %.1f); drafted %lld, "
             "accepted %lld\n",
             si, vi, exact.n, x2, df, df + 6.0 * sqrt(2.0 * df) + 10.0, (long long)drafted, (long long)accepted);
      CHECKF(got == N && passes(x2, df), "setting %zu variant %zu: the tokens drawn are not distributed as the model's",
             si, vi);
      if (vi > 0) CHECKF(drafted > N / 2, "setting %zu variant %zu: %lld drafted", si, vi, (long long)drafted);
      if (vi == 1 || vi == 3)
        CHECKF(accepted > drafted / 10 && accepted < drafted, "setting %zu variant %zu: %lld of %lld accepted", si, vi,
               (long long)accepted, (long long)drafted);
      if (vi == 2) CHECK(accepted == drafted);
      if (vi == 1 && !TEST_SANITIZED) { /* the test's power: the same draws against another temperature's distribution */
        mx_sampler_params wp = sp;
        wp.temperature = st->temp * 1.3f;
        exact_joint(f.m, p, n, &wp, &wrong);
        const double xw = chi_square(&wrong, (const int32_t(*)[3])draws, got, &df);
        printf("sampled: setting %zu: the same draws against temperature x1.3: chi-square %.1f, df %d\n", si, xw, df);
        CHECKF(!passes(xw, df), "a wrong distribution passes: chi-square %.1f, df %d", xw, df);
      }
    }
  }
  close_fixture(&f);
  close_fixture(&g);
  close_fixture(&h);
}

/* ---- the Gemma 4 MTP drafter ------------------------------------------------------------------ */

static const void *golden_data(const st_archive *g, const char *name, st_dtype dt, int64_t *n) {
  const st_tensor *t = st_find(g, name);
  CHECKF(t && t->dtype == dt, "golden %s", name);
  if (!t || t->dtype != dt) return NULL;
  *n = st_numel(t);
  return t->data;
}

/* Pass r of the golden rounds again, from the kept context (the greedy tokens): the drafts
 * equal transformers' up to the first that differs, which must be one whose top-2 gap
 * transformers measured below `clear` (bf16 rounding can close it). Returns the drafts compared. */
static int mtp_pass(mlxrt_model *m, mlxrt_model *A, const int32_t *ids, int64_t pos, int k, const int32_t *want,
                    const float *margin, float clear, const float *first_logits) {
  mlxrt_error err = {{0}};
  mx_session *s = mx_session_create_flags(m->m, m->b, 1024, 0, MX_SESSION_REFERENCE, &err);
  mx_assistant *a = s ? mx_assistant_create(A->m, A->b, s, k, &err) : NULL;
  static float logits[V];
  int ok = a && mx_session_feed(s, ids, pos, logits, 0, &err) == 0 && mx_assistant_begin(a, ids[pos], pos, &err) == 0;
  CHECKF(ok, "MTP pass at %lld: %s", (long long)pos, err.msg);
  int compared = 0;
  for (int i = 0; ok && i < k; i++) {
    const float *x = mx_assistant_logits(a, &err);
    CHECKF(x != NULL, "MTP pass at %lld: %s", (long long)pos, err.msg);
    if (!x) break;
    if (first_logits && i == 0) { /* the same tokens scored, the same scores up to bf16 rounding */
      float top = 0, diff = 0;
      int live_a = 0, live_b = 0, same = 0;
      float min_a = x[0], min_b = first_logits[0];
      for (int v = 1; v < V; v++) min_a = fminf(min_a, x[v]), min_b = fminf(min_b, first_logits[v]);
      for (int v = 0; v < V; v++) {
        const int la = x[v] > min_a, lb = first_logits[v] > min_b;
        live_a += la, live_b += lb, same += la && lb;
        if (la && lb) top = fmaxf(top, fabsf(first_logits[v])), diff = fmaxf(diff, fabsf(x[v] - first_logits[v]));
      }
      printf("MTP first draft: %d tokens scored (transformers %d, both %d), max |logit difference| %.4f of %.3f\n",
             live_a, live_b, same, diff, top);
      CHECK(live_a == same && live_b == same && diff <= 0.02f * top);
    }
    int32_t d = 0;
    for (int v = 1; v < V; v++)
      if (x[v] > x[d]) d = v;
    if (d != want[i]) {
      CHECKF(margin[i] < clear, "MTP pass at %lld draft %d: %d, transformers %d (top-2 gap %.3f)", (long long)pos, i,
             (int)d, (int)want[i], margin[i]);
      break;
    }
    compared++;
    mx_assistant_push(a, d);
  }
  mx_assistant_free(a);
  mx_session_free(s);
  return compared;
}

/* A drafter fixture (dir) for the target fixture `target` against its golden data from
 * transformers; with `sampled`, also the sampled joint distribution. */
static void mtp_golden(const char *target, const char *dir, int sampled) {
  fixture f;
  if (open_fixture(&f, target, TOKENIZER)) return;
  mlxrt_error err = {{0}};
  mlxrt_options o = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *A = mlxrt_model_load(dir, &o, &err);
  CHECKF(A != NULL, "%s: %s", dir, err.msg);
  char path[512];
  snprintf(path, sizeof path, "%s/golden.safetensors", dir);
  st_archive g;
  if (!A || st_open(path, &g, &err)) {
    CHECKF(0, "%s", err.msg);
    mlxrt_model_free(A);
    close_fixture(&f);
    return;
  }
  int64_t np, nt, nr, nk, nkept, nd, nm, nl;
  const int32_t *prompt = golden_data(&g, "prompt", ST_I32, &np), *tokens = golden_data(&g, "tokens", ST_I32, &nt);
  const int32_t *rpos = golden_data(&g, "round_pos", ST_I32, &nr), *rk = golden_data(&g, "round_k", ST_I32, &nk);
  const int32_t *rkept = golden_data(&g, "round_kept", ST_I32, &nkept);
  const int32_t *rdrafts = golden_data(&g, "round_drafts", ST_I32, &nd);
  const float *rmargin = golden_data(&g, "round_margins", ST_F32, &nm);
  const float *first = golden_data(&g, "first_logits", ST_F32, &nl);
  if (!prompt || !tokens || !rpos || !rk || !rkept || !rdrafts || !rmargin || !first) return;
  const int K = (int)(nd / nr);
  const char *cm = st_file_metadata(&g.files[0], "clear_margin");
  const float clear = cm ? (float)atof(cm) : 0.0f;
  CHECK(clear > 0 && nl % V == 0);

  /* a whole generation: plain greedy's tokens, and transformers' passes, drafts and acceptances */
  const mlxrt_spec_options mtp = {MLXRT_SPEC_DRAFT, K, 0, A};
  run r;
  mlxrt_gen_stats st;
  int64_t drafted = 0, kept = 0;
  for (int64_t i = 0; i < nr; i++) drafted += rk[i], kept += rkept[i];
  if (generate(f.m, prompt, (size_t)np, (int)nt, 0, 0, &mtp, 0, &r, &st, NULL, NULL) == 0) {
    CHECK(r.n == nt && !memcmp(r.ids, tokens, (size_t)nt * sizeof *tokens));
    printf("MTP greedy (%s): %d tokens, %lld passes, %lld of %lld drafts kept (transformers: %lld passes, %lld of "
           "%lld)\n",
           target, r.n, (long long)st.spec_passes, (long long)st.spec_accepted, (long long)st.spec_drafted, (long long)nr,
           (long long)kept, (long long)drafted);
    CHECK(st.spec_passes == nr && st.spec_drafted == drafted && st.spec_accepted == kept);
  }
  /* pass by pass, from the kept context */
  int32_t ids[256];
  memcpy(ids, prompt, (size_t)np * sizeof *ids);
  memcpy(ids + np, tokens, (size_t)nt * sizeof *ids);
  int compared = 0;
  for (int64_t i = 0; i < nr; i++)
    compared += mtp_pass(f.m, A, ids, rpos[i], rk[i], rdrafts + i * K, rmargin + i * K, clear, i == 0 ? first : NULL);
  printf("MTP drafts pass by pass (%s): %d of %lld equal transformers' before any difference\n", target, compared,
         (long long)drafted);
  CHECK(compared * 10 >= drafted * 9);

  /* sampled: the first three tokens' joint distribution with the drafter's draws verified by
   * the rejection rule (its ordered head leaves most tokens at a low logit, not at zero) */
  if (sampled) {
    mx_sampler_params sp;
    mx_sampler_params_default(&sp);
    sp.temperature = 1.0f, sp.top_k = 6, sp.top_p = 1.0f, sp.repetition_penalty = 1.0f;
    enum { N = 2000 };
    static joint exact;
    static int32_t draws[N][3];
    exact_joint(f.m, prompt, (size_t)np, &sp, &exact);
    const mlxrt_spec_options two = {MLXRT_SPEC_DRAFT, 2, 0, A};
    int64_t sd = 0, sa = 0;
    const int got = draw_first3(f.m, prompt, (size_t)np, &sp, &two, N, draws, &sd, &sa);
    int df;
    const double x2 = chi_square(&exact, (const int32_t(*)[3])draws, got, &df);
    printf("MTP sampled: %d cells, chi-square %.1f, df %d (limit %.1f); drafted %lld, accepted %lld\n", exact.n, x2,
           df, df + 6.0 * sqrt(2.0 * df) + 10.0, (long long)sd, (long long)sa);
    CHECK(got == N && passes(x2, df) && sd > N / 2 && sa > 0 && sa < sd);
  }
  st_close(&g);
  mlxrt_model_free(A);
  close_fixture(&f);
}

static void test_mtp(void) {
  mtp_golden("gemma4-dense-bf16", MTP_DIR, 1);
  mtp_golden("gemma4-e2b-bf16", MTP_E2B_DIR, 0); /* a model whose later layers share K/V, with PLE */
  fixture f, g3;
  if (open_fixture(&f, "gemma4-dense-bf16", TOKENIZER) || open_fixture(&g3, "gemma3-text-bf16", TOKENIZER)) return;
  mlxrt_error err = {{0}};
  mlxrt_options o = {"cpu", 1, 0, NULL, NULL};
  mlxrt_model *A = mlxrt_model_load(MTP_DIR, &o, &err);
  CHECKF(A != NULL, "%s", err.msg);
  if (!A) return;
  const mlxrt_spec_options mtp = {MLXRT_SPEC_DRAFT, 4, 0, A};
  /* a token_ordering that names an id twice: refused at load, naming the tensor and entry */
  {
    char dir[] = "/tmp/mlxrt_mtp_XXXXXX", path[256];
    st_file sf;
    CHECK(mkdtemp(dir) != NULL && st_open_file(MTP_DIR "/model.safetensors", &sf, &err) == 0);
    const st_tensor *t = st_file_find(&sf, "masked_embedding.token_ordering");
    CHECK(t != NULL);
    if (t) {
      uint8_t *img = malloc(sf.size);
      memcpy(img, sf.map, sf.size);
      memcpy(img + (t->data - sf.map) + 8, t->data, 8); /* entry 1 = entry 0 */
      snprintf(path, sizeof path, "%s/model.safetensors", dir);
      FILE *fp = fopen(path, "wb");
      CHECK(fp && fwrite(img, 1, sf.size, fp) == sf.size);
      if (fp) fclose(fp);
      free(img);
      char cfg[256];
      snprintf(cfg, sizeof cfg, "%s/config.json", dir);
      CHECK(symlink(MTP_DIR "/config.json", cfg) == 0);
      memset(&err, 0, sizeof err);
      mlxrt_model *bad = mlxrt_model_load(dir, &o, &err);
      CHECK(bad == NULL);
      CHECK_MSG(err, "tensor 'masked_embedding.token_ordering' entry 1 is");
      CHECK_MSG(err, "expected each id of the vocabulary (0 to 383) once");
      mlxrt_model_free(bad);
      unlink(cfg);
      unlink(path);
    }
    st_close_file(&sf);
    rmdir(dir);
  }

  /* what it refuses: a session of its own, a Gemma 3 model, more drafts than the rings hold */
  CHECK(mlxrt_session_new(A, 256, &err) == NULL);
  CHECK_MSG(err, "gemma4_assistant");
  mlxrt_session *s3 = mlxrt_session_new(g3.m, 256, &err), *s4 = mlxrt_session_new(f.m, 256, &err);
  memset(&err, 0, sizeof err);
  CHECK(s3 && mlxrt_spec_check(s3, &mtp, &err) == -1);
  CHECK_MSG(err, "Gemma 3");
  const mlxrt_spec_options many = {MLXRT_SPEC_DRAFT, 32, 0, A};
  memset(&err, 0, sizeof err);
  CHECK(s4 && mlxrt_spec_check(s4, &many, &err) == -1);
  CHECK_MSG(err, "cannot hold them");
  CHECK(s4 && mlxrt_spec_check(s4, &mtp, &err) == 0);
  /* a drafter made for another model: the dense one's for the E2B-like fixture (other K/V heads) */
  fixture e2b;
  if (open_fixture(&e2b, "gemma4-e2b-bf16", TOKENIZER) == 0) {
    mlxrt_session *s5 = mlxrt_session_new(e2b.m, 256, &err);
    memset(&err, 0, sizeof err);
    CHECK(s5 && mlxrt_spec_check(s5, &mtp, &err) == -1);
    CHECK_MSG(err, "K/V heads of");
    mlxrt_session_free(s5);
    close_fixture(&e2b);
  }
  mlxrt_session_free(s3);
  mlxrt_session_free(s4);
  mlxrt_model_free(A);
  close_fixture(&f);
  close_fixture(&g3);
}

/* ---- errors ----------------------------------------------------------------------------------- */
static void test_errors(void) {
  fixture f, g;
  if (open_fixture(&f, "gemma3-text-bf16", TOKENIZER) || open_fixture(&g, "gemma3-text-bf16", OTHER_TOKENIZER)) return;
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(f.m, 256, &err);
  const struct {
    mlxrt_spec_options o;
    const char *msg;
  } bad[] = {{{7, 0, 0, NULL}, "mode 7"},
             {{MLXRT_SPEC_LOOKUP, 33, 0, NULL}, "draft_max 33"},
             {{MLXRT_SPEC_LOOKUP, -1, 0, NULL}, "draft_max -1"},
             {{MLXRT_SPEC_LOOKUP, 0, 9, NULL}, "ngram_max 9"},
             {{MLXRT_SPEC_DRAFT, 0, 0, NULL}, "needs a draft_model"},
             {{MLXRT_SPEC_LOOKUP, 0, 0, f.m}, "draft_model is for MLXRT_SPEC_DRAFT"},
             {{MLXRT_SPEC_DRAFT, 0, 2, f.m}, "ngram_max is prompt lookup's"},
             {{MLXRT_SPEC_DRAFT, 0, 0, g.m}, "another tokenizer"}};
  int32_t p[] = {2, 10, 11, 12};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    CHECK(mlxrt_spec_check(s, &bad[i].o, &err) == -1);
    CHECK_MSG(err, bad[i].msg);
    mlxrt_generate_options o;
    mlxrt_generate_options_default(&o);
    o.gen.max_tokens = 2;
    o.spec = bad[i].o;
    memset(&err, 0, sizeof err);
    CHECK(mlxrt_session_generate(s, p, 4, &o, NULL, NULL, NULL, &err) == -1);
    CHECK_MSG(err, bad[i].msg);
  }
  const mlxrt_spec_options good = {MLXRT_SPEC_DRAFT, 0, 0, f.m};
  CHECK(mlxrt_spec_check(s, &good, &err) == 0 && mlxrt_spec_check(s, NULL, &err) == 0);
  mlxrt_session_free(s);
  /* a session the whole-step decoder runs (the CPU backend's, when required) gives the last
   * position's logits only: refused, by the option's name */
  setenv("MLXRT_DECODER", "1", 1);
  s = mlxrt_session_new(f.m, 256, &err);
  unsetenv("MLXRT_DECODER");
  CHECKF(s != NULL, "%s", err.msg);
  const mlxrt_spec_options lookup = {MLXRT_SPEC_LOOKUP, 0, 0, NULL};
  memset(&err, 0, sizeof err);
  CHECK(s && mlxrt_spec_check(s, &lookup, &err) == -1);
  CHECK_MSG(err, "speculative decoding (spec)");
  CHECK_MSG(err, "decoder");
  mlxrt_session_free(s);
  /* a chat made with speculation that cannot run fails when it is made */
  mlxrt_chat_options co;
  memset(&co, 0, sizeof co);
  co.use_template = 1;
  mlxrt_gen_params_default(&co.gen);
  co.spec.mode = MLXRT_SPEC_LOOKUP;
  co.spec.draft_max = 40;
  mlxrt_chat *c = mlxrt_chat_new(f.m, &co, &err);
  CHECK(c == NULL);
  CHECK_MSG(err, "draft_max 40");
  mlxrt_chat_free(c);
  close_fixture(&f);
  close_fixture(&g);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  double t = now_s();
  test_lookup();
  test_rule();
  test_rowwise();
  printf("(%.1f s)\n", now_s() - t);
  test_greedy();
  printf("(%.1f s)\n", now_s() - t);
  test_sampled();
  printf("(%.1f s)\n", now_s() - t);
  test_mtp();
  printf("(%.1f s)\n", now_s() - t);
  test_errors();
  TEST_END();
}
