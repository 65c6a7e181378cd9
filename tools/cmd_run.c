/* mlxrt run: one prompt, the answer streamed to stdout, throughput to stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_file.h"
#include "cli_num.h"
#include "commands.h"
#include "gen_args.h"

static const char USAGE[] =
    "usage: mlxrt run -m MODEL [-p PROMPT | -f FILE] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "                 [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS] [-c CTX]\n"
    "                 [--backend auto|cpu|cuda] [--system TEXT] [--no-chat-template]\n"
    "                 [--chat-template FILE] [--think] [--show-thinking]\n"
    "                 [--numerics float32|mlx-cpu] [--spec lookup|draft] [--draft-model DIR]\n"
    "                 [--draft-max K] [--spec-ngram N] [--kv-k MODE] [-v]\n"
    "MODEL is a directory or a Hugging Face repo id (org/name) in the local HF cache.\n"
    "-p - reads the prompt from standard input, like -f -.\n"
    "-f FILE reads the prompt from a regular text file of at most 256 MiB without a NUL byte\n"
    "(- is standard input).\n" GEN_ARGS_N_HELP GEN_ARGS_TEMPLATE_HELP
    "-c CTX: tokens the context holds, prompt included (0, the default: the model's maximum).\n"
    "-t THREADS: CPU threads (0, the default: all cores).\n"
    "Sampling defaults come from the model's generation_config.json; --temp 0 is greedy.\n"
    "--numerics mlx-cpu reproduces mlx-lm on a CPU bit for bit (slower; docs/NUMERICS.md).\n"
    GEN_ARGS_SPEC_HELP GEN_ARGS_KVK_HELP
    "Exit status: 0 the answer ended (stop token, -n reached or Ctrl-C), 1 an error, 2 a bad\n"
    "command line, 3 the context filled up before the answer ended.\n";

int cmd_run(int argc, char **argv) {
  gen_args a;
  int r = gen_args_parse(&a, argc, argv, "run");
  if (r == 1) fputs(USAGE, stdout);
  if (r) return r == 1 ? 0 : 2;
  char *file_prompt = NULL;
  const char *prompt = a.prompt;
  /* -p - reads the prompt from standard input, with the same reader as -f - */
  const char *file = a.prompt_file ? a.prompt_file : prompt && !strcmp(prompt, "-") ? "-" : NULL;
  if (!prompt && !file) {
    cli_error("run", "give a prompt with -p TEXT or -f FILE");
    return 2;
  }
  if (file) {
    if (!(file_prompt = cli_read_text("run", file, NULL))) return 1;
    prompt = file_prompt;
  }
  int failed;
  char *tpl = gen_args_read_template(&a, "run", &failed);
  mlxrt_model *m = failed ? NULL : gen_args_load_model(&a, "run");
  mlxrt_options opt = {a.backend, a.threads, a.verbose, a.numerics, a.kv_k};
  if (!m || gen_spec_load_draft(&a.spec, &opt, &a.chat.spec, "run")) {
    mlxrt_model_free(m);
    free(tpl);
    free(file_prompt);
    return 1;
  }
  mlxrt_error err = {{0}};
  a.chat.interrupt = &gen_args_interrupted;
  signal(SIGINT, gen_args_on_sigint);
  char what[64];
  snprintf(what, sizeof what, "-c %lld", (long long)a.chat.capacity);
  mlxrt_chat *c = NULL;
  mlxrt_gen_stats st;
  int rc = 1;
  if (gen_args_check_kv(m, "run", what, a.chat.capacity)) goto out;
  if (!(c = mlxrt_chat_new(m, &a.chat, &err))) {
    cli_error("run", "%s", err.msg);
  } else if (a.n_predict == 0) {
    rc = 0; /* -n 0: the model and its tokenizer load, nothing is generated */
  } else if (mlxrt_chat_turn(c, prompt, gen_args_print_text, NULL, &st, &err) == 0) {
    printf("\n");
    fflush(stdout);
    char spec[160];
    gen_spec_stats(&a.chat.spec, &st, spec, sizeof spec);
    fprintf(stderr, "prompt: %lld tokens, %.2f tokens/s | decode: %lld tokens, %.2f tokens/s | backend %s%s\n",
            (long long)st.prompt_processed, st.prompt_seconds > 0 ? st.prompt_processed / st.prompt_seconds : 0.0,
            (long long)st.gen_tokens, st.gen_seconds > 0 ? st.gen_tokens / st.gen_seconds : 0.0,
            mlxrt_model_backend_name(m), spec);
    rc = 0;
    if (st.stopped_by == 3) {
      gen_args_context_full(&a, &st, "run");
      rc = GEN_EXIT_CONTEXT_FULL;
    }
  } else {
    gen_args_chat_error(&a, "run", err.msg);
  }
out:
  mlxrt_chat_free(c);
  mlxrt_model_free(a.chat.spec.draft_model);
  mlxrt_model_free(m);
  free(tpl);
  free(file_prompt);
  return rc;
}
