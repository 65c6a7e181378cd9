/* A growable byte string, always NUL-terminated once anything was put. An allocation failure
 * sets `oom` and makes later puts no-ops, so a caller checks once at the end. */
#ifndef MLXRT_BASE_STRBUF_H
#define MLXRT_BASE_STRBUF_H

#include <stddef.h>

typedef struct mx_strbuf {
  char *p;
  size_t n, cap;
  int oom;
} mx_strbuf;

void mx_strbuf_put(mx_strbuf *b, const char *s, size_t n);
void mx_strbuf_puts(mx_strbuf *b, const char *s);

#endif
