#include "gen_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int need_int(const char *v, const char *flag, const char *cmd, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    fprintf(stderr, "mlxrt %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, flag, lo, hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

static int need_float(const char *v, const char *flag, const char *cmd, double lo, double hi, float *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || *end || errno || !(x >= lo && x <= hi)) {
    fprintf(stderr, "mlxrt %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi, v);
    return -1;
  }
  *out = (float)x;
  return 0;
}

int gen_args_parse(gen_args *a, int argc, char **argv, const char *cmd, const char *usage) {
  memset(a, 0, sizeof *a);
  a->chat.use_template = 1;
  mlxrt_gen_params_default(&a->chat.gen);
  mlxrt_gen_params *g = &a->chat.gen;
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
      fputs(usage, stdout);
      return 1;
    }
    /* flags without a value */
    if (!strcmp(f, "--no-chat-template")) { a->chat.use_template = 0; continue; }
    if (!strcmp(f, "--think")) { a->chat.enable_thinking = 1; continue; }
    if (!strcmp(f, "--show-thinking")) { a->chat.show_thinking = 1; continue; }
    if (!strcmp(f, "-v") || !strcmp(f, "--verbose")) { a->verbose = 1; continue; }
    if (f[0] != '-') {
      fprintf(stderr, "mlxrt %s: unexpected argument '%s' (see --help)\n", cmd, f);
      return 2;
    }
    static const char *const VALUED[] = {"-m", "--model", "-p", "--prompt", "-f", "--file", "--system",
                                         "--system-prompt", "--backend", "-n", "--max-tokens",
                                         "--n-predict", "-t", "--threads", "-c", "--ctx-size", "--temp",
                                         "--temperature", "--top-k", "--top-p", "--min-p",
                                         "--repeat-penalty", "--repetition-penalty", "--repeat-last-n",
                                         "-s", "--seed", "--numerics"};
    int known = 0;
    for (size_t k = 0; k < sizeof VALUED / sizeof VALUED[0]; k++) known |= !strcmp(f, VALUED[k]);
    if (!known) {
      fprintf(stderr, "mlxrt %s: unknown option '%s' (see --help)\n", cmd, f);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "mlxrt %s: option '%s' needs a value (see --help)\n", cmd, f);
      return 2;
    }
    const char *v = argv[++i];
    long x;
    int bad = 0;
    if (!strcmp(f, "-m") || !strcmp(f, "--model")) a->model = v;
    else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) a->prompt = v;
    else if (!strcmp(f, "-f") || !strcmp(f, "--file")) a->prompt_file = v;
    else if (!strcmp(f, "--system") || !strcmp(f, "--system-prompt")) a->chat.system = v;
    else if (!strcmp(f, "--backend")) a->backend = v;
    else if (!strcmp(f, "--numerics")) a->numerics = v;
    else if (!strcmp(f, "-n") || !strcmp(f, "--max-tokens") || !strcmp(f, "--n-predict"))
      bad = need_int(v, f, cmd, -1, 1 << 30, &x) || ((g->max_tokens = (int)x), 0);
    else if (!strcmp(f, "-t") || !strcmp(f, "--threads"))
      bad = need_int(v, f, cmd, 1, 1024, &x) || ((a->threads = (int)x), 0);
    else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size"))
      bad = need_int(v, f, cmd, 0, 1 << 30, &x) || ((a->chat.capacity = x), 0);
    else if (!strcmp(f, "--temp") || !strcmp(f, "--temperature")) bad = need_float(v, f, cmd, 0, 100, &g->temperature);
    else if (!strcmp(f, "--top-k")) bad = need_int(v, f, cmd, 0, 1 << 30, &x) || ((g->top_k = (int)x), 0);
    else if (!strcmp(f, "--top-p")) bad = need_float(v, f, cmd, 0, 1, &g->top_p);
    else if (!strcmp(f, "--min-p")) bad = need_float(v, f, cmd, 0, 1, &g->min_p);
    else if (!strcmp(f, "--repeat-penalty") || !strcmp(f, "--repetition-penalty"))
      bad = need_float(v, f, cmd, 0.01, 100, &g->repetition_penalty);
    else if (!strcmp(f, "--repeat-last-n"))
      bad = need_int(v, f, cmd, 0, 1 << 20, &x) || ((g->repetition_window = (int)x), 0);
    else if (!strcmp(f, "-s") || !strcmp(f, "--seed")) {
      bad = need_int(v, f, cmd, 0, 0x7fffffffL, &x);
      g->seed = (uint64_t)x;
      g->seed_set = 1;
    } else {
      fprintf(stderr, "mlxrt %s: unknown option '%s' (see --help)\n", cmd, f);
      return 2;
    }
    if (bad) return 2;
  }
  if (!a->model) {
    fprintf(stderr, "mlxrt %s: -m/--model is required (a model directory or an org/name in the HF cache)\n", cmd);
    return 2;
  }
  return gen_args_apply_numerics(a->numerics, &a->backend, cmd);
}

int gen_args_apply_numerics(const char *value, const char **backend, const char *cmd) {
  if (!value) return 0;
  if (strcmp(value, "float32") && strcmp(value, "mlx-cpu")) {
    fprintf(stderr, "mlxrt %s: --numerics must be float32 or mlx-cpu, not '%s'\n", cmd, value);
    return 2;
  }
  if (!strcmp(value, "mlx-cpu")) {
    if (!*backend || !strcmp(*backend, "auto")) *backend = "cpu";
    else if (strcmp(*backend, "cpu")) {
      fprintf(stderr, "mlxrt %s: --numerics mlx-cpu runs on the CPU backend, not '%s'\n", cmd, *backend);
      return 2;
    }
  }
  return 0;
}

char *gen_args_read_prompt_file(const char *path, const char *cmd) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "mlxrt %s: cannot read prompt file '%s': %s\n", cmd, path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
      } else buf = nb;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "mlxrt %s: out of memory reading '%s'\n", cmd, path);
    return NULL;
  }
  buf[n] = 0;
  return buf;
}

mlxrt_model *gen_args_load_model(const gen_args *a, const char *cmd) {
  mlxrt_error err = {{0}};
  char dir[4096];
  if (mlxrt_resolve_model(a->model, dir, sizeof dir, &err)) {
    fprintf(stderr, "mlxrt %s: %s\n", cmd, err.msg);
    return NULL;
  }
  int tty = isatty(2);
  if (tty) fprintf(stderr, "loading %s ...", dir);
  mlxrt_options opt = {a->backend, a->threads, a->verbose, a->numerics};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  if (tty) fprintf(stderr, "\r\033[K");
  if (!m) fprintf(stderr, "mlxrt %s: %s\n", cmd, err.msg);
  else if (a->verbose) fprintf(stderr, "mlxrt: %s on the %s backend\n", dir, mlxrt_model_backend_name(m));
  return m;
}

volatile int gen_args_interrupted;

void gen_args_on_sigint(int sig) {
  (void)sig;
  gen_args_interrupted = 1;
}

void gen_args_print_text(void *user, const char *text, size_t len) {
  (void)user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
}
