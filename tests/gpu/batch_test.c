/* mlxrt-batch-test: a backend's batched decode (accel.h decoder_batch_*): the CUDA decoder's on a
 * GPU machine (the default), the CPU backend's in CTest (--backend cpu, where step 2 must equal
 * step 1 bit for bit).
 * For each model folder:
 *   0. the reference: each sequence through the CPU backend's decoder (the reference path's
 *      math), --gen greedy tokens with their logits;
 *   1. alone: each of --seqs sequences (prompts of different lengths) through decoder_step,
 *      --gen greedy tokens with their logits;
 *   2. batched: the same sequences joining at different steps (sequence s starts its prompt at
 *      step 3·s mod 11 and decodes in the batch from then on), every step one batched call of
 *      the live rows; rows in a shuffled slot order; on a GPU at the model's whole context, then
 *      again at the capacity the sequences need: the KV held (decoder_memory) must not grow with
 *      the capacity beyond a page per lane (the slots' caches grow by pages);
 *   3. the same batch again with its rows in the reverse order and each sequence on another slot
 *      (every step the same number of rows);
 *   4. pooled: the sequences through a step pool (src/mlx/step_pool.c), a thread each, started
 *      in the order of their joins: tokens equal to 2's (a near-tie excepted), logits within 5 %
 *      of their range, and steps that held several sequences;
 *   --no-ref leaves step 0 out (models too large for the CPU in a call: the 31B's shapes, whose
 *   products take the batched kernels' k splits, which the tiny fixtures' do not);
 *   checks: 2's tokens equal 1's and 0's (a first difference only at a near-tie of their logits),
 *   2's logits within 5 % of the range of 1's and of 0's, and 2's logits bit-identical to 3's (a
 *   row's result depends on how many rows its step has, never on which other rows they are, their
 *   order or its slot) — except on MoE models, whose experts' grouped products group the rows by
 *   expert (accel.h decoder_batch_step). On the CPU backend every row is bit for bit its
 *   sequence's step alone (1, and 4 bit-identical to 2).
 *   --bench B1,B2,...: B sequences of --pp prompt tokens each, then --tg batched steps; the
 *   aggregate and per-sequence decode t/s (the shape of llama-batched-bench -npp -ntg -npl), then
 *   the same through a step pool with a thread per sequence (what a server's slots run).
 * Exit status 0 when every model passes. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"
#include "base/error.h"
#include "mlx/decoder_desc.h"
#include "mlx/session.h"
#include "mlx/step_pool.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct seq {
  int32_t *prompt;
  int np, join;
  int32_t *toks;    /* [gen] */
  float *logits;    /* [gen][V]: the logits each token was chosen from */
} seq;

static int32_t prompt_id(int s, int i, int V) { return (int32_t)(((uint64_t)(s * 7919 + i) * 2654435761u + 11) % (uint64_t)V); }

/* 1: every sequence through decoder_step alone */
static int run_alone(accel_backend *b, const accel_model_desc *d, seq *q, int ns, int gen, mlxrt_error *err) {
  const int V = d->vocab;
  for (int s = 0; s < ns; s++) {
    accel_decoder *dec = b->decoder_create(b, d, q[s].np + gen + 1, err);
    if (!dec) return -1;
    int32_t t = -1;
    int rc = b->decoder_step(dec, q[s].prompt, q[s].np, 0, NULL, 0.0, q[s].logits, &t, err);
    for (int i = 0; i < gen && !rc; i++) {
      q[s].toks[i] = t;
      if (i + 1 < gen)
        rc = b->decoder_step(dec, &t, 1, q[s].np + i, NULL, 0.0, q[s].logits + (size_t)(i + 1) * V, &t, err);
    }
    b->decoder_free(dec);
    if (rc) return -1;
  }
  return 0;
}

/* A row's uniform number: a function of its sequence and step, whatever the batch */
static double row_u(int s, int step) { return (double)(((uint64_t)(s * 131 + step) * 2654435761u) % 1000003u) / 1000003.0; }

/* 2 and 3: the batched path; only >= 0: that sequence alone (a batch of one row); sampled: every
 * row drawn at temperature 0.8, top_k 40, with row_u. capacity: the decoder's (0: what the
 * sequences need); kv_held (may be NULL): the KV bytes its decoder held at the end (0: no report) */
/* flip: the rows of each step in the reverse order, sequence s on slot s (else on slot ns-1-s) */
static int run_batched(accel_backend *b, const accel_model_desc *d, seq *q, int ns, int gen, int only, int flip,
                       int sampled, int64_t capacity, int32_t *toks, float *logits, uint64_t *kv_held,
                       mlxrt_error *err) {
  const int V = d->vocab;
  int64_t cap = 0;
  for (int s = 0; s < ns; s++)
    if (q[s].np + gen + 1 > cap) cap = q[s].np + gen + 1;
  if (capacity > cap) cap = capacity;
  accel_decoder *dec = b->decoder_create(b, d, cap, err);
  if (!dec) return -1;
  int rc = b->decoder_batch_init(dec, ns, err);
  int *slot = calloc((size_t)ns, sizeof(int)), *done = calloc((size_t)ns, sizeof(int)), *rs = calloc((size_t)ns, sizeof(int));
  int32_t *cur = calloc((size_t)ns, sizeof(int32_t)), *rt = calloc((size_t)ns, sizeof(int32_t)),
          *rn = calloc((size_t)ns, sizeof(int32_t));
  int64_t *rp = calloc((size_t)ns, sizeof(int64_t));
  float *rl = calloc((size_t)ns * V, sizeof(float));
  accel_sample_params *sp = calloc((size_t)ns, sizeof *sp);
  double *u = calloc((size_t)ns, sizeof *u);
  int *rseq = calloc((size_t)ns, sizeof(int));
  if (!slot || !done || !rs || !cur || !rt || !rn || !rp || !rl || !rseq || !sp || !u) rc = -1;
  for (int s = 0; s < ns && !rc; s++) slot[s] = flip ? s : ns - 1 - s; /* rows and slots in different orders */
  for (int step = 0; !rc; step++) {
    int live = 0, all_done = 1;
    for (int i = 0; i < ns && !rc; i++) {
      const int s = flip ? ns - 1 - i : i;
      if (only >= 0 && s != only) continue;
      if (done[s] >= gen) continue;
      all_done = 0;
      if (only < 0 && q[s].join > step) continue;
      if (done[s] == 0 && (only >= 0 ? step == 0 : q[s].join == step)) { /* joins: its prompt */
        rc = b->decoder_slot_prompt(dec, slot[s], q[s].prompt, q[s].np, 0, NULL, 0.0, logits + (size_t)s * gen * V,
                                    &cur[s], err);
        toks[(size_t)s * gen] = cur[s];
        done[s] = 1;
        continue;
      }
      rseq[live] = s;
      rs[live] = slot[s];
      rt[live] = cur[s];
      rp[live] = q[s].np + done[s] - 1;
      sp[live] = (accel_sample_params){0.8f, 40, 0.0f, 0.0f};
      u[live] = row_u(s, done[s]);
      live++;
    }
    if (rc || all_done) break;
    if (!live) continue;
    rc = b->decoder_batch_step(dec, live, rs, rt, rp, sampled ? sp : NULL, sampled ? u : NULL, rl, rn, err);
    for (int r = 0; r < live && !rc; r++) {
      const int s = rseq[r];
      cur[s] = rn[r];
      toks[(size_t)s * gen + done[s]] = rn[r];
      memcpy(logits + ((size_t)s * gen + done[s]) * V, rl + (size_t)r * V, (size_t)V * sizeof(float));
      done[s]++;
    }
  }
  accel_memory mem = {0};
  if (kv_held) *kv_held = !rc && b->decoder_memory && !b->decoder_memory(dec, &mem, err) ? mem.kv_bytes : 0;
  b->decoder_free(dec);
  free(slot);
  free(done);
  free(rs);
  free(cur);
  free(rt);
  free(rn);
  free(rp);
  free(rl);
  free(rseq);
  free(sp);
  free(u);
  return rc;
}

/* One sequence of 4 on its thread: its prompt, then greedy steps (logits kept when asked). */
typedef struct pool_seq {
  mx_pool *p;
  int slot, np, gen, V;
  const int32_t *prompt;
  int32_t *toks;
  float *logits;
  pthread_barrier_t *prompted; /* bench: every thread's prompt done before the steps are timed */
  int fed;                      /* its prompt has ended (atomic) */
  int rc;
  mlxrt_error err;
} pool_seq;

static void *pool_seq_run(void *arg) {
  pool_seq *j = arg;
  int32_t t = -1;
  j->rc = mx_pool_feed(j->p, j->slot, j->prompt, j->np, 0, NULL, 0.0, j->logits, &t, NULL, NULL, &j->err);
  __atomic_store_n(&j->fed, 1, __ATOMIC_RELEASE);
  if (j->prompted) pthread_barrier_wait(j->prompted);
  for (int i = 0; i < j->gen && !j->rc; i++) {
    j->toks[i] = t;
    if (i + 1 < j->gen)
      j->rc = mx_pool_step(j->p, j->slot, t, j->np + i, NULL, 0.0, j->logits ? j->logits + (size_t)(i + 1) * j->V : NULL,
                           &t, &j->err);
  }
  mx_pool_leave(j->p, j->slot);
  return NULL;
}

/* Two rows wait for the pool's held step, or (all: every thread has been started) every thread
 * has fed its prompt (some may have failed: nothing more will come). */
static int pool_two_waiting(mx_pool *p, const pool_seq *j, int ns, const int *live, int all) {
  mx_pool_stats st;
  mx_pool_get_stats(p, &st);
  if (st.waiting >= 2) return 1;
  if (!all) return 0;
  for (int s = 0; s < ns; s++)
    if (live[s] && !__atomic_load_n(&j[s].fed, __ATOMIC_ACQUIRE)) return 0;
  return 1;
}

/* 4: thread s starts 2·join ms after the first, so the sequences join the pool's steps at
 * different times; the pool's steps are held until two sequences wait for one (on a tiny model
 * a sequence can otherwise end before the next thread is scheduled), so at least one step
 * holds several; toks / logits as run_batched's. */
static int run_pooled(const mx_model *m, accel_backend *b, const seq *q, int ns, int gen, int32_t *toks, float *logits,
                      mx_pool_stats *st, mlxrt_error *err) {
  const int V = m->cfg.vocab_size;
  int64_t cap = 0;
  for (int s = 0; s < ns; s++)
    if (q[s].np + gen + 1 > cap) cap = q[s].np + gen + 1;
  mx_pool *p = mx_pool_create(m, b, ns, cap, err);
  if (!p) return -1;
  pool_seq *j = calloc((size_t)ns, sizeof *j);
  pthread_t *th = calloc((size_t)ns, sizeof *th);
  int *live = calloc((size_t)ns, sizeof *live);
  int rc = !j || !th || !live, held = ns > 1;
  mx_pool_hold(p, held);
  for (int w = 0; w <= 10 && !rc; w++) /* q[s].join is 0..10 */
    for (int s = 0; s < ns && !rc; s++) {
      if (q[s].join != w) continue;
      j[s] = (pool_seq){p, mx_pool_acquire(p), q[s].np, gen, V, q[s].prompt, toks + (size_t)s * gen,
                        logits + (size_t)s * gen * V, NULL, 0, 0, {{0}}};
      live[s] = !pthread_create(&th[s], NULL, pool_seq_run, &j[s]);
      if (!live[s]) rc = mx_fail(err, "cannot start thread %d", s);
      nanosleep(&(struct timespec){0, 2000000}, NULL);
      held = held && !pool_two_waiting(p, j, ns, live, 0);
      if (!held) mx_pool_hold(p, 0);
    }
  while (held && !rc) { /* all started: until two wait, or every prompt has ended */
    held = !pool_two_waiting(p, j, ns, live, 1);
    if (held) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  mx_pool_hold(p, 0);
  for (int s = 0; s < ns && live; s++)
    if (live[s]) pthread_join(th[s], NULL);
  for (int s = 0; s < ns && !rc; s++)
    if (j[s].rc) {
      *err = j[s].err;
      rc = -1;
    }
  mx_pool_get_stats(p, st);
  mx_pool_free(p);
  free(j);
  free(th);
  free(live);
  return rc;
}

/* Sequence s's batched tokens bt / logits bl against another run's (toks, logits): the index of
 * the first differing token (gen: none); a difference not at a near-tie of the other run's
 * logits sets *bad; *worst raised to the logits' largest difference relative to the other
 * run's range while the tokens agree. */
static int compare(const char *label, int s, const int32_t *toks, const float *logits, const int32_t *bt,
                   const float *bl, int gen, int V, double *worst, int *bad) {
  int same = gen;
  for (int i = 0; i < gen && same == gen; i++) {
    const float *r = logits + (size_t)i * V, *g = bl + (size_t)i * V;
    float mr = 0, md = 0;
    for (int j = 0; j < V; j++) {
      if (fabsf(r[j]) > mr) mr = fabsf(r[j]);
      if (isnan(g[j])) md = INFINITY;
      else if (fabsf(r[j] - g[j]) > md) md = fabsf(r[j] - g[j]);
    }
    const double rel = mr > 0 ? md / mr : md;
    if (rel > *worst) *worst = rel;
    if (toks[i] != bt[i]) {
      same = i;
      const int tie = r[toks[i]] - r[bt[i]] <= 0.01f * mr;
      printf("  sequence %d: tokens first differ from %s at step %d: %d vs batched %d%s\n", s, label, i, toks[i], bt[i],
             tie ? " (near-tie, accepted)" : "");
      if (!tie) *bad = 1;
    }
  }
  return same;
}

static int check_model(const mx_model *m, accel_backend *b, accel_backend *cpu, const accel_model_desc *d, int ns,
                       int gen, int with_ref) {
  const int V = d->vocab;
  int moe = 0;
  for (int i = 0; i < d->n_layers; i++) moe |= d->layers[i].moe.experts > 0;
  /* the CPU backend's rows are its slots' decoder_step: every sequence bit for bit its step alone */
  const int exact_alone = b == cpu;
  mlxrt_error err = {0};
  seq *q = calloc((size_t)ns, sizeof *q), *r = calloc((size_t)ns, sizeof *r);
  int32_t *bt = calloc((size_t)ns * gen, sizeof(int32_t)), *ot = calloc((size_t)ns * gen, sizeof(int32_t));
  float *bl = calloc((size_t)ns * gen * V, sizeof(float)), *ol = calloc((size_t)ns * gen * V, sizeof(float));
  int bad = 0;
  if (!q || !r || !bt || !ot || !bl || !ol) {
    printf("  FAIL: out of memory\n");
    bad = 1;
    goto done;
  }
  for (int s = 0; s < ns; s++) {
    q[s].np = 3 + (s * 37) % 61;
    q[s].join = (3 * s) % 11;
    q[s].prompt = malloc((size_t)q[s].np * sizeof(int32_t));
    q[s].toks = calloc((size_t)gen, sizeof(int32_t));
    q[s].logits = calloc((size_t)gen * V, sizeof(float));
    if (!q[s].prompt || !q[s].toks || !q[s].logits) {
      printf("  FAIL: out of memory\n");
      bad = 1;
      goto done;
    }
    for (int i = 0; i < q[s].np; i++) q[s].prompt[i] = prompt_id(s, i, V);
  }
  for (int s = 0; s < ns && with_ref; s++) {
    r[s] = q[s];
    r[s].toks = calloc((size_t)gen, sizeof(int32_t));
    r[s].logits = calloc((size_t)gen * V, sizeof(float));
    if (!r[s].toks || !r[s].logits) {
      printf("  FAIL: out of memory\n");
      bad = 1;
      goto done;
    }
  }
  if (with_ref && run_alone(cpu, d, r, ns, gen, &err)) {
    printf("  FAIL the CPU reference: %s\n", err.msg);
    bad = 1;
    goto done;
  }
  double t0 = now_s();
  if (run_alone(b, d, q, ns, gen, &err)) {
    printf("  FAIL alone: %s\n", err.msg);
    bad = 1;
    goto done;
  }
  double t1 = now_s();
  /* The batched runs compared below share one capacity (a layer's kernels and its attention's
   * splits may depend on it): the sequences' need, or the sliding window where that is longer,
   * so that the rings are whole in it as at any larger capacity. */
  int64_t cmp_cap = 0;
  for (int i = 0; i < d->n_layers; i++)
    if (d->layers[i].sliding && d->sliding_window + 1 > cmp_cap) cmp_cap = d->sliding_window + 1;
  uint64_t held_need = 0;
  if (run_batched(b, d, q, ns, gen, -1, 0, 0, cmp_cap, bt, bl, &held_need, &err)) {
    printf("  FAIL batched: %s\n", err.msg);
    bad = 1;
    goto done;
  }
  double t2 = now_s();
  printf("  %d sequences x %d tokens: alone %.2f s, batched %.2f s\n", ns, gen, t1 - t0, t2 - t1);
  /* at the model's whole context on a backend whose cache grows by pages: the slots hold pages
   * for the positions they use, not the capacity */
  const int64_t most = b == cpu ? 0 : m->cfg.max_position_embeddings;
  if (most > 0 && held_need > 0) {
    /* The same batch at the model's whole context: a cache that grows by pages holds the same
     * pages whatever the capacity, up to the rounding of a lane's last page (one 2 MiB page per
     * owning layer's K and V array, for each slot and the decoder's own sequence); one allocated
     * up front would grow with it. */
    uint64_t held = 0, lanes = 0, whole = 0;
    for (int i = 0; i < d->n_layers; i++)
      if (d->layers[i].kv_source == i) {
        lanes += 2ull * (uint64_t)(ns + 1);
        if (!d->layers[i].sliding)
          whole += 2ull * (uint64_t)ns * (uint64_t)most * (uint64_t)d->layers[i].n_kv_heads *
                   (uint64_t)d->layers[i].head_dim * 2u;
      }
    if (run_batched(b, d, q, ns, gen, -1, 0, 0, most, ot, ol, &held, &err)) {
      printf("  FAIL batched at the model's whole context: %s\n", err.msg);
      bad = 1;
      goto done;
    }
    printf("  KV held by %d slots: %.1f MiB at a capacity of %lld, %.1f MiB at %lld (full layers' K/V for the "
           "whole capacity: %.1f MiB)\n",
           ns, held / 1048576.0, (long long)most, held_need / 1048576.0, (long long)cmp_cap, whole / 1048576.0);
    if (held_need == 0 || held > held_need + lanes * (2u << 20)) {
      printf("  FAIL the slots' caches grow with the capacity (more than a page per lane beyond what the sequences "
             "need)\n");
      bad = 1;
    }
  }
  int tokens_equal = 0, exact = 0, ref_equal = 0;
  double worst = 0, worst_ref = 0;
  const char *label_alone = "alone", *label_ref = "the CPU reference";
  /* the same batch, rows reversed and on other slots: each row the same bits */
  if (run_batched(b, d, q, ns, gen, -1, 1, 0, cmp_cap, ot, ol, NULL, &err)) {
    printf("  FAIL the batch with its rows reversed: %s\n", err.msg);
    bad = 1;
  }
  for (int s = 0; s < ns; s++) {
    const size_t off = (size_t)s * gen;
    if (!memcmp(ot + off, bt + off, (size_t)gen * sizeof(int32_t)) &&
        !memcmp(ol + off * V, bl + off * V, (size_t)gen * V * sizeof(float)))
      exact++;
    else if (!moe) {
      printf("  FAIL sequence %d: its tokens or logits change with the order and slots of the batch's rows\n", s);
      bad = 1;
    }
    int same = compare(label_alone, s, q[s].toks, q[s].logits, bt + off, bl + off * V, gen, V, &worst, &bad);
    if (with_ref)
      ref_equal +=
          compare(label_ref, s, r[s].toks, r[s].logits, bt + off, bl + off * V, gen, V, &worst_ref, &bad) == gen;
    tokens_equal += same == gen;
  }
  printf("  batched vs alone: %d/%d sequences with every token equal, logits within %.3g of the range; "
         "%d/%d bit-identical with the rows reversed%s\n",
         tokens_equal, ns, worst, exact, ns, moe ? " (MoE: not required)" : "");
  if (with_ref)
    printf("  batched vs the CPU reference: %d/%d sequences with every token equal, logits within %.3g of the range\n",
           ref_equal, ns, worst_ref);
  /* sampled: each row drawn with its own parameters and uniform number; the same draws with the
   * rows reversed (on MoE models only where the rows are exact: the CPU backend) */
  if (run_batched(b, d, q, ns, gen, -1, 0, 1, 0, bt, bl, NULL, &err) ||
      run_batched(b, d, q, ns, gen, -1, 1, 1, 0, ot, ol, NULL, &err)) {
    printf("  FAIL sampled batch: %s\n", err.msg);
    bad = 1;
  } else if (!moe || exact_alone) {
    int same_draws = 0;
    for (int s = 0; s < ns; s++) {
      const size_t off = (size_t)s * gen;
      same_draws += !memcmp(ot + off, bt + off, (size_t)gen * sizeof(int32_t));
    }
    printf("  sampled (temperature 0.8, top_k 40): %d/%d sequences draw the same tokens with the rows reversed\n",
           same_draws, ns);
    if (same_draws != ns) bad = 1;
  }
  /* pooled: the greedy batch's tokens and logits again, through a step pool's threads */
  mx_pool_stats ps;
  if (run_batched(b, d, q, ns, gen, -1, 0, 0, 0, bt, bl, NULL, &err) || run_pooled(m, b, q, ns, gen, ot, ol, &ps, &err)) {
    printf("  FAIL pooled: %s\n", err.msg);
    bad = 1;
  } else {
    int pool_exact = 0;
    double worst_pool = 0;
    for (int s = 0; s < ns; s++) {
      const size_t off = (size_t)s * gen;
      pool_exact += !memcmp(ot + off, bt + off, (size_t)gen * sizeof(int32_t)) &&
                    !memcmp(ol + off * V, bl + off * V, (size_t)gen * V * sizeof(float));
      compare("pooled", s, ot + off, ol + off * V, bt + off, bl + off * V, gen, V, &worst_pool, &bad);
    }
    printf("  pooled (a thread per sequence): %d/%d sequences bit-identical to the batch, logits within %.3g of the "
           "range; %lld steps of %lld rows (%.2f per step)\n",
           pool_exact, ns, worst_pool, (long long)ps.steps, (long long)ps.rows,
           (double)ps.rows / (double)(ps.steps ? ps.steps : 1));
    if (exact_alone && pool_exact != ns) { /* elsewhere a pool's steps hold other row counts */
      printf("  FAIL: pooled sequences differ from the batch\n");
      bad = 1;
    }
    if (!(worst_pool <= 0.05) || (ns > 1 && ps.rows <= ps.steps)) {
      printf("  FAIL: pooled logits beyond 5%% of their range, or no step held two sequences\n");
      bad = 1;
    }
  }
  if (!(worst <= 0.05) || !(worst_ref <= 0.05)) {
    printf("  FAIL: logits differ by more than 5%% of their range\n");
    bad = 1;
  }
  if (exact_alone && (worst != 0 || tokens_equal != ns)) {
    printf("  FAIL: the CPU backend's batched rows are not bit for bit their steps alone\n");
    bad = 1;
  }
done:
  if (q)
    for (int s = 0; s < ns; s++) {
      free(q[s].prompt);
      free(q[s].toks);
      free(q[s].logits);
      if (r && with_ref) {
        free(r[s].toks);
        free(r[s].logits);
      }
    }
  free(q);
  free(r);
  free(bt);
  free(ot);
  free(bl);
  free(ol);
  return bad;
}

/* B sequences of pp prompt tokens, then tg batched steps: aggregate and per-sequence t/s. */
static int bench(accel_backend *b, const accel_model_desc *d, int B, int pp, int tg, int reps) {
  mlxrt_error err = {0};
  const int V = d->vocab;
  accel_decoder *dec = b->decoder_create(b, d, pp + tg + 1, &err);
  if (!dec || b->decoder_batch_init(dec, B, &err)) {
    fprintf(stderr, "  bench B=%d: %s\n", B, err.msg);
    if (dec) b->decoder_free(dec);
    return -1;
  }
  int32_t *pr = malloc((size_t)pp * sizeof(int32_t)), *tok = malloc((size_t)B * sizeof(int32_t));
  int *sl = malloc((size_t)B * sizeof(int));
  int64_t *pos = malloc((size_t)B * sizeof(int64_t));
  int rc = !pr || !tok || !sl || !pos;
  for (int r = 0; r < reps && !rc; r++) {
    double t0 = now_s();
    for (int s = 0; s < B && !rc; s++) {
      for (int i = 0; i < pp; i++) pr[i] = prompt_id(s + r * B, i, V);
      sl[s] = s;
      rc = b->decoder_slot_prompt(dec, s, pr, pp, 0, NULL, 0.0, NULL, &tok[s], &err);
    }
    double t1 = now_s();
    for (int i = 0; i < tg && !rc; i++) {
      for (int s = 0; s < B; s++) pos[s] = pp + i;
      rc = b->decoder_batch_step(dec, B, sl, tok, pos, NULL, NULL, NULL, tok, &err);
    }
    double t2 = now_s();
    if (!rc)
      printf("  batch B=%-3d rep %d: pp%d %.1f t/s (%d prompts)   tg%d %.1f t/s aggregate, %.2f t/s per sequence "
             "(%.2f ms/step)\n",
             B, r, pp, (double)B * pp / (t1 - t0), B, tg, (double)B * tg / (t2 - t1), tg / (t2 - t1),
             1e3 * (t2 - t1) / tg);
  }
  if (rc) fprintf(stderr, "  bench B=%d: %s\n", B, err.msg);
  b->decoder_free(dec);
  free(pr);
  free(tok);
  free(sl);
  free(pos);
  return rc ? -1 : 0;
}

/* bench's shape through a step pool: a thread per sequence feeds its prompt, then tg greedy
 * steps; the steps are timed from the moment every prompt is done. */
static int bench_pooled(const mx_model *m, accel_backend *b, int B, int pp, int tg, int reps) {
  mlxrt_error err = {0};
  mx_pool *p = mx_pool_create(m, b, B, pp + tg + 1, &err);
  pool_seq *j = calloc((size_t)B, sizeof *j);
  pthread_t *th = calloc((size_t)B, sizeof *th);
  int32_t *pr = malloc((size_t)B * pp * sizeof(int32_t)), *toks = malloc((size_t)B * tg * sizeof(int32_t));
  int rc = !p || !j || !th || !pr || !toks;
  for (int r = 0; r < reps && !rc; r++) {
    pthread_barrier_t prompted;
    pthread_barrier_init(&prompted, NULL, (unsigned)B + 1);
    mx_pool_stats s0, s1;
    mx_pool_get_stats(p, &s0);
    for (int s = 0; s < B; s++) {
      for (int i = 0; i < pp; i++) pr[(size_t)s * pp + i] = prompt_id(s + r * B, i, m->cfg.vocab_size);
      j[s] = (pool_seq){p, s, pp, tg, m->cfg.vocab_size, pr + (size_t)s * pp, toks + (size_t)s * tg, NULL, &prompted,
                        0, 0, {{0}}};
      if (r == 0) j[s].slot = mx_pool_acquire(p);
      if (pthread_create(&th[s], NULL, pool_seq_run, &j[s])) {
        fprintf(stderr, "  pooled bench: cannot start thread %d\n", s);
        exit(1); /* the barrier would wait for it */
      }
    }
    pthread_barrier_wait(&prompted);
    const double t1 = now_s();
    for (int s = 0; s < B; s++) pthread_join(th[s], NULL);
    const double t2 = now_s();
    pthread_barrier_destroy(&prompted);
    mx_pool_get_stats(p, &s1);
    for (int s = 0; s < B && !rc; s++)
      if (j[s].rc) {
        err = j[s].err;
        rc = -1;
      }
    if (!rc)
      printf("  pool  B=%-3d rep %d: tg%d %.1f t/s aggregate, %.2f t/s per sequence (%.2f rows per step)\n", B, r, tg,
             (double)B * (tg - 1) / (t2 - t1), (tg - 1) / (t2 - t1),
             (double)(s1.rows - s0.rows) / (double)(s1.steps - s0.steps ? s1.steps - s0.steps : 1));
  }
  if (rc) fprintf(stderr, "  pooled bench B=%d: %s\n", B, err.msg);
  mx_pool_free(p);
  free(j);
  free(th);
  free(pr);
  free(toks);
  return rc ? -1 : 0;
}

int main(int argc, char **argv) {
  int ns = 16, gen = 64, pp = 512, tg = 128, reps = 2, with_ref = 1;
  const char *benchlist = NULL, *backend = "cuda";
  int first = 1;
  for (; first + 1 < argc && argv[first][0] == '-'; first += 2) {
    const char *a = argv[first], *v = argv[first + 1];
    if (!strcmp(a, "--no-ref")) { /* (a flag: no value) */
      with_ref = 0;
      first--;
      continue;
    }
    if (!strcmp(a, "--seqs")) ns = atoi(v);
    else if (!strcmp(a, "--gen")) gen = atoi(v);
    else if (!strcmp(a, "--pp")) pp = atoi(v);
    else if (!strcmp(a, "--tg")) tg = atoi(v);
    else if (!strcmp(a, "--reps")) reps = atoi(v);
    else if (!strcmp(a, "--bench")) benchlist = v;
    else if (!strcmp(a, "--backend")) backend = v;
    else break;
  }
  if (first >= argc || ns < 1 || gen < 2 || pp < 1 || tg < 1) {
    fprintf(stderr, "usage: mlxrt-batch-test [--backend cuda|cpu] [--seqs 16] [--gen 64] [--no-ref] [--bench 1,4,16,64 "
                    "[--pp 512] [--tg 128] [--reps 2]] MODEL_DIR...\n(--bench: timing only, no checks; --no-ref: "
                    "without step 0)\n");
    return 2;
  }
  mlxrt_error err = {0};
  accel_backend *cpu = accel_cpu_create(0, &err);
  if (!cpu) {
    fprintf(stderr, "CPU backend: %s\n", err.msg);
    return 1;
  }
  accel_options co = {.backend = backend};
  accel_backend *cuda = strcmp(backend, "cpu") ? accel_create(&co, &err) : cpu;
  if (!cuda) {
    fprintf(stderr, "%s backend: %s\n", backend, err.msg);
    return 1;
  }
  if (!cuda->decoder_batch_init) {
    fprintf(stderr, "the %s backend offers no batched decode\n", backend);
    return 1;
  }
  int failures = 0;
  for (int a = first; a < argc; a++) {
    printf("== %s\n", argv[a]);
    mx_model *m = mx_model_open(argv[a], &err);
    if (!m) {
      printf("  FAIL open: %s\n", err.msg);
      failures++;
      continue;
    }
    const char *why = mx_decoder_unsupported_reason(m);
    mx_decoder_desc *dd = why ? NULL : mx_decoder_desc_create(m, &err);
    int bad = 0;
    if (why) printf("  skipped: the decoder does not run models with %s\n", why);
    else if (!dd) {
      printf("  FAIL description: %s\n", err.msg);
      bad = 1;
    } else if (benchlist) {
      for (const char *p = benchlist; *p;) {
        const int B = atoi(p);
        if (B < 1 || bench(cuda, &dd->d, B, pp, tg, reps) || bench_pooled(m, cuda, B, pp, tg, reps)) bad = 1;
        p = strchr(p, ',');
        if (!p) break;
        p++;
      }
    } else {
      bad = check_model(m, cuda, cpu, &dd->d, ns, gen, with_ref);
    }
    printf("  %s\n", bad ? "FAIL" : "PASS");
    failures += bad;
    mx_decoder_desc_free(dd);
    mx_model_close(m);
  }
  if (cuda != cpu) accel_destroy(cuda);
  accel_destroy(cpu);
  printf("%s: %d model(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
