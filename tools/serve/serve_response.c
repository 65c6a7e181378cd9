#include "serve_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

char *serve_error_json(const serve_error *e) {
  cJSON *root = cJSON_CreateObject();
  cJSON *err = cJSON_AddObjectToObject(root, "error");
  cJSON_AddStringToObject(err, "message", e->message);
  cJSON_AddStringToObject(err, "type", e->type ? e->type : "server_error");
  if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
  else cJSON_AddNullToObject(err, "param");
  if (e->code) cJSON_AddStringToObject(err, "code", e->code);
  else cJSON_AddNullToObject(err, "code");
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}

cJSON *serve_resp_base(const serve_job *j, const char *model_id, int chunk) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", j->id);
  const char *object = j->req.kind == SERVE_COMPLETION ? "text_completion"
                       : chunk                         ? "chat.completion.chunk"
                                                       : "chat.completion";
  cJSON_AddStringToObject(o, "object", object);
  cJSON_AddNumberToObject(o, "created", (double)j->created);
  cJSON_AddStringToObject(o, "model", model_id);
  cJSON_AddStringToObject(o, "system_fingerprint", "mlxrt");
  return o;
}

cJSON *serve_resp_usage(int64_t prompt, int64_t completion, int64_t cached) {
  cJSON *u = cJSON_CreateObject();
  cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
  cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
  cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
  cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
  cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
  return u;
}

cJSON *serve_resp_choice(cJSON *resp) {
  cJSON *choices = cJSON_AddArrayToObject(resp, "choices");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(choices, c);
  cJSON_AddNumberToObject(c, "index", 0);
  return c;
}

int serve_sse_send(serve_job *j, cJSON *obj) {
  char *s = cJSON_PrintUnformatted(obj);
  cJSON_Delete(obj);
  if (!s) return -1;
  size_t n = strlen(s);
  char *ev = malloc(n + 9);
  int rc = -1;
  if (ev) {
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, s, n);
    memcpy(ev + 6 + n, "\n\n", 2);
    rc = serve_job_write(j, ev, n + 8);
  }
  free(ev);
  free(s);
  return rc;
}

const char *serve_finish_reason(int stopped_by, int tool_calls) {
  if (tool_calls) return "tool_calls";
  return stopped_by == 1 || stopped_by == 3 ? "length" : "stop";
}

/* s with every byte that does not start a well-formed UTF-8 sequence replaced by U+FFFD. */
static char *utf8_repair(const char *s, size_t n) {
  char *out = malloc(3 * n + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t k = 1;
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80) k = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (k && i + k <= n && serve_utf8_valid(s + i, k)) {
      memcpy(out + o, s + i, k);
      o += k;
      i += k;
    } else {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  out[o] = 0;
  return out;
}

cJSON *serve_logprob_token(const mlxrt_model *m, int32_t id, double logprob, int with_top) {
  size_t len = 0;
  char *text = mlxrt_detokenize(m, &id, 1, 0, &len, NULL);
  char *shown = utf8_repair(text ? text : "", text ? len : 0);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "token", shown ? shown : "");
  cJSON_AddNumberToObject(o, "logprob", logprob);
  cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
  for (size_t i = 0; text && i < len; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)text[i]));
  if (with_top) cJSON_AddArrayToObject(o, "top_logprobs");
  free(shown);
  mlxrt_free(text);
  return o;
}

void serve_random_id(char *out, size_t n, const char *prefix) {
  unsigned char r[12];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 20) ^ (uint64_t)(uintptr_t)out;
    for (size_t i = 0; i < sizeof r; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
      r[i] = (unsigned char)(x >> 56);
  }
  size_t o = (size_t)snprintf(out, n, "%s", prefix);
  for (size_t i = 0; i < sizeof r && o + 2 < n; i++, o += 2) snprintf(out + o, n - o, "%02x", r[i]);
}
