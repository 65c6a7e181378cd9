/* The Jinja lexer: text between tags, and the tokens inside {{ }} and {% %}, with jinja2's
 * whitespace rules for trim_blocks=True and lstrip_blocks=True: a block or comment tag eats
 * one newline after it and the blanks before it on its line; `-` next to a delimiter eats all
 * whitespace on that side; `+` keeps it. Line breaks are normalized to \n and one trailing
 * newline of the source is dropped (keep_trailing_newline=False). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/jinja_internal.h"

/* ---- arena ------------------------------------------------------------------------------ */
typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

void *jj_arena_alloc(void **arena, size_t n) {
  chunk *c = *arena;
  n = (n + 15) & ~(size_t)15;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    chunk *k = malloc(sizeof *k + cap);
    if (!k) return NULL;
    k->next = c;
    k->used = 0;
    k->cap = cap;
    *arena = c = k;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

void jj_arena_free(void *arena) {
  for (chunk *c = arena; c;) {
    chunk *n = c->next;
    free(c);
    c = n;
  }
}

/* ---- lexer ------------------------------------------------------------------------------ */
typedef struct lx {
  const char *s; /* normalized source */
  size_t n, i;
  int line;
  size_t line_start;
  const char *name;
  void **arena;
  jlex *out;
  mlxrt_error *err;
} lx;

static int lx_fail(lx *L, size_t at, const char *what) {
  int line = 1;
  size_t ls = 0;
  for (size_t k = 0; k < at && k < L->n; k++)
    if (L->s[k] == '\n') line++, ls = k + 1;
  mx_fail(L->err, "%s:%d:%zu: %s", L->name, line, at - ls + 1, what);
  return -1;
}

static jtok *lx_push(lx *L, int type, size_t at) {
  if (L->out->n == L->out->cap) {
    size_t cap = L->out->cap ? L->out->cap * 2 : 256;
    jtok *t = realloc(L->out->tok, cap * sizeof *t);
    if (!t) {
      mx_fail(L->err, "%s: out of memory", L->name);
      return NULL;
    }
    L->out->tok = t;
    L->out->cap = cap;
  }
  while (L->i < at) L->i++; /* positions only move forward */
  int line = 1;
  size_t ls = 0;
  /* line of `at`: count from the last known line start */
  line = L->line;
  ls = L->line_start;
  for (size_t k = ls; k < at; k++)
    if (L->s[k] == '\n') line++, ls = k + 1;
  L->line = line;
  L->line_start = ls;
  jtok *t = &L->out->tok[L->out->n++];
  memset(t, 0, sizeof *t);
  t->type = type;
  t->line = line;
  t->col = (int)(at - ls + 1);
  return t;
}

static char *lx_dup(lx *L, const char *s, size_t n) {
  char *p = jj_arena_alloc(L->arena, n + 1);
  if (!p) {
    mx_fail(L->err, "%s: out of memory", L->name);
    return NULL;
  }
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

static int is_ws(const char *s, size_t n, size_t *k) { return jj_isspace_at(s, n, k); }

static size_t skip_ws(const lx *L, size_t i) {
  size_t k;
  while (i < L->n && is_ws(L->s + i, L->n - i, &k)) i += k;
  return i;
}

/* Emits text[a..b) after the whitespace rules of the tag that follows it (sign: the tag's
 * '-', '+' or 0; lstrip: whether lstrip_blocks applies to that tag). */
static int emit_text(lx *L, size_t a, size_t b, char sign, int lstrip, int line_starting) {
  if (sign == '-') {
    b = a + jj_rspace(L->s + a, b - a);
  } else if (sign != '+' && lstrip) {
    size_t lpos = a;
    for (size_t k = b; k > a; k--)
      if (L->s[k - 1] == '\n') {
        lpos = k;
        break;
      }
    if (lpos > a || line_starting) {
      size_t e = lpos, k;
      while (e < b && is_ws(L->s + e, b - e, &k)) e += k;
      if (e == b && b > lpos) b = lpos;
    }
  }
  if (b <= a) return 0;
  char *p = lx_dup(L, L->s + a, b - a);
  jtok *t = p ? lx_push(L, T_TEXT, a) : NULL;
  if (!t) return -1;
  t->s = p;
  t->n = b - a;
  return 0;
}

/* The end of a block or comment tag at i ("-%}", "+%}", "%}" with c = '%' or '#'): returns
 * the position after it and its trailing whitespace handling, or 0 if none is there. */
static size_t tag_end(const lx *L, size_t i, char c) {
  if (i + 3 <= L->n && (L->s[i] == '-' || L->s[i] == '+') && L->s[i + 1] == c && L->s[i + 2] == '}') {
    if (L->s[i] == '+') return i + 3;
    return skip_ws(L, i + 3);
  }
  if (i + 2 <= L->n && L->s[i] == c && L->s[i + 1] == '}') {
    i += 2;
    if (i < L->n && L->s[i] == '\n') i++; /* trim_blocks */
    return i;
  }
  return 0;
}

static int word_at(const lx *L, size_t i, const char *w) {
  size_t n = strlen(w);
  if (i + n > L->n || memcmp(L->s + i, w, n)) return 0;
  char c = i + n < L->n ? L->s[i + n] : 0;
  return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
}

/* A string literal with Python's escapes (jinja2 decodes them as unicode-escape). */
static int lex_string(lx *L, size_t *pi) {
  size_t i = *pi, st = i;
  char q = L->s[i++];
  jsb b = {0};
  for (;;) {
    if (i >= L->n) {
      free(b.p);
      return lx_fail(L, st, "unterminated string literal");
    }
    char c = L->s[i];
    if (c == q) {
      i++;
      break;
    }
    if (c != '\\' || i + 1 >= L->n) {
      jsb_addc(&b, c);
      i++;
      continue;
    }
    char e = L->s[i + 1];
    i += 2;
    const char *simple = strchr("n\nt\tr\ra\ab\bf\fv\v\\\\''\"\"", e);
    if (e && simple && ((simple - "n\nt\tr\ra\ab\bf\fv\v\\\\''\"\"") % 2) == 0) {
      jsb_addc(&b, simple[1]);
    } else if (e == '\n') {
      /* line continuation */
    } else if (e >= '0' && e <= '7') {
      unsigned v = (unsigned)(e - '0');
      for (int k = 0; k < 2 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; k++)
        v = v * 8 + (unsigned)(L->s[i++] - '0');
      char u[4];
      jsb_add(&b, u, jj_utf8_enc(v, u));
    } else if (e == 'x' || e == 'u' || e == 'U') {
      int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      uint32_t v = 0;
      for (int k = 0; k < nd; k++) {
        int h = i < L->n ? hexval(L->s[i]) : -1;
        if (h < 0) {
          free(b.p);
          return lx_fail(L, i, "truncated escape in a string literal");
        }
        v = v * 16 + (uint32_t)h;
        i++;
      }
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        free(b.p);
        return lx_fail(L, i, "invalid code point in a string literal");
      }
      char u[4];
      jsb_add(&b, u, jj_utf8_enc(v, u));
    } else if (e == 'N') {
      free(b.p);
      return lx_fail(L, i - 2, "unsupported escape: \\N{...}");
    } else {
      jsb_addc(&b, '\\');
      jsb_addc(&b, e);
    }
  }
  if (b.oom) {
    free(b.p);
    return lx_fail(L, st, "out of memory");
  }
  char *p = lx_dup(L, b.p ? b.p : "", b.n);
  size_t n = b.n;
  free(b.p);
  jtok *t = p ? lx_push(L, T_STRING, st) : NULL;
  if (!t) return -1;
  t->s = p;
  t->n = n;
  *pi = i;
  return 0;
}

static int lex_number(lx *L, size_t *pi) {
  size_t i = *pi, st = i;
  char buf[128];
  size_t bn = 0;
  int is_float = 0;
  int prev_dot = L->out->n > 0 && L->out->tok[L->out->n - 1].type == T_OP &&
                 L->out->tok[L->out->n - 1].n == 1 && L->out->tok[L->out->n - 1].s[0] == '.';
#define DIGITS()                                                                   \
  while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') ||                        \
                      (L->s[i] == '_' && i + 1 < L->n && L->s[i + 1] >= '0' && L->s[i + 1] <= '9'))) { \
    if (L->s[i] != '_' && bn < sizeof buf - 8) buf[bn++] = L->s[i];               \
    i++;                                                                           \
  }
  DIGITS();
  if (!prev_dot && i + 1 < L->n && L->s[i] == '.' && L->s[i + 1] >= '0' && L->s[i + 1] <= '9') {
    is_float = 1;
    buf[bn++] = '.';
    i++;
    DIGITS();
  }
  if (!prev_dot && i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
    size_t j = i + 1;
    if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
    if (j < L->n && L->s[j] >= '0' && L->s[j] <= '9') {
      is_float = 1;
      buf[bn++] = 'e';
      if (L->s[i + 1] == '-') buf[bn++] = '-';
      i = j;
      DIGITS();
    }
  }
#undef DIGITS
  buf[bn] = 0;
  jtok *t = lx_push(L, is_float ? T_FLOAT : T_INT, st);
  if (!t) return -1;
  t->s = L->s + st;
  t->n = i - st;
  if (is_float) {
    /* the literal's digits without its point, read in any locale */
    char m[160];
    size_t mn = 0;
    long exp10 = 0, frac = 0;
    int in_frac = 0;
    char *e = strchr(buf, 'e');
    for (char *c = buf; *c && c != e; c++) {
      if (*c == '.') {
        in_frac = 1;
        continue;
      }
      if (mn < 40) m[mn++] = *c, frac += in_frac;
      else if (!in_frac) exp10++;
    }
    if (e) exp10 += strtol(e + 1, NULL, 10);
    snprintf(m + mn, sizeof m - mn, "e%ld", exp10 - frac);
    t->fval = strtod(m, NULL);
  } else {
    if (bn > 19 || (bn == 19 && strcmp(buf, "9223372036854775807") > 0))
      return lx_fail(L, st, "unsupported integer literal: beyond 64 bits");
    t->ival = strtoll(buf, NULL, 10);
  }
  *pi = i;
  return 0;
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                  "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":",
                                  "|", ",", ";"};

/* The tokens of one tag from *pi up to and including its end delimiter. */
static int lex_tag(lx *L, size_t *pi, int is_block, size_t open_at, int *line_starting) {
  size_t i = *pi;
  int depth = 0;
  for (;;) {
    i = skip_ws(L, i);
    if (i >= L->n)
      return lx_fail(L, open_at, is_block ? "unterminated block tag: missing %}" : "unterminated variable tag: missing }}");
    if (depth == 0) {
      size_t e = 0;
      if (is_block) {
        e = tag_end(L, i, '%');
      } else if (i + 3 <= L->n && !memcmp(L->s + i, "-}}", 3)) {
        e = skip_ws(L, i + 3);
      } else if (i + 2 <= L->n && !memcmp(L->s + i, "}}", 2)) {
        e = i + 2;
      }
      if (e) {
        if (!lx_push(L, is_block ? T_BLOCK_END : T_VAR_END, i)) return -1;
        *line_starting = L->s[e - 1] == '\n';
        *pi = e;
        return 0;
      }
    }
    char c = L->s[i];
    if (c == '\'' || c == '"') {
      if (lex_string(L, &i)) return -1;
    } else if (c >= '0' && c <= '9') {
      if (lex_number(L, &i)) return -1;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
      size_t st = i;
      while (i < L->n && ((L->s[i] >= 'a' && L->s[i] <= 'z') || (L->s[i] >= 'A' && L->s[i] <= 'Z') ||
                          (L->s[i] >= '0' && L->s[i] <= '9') || L->s[i] == '_'))
        i++;
      jtok *t = lx_push(L, T_NAME, st);
      if (!t) return -1;
      t->s = L->s + st;
      t->n = i - st;
    } else {
      size_t k = 0;
      for (; k < sizeof OPS / sizeof *OPS; k++)
        if (!strncmp(L->s + i, OPS[k], strlen(OPS[k]))) break;
      if (k == sizeof OPS / sizeof *OPS) {
        char msg[64];
        snprintf(msg, sizeof msg, "unexpected character '%c'", c);
        return lx_fail(L, i, msg);
      }
      size_t len = strlen(OPS[k]);
      if (OPS[k][0] == '(' || OPS[k][0] == '[' || OPS[k][0] == '{') {
        if (++depth > JJ_MAX_PARSE_DEPTH) return lx_fail(L, i, "brackets nested too deeply");
      } else if (OPS[k][0] == ')' || OPS[k][0] == ']' || OPS[k][0] == '}') {
        if (depth == 0) return lx_fail(L, i, "unexpected closing bracket");
        depth--;
      }
      jtok *t = lx_push(L, T_OP, i);
      if (!t) return -1;
      t->s = L->s + i;
      t->n = len;
      i += len;
    }
  }
}

/* {% raw %}...{% endraw %}: the body is text. i: just after "{%" and its sign. */
static int lex_raw(lx *L, size_t *pi, size_t open_at) {
  size_t i = skip_ws(L, *pi) + 3; /* "raw" */
  i = skip_ws(L, i);
  int line_starting = 0;
  if (i + 3 <= L->n && !memcmp(L->s + i, "-%}", 3)) {
    i = skip_ws(L, i + 3);
    line_starting = L->s[i - 1] == '\n';
  } else if (i + 2 <= L->n && !memcmp(L->s + i, "%}", 2)) {
    i += 2; /* no trim_blocks after raw */
  } else {
    return lx_fail(L, open_at, "expected %} after raw");
  }
  for (size_t k = i; k + 1 < L->n; k++) {
    if (L->s[k] != '{' || L->s[k + 1] != '%') continue;
    size_t j = k + 2;
    char sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+')) sign = L->s[j++];
    j = skip_ws(L, j);
    if (!word_at(L, j, "endraw")) continue;
    size_t e = tag_end(L, skip_ws(L, j + 6), '%');
    if (!e) continue;
    if (emit_text(L, i, k, sign, 1, line_starting)) return -1;
    *pi = e;
    return 0;
  }
  return lx_fail(L, open_at, "unterminated raw block: missing {% endraw %}");
}

int jj_lex(const char *src, size_t len, const char *name, void **arena, jlex *out,
           mlxrt_error *err) {
  /* normalize \r\n and \r to \n; drop one trailing newline */
  char *s = jj_arena_alloc(arena, len + 1);
  if (!s) return mx_fail(err, "%s: out of memory", name);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      s[n++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      s[n++] = src[i];
    }
  }
  if (n && s[n - 1] == '\n') n--;
  s[n] = 0;
  lx L = {s, n, 0, 1, 0, name, arena, out, err};
  size_t i = 0;
  int line_starting = 1;
  while (i < n) {
    size_t k = i;
    while (k + 1 < n && !(s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#'))) k++;
    if (k + 1 >= n) {
      if (emit_text(&L, i, n, 0, 0, 0)) return -1;
      break;
    }
    char kind = s[k + 1], sign = 0;
    size_t j = k + 2;
    if (j < n && (s[j] == '-' || s[j] == '+')) sign = s[j++];
    if (kind == '%' && word_at(&L, skip_ws(&L, j), "raw")) {
      if (emit_text(&L, i, k, sign, 1, line_starting)) return -1;
      i = j;
      if (lex_raw(&L, &i, k)) return -1;
      line_starting = s[i - 1] == '\n';
      continue;
    }
    if (emit_text(&L, i, k, sign, kind != '{', line_starting)) return -1;
    if (kind == '#') {
      size_t e = 0, c = j;
      for (; c + 1 < n; c++)
        if (s[c] == '#' && s[c + 1] == '}') {
          size_t from = (c > j && (s[c - 1] == '-' || s[c - 1] == '+')) ? c - 1 : c;
          e = tag_end(&L, from, '#');
          break;
        }
      if (!e) return lx_fail(&L, k, "unterminated comment: missing #}");
      i = e;
      line_starting = s[e - 1] == '\n';
      continue;
    }
    if (!lx_push(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, k)) return -1;
    i = j;
    if (lex_tag(&L, &i, kind == '%', k, &line_starting)) return -1;
  }
  jtok *t = lx_push(&L, T_EOF, n);
  return t ? 0 : -1;
}
