/* Error reporting shared by every layer: a fixed buffer filled with one clear message.
 * Functions return 0 on success and -1 on failure after filling the buffer. Messages are
 * escaped as they are formatted (control bytes, invalid UTF-8) and never span lines. */
#ifndef MLXRT_BASE_ERROR_H
#define MLXRT_BASE_ERROR_H

#include "mlxrt.h"
#include "base/file.h"

#if defined(__GNUC__)
#define MX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MX_PRINTF(a, b)
#endif

/* Sets the message (if err is non-NULL) and returns -1, so callers can `return mx_fail(...)`. */
int mx_fail(mlxrt_error *err, const char *fmt, ...) MX_PRINTF(2, 3);
/* Prepends "context: " to an existing message (for adding the file name higher up). */
int mx_prefix(mlxrt_error *err, const char *fmt, ...) MX_PRINTF(2, 3);

/* Allocation that reports failure through err (never aborts). */
void *mx_malloc(size_t n, mlxrt_error *err);
void *mx_calloc(size_t count, size_t size, mlxrt_error *err);
char *mx_strdup(const char *s, mlxrt_error *err);

#endif
