/* The in-graph timeline's arithmetic (cuda_timeline.h), apart from the device so that a CPU
 * test can check it: stamps of graph replays → each launch's share of the step. */
#ifndef MLXRT_CUDA_TIMELINE_AGG_H
#define MLXRT_CUDA_TIMELINE_AGG_H

/* The step's graphs: 0 the body, 1 the head, 2 the body with the one-cluster attention, 3 the
 * body with the deep contexts' attention on every layer, 4 on the K-from-V layers alone (the
 * decoder picks a body graph per position: cuda_decoder.c); from CTL_BATCH the batched steps'
 * graphs, one per row count (body and head in one graph: cuda_decoder_batch.c), the first
 * CTL_GRAPHS - CTL_BATCH row counts a decoder captures */
#define CTL_GRAPHS 9
#define CTL_HEAD 1
#define CTL_BATCH 5

typedef struct ctl_launch {
  const void *fn;    /* the kernel */
  const char *label; /* the decoder's mark before it */
} ctl_launch;

typedef struct ctl_row {
  const void *fn;
  const char *label;
  double us;
  long calls;
  /* with the last block's stamps (MLXRT_CUDA_TIMELINE=2), summed over the calls: that block's
   * arrival at its wait and its wait's return, each from block 0's wait return */
  double last_in_us, last_wait_us;
} ctl_row;

typedef struct ctl_summary {
  int replays;           /* replays whose stamps were all there */
  int bodies;            /* of those, replays of a body graph (any but CTL_HEAD) */
  int nrows;             /* rows filled */
  unsigned expected;     /* stamps the logs promise for every recorded replay */
  unsigned unordered;    /* gaps left out: a stamp earlier than the one before it */
  double total_us;       /* sum over the rows */
  double median_step_us; /* a body's first stamp to the next body's (0: fewer than two) */
} ctl_summary;

/* t[0..n): stamps (ns) in order; t2 (NULL: none): the grid's last block's two stamps per
 * launch (arrival, wait return), 2·n2 of them in the same order, n2 ≥ n to use them;
 * replay[0..nreplay): the graph (0..CTL_GRAPHS-1) of each recorded
 * replay; log[g][0..nlog[g]): graph g's launches, in order, one stamp each. Within a replay
 * each stamp's gap to the next is its launch's; a body's last launch runs up to the first
 * stamp of the head replayed right after it (the same step); the last launch of a step
 * (waiting on the host) is not counted. Rows are (kernel, label) pairs in order of first
 * appearance, at most max_rows (the last collects the rest); gaps: scratch of nreplay. */
void ctl_aggregate(const unsigned long long *t, unsigned n, const unsigned long long *t2, unsigned n2,
                   const unsigned char *replay, int nreplay, const ctl_launch *const log[CTL_GRAPHS],
                   const int nlog[CTL_GRAPHS], ctl_row *rows, int max_rows, double *gaps, ctl_summary *s);

#endif
