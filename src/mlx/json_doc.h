/* A strict JSON (RFC 8259) reader for large, untrusted documents such as tokenizer.json.
 *
 * The whole tree lives in one arena owned by the document, so a parse makes a few dozen
 * allocations instead of one per value and string, and freeing it is one walk over the chunks.
 * It touches no process-wide state (cJSON's allocator hooks are global; this is why the
 * tokenizer does not use them), so documents may be parsed on several threads at once.
 *
 * Stricter than cJSON: strings must be valid UTF-8 with no raw control characters, \u escapes
 * must pair their surrogates, nesting is limited to JSON_DOC_MAX_DEPTH and nothing but
 * whitespace may follow the top-level value. Numbers are read in the C locale whatever the
 * application's locale. */
#ifndef MLXRT_JSON_DOC_H
#define MLXRT_JSON_DOC_H

#include <stddef.h>

enum { JD_NULL, JD_FALSE, JD_TRUE, JD_NUMBER, JD_STRING, JD_ARRAY, JD_OBJECT };
#define JSON_DOC_MAX_DEPTH 512

typedef struct jd_value {
  struct jd_value *next;  /* the next element or member of the enclosing array or object */
  struct jd_value *child; /* the first element or member (arrays and objects) */
  const char *key;        /* the member name (members of an object), NUL-terminated */
  const char *str;        /* the string value (JD_STRING), NUL-terminated; may hold NULs */
  double num;             /* the number value (JD_NUMBER) */
  unsigned str_len;       /* bytes in str without the terminator */
  unsigned key_len;       /* bytes in key without the terminator */
  int type;               /* JD_* */
} jd_value;

typedef struct jd_doc jd_doc;

/* Parses text[0..len). On failure returns NULL and, when given, sets *err_off to the byte
 * offset of the problem and *err_what to a static description of it. */
jd_doc *jd_parse(const char *text, size_t len, size_t *err_off, const char **err_what);
const jd_value *jd_root(const jd_doc *d);
void jd_free(jd_doc *d);

/* The first member of object o named k; NULL when o is not an object or has no such member. */
const jd_value *jd_get(const jd_value *o, const char *k);

static inline int jd_is(const jd_value *v, int type) { return v && v->type == type; }
static inline int jd_is_bool(const jd_value *v) {
  return v && (v->type == JD_TRUE || v->type == JD_FALSE);
}

#endif
