/* Conversation (JSON) -> prompt text through the chat template or the built-in renderer
 * (chat_render.h). The template's context is assembled as JSON text around the caller's own
 * text, so what the template sees is exactly what was sent. */
#include "mlx/chat_render.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/jinja.h"
#include "mlx/json_doc.h"
#include "mlx/model.h"

/* ---- spans of validated JSON text ------------------------------------------------------ */
/* These walk text that jd_parse has accepted, so they need no error checks. */

static size_t skip_ws(const char *s, size_t i) {
  while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') i++;
  return i;
}

static size_t skip_string(const char *s, size_t i) {
  for (i++; s[i] != '"'; i++)
    if (s[i] == '\\') i++;
  return i + 1;
}

static size_t skip_value(const char *s, size_t i) {
  if (s[i] == '"') return skip_string(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    do {
      if (s[i] == '"') {
        i = skip_string(s, i);
        continue;
      }
      if (s[i] == '{' || s[i] == '[') depth++;
      else if (s[i] == '}' || s[i] == ']') depth--;
      i++;
    } while (depth > 0);
    return i;
  }
  while (s[i] && !strchr(",]} \t\n\r", s[i])) i++;
  return i;
}

typedef struct span {
  size_t a, b;
} span;

/* The next element of an array (or member of an object, with its key's span) from s[i]; returns
 * where the one after it starts. */
static size_t next_item(const char *s, size_t i, int is_object, span *key, span *val) {
  i = skip_ws(s, i);
  if (is_object) {
    key->a = i;
    key->b = i = skip_string(s, i);
    i = skip_ws(s, i) + 1; /* ':' */
    i = skip_ws(s, i);
  }
  val->a = i;
  val->b = i = skip_value(s, i);
  i = skip_ws(s, i);
  return s[i] == ',' ? i + 1 : i;
}

/* ---- the template's context ----------------------------------------------------------- */

static void put_json_string(FILE *f, const char *v) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void put_span(FILE *f, const char *s, span v) { fwrite(s + v.a, 1, v.b - v.a, f); }

static int non_null(const jd_value *v) { return v && v->type != JD_NULL; }

/* One message as transformers passes it: with a reasoning text (reasoning_content, thinking or
 * reasoning, the first that is not null) the message becomes
 * {"thinking": R, **message, "reasoning_content": R}. */
static void put_message(FILE *f, const char *s, span msg, const jd_value *m) {
  static const char *const FIELDS[] = {"reasoning_content", "thinking", "reasoning"};
  const jd_value *reason = NULL;
  for (size_t k = 0; k < 3 && !reason; k++)
    if (non_null(jd_get(m, FIELDS[k]))) reason = jd_get(m, FIELDS[k]);
  if (!reason) {
    put_span(f, s, msg);
    return;
  }
  /* the value spans of the reasoning member and of "thinking", found in the same walk */
  span key, val, r = {0, 0}, thinking = {0, 0};
  int has_rc = 0;
  size_t i = msg.a + 1;
  for (const jd_value *e = m->child; e; e = e->next) {
    i = next_item(s, i, 1, &key, &val);
    if (e == reason) r = val;
    if (!strcmp(e->key, "thinking") && !thinking.b) thinking = val;
  }
  fputs("{\"thinking\":", f);
  put_span(f, s, thinking.b ? thinking : r);
  i = msg.a + 1;
  for (const jd_value *e = m->child; e; e = e->next) {
    i = next_item(s, i, 1, &key, &val);
    if (!strcmp(e->key, "thinking")) continue;
    fputc(',', f);
    put_span(f, s, key);
    fputc(':', f);
    if (!strcmp(e->key, "reasoning_content")) {
      has_rc = 1;
      val = r;
    }
    put_span(f, s, val);
  }
  if (!has_rc) {
    fputs(",\"reasoning_content\":", f);
    put_span(f, s, r);
  }
  fputc('}', f);
}

/* The context object as JSON text (malloc'd). */
static char *build_context(const mx_chat_templates *t, const mx_chat_request *r,
                           const jd_value *msgs, int have_tools, mlxrt_error *err) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (!f) {
    mx_fail(err, "chat template: out of memory");
    return NULL;
  }
  const char *s = r->messages_json;
  fputs("{\"messages\":[", f);
  size_t i = skip_ws(s, 0) + 1;
  span key, val;
  for (const jd_value *m = msgs->child; m; m = m->next) {
    i = next_item(s, i, 0, &key, &val);
    if (m != msgs->child) fputc(',', f);
    put_message(f, s, val, m);
  }
  fprintf(f, "],\"tools\":%s,\"documents\":null,\"add_generation_prompt\":%s,\"enable_thinking\":%s",
          have_tools ? r->tools_json : "null", r->add_generation_prompt ? "true" : "false",
          r->enable_thinking ? "true" : "false");
  for (size_t k = 0; t && k < t->n_vars; k++) {
    fputc(',', f);
    put_json_string(f, t->vars[k].name);
    fputc(':', f);
    put_json_string(f, t->vars[k].value);
  }
  fputc('}', f);
  int bad = ferror(f);
  if (fclose(f) || bad) {
    free(out);
    mx_fail(err, "chat template: out of memory");
    return NULL;
  }
  return out;
}

/* ---- the built-in renderer: plain role/content messages only ----------------------------- */

static const char NEEDS_TEMPLATE[] =
    "the model has no chat template, and the built-in renderer takes plain role/content messages "
    "only: give a template (chat_template)";

static char *render_builtin(const mx_chat_options *builtin, const jd_value *msgs, int have_tools,
                            mlxrt_error *err) {
  if (!builtin) {
    mx_fail(err, "chat template: no template to render with");
    return NULL;
  }
  if (have_tools) {
    mx_fail(err, "tools: %s", NEEDS_TEMPLATE);
    return NULL;
  }
  size_t n = 0;
  for (const jd_value *m = msgs->child; m; m = m->next) n++;
  mx_chat_msg *list = mx_calloc(n ? n : 1, sizeof *list, err);
  if (!list) return NULL;
  size_t i = 0;
  char *text = NULL;
  for (const jd_value *m = msgs->child; m; m = m->next, i++) {
    const jd_value *role = jd_get(m, "role"), *content = jd_get(m, "content");
    const jd_value *calls = jd_get(m, "tool_calls");
    if (!strcmp(role->str, "tool") || (non_null(calls) && !(jd_is(calls, JD_ARRAY) && !calls->child))) {
      mx_fail(err, "messages[%zu]: a tool %s: %s", i, strcmp(role->str, "tool") ? "call" : "message",
              NEEDS_TEMPLATE);
      goto out;
    }
    /* a list of one text part renders as its text in the Gemma templates */
    if (jd_is(content, JD_ARRAY) && content->child && !content->child->next &&
        jd_is(jd_get(content->child, "type"), JD_STRING) &&
        !strcmp(jd_get(content->child, "type")->str, "text"))
      content = jd_get(content->child, "text");
    if (!jd_is(content, JD_STRING)) {
      mx_fail(err, "messages[%zu]: \"content\" must be a string or one text part: %s", i,
              NEEDS_TEMPLATE);
      goto out;
    }
    if (strlen(content->str) != content->str_len || strlen(role->str) != role->str_len) {
      mx_fail(err, "messages[%zu]: a NUL character in the text", i);
      goto out;
    }
    list[i] = (mx_chat_msg){role->str, content->str};
  }
  text = mx_chat_render(list, n, builtin, err);
out:
  free(list);
  return text;
}

/* ---- entry points ------------------------------------------------------------------------ */

static jd_doc *parse_json(const char *what, const char *text, mlxrt_error *err) {
  size_t off = 0;
  const char *why = NULL;
  jd_doc *d = jd_parse(text, strlen(text), &off, &why);
  if (!d) mx_fail(err, "%s: invalid JSON at byte %zu: %s", what, off, why ? why : "?");
  return d;
}

static char *render_jinja(const mx_chat_templates *t, const mx_jinja *tpl, const mx_chat_request *r,
                          const jd_value *msgs, int have_tools, size_t *len, mlxrt_error *err) {
  char *ctx = build_context(t, r, msgs, have_tools, err);
  if (!ctx) return NULL;
  mx_jinja_options o = {r->now};
  size_t n = 0;
  char *out = mx_jinja_render(tpl, ctx, &o, &n, err);
  free(ctx);
  const char *nul = out ? memchr(out, 0, n) : NULL;
  if (nul) {
    mx_fail(err, "the chat template rendered a NUL character at byte %zu", (size_t)(nul - out));
    free(out);
    return NULL;
  }
  if (out && len) *len = n;
  return out;
}

char *mx_chat_render_request(const mx_chat_templates *t, const mx_chat_options *builtin,
                             const mx_chat_request *r, size_t *len, mlxrt_error *err) {
  if (!r || !r->messages_json) {
    mx_fail(err, "messages: none given");
    return NULL;
  }
  char *out = NULL;
  jd_doc *tools = NULL, *doc = parse_json("messages", r->messages_json, err);
  if (!doc) return NULL;
  const jd_value *msgs = jd_root(doc);
  if (!jd_is(msgs, JD_ARRAY)) {
    mx_fail(err, "messages: expected a JSON array of messages");
    goto out;
  }
  size_t i = 0;
  for (const jd_value *m = msgs->child; m; m = m->next, i++)
    if (!jd_is(jd_get(m, "role"), JD_STRING)) {
      mx_fail(err, "messages[%zu]: expected an object with a string \"role\"", i);
      goto out;
    }
  int have_tools = 0;
  if (r->tools_json) {
    if (!(tools = parse_json("tools", r->tools_json, err))) goto out;
    const jd_value *tv = jd_root(tools);
    if (!jd_is(tv, JD_ARRAY) && !jd_is(tv, JD_NULL)) {
      mx_fail(err, "tools: expected a JSON array (or null)");
      goto out;
    }
    have_tools = jd_is(tv, JD_ARRAY);
  }
  if (r->template_text) {
    mx_jinja *tpl = mx_jinja_parse(r->template_text, strlen(r->template_text), "chat_template", err);
    if (tpl) out = render_jinja(t, tpl, r, msgs, have_tools, len, err);
    mx_jinja_free(tpl);
  } else if (t && t->main) {
    out = render_jinja(t, t->main, r, msgs, have_tools, len, err);
  } else {
    /* an empty tools list is no tools */
    mx_chat_options b = builtin ? *builtin : (mx_chat_options){0};
    b.add_generation_prompt = r->add_generation_prompt;
    b.enable_thinking = r->enable_thinking;
    out = render_builtin(builtin ? &b : NULL, msgs, have_tools && jd_root(tools)->child, err);
    if (out && len) *len = strlen(out);
  }
out:
  jd_free(tools);
  jd_free(doc);
  return out;
}

mx_chat_options mx_chat_builtin_options(const mx_model *m) {
  const mx_config *c = &m->cfg;
  int g4 = c->family == MX_GEMMA4;
  mx_chat_options o = {g4 ? MX_CHAT_GEMMA4 : MX_CHAT_GEMMA3, 0, 0,
                       g4 && c->hidden_size_per_layer_input == 0};
  return o;
}

char *mx_render_chat_json(const mx_model *m, const char *messages_json, const char *tools_json,
                          int add_generation_prompt, int enable_thinking,
                          const char *template_text, mlxrt_error *err) {
  mx_chat_options b = mx_chat_builtin_options(m);
  mx_chat_request r = {messages_json, tools_json, add_generation_prompt, enable_thinking,
                       template_text, 0};
  return mx_chat_render_request(&m->tmpl, &b, &r, NULL, err);
}

char *mx_render_chat_msgs(const mx_model *m, const mx_chat_msg *msgs, size_t n,
                          int add_generation_prompt, int enable_thinking,
                          const char *template_text, mlxrt_error *err) {
  cJSON *arr = cJSON_CreateArray();
  int ok = arr != NULL;
  for (size_t i = 0; ok && i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    const char *role = !strcmp(msgs[i].role, "model") ? "assistant" : msgs[i].role;
    if (!o || !cJSON_AddItemToArray(arr, o)) {
      cJSON_Delete(o);
      ok = 0;
    } else { /* o belongs to arr from here on */
      ok = cJSON_AddStringToObject(o, "role", role) &&
           cJSON_AddStringToObject(o, "content", msgs[i].content);
    }
  }
  char *json = ok ? cJSON_PrintUnformatted(arr) : NULL;
  cJSON_Delete(arr);
  if (!json) {
    mx_fail(err, "chat: out of memory for the conversation");
    return NULL;
  }
  char *text = mx_render_chat_json(m, json, NULL, add_generation_prompt, enable_thinking,
                                   template_text, err);
  cJSON_free(json);
  return text;
}

const char *mx_chat_template_origin(const mx_model *m) { return m->tmpl.origin; }
