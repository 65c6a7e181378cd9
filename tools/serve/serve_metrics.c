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

#define ADD(...) rc |= serve_buf_printf(out, __VA_ARGS__)

int serve_metrics_render(serve_metrics *m, serve_buf *out) {
  int rc = 0;
  pthread_mutex_lock(&m->mu);
  ADD("# HELP mlxrt_requests_total HTTP requests answered, by endpoint and status.\n"
      "# TYPE mlxrt_requests_total counter\n");
  for (int i = 0; i < SERVE_METRICS_STATUSES && m->by_status[i].status; i++)
    for (int ep = 0; ep < SERVE_EP_COUNT; ep++)
      if (m->by_status[i].count[ep])
        ADD("mlxrt_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", EP_NAMES[ep], m->by_status[i].status,
            (unsigned long long)m->by_status[i].count[ep]);
  ADD("# HELP mlxrt_prompt_tokens_total Prompt tokens of answered requests.\n"
      "# TYPE mlxrt_prompt_tokens_total counter\nmlxrt_prompt_tokens_total %llu\n"
      "# HELP mlxrt_prompt_tokens_cached_total Prompt tokens reused from a slot's cache.\n"
      "# TYPE mlxrt_prompt_tokens_cached_total counter\nmlxrt_prompt_tokens_cached_total %llu\n"
      "# HELP mlxrt_generated_tokens_total Tokens generated.\n"
      "# TYPE mlxrt_generated_tokens_total counter\nmlxrt_generated_tokens_total %llu\n",
      (unsigned long long)m->prompt_tokens, (unsigned long long)m->prompt_cached,
      (unsigned long long)m->gen_tokens);
  ADD("# HELP mlxrt_prompt_seconds_total Time spent processing prompts.\n"
      "# TYPE mlxrt_prompt_seconds_total counter\nmlxrt_prompt_seconds_total %.6f\n"
      "# HELP mlxrt_generation_seconds_total Time spent generating.\n"
      "# TYPE mlxrt_generation_seconds_total counter\nmlxrt_generation_seconds_total %.6f\n",
      m->prompt_seconds, m->gen_seconds);
  ADD("# HELP mlxrt_requests_cancelled_total Answers stopped because the client went away or the server stopped.\n"
      "# TYPE mlxrt_requests_cancelled_total counter\nmlxrt_requests_cancelled_total %llu\n",
      (unsigned long long)m->cancelled);
  ADD("# HELP mlxrt_generation_tokens_per_second Generation speed of the last answer.\n"
      "# TYPE mlxrt_generation_tokens_per_second gauge\nmlxrt_generation_tokens_per_second %.3f\n"
      "# HELP mlxrt_prompt_tokens_per_second Prompt processing speed of the last answer.\n"
      "# TYPE mlxrt_prompt_tokens_per_second gauge\nmlxrt_prompt_tokens_per_second %.3f\n",
      m->last_gen_tps, m->last_prompt_tps);
  ADD("# HELP mlxrt_slots Generation slots (--parallel).\n# TYPE mlxrt_slots gauge\nmlxrt_slots %d\n"
      "# HELP mlxrt_slots_busy Slots answering a request now.\n# TYPE mlxrt_slots_busy gauge\nmlxrt_slots_busy %d\n"
      "# HELP mlxrt_queue_depth Requests waiting for a slot.\n# TYPE mlxrt_queue_depth gauge\nmlxrt_queue_depth %d\n",
      m->slots_total, m->slots_busy, m->queued);
  pthread_mutex_unlock(&m->mu);
  return rc ? -1 : 0;
}
