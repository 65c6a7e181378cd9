/* Gemma 3 / Gemma 4 chat templates in C and the Gemma 4 thought-channel splitter.
 * See chat_template.h for the formats; the comments here say where behaviour mirrors a quirk of
 * the real Jinja templates. */
#include "mlx/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---- growable string ------------------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  int failed;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->failed = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Returns the string, or NULL with err set when an allocation failed. */
static char *sb_finish(sbuf *b, mlxrt_error *err) {
  if (!b->failed && !b->p) sb_put(b, "", 0);
  if (b->failed) {
    free(b->p);
    mx_fail(err, "chat template: out of memory");
    return NULL;
  }
  return b->p;
}

/* ---- Python str.strip() whitespace ----------------------------------------------------- */

int mx_chat_is_strip_space(uint32_t cp) {
  /* Py_UNICODE_ISSPACE: bidi classes WS/B/S and category Zs (checked against the real table in
   * tests/fixtures/chat/gemma3.json). */
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return 1;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

/* Decodes one well-formed UTF-8 sequence at s (n bytes available); returns its length, or 0
 * when the bytes are not valid UTF-8 (such bytes are never whitespace). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  if (n == 0) return 0;
  unsigned char c = s[0];
  size_t len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

/* Trims s[0..n) like Python's str.strip(); returns the kept range through *start / *len. */
static void strip_range(const char *s, size_t n, size_t *start, size_t *len) {
  const unsigned char *u = (const unsigned char *)s;
  size_t a = 0, b = n;
  uint32_t cp;
  while (a < b) {
    size_t k = utf8_decode(u + a, b - a, &cp);
    if (k == 0 || !mx_chat_is_strip_space(cp)) break;
    a += k;
  }
  while (b > a) {
    size_t k = 1; /* back up to the lead byte of the last character */
    while (k < 4 && b - k > a && (u[b - k] & 0xC0) == 0x80) k++;
    size_t got = utf8_decode(u + b - k, k, &cp);
    if (got != k || !mx_chat_is_strip_space(cp)) break;
    b -= k;
  }
  *start = a;
  *len = b - a;
}

static void sb_put_trimmed(sbuf *b, const char *s, size_t n) {
  size_t a, len;
  strip_range(s, n, &a, &len);
  sb_put(b, s + a, len);
}

/* ---- roles ------------------------------------------------------------------------------ */

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_MODEL } chat_role;

static int parse_role(const mx_chat_msg *m, size_t i, mx_chat_family fam, chat_role *out,
                      mlxrt_error *err) {
  if (!m->role) return mx_fail(err, "chat: message %zu has no role", i);
  if (!m->content) return mx_fail(err, "chat: message %zu (%s) has no content", i, m->role);
  if (!strcmp(m->role, "user")) *out = ROLE_USER;
  else if (!strcmp(m->role, "assistant") || !strcmp(m->role, "model")) *out = ROLE_MODEL;
  else if (!strcmp(m->role, "system") || (fam == MX_CHAT_GEMMA4 && !strcmp(m->role, "developer")))
    *out = ROLE_SYSTEM;
  else
    return mx_fail(err,
                   "chat: message %zu has unknown role \"%.64s\" (expected system, user, assistant "
                   "or model)",
                   i, m->role);
  if (*out == ROLE_SYSTEM && i != 0)
    return mx_fail(err, "chat: message %zu: a system message may only come first", i);
  return 0;
}

/* ---- Gemma 3 ---------------------------------------------------------------------------- */

static int render_gemma3(const mx_chat_msg *msgs, size_t n, const mx_chat_options *opt, sbuf *b,
                         mlxrt_error *err) {
  size_t first = 0;
  const char *prefix = NULL; /* the system text, folded untrimmed into the first user turn */
  chat_role r;
  for (size_t i = 0; i < n; i++)
    if (parse_role(&msgs[i], i, MX_CHAT_GEMMA3, &r, err)) return -1;
  if (parse_role(&msgs[0], 0, MX_CHAT_GEMMA3, &r, err)) return -1;
  if (r == ROLE_SYSTEM) {
    prefix = msgs[0].content;
    first = 1;
  }
  sb_puts(b, "<bos>");
  for (size_t i = first; i < n; i++) {
    size_t k = i - first;
    parse_role(&msgs[i], i, MX_CHAT_GEMMA3, &r, err);
    if ((r == ROLE_USER) != (k % 2 == 0))
      return mx_fail(err,
                     "chat: message %zu (%s): Gemma 3 roles must alternate user/model, starting "
                     "with user after an optional system message",
                     i, msgs[i].role);
    sb_puts(b, r == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
    if (k == 0 && prefix) {
      sb_puts(b, prefix);
      sb_puts(b, "\n\n");
    }
    sb_put_trimmed(b, msgs[i].content, strlen(msgs[i].content));
    sb_puts(b, "<end_of_turn>\n");
  }
  /* A system-only conversation renders no turn at all: the template drops the prefix too. */
  if (opt->add_generation_prompt) sb_puts(b, "<start_of_turn>model\n");
  return 0;
}

/* ---- Gemma 4 ---------------------------------------------------------------------------- */

/* The template's strip_thinking: split on <channel|>; a part containing <|channel> keeps only
 * what precedes it; the joined result is trimmed. */
static void sb_put_without_thinking(sbuf *b, const char *s) {
  sbuf tmp = {0};
  const size_t close_len = strlen(MX_THOUGHT_CLOSE);
  for (const char *part = s;;) {
    const char *end = strstr(part, MX_THOUGHT_CLOSE);
    size_t plen = end ? (size_t)(end - part) : strlen(part);
    const char *open = NULL;
    for (const char *q = part; q + strlen(MX_THOUGHT_OPEN) <= part + plen; q++)
      if (!strncmp(q, MX_THOUGHT_OPEN, strlen(MX_THOUGHT_OPEN))) {
        open = q;
        break;
      }
    sb_put(&tmp, part, open ? (size_t)(open - part) : plen);
    if (!end) break;
    part = end + close_len;
  }
  if (tmp.failed) b->failed = 1;
  else if (tmp.p) sb_put_trimmed(b, tmp.p, tmp.len);
  free(tmp.p);
}

static int render_gemma4(const mx_chat_msg *msgs, size_t n, const mx_chat_options *opt, sbuf *b,
                         mlxrt_error *err) {
  size_t first = 0;
  chat_role r;
  for (size_t i = 0; i < n; i++)
    if (parse_role(&msgs[i], i, MX_CHAT_GEMMA4, &r, err)) return -1;
  parse_role(&msgs[0], 0, MX_CHAT_GEMMA4, &r, err);
  int has_system = r == ROLE_SYSTEM;
  sb_puts(b, "<bos>");
  if (has_system || opt->enable_thinking) {
    sb_puts(b, "<|turn>system\n");
    if (opt->enable_thinking) sb_puts(b, "<|think|>\n");
    if (has_system) {
      sb_put_trimmed(b, msgs[0].content, strlen(msgs[0].content));
      first = 1;
    }
    sb_puts(b, "<turn|>\n");
  }
  for (size_t i = first; i < n; i++) {
    parse_role(&msgs[i], i, MX_CHAT_GEMMA4, &r, err);
    if (r == ROLE_USER) {
      sb_puts(b, "<|turn>user\n");
      sb_put_trimmed(b, msgs[i].content, strlen(msgs[i].content));
    } else {
      sb_puts(b, "<|turn>model\n");
      sb_put_without_thinking(b, msgs[i].content);
    }
    sb_puts(b, "<turn|>\n");
  }
  if (opt->add_generation_prompt) {
    sb_puts(b, "<|turn>model\n");
    if (opt->large_variant && !opt->enable_thinking) sb_puts(b, "<|channel>thought\n<channel|>");
  }
  return 0;
}

char *mx_chat_render(const mx_chat_msg *msgs, size_t n, const mx_chat_options *opt,
                     mlxrt_error *err) {
  if (!opt) {
    mx_fail(err, "chat: no options given");
    return NULL;
  }
  if (n == 0 || !msgs) {
    mx_fail(err, "chat: the conversation is empty");
    return NULL;
  }
  sbuf b = {0};
  int rc;
  if (opt->family == MX_CHAT_GEMMA3) rc = render_gemma3(msgs, n, opt, &b, err);
  else if (opt->family == MX_CHAT_GEMMA4) rc = render_gemma4(msgs, n, opt, &b, err);
  else rc = mx_fail(err, "chat: unknown template family %d (expected 3 or 4)", (int)opt->family);
  if (rc) {
    free(b.p);
    return NULL;
  }
  return sb_finish(&b, err);
}

/* ---- thought channel splitter ----------------------------------------------------------- */

enum { TS_ANSWER = 0, TS_NAME = 1, TS_THOUGHT = 2 };
#define MARKER_LEN 10 /* strlen of both markers; each holds '<' only at its start */

static void ts_emit(const mx_thought_stream *s, const char *p, size_t n, mx_text_sink sink,
                    void *user) {
  if (n == 0 || s->state == TS_NAME) return;
  if (s->state == TS_THOUGHT && !s->show_thought) return;
  sink(user, s->state == TS_THOUGHT, p, n);
}

void mx_thought_stream_init(mx_thought_stream *s, int show_thought) {
  memset(s, 0, sizeof *s);
  s->show_thought = show_thought;
}

void mx_thought_stream_feed(mx_thought_stream *s, const char *text, size_t len, mx_text_sink sink,
                            void *user) {
  size_t run = 0; /* start of the text not yet emitted */
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    const char *marker = s->state == TS_ANSWER ? MX_THOUGHT_OPEN : MX_THOUGHT_CLOSE;
    if (s->held > 0) {
      if (c == marker[s->held]) {
        s->hold[s->held++] = c;
        run = i + 1;
        if (s->held == MARKER_LEN) {
          s->held = 0;
          s->state = s->state == TS_ANSWER ? TS_NAME : TS_ANSWER;
        }
        continue;
      }
      /* Not a marker after all: the held bytes are ordinary text of the current kind. */
      ts_emit(s, s->hold, s->held, sink, user);
      s->held = 0;
      run = i;
    }
    if (c == '<') {
      ts_emit(s, text + run, i - run, sink, user);
      s->hold[0] = c;
      s->held = 1;
      run = i + 1;
    } else if (s->state == TS_NAME && c == '\n') {
      s->state = TS_THOUGHT;
      run = i + 1;
    }
  }
  if (s->held == 0) ts_emit(s, text + run, len - run, sink, user);
}

void mx_thought_stream_finish(mx_thought_stream *s, mx_text_sink sink, void *user) {
  ts_emit(s, s->hold, s->held, sink, user);
  s->held = 0;
}

typedef struct split_bufs {
  sbuf thought, answer;
} split_bufs;

static void split_sink(void *user, int is_thought, const char *text, size_t len) {
  split_bufs *sb = user;
  sb_put(is_thought ? &sb->thought : &sb->answer, text, len);
}

int mx_thought_split(const char *text, char **thought, char **answer, mlxrt_error *err) {
  split_bufs bufs = {{0}, {0}};
  mx_thought_stream s;
  *thought = *answer = NULL;
  mx_thought_stream_init(&s, 1);
  mx_thought_stream_feed(&s, text, strlen(text), split_sink, &bufs);
  mx_thought_stream_finish(&s, split_sink, &bufs);
  char *t = sb_finish(&bufs.thought, err);
  char *a = sb_finish(&bufs.answer, err);
  if (!t || !a) {
    free(t);
    free(a);
    return -1;
  }
  *thought = t;
  *answer = a;
  return 0;
}
