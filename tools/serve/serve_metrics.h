/* Counters of `mlxrt serve` for GET /metrics (Prometheus text format 0.0.4). One lock; every
 * update is a few additions. */
#ifndef MLXRT_TOOLS_SERVE_METRICS_H
#define MLXRT_TOOLS_SERVE_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "mlxrt.h"
#include "serve_text.h"

typedef enum {
  SERVE_EP_CHAT,
  SERVE_EP_COMPLETIONS,
  SERVE_EP_MODELS,
  SERVE_EP_HEALTH,
  SERVE_EP_METRICS,
  SERVE_EP_OTHER,
  SERVE_EP_COUNT
} serve_endpoint;

#define SERVE_METRICS_STATUSES 24
typedef struct serve_metrics {
  pthread_mutex_t mu;
  struct {
    int status;
    uint64_t count[SERVE_EP_COUNT];
  } by_status[SERVE_METRICS_STATUSES];
  uint64_t prompt_tokens, prompt_cached, gen_tokens, cancelled;
  double prompt_seconds, gen_seconds;
  double last_gen_tps, last_prompt_tps;
  int slots_total, slots_busy, queued;
  mlxrt_pool *pool; /* the slots' pool (its step counts are rendered), or NULL */
} serve_metrics;

void serve_metrics_init(serve_metrics *m, int slots);
void serve_metrics_destroy(serve_metrics *m);
void serve_metrics_request(serve_metrics *m, serve_endpoint ep, int status);
/* One answer's numbers (cancelled: the client went away). */
void serve_metrics_answer(serve_metrics *m, int64_t prompt_tokens, int64_t cached, int64_t gen_tokens,
                          double prompt_s, double gen_s, int cancelled);
void serve_metrics_load(serve_metrics *m, int busy, int queued);
void serve_metrics_busy(serve_metrics *m, int *busy, int *queued);
/* The exposition text; -1 when out of memory. */
int serve_metrics_render(serve_metrics *m, serve_buf *out);

#endif
