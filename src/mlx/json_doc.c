/* A strict JSON reader into one arena (see json_doc.h). Recursive descent with a depth limit;
 * every read is bounded by the given length (the text need not be NUL-terminated). */
#include "mlx/json_doc.h"

#include <locale.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/utf8.h"

/* ---- arena -------------------------------------------------------------------------------- */
/* Chunks are mapped directly and marked for transparent huge pages: Gemma's tokenizer.json
 * becomes ~100 MB of tree, and 4 KB page faults are a tenth of its load time otherwise. */
typedef struct jd_chunk {
  struct jd_chunk *next;
  size_t used, cap, map_bytes;
} jd_chunk;
#define JD_CHUNK ((size_t)32 << 20)

struct jd_doc {
  jd_chunk *chunks; /* the one being filled first */
  jd_value *root;
};

static void *chunk_new(jd_doc *d, size_t need) {
  size_t cap = need > JD_CHUNK / 4 ? need : JD_CHUNK;
  size_t bytes = sizeof(jd_chunk) + cap;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  jd_chunk *c = p;
  c->cap = cap;
  c->used = 0;
  c->map_bytes = bytes;
  if (d->chunks && cap != JD_CHUNK) { /* a big block: keep filling the current chunk */
    c->next = d->chunks->next;
    d->chunks->next = c;
  } else {
    c->next = d->chunks;
    d->chunks = c;
  }
  return c;
}

static void *arena_alloc(jd_doc *d, size_t n) {
  n = (n + 7) & ~(size_t)7;
  jd_chunk *c = d->chunks;
  if (!c || c->cap - c->used < n) {
    c = chunk_new(d, n);
    if (!c) return NULL;
  }
  void *p = (char *)(c + 1) + c->used;
  c->used += n;
  return p;
}

/* Gives back the tail of the most recent allocation p (of `had` bytes) beyond `keep` bytes. */
static void arena_shrink(jd_doc *d, void *p, size_t had, size_t keep) {
  jd_chunk *c = d->chunks;
  had = (had + 7) & ~(size_t)7;
  keep = (keep + 7) & ~(size_t)7;
  if (c && (char *)p + had == (char *)(c + 1) + c->used) c->used -= had - keep;
}

void jd_free(jd_doc *d) {
  if (!d) return;
  while (d->chunks) {
    jd_chunk *n = d->chunks->next;
    munmap(d->chunks, d->chunks->map_bytes);
    d->chunks = n;
  }
  free(d);
}

const jd_value *jd_root(const jd_doc *d) { return d ? d->root : NULL; }

const jd_value *jd_get(const jd_value *o, const char *k) {
  if (!o || o->type != JD_OBJECT || !k) return NULL;
  for (const jd_value *m = o->child; m; m = m->next)
    if (!strcmp(m->key, k)) return m;
  return NULL;
}

/* ---- parser ------------------------------------------------------------------------------- */
typedef struct {
  jd_doc *d;
  const unsigned char *s, *end, *p;
  const char *what; /* the first error; p is left where it was found */
} parser;

static int fail(parser *ps, const char *what) {
  if (!ps->what) ps->what = what;
  return -1;
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
    ps->p++;
}

static int hex4(parser *ps, unsigned *out) {
  if (ps->end - ps->p < 4) return fail(ps, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = ps->p[i], h;
    if (c >= '0' && c <= '9') h = c - '0';
    else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
    else return fail(ps, "bad hex digit in \\u escape");
    v = v << 4 | h;
  }
  ps->p += 4;
  *out = v;
  return 0;
}

static size_t put_utf8(unsigned char *o, unsigned cp) {
  if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
  if (cp < 0x800) return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}


/* Parses the string whose opening quote is at ps->p into the arena. */
static int parse_string(parser *ps, const char **out, unsigned *out_len) {
  ps->p++; /* the quote */
  const unsigned char *q = ps->p;
  while (q < ps->end && *q != '"' && *q != '\\' && *q >= 0x20 && *q < 0x80) q++;
  size_t room = (size_t)(ps->end - ps->p) + 1; /* decoded text is never longer than the raw */
  size_t simple = (size_t)(q - ps->p);
  if (q < ps->end && *q == '"') room = simple + 1;
  else {
    /* bound the allocation by the raw string's extent (up to the next unescaped quote) */
    const unsigned char *r = q;
    while (r < ps->end && *r != '"') r += (*r == '\\' && r + 1 < ps->end) ? 2 : 1;
    room = (size_t)(r - ps->p) + 1;
  }
  if (room > UINT32_MAX) return fail(ps, "string longer than 4 GiB");
  unsigned char *o = arena_alloc(ps->d, room);
  if (!o) return fail(ps, "out of memory");
  memcpy(o, ps->p, simple);
  size_t n = simple;
  ps->p = q;
  for (;;) {
    if (ps->p >= ps->end) return fail(ps, "unterminated string");
    unsigned c = *ps->p;
    if (c == '"') break;
    if (c < 0x20) return fail(ps, "control character in string");
    if (c == '\\') {
      if (ps->end - ps->p < 2) return fail(ps, "unterminated string");
      unsigned e = ps->p[1];
      ps->p += 2;
      switch (e) {
      case '"': o[n++] = '"'; break;
      case '\\': o[n++] = '\\'; break;
      case '/': o[n++] = '/'; break;
      case 'b': o[n++] = '\b'; break;
      case 'f': o[n++] = '\f'; break;
      case 'n': o[n++] = '\n'; break;
      case 'r': o[n++] = '\r'; break;
      case 't': o[n++] = '\t'; break;
      case 'u': {
        unsigned cp;
        if (hex4(ps, &cp)) return -1;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(ps, "lone low surrogate in \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned lo;
          if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
            return fail(ps, "high surrogate without its low half");
          ps->p += 2;
          if (hex4(ps, &lo)) return -1;
          if (lo < 0xDC00 || lo > 0xDFFF) return fail(ps, "high surrogate without its low half");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        n += put_utf8(o + n, cp); /* at most 4 bytes from at least 6 raw ones */
        break;
      }
      default: ps->p -= 2; return fail(ps, "unknown escape in string");
      }
    } else if (c < 0x80) {
      o[n++] = (unsigned char)c;
      ps->p++;
    } else {
      size_t k = mx_utf8_len(ps->p, (size_t)(ps->end - ps->p));
      if (!k) return fail(ps, "invalid UTF-8 in string");
      memcpy(o + n, ps->p, k);
      n += k;
      ps->p += k;
    }
  }
  ps->p++; /* the closing quote */
  o[n] = 0;
  arena_shrink(ps->d, o, room, n + 1);
  *out = (const char *)o;
  *out_len = (unsigned)n;
  return 0;
}

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;
static void make_c_locale(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

static int parse_number(parser *ps, double *out) {
  const unsigned char *b = ps->p, *p = b, *e = ps->end;
  int neg = 0, plain = 1;
  if (p < e && *p == '-') neg = 1, p++;
  if (p >= e || *p < '0' || *p > '9')
    return ps->p = p, fail(ps, neg ? "bad number" : "unexpected character");
  uint64_t ip = 0;
  int digits = 0;
  if (*p == '0') p++, digits = 1;
  else
    while (p < e && *p >= '0' && *p <= '9') ip = ip * 10 + (uint64_t)(*p++ - '0'), digits++;
  if (p < e && *p == '.') {
    plain = 0;
    p++;
    if (p >= e || *p < '0' || *p > '9') return ps->p = p, fail(ps, "bad number");
    while (p < e && *p >= '0' && *p <= '9') p++;
  }
  if (p < e && (*p == 'e' || *p == 'E')) {
    plain = 0;
    p++;
    if (p < e && (*p == '+' || *p == '-')) p++;
    if (p >= e || *p < '0' || *p > '9') return ps->p = p, fail(ps, "bad number");
    while (p < e && *p >= '0' && *p <= '9') p++;
  }
  ps->p = p;
  if (plain && digits <= 15) { /* exact in a double: the common case (ids, ranks) */
    *out = neg ? -(double)ip : (double)ip;
    return 0;
  }
  char buf[128];
  size_t n = (size_t)(p - b);
  if (n >= sizeof buf) return ps->p = b, fail(ps, "number longer than 127 characters");
  memcpy(buf, b, n);
  buf[n] = 0;
  pthread_once(&c_locale_once, make_c_locale);
  if (!c_locale) return ps->p = b, fail(ps, "no C locale for numbers");
  *out = strtod_l(buf, NULL, c_locale);
  return 0;
}

static int literal(parser *ps, const char *word, size_t n) {
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n)) return fail(ps, "unexpected character");
  ps->p += n;
  return 0;
}

static int parse_value(parser *ps, jd_value *v, int depth) {
  skip_ws(ps);
  if (ps->p >= ps->end) return fail(ps, "unexpected end of input");
  switch (*ps->p) {
  case '{':
  case '[': {
    int obj = *ps->p == '{';
    if (depth >= JSON_DOC_MAX_DEPTH) return fail(ps, "nesting deeper than 512 levels");
    v->type = obj ? JD_OBJECT : JD_ARRAY;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
      ps->p++;
      return 0;
    }
    jd_value **tail = &v->child;
    for (;;) {
      jd_value *c = arena_alloc(ps->d, sizeof *c);
      if (!c) return fail(ps, "out of memory");
      memset(c, 0, sizeof *c);
      if (obj) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a member name");
        if (parse_string(ps, &c->key, &c->key_len)) return -1;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':'");
        ps->p++;
      }
      if (parse_value(ps, c, depth + 1)) return -1;
      *tail = c;
      tail = &c->next;
      skip_ws(ps);
      if (ps->p >= ps->end) return fail(ps, "unexpected end of input");
      if (*ps->p == ',') {
        ps->p++;
        continue;
      }
      if (*ps->p == (obj ? '}' : ']')) {
        ps->p++;
        return 0;
      }
      return fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  case '"':
    v->type = JD_STRING;
    return parse_string(ps, &v->str, &v->str_len);
  case 't': v->type = JD_TRUE; return literal(ps, "true", 4);
  case 'f': v->type = JD_FALSE; return literal(ps, "false", 5);
  case 'n': v->type = JD_NULL; return literal(ps, "null", 4);
  default:
    v->type = JD_NUMBER;
    return parse_number(ps, &v->num);
  }
}

jd_doc *jd_parse(const char *text, size_t len, size_t *err_off, const char **err_what) {
  jd_doc *d = calloc(1, sizeof *d);
  parser ps = {d, (const unsigned char *)text, (const unsigned char *)text + len,
               (const unsigned char *)text, NULL};
  if (!d) {
    ps.what = "out of memory";
  } else if ((d->root = arena_alloc(d, sizeof *d->root)) == NULL) {
    ps.what = "out of memory";
  } else {
    memset(d->root, 0, sizeof *d->root);
    if (parse_value(&ps, d->root, 0) == 0) {
      skip_ws(&ps);
      if (ps.p == ps.end) return d;
      ps.what = "text after the top-level value";
    }
  }
  if (err_off) *err_off = (size_t)(ps.p - ps.s);
  if (err_what) *err_what = ps.what ? ps.what : "invalid JSON";
  jd_free(d);
  return NULL;
}
