/* Option parsing of run, chat and perplexity (and serve's speculative options): no model, no
 * file, no allocation (the fuzz target runs it alone). */
#include "gen_args.h"

#include <string.h>

#include "cli_num.h"

static const char *const VALUED[] = {"-m", "--model", "-p", "--prompt", "-f", "--file", "--system",
                                     "--system-prompt", "--backend", "-n", "--max-tokens", "--n-predict",
                                     "-t", "--threads", "-c", "--ctx-size", "--temp", "--temperature",
                                     "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                     "--repetition-penalty", "--repeat-last-n", "-s", "--seed", "--numerics",
                                     "--chat-template", "--spec", "--draft-model", "--draft-max", "--spec-ngram", "--kv-k"};

int gen_args_takes_value(const char *flag) {
  for (size_t k = 0; k < sizeof VALUED / sizeof VALUED[0]; k++)
    if (!strcmp(flag, VALUED[k])) return 1;
  return 0;
}

int gen_args_parse(gen_args *a, int argc, char **argv, const char *cmd) {
  memset(a, 0, sizeof *a);
  a->chat.use_template = 1;
  a->n_predict = -1;
  mlxrt_gen_params_default(&a->chat.gen);
  mlxrt_gen_params *g = &a->chat.gen;
  for (int i = 1; i < argc; i++) {
    char name[CLI_FLAG_MAX];
    const char *f = argv[i], *v = cli_long_value(f, name, sizeof name); /* "--temp=0.7" */
    if (v) {
      f = name;
      if (!gen_args_takes_value(f)) {
        cli_error(cmd, "'%.64s': %s is not an option that takes a value (see --help)", argv[i], f);
        return 2;
      }
    }
    if (!strcmp(f, "-h") || !strcmp(f, "--help")) return 1;
    /* flags without a value */
    if (!strcmp(f, "--no-chat-template")) { a->chat.use_template = 0; continue; }
    if (!strcmp(f, "--think")) { a->chat.enable_thinking = 1; continue; }
    if (!strcmp(f, "--show-thinking")) { a->chat.show_thinking = 1; continue; }
    if (!strcmp(f, "-v") || !strcmp(f, "--verbose")) { a->verbose = 1; continue; }
    if (f[0] != '-') {
      cli_error(cmd, "unexpected argument '%.64s' (see --help)", f);
      return 2;
    }
    if (!gen_args_takes_value(f)) {
      cli_error(cmd, "unknown option '%.64s' (see --help)", f);
      return 2;
    }
    if (!v && i + 1 >= argc) {
      cli_error(cmd, "option '%s' needs a value (see --help)", f);
      return 2;
    }
    if (!v) v = argv[++i];
    int bad = 0;
    if (gen_spec_option(&a->spec, f, v, cmd, &bad)) {
      if (bad) return 2;
      continue;
    }
    if (!strcmp(f, "-m") || !strcmp(f, "--model")) a->model = v;
    else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) a->prompt = v;
    else if (!strcmp(f, "-f") || !strcmp(f, "--file")) a->prompt_file = v;
    else if (!strcmp(f, "--system") || !strcmp(f, "--system-prompt")) a->chat.system = v;
    else if (!strcmp(f, "--backend")) a->backend = v;
    else if (!strcmp(f, "--numerics")) a->numerics = v;
    else if (!strcmp(f, "--kv-k")) bad = gen_args_check_kv_k(a->kv_k = v, cmd) != 0;
    else if (!strcmp(f, "--chat-template")) a->chat_template_file = v;
    else if (!strcmp(f, "-n") || !strcmp(f, "--max-tokens") || !strcmp(f, "--n-predict"))
      bad = cli_int(cmd, f, v, -1, 1 << 30, &a->n_predict);
    else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) bad = cli_int(cmd, f, v, 0, 1024, &a->threads);
    else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) bad = cli_int64(cmd, f, v, 0, 1 << 30, &a->chat.capacity);
    else if (!strcmp(f, "--temp") || !strcmp(f, "--temperature")) bad = cli_float(cmd, f, v, 0, 100, &g->temperature);
    else if (!strcmp(f, "--top-k")) bad = cli_int(cmd, f, v, 0, 1 << 30, &g->top_k);
    else if (!strcmp(f, "--top-p")) bad = cli_float(cmd, f, v, 0, 1, &g->top_p);
    else if (!strcmp(f, "--min-p")) bad = cli_float(cmd, f, v, 0, 1, &g->min_p);
    else if (!strcmp(f, "--repeat-penalty") || !strcmp(f, "--repetition-penalty"))
      bad = cli_float(cmd, f, v, 0.01, 100, &g->repetition_penalty);
    else if (!strcmp(f, "--repeat-last-n")) bad = cli_int(cmd, f, v, 0, 1 << 20, &g->repetition_window);
    else if (!strcmp(f, "-s") || !strcmp(f, "--seed")) {
      int64_t seed;
      bad = cli_int64(cmd, f, v, 0, 0x7fffffffL, &seed);
      g->seed = (uint64_t)seed;
      g->seed_set = 1;
    }
    if (bad) return 2;
  }
  /* the library's spelling: <= 0 is "no limit"; -n 0 is the caller's to honour */
  g->max_tokens = a->n_predict > 0 ? a->n_predict : 0;
  if (!a->model) {
    cli_error(cmd, "-m/--model is required (a model directory or an org/name in the HF cache)");
    return 2;
  }
  if (a->chat_template_file && !a->chat.use_template) {
    cli_error(cmd, "--chat-template and --no-chat-template exclude each other");
    return 2;
  }
  if (a->prompt && a->prompt_file) {
    cli_error(cmd, "give the prompt with -p or -f, not both");
    return 2;
  }
  if (gen_spec_finish(&a->spec, &a->chat.spec, cmd)) return 2;
  return gen_args_apply_numerics(a->numerics, &a->backend, cmd);
}

int gen_spec_option(gen_spec_args *sa, const char *flag, const char *v, const char *cmd, int *bad) {
  if (!strcmp(flag, "--spec")) {
    if (strcmp(v, "lookup") && strcmp(v, "draft")) {
      cli_error(cmd, "--spec must be lookup or draft, not '%.64s'", v);
      *bad = 1;
    }
    sa->mode = v;
  } else if (!strcmp(flag, "--draft-model")) {
    sa->draft_model = v;
  } else if (!strcmp(flag, "--draft-max")) {
    *bad = cli_int(cmd, flag, v, 1, MLXRT_SPEC_MAX_DRAFT, &sa->draft_max) != 0;
  } else if (!strcmp(flag, "--spec-ngram")) {
    *bad = cli_int(cmd, flag, v, 1, MLXRT_SPEC_MAX_NGRAM, &sa->ngram) != 0;
  } else {
    return 0;
  }
  return 1;
}

int gen_spec_finish(const gen_spec_args *sa, mlxrt_spec_options *o, const char *cmd) {
  memset(o, 0, sizeof *o);
  const char *mode = sa->mode ? sa->mode : sa->draft_model ? "draft" : NULL;
  if (!mode) {
    if (sa->draft_max || sa->ngram) {
      cli_error(cmd, "%s needs speculative decoding: add --spec lookup or --draft-model DIR",
                sa->draft_max ? "--draft-max" : "--spec-ngram");
      return 2;
    }
    return 0;
  }
  if (!strcmp(mode, "draft") && !sa->draft_model) {
    cli_error(cmd, "--spec draft needs --draft-model DIR (a smaller model with the same tokenizer)");
    return 2;
  }
  if (!strcmp(mode, "lookup") && sa->draft_model) {
    cli_error(cmd, "--draft-model is for --spec draft; --spec lookup drafts from the context");
    return 2;
  }
  if (!strcmp(mode, "draft") && sa->ngram) {
    cli_error(cmd, "--spec-ngram is for --spec lookup, not a draft model");
    return 2;
  }
  o->mode = !strcmp(mode, "lookup") ? MLXRT_SPEC_LOOKUP : MLXRT_SPEC_DRAFT;
  o->draft_max = sa->draft_max;
  o->ngram_max = sa->ngram;
  return 0;
}

int gen_args_check_kv_k(const char *value, const char *cmd) {
  if (value && strcmp(value, "auto") && strcmp(value, "bf16") && strcmp(value, "planar3") && strcmp(value, "planar4")) {
    cli_error(cmd, "--kv-k must be auto, bf16, planar3 or planar4, not '%.64s'", value);
    return 2;
  }
  return 0;
}

int gen_args_apply_numerics(const char *value, const char **backend, const char *cmd) {
  if (!value) return 0;
  if (strcmp(value, "float32") && strcmp(value, "mlx-cpu")) {
    cli_error(cmd, "--numerics must be float32 or mlx-cpu, not '%.64s'", value);
    return 2;
  }
  if (!strcmp(value, "mlx-cpu")) {
    if (!*backend || !strcmp(*backend, "auto")) *backend = "cpu";
    else if (strcmp(*backend, "cpu")) {
      cli_error(cmd, "--numerics mlx-cpu runs on the CPU backend, not '%.64s'", *backend);
      return 2;
    }
  }
  return 0;
}
