#include "serve_request.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int serve_fail(serve_error *e, int status, const char *type, const char *code, const char *param,
               const char *fmt, ...) {
  e->status = status;
  e->type = type;
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  /* one line: a field name or value quoted from the request must not break it; a quote cut
   * short by the buffer or a %.Ns must not leave half a UTF-8 character */
  size_t n = strlen(e->message);
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)e->message[i];
    size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (k && i + k <= n && serve_utf8_valid(e->message + i, k)) {
      if (c < 0x20) e->message[i] = ' ';
      i += k;
    } else e->message[i++] = '?';
  }
  return -1;
}

#define BAD(e, param, ...) serve_fail(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)
#define BAD_CODE(e, code, param, ...) serve_fail(e, 400, "invalid_request_error", code, param, __VA_ARGS__)

void serve_limits_default(serve_limits *l) {
  l->max_messages = 4096;
  l->max_tools = 128;
}

int serve_utf8_valid(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;
    unsigned cp, min;
    if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n - i <= k) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += k + 1;
  }
  return 1;
}

/* A \u0000 escape would silently cut a string short in the parsed tree. Backslashes occur only
 * inside strings in valid JSON, so escapes can be walked in pairs. */
static int has_nul_escape(const char *s, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (s[i] != '\\') continue;
    if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return 1;
    i++;
  }
  return 0;
}

static const char *type_name(const cJSON *v) {
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNull(v)) return "null";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  return "invalid";
}

/* Fields absent or null count as not given (OpenAI clients send null for unset options). */
static const cJSON *field(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsNull(v) ? NULL : v;
}

static int want_bool(const cJSON *o, const char *name, int *out, serve_error *e) {
  const cJSON *v = field(o, name);
  if (!v) return 0;
  if (!cJSON_IsBool(v)) return BAD(e, name, "'%s' must be a boolean, got %s", name, type_name(v));
  *out = cJSON_IsTrue(v);
  return 0;
}

static int want_number(const cJSON *o, const char *name, double lo, double hi, double *out, serve_error *e) {
  const cJSON *v = field(o, name);
  if (!v) return 0;
  if (!cJSON_IsNumber(v)) return BAD(e, name, "'%s' must be a number, got %s", name, type_name(v));
  double x = v->valuedouble;
  if (!(x >= lo && x <= hi)) return BAD(e, name, "'%s' must be in %g..%g, got %g", name, lo, hi, x);
  *out = x;
  return 0;
}

/* 1 when given (then *out holds it), 0 when absent, -1 on error. */
static int want_int(const cJSON *o, const char *name, double lo, double hi, long long *out, serve_error *e) {
  const cJSON *v = field(o, name);
  if (!v) return 0;
  if (!cJSON_IsNumber(v)) return BAD(e, name, "'%s' must be an integer, got %s", name, type_name(v));
  double x = v->valuedouble;
  if (x != floor(x) || !(x >= lo && x <= hi))
    return BAD(e, name, "'%s' must be an integer in %.0f..%.0f, got %g", name, lo, hi, x);
  *out = (long long)x;
  return 1;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static int oom(serve_error *e) {
  return serve_fail(e, 500, "server_error", NULL, NULL, "out of memory while reading the request");
}

/* ---- messages ---- */

static int copy_content(const cJSON *v, cJSON *out, const char *param, serve_error *e) {
  if (cJSON_IsString(v)) {
    cJSON_AddItemToObject(out, "content", cJSON_CreateString(v->valuestring));
    return 0;
  }
  if (!cJSON_IsArray(v))
    return BAD(e, param, "'%s' must be a string or a list of text parts, got %s", param, type_name(v));
  cJSON *parts = cJSON_AddArrayToObject(out, "content");
  int i = 0;
  for (const cJSON *p = v->child; p; p = p->next, i++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
    if (!cJSON_IsObject(p) || !cJSON_IsString(type))
      return BAD(e, param, "'%s[%d]' must be an object with a 'type'", param, i);
    if (strcmp(type->valuestring, "text"))
      return BAD(e, param, "'%s[%d]': content parts of type '%.40s' are not supported (text only)", param, i,
                 type->valuestring);
    if (!cJSON_IsString(text)) return BAD(e, param, "'%s[%d].text' must be a string", param, i);
    cJSON *q = cJSON_CreateObject();
    cJSON_AddItemToArray(parts, q);
    cJSON_AddStringToObject(q, "type", "text");
    cJSON_AddStringToObject(q, "text", text->valuestring);
  }
  return 0;
}

/* arguments arrive as JSON text (OpenAI) or an object; templates iterate them as a mapping. */
static int copy_tool_calls(const cJSON *v, cJSON *out, const char *param, serve_error *e) {
  if (!cJSON_IsArray(v)) return BAD(e, param, "'%s' must be an array, got %s", param, type_name(v));
  cJSON *calls = cJSON_AddArrayToObject(out, "tool_calls");
  int i = 0;
  for (const cJSON *c = v->child; c; c = c->next, i++) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = field(fn, "arguments");
    const cJSON *id = field(c, "id");
    const cJSON *type = field(c, "type");
    if (!cJSON_IsObject(c) || !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0])
      return BAD(e, param, "'%s[%d]' must be {\"type\":\"function\",\"function\":{\"name\":...,\"arguments\":...}}",
                 param, i);
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
      return BAD(e, param, "'%s[%d].type' must be \"function\"", param, i);
    if (id && !cJSON_IsString(id)) return BAD(e, param, "'%s[%d].id' must be a string", param, i);
    cJSON *args_obj = NULL;
    if (!args) args_obj = cJSON_CreateObject();
    else if (cJSON_IsObject(args)) args_obj = cJSON_Duplicate(args, 1);
    else if (cJSON_IsString(args)) {
      args_obj = cJSON_Parse(args->valuestring);
      if (!cJSON_IsObject(args_obj)) {
        cJSON_Delete(args_obj);
        return BAD(e, param, "'%s[%d].function.arguments' must be the JSON text of an object", param, i);
      }
    } else return BAD(e, param, "'%s[%d].function.arguments' must be a string of JSON", param, i);
    if (!args_obj) return oom(e);
    cJSON *q = cJSON_CreateObject();
    cJSON_AddItemToArray(calls, q);
    if (id) cJSON_AddStringToObject(q, "id", id->valuestring);
    cJSON_AddStringToObject(q, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(q, "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddItemToObject(f, "arguments", args_obj);
  }
  return 0;
}

/* The name of the function whose call has this id, in the assistant messages so far. */
static const char *call_name(const cJSON *msgs, const char *id) {
  const char *found = NULL;
  for (const cJSON *m = msgs->child; m; m = m->next) {
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next) {
      const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
      if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id))
        found = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name")
                    ->valuestring;
    }
  }
  return found;
}

static int parse_messages(const cJSON *root, const serve_limits *lim, serve_request *r, serve_error *e) {
  const cJSON *msgs = field(root, "messages");
  if (!msgs) return BAD(e, "messages", "'messages' is required");
  if (!cJSON_IsArray(msgs)) return BAD(e, "messages", "'messages' must be an array, got %s", type_name(msgs));
  size_t n = (size_t)cJSON_GetArraySize(msgs);
  if (n == 0) return BAD(e, "messages", "'messages' must not be empty");
  if (n > lim->max_messages)
    return BAD(e, "messages", "'messages' has %zu entries; this server takes at most %zu", n, lim->max_messages);
  cJSON *out = cJSON_CreateArray();
  if (!out) return oom(e);
  size_t i = 0;
  char param[64];
  for (const cJSON *m = msgs->child; m; m = m->next, i++) {
    snprintf(param, sizeof param, "messages[%zu]", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
      cJSON_Delete(out);
      return BAD(e, param, "'%s' must be an object with a string 'role'", param);
    }
    const char *rs = role->valuestring;
    int is_asst = !strcmp(rs, "assistant"), is_tool = !strcmp(rs, "tool");
    if (!strcmp(rs, "developer")) rs = "system";
    if (strcmp(rs, "system") && strcmp(rs, "user") && !is_asst && !is_tool) {
      cJSON_Delete(out);
      return BAD(e, param, "'%s.role' must be system, developer, user, assistant or tool, not '%.40s'", param, rs);
    }
    cJSON *q = cJSON_CreateObject();
    cJSON_AddItemToArray(out, q);
    cJSON_AddStringToObject(q, "role", rs);
    const cJSON *content = field(m, "content");
    const cJSON *calls = field(m, "tool_calls");
    char sub[80];
    snprintf(sub, sizeof sub, "%s.content", param);
    int bad = 0;
    if (content) bad = copy_content(content, q, sub, e);
    else if (is_asst && calls) cJSON_AddStringToObject(q, "content", "");
    else bad = BAD(e, sub, "'%s' is required", sub);
    if (!bad && calls) {
      snprintf(sub, sizeof sub, "%s.tool_calls", param);
      bad = is_asst ? copy_tool_calls(calls, q, sub, e) : BAD(e, sub, "only assistant messages have tool_calls");
    }
    const cJSON *name = field(m, "name");
    if (!bad && name) {
      if (cJSON_IsString(name)) cJSON_AddStringToObject(q, "name", name->valuestring);
      else bad = BAD(e, param, "'%s.name' must be a string", param);
    }
    if (!bad && is_tool) {
      const cJSON *id = field(m, "tool_call_id");
      if (id && !cJSON_IsString(id)) bad = BAD(e, param, "'%s.tool_call_id' must be a string", param);
      else if (id) {
        cJSON_AddStringToObject(q, "tool_call_id", id->valuestring);
        const char *fn = name ? NULL : call_name(out, id->valuestring);
        if (fn) cJSON_AddStringToObject(q, "name", fn); /* the template names the response */
      }
    }
    if (bad) {
      cJSON_Delete(out);
      return -1;
    }
  }
  r->messages_json = cJSON_PrintUnformatted(out);
  cJSON_Delete(out);
  if (!r->messages_json) return oom(e);
  r->n_messages = n;
  return 0;
}

static int parse_tools(const cJSON *root, const serve_limits *lim, serve_request *r, serve_error *e) {
  const cJSON *tools = field(root, "tools");
  const cJSON *choice = field(root, "tool_choice");
  int none = 0;
  if (choice) {
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) none = 1;
    else if (!cJSON_IsString(choice) || strcmp(choice->valuestring, "auto"))
      return BAD(e, "tool_choice",
                 "'tool_choice' may be \"auto\" or \"none\": this server cannot force a call (decoding is "
                 "not constrained)");
  }
  if (!tools) return 0;
  if (!cJSON_IsArray(tools)) return BAD(e, "tools", "'tools' must be an array, got %s", type_name(tools));
  size_t n = (size_t)cJSON_GetArraySize(tools);
  if (n > lim->max_tools) return BAD(e, "tools", "'tools' has %zu entries; at most %zu", n, lim->max_tools);
  int i = 0;
  for (const cJSON *t = tools->child; t; t = t->next, i++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
        !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0])
      return BAD(e, "tools", "'tools[%d]' must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
    const cJSON *params = field(fn, "parameters");
    if (params && !cJSON_IsObject(params))
      return BAD(e, "tools", "'tools[%d].function.parameters' must be an object", i);
  }
  if (none || n == 0) return 0;
  r->tools_json = cJSON_PrintUnformatted(tools);
  return r->tools_json ? 0 : oom(e);
}

static int parse_stop(const cJSON *root, serve_request *r, serve_error *e) {
  const cJSON *stop = field(root, "stop");
  if (!stop) return 0;
  const cJSON *one = cJSON_IsString(stop) ? stop : NULL;
  if (!one && !cJSON_IsArray(stop))
    return BAD(e, "stop", "'stop' must be a string or a list of strings, got %s", type_name(stop));
  if (!one && cJSON_GetArraySize(stop) > SERVE_MAX_STOP)
    return BAD(e, "stop", "'stop' takes at most %d strings", SERVE_MAX_STOP);
  for (const cJSON *s = one ? one : stop->child; s; s = one ? NULL : s->next) {
    if (!cJSON_IsString(s)) return BAD(e, "stop", "'stop' entries must be strings, got %s", type_name(s));
    size_t n = strlen(s->valuestring);
    if (n == 0) return BAD(e, "stop", "'stop' strings must not be empty");
    if (n > SERVE_MAX_STOP_BYTES) return BAD(e, "stop", "'stop' strings are at most %d bytes", SERVE_MAX_STOP_BYTES);
    if (!(r->stop[r->n_stop] = dup_str(s->valuestring))) return oom(e);
    r->n_stop++;
  }
  return 0;
}

/* Options this server does not implement: accepted at their neutral value, refused otherwise. */
static int parse_unsupported(const cJSON *root, serve_kind kind, serve_error *e) {
  static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
  for (int i = 0; i < 2; i++) {
    double x = 0;
    if (want_number(root, penalties[i], -2, 2, &x, e)) return -1;
    if (x != 0)
      return BAD(e, penalties[i], "'%s' is not supported (only 0); 'repetition_penalty' is", penalties[i]);
  }
  long long n = 1;
  if (want_int(root, "n", 1, 128, &n, e) < 0) return -1;
  if (n != 1) return BAD(e, "n", "'n' must be 1: this server returns one choice per request");
  const cJSON *bias = field(root, "logit_bias");
  if (bias && (!cJSON_IsObject(bias) || bias->child))
    return BAD(e, "logit_bias", "'logit_bias' is not supported (only an empty object)");
  const cJSON *fmt = field(root, "response_format");
  if (fmt && kind == SERVE_COMPLETION) return BAD(e, "response_format", "'response_format' is a chat field");
  if (kind == SERVE_COMPLETION) {
    int echo = 0;
    long long best_of = 1;
    if (want_bool(root, "echo", &echo, e)) return -1;
    if (echo) return BAD(e, "echo", "'echo' is not supported");
    if (want_int(root, "best_of", 1, 128, &best_of, e) < 0) return -1;
    if (best_of != 1) return BAD(e, "best_of", "'best_of' must be 1");
    const cJSON *suffix = field(root, "suffix");
    if (suffix && (!cJSON_IsString(suffix) || suffix->valuestring[0]))
      return BAD(e, "suffix", "'suffix' is not supported");
  }
  return 0;
}

static int parse_sampling(const cJSON *root, serve_request *r, serve_error *e) {
  long long x;
  int got;
  if ((got = want_int(root, "max_tokens", 1, INT_MAX, &x, e)) < 0) return -1;
  if (got) r->max_tokens = (int)x;
  if (r->kind == SERVE_CHAT) {
    if ((got = want_int(root, "max_completion_tokens", 1, INT_MAX, &x, e)) < 0) return -1;
    if (got) r->max_tokens = (int)x;
  }
  if (want_number(root, "temperature", 0, 2, &r->temperature, e)) return -1;
  if (want_number(root, "top_p", 0, 1, &r->top_p, e)) return -1;
  if (r->top_p == 0) return BAD(e, "top_p", "'top_p' must be above 0 (use temperature 0 for greedy decoding)");
  if (want_number(root, "min_p", 0, 1, &r->min_p, e)) return -1;
  if (want_number(root, "repetition_penalty", 0.01, 100, &r->repetition_penalty, e)) return -1;
  if ((got = want_int(root, "top_k", -1, 1 << 30, &x, e)) < 0) return -1;
  if (got) r->top_k = x < 0 ? 0 : (int)x; /* -1: off, as llama.cpp spells it */
  if ((got = want_int(root, "seed", -9007199254740992.0, 9007199254740992.0, &x, e)) < 0) return -1;
  if (got) r->seed = (uint64_t)x, r->seed_set = 1;
  return 0;
}

static int parse_logprobs(const cJSON *root, serve_request *r, serve_error *e) {
  long long x;
  int got;
  if (r->kind == SERVE_COMPLETION) { /* legacy: logprobs = how many alternatives, 0..5 */
    if ((got = want_int(root, "logprobs", 0, 5, &x, e)) < 0) return -1;
    if (got) r->logprobs = 1, r->top_logprobs = (int)x;
    return 0;
  }
  if (want_bool(root, "logprobs", &r->logprobs, e)) return -1;
  if ((got = want_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &x, e)) < 0) return -1;
  if (got) r->top_logprobs = (int)x;
  if (r->top_logprobs > 0 && !r->logprobs)
    return BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
  return 0;
}

static int parse_fields(const cJSON *root, const serve_limits *lim, serve_request *r, serve_error *e) {
  const cJSON *model = field(root, "model");
  if (model && !cJSON_IsString(model)) return BAD(e, "model", "'model' must be a string, got %s", type_name(model));
  if (model && !(r->model = dup_str(model->valuestring))) return oom(e);
  if (r->kind == SERVE_CHAT) {
    if (field(root, "prompt")) return BAD(e, "prompt", "'prompt' belongs to /v1/completions; chat takes 'messages'");
    if (parse_messages(root, lim, r, e) || parse_tools(root, lim, r, e)) return -1;
  } else {
    const cJSON *p = field(root, "prompt");
    if (!p) return BAD(e, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    if (!cJSON_IsString(p)) return BAD(e, "prompt", "'prompt' must be a string (or a list of one string)");
    if (!(r->prompt = dup_str(p->valuestring))) return oom(e);
    r->prompt_len = strlen(r->prompt);
    if (field(root, "messages")) return BAD(e, "messages", "'messages' belongs to /v1/chat/completions");
    if (field(root, "tools")) return BAD(e, "tools", "'tools' is a chat field");
  }
  if (parse_sampling(root, r, e) || parse_stop(root, r, e) || parse_logprobs(root, r, e) ||
      parse_unsupported(root, r->kind, e))
    return -1;
  if (want_bool(root, "stream", &r->stream, e) || want_bool(root, "ignore_eos", &r->ignore_eos, e)) return -1;
  const cJSON *so = field(root, "stream_options");
  if (so && !cJSON_IsObject(so)) return BAD(e, "stream_options", "'stream_options' must be an object");
  if (so && want_bool(so, "include_usage", &r->include_usage, e)) return -1;
  const cJSON *fmt = field(root, "response_format");
  if (fmt) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(type))
      return BAD(e, "response_format", "'response_format' must be {\"type\": \"text\"|\"json_object\"}");
    if (!strcmp(type->valuestring, "json_object")) r->json_object = 1;
    else if (strcmp(type->valuestring, "text"))
      return BAD(e, "response_format", "'response_format' type '%.40s' is not supported (text, json_object)",
                 type->valuestring);
  }
  const cJSON *kw = field(root, "chat_template_kwargs");
  if (kw && !cJSON_IsObject(kw)) return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
  if (kw && want_bool(kw, "enable_thinking", &r->enable_thinking, e)) return -1;
  return 0;
}

int serve_request_parse(serve_kind kind, const char *body, size_t len, const serve_limits *lim,
                        serve_request *r, serve_error *e) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->max_tokens = -1;
  r->temperature = r->top_p = r->min_p = r->repetition_penalty = -1;
  r->top_k = -1;
  if (!serve_utf8_valid(body, len)) return BAD(e, NULL, "the request body is not valid UTF-8");
  if (has_nul_escape(body, len)) return BAD(e, NULL, "the request has a \\u0000 in a string: text must not hold NUL");
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  if (!root) {
    size_t at = end && end >= body ? (size_t)(end - body) : 0;
    return BAD(e, NULL, "the request body is not valid JSON (at byte %zu)", at);
  }
  while (end && end < body + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
  int rc;
  if (end != body + len) rc = BAD(e, NULL, "the request body has data after its JSON value");
  else if (!cJSON_IsObject(root)) rc = BAD(e, NULL, "the request body must be a JSON object, got %s", type_name(root));
  else rc = parse_fields(root, lim, r, e);
  cJSON_Delete(root);
  if (rc) serve_request_free(r);
  return rc;
}

void serve_request_free(serve_request *r) {
  free(r->model);
  free(r->messages_json);
  free(r->tools_json);
  free(r->prompt);
  for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
  serve_kind k = r->kind;
  memset(r, 0, sizeof *r);
  r->kind = k;
}
