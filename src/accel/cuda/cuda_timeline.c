/* The in-graph timeline; see cuda_timeline.h. */
#include "cuda_timeline.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda_timeline_agg.h"
#include "kernels.h"
#include "runtime.h"

#define CTL_STAMPS (1u << 20) /* 8 MB: ~1400 steps of the 60-layer 31B */
#define CTL_LOG 4096          /* launches per captured graph */
#define CTL_REPLAYS 16384
#define CTL_ROWS 256

static struct {
  int on, last; /* last: MLXRT_CUDA_TIMELINE=2, the grid's last block stamps too */
  unsigned long long *d_t;
  unsigned *d_n;
  void *stream;
  const char *label;
  int rec; /* graph whose launches are being logged, or -1 */
  ctl_launch log[CTL_GRAPHS][CTL_LOG];
  int nlog[CTL_GRAPHS];
  unsigned char replay[CTL_REPLAYS]; /* graph of each recorded replay, in order */
  int nreplay;
} T = {.rec = -1};

int ctl_init(mlxrt_error *err) {
  const char *e = getenv("MLXRT_CUDA_TIMELINE");
  if (!e || !*e || !strcmp(e, "0")) return 0;
  if (strcmp(e, "1") && strcmp(e, "2")) return mx_fail(err, "MLXRT_CUDA_TIMELINE=%s: expected 0, 1 or 2", e);
  if (T.on) return mx_fail(err, "MLXRT_CUDA_TIMELINE: another decoder already records a timeline");
  memset(&T, 0, sizeof T);
  T.rec = -1;
  T.last = !strcmp(e, "2");
  /* the stamps, then (2) the last blocks' [CTL_STAMPS]; two counters */
  if (rt_malloc((void **)&T.d_t, (size_t)CTL_STAMPS * (T.last ? 2 : 1) * sizeof *T.d_t, err) ||
      rt_malloc((void **)&T.d_n, 2 * sizeof *T.d_n, err) || rt_memset(T.d_n, 0, 2 * sizeof *T.d_n, NULL, err) ||
      rt_stream_sync(NULL, err)) {
    rt_free(T.d_t);
    rt_free(T.d_n);
    T.d_t = NULL;
    T.d_n = NULL;
    return -1;
  }
  T.on = 1;
  return 0;
}

int ctl_on(void) { return T.on; }

void ctl_label(const char *label) { T.label = label; }

void ctl_capture_begin(int g) {
  if (!T.on || g < 0 || g >= CTL_GRAPHS) return;
  T.rec = g;
  T.nlog[g] = 0;
}

void ctl_capture_end(void) { T.rec = -1; }

/* Called by ck_launch for every launch (ck_launch.cuh). */
void ck_tl_note(const void *kernel) {
  if (T.rec < 0 || T.nlog[T.rec] >= CTL_LOG) return;
  T.log[T.rec][T.nlog[T.rec]++] = (ctl_launch){kernel, T.label};
}

int ctl_replay_begin(int g, void *stream, mlxrt_error *err) {
  if (!T.on || g < 0 || g >= CTL_GRAPHS || T.nreplay >= CTL_REPLAYS || T.nlog[g] == 0) return 0;
  T.replay[T.nreplay++] = (unsigned char)g;
  T.stream = stream;
  return rt_status(ck_set_timeline(T.d_t, T.d_n, CTL_STAMPS, T.last, stream), "timeline on", err);
}

int ctl_replay_end(void *stream, mlxrt_error *err) {
  if (!T.on) return 0;
  return rt_status(ck_set_timeline(NULL, NULL, 0, 0, stream), "timeline off", err);
}

/* "qmv_tc_kernel" from "_Z13qmv_tc_kernelILi2E...": the identifier after the length. */
static void short_name(const void *fn, char *out, size_t n) {
  const char *m = rt_func_name(fn);
  snprintf(out, n, "%s", m ? m : "?");
  if (m && !strncmp(m, "_Z", 2)) {
    char *end;
    long len = strtol(m + 2, &end, 10);
    if (len > 0 && (size_t)len < n && (long)strlen(end) >= len) snprintf(out, n, "%.*s", (int)len, end);
  }
}

static void report(const char *title) {
  mlxrt_error err = {{0}};
  unsigned cnt[2] = {0, 0};
  if (rt_d2h(cnt, T.d_n, sizeof cnt, T.stream, &err) || rt_stream_sync(T.stream, &err)) {
    fprintf(stderr, "timeline: %s\n", err.msg);
    return;
  }
  unsigned n = cnt[0] > CTL_STAMPS ? CTL_STAMPS : cnt[0];
  /* the last blocks' stamps: two per launch, as many launches as fit (ck_tl_stamp) */
  unsigned n2 = T.last ? (cnt[1] > CTL_STAMPS ? CTL_STAMPS : cnt[1]) / 2 : 0;
  unsigned long long *t = malloc((size_t)(n ? n : 1) * sizeof *t), *t2 = malloc((size_t)(2 * n2 + 1) * sizeof *t2);
  ctl_row *rows = calloc(CTL_ROWS, sizeof *rows);
  double *gaps = malloc(CTL_REPLAYS * sizeof *gaps);
  if (!t || !t2 || !rows || !gaps) {
    fprintf(stderr, "timeline: out of host memory\n");
  } else if ((n && rt_d2h(t, T.d_t, (size_t)n * sizeof *t, T.stream, &err)) ||
             (n2 && rt_d2h(t2, T.d_t + CTL_STAMPS, (size_t)2 * n2 * sizeof *t2, T.stream, &err)) ||
             rt_stream_sync(T.stream, &err)) {
    fprintf(stderr, "timeline: %s\n", err.msg);
  } else {
    const ctl_launch *logs[CTL_GRAPHS];
    char counts[CTL_GRAPHS * 12] = "";
    for (int g = 0; g < CTL_GRAPHS; g++) {
      logs[g] = T.log[g];
      size_t at = strlen(counts);
      snprintf(counts + at, sizeof counts - at, "%s%d", g ? " / " : "", T.nlog[g]);
    }
    ctl_summary sm;
    ctl_aggregate(t, n, T.last ? t2 : NULL, n2, T.replay, T.nreplay, logs, T.nlog, rows, CTL_ROWS, gaps, &sm);
    const int last = T.last && n2 >= n;
    if (T.last && !last) fprintf(stderr, "timeline: the last blocks' stamps did not all fit (%u of %u launches)\n", n2, n);
    fprintf(stderr, "\n%s: %d graph replays (%s launches per replay of graphs 0 … %d), %u stamps%s\n", title,
            sm.replays, counts, CTL_GRAPHS - 1, n,
            n == sm.expected ? "" : " — NOT the launches logged: the table is not reliable");
    if (sm.unordered)
      fprintf(stderr, "%u stamps came before the one logged ahead of them (launches that ran concurrently): "
              "those gaps are left out and the table is not reliable\n", sm.unordered);
    if (sm.median_step_us > 0)
      fprintf(stderr, "median step (a body graph's first kernel to the next one's, host round trip included): %.1f us; "
              "the kernels below: %.1f us per step\n", sm.median_step_us, sm.bodies ? sm.total_us / sm.bodies : 0.0);
    if (last)
      fprintf(stderr, "last in / last wait: the grid's last block reaching its wait / its wait returning, mean us "
                      "after block 0's wait returned (negative: before)\n");
    fprintf(stderr, "%-28s %-28s %8s %10s %10s %7s%s\n", "label", "kernel", "calls", "mean us", "total ms", "share",
            last ? "    last in  last wait" : "");
    for (int i = 0; i < sm.nrows; i++) {
      char name[64];
      const double c = rows[i].calls ? (double)rows[i].calls : 1.0;
      short_name(rows[i].fn, name, sizeof name);
      fprintf(stderr, "%-28s %-28s %8ld %10.2f %10.3f %6.1f%%", rows[i].label ? rows[i].label : "-", name,
              rows[i].calls, rows[i].us / c, rows[i].us / 1e3, sm.total_us > 0 ? 100.0 * rows[i].us / sm.total_us : 0.0);
      if (last) fprintf(stderr, " %10.2f %10.2f", rows[i].last_in_us / c, rows[i].last_wait_us / c);
      fputc('\n', stderr);
    }
  }
  free(t);
  free(t2);
  free(rows);
  free(gaps);
}

void ctl_report_free(const char *title) {
  if (!T.on) return;
  if (title) report(title);
  rt_free(T.d_t);
  rt_free(T.d_n);
  memset(&T, 0, sizeof T);
  T.rec = -1;
}
