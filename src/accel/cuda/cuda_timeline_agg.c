/* The in-graph timeline's arithmetic; see cuda_timeline_agg.h. */
#include "cuda_timeline_agg.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static ctl_row *row_for(ctl_row *rows, int *nrows, int max_rows, const ctl_launch *l) {
  for (int i = 0; i < *nrows; i++)
    if (rows[i].fn == l->fn &&
        (rows[i].label == l->label || (rows[i].label && l->label && !strcmp(rows[i].label, l->label))))
      return &rows[i];
  if (*nrows == max_rows) return &rows[max_rows - 1];
  rows[*nrows] = (ctl_row){l->fn, l->label, 0, 0, 0, 0};
  return &rows[(*nrows)++];
}

void ctl_aggregate(const unsigned long long *t, unsigned n, const unsigned long long *t2, unsigned n2,
                   const unsigned char *replay, int nreplay, const ctl_launch *const log[CTL_GRAPHS],
                   const int nlog[CTL_GRAPHS], ctl_row *rows, int max_rows, double *gaps, ctl_summary *s) {
  const int last = t2 && n2 >= n;
  memset(s, 0, sizeof *s);
  unsigned pos = 0, last_body = 0;
  int steps = 0, have_body = 0;
  for (int r = 0; r < nreplay; r++) s->expected += (unsigned)nlog[replay[r]];
  for (int r = 0; r < nreplay; r++) {
    int g = replay[r], k = nlog[g];
    if (pos + (unsigned)k > n) break;
    if (g != CTL_HEAD) {
      if (have_body) gaps[steps++] = (double)(t[pos] - t[last_body]) / 1e3;
      last_body = pos;
      have_body = 1;
      s->bodies++;
    }
    const int same_step = g != CTL_HEAD && r + 1 < nreplay && replay[r + 1] == CTL_HEAD && pos + (unsigned)k < n;
    for (int j = 0; j < k; j++) {
      unsigned long long b;
      if (j + 1 < k) b = t[pos + j + 1];
      else if (same_step) b = t[pos + k];
      else continue;
      /* a stamp before its predecessor's: launches that ran concurrently, whose stamps do not
       * follow the log's order; counted, not added */
      if (b < t[pos + j]) {
        s->unordered++;
        continue;
      }
      ctl_row *row = row_for(rows, &s->nrows, max_rows, &log[g][j]);
      double us = (double)(b - t[pos + j]) / 1e3;
      row->us += us;
      row->calls++;
      s->total_us += us;
      if (last) { /* (signed: the last block may arrive before block 0's wait returns) */
        const unsigned q = 2 * (pos + (unsigned)j);
        row->last_in_us += (double)(long long)(t2[q] - t[pos + j]) / 1e3;
        row->last_wait_us += (double)(long long)(t2[q + 1] - t[pos + j]) / 1e3;
      }
    }
    pos += (unsigned)k;
    s->replays++;
  }
  if (steps) { /* the median: gaps between runs (a new prompt, a reset) are not steps */
    qsort(gaps, (size_t)steps, sizeof *gaps, cmp_double);
    s->median_step_us = gaps[steps / 2];
  }
}
