/* The CUDA decoder's in-graph timeline (MLXRT_CUDA_TIMELINE=1), its arithmetic without a GPU:
 * made-up stamps of graph replays must give each launch the gap to the next stamp of its step,
 * a body's last launch (graph 0, or the second body graph 2) the gap to the head's first
 * (graph 1), nothing to a step's last launch, rows per (kernel, label), the median step over
 * both bodies, and replays whose stamps are missing left out; the batched steps' graphs (one
 * per row count, head included) each with its own log. */
#include <string.h>

#include "accel/cuda/cuda_timeline_agg.h"
#include "test_util.h"

static int kA, kB, kC, kD, kE; /* stand-ins for kernel addresses */

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static const ctl_row *find(const ctl_row *rows, int n, const void *fn, const char *label) {
  for (int i = 0; i < n; i++)
    if (rows[i].fn == fn && ((!label && !rows[i].label) || (label && rows[i].label && !strcmp(label, rows[i].label))))
      return &rows[i];
  return NULL;
}

int main(void) {
  /* graph 0: A (embed), B (mv), A again under another label, C; graph 1: D, E */
  const ctl_launch body[] = {{&kA, "embed"}, {&kB, "q mat-vec"}, {&kA, "o mat-vec"}, {&kC, NULL}};
  const ctl_launch head[] = {{&kD, "lm_head"}, {&kE, "logits"}};
  const ctl_launch body2[] = {{&kA, "embed"}, {&kE, "attention (one cluster)"}};
  const ctl_launch *const logs[CTL_GRAPHS] = {body, head, body2, NULL};
  const int nlog[CTL_GRAPHS] = {4, 2, 2, 0};
  /* three steps, 100 us apart, then a fourth 1000 us later (a new run); stamps in ns:
   * body at +0, +10, +30, +33 us; head at +40, +45 us */
  const unsigned char replay[] = {0, 1, 0, 1, 0, 1, 0, 1};
  const double base[] = {0, 100, 200, 1200};
  unsigned long long t[24];
  unsigned n = 0;
  for (int s = 0; s < 4; s++) {
    const double at[] = {0, 10, 30, 33, 40, 45};
    for (int j = 0; j < 6; j++) t[n++] = (unsigned long long)((base[s] + at[j]) * 1000.0 + 0.5);
  }
  ctl_row rows[16];
  double gaps[8];
  ctl_summary sm;
  ctl_aggregate(t, n, NULL, 0, replay, 8, logs, nlog, rows, 16, gaps, &sm);
  CHECK(sm.replays == 8 && sm.bodies == 4 && sm.expected == 24);
  CHECKF(sm.nrows == 5, "rows %d", sm.nrows); /* A twice (two labels), B, C, D; E never counted */
  const ctl_row *a1 = find(rows, sm.nrows, &kA, "embed"), *a2 = find(rows, sm.nrows, &kA, "o mat-vec");
  const ctl_row *b = find(rows, sm.nrows, &kB, "q mat-vec"), *c = find(rows, sm.nrows, &kC, NULL);
  const ctl_row *d = find(rows, sm.nrows, &kD, "lm_head"), *e = find(rows, sm.nrows, &kE, "logits");
  CHECK(a1 && a2 && b && c && d && !e);
  if (a1 && a2 && b && c && d) {
    CHECKF(a1->calls == 4 && NEAR(a1->us, 40), "embed %ld %g", a1->calls, a1->us);
    CHECKF(b->calls == 4 && NEAR(b->us, 80), "q %ld %g", b->calls, b->us);
    CHECKF(a2->calls == 4 && NEAR(a2->us, 12), "o %ld %g", a2->calls, a2->us);
    CHECKF(c->calls == 4 && NEAR(c->us, 28), "graph 0's last runs up to graph 1's first: %ld %g", c->calls, c->us);
    CHECKF(d->calls == 4 && NEAR(d->us, 20), "lm_head %ld %g", d->calls, d->us);
    CHECK(rows[0].fn == &kA && rows[1].fn == &kB); /* order of first appearance */
  }
  CHECK(NEAR(sm.total_us, 40 + 80 + 12 + 28 + 20));
  CHECKF(NEAR(sm.median_step_us, 100), "median step %g (gaps 100, 100, 1000)", sm.median_step_us);

  /* the stamps of the last head replay are missing: it is left out, and graph 0's last
   * launch of that step has no graph 1 stamp to run up to */
  ctl_aggregate(t, n - 2, NULL, 0, replay, 8, logs, nlog, rows, 16, gaps, &sm);
  CHECK(sm.replays == 7 && sm.expected == 24);
  c = find(rows, sm.nrows, &kC, NULL);
  CHECK(c && c->calls == 3);
  /* a step's last replay alone (graph 0 only, nothing after it) counts its inner gaps only */
  const unsigned char one[] = {0};
  ctl_aggregate(t, 4, NULL, 0, one, 1, logs, nlog, rows, 16, gaps, &sm);
  CHECK(sm.replays == 1 && sm.nrows == 3 && NEAR(sm.total_us, 33) && sm.median_step_us == 0);
  /* more (kernel, label) pairs than rows: the last row collects the rest */
  ctl_aggregate(t, n, NULL, 0, replay, 8, logs, nlog, rows, 2, gaps, &sm);
  CHECK(sm.nrows == 2 && rows[1].calls == 16 && NEAR(sm.total_us, 180));

  /* the second body graph (2) is a body too: two steps of it (stamps +0, +7 us; head +20, +25),
   * then two of graph 0 as above, 50 us apart */
  const unsigned char mixed[] = {2, 1, 2, 1, 0, 1, 0, 1};
  unsigned long long t2[20];
  unsigned n2 = 0;
  const double b2[] = {0, 50, 100, 150};
  for (int s = 0; s < 2; s++) {
    const double at[] = {0, 7, 20, 25};
    for (int j = 0; j < 4; j++) t2[n2++] = (unsigned long long)((b2[s] + at[j]) * 1000.0 + 0.5);
  }
  for (int s = 2; s < 4; s++) {
    const double at[] = {0, 10, 30, 33, 40, 45};
    for (int j = 0; j < 6; j++) t2[n2++] = (unsigned long long)((b2[s] + at[j]) * 1000.0 + 0.5);
  }
  ctl_aggregate(t2, n2, NULL, 0, mixed, 8, logs, nlog, rows, 16, gaps, &sm);
  CHECK(sm.replays == 8 && sm.bodies == 4 && sm.expected == 20);
  e = find(rows, sm.nrows, &kE, "attention (one cluster)");
  a1 = find(rows, sm.nrows, &kA, "embed");
  CHECKF(e && e->calls == 2 && NEAR(e->us, 26), "graph 2's last runs up to the head's first: %g", e ? e->us : -1.0);
  CHECKF(a1 && a1->calls == 4 && NEAR(a1->us, 2 * 7 + 2 * 10), "embed over both bodies: %g", a1 ? a1->us : -1.0);
  CHECKF(NEAR(sm.median_step_us, 50), "median step %g (gaps 50, 50, 50)", sm.median_step_us);

  /* the last block's stamps (MLXRT_CUDA_TIMELINE=2), two per launch in launch order: kernel B's
   * last block arrives 4 us after its block 0's wait returns and waits 1 us more, every other
   * kernel's arrives 2 us before it (a negative offset); too few of them: not used */
  unsigned long long tl[48];
  for (unsigned i = 0; i < n; i++) {
    int g = 0, k = (int)i; /* the launch of stamp i in the first case's replays */
    for (int r = 0; r < 8; r++) {
      if (k < nlog[replay[r]]) {
        g = replay[r];
        break;
      }
      k -= nlog[replay[r]];
    }
    const int late = logs[g][k].fn == &kB;
    tl[2 * i] = t[i] + (late ? 4000 : 0) - (late ? 0 : 2000);
    tl[2 * i + 1] = t[i] + (late ? 5000 : 1000);
  }
  ctl_aggregate(t, n, tl, n, replay, 8, logs, nlog, rows, 16, gaps, &sm);
  b = find(rows, sm.nrows, &kB, "q mat-vec");
  a1 = find(rows, sm.nrows, &kA, "embed");
  CHECKF(b && NEAR(b->last_in_us, 4 * 4) && NEAR(b->last_wait_us, 4 * 5), "B: %g %g", b ? b->last_in_us : 0.0,
         b ? b->last_wait_us : 0.0);
  CHECKF(a1 && NEAR(a1->last_in_us, -2 * 4) && NEAR(a1->last_wait_us, 4), "A: %g %g", a1 ? a1->last_in_us : 0.0,
         a1 ? a1->last_wait_us : 0.0);
  ctl_aggregate(t, n, tl, n - 1, replay, 8, logs, nlog, rows, 16, gaps, &sm);
  b = find(rows, sm.nrows, &kB, "q mat-vec");
  CHECK(b && b->last_in_us == 0 && b->last_wait_us == 0);

  /* two launches that ran concurrently, their stamps swapped against the log: the negative gap
   * is counted and left out (no wrapped unsigned difference in any row), the rest as before */
  ctl_aggregate(t, n, NULL, 0, replay, 8, logs, nlog, rows, 16, gaps, &sm);
  const double whole = sm.total_us;
  CHECK(sm.unordered == 0);
  unsigned long long ts[48];
  memcpy(ts, t, n * sizeof *t);
  ts[1] = t[2], ts[2] = t[1];
  ctl_aggregate(ts, n, NULL, 0, replay, 8, logs, nlog, rows, 16, gaps, &sm);
  CHECKF(sm.unordered == 1 && sm.total_us > 0 && sm.total_us < 2 * whole, "unordered %u, total %g of %g", sm.unordered,
         sm.total_us, whole);
  for (int i = 0; i < sm.nrows; i++) CHECKF(rows[i].us >= 0 && rows[i].us < 2 * whole, "row %d: %g us", i, rows[i].us);

  /* batched steps: two row counts, each its own graph (CTL_BATCH, CTL_BATCH + 1: three launches
   * and four, head included), after a one-row step's body and head; each replay a step (a body):
   * its launches' gaps, its last launch uncounted, the stamps matching the logs */
  const ctl_launch bat3[] = {{&kB, "batch: q|k|v"}, {&kC, "batch: head"}, {&kE, "batch: logits"}};
  const ctl_launch bat4[] = {{&kB, "batch: q|k|v"}, {&kA, "batch: attention"}, {&kC, "batch: head"},
                             {&kE, "batch: logits"}};
  const ctl_launch *blogs[CTL_GRAPHS] = {body, head, body2, NULL};
  int bnlog[CTL_GRAPHS] = {4, 2, 2, 0};
  blogs[CTL_BATCH] = bat3, bnlog[CTL_BATCH] = 3;
  blogs[CTL_BATCH + 1] = bat4, bnlog[CTL_BATCH + 1] = 4;
  const unsigned char breplay[] = {0, 1, CTL_BATCH, CTL_BATCH, CTL_BATCH + 1, CTL_BATCH + 1};
  unsigned long long tb[32];
  unsigned nb = 0;
  { /* one-row step at 0 (stamps as above); batch-3 steps at 100, 200 (+0, +20, +50); batch-4
     * steps at 300, 400 (+0, +5, +25, +60) */
    const double at[] = {0, 10, 30, 33, 40, 45};
    for (int j = 0; j < 6; j++) tb[nb++] = (unsigned long long)(at[j] * 1000.0 + 0.5);
    for (int s = 1; s <= 2; s++) {
      const double b3[] = {0, 20, 50};
      for (int j = 0; j < 3; j++) tb[nb++] = (unsigned long long)((100.0 * s + b3[j]) * 1000.0 + 0.5);
    }
    for (int s = 3; s <= 4; s++) {
      const double b4[] = {0, 5, 25, 60};
      for (int j = 0; j < 4; j++) tb[nb++] = (unsigned long long)((100.0 * s + b4[j]) * 1000.0 + 0.5);
    }
  }
  ctl_aggregate(tb, nb, NULL, 0, breplay, 6, blogs, bnlog, rows, 16, gaps, &sm);
  CHECKF(sm.replays == 6 && sm.bodies == 5 && sm.expected == nb, "replays %d, bodies %d, expected %u of %u", sm.replays,
         sm.bodies, sm.expected, nb);
  const ctl_row *bq = find(rows, sm.nrows, &kB, "batch: q|k|v"), *bh = find(rows, sm.nrows, &kC, "batch: head");
  const ctl_row *ba = find(rows, sm.nrows, &kA, "batch: attention"), *bl = find(rows, sm.nrows, &kE, "batch: logits");
  CHECKF(bq && bq->calls == 4 && NEAR(bq->us, 2 * 20 + 2 * 5), "batch q|k|v: %g", bq ? bq->us : -1.0);
  CHECKF(ba && ba->calls == 2 && NEAR(ba->us, 2 * 20), "batch attention: %g", ba ? ba->us : -1.0);
  CHECKF(bh && bh->calls == 4 && NEAR(bh->us, 2 * 30 + 2 * 35), "batch head: %g", bh ? bh->us : -1.0);
  CHECK(!bl); /* a step's last launch waits on the host: not counted */
  CHECKF(NEAR(sm.median_step_us, 100), "median step %g", sm.median_step_us);
  TEST_END();
}
