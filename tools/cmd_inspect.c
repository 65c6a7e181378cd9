/* mlxrt inspect PATH [--json]: what a checkpoint holds and what it costs to run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "mlxrt.h"

int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: mlxrt inspect [-m] MODEL_DIR [--json]\n");
      return 0;
    } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
      if (++i >= argc) {
        fprintf(stderr, "mlxrt inspect: %s needs a value\n", argv[i - 1]);
        return 2;
      }
      path = argv[i];
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "mlxrt inspect: unknown option '%s'\n", argv[i]);
      return 2;
    } else path = argv[i];
  }
  if (!path) {
    fprintf(stderr, "mlxrt inspect: missing model directory (usage: mlxrt inspect MODEL_DIR [--json])\n");
    return 2;
  }
  mlxrt_error err = {{0}};
  char *s = mlxrt_describe(path, json, &err);
  if (!s) {
    fprintf(stderr, "mlxrt inspect: %s\n", err.msg);
    return 1;
  }
  fputs(s, stdout);
  if (json) fputc('\n', stdout);
  free(s);
  return 0;
}
