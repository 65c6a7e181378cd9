/* mlxrt chat: interactive multi-turn chat. The KV cache is kept between turns (a turn
 * processes only its own tokens); /reset forgets the conversation, /exit (or Ctrl-D) quits,
 * Ctrl-C stops the current answer. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_num.h"
#include "commands.h"
#include "gen_args.h"

static const char USAGE[] =
    "usage: mlxrt chat -m MODEL [--system TEXT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "                  [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS] [-c CTX]\n"
    "                  [--backend auto|cpu|cuda] [--think] [--show-thinking] [-v]\n"
    "                  [--numerics float32|mlx-cpu] [--chat-template FILE]\n"
    "                  [--spec lookup|draft] [--draft-model DIR] [--draft-max K] [--spec-ngram N]\n"
    "                  [--kv-k MODE]\n"
    "Type a message and press Enter. /reset starts over, /exit or Ctrl-D quits,\n"
    "Ctrl-C stops the current answer.\n" GEN_ARGS_N_HELP GEN_ARGS_TEMPLATE_HELP
    "-c CTX: tokens the conversation holds (0, the default: the model's maximum); an answer\n"
    "stopped by a full context says so on stderr (/reset starts over).\n" GEN_ARGS_SPEC_HELP GEN_ARGS_KVK_HELP
    "Exit status: 0, or 1 when a message could not be answered (each error is one line).\n";

int cmd_chat(int argc, char **argv) {
  gen_args a;
  int r = gen_args_parse(&a, argc, argv, "chat");
  if (r == 1) fputs(USAGE, stdout);
  if (r) return r == 1 ? 0 : 2;
  if (!a.chat.use_template) {
    cli_error("chat", "--no-chat-template makes no sense in a chat; use mlxrt run");
    return 2;
  }
  if (a.prompt || a.prompt_file) {
    cli_error("chat", "-p and -f are run's: chat reads its messages from standard input");
    return 2;
  }
  int failed;
  char *tpl = gen_args_read_template(&a, "chat", &failed);
  mlxrt_model *m = failed ? NULL : gen_args_load_model(&a, "chat");
  char what[64];
  snprintf(what, sizeof what, "-c %lld", (long long)a.chat.capacity);
  mlxrt_options opt = {a.backend, a.threads, a.verbose, a.numerics, a.kv_k};
  if (!m || gen_args_check_kv(m, "chat", what, a.chat.capacity) || gen_spec_load_draft(&a.spec, &opt, &a.chat.spec, "chat")) {
    mlxrt_model_free(m);
    free(tpl);
    return 1;
  }
  mlxrt_error err = {{0}};
  a.chat.interrupt = &gen_args_interrupted;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = gen_args_on_sigint; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
  sigaction(SIGINT, &sa, NULL);
  mlxrt_chat *c = mlxrt_chat_new(m, &a.chat, &err);
  if (!c) {
    fprintf(stderr, "mlxrt chat: %s\n", err.msg);
    mlxrt_model_free(a.chat.spec.draft_model);
    mlxrt_model_free(m);
    free(tpl);
    return 1;
  }
  int tty = isatty(0);
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  for (;;) {
    if (tty) {
      printf("> ");
      fflush(stdout);
    }
    gen_args_interrupted = 0;
    errno = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
      if (errno == EINTR || gen_args_interrupted) {
        clearerr(stdin);
        printf("\n");
        continue;
      }
      break; /* EOF */
    }
    const char *nul = memchr(line, 0, (size_t)n);
    if (nul) { /* the message goes on as a C string: it would silently end there */
      cli_error("chat", "the message has a NUL byte at offset %zu: a message must be text", (size_t)(nul - line));
      rc = 1;
      continue;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (n == 0) continue;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
    if (!strcmp(line, "/reset")) {
      mlxrt_chat_reset(c);
      fprintf(stderr, "[conversation reset]\n");
      continue;
    }
    if (a.n_predict == 0) {
      fprintf(stderr, "[-n 0: no answer]\n");
      continue;
    }
    mlxrt_gen_stats st;
    if (mlxrt_chat_turn(c, line, gen_args_print_text, NULL, &st, &err)) {
      gen_args_chat_error(&a, "chat", err.msg);
      rc = 1;
      continue;
    }
    printf("\n");
    fflush(stdout);
    char spec[160];
    gen_spec_stats(&a.chat.spec, &st, spec, sizeof spec);
    fprintf(stderr, "[prompt: %lld new of %lld tokens, %.1f t/s | answer: %lld tokens, %.1f t/s%s%s]\n",
            (long long)st.prompt_processed, (long long)st.prompt_tokens,
            st.prompt_seconds > 0 ? st.prompt_processed / st.prompt_seconds : 0.0, (long long)st.gen_tokens,
            st.gen_seconds > 0 ? st.gen_tokens / st.gen_seconds : 0.0, spec,
            st.stopped_by == 2 ? ", interrupted" : st.stopped_by == 3 ? ", context full" : "");
    if (st.stopped_by == 3) gen_args_context_full(&a, &st, "chat");
  }
  free(line);
  mlxrt_chat_free(c);
  mlxrt_model_free(a.chat.spec.draft_model);
  mlxrt_model_free(m);
  free(tpl);
  return rc;
}
