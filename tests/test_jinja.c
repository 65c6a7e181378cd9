/* The Jinja interpreter (src/mlx/jinja.h) against Python jinja2: tests/jinja_golden.h holds
 * focused cases rendered by jinja2 3.1.6 in Hugging Face transformers' chat-template
 * environment (scripts/make_jinja_golden.py regenerates it); every one must render
 * byte-identically here, and every case jinja2 refuses must fail here too. Then what jinja2
 * has no answer for: our error messages, hostile templates (deep nesting, endless recursion,
 * huge ranges and strings) failing cleanly, and concurrent renders of one parsed template. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "jinja_golden.h"
#include "mlx/jinja.h"
#include "test_util.h"

static const mx_jinja_options NOW = {1700000000};

/* Renders src with ctx; returns malloc'd output or NULL with err. */
static char *render(const char *src, const char *ctx, size_t *len, mlxrt_error *err) {
  mx_jinja *t = mx_jinja_parse(src, strlen(src), "t.jinja", err);
  if (!t) return NULL;
  char *out = mx_jinja_render(t, ctx, &NOW, len, err);
  mx_jinja_free(t);
  return out;
}

static void test_golden(void) {
  for (size_t i = 0; i < sizeof JINJA_GOLDEN / sizeof *JINJA_GOLDEN; i++) {
    const jinja_golden *g = &JINJA_GOLDEN[i];
    mlxrt_error err = {{0}};
    size_t len = 0;
    char *out = render(g->tmpl, g->ctx, &len, &err);
    if (g->out) {
      CHECKF(out != NULL, "%s: failed: %s", g->name, err.msg);
      if (out)
        CHECKF(len == strlen(g->out) && !memcmp(out, g->out, len), "%s:\n got [%s]\nwant [%s]", g->name,
               out, g->out);
    } else {
      CHECKF(out == NULL, "%s: rendered [%s], jinja2 fails with %s", g->name, out ? out : "", g->err);
      CHECKF(strchr(err.msg, '\n') == NULL && err.msg[0], "%s: message [%s]", g->name, err.msg);
    }
    free(out);
  }
}

static void expect_fail(const char *src, const char *ctx, const char *fragment) {
  mlxrt_error err = {{0}};
  char *out = render(src, ctx ? ctx : "{}", NULL, &err);
  CHECKF(out == NULL, "[%.60s] rendered", src);
  free(out);
  CHECK_MSG(err, fragment);
}

static void test_messages(void) {
  /* raise_exception's message is the whole message */
  mlxrt_error err = {{0}};
  char *out = render("x{{ raise_exception('Only user and assistant roles') }}", "{}", NULL, &err);
  CHECK(out == NULL && !strcmp(err.msg, "Only user and assistant roles"));
  free(out);
  /* constructs outside the subset fail at parse time with NAME:LINE:COL */
  expect_fail("a\n  {% include 'x' %}", NULL, "t.jinja:2:6: unsupported tag: 'include'");
  expect_fail("{% call m() %}{% endcall %}", NULL, "t.jinja:1:4: unsupported tag: 'call'");
  expect_fail("{{ x|frobnicate }}", NULL, "t.jinja:1:6: unsupported filter: 'frobnicate'");
  expect_fail("{{ x is frob }}", NULL, "unsupported test: 'frob'");
  expect_fail("{% for x in y recursive %}{% endfor %}", NULL, "unsupported construct: recursive");
  expect_fail("{{ '%s' % 1 }}", NULL, "unsupported: printf-style");
  expect_fail("{{ f(*a) }}", NULL, "unsupported call syntax");
  expect_fail("{% if x %}", NULL, "t.jinja:1:11: unexpected end of template: missing {% elif %}");
  expect_fail("{% for x in y %}", NULL, "missing {% else %}");
  expect_fail("{{ x", NULL, "t.jinja:1:1: unterminated variable tag");
  expect_fail("{% if %}{% endif %}", NULL, "expected an expression");
  expect_fail("{{ 'abc }}", NULL, "unterminated string literal");
  expect_fail("{{ (1 }}", NULL, "t.jinja:1:8: unexpected closing bracket");
  expect_fail("{% endif %}", NULL, "unknown tag 'endif'");
  /* an unknown filter inside an if's branch fails only when reached, as in jinja2 */
  out = render("{% if x %}{{ x|frobnicate }}{% endif %}ok", "{}", NULL, &err);
  CHECK(out && !strcmp(out, "ok"));
  free(out);
  expect_fail("{% if x %}{{ x|frobnicate }}{% endif %}ok", "{\"x\": 1}", "t.jinja:1:16: unsupported filter");
  /* bad contexts */
  expect_fail("x", "[1]", "context must be a JSON object");
  expect_fail("x", "{\"a\": }", "context JSON");
  expect_fail("x", "{\"a\": \"\\ud800\"}", "unpaired surrogate");
  /* undefined values fail where jinja2's Undefined does */
  expect_fail("{{ x.y }}", NULL, "t.jinja:1:5: attribute 'y' of an undefined value");
  expect_fail("{{ x() }}", NULL, "call of an undefined value");
  expect_fail("{{ x + 1 }}", NULL, "undefined value used with '+'");
}

static void test_hostile(void) {
  char *src = malloc(40000);
  /* deep expression nesting */
  strcpy(src, "{{ ");
  for (int i = 0; i < 5000; i++) strcat(src, "(");
  expect_fail(src, NULL, "nested too deeply");
  /* deep statement nesting */
  src[0] = 0;
  for (int i = 0; i < 1000; i++) strcat(src, "{% if 1 %}");
  expect_fail(src, NULL, "nested too deeply");
  free(src);
  expect_fail("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", NULL, "nested too deeply");
  expect_fail("{% for i in range(1000000) %}{% endfor %}", NULL, "range too big");
  expect_fail("{{ 'x' * 100000000 }}", NULL, "would exceed");
  expect_fail("{{ range(10)|list * 10000000 }}", NULL, "would exceed");
  expect_fail("{% set ns = namespace(s='x' * 1000000) %}{% for i in range(100000) %}"
              "{% set ns.s = ns.s ~ 'x' * 100 %}{% endfor %}",
              NULL, "too much work");
  expect_fail("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}", NULL, "output would exceed");
  expect_fail("{{ 9223372036854775807 + 1 }}", NULL, "integer result beyond 64 bits");
  expect_fail("{{ 2 ** 64 }}", NULL, "integer result beyond 64 bits");
  expect_fail("{% set ns = namespace() %}{% set ns.self = ns %}{{ raise_exception('stop') }}", NULL, "stop");
  /* a namespace holding itself is released (LeakSanitizer checks) */
  mlxrt_error err;
  char *out = render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.me.a }}", "{}", NULL, &err);
  CHECK(out && !strcmp(out, "1"));
  free(out);
  /* arbitrary bytes never crash the lexer or parser */
  unsigned seed = 7;
  char junk[257];
  for (int k = 0; k < 2000; k++) {
    size_t n = 0;
    for (; n < 256; n++) {
      seed = seed * 1103515245u + 12345u;
      static const char alphabet[] = "{}%#-+()[]'\"|.,:~ \nabcif01=<>*/";
      junk[n] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
    }
    junk[n] = 0;
    mx_jinja *t = mx_jinja_parse(junk, n, "junk", &err);
    if (t) {
      free(mx_jinja_render(t, "{}", &NOW, NULL, &err));
      mx_jinja_free(t);
    }
  }
  CHECK(1);
}

/* One parsed template rendered from several threads gives each the single-thread output. */
typedef struct job {
  const mx_jinja *t;
  const char *ctx, *want;
  int bad;
} job;

static void *worker(void *arg) {
  job *j = arg;
  for (int i = 0; i < 50; i++) {
    mlxrt_error err;
    char *out = mx_jinja_render(j->t, j->ctx, &NOW, NULL, &err);
    if (!out || strcmp(out, j->want)) j->bad++;
    free(out);
  }
  return NULL;
}

static void test_threads(void) {
  const char *src =
      "{%- macro fmt(v) -%}{%- if v is mapping -%}{ {%- for k, x in v|dictsort -%}{{ k }}:{{ fmt(x) }}"
      "{{ ',' if not loop.last }}{%- endfor -%} }{%- else -%}{{ v|tojson }}{%- endif -%}{%- endmacro -%}"
      "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}"
      "<{{ m.role }}>{{ m.content|trim }}{{ fmt(m) }}{%- endfor -%}{{ ns.n }}";
  const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"model\","
                    " \"content\": \"yo\", \"x\": {\"b\": [1, 2.5], \"a\": null}}]}";
  mlxrt_error err;
  mx_jinja *t = mx_jinja_parse(src, strlen(src), "threads", &err);
  CHECKF(t != NULL, "%s", err.msg);
  if (!t) return;
  char *want = mx_jinja_render(t, ctx, &NOW, NULL, &err);
  CHECKF(want != NULL, "%s", err.msg);
  job jobs[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (job){t, ctx, want ? want : "", 0};
    pthread_create(&th[i], NULL, worker, &jobs[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK(jobs[i].bad == 0);
  }
  free(want);
  mx_jinja_free(t);
}

int main(void) {
  setenv("TZ", "UTC", 1); /* the golden strftime_now output is UTC */
  tzset();
  test_golden();
  test_messages();
  test_hostile();
  test_threads();
  TEST_END();
}
