/* Option parsing of bench, logits, perplexity, tokenize, inspect, synth and bench-kernels
 * (cli_args.h): values are checked here, before anything is loaded. */
#include "cli_args.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli_num.h"
#include "gen_args.h"

static int is(const char *a, const char *x, const char *y) { return !strcmp(a, x) || (y && !strcmp(a, y)); }
static int is_help(const char *a) { return is(a, "-h", "--help"); }

static int listed(const char *const *list, const char *a) {
  for (const char *const *k = list; *k; k++)
    if (!strcmp(a, *k)) return 1;
  return 0;
}

/* The option name of argv[i]: "--name=value" gives "--name" (in buf) and *inl = "value"; any
 * other argument is its own name and *inl = NULL. NULL after one error line when a value is
 * written to an option that takes none (or to no option). */
static const char *flag_of(const char *cmd, const char *const *valued, const char *arg, char *buf,
                           size_t size, const char **inl) {
  *inl = cli_long_value(arg, buf, size);
  if (!*inl) return arg;
  if (!listed(valued, buf)) {
    cli_error(cmd, "'%.64s': %s is not an option that takes a value (see 'mlxrt %s --help')", arg, buf, cmd);
    return NULL;
  }
  return buf;
}

/* The option a must be one of `valued` (NULL-terminated) and have a value: inl (written as
 * "--name=value"), else the next argument. Then *v is the value, *i has moved past it and 0 is
 * returned; else 2 after one error line. */
static int value_of(const char *cmd, const char *const *valued, const char *a, const char *inl, int argc,
                    char **argv, int *i, const char **v) {
  if (!listed(valued, a)) {
    cli_error(cmd, "%s '%.64s' (see 'mlxrt %s --help')", a[0] == '-' ? "unknown option" : "unexpected argument",
              a, cmd);
    return 2;
  }
  if (inl) {
    *v = inl;
    return 0;
  }
  if (*i + 1 >= argc) {
    cli_error(cmd, "option '%s' needs a value (see 'mlxrt %s --help')", a, cmd);
    return 2;
  }
  *v = argv[++*i];
  return 0;
}

/* -n means tokens to generate everywhere; -1 ("until a stop token") only where there is one:
 * elsewhere an item "-1" of v is refused by name rather than as out of range. */
static int no_until_stop(const char *cmd, const char *flag, const char *v, const char *why) {
  for (const char *p = v; *p;) {
    size_t len = strcspn(p, ", \t[]");
    if (len == 2 && !strncmp(p, "-1", 2)) {
      cli_error(cmd, "%s -1 (until a stop token) has no meaning in %s: %s", flag, cmd, why);
      return -1;
    }
    p += len ? len : 1;
  }
  return 0;
}

/* ---- bench ---------------------------------------------------------------------------------- */
static int bench_list_parse(const char *flag, const char *v, bench_list *l) {
  int32_t *t;
  size_t n;
  if (cli_int_list("bench", flag, v, 0, 1 << 24, BENCH_MAX_VALUES, &t, &n)) return -1;
  for (size_t i = 0; i < n; i++) l->v[i] = t[i];
  l->n = (int)n;
  free(t);
  return 0;
}

/* "temp=0.8,top_k=64,top_p=0.95,min_p=0.05,seed=1". Unnamed settings stay unset, which the
 * sampler reads as mlx-lm's defaults: off, temperature 1 (mlxrt_sampler_new). */
static int parse_sampler(const char *spec, mlxrt_gen_params *p) {
  static const char FORM[] = "--sampler expects KEY=VALUE[,KEY=VALUE...] with KEY temp, top_k, top_p, "
                             "min_p or seed, got '%.64s'";
  mlxrt_gen_params_default(p);
  p->seed_set = 1;
  const char *s = spec;
  do {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    char item[80], flag[48];
    char *eq;
    if (len >= sizeof item || !(eq = memchr(s, '=', len))) {
      cli_error("bench", FORM, spec);
      return -1;
    }
    memcpy(item, s, len);
    item[len] = 0;
    eq = item + (eq - s);
    *eq = 0;
    const char *key = item, *val = eq + 1;
    snprintf(flag, sizeof flag, "--sampler %s", key);
    int64_t seed;
    int bad;
    if (is(key, "temp", "temperature")) bad = cli_float("bench", flag, val, 0, 100, &p->temperature);
    else if (is(key, "top_k", NULL)) bad = cli_int("bench", flag, val, 0, 1 << 30, &p->top_k);
    else if (is(key, "top_p", NULL)) bad = cli_float("bench", flag, val, 0, 1, &p->top_p);
    else if (is(key, "min_p", NULL)) bad = cli_float("bench", flag, val, 0, 1, &p->min_p);
    else if (is(key, "seed", NULL)) {
      bad = cli_int64("bench", flag, val, 0, LLONG_MAX, &seed);
      p->seed = (uint64_t)seed;
    } else {
      cli_error("bench", FORM, spec);
      return -1;
    }
    if (bad) return -1;
    s = comma ? comma + 1 : NULL;
    if (s && !*s) {
      cli_error("bench", FORM, spec);
      return -1;
    }
  } while (s);
  return 0;
}

int bench_args_parse(bench_args *o, int argc, char **argv) {
  static const char *const VALUED[] = {"-m", "--model", "-p", "--n-prompt", "-n", "--n-gen", "-d", "--n-depth",
                                       "-r", "--repetitions", "-t", "--threads", "-c", "--ctx-size", "-o",
                                       "--output", "--backend", "--sampler", "--numerics", "--warmup-depth", "--kv-k",
                                       "--batch", "-npl", NULL};
  memset(o, 0, sizeof *o);
  o->fmt = "md";
  o->p = (bench_list){{512}, 1};
  o->n = (bench_list){{128}, 1};
  o->d = (bench_list){{0}, 1};
  o->reps = 5;
  o->warmup_depth = -1;
  for (int i = 1; i < argc; i++) {
    char buf[CLI_FLAG_MAX];
    const char *inl, *v, *a = flag_of("bench", VALUED, argv[i], buf, sizeof buf, &inl);
    if (!a) return 2;
    if (is_help(a)) return 1;
    if (value_of("bench", VALUED, a, inl, argc, argv, &i, &v)) return 2;
    int bad = 0;
    if (is(a, "-m", "--model")) o->model = v;
    else if (is(a, "-p", "--n-prompt")) bad = bench_list_parse(a, v, &o->p);
    else if (is(a, "-n", "--n-gen")) {
      bad = no_until_stop("bench", a, v, "tg times a fixed number of greedy steps (0 skips tg)") ||
            bench_list_parse(a, v, &o->n);
    } else if (is(a, "-d", "--n-depth")) bad = bench_list_parse(a, v, &o->d);
    else if (is(a, "-r", "--repetitions")) bad = cli_int("bench", a, v, 1, 1000, &o->reps);
    else if (is(a, "-t", "--threads")) bad = cli_int("bench", a, v, 0, 1024, &o->threads);
    else if (is(a, "-c", "--ctx-size")) bad = cli_int64("bench", a, v, 0, 1 << 30, &o->ctx);
    else if (is(a, "-o", "--output")) {
      o->fmt = v;
      if (strcmp(v, "md") && strcmp(v, "json")) {
        cli_error("bench", "%s expects md or json, got '%.64s'", a, v);
        bad = 1;
      }
    } else if (is(a, "--backend", NULL)) o->backend = v;
    else if (is(a, "--sampler", NULL)) {
      o->sampler_spec = v;
      bad = parse_sampler(v, &o->sampler);
    } else if (is(a, "--numerics", NULL)) o->numerics = v;
    else if (is(a, "--kv-k", NULL)) bad = gen_args_check_kv_k(o->kv_k = v, "bench") != 0;
    else if (is(a, "--warmup-depth", NULL)) bad = cli_int("bench", a, v, 0, 1 << 24, &o->warmup_depth);
    else if (is(a, "--batch", "-npl")) bad = bench_list_parse(a, v, &o->batch);
    if (bad) return 2;
  }
  if (!o->model) {
    cli_error("bench", "-m MODEL is required");
    return 2;
  }
  for (int k = 0; k < o->batch.n; k++)
    if (o->batch.v[k] < 1 || o->batch.v[k] > 256) {
      cli_error("bench", "--batch takes sequence counts from 1 to 256, got %d", o->batch.v[k]);
      return 2;
    }
  if (o->batch.n && (o->sampler_spec || o->d.n > 1 || o->d.v[0] || o->warmup_depth >= 0)) {
    cli_error("bench", "--batch measures greedy decode from fresh prompts: no --sampler, -d or --warmup-depth");
    return 2;
  }
  int any = 0;
  for (int k = 0; k < o->p.n; k++) any |= o->p.v[k] != 0;
  for (int k = 0; k < o->n.n; k++) any |= o->n.v[k] != 0;
  if (!any) {
    cli_error("bench", "nothing to measure: -p 0 and -n 0 skip every test");
    return 2;
  }
  return gen_args_apply_numerics(o->numerics, &o->backend, "bench");
}

/* ---- logits --------------------------------------------------------------------------------- */
int logits_args_parse(logits_args *o, int argc, char **argv) {
  static const char *const VALUED[] = {"-m", "--model", "--tokens", "-o", "--decode", "-n", "--backend",
                                       "--numerics", "-t", "--threads", "--kv-k", NULL};
  memset(o, 0, sizeof *o);
  const char *tokens = NULL;
  for (int i = 1; i < argc; i++) {
    char buf[CLI_FLAG_MAX];
    const char *inl, *v, *a = flag_of("logits", VALUED, argv[i], buf, sizeof buf, &inl);
    if (!a) return 2;
    if (is_help(a)) return 1;
    if (value_of("logits", VALUED, a, inl, argc, argv, &i, &v)) return 2;
    int bad = 0;
    if (is(a, "-m", "--model")) o->model = v;
    else if (is(a, "--tokens", NULL)) tokens = v;
    else if (is(a, "-o", NULL)) o->out = v;
    else if (is(a, "--decode", "-n"))
      bad = no_until_stop("logits", a, v, "it has no stop token; give the number of greedy steps") ||
            cli_int("logits", a, v, 0, 1 << 30, &o->decode);
    else if (is(a, "--backend", NULL)) o->backend = v;
    else if (is(a, "--numerics", NULL)) o->numerics = v;
    else if (is(a, "--kv-k", NULL)) bad = gen_args_check_kv_k(o->kv_k = v, "logits") != 0;
    else if (is(a, "-t", "--threads")) bad = cli_int("logits", a, v, 0, 1024, &o->threads);
    if (bad) return 2;
  }
  if (!o->model || !tokens) {
    cli_error("logits", "-m MODEL and --tokens are required");
    return 2;
  }
  if (gen_args_apply_numerics(o->numerics, &o->backend, "logits")) return 2;
  if (cli_int_list("logits", "--tokens", tokens, 0, INT32_MAX, 0, &o->tokens, &o->n_tokens)) return 2;
  return 0;
}

void logits_args_free(logits_args *o) {
  free(o->tokens);
  o->tokens = NULL;
}

/* ---- perplexity ----------------------------------------------------------------------------- */
int perplexity_args_parse(perplexity_args *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->ctx = 512;
  /* -c and --chunks are perplexity's; the rest goes to gen_args_parse with the values of its
   * own options (so "-p -c" keeps "-c" as the prompt) */
  char **rest = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *rest);
  if (!rest) {
    cli_error("perplexity", "out of memory");
    return 2;
  }
  int nrest = 0, r = 0;
  for (int i = 0; i < argc && !r; i++) {
    char buf[CLI_FLAG_MAX];
    const char *a = argv[i], *inl = i > 0 ? cli_long_value(a, buf, sizeof buf) : NULL;
    if (inl) a = buf; /* "--ctx-size=512" */
    int own = i > 0 && (is(a, "-c", "--ctx-size") || is(a, "--chunks", NULL));
    const char *v = !own ? NULL : inl ? inl : i + 1 < argc ? argv[++i] : NULL;
    if (own && !v) {
      cli_error("perplexity", "option '%s' needs a value (see 'mlxrt perplexity --help')", a);
      r = 2;
    } else if (own && is(a, "--chunks", NULL)) r = cli_int("perplexity", a, v, 0, 1 << 30, &o->max_chunks) ? 2 : 0;
    else if (own) r = cli_int("perplexity", a, v, 8, 1 << 24, &o->ctx) ? 2 : 0;
    else {
      rest[nrest++] = argv[i];
      if (i > 0 && !inl && gen_args_takes_value(a) && i + 1 < argc) rest[nrest++] = argv[++i];
    }
  }
  if (!r) r = gen_args_parse(&o->g, nrest, rest, "perplexity");
  free(rest);
  if (!r && !o->g.prompt_file) {
    cli_error("perplexity", "-f TEXT_FILE is required");
    r = 2;
  } else if (!r && (o->g.prompt || o->g.n_predict != -1 || o->g.chat_template_file || o->g.chat.spec.mode)) {
    cli_error("perplexity", "%s has no meaning in perplexity: it scores TEXT_FILE and generates nothing",
              o->g.prompt ? "-p" : o->g.chat_template_file ? "--chat-template" : o->g.chat.spec.mode ? "--spec" : "-n");
    r = 2;
  }
  return r;
}

/* ---- tokenize ------------------------------------------------------------------------------- */
int tokenize_args_parse(tokenize_args *o, int argc, char **argv) {
  static const char *const VALUED[] = {"-m", "--model", "-p", "--prompt", "-f", "--file", "--decode", NULL};
  memset(o, 0, sizeof *o);
  o->add_bos = 1;
  const char *decode = NULL;
  for (int i = 1; i < argc; i++) {
    char buf[CLI_FLAG_MAX];
    const char *inl, *v, *a = flag_of("tokenize", VALUED, argv[i], buf, sizeof buf, &inl);
    if (!a) return 2;
    if (is_help(a)) return 1;
    if (is(a, "--ids", NULL)) o->ids_only = 1;
    else if (is(a, "--no-bos", NULL)) o->add_bos = 0;
    else if (is(a, "--skip-special", NULL)) o->skip_special = 1;
    else if (is(a, "-v", "--verbose")) o->verbose = 1;
    else if (value_of("tokenize", VALUED, a, inl, argc, argv, &i, &v)) return 2;
    else if (is(a, "-m", "--model")) o->model = v;
    else if (is(a, "-p", "--prompt")) o->prompt = v;
    else if (is(a, "-f", "--file")) o->file = v;
    else decode = v;
  }
  if (!o->model) {
    cli_error("tokenize", "-m/--model is required (try 'mlxrt tokenize --help')");
    return 2;
  }
  if ((o->prompt != NULL) + (o->file != NULL) + (decode != NULL) > 1) {
    cli_error("tokenize", "give only one of -p, -f and --decode");
    return 2;
  }
  if (decode && cli_int_list("tokenize", "--decode", decode, 0, INT32_MAX, 0, &o->decode_ids, &o->n_decode))
    return 2;
  return 0;
}

void tokenize_args_free(tokenize_args *o) {
  free(o->decode_ids);
  o->decode_ids = NULL;
}

/* ---- inspect -------------------------------------------------------------------------------- */
int inspect_args_parse(inspect_args *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    char buf[CLI_FLAG_MAX];
    const char *a = argv[i], *path = a, *inl = cli_long_value(a, buf, sizeof buf);
    if (inl && !is(buf, "-m", "--model")) {
      cli_error("inspect", "'%.64s': %s is not an option that takes a value", a, buf);
      return 2;
    }
    if (is(a, "--json", NULL)) {
      o->json = 1;
      continue;
    }
    if (is_help(a)) return 1;
    if (inl) path = inl; /* "--model=DIR" */
    else if (is(a, "-m", "--model")) {
      if (i + 1 >= argc) {
        cli_error("inspect", "option '%s' needs a value", a);
        return 2;
      }
      path = argv[++i];
    } else if (a[0] == '-') {
      cli_error("inspect", "unknown option '%.64s'", a);
      return 2;
    }
    if (o->path) {
      cli_error("inspect", "one model at a time: '%.64s' and '%.64s'", o->path, path);
      return 2;
    }
    o->path = path;
  }
  if (!o->path) {
    cli_error("inspect", "missing model (usage: mlxrt inspect MODEL [--json])");
    return 2;
  }
  return 0;
}

/* ---- synth ---------------------------------------------------------------------------------- */
int synth_args_parse(mlxrt_synth_options *o, int argc, char **argv) {
  static const char *const VALUED[] = {"--like", "--mode", "-o", "--out", "--layers", "--seed", "--threads",
                                       "-t", NULL};
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    char buf[CLI_FLAG_MAX];
    const char *inl, *v, *a = flag_of("synth", VALUED, argv[i], buf, sizeof buf, &inl);
    if (!a) return 2;
    if (is_help(a)) return 1;
    int bad = 0;
    if (is(a, "--no-sync", NULL)) o->no_sync = 1;
    else if (is(a, "--dry-run", NULL)) o->dry_run = 1;
    else if (value_of("synth", VALUED, a, inl, argc, argv, &i, &v)) return 2;
    else if (is(a, "--like", NULL)) o->like = v;
    else if (is(a, "--mode", NULL)) o->mode = v;
    else if (is(a, "-o", "--out")) o->out_dir = v;
    else if (is(a, "--layers", NULL)) bad = cli_int("synth", a, v, 1, 256, &o->layers);
    else if (is(a, "--threads", "-t")) bad = cli_int("synth", a, v, 1, 256, &o->threads);
    else {
      int64_t seed;
      bad = cli_int64("synth", a, v, 0, LLONG_MAX, &seed);
      o->seed = (uint64_t)seed;
    }
    if (bad) return 2;
  }
  if (!o->like || !o->mode || (!o->out_dir && !o->dry_run)) {
    cli_error("synth", "--like, --mode and -o are required (try 'mlxrt synth --help')");
    return 2;
  }
  return 0;
}

/* ---- bench-kernels -------------------------------------------------------------------------- */
int bench_kernels_args_parse(bench_kernels_args *o, int argc, char **argv) {
  static const char *const VALUED[] = {"-t", "--threads", "--rows", "--cols", "--runs", "--n", "--modes", NULL};
  const char *cmd = "bench-kernels";
  memset(o, 0, sizeof *o);
  o->runs = 9;
  o->rows = 21504;
  o->cols = 5376;
  o->n = 1;
  o->modes = "affine4-g64,nvfp4,affine8-g64,mxfp4,mxfp8,bf16";
  for (int i = 1; i < argc; i++) {
    char buf[CLI_FLAG_MAX];
    const char *inl, *v, *a = flag_of(cmd, VALUED, argv[i], buf, sizeof buf, &inl);
    if (!a) return 2;
    if (is_help(a)) return 1;
    int bad = 0;
    if (is(a, "--hot", NULL)) o->hot = 1;
    else if (value_of(cmd, VALUED, a, inl, argc, argv, &i, &v)) return 2;
    else if (is(a, "-t", "--threads")) bad = cli_int(cmd, a, v, 0, 1024, &o->threads);
    else if (is(a, "--rows", NULL)) bad = cli_int64(cmd, a, v, 1, 1 << 24, &o->rows);
    else if (is(a, "--cols", NULL)) bad = cli_int64(cmd, a, v, 128, 1 << 24, &o->cols);
    else if (is(a, "--runs", NULL)) bad = cli_int(cmd, a, v, 1, 1000, &o->runs);
    else if (is(a, "--n", NULL)) bad = cli_int64(cmd, a, v, 1, 1 << 16, &o->n);
    else if (strlen(v) > 255) {
      cli_error(cmd, "--modes is longer than 255 characters");
      bad = 1;
    } else o->modes = v;
    if (bad) return 2;
  }
  if (o->cols % 128) {
    cli_error(cmd, "--cols expects a multiple of 128, got %lld", (long long)o->cols);
    return 2;
  }
  return 0;
}
