/* Each command's option parsing as a function that fills a struct and touches no model and no
 * file, so the fuzz target (tests/fuzz/fuzz_cli.c) can run it alone. Every parse function
 * returns 0, 1 when --help was asked for (the caller prints its usage), or 2 after printing one
 * error line (cli_error). A struct filled by a successful parse is freed with its _free
 * function where it has one. run and chat use gen_args_parse (gen_args.h). */
#ifndef MLXRT_TOOLS_CLI_ARGS_H
#define MLXRT_TOOLS_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "gen_args.h"
#include "tools_write.h"

/* ---- bench ---- */
#define BENCH_MAX_VALUES 16
typedef struct {
  int v[BENCH_MAX_VALUES];
  int n;
} bench_list;

typedef struct bench_args {
  const char *model, *backend, *fmt, *numerics, *sampler_spec, *kv_k;
  mlxrt_gen_params sampler; /* when sampler_spec */
  bench_list p, n, d;       /* -p, -n, -d: 0 skips a pp or tg test */
  int reps, threads;
  int warmup_depth;         /* -1: each test's own depth */
  int64_t ctx;              /* 0: just enough for each run */
  bench_list batch;         /* --batch: sequences decoded together (batched mode; n = 0: off) */
} bench_args;
int bench_args_parse(bench_args *o, int argc, char **argv);

/* ---- logits ---- */
typedef struct logits_args {
  const char *model, *out, *backend, *numerics, *kv_k;
  int32_t *tokens; /* malloc'd */
  size_t n_tokens;
  int decode;      /* -n/--decode: greedy steps after the prompt */
  int threads;
} logits_args;
int logits_args_parse(logits_args *o, int argc, char **argv);
void logits_args_free(logits_args *o);

/* ---- perplexity ---- */
typedef struct perplexity_args {
  gen_args g;     /* -m, -f, -t, --backend, --numerics (sampling flags are accepted, unused) */
  int ctx;        /* -c: tokens per chunk */
  int max_chunks; /* --chunks: 0 = every chunk */
} perplexity_args;
int perplexity_args_parse(perplexity_args *o, int argc, char **argv);

/* ---- tokenize ---- */
typedef struct tokenize_args {
  const char *model, *prompt, *file;
  int32_t *decode_ids; /* --decode, malloc'd; NULL: encode */
  size_t n_decode;
  int ids_only, add_bos, skip_special, verbose;
} tokenize_args;
int tokenize_args_parse(tokenize_args *o, int argc, char **argv);
void tokenize_args_free(tokenize_args *o);

/* ---- inspect ---- */
typedef struct inspect_args {
  const char *path;
  int json;
} inspect_args;
int inspect_args_parse(inspect_args *o, int argc, char **argv);

/* ---- synth ---- (fills everything but the progress and cancel hooks) */
int synth_args_parse(mlxrt_synth_options *o, int argc, char **argv);

/* ---- bench-kernels ---- */
typedef struct bench_kernels_args {
  int threads, runs, hot;
  int64_t rows, cols, n;
  const char *modes;
} bench_kernels_args;
int bench_kernels_args_parse(bench_kernels_args *o, int argc, char **argv);

#endif
