/* One answer on a slot's session: mlxrt_session_generate's tokens go through the stop-string
 * filter and the tool-call splitter into SSE chunks (stream) or one response body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/flag.h"
#include "serve.h"
#include "serve_response.h"

typedef struct answer {
  serve_server *srv;
  serve_job *j;
  const serve_request *r;
  int chat, stream;
  serve_stop_filter stop;
  serve_tool_splitter tools;
  serve_buf text;     /* the content (stream: what is not sent yet) */
  cJSON *calls;       /* tool calls found, in order */
  cJSON *pending_calls; /* stream: found and not sent yet */
  cJSON *lp;          /* chat: logprobs.content entries (stream: not sent yet) */
  cJSON *legacy;      /* completions: {tokens, token_logprobs, top_logprobs, text_offset} */
  size_t text_offset;
  int64_t n_gen;
  int failed;         /* out of memory */
} answer;

static void on_segment(void *user, int kind, const char *s, size_t n) {
  answer *a = user;
  if (kind == 1) { /* a whole <|tool_call>...<tool_call|> segment */
    char *content = NULL;
    char *calls = mlxrt_parse_tool_calls(a->srv->model, s, n, &content, NULL);
    cJSON *arr = calls ? cJSON_Parse(calls) : NULL;
    mlxrt_free(calls);
    if (content && content[0]) serve_buf_add(&a->text, content, strlen(content));
    mlxrt_free(content);
    if (!cJSON_IsArray(arr) || !arr->child) { /* not a call after all: it stays text */
      cJSON_Delete(arr);
      if (serve_buf_add(&a->text, s, n)) a->failed = 1;
      return;
    }
    while (arr->child) {
      cJSON *c = cJSON_DetachItemViaPointer(arr, arr->child);
      char id[40];
      serve_random_id(id, sizeof id, "call_");
      cJSON_AddItemToObject(c, "id", cJSON_CreateString(id));
      cJSON_AddItemToArray(a->calls, cJSON_Duplicate(c, 1));
      cJSON_AddItemToArray(a->pending_calls, c);
    }
    cJSON_Delete(arr);
    return;
  }
  if (serve_buf_add(&a->text, s, n)) a->failed = 1;
}

static void on_stop_text(void *user, int kind, const char *s, size_t n) {
  answer *a = user;
  (void)kind;
  if (serve_tool_push(&a->tools, s, n, on_segment, a)) a->failed = 1;
}

static void record_logprobs(answer *a, const mlxrt_token_info *t) {
  const mlxrt_model *m = a->srv->model;
  if (a->chat) {
    cJSON *e = serve_logprob_token(m, t->id, t->logprob, 1);
    cJSON *top = cJSON_GetObjectItemCaseSensitive(e, "top_logprobs");
    for (int k = 0; k < t->n_top; k++)
      cJSON_AddItemToArray(top, serve_logprob_token(m, t->top_ids[k], t->top_logprobs[k], 0));
    cJSON_AddItemToArray(a->lp, e);
    return;
  }
  cJSON *tok = serve_logprob_token(m, t->id, t->logprob, 0);
  const char *s = cJSON_GetObjectItemCaseSensitive(tok, "token")->valuestring;
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(a->legacy, "tokens"), cJSON_CreateString(s));
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(a->legacy, "token_logprobs"), cJSON_CreateNumber(t->logprob));
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(a->legacy, "text_offset"),
                       cJSON_CreateNumber((double)a->text_offset));
  a->text_offset += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(tok, "bytes"));
  cJSON_Delete(tok);
  cJSON *top = cJSON_CreateObject();
  for (int k = 0; k < t->n_top; k++) {
    cJSON *alt = serve_logprob_token(m, t->top_ids[k], t->top_logprobs[k], 0);
    const char *name = cJSON_GetObjectItemCaseSensitive(alt, "token")->valuestring;
    if (!cJSON_GetObjectItemCaseSensitive(top, name)) cJSON_AddNumberToObject(top, name, t->top_logprobs[k]);
    cJSON_Delete(alt);
  }
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(a->legacy, "top_logprobs"), top);
}

/* Stream: sends what has accumulated (text, tool calls, logprobs) as one chunk. */
static void send_pending(answer *a, const char *finish) {
  int has_lp = a->chat ? cJSON_GetArraySize(a->lp) > 0 : 0;
  int has_calls = cJSON_GetArraySize(a->pending_calls) > 0;
  if (!a->text.len && !has_lp && !has_calls && !finish) return;
  cJSON *chunk = serve_resp_base(a->j, a->srv->cfg.model_id, 1);
  cJSON *c = serve_resp_choice(chunk);
  if (a->chat) {
    cJSON *delta = cJSON_AddObjectToObject(c, "delta");
    if (a->text.len) cJSON_AddStringToObject(delta, "content", a->text.p);
    if (has_calls) {
      cJSON *arr = cJSON_AddArrayToObject(delta, "tool_calls");
      int base = cJSON_GetArraySize(a->calls) - cJSON_GetArraySize(a->pending_calls);
      while (a->pending_calls->child) {
        cJSON *call = cJSON_DetachItemViaPointer(a->pending_calls, a->pending_calls->child);
        cJSON_AddNumberToObject(call, "index", base++);
        cJSON_AddItemToArray(arr, call);
      }
    }
    if (has_lp) {
      cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
      cJSON_AddItemToObject(lp, "content", a->lp);
      a->lp = cJSON_CreateArray();
    } else cJSON_AddNullToObject(c, "logprobs");
  } else {
    cJSON_AddStringToObject(c, "text", a->text.len ? a->text.p : "");
    if (a->legacy && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a->legacy, "tokens")) > 0) {
      cJSON_AddItemToObject(c, "logprobs", a->legacy);
      a->legacy = cJSON_Parse("{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]}");
    } else cJSON_AddNullToObject(c, "logprobs");
  }
  if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
  else cJSON_AddNullToObject(c, "finish_reason");
  if (a->r->include_usage) cJSON_AddNullToObject(chunk, "usage");
  a->text.len = 0;
  if (serve_sse_send(a->j, chunk)) a->failed = 1;
}

static int on_token(void *user, const mlxrt_token_info *t) {
  answer *a = user;
  if (t->is_stop) return 0;
  a->n_gen++;
  if (a->r->logprobs) record_logprobs(a, t);
  int stopped = serve_stop_push(&a->stop, t->text, t->len, on_stop_text, a);
  if (stopped < 0) a->failed = 1;
  if (a->stream) send_pending(a, NULL);
  return stopped != 0 || a->failed;
}

static void set_options(const serve_server *srv, const serve_job *j, mlxrt_generate_options *o) {
  const serve_request *r = &j->req;
  mlxrt_generate_options_default(o);
  if (r->temperature >= 0) o->gen.temperature = (float)r->temperature;
  if (r->top_p >= 0) o->gen.top_p = (float)r->top_p;
  if (r->min_p >= 0) o->gen.min_p = (float)r->min_p;
  if (r->top_k >= 0) o->gen.top_k = r->top_k;
  if (r->repetition_penalty >= 0) o->gen.repetition_penalty = (float)r->repetition_penalty;
  /* OpenAI: without a seed every request draws anew */
  o->gen.seed_set = 1;
  if (r->seed_set) o->gen.seed = r->seed;
  else if (getrandom(&o->gen.seed, sizeof o->gen.seed, 0) != (ssize_t)sizeof o->gen.seed)
    o->gen.seed = (uint64_t)j->created ^ (uint64_t)(uintptr_t)j;
  o->gen.max_tokens = j->max_tokens;
  o->logprobs = r->logprobs;
  o->top_logprobs = r->top_logprobs;
  o->ignore_stop = r->ignore_eos;
  o->cancel = (volatile int *)&j->cancel;
  o->spec = srv->cfg.spec_opt;
}

static void fail_answer(answer *a, int status, const char *fmt, const char *detail) {
  serve_error e;
  serve_fail(&e, status, "server_error", NULL, NULL, fmt, detail);
  char *body = serve_error_json(&e);
  if (a->stream) { /* the headers went out with 200: the error is an event */
    if (body) {
      serve_job_write(a->j, "data: ", 6);
      serve_job_write(a->j, body, strlen(body));
      serve_job_write(a->j, "\n\n", 2);
    }
    serve_job_finish(a->j, 200);
  } else {
    a->j->out.len = 0;
    if (body) serve_job_write(a->j, body, strlen(body));
    serve_job_finish(a->j, status);
  }
  free(body);
}

static cJSON *whole_response(answer *a, const mlxrt_gen_stats *st, const char *finish) {
  cJSON *resp = serve_resp_base(a->j, a->srv->cfg.model_id, 0);
  cJSON *c = serve_resp_choice(resp);
  int n_calls = cJSON_GetArraySize(a->calls);
  if (a->chat) {
    cJSON *msg = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    if (a->text.len || !n_calls) cJSON_AddStringToObject(msg, "content", a->text.len ? a->text.p : "");
    else cJSON_AddNullToObject(msg, "content");
    if (n_calls) {
      cJSON_AddItemToObject(msg, "tool_calls", a->calls);
      a->calls = NULL;
    }
    if (a->r->logprobs) {
      cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
      cJSON_AddItemToObject(lp, "content", a->lp);
      a->lp = NULL;
    } else cJSON_AddNullToObject(c, "logprobs");
  } else {
    cJSON_AddStringToObject(c, "text", a->text.len ? a->text.p : "");
    if (a->legacy) {
      cJSON_AddItemToObject(c, "logprobs", a->legacy);
      a->legacy = NULL;
    } else cJSON_AddNullToObject(c, "logprobs");
  }
  cJSON_AddStringToObject(c, "finish_reason", finish);
  cJSON_AddItemToObject(resp, "usage", serve_resp_usage(st->prompt_tokens, a->n_gen,
                                                       st->prompt_tokens - st->prompt_processed));
  return resp;
}

void serve_gen_run(serve_server *srv, mlxrt_session *sess, serve_job *j, void (*release)(void *), void *arg) {
  answer a;
  memset(&a, 0, sizeof a);
  a.srv = srv;
  a.j = j;
  a.r = &j->req;
  a.chat = j->req.kind == SERVE_CHAT;
  a.stream = j->req.stream;
  serve_stop_init(&a.stop, a.r->stop, a.r->n_stop);
  serve_tool_init(&a.tools, a.chat && a.r->tools_json != NULL);
  a.calls = cJSON_CreateArray();
  a.pending_calls = cJSON_CreateArray();
  a.lp = cJSON_CreateArray();
  if (!a.chat && a.r->logprobs)
    a.legacy = cJSON_Parse("{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]}");
  if (a.stream && a.chat) { /* the role comes first, alone */
    cJSON *chunk = serve_resp_base(j, srv->cfg.model_id, 1);
    cJSON *c = serve_resp_choice(chunk);
    cJSON *delta = cJSON_AddObjectToObject(c, "delta");
    cJSON_AddStringToObject(delta, "role", "assistant");
    cJSON_AddStringToObject(delta, "content", "");
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    if (a.r->include_usage) cJSON_AddNullToObject(chunk, "usage");
    serve_sse_send(j, chunk);
  }
  mlxrt_generate_options o;
  set_options(srv, j, &o);
  mlxrt_gen_stats st;
  memset(&st, 0, sizeof st);
  mlxrt_error err = {{0}};
  int rc = mx_flag_get(&j->cancel) ? 0 : mlxrt_session_generate(sess, j->ids, j->n_ids, &o, on_token, &a, &st, &err);
  release(arg);
  int cancelled = mx_flag_get(&j->cancel) || (rc == 0 && st.stopped_by == 2);
  serve_metrics_answer(&srv->metrics, st.prompt_tokens, st.prompt_tokens - st.prompt_processed, a.n_gen,
                       st.prompt_seconds, st.gen_seconds, cancelled);
  if (srv->cfg.verbose)
    fprintf(stderr, "mlxrt serve: %s: prompt %lld (%lld cached), %lld generated, stopped by %d%s\n", j->id,
            (long long)st.prompt_tokens, (long long)(st.prompt_tokens - st.prompt_processed), (long long)a.n_gen,
            st.stopped_by, cancelled ? ", cancelled" : "");
  if (rc) fail_answer(&a, 500, "generation failed: %s", err.msg);
  else if (a.failed) fail_answer(&a, 500, "%s", "out of memory while answering");
  else if (cancelled) fail_answer(&a, 503, "%s", "the answer was cancelled (the client left or the server is stopping)");
  else {
    serve_stop_finish(&a.stop, on_stop_text, &a);
    serve_tool_finish(&a.tools, on_segment, &a);
    const char *finish = serve_finish_reason(st.stopped_by, cJSON_GetArraySize(a.calls) > 0);
    if (a.stream) {
      send_pending(&a, finish);
      if (a.r->include_usage) {
        cJSON *chunk = serve_resp_base(j, srv->cfg.model_id, 1);
        cJSON_AddArrayToObject(chunk, "choices");
        cJSON_AddItemToObject(chunk, "usage", serve_resp_usage(st.prompt_tokens, a.n_gen,
                                                              st.prompt_tokens - st.prompt_processed));
        serve_sse_send(j, chunk);
      }
      serve_job_write(j, "data: [DONE]\n\n", 14);
      serve_job_finish(j, 200);
    } else {
      cJSON *resp = whole_response(&a, &st, finish);
      char *body = cJSON_PrintUnformatted(resp);
      cJSON_Delete(resp);
      if (body) {
        serve_job_write(j, body, strlen(body));
        serve_job_finish(j, 200);
      } else fail_answer(&a, 500, "%s", "out of memory while answering");
      free(body);
    }
  }
  serve_stop_free(&a.stop);
  serve_tool_free(&a.tools);
  serve_buf_free(&a.text);
  cJSON_Delete(a.calls);
  cJSON_Delete(a.pending_calls);
  cJSON_Delete(a.lp);
  cJSON_Delete(a.legacy);
}
