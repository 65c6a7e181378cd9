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
  if (r == 1)
    printf("usage: mlxrt inspect [-m] MODEL [--json]\n"
           "MODEL is a directory or a Hugging Face repo id (org/name) in the local HF cache.\n");
  if (r) return r == 1 ? 0 : 2;
  mlxrt_error err = {{0}};
  char dir[4096];
  if (gen_args_model_dir("inspect", o.path, dir, sizeof dir)) return 1;
  char *s = mlxrt_describe(dir, o.json, &err);
  if (!s) {
    cli_error("inspect", "%s", err.msg);
    return 1;
  }
  fputs(s, stdout);
  if (o.json) fputc('\n', stdout);
  free(s);
  return 0;
}
