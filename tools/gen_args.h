/* Options shared by `mlxrt run` and `mlxrt chat`, spelled as llama.cpp / mlx-lm users know them. */
#ifndef MLXRT_TOOLS_GEN_ARGS_H
#define MLXRT_TOOLS_GEN_ARGS_H

#include <stdint.h>

#include "mlxrt.h"

/* Speculative decoding (run, chat, serve): --spec lookup|draft, --draft-model DIR (implies
 * --spec draft), --draft-max K, --spec-ngram N, as given. */
typedef struct gen_spec_args {
  const char *mode, *draft_model;
  int draft_max, ngram; /* 0: not given */
} gen_spec_args;

typedef struct gen_args {
  const char *model;
  const char *prompt;
  const char *prompt_file;
  const char *backend;
  const char *numerics; /* --numerics float32|mlx-cpu (NULL: $MLXRT_NUMERICS or float32) */
  const char *kv_k;     /* --kv-k auto|bf16 (mlxrt_options.kv_k; NULL: auto) */
  const char *chat_template_file; /* --chat-template FILE: Jinja overriding the model's template */
  int threads;
  int verbose;
  /* -n: tokens to generate; 0 none, -1 (the default) until a stop token or the context is
   * full. chat.gen.max_tokens holds the library's spelling (<= 0: no limit). */
  int n_predict;
  gen_spec_args spec; /* chat.spec holds the checked options; the draft model is loaded at run time */
  mlxrt_chat_options chat;
} gen_args;

/* The text -n means in every command's --help. */
#define GEN_ARGS_N_HELP                                                                          \
  "-n N: tokens to generate; 0 generates none, -1 (the default) until a stop token or the\n"  \
  "context is full.\n"

/* Parses argv (after the command name) without touching a model. Returns 0, 1 when --help was
 * asked for (the caller prints its usage), or 2 after printing a one-line error. */
int gen_args_parse(gen_args *a, int argc, char **argv, const char *cmd);
/* 1 when gen_args_parse reads a value after flag. */
int gen_args_takes_value(const char *flag);
/* --numerics VALUE for every command that loads a model: float32 (the default: bf16 rounding
 * points like MLX, float32 accumulation) or mlx-cpu (MLX's CPU arithmetic bit for bit, see
 * docs/NUMERICS.md). Checks the value (the caller passes it as mlxrt_options.numerics) and keeps
 * mlx-cpu on the CPU backend (*backend unset or "auto" becomes "cpu"; another
 * backend is an error). value NULL changes nothing. Returns 0, or 2 after printing a
 * one-line error. */
int gen_args_apply_numerics(const char *value, const char **backend, const char *cmd);
/* --kv-k VALUE: auto, bf16, planar3 or planar4 (mlxrt_options.kv_k). Returns 0, or 2 after one
 * error line. */
int gen_args_check_kv_k(const char *value, const char *cmd);
#define GEN_ARGS_KVK_HELP                                                                              \
  "--kv-k auto|bf16|planar3|planar4: the full-attention layers' K cache on a GPU. auto (the\n"         \
  "default) keeps K from V where a layer's K and V share one projection (Gemma 4 31B, 26B-A4B: 5/8\n" \
  "of the cache's bytes); bf16 keeps K in bf16; planar3 / planar4 compress K to 3.125 / 4.25 bits\n"  \
  "a value (a comparison mode: on real models both lose too much, docs/KV.md; one sequence per\n"     \
  "decoder). The CPU keeps bf16 and refuses planar3 / planar4.\n"

/* The text the speculative options mean in run's, chat's and serve's --help. */
#define GEN_ARGS_SPEC_HELP                                                                        \
  "--spec lookup: speculative decoding with drafts copied from the context (prompt lookup);\n"  \
  "--spec draft / --draft-model DIR: a smaller model with the same tokenizer drafts; --draft-max\n" \
  "K: tokens drafted per pass (1..32; lookup 10, draft 4); --spec-ngram N: longest n-gram lookup\n" \
  "matches (1..8, default 3). The model checks the drafts in one pass: greedy text is the same as\n" \
  "without, sampled text has the same distribution. CPU backend only.\n"

/* One of the speculative options (flag, its value v): 1 (sa updated, or *bad set after one
 * error line), 0 when flag is not one of them. */
int gen_spec_option(gen_spec_args *sa, const char *flag, const char *v, const char *cmd, int *bad);
/* Their combination checked into o (mode, draft_max, ngram_max; o->draft_model stays NULL):
 * 0, or 2 after one error line. */
int gen_spec_finish(const gen_spec_args *sa, mlxrt_spec_options *o, const char *cmd);

/* The text --chat-template means in run's and chat's --help. */
#define GEN_ARGS_TEMPLATE_HELP                                                                    \
  "--chat-template FILE: a Jinja chat template to use instead of the model's (its own\n"          \
  "chat_template.jinja or tokenizer_config.json chat_template, else the built-in Gemma one).\n"

/* ---- at run time (gen_run.c) ---- */
/* MODEL as every command takes it — a folder, or a Hugging Face repo id (org/name) found in the
 * local cache (mlxrt_resolve_model) — to the folder to open: 0 with dir filled, or -1 after one
 * error line. */
int gen_args_model_dir(const char *cmd, const char *model, char *dir, size_t len);
/* Reads --chat-template's file into a->chat.chat_template; returns the text to free (NULL when
 * no file was given), or sets *failed after one error line. */
char *gen_args_read_template(gen_args *a, const char *cmd, int *failed);
/* Prints a chat error; an error inside the --chat-template text names the file. */
void gen_args_chat_error(const gen_args *a, const char *cmd, const char *msg);
/* Loads the model, printing a progress line on a terminal; NULL after printing the error. */
mlxrt_model *gen_args_load_model(const gen_args *a, const char *cmd);
/* --draft-model's model, loaded with the same options as the model (opt), into o->draft_model:
 * 0 (nothing to load without --draft-model), or -1 after one error line. */
int gen_spec_load_draft(const gen_spec_args *sa, const mlxrt_options *opt, mlxrt_spec_options *o, const char *cmd);
/* The speculative-decoding figures of an answer for a stats line ("" when o is off). */
void gen_spec_stats(const mlxrt_spec_options *o, const mlxrt_gen_stats *st, char *buf, size_t len);
/* On the CPU backend the KV cache of `tokens` positions lives in this machine's memory:
 * refuses (-1 after one error line naming `what`) a context that cannot fit. */
int gen_args_check_kv(mlxrt_model *m, const char *cmd, const char *what, int64_t tokens);
/* The line run and chat print when an answer stopped because the context is full. */
void gen_args_context_full(const gen_args *a, const mlxrt_gen_stats *st, const char *cmd);
/* run's exit status when the context filled before the answer ended. */
#define GEN_EXIT_CONTEXT_FULL 3

/* Ctrl-C: the handler only raises the flag the generation loop polls (the answer stops, the
 * program goes on). */
extern volatile int gen_args_interrupted;
void gen_args_on_sigint(int sig);
/* Streams answer text to stdout as it comes. */
void gen_args_print_text(void *user, const char *text, size_t len);

#endif
