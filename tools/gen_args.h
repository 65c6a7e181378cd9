/* Options shared by `mlxrt run` and `mlxrt chat`, spelled as llama.cpp / mlx-lm users know them. */
#ifndef MLXRT_TOOLS_GEN_ARGS_H
#define MLXRT_TOOLS_GEN_ARGS_H

#include "mlxrt.h"

typedef struct gen_args {
  const char *model;
  const char *prompt;
  const char *prompt_file;
  const char *backend;
  const char *numerics; /* --numerics float32|mlx-cpu (NULL: $MLXRT_NUMERICS or float32) */
  int threads;
  int verbose;
  mlxrt_chat_options chat;
} gen_args;

/* Parses argv (after the command name). Returns 0, 1 when --help was printed, or 2 after
 * printing a one-line error. */
int gen_args_parse(gen_args *a, int argc, char **argv, const char *cmd, const char *usage);
/* --numerics VALUE for every command that loads a model: float32 (the default: bf16 rounding
 * points like MLX, float32 accumulation) or mlx-cpu (MLX's CPU arithmetic bit for bit, see
 * docs/NUMERICS.md). Checks the value (the caller passes it as mlxrt_options.numerics) and keeps
 * mlx-cpu on the CPU backend (*backend unset or "auto" becomes "cpu"; another
 * backend is an error). value NULL changes nothing. Returns 0, or 2 after printing a
 * one-line error. */
int gen_args_apply_numerics(const char *value, const char **backend, const char *cmd);
/* Reads -f FILE into a malloc'd string (NULL with a message printed on failure). */
char *gen_args_read_prompt_file(const char *path, const char *cmd);
/* Loads the model, printing a progress line on a terminal; NULL after printing the error. */
mlxrt_model *gen_args_load_model(const gen_args *a, const char *cmd);

/* Ctrl-C: the handler only raises the flag the generation loop polls (the answer stops, the
 * program goes on). */
extern volatile int gen_args_interrupted;
void gen_args_on_sigint(int sig);
/* Streams answer text to stdout as it comes. */
void gen_args_print_text(void *user, const char *text, size_t len);

#endif
