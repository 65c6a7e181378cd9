/* mlxrt synth: a random-weight MLX checkpoint with a released model's real shapes, so
 * benchmarks need no download. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_num.h"
#include "commands.h"
#include "mlxrt.h"
#include "tools_write.h"

static volatile int g_cancel;
static void on_signal(int sig) {
  (void)sig;
  g_cancel = 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlxrt synth --like NAME --mode MODE -o DIR [--layers N] [--seed S]\n"
          "                   [--threads N] [--no-sync] [--dry-run]\n"
          "Writes an MLX-format checkpoint (config.json, generation_config.json, safetensors\n"
          "shards of at most 5 GiB) with random weights of the real shapes. No tokenizer: feed\n"
          "token ids. --layers keeps the layer pattern; --dry-run prints the plan only.\n"
          "--layers and --threads take 1..256, --seed a decimal integer 0..9223372036854775807.\n"
          "  NAME  %s\n"
          "  MODE  nvfp4, mxfp4, mxfp8, affine4 (4-bit g64), affine8 (8-bit g64), bf16\n",
          mlxrt_synth_presets());
}

static void progress(void *user, uint64_t done, uint64_t total, double seconds) {
  (void)user;
  fprintf(stderr, "\rmlxrt synth: %6.2f / %.2f GB  %5.2f GB/s", (double)done / 1e9,
          (double)total / 1e9, seconds > 0 ? (double)done / 1e9 / seconds : 0.0);
  fflush(stderr);
}

int cmd_synth(int argc, char **argv) {
  mlxrt_synth_options o;
  int pr = synth_args_parse(&o, argc, argv);
  if (pr == 1) usage(stdout);
  if (pr) return pr == 1 ? 0 : 2;
  int tty = isatty(STDERR_FILENO);
  if (tty && !o.dry_run) o.progress = progress;
  o.cancel = &g_cancel;
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  mlxrt_synth_result r;
  mlxrt_error err = {{0}};
  int rc = mlxrt_synth(&o, &r, &err);
  if (tty && o.progress) fputc('\n', stderr);
  if (rc) {
    fprintf(stderr, "mlxrt synth: %s\n", err.msg);
    return 1;
  }
  if (o.dry_run) {
    printf("%s %s: %d layers, %d tensors, %.3f B parameters, %.2f GB in %d file%s\n", o.like,
           o.mode, r.layers, r.tensors, (double)r.params / 1e9, (double)r.bytes / 1e9, r.shards,
           r.shards == 1 ? "" : "s");
    return 0;
  }
  printf("wrote %s: %s %s, %d layers, %.3f B parameters, %.2f GB in %d file%s, %.2f s "
         "(%.2f GB/s)\n",
         o.out_dir, o.like, o.mode, r.layers, (double)r.params / 1e9, (double)r.bytes / 1e9,
         r.shards, r.shards == 1 ? "" : "s", r.seconds,
         r.seconds > 0 ? (double)r.bytes / 1e9 / r.seconds : 0.0);
  return 0;
}
