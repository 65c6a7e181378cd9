/* The request parser of mlxrt serve (tools/serve/serve_request.c) and its text filters
 * (serve_text.c): accepted shapes, refused ones with their OpenAI error, stop strings held back
 * across pieces, tool-call segments cut out whole. */
#include "../tools/serve/serve_request.h"
#include "../tools/serve/serve_text.h"

#include <cjson/cJSON.h>

#include "test_util.h"

static serve_limits LIM = {16, 4};

static int parse(serve_kind k, const char *body, serve_request *r, serve_error *e) {
  memset(e, 0, sizeof *e);
  return serve_request_parse(k, body, strlen(body), &LIM, r, e);
}

/* The body must be refused with status 400 and param (NULL: none) and a message with frag. */
static void refused(serve_kind k, const char *body, const char *param, const char *frag) {
  serve_request r;
  serve_error e;
  int rc = parse(k, body, &r, &e);
  CHECKF(rc == -1, "accepted: %s", body);
  if (rc != -1) {
    serve_request_free(&r);
    return;
  }
  CHECKF(e.status == 400, "%s: status %d", body, e.status);
  CHECKF(!strcmp(e.param, param ? param : ""), "%s: param '%s', wanted '%s'", body, e.param, param ? param : "");
  CHECKF(strstr(e.message, frag) != NULL, "%s: message '%s' lacks '%s'", body, e.message, frag);
  CHECKF(strchr(e.message, '\n') == NULL, "%s: message has a newline", body);
}

static void test_chat_ok(void) {
  serve_request r;
  serve_error e;
  const char *body =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
      "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
      "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}],"
      "\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,\"seed\":-3,"
      "\"stop\":[\"a\",\"bb\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
      "\"logprobs\":true,\"top_logprobs\":3,\"n\":1,\"presence_penalty\":0,\"user\":\"u\","
      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
      "\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"json_object\"},\"ignore_eos\":true}";
  CHECK(parse(SERVE_CHAT, body, &r, &e) == 0);
  CHECK(r.model && !strcmp(r.model, "m"));
  CHECK(r.n_messages == 4 && r.max_tokens == 7);
  CHECK(fabs(r.temperature - 0.5) < 1e-9 && fabs(r.top_p - 0.9) < 1e-9 && r.top_k == 0);
  CHECK(r.seed_set && r.seed == (uint64_t)-3);
  CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "bb"));
  CHECK(r.stream && r.include_usage && r.logprobs && r.top_logprobs == 3 && r.json_object && r.ignore_eos);
  CHECK(r.tools_json && strstr(r.tools_json, "\"name\":\"f\""));
  cJSON *m = cJSON_Parse(r.messages_json);
  CHECK(cJSON_GetArraySize(m) == 4);
  /* developer becomes system; arguments become an object; the tool message gets its name */
  CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 0), "role")->valuestring, "system"));
  cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 2), "tool_calls"), 0);
  cJSON *args = cJSON_GetObjectItem(cJSON_GetObjectItem(call, "function"), "arguments");
  CHECK(cJSON_IsObject(args) && cJSON_GetObjectItem(args, "x")->valueint == 1);
  cJSON *tool = cJSON_GetArrayItem(m, 3);
  CHECK(!strcmp(cJSON_GetObjectItem(tool, "name")->valuestring, "f"));
  CHECK(!strcmp(cJSON_GetObjectItem(tool, "tool_call_id")->valuestring, "c1"));
  CHECK(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 1), "content")));
  cJSON_Delete(m);
  serve_request_free(&r);

  /* defaults; nulls count as absent; tool_choice none drops the tools */
  CHECK(parse(SERVE_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":null,\"stop\":null,"
              "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\"}",
              &r, &e) == 0);
  CHECK(!r.model && r.max_tokens == -1 && r.temperature < 0 && r.top_k == -1 && !r.seed_set && !r.n_stop);
  CHECK(!r.stream && !r.logprobs && !r.tools_json);
  serve_request_free(&r);
}

static void test_completion_ok(void) {
  serve_request r;
  serve_error e;
  CHECK(parse(SERVE_COMPLETION, "{\"prompt\":[\"once\"],\"max_tokens\":3,\"logprobs\":2,\"stop\":\"\\n\"}", &r, &e) == 0);
  CHECK(r.prompt && !strcmp(r.prompt, "once") && r.prompt_len == 4);
  CHECK(r.logprobs == 1 && r.top_logprobs == 2 && r.n_stop == 1 && !strcmp(r.stop[0], "\n"));
  serve_request_free(&r);
  CHECK(parse(SERVE_COMPLETION, " {\"prompt\":\"\\u00e9\\ud83d\\ude00\",\"logprobs\":0} \n", &r, &e) == 0);
  CHECK(!strcmp(r.prompt, "\xc3\xa9\xf0\x9f\x98\x80") && r.logprobs == 1 && r.top_logprobs == 0);
  serve_request_free(&r);
}

static void test_refused(void) {
  const char *msg = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
  char b[512];
#define CHAT(extra) (snprintf(b, sizeof b, "{%s,%s}", msg, extra), b)
  refused(SERVE_CHAT, "", NULL, "not valid JSON");
  refused(SERVE_CHAT, "{\"messages\":[", NULL, "not valid JSON");
  refused(SERVE_CHAT, "[1,2]", NULL, "must be a JSON object");
  refused(SERVE_CHAT, "{} {}", NULL, "after its JSON value");
  refused(SERVE_CHAT, "{\"messages\":\"hi\xff\"}", NULL, "not valid UTF-8");
  refused(SERVE_CHAT, "{\"messages\":\"\xc0\xaf\"}", NULL, "not valid UTF-8");
  refused(SERVE_CHAT, "{\"messages\":\"\\ud800\"}", NULL, "not valid JSON");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", NULL, "NUL");
  refused(SERVE_CHAT, "{}", "messages", "'messages' is required");
  refused(SERVE_CHAT, "{\"messages\":[]}", "messages", "must not be empty");
  refused(SERVE_CHAT, "{\"messages\":{}}", "messages", "must be an array");
  refused(SERVE_CHAT, "{\"messages\":[1]}", "messages[0]", "string 'role'");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0]", "not 'wizard'");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "is required");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", "got a number");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
          "messages[0].content", "text only");
  refused(SERVE_CHAT,
          "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
          "messages[0].tool_calls", "JSON text of an object");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}",
          "messages[0].tool_calls", "only assistant");
  refused(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":3}", "model", "must be a string");
  refused(SERVE_CHAT, CHAT("\"max_tokens\":-1"), "max_tokens", "1..2147483647");
  refused(SERVE_CHAT, CHAT("\"max_tokens\":0"), "max_tokens", "1..2147483647");
  refused(SERVE_CHAT, CHAT("\"max_tokens\":1e12"), "max_tokens", "1..2147483647");
  refused(SERVE_CHAT, CHAT("\"max_tokens\":2.5"), "max_tokens", "integer");
  refused(SERVE_CHAT, CHAT("\"max_tokens\":\"5\""), "max_tokens", "got a string");
  refused(SERVE_CHAT, CHAT("\"temperature\":3"), "temperature", "0..2");
  refused(SERVE_CHAT, CHAT("\"top_p\":0"), "top_p", "above 0");
  refused(SERVE_CHAT, CHAT("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), "stop", "at most 4");
  refused(SERVE_CHAT, CHAT("\"stop\":[\"\"]"), "stop", "must not be empty");
  refused(SERVE_CHAT, CHAT("\"stop\":7"), "stop", "string or a list");
  refused(SERVE_CHAT, CHAT("\"n\":2"), "n", "must be 1");
  refused(SERVE_CHAT, CHAT("\"presence_penalty\":0.5"), "presence_penalty", "not supported");
  refused(SERVE_CHAT, CHAT("\"frequency_penalty\":1"), "frequency_penalty", "not supported");
  refused(SERVE_CHAT, CHAT("\"logit_bias\":{\"5\":1}"), "logit_bias", "not supported");
  refused(SERVE_CHAT, CHAT("\"top_logprobs\":2"), "top_logprobs", "needs 'logprobs'");
  refused(SERVE_CHAT, CHAT("\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs", "0..20");
  refused(SERVE_CHAT, CHAT("\"stream\":\"yes\""), "stream", "must be a boolean");
  refused(SERVE_CHAT, CHAT("\"tool_choice\":\"required\""), "tool_choice", "cannot force");
  refused(SERVE_CHAT, CHAT("\"tools\":[{\"type\":\"function\"}]"), "tools", "tools[0]");
  refused(SERVE_CHAT, CHAT("\"response_format\":{\"type\":\"json_schema\"}"), "response_format", "not supported");
  refused(SERVE_CHAT, CHAT("\"prompt\":\"x\""), "prompt", "belongs to /v1/completions");
  refused(SERVE_COMPLETION, "{}", "prompt", "'prompt' is required");
  refused(SERVE_COMPLETION, "{\"prompt\":[1,2]}", "prompt", "must be a string");
  refused(SERVE_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", "logprobs", "0..5");
  refused(SERVE_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo", "not supported");
  refused(SERVE_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", "best_of", "must be 1");
  /* limits: 17 messages against 16 */
  char many[2048] = "{\"messages\":[";
  for (int i = 0; i < 17; i++) strcat(many, i ? ",{\"role\":\"user\",\"content\":\"x\"}" : "{\"role\":\"user\",\"content\":\"x\"}");
  strcat(many, "]}");
  refused(SERVE_CHAT, many, "messages", "at most 16");
  /* deep nesting is refused by the JSON reader, not by the stack */
  char deep[6000];
  size_t n = 0;
  n += (size_t)snprintf(deep, sizeof deep, "{\"messages\":");
  for (int i = 0; i < 2500; i++) deep[n++] = '[';
  deep[n] = 0;
  refused(SERVE_CHAT, deep, NULL, "not valid JSON");
#undef CHAT
}

/* ---- text filters ---- */
typedef struct sink {
  char text[512];
  char calls[512];
} sink;

static void collect(void *user, int kind, const char *s, size_t n) {
  sink *k = user;
  char *dst = kind ? k->calls : k->text;
  strncat(dst, s, n);
  if (kind) strcat(dst, "|");
}

static void test_stop_filter(void) {
  char *stops[] = {"END", "\n\n"};
  serve_stop_filter f;
  sink k = {{0}, {0}};
  serve_stop_init(&f, stops, 2);
  CHECK(serve_stop_push(&f, "Hello E", 7, collect, &k) == 0);
  CHECK(!strcmp(k.text, "Hello ")); /* "E" may begin END: held back */
  CHECK(serve_stop_push(&f, "N", 1, collect, &k) == 0 && !strcmp(k.text, "Hello "));
  CHECK(serve_stop_push(&f, "Ough", 4, collect, &k) == 0);
  CHECK(!strcmp(k.text, "Hello ENOugh"));
  CHECK(serve_stop_push(&f, " then\n", 6, collect, &k) == 0 && !strcmp(k.text, "Hello ENOugh then"));
  CHECK(serve_stop_push(&f, "\nmore", 5, collect, &k) == 1);
  CHECK(!strcmp(k.text, "Hello ENOugh then"));
  CHECK(serve_stop_push(&f, "x", 1, collect, &k) == 1); /* stopped: nothing more */
  serve_stop_finish(&f, collect, &k);
  CHECK(!strcmp(k.text, "Hello ENOugh then"));
  serve_stop_free(&f);

  /* no stop string: pieces pass straight; an unfinished prefix comes out at the end */
  memset(&k, 0, sizeof k);
  serve_stop_init(&f, stops, 2);
  CHECK(serve_stop_push(&f, "abcEN", 5, collect, &k) == 0 && !strcmp(k.text, "abc"));
  serve_stop_finish(&f, collect, &k);
  CHECK(!strcmp(k.text, "abcEN"));
  serve_stop_free(&f);
  /* a stop string inside one piece, earliest of two */
  memset(&k, 0, sizeof k);
  serve_stop_init(&f, stops, 2);
  CHECK(serve_stop_push(&f, "a\n\nbENDc", 8, collect, &k) == 1 && !strcmp(k.text, "a"));
  serve_stop_free(&f);
  CHECK(serve_partial_suffix("xxEN", 4, "END", 3) == 2 && serve_partial_suffix("END", 3, "END", 3) == 0);
}

static void test_tool_splitter(void) {
  serve_tool_splitter t;
  sink k = {{0}, {0}};
  serve_tool_init(&t, 1);
  const char *pieces[] = {"Sure. <|tool", "_call>call:f{a:1}<tool_", "call|>", " and <|tool_call>call:g{}<tool_call|>ok", "<|to"};
  for (int i = 0; i < 5; i++) CHECK(serve_tool_push(&t, pieces[i], strlen(pieces[i]), collect, &k) == 0);
  CHECK(!strcmp(k.calls, "<|tool_call>call:f{a:1}<tool_call|>|<|tool_call>call:g{}<tool_call|>|"));
  CHECK(!strcmp(k.text, "Sure.  and ok"));
  serve_tool_finish(&t, collect, &k); /* an unfinished marker is text after all */
  CHECK(!strcmp(k.text, "Sure.  and ok<|to"));
  serve_tool_free(&t);
  memset(&k, 0, sizeof k);
  serve_tool_init(&t, 0);
  CHECK(serve_tool_push(&t, "<|tool_call>x", 13, collect, &k) == 0 && !strcmp(k.text, "<|tool_call>x"));
  serve_tool_free(&t);
}

static void test_error_text(void) {
  serve_error e;
  /* a quote cut in the middle of a character: the message stays UTF-8 */
  serve_fail(&e, 400, "invalid_request_error", NULL, "model", "model '%.3s'", "ab\xc3\xa9\xc3\xa9");
  CHECK(!strcmp(e.message, "model 'ab?'"));
  CHECK(serve_utf8_valid(e.message, strlen(e.message)));
  serve_fail(&e, 400, "invalid_request_error", NULL, NULL, "a\nb");
  CHECK(!strcmp(e.message, "a b") && e.param[0] == 0);
}

static void test_utf8(void) {
  CHECK(serve_utf8_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
  CHECK(!serve_utf8_valid("\xed\xa0\x80", 3));     /* a surrogate */
  CHECK(!serve_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
  CHECK(!serve_utf8_valid("\xe2\x82", 2));         /* cut short */
  CHECK(!serve_utf8_valid("\x80", 1));
}

int main(void) {
  test_chat_ok();
  test_completion_ok();
  test_refused();
  test_stop_filter();
  test_tool_splitter();
  test_utf8();
  test_error_text();
  TEST_END();
}
