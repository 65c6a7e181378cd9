#include "serve_metrics.h"

#include <string.h>

static const char *const EP_NAMES[SERVE_EP_COUNT] = {"chat_completions", "completions", "models",
                                                     "health", "metrics", "other"};

void serve_metrics_init(serve_metrics *m, int slots) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  m->slots_total = slots;
}

void serve_metrics_destroy(serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_metrics_request(serve_metrics *m, serve_endpoint ep, int status) {
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < SERVE_METRICS_STATUSES; i++) {
    if (m->by_status[i].status == 0) m->by_status[i].status = status;
    if (m->by_status[i].status == status) {
      m->by_status[i].count[ep]++;
      break;
    }
  }
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_answer(serve_metrics *m, int64_t prompt_tokens, int64_t cached, int64_t gen_tokens,
                          double prompt_s, double gen_s, int cancelled) {
  pthread_mutex_lock(&m->mu);
  m->prompt_tokens += (uint64_t)prompt_tokens;
  m->prompt_cached += (uint64_t)cached;
  m->gen_tokens += (uint64_t)gen_tokens;
  m->prompt_seconds += prompt_s;
  m->gen_seconds += gen_s;
  m->cancelled += cancelled != 0;
  if (gen_s > 0 && gen_tokens > 1) m->last_gen_tps = (double)gen_tokens / gen_s;
  if (prompt_s > 0 && prompt_tokens - cached > 0) m->last_prompt_tps = (double)(prompt_tokens - cached) / prompt_s;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_load(serve_metrics *m, int busy, int queued) {
  pthread_mutex_lock(&m->mu);
  m->slots_busy = busy;
  m->queued = queued;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_busy(serve_metrics *m, int *busy, int *queued) {
  pthread_mutex_lock(&m->mu);
  *busy = m->slots_busy;
  *queued = m->queued;
  pthread_mutex_unlock(&m->mu);
}

/* One metric without labels: its HELP and TYPE lines and its value. */
static int put(serve_buf *out, const char *name, const char *type, const char *help, double value) {
  return serve_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type, name, value);
}

int serve_metrics_render(serve_metrics *m, serve_buf *out) {
  int rc = 0;
  pthread_mutex_lock(&m->mu);
  rc |= serve_buf_printf(out, "# HELP mlxrt_requests_total HTTP requests answered, by endpoint and status.\n"
                              "# TYPE mlxrt_requests_total counter\n");
  for (int i = 0; i < SERVE_METRICS_STATUSES && m->by_status[i].status; i++)
    for (int ep = 0; ep < SERVE_EP_COUNT; ep++)
      if (m->by_status[i].count[ep])
        rc |= serve_buf_printf(out, "mlxrt_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", EP_NAMES[ep],
                               m->by_status[i].status, (unsigned long long)m->by_status[i].count[ep]);
  const char *C = "counter", *G = "gauge";
  rc |= put(out, "mlxrt_prompt_tokens_total", C, "Prompt tokens of answered requests.", (double)m->prompt_tokens);
  rc |= put(out, "mlxrt_prompt_tokens_cached_total", C, "Prompt tokens reused from a slot's cache.",
            (double)m->prompt_cached);
  rc |= put(out, "mlxrt_generated_tokens_total", C, "Tokens generated.", (double)m->gen_tokens);
  rc |= put(out, "mlxrt_prompt_seconds_total", C, "Time spent processing prompts.", m->prompt_seconds);
  rc |= put(out, "mlxrt_generation_seconds_total", C, "Time spent generating.", m->gen_seconds);
  rc |= put(out, "mlxrt_requests_cancelled_total", C,
            "Answers stopped because the client went away or the server stopped.", (double)m->cancelled);
  rc |= put(out, "mlxrt_generation_tokens_per_second", G, "Generation speed of the last answer.", m->last_gen_tps);
  rc |= put(out, "mlxrt_prompt_tokens_per_second", G, "Prompt processing speed of the last answer.",
            m->last_prompt_tps);
  rc |= put(out, "mlxrt_slots", G, "Generation slots (--parallel).", m->slots_total);
  rc |= put(out, "mlxrt_slots_busy", G, "Slots answering a request now.", m->slots_busy);
  rc |= put(out, "mlxrt_queue_depth", G, "Requests waiting for a slot.", m->queued);
  if (m->pool) {
    mlxrt_pool_stats ps;
    mlxrt_pool_get_stats(m->pool, &ps);
    rc |= put(out, "mlxrt_batched_steps_total", C, "Decode steps run for the slots together (--cont-batching).",
              (double)ps.steps);
    rc |= put(out, "mlxrt_batched_rows_total", C,
              "Slot tokens those steps decoded (rows / steps = the mean batch).", (double)ps.rows);
  }
  pthread_mutex_unlock(&m->mu);
  return rc ? -1 : 0;
}
