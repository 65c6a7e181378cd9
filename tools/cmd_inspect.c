/* mlxrt inspect PATH [--json]: what a checkpoint holds and what it costs to run. */
#include <stdio.h>
#include <stdlib.h>

#include "cli_args.h"
#include "cli_num.h"
#include "commands.h"
#include "mlxrt.h"

int cmd_inspect(int argc, char **argv) {
  inspect_args o;
  int r = inspect_args_parse(&o, argc, argv);
  if (r == 1) printf("usage: mlxrt inspect [-m] MODEL_DIR [--json]\n");
  if (r) return r == 1 ? 0 : 2;
  mlxrt_error err = {{0}};
  char *s = mlxrt_describe(o.path, o.json, &err);
  if (!s) {
    cli_error("inspect", "%s", err.msg);
    return 1;
  }
  fputs(s, stdout);
  if (o.json) fputc('\n', stdout);
  free(s);
  return 0;
}
