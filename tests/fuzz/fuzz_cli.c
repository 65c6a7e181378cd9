/* libFuzzer target: the command line's option parsing. The bytes are split at NUL bytes into an
 * argv whose first word names the command; only that command's parse function runs (no model,
 * no file). Checks, beyond ASan/UBSan/LSan: a rejected command line printed exactly one error
 * line and an accepted one none, and every accepted value lies in its documented range. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_num.h"
#include "gen_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The library is not linked: its defaults (src/mlx/generate.c) only fill fields the parsers
 * overwrite, so zeros serve. */
void mlxrt_gen_params_default(mlxrt_gen_params *p) { memset(p, 0, sizeof *p); }

#define CHECK(c)                                                         \
  do {                                                                   \
    if (!(c)) {                                                          \
      fprintf(stderr, "fuzz_cli: %s:%d: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                           \
    }                                                                    \
  } while (0)

static int in(long long x, long long lo, long long hi) { return x >= lo && x <= hi; }
static int in_f(double x, double lo, double hi) { return x >= lo && x <= hi; }

static void check_gen(const gen_args *a) {
  const mlxrt_gen_params *g = &a->chat.gen;
  CHECK(a->model);
  CHECK(!(a->prompt && a->prompt_file));
  CHECK(in(a->n_predict, -1, 1 << 30) && g->max_tokens == (a->n_predict > 0 ? a->n_predict : 0));
  CHECK(in(a->threads, 0, 1024) && in(a->chat.capacity, 0, 1 << 30));
  CHECK(in_f(g->temperature, 0, 100) && in(g->top_k, 0, 1 << 30) && in_f(g->top_p, 0, 1) && in_f(g->min_p, 0, 1));
  CHECK(g->repetition_penalty == 0 || in_f(g->repetition_penalty, 0.01, 100));
  CHECK(in(g->repetition_window, 0, 1 << 20) && g->seed <= 0x7fffffff);
  CHECK(!a->numerics || !strcmp(a->numerics, "float32") || (!strcmp(a->numerics, "mlx-cpu") && !strcmp(a->backend, "cpu")));
  const mlxrt_spec_options *sp = &a->chat.spec;
  CHECK(in(sp->mode, MLXRT_SPEC_OFF, MLXRT_SPEC_DRAFT) && !sp->draft_model);
  CHECK(in(sp->draft_max, 0, MLXRT_SPEC_MAX_DRAFT) && in(sp->ngram_max, 0, MLXRT_SPEC_MAX_NGRAM));
  CHECK(sp->mode || (!sp->draft_max && !sp->ngram_max && !a->spec.draft_model));
  CHECK((sp->mode == MLXRT_SPEC_DRAFT) == (a->spec.draft_model != NULL));
  CHECK(sp->mode != MLXRT_SPEC_DRAFT || !sp->ngram_max);
}

static void check_list(const bench_list *l) {
  CHECK(in(l->n, 1, BENCH_MAX_VALUES));
  for (int i = 0; i < l->n; i++) CHECK(in(l->v[i], 0, 1 << 24));
}

static int parse(int argc, char **argv) {
  const char *cmd = argv[0];
  int r = 2;
  if (!strcmp(cmd, "run") || !strcmp(cmd, "chat")) {
    gen_args a;
    if (!(r = gen_args_parse(&a, argc, argv, cmd))) check_gen(&a);
  } else if (!strcmp(cmd, "perplexity")) {
    perplexity_args o;
    if (!(r = perplexity_args_parse(&o, argc, argv))) {
      check_gen(&o.g);
      CHECK(o.g.prompt_file && !o.g.prompt && o.g.n_predict == -1 && in(o.ctx, 8, 1 << 24) &&
            in(o.max_chunks, 0, 1 << 30));
    }
  } else if (!strcmp(cmd, "bench")) {
    bench_args o;
    if (!(r = bench_args_parse(&o, argc, argv))) {
      CHECK(o.model && (!strcmp(o.fmt, "md") || !strcmp(o.fmt, "json")));
      check_list(&o.p);
      check_list(&o.n);
      check_list(&o.d);
      int any = 0;
      for (int k = 0; k < o.p.n; k++) any |= o.p.v[k] != 0;
      for (int k = 0; k < o.n.n; k++) any |= o.n.v[k] != 0;
      CHECK(any);
      CHECK(in(o.reps, 1, 1000) && in(o.threads, 0, 1024) && in(o.ctx, 0, 1 << 30));
      CHECK(in(o.warmup_depth, -1, 1 << 24));
      if (o.sampler_spec) /* (unset settings hold the stub's zeros) */
        CHECK(in_f(o.sampler.temperature, 0, 100) && in(o.sampler.top_k, 0, 1 << 30) &&
              in_f(o.sampler.top_p, 0, 1) && in_f(o.sampler.min_p, 0, 1));
    }
  } else if (!strcmp(cmd, "logits")) {
    logits_args o;
    if (!(r = logits_args_parse(&o, argc, argv))) {
      CHECK(o.model && o.tokens && o.n_tokens >= 1 && in(o.decode, 0, 1 << 30) && in(o.threads, 0, 1024));
      for (size_t i = 0; i < o.n_tokens; i++) CHECK(o.tokens[i] >= 0);
      logits_args_free(&o);
    }
  } else if (!strcmp(cmd, "tokenize")) {
    tokenize_args o;
    if (!(r = tokenize_args_parse(&o, argc, argv))) {
      CHECK(o.model && (o.prompt != NULL) + (o.file != NULL) + (o.decode_ids != NULL) <= 1);
      CHECK(!o.decode_ids || o.n_decode >= 1);
      for (size_t i = 0; i < o.n_decode; i++) CHECK(o.decode_ids[i] >= 0);
      tokenize_args_free(&o);
    }
  } else if (!strcmp(cmd, "inspect")) {
    inspect_args o;
    if (!(r = inspect_args_parse(&o, argc, argv))) CHECK(o.path);
  } else if (!strcmp(cmd, "synth")) {
    mlxrt_synth_options o;
    if (!(r = synth_args_parse(&o, argc, argv)))
      CHECK(o.like && o.mode && (o.out_dir || o.dry_run) && in(o.layers, 0, 256) && in(o.threads, 0, 256));
  } else if (!strcmp(cmd, "bench-kernels")) {
    bench_kernels_args o;
    if (!(r = bench_kernels_args_parse(&o, argc, argv)))
      CHECK(in(o.rows, 1, 1 << 24) && in(o.cols, 128, 1 << 24) && o.cols % 128 == 0 && in(o.runs, 1, 1000) &&
            in(o.n, 1, 1 << 16) && in(o.threads, 0, 1024) && strlen(o.modes) <= 255);
  } else return -1;
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  enum { MAX_ARGS = 64 };
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[MAX_ARGS + 1];
  int argc = 0;
  for (char *p = buf; argc < MAX_ARGS && p <= buf + size; p += strlen(p) + 1) argv[argc++] = p;
  argv[argc] = NULL;
  char *err = NULL;
  size_t err_len = 0;
  FILE *f = open_memstream(&err, &err_len);
  if (!f) {
    free(buf);
    return 0;
  }
  cli_err_stream = f;
  int r = parse(argc, argv);
  cli_err_stream = NULL;
  fclose(f);
  if (r >= 0) {
    size_t lines = 0;
    for (size_t i = 0; i < err_len; i++) lines += err[i] == '\n';
    if (r == 2) CHECK(lines == 1 && err_len > 0 && err[err_len - 1] == '\n');
    else CHECK(err_len == 0);
  }
  free(err);
  free(buf);
  return 0;
}
