#include "serve_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int serve_buf_add(serve_buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

int serve_buf_printf(serve_buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return -1;
  if ((size_t)n < sizeof small) return serve_buf_add(b, small, (size_t)n);
  char *big = malloc((size_t)n + 1);
  if (!big) return -1;
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  int rc = serve_buf_add(b, big, (size_t)n);
  free(big);
  return rc;
}

void serve_buf_free(serve_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* Drops the first n bytes of b. */
static void buf_consume(serve_buf *b, size_t n) {
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
  if (b->p) b->p[b->len] = 0;
}

size_t serve_partial_suffix(const char *s, size_t n, const char *pat, size_t pat_len) {
  size_t k = pat_len > 0 ? pat_len - 1 : 0;
  if (k > n) k = n;
  for (; k > 0; k--)
    if (!memcmp(s + n - k, pat, k)) return k;
  return 0;
}

/* First occurrence of pat in s[0..n), or NULL. */
static const char *find(const char *s, size_t n, const char *pat, size_t pat_len) {
  if (pat_len == 0 || pat_len > n) return NULL;
  for (size_t i = 0; i + pat_len <= n; i++)
    if (s[i] == pat[0] && !memcmp(s + i, pat, pat_len)) return s + i;
  return NULL;
}

void serve_stop_init(serve_stop_filter *f, char *const *stop, int n_stop) {
  memset(f, 0, sizeof *f);
  f->stop = stop;
  f->n_stop = n_stop;
}

int serve_stop_push(serve_stop_filter *f, const char *s, size_t n, serve_text_fn fn, void *user) {
  if (f->stopped) return 1;
  if (f->n_stop == 0) {
    if (n) fn(user, 0, s, n);
    return 0;
  }
  if (serve_buf_add(&f->held, s, n)) return -1;
  const char *first = NULL;
  for (int i = 0; i < f->n_stop; i++) {
    const char *at = find(f->held.p, f->held.len, f->stop[i], strlen(f->stop[i]));
    if (at && (!first || at < first)) first = at;
  }
  if (first) {
    if (first > f->held.p) fn(user, 0, f->held.p, (size_t)(first - f->held.p));
    f->stopped = 1;
    f->held.len = 0;
    return 1;
  }
  size_t keep = 0;
  for (int i = 0; i < f->n_stop; i++) {
    size_t k = serve_partial_suffix(f->held.p, f->held.len, f->stop[i], strlen(f->stop[i]));
    if (k > keep) keep = k;
  }
  size_t out = f->held.len - keep;
  if (out) {
    fn(user, 0, f->held.p, out);
    buf_consume(&f->held, out);
  }
  return 0;
}

void serve_stop_finish(serve_stop_filter *f, serve_text_fn fn, void *user) {
  if (!f->stopped && f->held.len) fn(user, 0, f->held.p, f->held.len);
  f->held.len = 0;
}

void serve_stop_free(serve_stop_filter *f) { serve_buf_free(&f->held); }

void serve_tool_init(serve_tool_splitter *t, int enabled) {
  memset(t, 0, sizeof *t);
  t->enabled = enabled;
}

int serve_tool_push(serve_tool_splitter *t, const char *s, size_t n, serve_text_fn fn, void *user) {
  if (!t->enabled) {
    if (n) fn(user, 0, s, n);
    return 0;
  }
  if (serve_buf_add(&t->buf, s, n)) return -1;
  const size_t open_len = strlen(SERVE_TOOL_OPEN), close_len = strlen(SERVE_TOOL_CLOSE);
  for (;;) {
    if (t->inside) {
      const char *end = find(t->buf.p, t->buf.len, SERVE_TOOL_CLOSE, close_len);
      if (!end) return 0;
      size_t seg = (size_t)(end - t->buf.p) + close_len;
      fn(user, 1, t->buf.p, seg);
      buf_consume(&t->buf, seg);
      t->inside = 0;
      continue;
    }
    const char *at = find(t->buf.p, t->buf.len, SERVE_TOOL_OPEN, open_len);
    if (at) {
      if (at > t->buf.p) fn(user, 0, t->buf.p, (size_t)(at - t->buf.p));
      buf_consume(&t->buf, (size_t)(at - t->buf.p));
      t->inside = 1;
      continue;
    }
    size_t keep = serve_partial_suffix(t->buf.p, t->buf.len, SERVE_TOOL_OPEN, open_len);
    if (t->buf.len > keep) {
      fn(user, 0, t->buf.p, t->buf.len - keep);
      buf_consume(&t->buf, t->buf.len - keep);
    }
    return 0;
  }
}

void serve_tool_finish(serve_tool_splitter *t, serve_text_fn fn, void *user) {
  if (t->buf.len) fn(user, 0, t->buf.p, t->buf.len);
  t->buf.len = 0;
  t->inside = 0;
}

void serve_tool_free(serve_tool_splitter *t) { serve_buf_free(&t->buf); }
