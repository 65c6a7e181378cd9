/* Per-kernel timing of the whole-step decoder; see cuda_prof.h. */
#include "cuda_prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_timeline.h"
#include "base/error.h"
#include "runtime.h"

int cprof_init(cprof *p, void *stream, mlxrt_error *err) {
  memset(p, 0, sizeof *p);
  const char *e = getenv("MLXRT_CUDA_PROFILE");
  if (!e || !*e || !strcmp(e, "0")) return 0;
  if (strcmp(e, "1")) return mx_fail(err, "MLXRT_CUDA_PROFILE=%s: expected 0 or 1", e);
  p->stream = stream;
  for (int i = 0; i < CPROF_EVENTS; i++)
    if (rt_event_create(&p->ev[i], err)) {
      cprof_report_free(p, NULL);
      return -1;
    }
  p->on = 1;
  return 0;
}

int cprof_mark(cprof *p, const char *label, mlxrt_error *err) {
  ctl_label(label); /* the in-graph timeline names its launches by the same marks */
  if (!p->on) return 0;
  if (p->n == CPROF_EVENTS && cprof_flush(p, err)) return -1;
  p->lab[p->n] = label;
  return rt_event_record(p->ev[p->n++], p->stream, err);
}

static int label_index(cprof *p, const char *label) {
  for (int i = 0; i < p->n_names; i++)
    if (p->names[i] == label || strcmp(p->names[i], label) == 0) return i;
  if (p->n_names == CPROF_LABELS) return CPROF_LABELS - 1; /* the last row collects the rest */
  p->names[p->n_names] = label;
  return p->n_names++;
}

int cprof_flush(cprof *p, mlxrt_error *err) {
  if (!p->on || p->n == 0) return 0;
  /* a closing mark so the last piece of work is timed too */
  if (p->n == CPROF_EVENTS) p->n--; /* keep room: drop the last gap rather than overflow */
  p->lab[p->n] = NULL;
  if (rt_event_record(p->ev[p->n++], p->stream, err) || rt_stream_sync(p->stream, err)) return -1;
  for (int i = 0; i + 1 < p->n; i++) {
    float ms = 0;
    if (rt_event_ms(p->ev[i], p->ev[i + 1], &ms, err)) return -1;
    int k = label_index(p, p->lab[i]);
    p->ms[k] += ms;
    p->calls[k]++;
    p->total_ms += ms;
  }
  p->n = 0;
  p->steps++;
  return 0;
}

void cprof_report_free(cprof *p, const char *title) {
  if (p->on && title && p->total_ms > 0) {
    fprintf(stderr, "\n%s: %ld flushes, %.3f ms of device work timed\n", title, p->steps, p->total_ms);
    fprintf(stderr, "%-28s %10s %12s %12s %7s\n", "work", "calls", "total ms", "mean us", "share");
    for (int i = 0; i < p->n_names; i++)
      fprintf(stderr, "%-28s %10ld %12.3f %12.2f %6.1f%%\n", p->names[i], p->calls[i], p->ms[i],
              p->calls[i] ? 1e3 * p->ms[i] / (double)p->calls[i] : 0.0, 100.0 * p->ms[i] / p->total_ms);
  }
  for (int i = 0; i < CPROF_EVENTS; i++) {
    rt_event_destroy(p->ev[i]);
    p->ev[i] = NULL;
  }
  p->on = 0;
}
