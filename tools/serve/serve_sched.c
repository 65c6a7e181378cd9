/* Slots and the fair queue. Each slot is a thread owning one session on the shared model (with
 * --cont-batching, a session of one pool: the slots answering at once step as one batch). A
 * request waits in one FIFO queue (bounded: 503 beyond it) until a slot is idle; among idle slots
 * it goes to the one whose cached tokens share the longest prefix with its prompt, so a
 * conversation that comes back finds its cache. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flag.h"
#include "serve.h"

typedef struct serve_slot {
  serve_sched *owner;
  int index;
  pthread_t thread;
  int started;
  pthread_cond_t cv;
  mlxrt_session *session;
  serve_job *job;        /* assigned, running */
  int32_t *cached;       /* the session's tokens when it went idle (scheduler's copy) */
  size_t n_cached;
} serve_slot;

struct serve_sched {
  serve_server *srv;
  mlxrt_pool *pool;      /* cfg.pooled: the slots' sessions are its */
  pthread_mutex_t mu;
  serve_slot *slots;
  int n_slots;
  serve_job **queue;     /* ring of queue_max */
  size_t q_head, q_len, q_cap;
  int stopping;
};

serve_job *serve_job_new(void) {
  serve_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->refs = 1;
  j->status = 200;
  return j;
}

void serve_job_release(serve_job *j) {
  if (!j) return;
  pthread_mutex_lock(&j->mu);
  int last = --j->refs == 0;
  pthread_mutex_unlock(&j->mu);
  if (!last) return;
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  serve_request_free(&j->req);
  mlxrt_free(j->ids);
  serve_buf_free(&j->out);
  free(j);
}

int serve_job_write(serve_job *j, const char *s, size_t n) {
  pthread_mutex_lock(&j->mu);
  int rc = serve_buf_add(&j->out, s, n);
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return rc;
}

void serve_job_finish(serve_job *j, int status) {
  pthread_mutex_lock(&j->mu);
  j->status = status;
  j->finished = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
  size_t n = na < nb ? na : nb, i = 0;
  while (i < n && a[i] == b[i]) i++;
  return i;
}

static void publish_load(serve_sched *s) {
  int busy = 0;
  for (int i = 0; i < s->n_slots; i++) busy += s->slots[i].job != NULL;
  serve_metrics_load(&s->srv->metrics, busy, (int)s->q_len);
}

/* Hands queued requests to idle slots, oldest first (call with mu held). */
static void dispatch(serve_sched *s) {
  while (s->q_len > 0) {
    serve_job *j = s->queue[s->q_head];
    serve_slot *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < s->n_slots; i++) {
      serve_slot *sl = &s->slots[i];
      if (sl->job) continue;
      size_t k = common_prefix(sl->cached, sl->n_cached, j->ids, j->n_ids);
      if (!best || k > best_len) best = sl, best_len = k;
    }
    if (!best) break;
    s->q_head = (s->q_head + 1) % s->q_cap;
    s->q_len--;
    best->job = j;
    pthread_cond_signal(&best->cv);
  }
  publish_load(s);
}

/* No slot answering, nothing waiting (mu held). */
static int all_idle(const serve_sched *s) {
  for (int i = 0; i < s->n_slots; i++)
    if (s->slots[i].job) return 0;
  return s->q_len == 0;
}

/* The slot's generation is over: its session is what the next request may reuse. Called by
 * serve_gen_run before the answer's last bytes go out, so a client that sends its next request
 * as soon as it has the answer finds this slot idle, holding its prompt. */
static void slot_release(void *arg) {
  serve_slot *sl = arg;
  serve_sched *s = sl->owner;
  size_t n = 0;
  const int32_t *ids = mlxrt_session_tokens(sl->session, &n);
  int32_t *copy = n ? malloc(n * sizeof *copy) : NULL;
  if (copy) memcpy(copy, ids, n * sizeof *copy);
  pthread_mutex_lock(&s->mu);
  free(sl->cached);
  sl->cached = copy;
  sl->n_cached = copy ? n : 0;
  sl->job = NULL;
  dispatch(s); /* (may hand this slot its next job: it starts when this thread comes back) */
  pthread_mutex_unlock(&s->mu);
}

static void *slot_main(void *arg) {
  serve_slot *sl = arg;
  serve_sched *s = sl->owner;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!sl->job && !s->stopping) pthread_cond_wait(&sl->cv, &s->mu);
    if (!sl->job) break;
    serve_job *j = sl->job;
    pthread_mutex_unlock(&s->mu);
    serve_gen_run(s->srv, sl->session, j, slot_release, sl);
    serve_job_release(j);
    pthread_mutex_lock(&s->mu);
    if (all_idle(s)) { /* the last answer of a busy spell: freed memory goes back to the system */
      pthread_mutex_unlock(&s->mu);
      malloc_trim(0);
      pthread_mutex_lock(&s->mu);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

serve_sched *serve_sched_new(serve_server *srv, mlxrt_error *err) {
  serve_sched *s = calloc(1, sizeof *s);
  int n = srv->cfg.parallel;
  if (!s) goto oom;
  s->srv = srv;
  pthread_mutex_init(&s->mu, NULL);
  s->q_cap = srv->cfg.queue_max > 0 ? (size_t)srv->cfg.queue_max : 1;
  s->queue = calloc(s->q_cap, sizeof *s->queue);
  s->slots = calloc((size_t)n, sizeof *s->slots);
  if (!s->queue || !s->slots) goto oom;
  s->n_slots = n;
  for (int i = 0; i < n; i++) pthread_cond_init(&s->slots[i].cv, NULL);
  if (srv->cfg.pooled && !(s->pool = mlxrt_pool_new(srv->model, n, srv->cfg.ctx, err))) {
    char why[sizeof err->msg - 160];
    snprintf(why, sizeof why, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "%s (continuous batching holds --parallel x -c tokens of KV cache from the "
             "start: a smaller -c or --cont-batching off)", why);
    goto fail;
  }
  srv->metrics.pool = s->pool;
  for (int i = 0; i < n; i++) {
    serve_slot *sl = &s->slots[i];
    sl->owner = s;
    sl->index = i;
    sl->session = s->pool ? mlxrt_pool_session_new(s->pool, err) : mlxrt_session_new(srv->model, srv->cfg.ctx, err);
    if (!sl->session) goto fail;
  }
  for (int i = 0; i < n; i++) {
    if (pthread_create(&s->slots[i].thread, NULL, slot_main, &s->slots[i])) {
      snprintf(err->msg, sizeof err->msg, "cannot start slot thread %d", i);
      goto fail;
    }
    s->slots[i].started = 1;
  }
  publish_load(s);
  return s;
oom:
  snprintf(err->msg, sizeof err->msg, "out of memory for %d slots", n);
fail:
  if (s) {
    serve_sched_stop(s);
    serve_sched_free(s);
  }
  return NULL;
}

int serve_sched_submit(serve_sched *s, serve_job *j, serve_error *e) {
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  if (s->stopping) rc = serve_fail(e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
  else if (s->q_len == s->q_cap)
    rc = serve_fail(e, 503, "server_error", "queue_full",  NULL,
                    "the server is busy: %d slots answering and %zu requests waiting; retry later", s->n_slots,
                    s->q_len);
  else {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    s->queue[(s->q_head + s->q_len) % s->q_cap] = j;
    s->q_len++;
    dispatch(s);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Removes j from the queue (mu held); 1 when it was there. */
static int unqueue(serve_sched *s, serve_job *j) {
  for (size_t i = 0; i < s->q_len; i++) {
    size_t at = (s->q_head + i) % s->q_cap;
    if (s->queue[at] != j) continue;
    for (size_t k = i; k + 1 < s->q_len; k++)
      s->queue[(s->q_head + k) % s->q_cap] = s->queue[(s->q_head + k + 1) % s->q_cap];
    s->q_len--;
    return 1;
  }
  return 0;
}

void serve_sched_withdraw(serve_sched *s, serve_job *j) {
  mx_flag_set(&j->cancel);
  pthread_mutex_lock(&s->mu);
  int was_queued = unqueue(s, j);
  if (was_queued) publish_load(s);
  pthread_mutex_unlock(&s->mu);
  if (was_queued) {
    serve_job_finish(j, 499);
    serve_job_release(j);
  }
}

void serve_sched_stop(serve_sched *s) {
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  for (int i = 0; i < s->n_slots; i++) {
    if (s->slots[i].job) mx_flag_set(&s->slots[i].job->cancel);
    pthread_cond_signal(&s->slots[i].cv);
  }
  serve_job **waiting = s->q_len ? calloc(s->q_len, sizeof *waiting) : NULL;
  size_t n = 0;
  while (s->q_len > 0) {
    serve_job *j = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % s->q_cap;
    s->q_len--;
    if (waiting) waiting[n++] = j;
    else mx_flag_set(&j->cancel); /* (no memory for the list: the reference stays; the process is ending) */
  }
  publish_load(s);
  pthread_mutex_unlock(&s->mu);
  serve_error e;
  serve_fail(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
  char *body = serve_error_json(&e);
  for (size_t i = 0; i < n; i++) {
    if (body && waiting[i]->req.stream) serve_job_write(waiting[i], "data: ", 6); /* an SSE event */
    if (body) serve_job_write(waiting[i], body, strlen(body));
    if (body && waiting[i]->req.stream) serve_job_write(waiting[i], "\n\n", 2);
    serve_job_finish(waiting[i], 503);
    serve_job_release(waiting[i]);
  }
  free(body);
  free(waiting);
  for (int i = 0; i < s->n_slots; i++)
    if (s->slots[i].started) {
      pthread_join(s->slots[i].thread, NULL);
      s->slots[i].started = 0;
    }
}

void serve_sched_free(serve_sched *s) {
  if (!s) return;
  for (int i = 0; i < s->n_slots; i++) {
    mlxrt_session_free(s->slots[i].session);
    free(s->slots[i].cached);
    pthread_cond_destroy(&s->slots[i].cv);
  }
  s->srv->metrics.pool = NULL;
  mlxrt_pool_free(s->pool); /* after its sessions */
  free(s->slots);
  free(s->queue);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
