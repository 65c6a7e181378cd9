/* mlxrt run: one prompt, the answer streamed to stdout, throughput to stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "gen_args.h"

static const char USAGE[] =
    "usage: mlxrt run -m MODEL [-p PROMPT | -f FILE] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "                 [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS] [-c CTX]\n"
    "                 [--backend auto|cpu|cuda] [--system TEXT] [--no-chat-template]\n"
    "                 [--think] [--show-thinking] [--numerics float32|mlx-cpu] [-v]\n"
    "MODEL is a directory or a Hugging Face repo id (org/name) in the local HF cache.\n"
    "Sampling defaults come from the model's generation_config.json; --temp 0 is greedy.\n"
    "--numerics mlx-cpu reproduces mlx-lm on a CPU bit for bit (slower; docs/NUMERICS.md).\n";

int cmd_run(int argc, char **argv) {
  gen_args a;
  int r = gen_args_parse(&a, argc, argv, "run", USAGE);
  if (r) return r == 1 ? 0 : 2;
  char *file_prompt = NULL;
  const char *prompt = a.prompt;
  if (a.prompt_file) {
    if (!(file_prompt = gen_args_read_prompt_file(a.prompt_file, "run"))) return 1;
    prompt = file_prompt;
  }
  if (!prompt) {
    fprintf(stderr, "mlxrt run: give a prompt with -p TEXT or -f FILE\n");
    return 2;
  }
  mlxrt_model *m = gen_args_load_model(&a, "run");
  if (!m) {
    free(file_prompt);
    return 1;
  }
  mlxrt_error err = {{0}};
  a.chat.interrupt = &gen_args_interrupted;
  signal(SIGINT, gen_args_on_sigint);
  mlxrt_chat *c = mlxrt_chat_new(m, &a.chat, &err);
  mlxrt_gen_stats st;
  int rc = 1;
  if (c && mlxrt_chat_turn(c, prompt, gen_args_print_text, NULL, &st, &err) == 0) {
    printf("\n");
    fprintf(stderr, "prompt: %lld tokens, %.2f tokens/s | decode: %lld tokens, %.2f tokens/s | backend %s\n",
            (long long)st.prompt_processed, st.prompt_seconds > 0 ? st.prompt_processed / st.prompt_seconds : 0.0,
            (long long)st.gen_tokens, st.gen_seconds > 0 ? st.gen_tokens / st.gen_seconds : 0.0,
            mlxrt_model_backend_name(m));
    rc = 0;
  } else {
    fprintf(stderr, "mlxrt run: %s\n", err.msg);
  }
  mlxrt_chat_free(c);
  mlxrt_model_free(m);
  free(file_prompt);
  return rc;
}
