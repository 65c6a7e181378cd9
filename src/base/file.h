/* Opening files of an untrusted model folder: only regular files, never blocking. */
#ifndef MLXRT_BASE_FILE_H
#define MLXRT_BASE_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "mlxrt.h"

/* Opens path read-only without blocking (a FIFO would block open() forever), refuses anything
 * that is not a regular file ("is a directory", "is not a regular file"), and returns the fd
 * (blocking again) with its stat in *st; -1 with a message naming the path on failure.
 * `what` ("a .safetensors file") completes "expected ..." (NULL: "a regular file"). */
int mx_open_regular(const char *path, const char *what, struct stat *st, mlxrt_error *err);

/* Reads a whole regular file (mx_open_regular) of at most MX_MAX_SMALL_FILE bytes into a
 * NUL-terminated buffer; *len excludes the NUL. */
#define MX_MAX_SMALL_FILE (64ull << 20)
char *mx_read_file(const char *path, size_t *len, mlxrt_error *err);

/* "dir/name" (one slash), allocated; NULL with a message when out of memory. */
char *mx_path_join(const char *dir, const char *name, mlxrt_error *err);

#endif
