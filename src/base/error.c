#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"


/* Messages carry untrusted text (tensor names, JSON strings, paths): every message is one
 * line without terminal escapes. Control bytes and invalid UTF-8 become \n, \t, \xNN; a
 * message too long for the buffer loses its middle, so the cause at its end survives. */
static void finish(char *dst, size_t cap, const char *src, size_t n) {
  char *esc = malloc(4 * n + 1);
  if (!esc) {
    snprintf(dst, cap, "out of memory formatting an error message");
    return;
  }
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)src[i];
    size_t k = mx_utf8_len((const unsigned char *)src + i, n - i);
    if (c == '\n' || c == '\t' || c == '\r') {
      esc[o++] = '\\';
      esc[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
      i++;
    } else if (k == 0 || c < 0x20 || c == 0x7f) {
      o += (size_t)sprintf(esc + o, "\\x%02x", c);
      i++;
    } else {
      memcpy(esc + o, src + i, k);
      o += k;
      i += k;
    }
  }
  esc[o] = 0;
  if (o < cap) {
    memcpy(dst, esc, o + 1);
  } else {
    static const char dots[] = " ... ";
    size_t head = (cap - sizeof dots) / 3, tail = cap - sizeof dots - head;
    /* cut on character boundaries (escapes are ASCII, so only UTF-8 continuations matter) */
    while (head > 0 && (esc[head] & 0xc0) == 0x80) head--;
    size_t from = o - tail;
    while (from < o && (esc[from] & 0xc0) == 0x80) from++;
    memcpy(dst, esc, head);
    memcpy(dst + head, dots, sizeof dots - 1);
    memcpy(dst + head + sizeof dots - 1, esc + from, o - from + 1);
  }
  free(esc);
}

int mx_fail(mlxrt_error *err, const char *fmt, ...) {
  if (!err) return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *raw = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (!raw) {
    snprintf(err->msg, sizeof err->msg, "out of memory formatting an error message");
    return -1;
  }
  va_start(ap, fmt);
  vsnprintf(raw, (size_t)n + 1, fmt, ap);
  va_end(ap);
  finish(err->msg, sizeof err->msg, raw, (size_t)n);
  free(raw);
  return -1;
}

int mx_prefix(mlxrt_error *err, const char *fmt, ...) {
  if (!err) return -1;
  char old[sizeof err->msg];
  memcpy(old, err->msg, sizeof old);
  old[sizeof old - 1] = 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  size_t ol = strlen(old);
  char *both = n >= 0 ? malloc((size_t)n + 2 + ol + 1) : NULL;
  if (!both) return mx_fail(err, "out of memory formatting an error message");
  va_start(ap, fmt);
  vsnprintf(both, (size_t)n + 1, fmt, ap);
  va_end(ap);
  /* the old message is escaped already, and escaping is idempotent (no backslash doubling) */
  sprintf(both + n, ": %s", old);
  finish(err->msg, sizeof err->msg, both, (size_t)n + 2 + ol);
  free(both);
  return -1;
}

void *mx_malloc(size_t n, mlxrt_error *err) {
  void *p = malloc(n ? n : 1);
  if (!p) mx_fail(err, "out of memory allocating %zu bytes", n);
  return p;
}

void *mx_calloc(size_t count, size_t size, mlxrt_error *err) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) mx_fail(err, "out of memory allocating %zu x %zu bytes", count, size);
  return p;
}

char *mx_strdup(const char *s, mlxrt_error *err) {
  size_t n = strlen(s) + 1;
  char *p = mx_malloc(n, err);
  if (p) memcpy(p, s, n);
  return p;
}
