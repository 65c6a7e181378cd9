/* From a parsed request to prompt tokens: chat messages through the model's chat template (or
 * --chat-template), completions as plain text after the tokenizer's BOS; then the context
 * checks that make a request fail early with a clear 400 rather than stop short. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static const char JSON_INSTRUCTION[] =
    "Answer with a single valid JSON object and nothing else.";

/* response_format json_object: decoding is not constrained, so the model is told (a system
 * message, or an addition to the first one). Returns malloc'd JSON text or NULL. */
static char *with_json_instruction(const char *messages_json) {
  cJSON *msgs = cJSON_Parse(messages_json);
  if (!cJSON_IsArray(msgs)) {
    cJSON_Delete(msgs);
    return NULL;
  }
  cJSON *first = msgs->child;
  cJSON *role = cJSON_GetObjectItemCaseSensitive(first, "role");
  cJSON *content = cJSON_GetObjectItemCaseSensitive(first, "content");
  if (cJSON_IsString(role) && !strcmp(role->valuestring, "system") && cJSON_IsString(content)) {
    size_t n = strlen(content->valuestring) + sizeof JSON_INSTRUCTION + 2;
    char *text = malloc(n);
    if (text) {
      snprintf(text, n, "%s\n\n%s", content->valuestring, JSON_INSTRUCTION);
      cJSON_ReplaceItemInObjectCaseSensitive(first, "content", cJSON_CreateString(text));
      free(text);
    }
  } else {
    cJSON *sys = cJSON_CreateObject();
    cJSON_AddStringToObject(sys, "role", "system");
    cJSON_AddStringToObject(sys, "content", JSON_INSTRUCTION);
    cJSON_InsertItemInArray(msgs, 0, sys);
  }
  char *out = cJSON_PrintUnformatted(msgs);
  cJSON_Delete(msgs);
  return out;
}

static int render_chat(const serve_server *srv, const serve_request *r, char **text, serve_error *e) {
  char *json_msgs = NULL;
  if (r->json_object && !(json_msgs = with_json_instruction(r->messages_json)))
    return serve_fail(e, 500, "server_error", NULL, NULL, "out of memory while rendering the prompt");
  mlxrt_template_options o;
  memset(&o, 0, sizeof o);
  o.add_generation_prompt = 1;
  o.enable_thinking = r->enable_thinking;
  o.template_text = srv->cfg.template_text;
  mlxrt_error err = {{0}};
  *text = mlxrt_chat_template_apply(srv->model, json_msgs ? json_msgs : r->messages_json, r->tools_json, &o, &err);
  free(json_msgs);
  /* the template judges the conversation (roles, order): its refusal is the client's error */
  if (!*text) return serve_fail(e, 400, "invalid_request_error", NULL, "messages", "chat template: %s", err.msg);
  return 0;
}

int serve_prompt_build(const serve_server *srv, serve_job *j, serve_error *e) {
  const serve_request *r = &j->req;
  mlxrt_error err = {{0}};
  int rc;
  if (r->kind == SERVE_CHAT) {
    char *text = NULL;
    if (render_chat(srv, r, &text, e)) return -1;
    rc = mlxrt_tokenize(srv->model, text, strlen(text), 0, &j->ids, &j->n_ids, &err);
    mlxrt_free(text);
  } else {
    rc = mlxrt_tokenize(srv->model, r->prompt, r->prompt_len, 1, &j->ids, &j->n_ids, &err);
  }
  if (rc) return serve_fail(e, 400, "invalid_request_error", NULL, r->kind == SERVE_CHAT ? "messages" : "prompt",
                            "cannot tokenize the prompt: %s", err.msg);
  const int64_t ctx = srv->cfg.ctx;
  if (j->n_ids == 0)
    return serve_fail(e, 400, "invalid_request_error", NULL, "prompt", "the prompt is empty");
  if ((int64_t)j->n_ids >= ctx)
    return serve_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                      r->kind == SERVE_CHAT ? "messages" : "prompt",
                      "the prompt has %zu tokens; this server's context is %lld tokens (-c), and the answer "
                      "needs at least one more",
                      j->n_ids, (long long)ctx);
  int64_t room = ctx - (int64_t)j->n_ids;
  if (r->max_tokens > room)
    return serve_fail(e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                      "max_tokens %d does not fit: the prompt has %zu tokens and the context %lld, leaving %lld",
                      r->max_tokens, j->n_ids, (long long)ctx, (long long)room);
  j->max_tokens = r->max_tokens > 0 ? r->max_tokens : (int)room;
  return 0;
}
