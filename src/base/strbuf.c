#include "base/strbuf.h"

#include <stdlib.h>
#include <string.h>

void mx_strbuf_put(mx_strbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void mx_strbuf_puts(mx_strbuf *b, const char *s) { mx_strbuf_put(b, s, strlen(s)); }
