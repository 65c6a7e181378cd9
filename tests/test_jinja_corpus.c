/* Our Jinja interpreter against transformers' own renderer on real chat templates: llama.cpp's
 * template collection and Gemma 3's published template, each rendered for a fixed set of
 * conversations (scripts/jinja_corpus.py writes the corpus and the expected outputs into the
 * cache; scripts/prepare_data.sh runs it). Every (template, conversation) pair is rendered here
 * through the same path the engine uses (mx_chat_render_request with the template as the
 * override, same bos/eos, strftime_now at the corpus's instant) and counted as identical,
 * different, refused by us (our error names the construct) or refused by both.
 *
 * Fails when the corpus is missing (it is generated, never skipped), when a Gemma 3 or Gemma 4
 * template is not identical on every conversation that transformers renders (and refused on
 * those it refuses), when the identical count drops below IDENTICAL_FLOOR or the different count
 * rises above DIFFERENT_CEILING, or when the built-in
 * C renderers differ from the real Gemma templates on the plain conversations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/file.h"
#include "mlx/chat_render.h"
#include "mlx/json_doc.h"
#include "test_util.h"

/* What the interpreter reached when these were set: every one of the 71 templates x 6
 * conversations that transformers renders (372; the other 54 it refuses, and so do we). */
#define IDENTICAL_FLOOR 372
#define DIFFERENT_CEILING 0

typedef struct counts {
  int identical, different, refused_by_us, refused_by_both;
} counts;

static const char *str_of(const jd_value *o, const char *k) {
  const jd_value *v = jd_get(o, k);
  return jd_is(v, JD_STRING) ? v->str : NULL;
}

/* Prints up to n bytes of s from `at` with control bytes escaped. */
static void excerpt(const char *label, const char *s, size_t len, size_t at) {
  size_t a = at > 40 ? at - 40 : 0, b = at + 60 < len ? at + 60 : len;
  printf("      %s: \"", label);
  for (size_t i = a; i < b; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\n') printf("\\n");
    else if (c < 0x20) printf("\\x%02x", c);
    else putchar(c);
  }
  printf("\"\n");
}

static int is_gemma(const char *name) {
  return strstr(name, "gemma-3") != NULL || strstr(name, "gemma-4") != NULL;
}

/* Renders one pair and classifies it; prints what is not identical. Returns the category. */
enum { SAME, DIFFERENT, REFUSED_BY_US, REFUSED_BY_BOTH };
static int compare(const mx_chat_templates *vars, const mx_chat_options *builtin, const char *tpl,
                   const jd_value *conv, const jd_value *result, int64_t now) {
  mx_chat_request r = {str_of(conv, "messages_json"), str_of(conv, "tools_json"),
                       jd_is(jd_get(conv, "add_generation_prompt"), JD_TRUE),
                       jd_is(jd_get(conv, "enable_thinking"), JD_TRUE), tpl, now};
  mlxrt_error err = {{0}};
  size_t len = 0;
  char *got = mx_chat_render_request(vars, builtin, &r, &len, &err);
  const jd_value *want = jd_get(result, "expected");
  const char *conv_name = str_of(conv, "name");
  int cat;
  if (!got) {
    cat = want ? REFUSED_BY_US : REFUSED_BY_BOTH;
    if (want) printf("    %s: refused by us: %s\n", conv_name, err.msg);
  } else if (!want) {
    cat = DIFFERENT;
    printf("    %s: rendered by us, refused by transformers (%.200s)\n", conv_name,
           str_of(result, "error"));
  } else if (len == want->str_len && !memcmp(got, want->str, len)) {
    cat = SAME;
  } else {
    cat = DIFFERENT;
    size_t at = 0;
    while (at < len && at < want->str_len && got[at] == want->str[at]) at++;
    printf("    %s: differs at byte %zu (ours %zu bytes, transformers %u)\n", conv_name, at, len,
           want->str_len);
    excerpt("ours        ", got, len, at);
    excerpt("transformers", want->str, want->str_len, at);
  }
  free(got);
  return cat;
}

static void count(counts *c, int cat) {
  if (cat == SAME) c->identical++;
  else if (cat == DIFFERENT) c->different++;
  else if (cat == REFUSED_BY_US) c->refused_by_us++;
  else c->refused_by_both++;
}

/* The built-in renderer must match the real Gemma templates wherever it renders at all: the
 * conversations without tools (the tool conversation it must refuse). */
static void check_builtin(const mx_chat_templates *vars, const jd_value *convs,
                          const jd_value *entry, mx_chat_family fam, int large, int64_t now) {
  const char *name = str_of(entry, "name");
  mx_chat_options b = {fam, 0, 0, large};
  const jd_value *res = jd_get(entry, "results")->child;
  printf("  built-in Gemma %d%s vs %s\n", (int)fam, large ? " (large)" : "", name);
  for (const jd_value *c = convs->child; c && res; c = c->next, res = res->next) {
    int cat = compare(vars, &b, NULL, c, res, now);
    int tools = str_of(c, "tools_json") != NULL;
    CHECKF(tools ? cat == REFUSED_BY_US || cat == REFUSED_BY_BOTH : cat == SAME,
           "built-in Gemma %d vs %s on %s", (int)fam, name, str_of(c, "name"));
  }
}

int main(void) {
  /* strftime_now formats the corpus's instant as a UTC wall-clock time, as the corpus does */
  setenv("TZ", "UTC", 1);
  tzset();
  const char *cache = getenv("MLXRT_CACHE"), *home = getenv("HOME");
  char path[4096];
  if (cache && *cache) snprintf(path, sizeof path, "%s/jinja_corpus/corpus.json", cache);
  else snprintf(path, sizeof path, "%s/.cache/mlxrt/jinja_corpus/corpus.json", home ? home : ".");
  mlxrt_error err = {{0}};
  size_t len = 0;
  char *text = mx_read_file(path, &len, &err);
  if (!text) {
    fprintf(stderr, "FAIL: the chat-template corpus is missing (%s): run scripts/prepare_data.sh "
            "(it needs the network once)\n", err.msg);
    return 1;
  }
  size_t off = 0;
  const char *why = NULL;
  jd_doc *doc = jd_parse(text, len, &off, &why);
  CHECKF(doc != NULL, "%s: invalid JSON at byte %zu: %s", path, off, why);
  if (!doc) {
    free(text);
    TEST_END();
  }
  const jd_value *root = jd_root(doc), *convs = jd_get(root, "conversations");
  const jd_value *templates = jd_get(root, "templates");
  const jd_value *now_v = jd_get(root, "now");
  int64_t now = jd_is(now_v, JD_NUMBER) ? (int64_t)now_v->num : 0;
  CHECK(jd_is(convs, JD_ARRAY) && jd_is(templates, JD_ARRAY) && now > 0);

  mx_chat_templates vars = {0};
  CHECK(mx_chat_templates_set_var(&vars, "bos_token", str_of(root, "bos_token"), &err) == 0);
  CHECK(mx_chat_templates_set_var(&vars, "eos_token", str_of(root, "eos_token"), &err) == 0);

  counts all = {0};
  int n_templates = 0, n_whole = 0, n_gemma = 0;
  for (const jd_value *e = templates ? templates->child : NULL; e; e = e->next) {
    const char *name = str_of(e, "name"), *tpl = str_of(e, "template");
    counts one = {0};
    printf("%s\n", name);
    const jd_value *res = jd_get(e, "results")->child;
    for (const jd_value *c = convs->child; c && res; c = c->next, res = res->next)
      count(&one, compare(&vars, NULL, tpl, c, res, now));
    n_templates++;
    if (!one.different && !one.refused_by_us) n_whole++;
    printf("  -> %d identical, %d different, %d refused by us, %d refused by both\n", one.identical,
           one.different, one.refused_by_us, one.refused_by_both);
    all.identical += one.identical;
    all.different += one.different;
    all.refused_by_us += one.refused_by_us;
    all.refused_by_both += one.refused_by_both;
    if (is_gemma(name)) {
      n_gemma++;
      CHECKF(!one.different && !one.refused_by_us, "%s: a Gemma template must render every "
             "conversation exactly as transformers does", name);
    }
    if (!strcmp(name, "google-gemma-3-it")) check_builtin(&vars, convs, e, MX_CHAT_GEMMA3, 0, now);
    if (!strcmp(name, "google-gemma-4-31B-it")) check_builtin(&vars, convs, e, MX_CHAT_GEMMA4, 1, now);
  }
  printf("\ncorpus: %d templates, %d rendered like transformers on every conversation\n",
         n_templates, n_whole);
  printf("pairs: %d identical, %d different, %d refused by us, %d refused by both\n", all.identical,
         all.different, all.refused_by_us, all.refused_by_both);
  CHECKF(n_gemma >= 3, "the corpus has %d Gemma 3/4 templates, expected at least 3", n_gemma);
  CHECKF(all.different <= DIFFERENT_CEILING, "%d pairs render differently, more than %d",
         all.different, DIFFERENT_CEILING);
  CHECKF(all.identical >= IDENTICAL_FLOOR, "%d identical pairs, below the floor of %d",
         all.identical, IDENTICAL_FLOOR);
  mx_chat_templates_free(&vars);
  jd_free(doc);
  free(text);
  TEST_END();
}
