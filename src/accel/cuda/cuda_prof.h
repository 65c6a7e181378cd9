/* Per-kernel timing of the whole-step decoder (MLXRT_CUDA_PROFILE=1): the decoder then runs
 * without graphs and records an event before each labelled piece of work; after each step the
 * gaps between consecutive events are added to their label. The table goes to stderr when the
 * decoder is freed. Costs nothing when off (no events are created). */
#ifndef MLXRT_CUDA_PROF_H
#define MLXRT_CUDA_PROF_H

#include "mlxrt.h"

#define CPROF_EVENTS 2048
#define CPROF_LABELS 48

typedef struct cprof {
  int on;
  void *stream;
  void *ev[CPROF_EVENTS];
  const char *lab[CPROF_EVENTS]; /* the label of the work after event i */
  int n;                         /* events recorded since the last flush */
  const char *names[CPROF_LABELS];
  double ms[CPROF_LABELS];
  long calls[CPROF_LABELS];
  int n_names;
  long steps;
  double total_ms;
} cprof;

/* Turns profiling on when MLXRT_CUDA_PROFILE=1; returns -1 only when events cannot be made. */
int cprof_init(cprof *p, void *stream, mlxrt_error *err);
/* Marks the start of `label`'s work (a string constant) on the stream; no-op when off. */
int cprof_mark(cprof *p, const char *label, mlxrt_error *err);
/* Ends the step: waits for the stream and adds the gaps to their labels. */
int cprof_flush(cprof *p, mlxrt_error *err);
/* Prints the table (label, calls, total and mean time, share) to stderr and frees events. */
void cprof_report_free(cprof *p, const char *title);

#endif
