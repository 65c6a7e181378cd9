#include "base/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mx_fail(mlxrt_error *err, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int mx_prefix(mlxrt_error *err, const char *fmt, ...) {
  if (!err) return -1;
  char head[sizeof err->msg], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  old[sizeof old - 1] = 0;
  snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
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

char *mx_read_file(const char *path, size_t *len, mlxrt_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        fclose(f);
        mx_fail(err, "%s: out of memory reading file", path);
        return NULL;
      }
      buf = nb;
      cap = ncap;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    mx_fail(err, "%s: read error", path);
    return NULL;
  }
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}
