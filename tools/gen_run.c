/* The run-time half of the shared generation options: loading the model, the memory the
 * context needs, the context-full notice, Ctrl-C and streaming. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli_file.h"
#include "cli_num.h"
#include "gen_args.h"

int gen_args_model_dir(const char *cmd, const char *model, char *dir, size_t len) {
  mlxrt_error err = {{0}};
  if (mlxrt_resolve_model(model, dir, len, &err) == 0) return 0;
  cli_error(cmd, "%s", err.msg);
  return -1;
}

mlxrt_model *gen_args_load_model(const gen_args *a, const char *cmd) {
  mlxrt_error err = {{0}};
  char dir[4096];
  if (gen_args_model_dir(cmd, a->model, dir, sizeof dir)) return NULL;
  int tty = isatty(2);
  if (tty) fprintf(stderr, "loading %s ...", dir);
  mlxrt_options opt = {a->backend, a->threads, a->verbose, a->numerics, a->kv_k};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  if (tty) fprintf(stderr, "\r\033[K");
  if (!m) cli_error(cmd, "%s", err.msg);
  else if (a->verbose) fprintf(stderr, "mlxrt: %s on the %s backend\n", dir, mlxrt_model_backend_name(m));
  if (m && a->verbose && a->chat.use_template) {
    if (a->chat_template_file) fprintf(stderr, "mlxrt: chat template: %s (--chat-template)\n", a->chat_template_file);
    else if (!strcmp(mlxrt_chat_template_source(m), "model")) fprintf(stderr, "mlxrt: chat template: the model's own\n");
    else fprintf(stderr, "mlxrt: chat template: built-in (the model has none)\n");
  }
  return m;
}

int gen_spec_load_draft(const gen_spec_args *sa, const mlxrt_options *opt, mlxrt_spec_options *o, const char *cmd) {
  if (!sa->draft_model) return 0;
  mlxrt_error err = {{0}};
  char dir[4096];
  if (gen_args_model_dir(cmd, sa->draft_model, dir, sizeof dir)) return -1;
  if (!(o->draft_model = mlxrt_model_load(dir, opt, &err))) {
    cli_error(cmd, "--draft-model: %s", err.msg);
    return -1;
  }
  if (opt->verbose) fprintf(stderr, "mlxrt: draft model %s on the %s backend\n", dir, mlxrt_model_backend_name(o->draft_model));
  return 0;
}

void gen_spec_stats(const mlxrt_spec_options *o, const mlxrt_gen_stats *st, char *buf, size_t len) {
  buf[0] = 0;
  if (o->mode == MLXRT_SPEC_OFF) return;
  snprintf(buf, len, " | spec %s: %lld passes, %lld drafted, %lld accepted (%.1f %%)",
           o->mode == MLXRT_SPEC_LOOKUP ? "lookup" : "draft", (long long)st->spec_passes,
           (long long)st->spec_drafted, (long long)st->spec_accepted,
           st->spec_drafted > 0 ? 100.0 * (double)st->spec_accepted / (double)st->spec_drafted : 0.0);
}

char *gen_args_read_template(gen_args *a, const char *cmd, int *failed) {
  *failed = 0;
  if (!a->chat_template_file) return NULL;
  char *text = cli_read_text(cmd, a->chat_template_file, NULL);
  if (!text) *failed = 1;
  a->chat.chat_template = text;
  return text;
}

void gen_args_chat_error(const gen_args *a, const char *cmd, const char *msg) {
  /* the library names the override text "chat_template" (its option's name) */
  static const char NAME[] = "chat_template:";
  if (a->chat_template_file && !strncmp(msg, NAME, sizeof NAME - 1))
    cli_error(cmd, "%s:%s", a->chat_template_file, msg + sizeof NAME - 1);
  else cli_error(cmd, "%s", msg);
}

int gen_args_check_kv(mlxrt_model *m, const char *cmd, const char *what, int64_t tokens) {
  /* a device backend keeps the cache in its own memory, which it checks itself */
  if (tokens <= 0 || strcmp(mlxrt_model_backend_name(m), "cpu")) return 0;
  return cli_check_memory(cmd, what, "the KV cache", (double)mlxrt_model_kv_bytes_per_token(m, tokens - 1));
}

void gen_args_context_full(const gen_args *a, const mlxrt_gen_stats *st, const char *cmd) {
  /* the answer stops when prompt and answer fill the session exactly */
  long long ctx = (long long)(st->prompt_tokens + st->gen_tokens);
  if (a->chat.capacity > 0)
    cli_error(cmd, "the answer stopped: the context of %lld tokens (-c %lld) is full; raise it with -c N "
              "(0 = the model's maximum)", ctx, (long long)a->chat.capacity);
  else cli_error(cmd, "the answer stopped: the context is full at the model's maximum of %lld tokens", ctx);
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
