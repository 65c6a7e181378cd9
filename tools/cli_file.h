/* The one reader of text files named on the command line (run -f, perplexity -f, tokenize -f
 * and tokenize's standard input): the same checks and the same errors in every command. */
#ifndef MLXRT_TOOLS_CLI_FILE_H
#define MLXRT_TOOLS_CLI_FILE_H

#include <stddef.h>

/* Largest text file a command reads (stated in the error). */
#define CLI_TEXT_LIMIT ((size_t)256 << 20)

/* Reads PATH ("-": standard input) whole into a malloc'd NUL-terminated string (*len bytes
 * before the terminator; len may be NULL). A named path must be a regular file: it is opened
 * without blocking, so a FIFO never hangs, and a directory, FIFO or device is refused by name.
 * A NUL byte is refused with its offset: the text goes on as a C string, which would
 * silently end there. Returns NULL after cli_error. */
char *cli_read_text(const char *cmd, const char *path, size_t *len);

#endif
