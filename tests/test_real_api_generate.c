/* The public generation calls on the real Gemma 3 270M demo model: its tokenizer round-trips
 * text (detokenize(tokenize(x)) == x); mlxrt_chat_turn and mlxrt_chat_respond give the answer
 * mlxrt_session_generate gives for the same conversation, and respond reuses the cache; a prefill is continued (the prompt is
 * the conversation with the generation prompt, then the prefill). Needs the demo model
 * (scripts/make_demo_model.sh); MLXRT_ALLOW_MISSING_MODELS=1 turns its absence into a skip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlxrt.h"
#include "test_util.h"
#include "api_checks.h"

typedef struct acc {
  char text[8192];
  size_t len;
  int32_t ids[256];
  int is_stop[256];
  char tok_text[256][32];
  int n;
} acc;

static int on_token(void *user, const mlxrt_token_info *t) {
  acc *a = user;
  if (a->n < 256) {
    a->ids[a->n] = t->id;
    a->is_stop[a->n] = t->is_stop;
    snprintf(a->tok_text[a->n], sizeof a->tok_text[0], "%.*s", (int)t->len, t->text);
  }
  a->n++;
  if (a->len + t->len < sizeof a->text) {
    memcpy(a->text + a->len, t->text, t->len);
    a->len += t->len;
  }
  return 0;
}

static void on_text(void *user, const char *t, size_t n) {
  acc *a = user;
  if (a->len + n < sizeof a->text) {
    memcpy(a->text + a->len, t, n);
    a->len += n;
  }
}

static void roundtrip(mlxrt_model *m) {
  static const char *samples[] = {
      "The quick brown fox jumps over the lazy dog.",
      "  leading and trailing spaces  ",
      "tabs\tand\nnew\n\nlines\r\n",
      "Ünïcödé: café, naïve, 日本語のテキスト, emoji 😀🎉 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
      "int main(void) { return x->y[3] != 0 ? 1 : 0; } // code",
      "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
      "",
  };
  mlxrt_error err = {{0}};
  check_roundtrip(m, samples, sizeof samples / sizeof samples[0]);
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK(mlxrt_tokenize(m, "<start_of_turn>", 15, 1, &ids, &n, &err) == 0 && n == 2 && ids[0] == 2 && ids[1] == 105);
  mlxrt_free(ids);
  CHECK(mlxrt_token_is_stop(m, 1) && mlxrt_token_is_stop(m, 106) && !mlxrt_token_is_stop(m, 105));
}

static void generation(mlxrt_model *m) {
  mlxrt_error err = {{0}};
  /* a conversation; the demo model is a base model, which does not close its turn */
  char prompt[1024] = "<bos>";
  for (int i = 0; i < 4; i++)
    strcat(prompt, "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n");
  strcat(prompt, "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK(mlxrt_tokenize(m, prompt, strlen(prompt), 0, &ids, &n, &err) == 0);
  mlxrt_session *s = mlxrt_session_new(m, 1024, &err);
  CHECKF(s != NULL, "%s", err.msg);
  if (!s) return;
  mlxrt_generate_options o;
  mlxrt_generate_options_default(&o);
  o.gen.temperature = 0;
  o.gen.max_tokens = 24;
  acc a = {0};
  mlxrt_gen_stats st;
  CHECKF(mlxrt_session_generate(s, ids, n, &o, on_token, &a, &st, &err) == 0, "%s", err.msg);
  CHECK(st.stopped_by == 1 && a.n == 24 && !strncmp(a.text, "hello", 5));

  /* the chat gives the same answer for the same conversation */
  mlxrt_chat_options co = {0};
  co.use_template = 1;
  mlxrt_gen_params_default(&co.gen);
  co.gen.temperature = 0;
  co.gen.max_tokens = 24;
  mlxrt_chat *c = mlxrt_chat_new(m, &co, &err);
  mlxrt_message conv[9];
  for (int i = 0; i < 4; i++) {
    conv[2 * i] = (mlxrt_message){"user", "hi"};
    conv[2 * i + 1] = (mlxrt_message){"assistant", "hello"};
  }
  conv[8] = (mlxrt_message){"user", "hi"};
  CHECK(c && mlxrt_chat_set_messages(c, conv, 8, &err) == 0);
  acc t = {0};
  CHECK(c && mlxrt_chat_turn(c, "hi", on_text, &t, &st, &err) == 0);
  CHECKF(t.len == a.len && !memcmp(t.text, a.text, t.len), "chat '%.*s', session '%.*s'", (int)t.len, t.text,
         (int)a.len, a.text);
  CHECK(st.prompt_tokens == (int64_t)n && st.stopped_by == 1);
  /* the same conversation through set_messages + respond: all but the last token reused */
  CHECK(c && mlxrt_chat_set_messages(c, conv, 9, &err) == 0);
  acc t2 = {0};
  CHECK(c && mlxrt_chat_respond(c, on_text, &t2, &st, &err) == 0);
  CHECK(t2.len == a.len && !memcmp(t2.text, a.text, t2.len));
  CHECKF(st.prompt_processed == 1, "processed %lld", (long long)st.prompt_processed);

  /* prefill: the answer continues the assistant's text */
  mlxrt_message msgs[] = {{"user", "Name a primary colour."}, {"assistant", "The colour is"}};
  CHECK(c && mlxrt_chat_set_messages(c, msgs, 2, &err) == 0);
  acc p = {0};
  CHECKF(c && mlxrt_chat_respond(c, on_text, &p, &st, &err) == 0, "%s", err.msg);
  const char *want = "<bos><start_of_turn>user\nName a primary colour.<end_of_turn>\n<start_of_turn>model\nThe colour is";
  int32_t *pids = NULL;
  size_t pn = 0;
  CHECK(mlxrt_tokenize(m, want, strlen(want), 0, &pids, &pn, &err) == 0);
  CHECK(st.prompt_tokens == (int64_t)pn && p.len > 0);
  printf("prefill 'The colour is' continued with '%.*s'\n", (int)p.len, p.text);
  /* the next turn reuses the conversation so far */
  acc q = {0};
  CHECK(c && mlxrt_chat_turn(c, "And another?", on_text, &q, &st, &err) == 0);
  CHECKF(st.prompt_processed < st.prompt_tokens, "processed %lld of %lld", (long long)st.prompt_processed,
         (long long)st.prompt_tokens);
  mlxrt_free(pids);
  mlxrt_chat_free(c);
  mlxrt_free(ids);
  mlxrt_session_free(s);
}

int main(void) {
  const char *cache = getenv("MLXRT_CACHE"), *home = getenv("HOME");
  char dir[1024], probe[1100];
  if (cache && *cache) snprintf(dir, sizeof dir, "%s/models/gemma-3-270m-4bit", cache);
  else snprintf(dir, sizeof dir, "%s/.cache/mlxrt/models/gemma-3-270m-4bit", home ? home : ".");
  snprintf(probe, sizeof probe, "%s/model.safetensors", dir);
  FILE *f = fopen(probe, "r");
  if (!f) {
    const char *allow = getenv("MLXRT_ALLOW_MISSING_MODELS");
    if (allow && !strcmp(allow, "1")) {
      printf("SKIPPED: %s not found\n", dir);
      return 0;
    }
    CHECKF(0, "demo model %s not found (run scripts/make_demo_model.sh)", dir);
    TEST_END();
  }
  fclose(f);
  mlxrt_error err = {{0}};
  mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  CHECKF(m != NULL, "%s", err.msg);
  if (m) {
    roundtrip(m);
    generation(m);
  }
  mlxrt_model_free(m);
  TEST_END();
}
