/* mlxrt serve: an OpenAI-compatible HTTP server on the public API (include/mlxrt.h).
 * Concerns, one file each: cmd_serve.c (options, start, signals, shutdown), serve_http.c
 * (libmicrohttpd, routing, auth, bodies, streaming), serve_request.c (parsing and validation),
 * serve_prompt.c (template, tokens, context checks), serve_sched.c (slots and the fair queue),
 * serve_gen.c (one answer: tokens through the text filters into responses), serve_response.c
 * (the JSON shapes), serve_text.c (stop strings, tool-call segments), serve_metrics.c.
 * docs/SERVER.md is the reference. */
#ifndef MLXRT_TOOLS_SERVE_H
#define MLXRT_TOOLS_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gen_args.h"
#include "mlxrt.h"
#include "serve_metrics.h"
#include "serve_request.h"
#include "serve_text.h"

typedef struct serve_config {
  const char *model_arg;   /* -m as given */
  char model_dir[4096];    /* resolved */
  char model_id[256];      /* the id /v1/models lists: the folder's name */
  const char *host;
  int port;
  const char *api_key;     /* NULL: no authentication */
  int key_owned;           /* api_key was read from --api-key-file (malloc'd) */
  int parallel;            /* slots */
  const char *batching;    /* --cont-batching auto|on|off as given (NULL: auto) */
  int pooled;              /* resolved: the slots are sessions of one pool (steps batched) */
  int queue_max;           /* requests waiting beyond the slots */
  const char *template_file;
  char *template_text;     /* --chat-template's contents (malloc'd) or NULL */
  int64_t ctx;             /* tokens per slot */
  const char *backend, *numerics, *kv_k;
  int threads, verbose;
  size_t max_body;
  int timeout_s;
  serve_limits limits;
  gen_spec_args spec;          /* --spec, --draft-model, --draft-max, --spec-ngram as given */
  mlxrt_spec_options spec_opt; /* checked; its draft model loaded at start */
} serve_config;

typedef struct serve_sched serve_sched;

typedef struct serve_server {
  serve_config cfg;
  mlxrt_model *model;
  serve_metrics metrics;
  serve_sched *sched;
} serve_server;

/* One request from its parse to its last byte. Shared by the connection (which reads `out`) and
 * the scheduler (a slot writes it): a reference each, the last release frees it. */
typedef struct serve_job {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  serve_request req;
  int32_t *ids;
  size_t n_ids;
  int max_tokens;          /* resolved against the context */
  serve_buf out;           /* SSE events as they come, or the whole response body */
  int status;              /* HTTP status of out (non-streaming) */
  int finished;            /* out is complete */
  volatile int cancel;     /* the client went away or the server is stopping */
  char id[48];
  long long created;
} serve_job;

serve_job *serve_job_new(void);
void serve_job_release(serve_job *j);
/* Appends to out and wakes the connection. -1: out of memory. */
int serve_job_write(serve_job *j, const char *s, size_t n);
/* Marks out complete with its status and wakes the connection. */
void serve_job_finish(serve_job *j, int status);

/* serve_prompt.c: renders and tokenizes the request's prompt, checks prompt + max_tokens against
 * the context; fills j->ids, j->n_ids and j->max_tokens. -1 with e (400 with a clear message). */
int serve_prompt_build(const serve_server *srv, serve_job *j, serve_error *e);

/* serve_sched.c: with cfg.pooled the slots' sessions are a pool's (mlxrt_pool_new), so slots
 * answering at once step as one batch. */
serve_sched *serve_sched_new(serve_server *srv, mlxrt_error *err);
/* Queues j (a slot takes a reference). -1 with e: 503 when the queue is full or stopping. */
int serve_sched_submit(serve_sched *s, serve_job *j, serve_error *e);
/* The client is gone: a queued j leaves the queue (finished, empty); a running j is cancelled. */
void serve_sched_withdraw(serve_sched *s, serve_job *j);
/* Cancels every answer, fails queued requests with 503, joins the slot threads. */
void serve_sched_stop(serve_sched *s);
void serve_sched_free(serve_sched *s);

/* serve_gen.c: answers j on a session and finishes it; release(arg) is called once, when the
 * session is no longer used and before the answer's last bytes are written. */
void serve_gen_run(serve_server *srv, mlxrt_session *sess, serve_job *j, void (*release)(void *), void *arg);

/* serve_response.c: an OpenAI error body {"error":{...}} (malloc'd; NULL when out of memory). */
char *serve_error_json(const serve_error *e);

/* serve_http.c */
typedef struct serve_http serve_http;
serve_http *serve_http_start(serve_server *srv, char *why, size_t why_len);
/* Stops accepting connections (the listening socket closes). */
void serve_http_quiesce(serve_http *h);
/* Waits for the connections to end and frees everything. */
void serve_http_stop(serve_http *h);

#endif
