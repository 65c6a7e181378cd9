/* The model folder's chat template (chat_template_load.c) and rendering a JSON conversation with
 * it (chat_render.c): which file wins, tokenizer_config.json's list of named templates and its
 * token strings, broken templates failing the load by file name, the template's context (as
 * transformers builds it), the override, and the real Gemma 3 template rendered through the
 * Jinja path against transformers' renderings (tests/fixtures/chat/gemma3.json). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "mlx/chat_render.h"
#include "test_util.h"

static char g_dir[] = "/tmp/mlxrt-tpl-XXXXXX";

static void put(const char *name, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  if (!text) {
    unlink(p);
    return;
  }
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static int ends_with(const char *s, const char *tail) {
  size_t n = s ? strlen(s) : 0, k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

/* Renders messages with the templates (override text when given) at a fixed instant. */
static char *render(const mx_chat_templates *t, const char *tpl, const char *msgs, const char *tools,
                    mlxrt_error *err) {
  mx_chat_request r = {msgs, tools, 1, 0, tpl, 1753531200};
  return mx_chat_render_request(t, NULL, &r, NULL, err);
}

static void expect(const mx_chat_templates *t, const char *tpl, const char *msgs, const char *want) {
  mlxrt_error err = {{0}};
  char *got = render(t, tpl, msgs, NULL, &err);
  CHECKF(got && !strcmp(got, want), "%s: got \"%s\" (%s), want \"%s\"", tpl, got ? got : "NULL",
         got ? "" : err.msg, want);
  free(got);
}

static void expect_error(const mx_chat_templates *t, const char *tpl, const char *msgs,
                         const char *tools, const char *fragment) {
  mlxrt_error err = {{0}};
  char *got = render(t, tpl, msgs, tools, &err);
  CHECKF(got == NULL, "%s: rendered \"%s\", expected an error", tpl ? tpl : msgs, got);
  if (!got) CHECK_MSG(err, fragment);
  free(got);
}

static void test_load(void) {
  CHECK(mkdtemp(g_dir) != NULL);
  mx_chat_templates t;
  mlxrt_error err = {{0}};
  const char *U = "[{\"role\":\"user\",\"content\":\"hi\"}]";

  /* nothing: the built-in renderer */
  CHECK(mx_chat_templates_load(g_dir, &t, &err) == 0);
  CHECK(t.main == NULL && t.origin == NULL && t.n_vars == 0);
  mx_chat_templates_free(&t);

  /* tokenizer_config.json: its template and its token strings (string or {"content"}) */
  put("tokenizer_config.json",
      "{\"bos_token\":{\"content\":\"<B>\",\"special\":true},\"eos_token\":\"<E>\",\"pad_token\":null,"
      "\"unk_token\":3,\"mask_token\":{\"x\":1},\"chat_template\":\"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\"}");
  CHECKF(mx_chat_templates_load(g_dir, &t, &err) == 0, "%s", err.msg);
  CHECK(t.main != NULL && ends_with(t.origin, "/tokenizer_config.json"));
  CHECK(t.n_vars == 2 && !strcmp(mx_chat_templates_var(&t, "bos_token"), "<B>") &&
        !strcmp(mx_chat_templates_var(&t, "eos_token"), "<E>"));
  expect(&t, NULL, U, "<B>hi<E>");
  mx_chat_templates_free(&t);

  /* chat_template.jinja wins (tokenizer_config.json's template is then not even parsed) */
  put("tokenizer_config.json", "{\"bos_token\":\"<b>\",\"chat_template\":\"{% if %}\"}");
  put("chat_template.jinja", "[{{ bos_token }}{{ messages | length }}]");
  CHECKF(mx_chat_templates_load(g_dir, &t, &err) == 0, "%s", err.msg);
  CHECK(ends_with(t.origin, "/chat_template.jinja"));
  expect(&t, NULL, U, "[<b>1]");
  /* the override replaces it, with the same variables */
  expect(&t, "{{ bos_token }}override", U, "<b>override");
  expect_error(&t, "{% for m in messages %}", U, NULL, "chat_template:");
  mx_chat_templates_free(&t);

  /* a broken chat_template.jinja fails the load naming the file */
  put("chat_template.jinja", "{{ messages[0].content }\n");
  CHECK(mx_chat_templates_load(g_dir, &t, &err) == -1);
  CHECK_MSG(err, "/chat_template.jinja");
  put("chat_template.jinja", NULL);

  /* a list of named templates: "default" is the template, the others are kept by name */
  put("tokenizer_config.json",
      "{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"tools\"},"
      "{\"name\":\"default\",\"template\":\"default {{ messages[0].role }}\"}]}");
  CHECKF(mx_chat_templates_load(g_dir, &t, &err) == 0, "%s", err.msg);
  CHECK(t.main != NULL && mx_chat_templates_find(&t, "default") == t.main);
  CHECK(t.n_named == 1 && mx_chat_templates_find(&t, "tool_use") != NULL &&
        mx_chat_templates_find(&t, "rag") == NULL);
  expect(&t, NULL, U, "default user");
  mx_chat_templates_free(&t);

  /* a list without "default": no template (the built-in renderer), the others by name */
  put("tokenizer_config.json", "{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"x\"}]}");
  CHECKF(mx_chat_templates_load(g_dir, &t, &err) == 0, "%s", err.msg);
  CHECK(t.main == NULL && t.origin == NULL && mx_chat_templates_find(&t, "tool_use") != NULL);
  mx_chat_templates_free(&t);

  static const struct {
    const char *config, *fragment;
  } BAD[] = {
      {"{\"chat_template\":[{\"name\":\"default\",\"template\":\"a\"},{\"name\":\"default\",\"template\":\"b\"}]}",
       "a second template named \"default\""},
      {"{\"chat_template\":[{\"name\":\"x\",\"template\":\"{% endfor %}\"}]}", "(chat_template \"x\")"},
      {"{\"chat_template\":[\"{{ x }}\"]}", "chat_template[0] must be an object"},
      {"{\"chat_template\":{\"default\":\"x\"}}", "must be a string or a list"},
      {"{\"chat_template\":\"{{ x \"}", "tokenizer_config.json (chat_template)"},
      {"{\"chat_template\":", "tokenizer_config.json: invalid JSON at byte"},
      {"[]", "tokenizer_config.json: expected a JSON object"},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    put("tokenizer_config.json", BAD[i].config);
    CHECKF(mx_chat_templates_load(g_dir, &t, &err) == -1, "%s loaded", BAD[i].config);
    CHECK_MSG(err, BAD[i].fragment);
  }
  put("tokenizer_config.json", NULL);
  rmdir(g_dir);
}

/* The context the template sees, as transformers' apply_chat_template builds it. */
static void test_context(void) {
  mx_chat_templates t = {0};
  mlxrt_error err = {{0}};
  CHECK(mx_chat_templates_set_var(&t, "bos_token", "<bos>", &err) == 0);
  const char *U = "[{\"role\":\"user\",\"content\":\"hi\"}]";
  expect(&t, "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
             "{{ enable_thinking }}|{{ bos_token }}|{{ eos_token is defined }}",
         U, "True|True|True|False|<bos>|False");
  /* the caller's JSON reaches the template as written: 2.0 stays a float */
  expect(&t, "{{ messages[0].n }} {{ messages[0].k }}", "[{\"role\":\"user\",\"n\":2.0,\"k\":3}]",
         "2.0 3");
  /* a reasoning text is copied under "thinking" (first) and "reasoning_content" (last) */
  expect(&t, "{% for k in messages[0] %}{{ k }},{% endfor %}{{ messages[0].thinking }}",
         "[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning\":\"R\"}]",
         "thinking,role,content,reasoning,reasoning_content,R");
  expect(&t, "{{ strftime_now('%Y-%m-%d %H:%M') }}", U, "2025-07-26 12:00");
  expect_error(&t, "{{ raise_exception('roles must alternate') }}", U, NULL, "roles must alternate");
  expect_error(&t, "{{ messages[0].content }}", "[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]",
               NULL, "NUL");
  expect_error(&t, "x", "[{\"role\":\"user\"", NULL, "messages: invalid JSON at byte");
  expect_error(&t, "x", "{\"role\":\"user\"}", NULL, "messages: expected a JSON array");
  expect_error(&t, "x", "[{\"content\":\"x\"}]", NULL, "messages[0]: expected an object");
  expect_error(&t, "x", U, "{\"type\":\"function\"}", "tools: expected a JSON array");
  expect_error(&t, NULL, U, NULL, "no template");
  mx_chat_templates_free(&t);
}

/* The real Gemma 3 template through the Jinja path, against transformers' renderings. */
static void test_gemma3_golden(void) {
  mlxrt_error err = {{0}};
  size_t len;
  char *text = mx_read_file("tests/fixtures/chat/gemma3.json", &len, &err);
  CHECKF(text != NULL, "%s", err.msg);
  cJSON *doc = text ? cJSON_Parse(text) : NULL;
  free(text);
  CHECK(doc != NULL);
  if (!doc) return;
  mx_chat_templates t = {0};
  CHECK(mx_chat_templates_set_var(&t, "bos_token", "<bos>", &err) == 0);
  const char *tpl = cJSON_GetObjectItem(doc, "template")->valuestring;
  const cJSON *c;
  int n = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
    char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
    const cJSON *want = cJSON_GetObjectItem(c, "expected");
    mx_chat_request r = {msgs, NULL, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                         0, tpl, 0};
    char *got = mx_chat_render_request(&t, NULL, &r, NULL, &err);
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    if (want) CHECKF(got && !strcmp(got, want->valuestring), "%s: %s", name, got ? "differs" : err.msg);
    else CHECKF(got == NULL, "%s: rendered, transformers refuses it", name);
    free(got);
    cJSON_free(msgs);
    n++;
  }
  CHECK(n >= 15);
  mx_chat_templates_free(&t);
  cJSON_Delete(doc);
}

/* Without a template: the built-in renderer, plain role/content messages only. */
static void test_builtin(void) {
  mx_chat_options b = {MX_CHAT_GEMMA4, 0, 0, 0};
  mlxrt_error err = {{0}};
  static const struct {
    const char *msgs, *tools, *fragment;
  } REFUSED[] = {
      {"[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"type\":\"function\"}]", "tools: the model has no chat template"},
      {"[{\"role\":\"tool\",\"content\":\"x\"}]", NULL, "messages[0]: a tool message"},
      {"[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{}]}]", NULL,
       "messages[1]: a tool call"},
      {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image\"}]}]", NULL,
       "one text part"},
      {"[{\"role\":\"user\",\"content\":null}]", NULL, "\"content\" must be a string"},
  };
  for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++) {
    mx_chat_request r = {REFUSED[i].msgs, REFUSED[i].tools, 1, 0, NULL, 0};
    char *got = mx_chat_render_request(NULL, &b, &r, NULL, &err);
    CHECKF(got == NULL, "%s rendered", REFUSED[i].msgs);
    if (!got) CHECK_MSG(err, REFUSED[i].fragment);
    free(got);
  }
  /* one text part, an empty tools list and an empty tool_calls list are plain */
  mx_chat_request r = {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\" hi \"}],"
                       "\"tool_calls\":[]}]", "[]", 1, 1, NULL, 0};
  char *got = mx_chat_render_request(NULL, &b, &r, NULL, &err);
  CHECKF(got && !strcmp(got, "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n"),
         "%s", got ? got : err.msg);
  free(got);
}

int main(void) {
  setenv("TZ", "UTC", 1); /* strftime_now shows the fixed instant as UTC */
  tzset();
  test_load();
  test_context();
  test_gemma3_golden();
  test_builtin();
  TEST_END();
}
