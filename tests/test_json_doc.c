/* The JSON reader (src/mlx/json_doc.c): values and escapes as RFC 8259 defines them, every
 * malformed form rejected with an offset, every truncation of a valid document rejected (read
 * from an exact-size heap copy, so ASan sees any overread), numbers in the C locale whatever
 * the process locale, no effect on cJSON's global allocator, and concurrent parses. */
#include <cjson/cJSON.h>
#include <locale.h>
#include <pthread.h>

#include "mlx/json_doc.h"
#include "test_util.h"

/* Parses an exact-size heap copy of s (no terminator to lean on). */
static jd_doc *parse_n(const char *s, size_t n, size_t *off, const char **what) {
  char *copy = malloc(n ? n : 1);
  memcpy(copy, s, n);
  jd_doc *d = jd_parse(copy, n, off, what);
  free(copy);
  return d;
}

static jd_doc *parse(const char *s) { return parse_n(s, strlen(s), NULL, NULL); }

static void bad(const char *s, size_t want_off, const char *frag) {
  size_t off = (size_t)-1;
  const char *what = NULL;
  jd_doc *d = parse_n(s, strlen(s), &off, &what);
  CHECKF(d == NULL, "accepted %s", s);
  jd_free(d);
  CHECKF(what && strstr(what, frag), "%s: error \"%s\" lacks \"%s\"", s, what ? what : "", frag);
  CHECKF(off == want_off, "%s: error at byte %zu, expected %zu", s, off, want_off);
}

static void test_values(void) {
  jd_doc *d = parse(" {\"a\": [1, -2.5e3, 0, true, false, null, \"x\"], \"b\": {}, \"c\": [],"
                    " \"a\": 7}\r\n\t");
  CHECK(d != NULL);
  if (!d) return;
  const jd_value *r = jd_root(d);
  CHECK(jd_is(r, JD_OBJECT));
  const jd_value *a = jd_get(r, "a"); /* the first of two members named "a" */
  CHECK(jd_is(a, JD_ARRAY));
  const jd_value *e = a->child;
  CHECK(jd_is(e, JD_NUMBER) && e->num == 1);
  e = e->next;
  CHECK(jd_is(e, JD_NUMBER) && e->num == -2500);
  e = e->next;
  CHECK(jd_is(e, JD_NUMBER) && e->num == 0);
  e = e->next;
  CHECK(jd_is(e, JD_TRUE) && jd_is_bool(e));
  e = e->next;
  CHECK(jd_is(e, JD_FALSE) && jd_is_bool(e));
  e = e->next;
  CHECK(jd_is(e, JD_NULL) && !jd_is_bool(e));
  e = e->next;
  CHECK(jd_is(e, JD_STRING) && !strcmp(e->str, "x") && e->str_len == 1 && !e->next);
  CHECK(jd_is(jd_get(r, "b"), JD_OBJECT) && !jd_get(r, "b")->child);
  CHECK(jd_is(jd_get(r, "c"), JD_ARRAY) && !jd_get(r, "c")->child);
  CHECK(jd_get(r, "zz") == NULL && jd_get(a, "a") == NULL && jd_get(NULL, "a") == NULL);
  jd_free(d);

  /* escapes, surrogate pairs, raw UTF-8, an embedded NUL */
  d = parse("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\\ud83d\\ude00\", \"é€😀\","
            " \"a\\u0000b\", \"\"]");
  CHECK(d != NULL);
  if (!d) return;
  e = jd_root(d)->child;
  CHECK(e->str_len == 8 && !memcmp(e->str, "\"\\/\b\f\n\r\t", 9));
  e = e->next;
  CHECK(!strcmp(e->str, "é€😀") && e->str_len == strlen("é€😀"));
  e = e->next;
  CHECK(!strcmp(e->str, "é€😀"));
  e = e->next;
  CHECK(e->str_len == 3 && !memcmp(e->str, "a\0b", 4) && strlen(e->str) == 1);
  e = e->next;
  CHECK(e->str_len == 0 && e->str[0] == 0);
  jd_free(d);

  /* numbers: exact integers, the largest exact ones, fractions and exponents correctly rounded */
  d = parse("[9007199254740993, 123456789012345, -0, 1E2, 0.1, 2.5e-3, 1e400, 12345678901234567890]");
  CHECK(d != NULL);
  if (!d) return;
  e = jd_root(d)->child;
  CHECK(e->num == 9007199254740992.0); /* 2^53 + 1 rounds to even */
  e = e->next;
  CHECK(e->num == 123456789012345.0);
  e = e->next;
  CHECK(e->num == 0);
  e = e->next;
  CHECK(e->num == 100);
  e = e->next;
  CHECK(e->num == 0.1);
  e = e->next;
  CHECK(e->num == 2.5e-3);
  e = e->next;
  CHECK(isinf(e->num));
  e = e->next;
  CHECK(e->num == 12345678901234567890.0);
  jd_free(d);

  /* scalars at the top level */
  d = parse("  42 ");
  CHECK(d && jd_is(jd_root(d), JD_NUMBER) && jd_root(d)->num == 42);
  jd_free(d);
  d = parse("\"s\"");
  CHECK(d && jd_is(jd_root(d), JD_STRING));
  jd_free(d);
}

static void test_errors(void) {
  bad("", 0, "end of input");
  bad("   ", 3, "end of input");
  bad("{", 1, "member name");
  bad("{\"a\" 1}", 5, "':'");
  bad("{\"a\":1,}", 7, "member name");
  bad("[1,]", 3, "unexpected character");
  bad("[1 2]", 3, "',' or ']'");
  bad("{\"a\":1 \"b\":2}", 7, "',' or '}'");
  bad("[1] x", 4, "after the top-level value");
  bad("tru", 0, "unexpected character");
  bad("nul", 0, "unexpected character");
  bad("[01]", 2, "',' or ']'");
  bad("-", 1, "bad number");
  bad("1.", 2, "bad number");
  bad("1e+", 3, "bad number");
  bad(".5", 0, "unexpected character");
  bad("NaN", 0, "unexpected character");
  bad("\"abc", 4, "unterminated string");
  bad("\"a\tb\"", 2, "control character");
  bad("\"\\x\"", 1, "unknown escape");
  bad("\"\\u12G4\"", 3, "hex digit");
  bad("\"\\u12\"", 3, "truncated \\u escape");
  bad("\"\\u12\" ]", 3, "hex digit");
  bad("\"\\udc00\"", 7, "lone low surrogate");
  bad("\"\\ud800\"", 7, "without its low half");
  bad("\"\\ud800\\u0041\"", 13, "without its low half");
  bad("\"\xff\"", 1, "invalid UTF-8");
  bad("\"\xc0\xaf\"", 1, "invalid UTF-8");         /* overlong '/' */
  bad("\"\xed\xa0\x80\"", 1, "invalid UTF-8");     /* an encoded surrogate */
  bad("\"\xf4\x90\x80\x80\"", 1, "invalid UTF-8"); /* above U+10FFFF */
  bad("\"\xe2\x82\"", 1, "invalid UTF-8");         /* truncated sequence */
  char longnum[200];
  memset(longnum, '1', 150);
  memcpy(longnum + 150, ".5", 3);
  bad(longnum, 0, "longer than 127");

  /* nesting: the limit is accepted, one more level is not */
  static char deep[2 * JSON_DOC_MAX_DEPTH + 16];
  for (int extra = 0; extra < 2; extra++) {
    int n = JSON_DOC_MAX_DEPTH + extra;
    memset(deep, '[', (size_t)n);
    memset(deep + n, ']', (size_t)n);
    deep[2 * n] = 0;
    jd_doc *d = parse(deep);
    if (extra) {
      CHECK(d == NULL);
      bad(deep, JSON_DOC_MAX_DEPTH, "nesting");
    } else {
      CHECK(d != NULL);
    }
    jd_free(d);
  }

  /* every proper prefix of a valid document is rejected, and nothing is read past the end */
  const char *doc = "{\"vocab\": {\"a\": 1, \"\\u00e9\\ud83d\\ude00\": 2}, \"m\": [[\"x\", \"y\"], "
                    "-1.5e-2, true, false, null]}";
  size_t n = strlen(doc);
  int accepted = 0;
  for (size_t k = 0; k < n; k++) {
    jd_doc *d = parse_n(doc, k, NULL, NULL);
    accepted += d != NULL;
    jd_free(d);
  }
  CHECKF(accepted == 0, "%d truncations of a valid document were accepted", accepted);
  jd_doc *d = parse_n(doc, n, NULL, NULL);
  CHECK(d != NULL);
  jd_free(d);
}

static void test_locale(void) {
  /* A locale with a decimal comma must not change how numbers read. */
  const char *names[] = {"de_DE.UTF-8", "fr_FR.UTF-8", "de_DE.utf8", NULL};
  const char *got = NULL;
  for (int i = 0; names[i] && !got; i++) got = setlocale(LC_NUMERIC, names[i]);
  jd_doc *d = parse("[0.5, 1.25e1]");
  CHECK(d && jd_root(d)->child->num == 0.5 && jd_root(d)->child->next->num == 12.5);
  jd_free(d);
  setlocale(LC_NUMERIC, "C");
  printf("locale: %s\n", got ? got : "no comma locale installed (checked in C only)");
}

static size_t hook_allocs;
static void *count_malloc(size_t n) {
  __atomic_add_fetch(&hook_allocs, 1, __ATOMIC_RELAXED);
  return malloc(n);
}

static void test_no_global_hooks(void) {
  /* An application's cJSON hooks stay in force across a JSON parse of ours. */
  cJSON_Hooks h = {count_malloc, free};
  cJSON_InitHooks(&h);
  jd_doc *d = parse("{\"a\": [1, 2, \"three\"]}");
  CHECK(d != NULL);
  CHECK(hook_allocs == 0);
  jd_free(d);
  cJSON *c = cJSON_Parse("{\"k\": [1, 2]}");
  CHECK(c != NULL && hook_allocs > 0);
  cJSON_Delete(c);
  cJSON_InitHooks(NULL);
}

/* Many documents on several threads at once give the same trees. */
static void *parse_many(void *arg) {
  int *bad_count = arg;
  char buf[256];
  for (int i = 0; i < 2000; i++) {
    int len = snprintf(buf, sizeof buf, "{\"i\": %d, \"s\": \"\\u00e9%d\", \"f\": %d.5}", i, i, i);
    jd_doc *d = jd_parse(buf, (size_t)len, NULL, NULL);
    char want[32];
    snprintf(want, sizeof want, "é%d", i);
    const jd_value *r = jd_root(d);
    if (!d || jd_get(r, "i")->num != i || strcmp(jd_get(r, "s")->str, want) ||
        jd_get(r, "f")->num != i + 0.5)
      (*bad_count)++;
    jd_free(d);
  }
  return NULL;
}

static void test_threads(void) {
  pthread_t th[4];
  int bad_counts[4] = {0};
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, parse_many, &bad_counts[i]);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) CHECKF(bad_counts[i] == 0, "thread %d: %d wrong trees", i, bad_counts[i]);
}

int main(void) {
  test_values();
  test_errors();
  test_locale();
  test_no_global_hooks();
  test_threads();
  TEST_END();
}
