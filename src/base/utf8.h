/* UTF-8 well-formedness (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF),
 * shared by the JSON reader, the tokenizer and error messages. */
#ifndef MLXRT_BASE_UTF8_H
#define MLXRT_BASE_UTF8_H

#include <stddef.h>

/* Length of the well-formed UTF-8 character at s (n > 0 bytes available), or 0. */
static inline size_t mx_utf8_len(const unsigned char *s, size_t n) {
  const unsigned c = s[0];
  size_t len;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;      /* overlong */
    else if (c == 0xED) hi = 0x9F; /* surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;      /* overlong */
    else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

#endif
