/* The HTTP side of mlxrt serve on libmicrohttpd, one thread per connection: a connection's
 * thread may block waiting for its answer (a non-streaming response waits in the request
 * handler, a stream in the content reader) without stalling any other connection. While it
 * waits it looks at the socket every SERVE_POLL_MS: a client that went away cancels its answer
 * (the slot's generation returns within one token or prompt batch). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"
#include "serve_response.h"

#define SERVE_POLL_MS 50
#define SERVE_DRAIN_S 3

struct serve_http {
  serve_server *srv;
  struct MHD_Daemon *daemon;
  long long started;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  int answering;      /* generation requests not yet completed (their last byte not sent) */
};

typedef enum { R_CHAT, R_COMPLETIONS, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_NONE } route;

/* Per request (MHD's con_cls): the route and the body as it arrives. */
typedef struct request_state {
  route rt;
  int is_post;
  serve_buf body;
  int too_large;
  int answered;       /* a response was queued early (auth, size) */
  serve_job *job;     /* set once the request is submitted */
} request_state;

/* A stream's reader (the response's content-reader argument). */
typedef struct stream_reader {
  serve_http *h;
  serve_job *job;
  int fd;
  size_t sent;
} stream_reader;

static serve_endpoint endpoint_of(route r) {
  switch (r) {
  case R_CHAT: return SERVE_EP_CHAT;
  case R_COMPLETIONS: return SERVE_EP_COMPLETIONS;
  case R_MODELS: case R_MODEL: return SERVE_EP_MODELS;
  case R_HEALTH: return SERVE_EP_HEALTH;
  case R_METRICS: return SERVE_EP_METRICS;
  default: return SERVE_EP_OTHER;
  }
}

static route route_of(const char *url, const char *model_id) {
  if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) return R_CHAT;
  if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) return R_COMPLETIONS;
  if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return R_MODELS;
  if (!strncmp(url, "/v1/models/", 11) && !strcmp(url + 11, model_id)) return R_MODEL;
  if (!strcmp(url, "/health")) return R_HEALTH;
  if (!strcmp(url, "/metrics")) return R_METRICS;
  return R_NONE;
}

/* 1 when the peer closed its end or the socket failed (a pipelined request is not that). */
static int client_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return 1;
  if (p.revents & POLLIN) {
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return 0;
}

static void deadline_in(struct timespec *ts, int ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_nsec += (long)ms * 1000000L;
  ts->tv_sec += ts->tv_nsec / 1000000000L;
  ts->tv_nsec %= 1000000000L;
}

static enum MHD_Result send_body(serve_http *h, struct MHD_Connection *c, route rt, int status,
                                 const char *type, const char *body, size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  serve_metrics_request(&h->srv->metrics, endpoint_of(rt), status);
  return ok;
}

static enum MHD_Result send_json(serve_http *h, struct MHD_Connection *c, route rt, int status, const char *body) {
  return send_body(h, c, rt, status, "application/json", body, strlen(body));
}

static enum MHD_Result send_error(serve_http *h, struct MHD_Connection *c, route rt, const serve_error *e) {
  char *body = serve_error_json(e);
  if (!body) return MHD_NO;
  enum MHD_Result ok = send_json(h, c, rt, e->status, body);
  free(body);
  return ok;
}

static enum MHD_Result fail(serve_http *h, struct MHD_Connection *c, route rt, int status, const char *type,
                            const char *code, const char *msg) {
  serve_error e;
  serve_fail(&e, status, type, code, NULL, "%s", msg);
  return send_error(h, c, rt, &e);
}

/* Constant-time comparison of the Authorization header with "Bearer KEY". */
static int authorized(const serve_server *srv, struct MHD_Connection *c, const char **why) {
  if (!srv->cfg.api_key) return 1;
  const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!auth || strncmp(auth, "Bearer ", 7)) {
    *why = "missing API key: send the header 'Authorization: Bearer KEY'";
    return 0;
  }
  const char *given = auth + 7, *key = srv->cfg.api_key;
  size_t ng = strlen(given), nk = strlen(key);
  unsigned char diff = ng != nk;
  for (size_t i = 0; i < nk; i++) diff |= (unsigned char)(key[i] ^ (i < ng ? given[i] : 0));
  *why = "invalid API key";
  return diff == 0;
}

static enum MHD_Result send_models(serve_http *h, struct MHD_Connection *c, route rt) {
  cJSON *model = cJSON_CreateObject();
  cJSON_AddStringToObject(model, "id", h->srv->cfg.model_id); /* a folder name: any characters */
  cJSON_AddStringToObject(model, "object", "model");
  cJSON_AddNumberToObject(model, "created", (double)h->started);
  cJSON_AddStringToObject(model, "owned_by", "mlxrt");
  cJSON *root = model;
  if (rt != R_MODEL) {
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), model);
  }
  char *body = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!body) return MHD_NO;
  enum MHD_Result ok = send_json(h, c, rt, 200, body);
  free(body);
  return ok;
}

static enum MHD_Result send_metrics(serve_http *h, struct MHD_Connection *c) {
  serve_buf b = {0};
  if (serve_metrics_render(&h->srv->metrics, &b)) {
    serve_buf_free(&b);
    return MHD_NO;
  }
  enum MHD_Result ok =
      send_body(h, c, R_METRICS, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.len);
  serve_buf_free(&b);
  return ok;
}

static enum MHD_Result send_health(serve_http *h, struct MHD_Connection *c) {
  int busy, queued;
  serve_metrics_busy(&h->srv->metrics, &busy, &queued);
  char body[160];
  snprintf(body, sizeof body, "{\"status\":\"ok\",\"slots_idle\":%d,\"slots_processing\":%d,\"queued\":%d}",
           h->srv->cfg.parallel - busy, busy, queued);
  return send_json(h, c, R_HEALTH, 200, body);
}

/* ---- streaming ---- */

static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max) {
  stream_reader *rd = cls;
  serve_job *j = rd->job;
  (void)pos;
  pthread_mutex_lock(&j->mu);
  for (;;) {
    size_t avail = j->out.len - rd->sent;
    if (avail) {
      size_t n = avail < max ? avail : max;
      memcpy(buf, j->out.p + rd->sent, n);
      rd->sent += n;
      if (rd->sent == j->out.len) j->out.len = rd->sent = 0; /* sent: the buffer starts over */
      pthread_mutex_unlock(&j->mu);
      return (ssize_t)n;
    }
    if (j->finished) {
      pthread_mutex_unlock(&j->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    struct timespec ts;
    deadline_in(&ts, SERVE_POLL_MS);
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (j->out.len == rd->sent && !j->finished) {
      pthread_mutex_unlock(&j->mu);
      if (client_gone(rd->fd)) {
        serve_sched_withdraw(rd->h->srv->sched, j);
        return MHD_CONTENT_READER_END_WITH_ERROR;
      }
      pthread_mutex_lock(&j->mu);
    }
  }
}

static void free_reader(void *cls) {
  stream_reader *rd = cls;
  if (!rd) return;
  serve_job_release(rd->job);
  free(rd);
}

static int connection_fd(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

static enum MHD_Result start_stream(serve_http *h, struct MHD_Connection *c, route rt, serve_job *j) {
  stream_reader *rd = calloc(1, sizeof *rd);
  if (!rd) return MHD_NO;
  rd->h = h;
  rd->job = j;
  rd->fd = connection_fd(c);
  pthread_mutex_lock(&j->mu);
  j->refs++;
  pthread_mutex_unlock(&j->mu);
  struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_events, rd, free_reader);
  if (!r) {
    free_reader(rd);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  serve_metrics_request(&h->srv->metrics, endpoint_of(rt), 200);
  return ok;
}

/* Non-streaming: waits for the whole answer, watching the socket. */
static enum MHD_Result wait_and_send(serve_http *h, struct MHD_Connection *c, route rt, serve_job *j) {
  int fd = connection_fd(c);
  pthread_mutex_lock(&j->mu);
  while (!j->finished) {
    struct timespec ts;
    deadline_in(&ts, SERVE_POLL_MS);
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (j->finished) break;
    pthread_mutex_unlock(&j->mu);
    if (client_gone(fd)) {
      serve_sched_withdraw(h->srv->sched, j);
      serve_metrics_request(&h->srv->metrics, endpoint_of(rt), 499);
      return MHD_NO; /* nobody to answer: the connection closes */
    }
    pthread_mutex_lock(&j->mu);
  }
  pthread_mutex_unlock(&j->mu);
  if (j->status == 499) return MHD_NO;
  return send_body(h, c, rt, j->status, "application/json", j->out.p ? j->out.p : "", j->out.len);
}

static enum MHD_Result handle_generation(serve_http *h, struct MHD_Connection *c, request_state *st) {
  serve_server *srv = h->srv;
  serve_kind kind = st->rt == R_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
  serve_error e;
  serve_job *j = serve_job_new();
  if (!j) return fail(h, c, st->rt, 500, "server_error", NULL, "out of memory");
  st->job = j;
  pthread_mutex_lock(&h->mu);
  h->answering++;
  pthread_mutex_unlock(&h->mu);
  if (serve_request_parse(kind, st->body.p ? st->body.p : "", st->body.len, &srv->cfg.limits, &j->req, &e))
    return send_error(h, c, st->rt, &e);
  serve_buf_free(&st->body);
  const char *model = j->req.model;
  if (model && strcmp(model, srv->cfg.model_id) && strcmp(model, srv->cfg.model_arg)) {
    serve_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
               "the model '%.200s' does not exist; this server serves '%s'", model, srv->cfg.model_id);
    return send_error(h, c, st->rt, &e);
  }
  serve_random_id(j->id, sizeof j->id, kind == SERVE_CHAT ? "chatcmpl-" : "cmpl-");
  j->created = (long long)time(NULL);
  if (serve_prompt_build(srv, j, &e) || serve_sched_submit(srv->sched, j, &e)) return send_error(h, c, st->rt, &e);
  return j->req.stream ? start_stream(h, c, st->rt, j) : wait_and_send(h, c, st->rt, j);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size,
                                  void **con_cls) {
  serve_http *h = cls;
  serve_server *srv = h->srv;
  (void)version;
  request_state *st = *con_cls;
  if (!st) { /* headers only: route, authenticate, check the announced size */
    if (!(st = calloc(1, sizeof *st))) return MHD_NO;
    *con_cls = st;
    st->rt = route_of(url, srv->cfg.model_id);
    st->is_post = !strcmp(method, "POST");
    const char *why = NULL;
    if (st->rt != R_HEALTH && !authorized(srv, c, &why)) {
      st->answered = 1;
      return fail(h, c, st->rt, 401, "invalid_request_error", "invalid_api_key", why);
    }
    if (st->rt == R_NONE) {
      st->answered = 1;
      char msg[300];
      snprintf(msg, sizeof msg, "no such endpoint: %.16s %.200s", method, url);
      return fail(h, c, st->rt, 404, "invalid_request_error", "not_found", msg);
    }
    int wants_post = st->rt == R_CHAT || st->rt == R_COMPLETIONS;
    if (wants_post != st->is_post || (!st->is_post && strcmp(method, "GET") && strcmp(method, "HEAD"))) {
      st->answered = 1;
      char msg[160];
      snprintf(msg, sizeof msg, "%.200s takes %s, not %.16s", url, wants_post ? "POST" : "GET", method);
      return fail(h, c, st->rt, 405, "invalid_request_error", "method_not_allowed", msg);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > srv->cfg.max_body) st->too_large = 1;
    if (st->too_large) {
      st->answered = 1;
      char msg[160];
      snprintf(msg, sizeof msg, "the request body is larger than this server's limit of %zu bytes (--max-body)",
               srv->cfg.max_body);
      return fail(h, c, st->rt, 413, "invalid_request_error", "request_too_large", msg);
    }
    return MHD_YES;
  }
  if (*upload_size) { /* a piece of the body */
    if (!st->answered && !st->too_large) {
      if (st->body.len + *upload_size > srv->cfg.max_body) {
        st->too_large = 1;
        serve_buf_free(&st->body);
      } else if (serve_buf_add(&st->body, upload_data, *upload_size)) {
        return MHD_NO;
      }
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (st->answered) return MHD_YES;
  st->answered = 1;
  if (st->too_large) {
    char msg[160];
    snprintf(msg, sizeof msg, "the request body is larger than this server's limit of %zu bytes (--max-body)",
             srv->cfg.max_body);
    return fail(h, c, st->rt, 413, "invalid_request_error", "request_too_large", msg);
  }
  switch (st->rt) {
  case R_HEALTH: return send_health(h, c);
  case R_METRICS: return send_metrics(h, c);
  case R_MODELS: case R_MODEL: return send_models(h, c, st->rt);
  default: return handle_generation(h, c, st);
  }
}

/* The request is over (answered, or the connection failed): a running answer is cancelled. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  serve_http *h = cls;
  request_state *st = *con_cls;
  (void)c;
  (void)toe;
  if (!st) return;
  if (st->job) {
    pthread_mutex_lock(&st->job->mu);
    int finished = st->job->finished;
    pthread_mutex_unlock(&st->job->mu);
    if (!finished) serve_sched_withdraw(h->srv->sched, st->job);
    serve_job_release(st->job);
    pthread_mutex_lock(&h->mu);
    if (--h->answering == 0) pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->mu);
  }
  serve_buf_free(&st->body);
  free(st);
  *con_cls = NULL;
}

serve_http *serve_http_start(serve_server *srv, char *why, size_t why_len) {
  serve_http *h = calloc(1, sizeof *h);
  if (!h) {
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  h->srv = srv;
  h->started = (long long)time(NULL);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->idle, NULL);
  char port[16];
  snprintf(port, sizeof port, "%d", srv->cfg.port);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(srv->cfg.host, port, &hints, &ai);
  if (gai) {
    snprintf(why, why_len, "--host %s: %s", srv->cfg.host, gai_strerror(gai));
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->idle);
    free(h);
    return NULL;
  }
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                               MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)srv->cfg.timeout_s,
                               MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                               MHD_OPTION_CONNECTION_LIMIT, (unsigned int)(srv->cfg.parallel + srv->cfg.queue_max + 64),
                               MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!h->daemon) {
    snprintf(why, why_len, "cannot listen on %s:%d (%s)", srv->cfg.host, srv->cfg.port,
             errno ? strerror(errno) : "libmicrohttpd refused to start");
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->idle);
    free(h);
    return NULL;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  if (di) srv->cfg.port = di->port;
  return h;
}

void serve_http_quiesce(serve_http *h) {
  MHD_socket fd = MHD_quiesce_daemon(h->daemon);
  if (fd != MHD_INVALID_SOCKET) close(fd);
}

void serve_http_stop(serve_http *h) {
  if (!h) return;
  /* answers end (finished or cancelled) before the daemon closes the sockets, so every stream
   * gets its last event; a client that stopped reading gets SERVE_DRAIN_S */
  struct timespec until;
  deadline_in(&until, SERVE_DRAIN_S * 1000);
  pthread_mutex_lock(&h->mu);
  while (h->answering > 0 && pthread_cond_timedwait(&h->idle, &h->mu, &until) == 0) {}
  pthread_mutex_unlock(&h->mu);
  MHD_stop_daemon(h->daemon);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->idle);
  free(h);
}
