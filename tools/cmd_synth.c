/* mlxrt synth: a random-weight MLX checkpoint with a released model's real shapes, so
 * benchmarks need no download. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
          "  NAME  %s\n"
          "  MODE  nvfp4, mxfp4, mxfp8, affine4 (4-bit g64), affine8 (8-bit g64), bf16\n",
          mlxrt_synth_presets());
}

static int parse_u64(const char *s, unsigned long long *out) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  *out = strtoull(s, &end, 0);
  return errno || *end ? -1 : 0;
}

static void progress(void *user, uint64_t done, uint64_t total, double seconds) {
  (void)user;
  fprintf(stderr, "\rmlxrt synth: %6.2f / %.2f GB  %5.2f GB/s", (double)done / 1e9,
          (double)total / 1e9, seconds > 0 ? (double)done / 1e9 / seconds : 0.0);
  fflush(stderr);
}

int cmd_synth(int argc, char **argv) {
  mlxrt_synth_options o = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    }
    int value_opt = !strcmp(a, "--like") || !strcmp(a, "--mode") || !strcmp(a, "-o") ||
                    !strcmp(a, "--out") || !strcmp(a, "--layers") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--threads") || !strcmp(a, "-t");
    if (value_opt && i + 1 >= argc) {
      fprintf(stderr, "mlxrt synth: %s needs a value\n", a);
      return 2;
    }
    unsigned long long v;
    if (!strcmp(a, "--like")) o.like = argv[++i];
    else if (!strcmp(a, "--mode")) o.mode = argv[++i];
    else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o.out_dir = argv[++i];
    else if (!strcmp(a, "--layers") || !strcmp(a, "--threads") || !strcmp(a, "-t")) {
      const char *s = argv[++i];
      if (parse_u64(s, &v) || v < 1 || v > 256) {
        fprintf(stderr, "mlxrt synth: %s expects an integer from 1 to 256, got '%s'\n", a, s);
        return 2;
      }
      if (!strcmp(a, "--layers")) o.layers = (int)v;
      else o.threads = (int)v;
    } else if (!strcmp(a, "--seed")) {
      if (parse_u64(argv[++i], &v)) {
        fprintf(stderr, "mlxrt synth: --seed expects a non-negative integer, got '%s'\n", argv[i]);
        return 2;
      }
      o.seed = v;
    } else if (!strcmp(a, "--no-sync")) o.no_sync = 1;
    else if (!strcmp(a, "--dry-run")) o.dry_run = 1;
    else {
      fprintf(stderr, "mlxrt synth: unknown option '%s' (try 'mlxrt synth --help')\n", a);
      return 2;
    }
  }
  if (!o.like || !o.mode || (!o.out_dir && !o.dry_run)) {
    fprintf(stderr, "mlxrt synth: --like, --mode and -o are required (try 'mlxrt synth --help')\n");
    return 2;
  }
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
