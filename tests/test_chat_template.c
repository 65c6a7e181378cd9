/* Chat templates: Gemma 3 byte for byte against the real template rendered by transformers/jinja2
 * (tests/fixtures/chat/gemma3.json, scripts/make_chat_fixtures.py); Gemma 4 against hand-written
 * expectations that follow gemma-architecture.md §14; the thought-channel splitter, whole and
 * streamed in every split of the input. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/chat_template.h"
#include "test_util.h"

#define MAX_MSGS 32

/* Prints the first differing byte, to make a mismatch readable. */
static void show_diff(const char *name, const char *want, const char *got) {
  size_t i = 0;
  while (want[i] && want[i] == got[i]) i++;
  fprintf(stderr, "  %s: first difference at byte %zu\n  want: \"%.60s\"\n  got:  \"%.60s\"\n", name,
          i, want + i, got + i);
}

static void test_gemma3_fixtures(void) {
  mlxrt_error err = {{0}};
  size_t len;
  char *text = mx_read_file("tests/fixtures/chat/gemma3.json", &len, &err);
  CHECKF(text != NULL, "%s", err.msg);
  if (!text) return;
  cJSON *doc = cJSON_Parse(text);
  free(text);
  CHECK(doc != NULL);
  if (!doc) return;

  /* Whitespace table against Python's own, over every code point. */
  const cJSON *ws = cJSON_GetObjectItem(doc, "python_strip_whitespace");
  CHECK(cJSON_IsArray(ws) && cJSON_GetArraySize(ws) > 20);
  static unsigned char is_ws[0x110000];
  const cJSON *it;
  cJSON_ArrayForEach(it, ws) is_ws[(uint32_t)it->valuedouble] = 1;
  int table_mismatch = 0;
  for (uint32_t cp = 0; cp < 0x110000; cp++)
    if (mx_chat_is_strip_space(cp) != is_ws[cp]) table_mismatch++;
  CHECKF(table_mismatch == 0, "%d code points disagree with Python's str.strip()", table_mismatch);

  const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
  int n_render = 0, n_error = 0;
  cJSON_ArrayForEach(it, cases) {
    const char *name = cJSON_GetObjectItem(it, "name")->valuestring;
    const cJSON *msgs = cJSON_GetObjectItem(it, "messages");
    mx_chat_msg m[MAX_MSGS];
    size_t n = 0;
    const cJSON *jm;
    cJSON_ArrayForEach(jm, msgs) {
      if (n == MAX_MSGS) break;
      m[n].role = cJSON_GetObjectItem(jm, "role")->valuestring;
      m[n].content = cJSON_GetObjectItem(jm, "content")->valuestring;
      n++;
    }
    mx_chat_options opt = {.family = MX_CHAT_GEMMA3,
                           .add_generation_prompt =
                               cJSON_IsTrue(cJSON_GetObjectItem(it, "add_generation_prompt"))};
    mlxrt_error e = {{0}};
    char *got = mx_chat_render(m, n, &opt, &e);
    const cJSON *want = cJSON_GetObjectItem(it, "expected");
    if (want) {
      n_render++;
      CHECKF(got != NULL, "%s: %s", name, e.msg);
      if (got && strcmp(got, want->valuestring)) {
        CHECKF(0, "%s: rendering differs from the real template", name);
        show_diff(name, want->valuestring, got);
      } else {
        CHECK(got != NULL);
      }
    } else {
      n_error++;
      CHECKF(got == NULL, "%s: the template refuses this conversation, we rendered it", name);
      CHECKF(e.msg[0] != '\0', "%s: no error message", name);
    }
    free(got);
  }
  CHECKF(n_render >= 10, "only %d renderings in the fixture", n_render);
  CHECK(n_error >= 3);
  cJSON_Delete(doc);
}

/* ---- Gemma 4 ---------------------------------------------------------------------------- */

typedef struct g4_case {
  const char *name;
  mx_chat_msg msgs[8];
  size_t n;
  int gen, thinking, large;
  const char *want;
} g4_case;

static const g4_case G4_CASES[] = {
    {"user only, E-variant", {{"user", "Hello"}}, 1, 1, 0, 0,
     "<bos><|turn>user\nHello<turn|>\n<|turn>model\n"},
    {"user only, large variant: empty thought channel", {{"user", "Hello"}}, 1, 1, 0, 1,
     "<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"},
    {"native system role, trimmed",
     {{"system", "  You are terse.\n"}, {"user", " Hi \n"}},
     2, 1, 0, 0,
     "<bos><|turn>system\nYou are terse.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"},
    {"developer is a system role", {{"developer", "Rules."}, {"user", "Go"}}, 2, 1, 0, 0,
     "<bos><|turn>system\nRules.<turn|>\n<|turn>user\nGo<turn|>\n<|turn>model\n"},
    {"thinking on, no system message: system turn holds only <|think|>",
     {{"user", "Why?"}}, 1, 1, 1, 1,
     "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nWhy?<turn|>\n<|turn>model\n"},
    {"thinking on with a system message, E-variant",
     {{"system", "Be exact."}, {"user", "2+2?"}}, 2, 1, 1, 0,
     "<bos><|turn>system\n<|think|>\nBe exact.<turn|>\n<|turn>user\n2+2?<turn|>\n<|turn>model\n"},
    {"multi-turn, assistant written as model, large, thinking off",
     {{"system", "S"}, {"user", "one"}, {"assistant", "1"}, {"user", "two"}, {"model", "2"},
      {"user", "three"}},
     6, 1, 0, 1,
     "<bos><|turn>system\nS<turn|>\n<|turn>user\none<turn|>\n<|turn>model\n1<turn|>\n"
     "<|turn>user\ntwo<turn|>\n<|turn>model\n2<turn|>\n<|turn>user\nthree<turn|>\n"
     "<|turn>model\n<|channel>thought\n<channel|>"},
    {"history model turns lose their thoughts",
     {{"user", "q"}, {"assistant", "<|channel>thought\nhmm, let me see<channel|> The answer. "},
      {"user", "next"}},
     3, 1, 0, 0,
     "<bos><|turn>user\nq<turn|>\n<|turn>model\nThe answer.<turn|>\n<|turn>user\nnext<turn|>\n"
     "<|turn>model\n"},
    {"ends on a model turn without generation prompt",
     {{"user", "Say hi."}, {"assistant", "Hi."}}, 2, 0, 0, 1,
     "<bos><|turn>user\nSay hi.<turn|>\n<|turn>model\nHi.<turn|>\n"},
    {"no alternation rule: two user turns", {{"user", "a"}, {"user", "b"}}, 2, 0, 0, 0,
     "<bos><|turn>user\na<turn|>\n<|turn>user\nb<turn|>\n"},
    {"empty and unicode-whitespace contents",
     {{"system", ""}, {"user", "\u3000\u00a0"}, {"assistant", ""}, {"user", "\tπ ≈ 3.14 🎉\n"}},
     4, 1, 0, 0,
     "<bos><|turn>system\n<turn|>\n<|turn>user\n<turn|>\n<|turn>model\n<turn|>\n"
     "<|turn>user\nπ ≈ 3.14 🎉<turn|>\n<|turn>model\n"},
};

static void test_gemma4(void) {
  for (size_t c = 0; c < sizeof G4_CASES / sizeof G4_CASES[0]; c++) {
    const g4_case *t = &G4_CASES[c];
    mx_chat_options opt = {MX_CHAT_GEMMA4, t->gen, t->thinking, t->large};
    mlxrt_error e = {{0}};
    char *got = mx_chat_render(t->msgs, t->n, &opt, &e);
    CHECKF(got != NULL, "%s: %s", t->name, e.msg);
    if (got && strcmp(got, t->want)) {
      CHECKF(0, "gemma 4: %s", t->name);
      show_diff(t->name, t->want, got);
    }
    free(got);
  }
}

static void test_errors(void) {
  mlxrt_error e;
  mx_chat_options g3 = {MX_CHAT_GEMMA3, 1, 0, 0}, g4 = {MX_CHAT_GEMMA4, 1, 0, 0};
  mx_chat_msg tool[] = {{"user", "x"}, {"tool", "y"}};
  for (int f = 0; f < 2; f++) {
    memset(&e, 0, sizeof e);
    CHECK(mx_chat_render(tool, 2, f ? &g4 : &g3, &e) == NULL);
    CHECK_MSG(e, "unknown role \"tool\"");
    CHECK_MSG(e, "message 1");
  }
  mx_chat_msg late_system[] = {{"user", "x"}, {"system", "y"}};
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(late_system, 2, &g4, &e) == NULL);
  CHECK_MSG(e, "system message may only come first");
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(late_system, 2, &g3, &e) == NULL);
  CHECK_MSG(e, "message 1");
  mx_chat_msg dev[] = {{"developer", "x"}, {"user", "y"}};
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(dev, 2, &g3, &e) == NULL); /* developer is Gemma 4 only */
  CHECK_MSG(e, "unknown role \"developer\"");
  mx_chat_msg twice[] = {{"user", "a"}, {"user", "b"}};
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(twice, 2, &g3, &e) == NULL);
  CHECK_MSG(e, "alternate");
  mx_chat_msg null_content[] = {{"user", NULL}};
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(null_content, 1, &g4, &e) == NULL);
  CHECK_MSG(e, "no content");
  mx_chat_msg null_role[] = {{NULL, "x"}};
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(null_role, 1, &g3, &e) == NULL);
  CHECK_MSG(e, "no role");
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(twice, 0, &g4, &e) == NULL);
  CHECK_MSG(e, "empty");
  mx_chat_options bad = {(mx_chat_family)7, 1, 0, 0};
  memset(&e, 0, sizeof e);
  CHECK(mx_chat_render(twice, 1, &bad, &e) == NULL);
  CHECK_MSG(e, "unknown template family 7");
  /* Invalid UTF-8 is kept as it is and never taken for whitespace. */
  mx_chat_msg raw[] = {{"user", "\xa0 x \xc2"}};
  char *got = mx_chat_render(raw, 1, &g4, &e);
  CHECK(got && strstr(got, "user\n\xa0 x \xc2<turn|>"));
  free(got);
}

/* ---- thought splitter ------------------------------------------------------------------- */

typedef struct collected {
  char thought[512], answer[512];
  int calls_thought_when_hidden;
} collected;

static void collect(void *user, int is_thought, const char *text, size_t len) {
  collected *c = user;
  char *dst = is_thought ? c->thought : c->answer;
  size_t have = strlen(dst);
  if (have + len < 512) {
    memcpy(dst + have, text, len);
    dst[have + len] = '\0';
  }
}

typedef struct split_case {
  const char *in, *thought, *answer;
} split_case;

static const split_case SPLITS[] = {
    {"<|channel>thought\nLet me think.<channel|>The answer is 4.", "Let me think.",
     "The answer is 4."},
    {"Plain answer, no thought.", "", "Plain answer, no thought."},
    {"<|channel>thought\n<channel|>Empty thought.", "", "Empty thought."},
    {"a < b and <|chan but not a marker <channel| either", "",
     "a < b and <|chan but not a marker <channel| either"},
    {"<|channel>thought\nx < y <|channel> z<channel|>done", "x < y <|channel> z", "done"},
    {"<|channel>thought\none<channel|>A<|channel>thought\ntwo<channel|>B", "onetwo", "AB"},
    {"<|channel>thought<channel|>no newline", "", "no newline"},
    {"<|channel>thought\nunfinished thought <chan", "unfinished thought <chan", ""},
    {"ends with <", "", "ends with <"},
};

static void test_thought_split(void) {
  for (size_t c = 0; c < sizeof SPLITS / sizeof SPLITS[0]; c++) {
    const split_case *t = &SPLITS[c];
    char *thought, *answer;
    mlxrt_error e = {{0}};
    CHECK(mx_thought_split(t->in, &thought, &answer, &e) == 0);
    CHECKF(!strcmp(thought, t->thought), "case %zu thought \"%s\"", c, thought);
    CHECKF(!strcmp(answer, t->answer), "case %zu answer \"%s\"", c, answer);
    free(thought);
    free(answer);

    /* Streamed in every split into three pieces, with the thought shown and hidden. */
    size_t n = strlen(t->in);
    int bad = 0;
    for (int show = 0; show < 2; show++)
      for (size_t i = 0; i <= n; i++)
        for (size_t j = i; j <= n; j++) {
          collected got = {{0}, {0}, 0};
          mx_thought_stream s;
          mx_thought_stream_init(&s, show);
          mx_thought_stream_feed(&s, t->in, i, collect, &got);
          mx_thought_stream_feed(&s, t->in + i, j - i, collect, &got);
          mx_thought_stream_feed(&s, t->in + j, n - j, collect, &got);
          mx_thought_stream_finish(&s, collect, &got);
          if (strcmp(got.answer, t->answer) || strcmp(got.thought, show ? t->thought : ""))
            bad++;
        }
    CHECKF(bad == 0, "case %zu: %d streamed splits differ", c, bad);
  }
}

int main(void) {
  test_gemma3_fixtures();
  test_gemma4();
  test_errors();
  test_thought_split();
  TEST_END();
}
