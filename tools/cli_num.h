/* Strict parsing of command-line numbers, shared by every command: a value is a whole decimal
 * number (or a finite decimal for doubles) in the stated range, or a one-line error naming the
 * flag, what it expects and what it got. Also the one error printer of option parsing, the
 * split of "--name=value" and the check of a memory request against the machine. */
#ifndef MLXRT_TOOLS_CLI_NUM_H
#define MLXRT_TOOLS_CLI_NUM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Where cli_error writes (NULL: stderr); the fuzz target points it at a buffer to check that
 * every rejected command line gives exactly one line. */
extern FILE *cli_err_stream;

/* Prints "mlxrt CMD: MESSAGE\n" as exactly one line: control characters in the message
 * (from user input such as a flag or a path) are escaped. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A long option written with its value, "--name=value" (every long option that takes a value
 * may be written so): copies "--name" into name (size bytes; a longer name is cut, which no
 * option matches) and returns the value. NULL (name untouched) for any other argument. */
#define CLI_FLAG_MAX 48
const char *cli_long_value(const char *arg, char *name, size_t size);

/* Each returns 0 with *out set, or -1 after cli_error (then *out is unchanged). */
int cli_int(const char *cmd, const char *flag, const char *v, long long lo, long long hi, int *out);
int cli_int64(const char *cmd, const char *flag, const char *v, long long lo, long long hi, int64_t *out);
/* A finite decimal number (no NaN, no inf, no hex). */
int cli_double(const char *cmd, const char *flag, const char *v, double lo, double hi, double *out);
int cli_float(const char *cmd, const char *flag, const char *v, double lo, double hi, float *out);

/* A list of integers in lo..hi separated by commas and/or blanks, optionally in [ ] (the form
 * --ids prints and Python lists show); at least one and at most max_n values (0: no limit).
 * *out is malloc'd (free it); -1 after cli_error. */
int cli_int_list(const char *cmd, const char *flag, const char *v, long long lo, long long hi, size_t max_n,
                 int32_t **out, size_t *n);

/* Bytes of physical memory (0 when unknown). */
uint64_t cli_phys_memory(void);
/* Refuses a request that cannot fit in this machine's physical memory: returns 0 when bytes
 * fits (or the size is unknown), else -1 after "WHAT needs X GB for FOR (this machine has Y GB)". */
int cli_check_memory(const char *cmd, const char *what, const char *for_what, double bytes);

#endif
