/* PLACEHOLDER until checkpoint loading lands. */
#include <stdio.h>
#include "commands.h"
int cmd_inspect(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "mlxrt inspect: not built yet\n");
  return 1;
}
