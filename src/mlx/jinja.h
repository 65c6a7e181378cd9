/* A Jinja2 template interpreter for chat templates. It implements what Hugging Face
 * transformers renders them with: jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) with loop controls (break/continue), a `tojson` filter equal to
 * json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=), and the globals
 * raise_exception(msg), strftime_now(fmt), dict(...) and namespace(...). Values follow Python's
 * semantics (str() of None/True/floats/lists/dicts, int and float arithmetic), so the output
 * is byte-identical to what transformers renders. A construct outside that set fails with
 * "NAME:LINE:COL: unsupported ...". Recursion, output size and work are bounded. */
#ifndef MLXRT_MLX_JINJA_H
#define MLXRT_MLX_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "mlxrt.h"

typedef struct mx_jinja mx_jinja;

/* Parses src[0..len) (UTF-8); name labels error messages. NULL with err on a syntax error or
 * an unsupported construct ("NAME:LINE:COL: ..."). */
mx_jinja *mx_jinja_parse(const char *src, size_t len, const char *name, mlxrt_error *err);
void mx_jinja_free(mx_jinja *t);

typedef struct mx_jinja_options {
  int64_t now; /* unix seconds for strftime_now; 0 = time(NULL) */
} mx_jinja_options;

/* context_json: a JSON object whose members are the template's variables. Returns malloc'd
 * output (*len may be NULL) or NULL with err (raise_exception's message, or what failed and
 * where: "NAME:LINE:COL: ..."). Thread-safe: a parsed template may be rendered concurrently. */
char *mx_jinja_render(const mx_jinja *t, const char *context_json, const mx_jinja_options *o,
                      size_t *len, mlxrt_error *err);

#endif
