/* Gemma 4 tool calls in generated text (mlxrt_parse_tool_calls). The format
 * (gemma-architecture.md §13-14; mlx-lm's tool_parsers/gemma4.py reads the same):
 *   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>
 * NAME: letters, digits, '_' and '-' (non-ASCII letters allowed); VALUE: a string between <|"|>
 * delimiters (taken verbatim: braces, quotes and newlines inside are text), a number, true,
 * false, null, an object {key:VALUE,...} or an array [VALUE,...]. Keys are bare words (or
 * strings). Standard JSON ("..." strings, quoted keys) is accepted too. One block may hold
 * several calls separated by whitespace or commas. The arguments become a JSON object's text. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "mlxrt.h"

#define CALL_OPEN "<|tool_call>"
#define CALL_CLOSE "<tool_call|>"
#define STR_DELIM "<|\"|>"
#define MAX_DEPTH 64

/* s as the body of a JSON string (well-formed UTF-8 checked by the caller) */
static void put_escaped(mx_strbuf *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const unsigned char c = (unsigned char)s[i];
    char e[8];
    if (c == '"' || c == '\\') {
      e[0] = '\\', e[1] = (char)c;
      mx_strbuf_put(b, e, 2);
    } else if (c == '\n') mx_strbuf_put(b, "\\n", 2);
    else if (c == '\r') mx_strbuf_put(b, "\\r", 2);
    else if (c == '\t') mx_strbuf_put(b, "\\t", 2);
    else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      memcpy(e, "\\u00", 4);
      e[4] = hex[c >> 4], e[5] = hex[c & 15];
      mx_strbuf_put(b, e, 6);
    } else mx_strbuf_put(b, (const char *)&c, 1);
  }
}

typedef struct parser {
  const char *s;
  size_t n, i;
  mlxrt_error *err;
} parser;

static int fail_at(parser *p, size_t at, const char *what) {
  return mx_fail(p->err, "tool call: %s at offset %zu", what, at);
}

static int starts(const parser *p, const char *lit) {
  const size_t l = strlen(lit);
  return p->n - p->i >= l && !memcmp(p->s + p->i, lit, l);
}

static void skip_space(parser *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\t' || p->s[p->i] == '\r')) p->i++;
}

static int is_word(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

/* A <|"|>…<|"|> string: its raw text, escaped into out as a JSON string. */
static int parse_delim_string(parser *p, mx_strbuf *out) {
  const size_t at = p->i;
  p->i += strlen(STR_DELIM);
  const char *end = NULL;
  for (size_t j = p->i; j + strlen(STR_DELIM) <= p->n; j++)
    if (!memcmp(p->s + j, STR_DELIM, strlen(STR_DELIM))) {
      end = p->s + j;
      break;
    }
  if (!end) return fail_at(p, at, "unterminated <|\"|> string");
  mx_strbuf_put(out, "\"", 1);
  put_escaped(out, p->s + p->i, (size_t)(end - (p->s + p->i)));
  mx_strbuf_put(out, "\"", 1);
  p->i = (size_t)(end - p->s) + strlen(STR_DELIM);
  return 0;
}

/* A standard JSON string "...": validated and copied as it is. */
static int parse_json_string(parser *p, mx_strbuf *out) {
  const size_t at = p->i++;
  while (p->i < p->n && p->s[p->i] != '"') {
    const unsigned char c = (unsigned char)p->s[p->i];
    if (c < 0x20) return fail_at(p, p->i, "control character in a string");
    if (c == '\\') {
      if (p->i + 1 >= p->n) break;
      const char e = p->s[p->i + 1];
      if (e == 'u') {
        for (int k = 2; k < 6; k++) {
          const char h = p->i + (size_t)k < p->n ? p->s[p->i + (size_t)k] : 0;
          if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
            return fail_at(p, p->i, "bad \\u escape in a string");
        }
        p->i += 6;
      } else if (strchr("\"\\/bfnrt", e) && e) p->i += 2;
      else return fail_at(p, p->i, "bad escape in a string");
    } else p->i++;
  }
  if (p->i >= p->n) return fail_at(p, at, "unterminated string");
  p->i++;
  mx_strbuf_put(out, p->s + at, p->i - at);
  return 0;
}

/* A JSON number, copied as it is. */
static int parse_number(parser *p, mx_strbuf *out) {
  const size_t at = p->i;
  const char *s = p->s;
  size_t i = p->i;
  if (i < p->n && s[i] == '-') i++;
  if (i < p->n && s[i] == '0') i++;
  else if (i < p->n && s[i] >= '1' && s[i] <= '9')
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  else return fail_at(p, at, "expected a value");
  if (i < p->n && s[i] == '.') {
    i++;
    if (!(i < p->n && s[i] >= '0' && s[i] <= '9')) return fail_at(p, i, "expected a digit after '.'");
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  }
  if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < p->n && (s[i] == '+' || s[i] == '-')) i++;
    if (!(i < p->n && s[i] >= '0' && s[i] <= '9')) return fail_at(p, i, "expected an exponent");
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  }
  if (i < p->n && is_word((unsigned char)s[i])) return fail_at(p, at, "expected a value");
  mx_strbuf_put(out, s + at, i - at);
  p->i = i;
  return 0;
}

static int parse_value(parser *p, mx_strbuf *out, int depth);

/* After an opening bracket at p->i: 1 when the list is empty (closed too), 0 when an item
 * follows, -1 on error. */
static int list_open(parser *p, mx_strbuf *out, char close, int depth) {
  if (depth > MAX_DEPTH) return fail_at(p, p->i, "arguments nested too deeply");
  mx_strbuf_put(out, p->s + p->i++, 1);
  skip_space(p);
  if (p->i < p->n && p->s[p->i] == close) {
    mx_strbuf_put(out, p->s + p->i++, 1);
    return 1;
  }
  return 0;
}

/* After an item: 1 when another follows (','), 0 when the list closed, -1 on error. */
static int list_next(parser *p, mx_strbuf *out, char close) {
  skip_space(p);
  if (p->i < p->n && (p->s[p->i] == ',' || p->s[p->i] == close)) {
    const int more = p->s[p->i] == ',';
    mx_strbuf_put(out, p->s + p->i++, 1);
    return more;
  }
  return fail_at(p, p->i, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

/* A key: a bare word, a <|"|> string or a JSON string, written as a JSON string. */
static int parse_key(parser *p, mx_strbuf *out) {
  skip_space(p);
  if (starts(p, STR_DELIM)) return parse_delim_string(p, out);
  if (p->i < p->n && p->s[p->i] == '"') return parse_json_string(p, out);
  const size_t k0 = p->i;
  while (p->i < p->n && (is_word((unsigned char)p->s[p->i]) || p->s[p->i] == '-')) p->i++;
  if (p->i == k0) return fail_at(p, p->i, "expected a key");
  mx_strbuf_put(out, "\"", 1);
  put_escaped(out, p->s + k0, p->i - k0);
  mx_strbuf_put(out, "\"", 1);
  return 0;
}

/* {key:value,...} (the opening brace at p->i) */
static int parse_object(parser *p, mx_strbuf *out, int depth) {
  int r = list_open(p, out, '}', depth);
  if (r) return r < 0 ? -1 : 0;
  do {
    if (parse_key(p, out)) return -1;
    skip_space(p);
    if (p->i >= p->n || p->s[p->i] != ':') return fail_at(p, p->i, "expected ':' after a key");
    mx_strbuf_put(out, p->s + p->i++, 1);
    if (parse_value(p, out, depth + 1)) return -1;
  } while ((r = list_next(p, out, '}')) == 1);
  return r;
}

/* [value,...] (the opening bracket at p->i) */
static int parse_array(parser *p, mx_strbuf *out, int depth) {
  int r = list_open(p, out, ']', depth);
  if (r) return r < 0 ? -1 : 0;
  do {
    if (parse_value(p, out, depth + 1)) return -1;
  } while ((r = list_next(p, out, ']')) == 1);
  return r;
}

static int parse_value(parser *p, mx_strbuf *out, int depth) {
  skip_space(p);
  if (p->i >= p->n) return fail_at(p, p->i, "expected a value");
  const char c = p->s[p->i];
  if (starts(p, STR_DELIM)) return parse_delim_string(p, out);
  if (c == '"') return parse_json_string(p, out);
  if (c == '{') return parse_object(p, out, depth);
  if (c == '[') return parse_array(p, out, depth);
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++)
    if (starts(p, words[k]) && !(p->i + strlen(words[k]) < p->n && is_word((unsigned char)p->s[p->i + strlen(words[k])]))) {
      mx_strbuf_puts(out, words[k]);
      p->i += strlen(words[k]);
      return 0;
    }
  return parse_number(p, out);
}

/* call:NAME{...} at p->i, appended to calls as one element of the result array. */
static int parse_call(parser *p, mx_strbuf *calls, mx_strbuf *args) {
  if (!starts(p, "call:")) return fail_at(p, p->i, "expected call:NAME{...}");
  p->i += 5;
  const size_t n0 = p->i;
  while (p->i < p->n && (is_word((unsigned char)p->s[p->i]) || p->s[p->i] == '-')) p->i++;
  if (p->i == n0) return fail_at(p, p->i, "expected the function's name after call:");
  const size_t n1 = p->i;
  if (p->i >= p->n || p->s[p->i] != '{') return fail_at(p, p->i, "expected '{' after the function's name");
  args->n = 0;
  if (parse_object(p, args, 0)) return -1;
  if (calls->n > 1) mx_strbuf_put(calls, ",", 1);
  mx_strbuf_puts(calls, "{\"type\":\"function\",\"function\":{\"name\":\"");
  put_escaped(calls, p->s + n0, n1 - n0);
  mx_strbuf_puts(calls, "\",\"arguments\":\"");
  put_escaped(calls, args->p ? args->p : "", args->n);
  mx_strbuf_puts(calls, "\"}}");
  return 0;
}

static const char *find(const char *s, size_t n, size_t from, const char *lit) {
  const size_t l = strlen(lit);
  for (size_t i = from; i + l <= n; i++)
    if (!memcmp(s + i, lit, l)) return s + i;
  return NULL;
}

char *mlxrt_parse_tool_calls(const mlxrt_model *m, const char *text, size_t len, char **content,
                             mlxrt_error *err) {
  (void)m; /* one format (Gemma 4's); text without its markers has no calls */
  if (!text && len) {
    mx_fail(err, "tool call: text is NULL but its length is %zu", len);
    return NULL;
  }
  for (size_t i = 0; i < len;) {
    const size_t l = mx_utf8_len((const unsigned char *)text + i, len - i);
    if (!l) {
      mx_fail(err, "tool call: invalid UTF-8 at offset %zu", i);
      return NULL;
    }
    i += l;
  }
  mx_strbuf calls = {0}, args = {0}, rest = {0};
  parser p = {text, len, 0, err};
  int rc = -1;
  mx_strbuf_put(&calls, "[", 1);
  mx_strbuf_put(&rest, "", 0);
  for (;;) {
    const char *open = find(text, len, p.i, CALL_OPEN), *stray = find(text, len, p.i, CALL_CLOSE);
    if (stray && (!open || stray < open)) {
      fail_at(&p, (size_t)(stray - text), "<tool_call|> without <|tool_call>");
      goto out;
    }
    if (!open) {
      mx_strbuf_put(&rest, text + p.i, len - p.i);
      break;
    }
    mx_strbuf_put(&rest, text + p.i, (size_t)(open - text) - p.i);
    const size_t block = (size_t)(open - text);
    p.i = block + strlen(CALL_OPEN);
    for (;;) {
      skip_space(&p);
      if (starts(&p, CALL_CLOSE)) break;
      if (p.i >= len) {
        fail_at(&p, block, "<|tool_call> without <tool_call|>");
        goto out;
      }
      if (parse_call(&p, &calls, &args)) goto out;
      skip_space(&p);
      if (p.i < len && text[p.i] == ',') p.i++;
    }
    p.i += strlen(CALL_CLOSE);
  }
  mx_strbuf_put(&calls, "]", 1);
  if (calls.oom || args.oom || rest.oom) {
    mx_fail(err, "tool call: out of memory");
    goto out;
  }
  rc = 0;
out:
  free(args.p);
  if (rc) {
    free(calls.p);
    free(rest.p);
    return NULL;
  }
  if (content) *content = rest.p;
  else free(rest.p);
  return calls.p;
}
