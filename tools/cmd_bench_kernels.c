/* PLACEHOLDER until the CPU kernels land (replaced by the kernel benchmark). */
#include <stdio.h>
#include "commands.h"
int cmd_bench_kernels(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "mlxrt bench-kernels: not built yet\n");
  return 1;
}
